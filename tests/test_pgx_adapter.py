"""The pgx adapter: protocol conformance, and the same games as ours move by move."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.testing import api_test

pytest.importorskip("pgx")


def test_pgx_tictactoe_conforms():
    env = envs.make("pgx:tic_tac_toe")
    assert env.deterministic  # api_test checks the claim: pgx's random first mover is mapped
    api_test(env, num_games=4, max_plies=12)
    assert env.move_help == "an action index 0..8 (pgx's numbering)"


def test_pgx_games_with_dice_are_not_deterministic():
    assert not envs.make("pgx:backgammon").deterministic


def test_pgx_go_ends_at_its_own_move_limit():
    assert envs.make("pgx:go_9x9").max_game_length == 2 * 9 * 9  # pgx: twice the points


def test_pgx_matches_our_tictactoe_and_connect4():
    """Random games played in both: the same legal moves, rewards and ends every ply."""
    for ours_id, pgx_id, n_plies in (("tictactoe", "tic_tac_toe", 10), ("connect4",
                                                                          "connect_four", 43)):
        ours, theirs = envs.make(ours_id), envs.make(f"pgx:{pgx_id}")
        B = 64
        keys = jax.random.split(jax.random.PRNGKey(0), B)
        a, b = jax.vmap(ours.init)(keys), jax.vmap(theirs.init)(keys)
        step_a, step_b = jax.jit(jax.vmap(ours.step)), jax.jit(jax.vmap(theirs.step))
        key = jax.random.PRNGKey(1)
        for _ in range(n_plies):
            np.testing.assert_array_equal(a.legal_action_mask, b.legal_action_mask)
            np.testing.assert_array_equal(a.current_player, b.current_player)
            key, sub = jax.random.split(key)
            act = jax.random.categorical(sub, jnp.where(a.legal_action_mask, 0.0, -1e9))
            a, b = step_a(a, act), step_b(b, act)
            np.testing.assert_array_equal(a.terminated, b.terminated)
            np.testing.assert_array_equal(a.rewards, b.rewards)
            # The mover's view is pgx's own observation (of its current player), and of its
            # dtype: pgx's bool planes stay bool.
            pgx_state = b.game[0]
            np.testing.assert_array_equal(b.observation, pgx_state.observation)
            assert b.observation.dtype == pgx_state.observation.dtype == jnp.bool_
        assert bool(a.terminated.all())
        # A full board ends the game: 9 and 6 x 7 plies at most.
        assert theirs.max_game_length == {"tic_tac_toe": 9, "connect_four": 42}[pgx_id]


def test_unknown_pgx_id_lists_the_valid_ones():
    with pytest.raises(ValueError, match="available"):
        envs.make("pgx:chesss")
    with pytest.raises(ValueError, match="pgx:2048 has 1 players; only two-player games"):
        envs.make("pgx:2048")  # a one-player game


def test_pgx_actions_are_read_in_pgx_s_range_only():
    env = envs.make("pgx:tic_tac_toe")
    assert [env.parse_action(t) for t in ("0", "8")] == [0, 8]
    for text in ("9", "-1", "x"):
        with pytest.raises(ValueError, match="expected an action index 0..8"):
            env.parse_action(text)
