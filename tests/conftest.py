"""Shared test helpers (fixtures only; keep this file small)."""

from __future__ import annotations

import functools
import os
import tempfile
from collections import Counter

# XLA without most optimisations in the whole suite: compiles take seconds instead of tens of
# seconds, and the train.py, bench and brain subprocesses the tests start inherit it (set
# before JAX is imported). The `optimized` fixture turns them back on for a module.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from az_jax import parallel_setup  # noqa: E402

# The tests and the train.py subprocesses they start share compiled programs through JAX's
# persistent cache (az_jax's own default would be ~/.cache/az_jax/jax): a temporary
# directory, kept between runs. In the test processes too: many tests train the same tiny
# config, whose programs then compile once for the whole suite (both xdist workers), not
# once per test. Programs under half a second (single eager ops) are not worth a file.
os.environ.setdefault("AZ_JAX_CACHE", os.path.join(tempfile.gettempdir(),
                                                   f"az_jax-tests-cache-{os.getuid()}"))
parallel_setup.use_compilation_cache(0.5)


@pytest.fixture(scope="module")
def optimized():
    """XLA with its optimisations, as users run it, for one test module; use with
    `pytestmark = pytest.mark.usefixtures("optimized")`."""
    old = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", old)


@functools.cache
def _batched(env):
    """jit(vmap(init)), jit(vmap(step)) for one env object, compiled once per session."""
    return jax.jit(jax.vmap(env.init)), jax.jit(jax.vmap(env.step))


def _differential(env, make_ref, num_games: int, seed: int = 0) -> Counter:
    """Plays `num_games` random games on our env (vmapped) and on a reference (one Python
    object per game, stepped in lockstep), asserting at every ply that both agree.

    `make_ref()` returns an object with, all in our action numbering:
      legal() -> sorted list of the legal actions (while the game runs),
      to_move() -> 0 or 1, play(action), outcome() -> None while running, else the final
      returns (r0, r1); optionally board() -> int array like our board (-1 empty, 0, 1).

    Checked at every ply of every running game: the same legal actions, the same player to
    move, the same terminal flag, and rewards equal to the reference's returns at the end
    (zero before); at the end of each game, the same board where the reference exposes one.

    Returns:
      Counter of outcomes ("p0", "p1", "draw") and "plies".
    """
    init, step = _batched(env)
    rng = np.random.default_rng(seed)
    state = init(jax.random.split(jax.random.PRNGKey(seed), num_games))
    refs = [make_ref() for _ in range(num_games)]
    running = np.ones(num_games, bool)
    stats = Counter()
    while running.any():
        mask = np.asarray(state.legal_action_mask)
        player = np.asarray(state.current_player)
        actions = np.zeros(num_games, np.int32)
        picks = rng.integers(0, 1 << 30, num_games)
        for g in np.flatnonzero(running):
            ours, ref = np.flatnonzero(mask[g]).tolist(), refs[g]
            if ours != ref.legal():  # lists: cheaper than np.testing at this volume
                raise AssertionError(f"game {g}: legal actions {ours} != {ref.legal()}")
            assert player[g] == ref.to_move(), f"game {g}: player to move"
            actions[g] = ours[picks[g] % len(ours)]
            ref.play(int(actions[g]))
        state = step(state, actions)
        terminated = np.asarray(state.terminated)
        rewards = np.asarray(state.rewards).tolist()
        boards = np.asarray(state.game.board).reshape(num_games, -1)
        for g in np.flatnonzero(running):
            out, ref = refs[g].outcome(), refs[g]
            if terminated[g] != (out is not None) or rewards[g] != list(out or (0.0, 0.0)):
                raise AssertionError(
                    f"game {g}: ours terminated={terminated[g]} rewards={rewards[g]}, "
                    f"reference outcome={out}"
                )
            if out is not None:
                stats["p0" if out[0] > 0 else "p1" if out[1] > 0 else "draw"] += 1
                # The boards at the end (before that, equal legal sets at every ply already
                # mean the same points are taken).
                if hasattr(ref, "board") and not np.array_equal(boards[g], ref.board()):
                    raise AssertionError(f"game {g}: final board {boards[g]} != {ref.board()}")
        stats["plies"] += int(running.sum())
        running &= ~terminated
    return stats


def _check_trajectory(env, actions, legal_of) -> None:
    """Property checks for one game played from `env.init` through `actions` (any ints).

    Plays under `jax.jit` (one compile per env and length) and checks: zero-sum rewards in
    {-1, 0, 1}; a reward only at the ply that ends the game; an illegal or out-of-range
    action ends the game with the mover at -1; finished games are absorbing; players
    alternate; `step_count` counts plies; the legal mask equals `legal_of(board)` while the
    game runs and is all True once it is over.

    Args:
      env: the environment.
      actions: int sequence (the length fixes the compiled scan).
      legal_of: numpy function from the flat board (-1 empty) to the legal mask bool[A].
    """
    init, states = _scan(env, len(actions))(np.asarray(actions, np.int32))
    prev = jax.tree.map(np.asarray, init)
    states = jax.tree.map(np.asarray, states)
    for t, action in enumerate(actions):
        now = jax.tree.map(lambda x, t=t: x[t], states)
        rewards = now.rewards
        assert rewards.sum() == 0 and np.isin(rewards, [-1.0, 0.0, 1.0]).all(), rewards
        board = now.game.board.reshape(-1)
        if prev.terminated or prev.truncated:  # absorbing
            assert not rewards.any()
            same = now.replace(rewards=prev.rewards)
            for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(prev), strict=True):
                np.testing.assert_array_equal(a, b)
            continue
        done = now.terminated | now.truncated
        assert now.step_count == prev.step_count + 1
        legal = 0 <= action < env.num_actions and prev.legal_action_mask[action]
        if not legal:
            assert now.terminated and rewards[prev.current_player] == -1.0
        if rewards.any():
            assert done, "a reward only when the game ends"
        if done:
            assert now.legal_action_mask.all()
        else:
            assert now.current_player == 1 - prev.current_player, "players alternate"
            np.testing.assert_array_equal(now.legal_action_mask, legal_of(board))
        prev = now


@functools.cache
def _scan(env, length: int):
    """jit: actions int32[length] -> (initial state, states after each ply)."""

    @jax.jit
    def run(actions):
        state = env.init(jax.random.PRNGKey(0))
        return state, jax.lax.scan(lambda s, a: (env.step(s, a),) * 2, state, actions)[1]

    del length
    return run


@pytest.fixture(scope="session")
def check_trajectory():
    """`check_trajectory(env, actions, legal_of)`; see `_check_trajectory`."""
    return _check_trajectory


@pytest.fixture(scope="session")
def differential():
    """`differential(env, make_ref, num_games, seed=0) -> Counter`; see `_differential`."""
    return _differential


# Hypothesis budgets: the default profile keeps CI bounded; `--hypothesis-profile=long`
# runs the fuzz tests much longer (e.g. overnight or before a release).
from hypothesis import settings  # noqa: E402

settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile("long", max_examples=2_000, deadline=None)
settings.load_profile("default")
