"""Fuzzing: every env under random (often illegal) action sequences, and every host-side
move parser under random text. Budget: the hypothesis profile (`--hypothesis-profile=long`
for a long run)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import envs

ENVS = {
    "tictactoe": envs.make("tictactoe"),
    "connect4": envs.make("connect4"),
    "gomoku": envs.make("gomoku", size=7, rule="standard"),
    "baghchal": envs.make("baghchal", max_steps=60),
}
BATCH, PLIES = 4, 48


@functools.cache
def _rollout(name):
    """jit(vmap(scan)): actions int32[B, T] -> per-ply states (time-major)."""
    env = ENVS[name]

    def one(actions, key):
        state = env.init(key)
        return jax.lax.scan(lambda s, a: (env.step(s, a),) * 2, state, actions)[1]

    return jax.jit(jax.vmap(one))


def _actions(name):
    n = ENVS[name].num_actions
    # Mostly in range (so games progress), sometimes out of range or negative.
    return st.lists(st.lists(st.integers(-2, n + 2), min_size=PLIES, max_size=PLIES),
                    min_size=BATCH, max_size=BATCH)


@pytest.mark.parametrize("name", sorted(ENVS))
def test_env_invariants_under_random_actions(name):
    @given(_actions(name), st.integers(0, 2**31 - 1))
    def check(actions, seed):
        keys = jax.random.split(jax.random.PRNGKey(seed), BATCH)
        states = jax.tree.map(np.asarray, _rollout(name)(jnp.asarray(actions, jnp.int32), keys))
        r = states.rewards  # [B, T, 2]
        assert np.isfinite(r).all() and np.isfinite(states.observation).all()
        np.testing.assert_allclose(r.sum(-1), 0.0)
        done = states.terminated | states.truncated  # [B, T]
        # Absorbing: once done, always done, and no more rewards.
        after = np.cumsum(done, axis=1) > 1
        assert done[after].all()
        assert (r[after] == 0).all()
        # A running game always has a legal move; a finished one has an all-True mask.
        running = ~done
        assert states.legal_action_mask[running].any(-1).all()
        assert states.legal_action_mask[done].all()

    check()


@pytest.mark.parametrize("name", sorted(ENVS))
@given(text=st.text(max_size=12))
def test_parsers_never_crash(name, text):
    env = ENVS[name]
    try:
        action = env.parse_action(text)
    except ValueError as e:
        assert str(e), "an error must say what is wrong"
    else:
        assert 0 <= action < env.num_actions
        assert isinstance(env.action_to_str(action), str)


_INIT = {name: jax.jit(env.init)(jax.random.PRNGKey(0)) for name, env in ENVS.items()}


@pytest.mark.parametrize("name", sorted(ENVS))
@given(text=st.text(alphabet="ABCDEFGHIJ0123456789-, ", max_size=6))
def test_parsers_with_state_accept_only_legal_moves(name, text):
    env, state = ENVS[name], _INIT[name]
    try:
        action = env.parse_action(text, state)
    except ValueError as e:
        assert str(e)
    else:
        assert bool(np.asarray(state.legal_action_mask)[action])
