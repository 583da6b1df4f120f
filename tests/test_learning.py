"""End to end: train tic-tac-toe from scratch on the CPU, then play a perfect player.

This is the proof that the whole loop (self-play, targets, replay, learner, checkpoint,
restore, search) works. Do not weaken it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from az_jax import checkpoint, search, trainer
from configs import tictactoe
from tests import minimax

# XLA's optimisations on, as users compile (the rest of the suite turns most of them off).
pytestmark = pytest.mark.usefixtures("optimized")

def play_vs_minimax(restored, num_games: int = 100, sims: int = 32, seed: int = 0):
    """Plays the restored agent (search, no noise) against the perfect player.

    Half the games the agent is X. The minimax side picks uniformly among its best moves.
    Returns (agent wins, draws, agent losses).
    """
    env = restored.env
    fn = search.make_search(env, restored.net, restored.config.search)
    run = jax.jit(lambda s, k: fn(restored.variables, s, k, evaluation=True,
                                  num_simulations=sims))
    step = jax.jit(jax.vmap(env.step))
    rng = np.random.default_rng(seed)
    state = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(seed), num_games))
    agent_player = np.arange(num_games) % 2  # agent is player 0 (X) in even games
    boards = [[0] * 9 for _ in range(num_games)]
    result = np.zeros(num_games)  # from the agent's point of view
    key = jax.random.PRNGKey(seed + 1)
    for _ in range(9):
        key, sub = jax.random.split(key)
        agent_moves = np.asarray(run(state, sub).action)
        player = np.asarray(state.current_player)
        done = np.asarray(state.done)
        actions = np.zeros(num_games, np.int32)
        for g in range(num_games):
            if done[g]:
                continue
            if player[g] == agent_player[g]:
                actions[g] = agent_moves[g]
            else:
                actions[g] = rng.choice(minimax.best_moves(tuple(boards[g])))
            boards[g][actions[g]] = 1 + player[g]
        state = step(state, jnp.asarray(actions))
        rewards = np.asarray(state.rewards)
        result += rewards[np.arange(num_games), agent_player] * ~done
    return int((result > 0).sum()), int((result == 0).sum()), int((result < 0).sum())


@pytest.mark.slow
def test_tictactoe_learns_to_never_lose(tmp_path):
    config = tictactoe.get_config()
    config.eval.every = 0
    config.log.progress = False
    trainer.train_and_evaluate(config, str(tmp_path))
    restored = checkpoint.restore(tmp_path)
    assert restored.iteration == config.train.num_iterations
    wins, draws, losses = play_vs_minimax(restored)
    assert losses == 0, f"lost {losses}/100 to perfect play (W/D/L {wins}/{draws}/{losses})"
    assert wins == 0  # a perfect player cannot be beaten: checks the referee too
