"""A game's training config shrunk to a run of seconds on 2 CPU cores (tests only)."""


def tiny_training(c, *, plies: int, iterations: int, eval_every: int, eval_games: int):
    """Shrinks config `c` in place and returns it: a 4-channel one-block net, 2 simulations
    (self-play and evaluation), 8 games, a 256-position replay used from 8, one update of 8
    per iteration, no replay in checkpoints, no progress bar."""
    c.network.channels, c.network.num_blocks = 4, 1
    c.search.num_simulations = 2
    c.selfplay.batch_size, c.selfplay.num_plies = 8, plies
    c.replay.capacity, c.replay.min_size = 256, 8
    c.train.num_iterations, c.train.updates_per_iteration, c.train.batch_size = iterations, 1, 8
    c.train.warmup_steps = 1
    c.eval.every, c.eval.num_games, c.eval.num_simulations = eval_every, eval_games, 2
    c.checkpoint.save_replay = False
    c.log.progress = False
    return c
