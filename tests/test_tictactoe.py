"""Tic-tac-toe: protocol, hand-worked positions, parser, properties, and OpenSpiel agreement."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs
from envs.testing import api_test
from tests.openspiel_ref import SpielRef

ENV = envs.make("tictactoe")
INIT = jax.jit(ENV.init)
STEP = jax.jit(ENV.step)


def play(moves, state=None):
    """Plays actions (ints) or notation (str) from the start, one jitted step each."""
    state = INIT(jax.random.PRNGKey(0)) if state is None else state
    for m in moves:
        state = STEP(state, ENV.parse_action(m) if isinstance(m, str) else m)
    return state


def test_api():
    api_test(ENV, num_games=8, max_plies=12)


class _CoinFlipDraw(type(ENV)):
    """Tic-tac-toe where a coin may end the game as a draw after each move: chance."""

    def _step(self, state, action, key):
        moved = super()._step(state, action, key)
        coin = jax.random.bernoulli(key, 0.2)
        return moved.replace(truncated=coin & ~moved.terminated)


def test_api_catches_a_false_deterministic_claim():
    env = _CoinFlipDraw()
    env.deterministic = False
    api_test(env, num_games=8, max_plies=12)  # a game with chance passes as such
    env.deterministic = True
    with pytest.raises(AssertionError, match="depends on the keys"):
        api_test(env, num_games=8, max_plies=12)


@pytest.mark.parametrize(
    "x_moves, o_moves",
    [
        ([0, 1, 2], [3, 4]),  # top row
        ([6, 7, 8], [0, 1]),  # bottom row
        ([0, 3, 6], [1, 2]),  # left column
        ([2, 5, 8], [0, 1]),  # right column
        ([0, 4, 8], [1, 2]),  # diagonal
        ([2, 4, 6], [0, 1]),  # anti-diagonal
        ([3, 5, 4], [0, 1]),  # middle row, the last mark in the middle
    ],
)
def test_x_wins_every_line(x_moves, o_moves):
    state = play([x_moves[0], o_moves[0], x_moves[1], o_moves[1]])
    assert not state.done
    state = STEP(state, x_moves[2])
    assert state.terminated
    np.testing.assert_array_equal(state.rewards, [1.0, -1.0])


def test_o_wins():
    state = play([0, 3, 1, 4, 8, 5])  # O completes the middle row
    assert state.terminated
    np.testing.assert_array_equal(state.rewards, [-1.0, 1.0])


def test_draw_on_full_board():
    # X O X / X O O / O X X: no line.
    state = play([0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert state.terminated and not state.truncated
    np.testing.assert_array_equal(state.rewards, [0.0, 0.0])
    assert state.legal_action_mask.all()


def test_observation_planes_hand_worked():
    """The docstring's planes, from the mover's side: 0 the mover's marks, 1 the
    opponent's, 2 all ones when the mover is X. After X takes the centre, O is to move:
    O has no mark, X's is at (1, 1), plane 2 is zeros. After O takes the top-left corner,
    X is to move: X's mark at (1, 1), O's at (0, 0), plane 2 all ones."""
    centre, corner = np.zeros((3, 3), bool), np.zeros((3, 3), bool)
    centre[1, 1] = corner[0, 0] = True
    start = np.asarray(play([]).observation)
    assert start.shape == (3, 3, 3) and start.dtype == bool
    np.testing.assert_array_equal(start[..., 0], np.zeros((3, 3), bool))
    np.testing.assert_array_equal(start[..., 1], np.zeros((3, 3), bool))
    np.testing.assert_array_equal(start[..., 2], np.ones((3, 3), bool))
    state = play([4])
    assert int(state.current_player) == 1
    obs = np.asarray(state.observation)
    np.testing.assert_array_equal(obs[..., 0], np.zeros((3, 3), bool))
    np.testing.assert_array_equal(obs[..., 1], centre)
    np.testing.assert_array_equal(obs[..., 2], np.zeros((3, 3), bool))
    state = STEP(state, 0)
    assert int(state.current_player) == 0
    obs = np.asarray(state.observation)
    np.testing.assert_array_equal(obs[..., 0], centre)
    np.testing.assert_array_equal(obs[..., 1], corner)
    np.testing.assert_array_equal(obs[..., 2], np.ones((3, 3), bool))


@pytest.mark.parametrize("bad", [0, -1, 9, 100])
def test_illegal_move_loses(bad):
    state = play([0, 4])  # X to move; 0 is occupied, the rest are out of range
    state = STEP(state, bad)
    assert state.terminated
    np.testing.assert_array_equal(state.rewards, [-1.0, 1.0])


def test_finished_game_is_absorbing():
    done = play([0, 3, 1, 4, 2])
    again = STEP(done, 8)
    np.testing.assert_array_equal(again.rewards, [0.0, 0.0])
    for name in ("current_player", "terminated", "step_count", "observation"):
        np.testing.assert_array_equal(getattr(again, name), getattr(done, name))


def test_parse_and_render():
    assert ENV.parse_action("1") == 0 and ENV.parse_action("9") == 8
    assert ENV.parse_action("A3") == 0 and ENV.parse_action("c1") == 8
    assert ENV.action_to_str(4) == "B2"
    for bad in ["0", "10", "D1", "A4", "", "x"]:
        with pytest.raises(ValueError):
            ENV.parse_action(bad)
    state = play(["B2"])
    with pytest.raises(ValueError, match="not legal"):
        ENV.parse_action("B2", state)
    assert "X" in ENV.render(state) and "A B C" in ENV.render(state)


@pytest.mark.parametrize("text", ["\u0663", "\u00b2", "A" + "1" * 5000, "1" * 5000])
def test_only_ascii_digits_of_sane_length_are_moves(text):
    """'٣' (Arabic-Indic 3) was played as C3, '²' and 'A' + 5000 digits ended in int()'s
    own message: each is now the parser's "cannot read ..." (pgx's action index too)."""
    with pytest.raises(ValueError, match="^cannot read .* as a point: expected a column"):
        ENV.parse_action(text)
    pytest.importorskip("pgx")
    with pytest.raises(ValueError, match="^cannot read .*: expected an action index 0..8"):
        envs.make("pgx:tic_tac_toe").parse_action(text)


# -------------------------------------------------------------------- properties
def _with_noise(plies, noise):
    for t, a in noise:
        plies[t % len(plies)] = a
    return plies


# Mostly legal games (a permutation of the points, then repeats), a few arbitrary actions
# (occupied points, out of range) spliced in.
SEQUENCES = st.builds(
    _with_noise,
    st.permutations(range(9)).map(lambda p: list(p) + list(p[:3])),
    st.lists(st.tuples(st.integers(0, 11), st.integers(-2, 10)), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(SEQUENCES)
def test_random_sequences(check_trajectory, actions):
    """Any action sequence, illegal ones included: zero-sum, absorbing, consistent mask."""
    check_trajectory(ENV, actions, legal_of=lambda board: board < 0)


# ------------------------------------------------------------------ vs OpenSpiel
def test_matches_openspiel(differential):
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("tic_tac_toe")
    # The same action numbering (row * 3 + col, row 0 at the top); no board to compare.
    stats = differential(ENV, lambda: SpielRef(game), num_games=2000, seed=1)
    assert stats["p0"] and stats["p1"] and stats["draw"], stats
