"""Gomoku 9x9, freestyle (five or more in a row wins). Gumbel search: strong with few
simulations and free of PUCT's chain pathology on flat priors over 81 moves."""

import jax
import ml_collections

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "gomoku"
    c.env.kwargs = ml_collections.ConfigDict({"size": 9, "rule": "freestyle"})
    c.search.policy = "gumbel"
    if jax.default_backend() == "cpu":  # CPU-sized variant
        c.network.channels, c.network.num_blocks = 32, 3
        c.search.num_simulations = 16
        c.selfplay.batch_size, c.selfplay.num_plies = 64, 16
        c.train.updates_per_iteration, c.train.batch_size = 16, 256
        c.train.num_iterations = 200
        c.replay.capacity = 50_000
    else:
        c.network.channels, c.network.num_blocks = 64, 6
        c.search.num_simulations = 64
        c.selfplay.batch_size, c.selfplay.num_plies = 1024, 32
        c.train.updates_per_iteration, c.train.batch_size = 64, 1024
        c.train.num_iterations = 300
        c.replay.capacity = 1_000_000
        c.network.dtype = "bfloat16"
    c.selfplay.temperature_plies = 6
    return c
