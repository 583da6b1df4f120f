"""Tic-tac-toe: the quick learnability check (learns perfect play in minutes on a CPU)."""

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "tictactoe"
    c.network.channels, c.network.num_blocks = 32, 2
    c.search.num_simulations = 16
    c.search.max_num_considered_actions = 9
    c.selfplay.batch_size, c.selfplay.num_plies = 128, 9
    c.selfplay.temperature_plies = 4
    # The first 2 plies of every self-play game uniformly random: without them self-play
    # settles on a few drawn lines, and on an AVX-512 CPU (stop 52; XLA's float results
    # differ by machine) seeds 0 and 1 lost 13 and 6 of 100 games to a perfect player
    # (forks); with them seeds 0-7 lost none. As Connect4's 4 (docs/learning.md).
    c.selfplay.random_plies = 2
    c.replay.capacity, c.replay.min_size = 20_000, 500
    c.train.num_iterations = 40
    c.train.updates_per_iteration, c.train.batch_size = 16, 128
    c.train.learning_rate = 2e-3
    c.eval.every, c.eval.num_games = 20, 64
    c.checkpoint.every = 20
    return c
