"""Gomoku 9x9, freestyle (five or more in a row wins). Gumbel search: strong with few
simulations and free of PUCT's chain pathology on flat priors over 81 moves."""

import ml_collections

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "gomoku"
    c.env.kwargs = ml_collections.ConfigDict({"size": 9, "rule": "freestyle"})
    c.search.policy = "gumbel"
    if default.on_cpu():  # CPU-sized variant
        default.size(c, channels=32, num_blocks=3, num_simulations=16, games=64, plies=16,
                     updates=16, batch=256, iterations=200, capacity=50_000)
    else:
        default.size(c, **default.ACCELERATOR)
    c.selfplay.temperature_plies = 6
    return c
