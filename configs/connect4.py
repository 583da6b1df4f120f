"""Connect4. `python train.py` (no --config) uses this one.

CPU-sized by default when no accelerator is present (real learning within ~10 minutes on
2 cores); on a GPU/TPU the network, batch and simulations grow.
"""

import jax

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "connect4"
    if jax.default_backend() == "cpu":
        c.network.channels, c.network.num_blocks = 32, 3
        c.search.num_simulations = 16
        c.selfplay.batch_size, c.selfplay.num_plies = 128, 16
        c.train.updates_per_iteration, c.train.batch_size = 16, 256
        c.train.num_iterations = 150
        c.replay.capacity = 50_000
    else:
        c.network.channels, c.network.num_blocks = 64, 6
        c.search.num_simulations = 64
        c.selfplay.batch_size, c.selfplay.num_plies = 1024, 32
        c.train.updates_per_iteration, c.train.batch_size = 64, 1024
        c.train.num_iterations = 400
        c.replay.capacity = 1_000_000
        c.network.dtype = "bfloat16"
    c.selfplay.temperature_plies = 10
    c.eval.opponents = "random,onestep,mcts-rollout:200,checkpoint:latest-20"
    return c
