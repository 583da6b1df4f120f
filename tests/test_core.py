"""The move limit of `envs/core.py`'s `Env.step`: `max_steps` ends a *still running* game as
a draw (`truncated`, rewards 0); a game won on the last allowed ply stays a win. Checked on
tic-tac-toe with a limit set by a subclass (only core's wrapper reads `max_steps`), each
game's outcome worked out by hand and confirmed by the independent rules in tests/minimax.py.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import envs
from envs.tictactoe import TicTacToe
from tests import minimax


@functools.cache
def limited(max_steps: int):
    """Tic-tac-toe cut at `max_steps` plies, with its jitted init and step."""
    env = type("LimitedTicTacToe", (TicTacToe,), {"max_steps": max_steps})()
    return env, jax.jit(env.init), jax.jit(env.step)


def _play(max_steps, moves):
    env, init, step = limited(max_steps)
    states = [init(jax.random.PRNGKey(0))]
    for a in moves:
        states.append(step(states[-1], a))
    return states


def _winner(moves):
    """minimax's rules: 1 X (player 0) has three in a row, 2 O, 0 none."""
    board = [0] * 9
    for i, a in enumerate(moves):
        board[a] = 1 + i % 2
    return minimax.winner(tuple(board))


@pytest.mark.parametrize(("moves", "rewards"), [
    ([0, 3, 1, 4, 2], [1.0, -1.0]),  # X's top row on ply 5
    ([0, 3, 1, 4, 8, 5], [-1.0, 1.0]),  # O's middle row on ply 6
], ids=["X wins", "O wins"])
def test_a_win_on_the_last_allowed_ply_stays_a_win(moves, rewards):
    """The winning move is ply `max_steps` itself: the game ends terminated with the
    winner's +1 / -1, not truncated into a draw."""
    assert _winner(moves) == (1 if rewards[0] > 0 else 2) and not _winner(moves[:-1])
    states = _play(len(moves), moves)
    assert not states[-2].done
    last = states[-1]
    assert bool(last.terminated) and not bool(last.truncated)
    np.testing.assert_array_equal(last.rewards, rewards)


def test_a_running_game_at_the_limit_is_a_draw():
    """No three in a row after 5 plies and a limit of 5: the game ends truncated, not
    terminated, with rewards 0 for both; one ply earlier it was still running."""
    moves = [4, 0, 8, 2, 1]
    assert not _winner(moves)
    states = _play(5, moves)
    assert not states[-2].done
    last = states[-1]
    assert bool(last.truncated) and not bool(last.terminated) and bool(last.done)
    np.testing.assert_array_equal(last.rewards, [0.0, 0.0])


@pytest.mark.parametrize("env_id,kwargs,says", [
    ("pgx:tic_tac_toe", {"size": 3}, "pgx:tic_tac_toe takes no parameters, got size"),
    (["connect4"], {}, "unknown env id ['connect4']"),
])
def test_make_refuses_bad_ids_and_parameters_with_a_value_error(env_id, kwargs, says):
    """train.py and bench catch ValueError only: a pgx game given a parameter was a
    TypeError traceback (PgxEnv takes none), a list as id `unhashable type`."""
    with pytest.raises(ValueError) as e:
        envs.make(env_id, **kwargs)
    assert says in str(e.value)


@pytest.mark.parametrize("text", ["ı5", "ſ1", "e٥"])
def test_a_point_in_letters_that_only_upper_case_to_ascii_is_refused(text):
    """'ı'.upper() is 'I' and 'ſ'.upper() is 'S': such a point is not read as I5 or S1."""
    env = envs.make("gomoku", size=9)
    with pytest.raises(ValueError, match="^cannot read .* as a point: expected a column "
                                         "letter A-I then a row number 1-9"):
        env.parse_action(text)
    assert env.parse_action(" e5 ") == env.parse_action("E5")
