"""Evaluation: who plays, how a match is played, and what the results mean.

Layers, lowest first (each module imports only those above it):

    players.py     act functions (random, onestep, greedy, mcts:N, mcts-rollout:N), opponent
                   names, checkpoint resolution, `Player` and `PlayerFactory`
    match.py       a match between two players as one jitted program; W-D-L, Wilson
                   interval, gating rule (`MatchRunner`, `MatchResult`, `passes_gate`)
    external.py    engines outside JAX (Bagh-Chal minimax, gomokubench, Gomocup brains),
                   played in a host-side loop with the same colours and openings
    gauntlet.py    one player against a list of opponents of both kinds (`Gauntlet`)
    elo.py         the Bradley-Terry ladder stored in <workdir>/elo.json
    evaluator.py   the trainer's periodic evaluation (gating, ladder, metrics)
    connect4_positions.py   Connect4 positions (Pons's file format) and the solver
                   that labels them
    solver_bench.py, solver_sets.py   mistake rates on solved positions; the stratified
                   sets
    tactics.py     the Gomoku tactics suite

Front ends: `python -m az_jax.evaluate` (matches, ladder, solver sets, tactics), and the
CLIs `python -m az_jax.eval.solver_bench` and `python -m az_jax.eval.tactics`.
"""
