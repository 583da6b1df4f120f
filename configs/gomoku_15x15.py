"""Gomoku 15x15, freestyle. The Gomocup board. Gumbel search (see gomoku_9x9.py)."""

import jax
import ml_collections

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "gomoku"
    c.env.kwargs = ml_collections.ConfigDict({"size": 15, "rule": "freestyle"})
    c.search.policy = "gumbel"
    if jax.default_backend() == "cpu":  # CPU-sized variant
        c.network.channels, c.network.num_blocks = 32, 3
        c.search.num_simulations = 16
        c.selfplay.batch_size, c.selfplay.num_plies = 32, 16
        c.train.updates_per_iteration, c.train.batch_size = 16, 128
        c.train.num_iterations = 200
        c.replay.capacity = 50_000
    else:
        c.network.channels, c.network.num_blocks = 96, 8
        c.search.num_simulations = 64
        c.selfplay.batch_size, c.selfplay.num_plies = 1024, 32
        c.train.updates_per_iteration, c.train.batch_size = 64, 1024
        c.train.num_iterations = 300
        c.replay.capacity = 1_000_000
        c.network.dtype = "bfloat16"
    c.selfplay.temperature_plies = 8
    return c
