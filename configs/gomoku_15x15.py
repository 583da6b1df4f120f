"""Gomoku 15x15, freestyle. The Gomocup board. Gumbel search (see gomoku_9x9.py)."""

import ml_collections

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "gomoku"
    c.env.kwargs = ml_collections.ConfigDict({"size": 15, "rule": "freestyle"})
    c.search.policy = "gumbel"
    if default.on_cpu():  # CPU-sized variant
        default.size(c, channels=32, num_blocks=3, num_simulations=16, games=32, plies=16,
                     updates=16, batch=128, iterations=200, capacity=50_000)
    else:
        default.size(c, **dict(default.ACCELERATOR, channels=96, num_blocks=8))
    c.selfplay.temperature_plies = 8
    return c
