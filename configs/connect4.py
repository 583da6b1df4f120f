"""Connect4. `python train.py` (no --config) uses this one.

CPU-sized by default when no accelerator is present (real learning within ~10 minutes on
2 cores); on a GPU/TPU the network, batch and simulations grow.
"""

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "connect4"
    if default.on_cpu():  # CPU-sized variant
        default.size(c, channels=32, num_blocks=3, num_simulations=16, games=128, plies=16,
                     updates=16, batch=256, iterations=150, capacity=50_000)
    else:
        default.size(c, **dict(default.ACCELERATOR, iterations=400))
    c.selfplay.temperature_plies = 10
    c.eval.opponents = "random,onestep,mcts-rollout:200,checkpoint:latest-20"
    if default.on_cpu():  # evaluation within ~10% of the wall clock (README, Training)
        c.eval.every, c.eval.num_games = 30, 32
    return c
