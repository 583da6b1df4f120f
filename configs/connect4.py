"""Connect4. `python train.py` (no --config) uses this one.

CPU-sized by default when no accelerator is present (about 15 minutes on 2 cores); on a
GPU/TPU the network, batch and simulations grow.
"""

from configs import default


def get_config():
    c = default.get_config()
    c.env.id = "connect4"
    if default.on_cpu():  # CPU-sized variant
        default.size(c, channels=32, num_blocks=3, num_simulations=16, games=128, plies=16,
                     updates=16, batch=256, iterations=1100, capacity=50_000)
        # The winner of the equal-wall-clock A/B runs (README, Benchmarks, "Sample
        # efficiency"): 1e-2 instead of 1e-3 took the mistakes from 17% to 9% in 10 minutes;
        # the root-value targets and the playout cap added nothing measurable on top. A
        # second round (stop 22, two seeds each): 2e-2 beat 1e-2 with both seeds (8.9 and
        # 8.6% against 9.3 and 9.7%; network alone 19 against 22%), 5e-2 was worse.
        # 1100 iterations: 0.77 s each on 2 idle cores, so ~15 minutes with evaluation
        # (on slower days this machine took 1.1-1.4 s: the run then needs ~25 minutes).
        # A third round (stop 23): 8 or 32 simulations, 4 or 20 sampled opening plies
        # did not beat this config.
        c.train.learning_rate = 2e-2
    else:
        default.size(c, **dict(default.ACCELERATOR, iterations=400))
    c.selfplay.temperature_plies = 10
    c.eval.opponents = "random,onestep,mcts-rollout:200,checkpoint:latest-20"
    if default.on_cpu():  # evaluation within eval.max_share (10%) of the wall clock
        c.eval.opponents = "onestep,mcts-rollout:200,checkpoint:latest-50"
        c.eval.every, c.eval.num_games = 50, 32
    return c
