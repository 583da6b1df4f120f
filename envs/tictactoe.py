"""Tic-tac-toe on a 3x3 board: the quick learnability check.

Actions: 0..8 = row * 3 + col, row 0 at the top. Notation: `A1`..`C3` (column letter, row
number from the bottom) or the digit `1`..`9` (the action + 1, reading order).
Player 0 plays X and moves first.

Observation bool[3, 3, 3], from the mover's point of view:
  0: the mover's marks, 1: the opponent's marks, 2: all ones if the mover is X (player 0).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import core

_LINES = np.array(
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]],
    np.int32,
)


class Game(NamedTuple):
    board: jax.Array  # int32[9]   -1 empty, else the player (0 = X, 1 = O)


class TicTacToe(core.Env):
    id = "tictactoe"
    version = "v1"
    num_actions = 9
    observation_shape = (3, 3, 3)
    observation_dtype = jnp.bool_
    deterministic = True
    max_game_length = 9  # the board fills up
    side_names = ("X", "O")
    move_help = "a cell: column letter and row number (A1..C3), or 1-9 in reading order"

    def _init(self, key):
        del key
        game = Game(board=jnp.full(9, -1, jnp.int32))
        return core.make_state(game, 0, jnp.ones(9, jnp.bool_))

    has_winning_moves = True
    zugzwang_free = True

    def winning_moves(self, state, player):
        """bool[9]: the empty cells where `player`'s mark completes a line."""
        board = state.game.board
        lines = board[_LINES]  # [8, 3]
        # A line wins at its one empty cell when its other two cells are `player`'s.
        ready = (jnp.sum(lines == player, axis=1) == 2) & jnp.any(lines < 0, axis=1)  # [8]
        hits = jnp.zeros(9, jnp.int32).at[_LINES.reshape(-1)].add(
            jnp.repeat(ready, 3).astype(jnp.int32))
        return (hits > 0) & (board < 0) & ~state.done

    def _step(self, state, action, key):
        del key
        player = state.current_player
        board = state.game.board.at[action].set(player)
        won = jnp.any(jnp.all(board[_LINES] == player, axis=1))
        full = jnp.all(board >= 0)
        return state.replace(
            game=Game(board=board),
            current_player=1 - player,
            legal_action_mask=board < 0,
            rewards=jnp.where(won, core.win_rewards(player), 0.0),
            terminated=won | full,
        )

    def _observe(self, state):
        board = state.game.board.reshape(3, 3)
        me = state.current_player
        return jnp.stack(
            [board == me, board == 1 - me, jnp.full((3, 3), me == 0)], axis=-1
        )

    def symmetries(self, obs, policy):
        return core.dihedral_symmetries(obs, policy, 3, 3)

    # ---------------------------------------------------------------- host side
    def render(self, state) -> str:
        board = np.asarray(state.game.board).reshape(3, 3)
        marks = {-1: ".", 0: "X", 1: "O"}
        rows = [f"{3 - r} " + " ".join(marks[int(v)] for v in board[r]) for r in range(3)]
        return "\n".join(rows + ["  A B C"])

    def action_to_str(self, action: int) -> str:
        return core.point_name(int(action) // 3, int(action) % 3, 3)

    def _parse(self, text: str) -> int:
        if text.isascii() and text.isdigit() and len(text) == 1 and text != "0":
            return int(text) - 1
        row, col = core.parse_point(text, 3, 3)
        return row * 3 + col

