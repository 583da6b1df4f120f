"""Connect4. `python train.py` (no --config) uses this one.

CPU-sized by default when no accelerator is present (about 15 minutes on 2 cores); on a
GPU/TPU the network, batch and simulations grow.
"""

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "connect4"
    # Threat and playable-cell planes in the observation (envs/connect4.py): a quarter to a
    # third fewer mistakes at equal wall clock, both seeds (docs/learning.md, "A fifth
    # round"); about 5% slower an iteration.
    c.env.kwargs.threats = True
    # The odd-row plane (envs/connect4.py; Allis's rows for zugzwang threats): on the CPU a
    # small gain at equal wall clock with 64 simulations (-0.3 points over five paired runs,
    # beginning-hard -2.1, lower in all five), at no cost an iteration; level head to head
    # (docs/learning.md, "A tenth round"). Off on accelerators: not measured there, and
    # the shipped `connect4` was trained without it.
    c.env.kwargs.parity = default.on_cpu()
    # The threat-making planes (envs/connect4.py: cells where a stone makes a new threat):
    # on the CPU fewer mistakes at equal iterations (three seeds: 3.63% against 4.04 with
    # 64 simulations, the network alone 8.3 against 9.7) and stronger head to head (0.56,
    # 0.62 and 0.54 in 512 games a seed), for ~2% more self-play time (docs/learning.md,
    # "A thirteenth round"). Off on accelerators: not measured there.
    c.env.kwargs.twos = default.on_cpu()
    # Two more plane pairs, off (envs/connect4.py): the two-making cells and the lowest
    # threat of each column. Together on the CPU config: level with 64 simulations (3.81%
    # against 3.76, seed 0), the network alone worse, level head to head (0.502 in 1024
    # games) (docs/learning.md, "A fourteenth round").
    c.env.kwargs.ones = False
    c.env.kwargs.lowest = False
    if default.on_cpu():  # CPU-sized variant
        # 3x32: 4x32 (47% slower an iteration) and 4x24 were level or worse at equal wall
        # clock (docs/learning.md, "A seventh round" and "A twenty-second round").
        default.size(c, channels=32, num_blocks=3, num_simulations=16, games=128, plies=16,
                     updates=16, batch=256, iterations=1100, capacity=50_000)
        # Learning rate: the winner of three equal-wall-clock rounds (docs/learning.md,
        # "Sample efficiency"); nothing else tried there (root-value targets, playout cap,
        # width, 8/32 simulations, 4/20 sampled opening plies) beat this config; the fourth
        # round's winner is the value head below, the fifth's the threat planes above; in
        # the sixth, 4 considered moves in self-play did worse than all 7.
        # 1100 iterations: ~15 minutes with evaluation at 0.77 s each on 2 idle cores;
        # on slower days this machine took 1.1-1.4 s (then ~25 minutes), and a slower
        # 2-core machine 3.5-4 s. train.minutes fits the run (and its schedule) to 15
        # minutes where 1100 iterations take longer (docs/learning.md, "Stop 43").
        c.train.learning_rate = 2e-2
        c.train.minutes = 15.0
        # A checkpoint takes ~0.6 s here (orbax, with the replay): every 10 iterations
        # rather than 5 is ~2-8% more iterations in the minutes; a kill loses 10 at most.
        c.checkpoint.every = 10
    else:
        default.size(c, **dict(default.ACCELERATOR, iterations=400))
        # 1e-2, as the CPU's learning-rate rounds point: the shipped `connect4` (stop 32,
        # 140 iterations on an H200) reached 3.9% mistakes by iteration 40, where stop 22's
        # 2e-3 run (2048 games x 16 plies, float32, an older config) had 6.3% at 41. One
        # run each, not an A/B (docs/models.md, "Shipped from stop 32 to stop 40").
        c.train.learning_rate = 1e-2
    # Win/draw/loss value logits: fewer mistakes than the tanh head at equal wall clock,
    # with both seeds (docs/learning.md, "A fourth round").
    c.network.value_head = "wdl"
    c.selfplay.temperature_plies = 10
    # The first 4 plies of every self-play game uniformly random: without them self-play
    # collapses onto a few lines (all draws, or all first-player wins, for hundreds of
    # games), and the network forgets the rest; a quarter fewer mistakes at equal wall
    # clock, both seeds (docs/learning.md, "A seventh round").
    c.selfplay.random_plies = 4
    c.eval.opponents = "random,onestep,mcts-rollout:200,checkpoint:latest-20"
    if default.on_cpu():  # evaluation within eval.max_share (10%) of the wall clock
        c.eval.opponents = "onestep,mcts-rollout:200,checkpoint:latest-50"
        c.eval.every, c.eval.num_games = 50, 32
    return c
