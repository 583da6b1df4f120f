"""Bagh-Chal (tigers and goats), 425 actions, draws by threefold repetition or max_steps."""

import ml_collections

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "baghchal"
    c.env.kwargs = ml_collections.ConfigDict({"max_steps": 200})
    c.search.policy = "gumbel"
    if default.on_cpu():  # CPU-sized variant
        default.size(c, channels=32, num_blocks=3, num_simulations=16, games=64, plies=32,
                     updates=16, batch=256, iterations=200, capacity=50_000)
    else:
        default.size(c, **dict(default.ACCELERATOR, plies=64))
    c.selfplay.temperature_plies = 10
    return c
