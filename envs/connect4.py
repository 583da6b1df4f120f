"""Connect Four on a 6x7 board: drop stones, four in a row (any direction) wins.

Actions: 0..6 = the column, left to right. Notation: `1`..`7` (the action + 1).
Player 0 plays X and moves first. A full board with no four in a row is a draw.
The board is stored with row 0 at the top; a stone falls to the lowest empty row.

Observation float32[6, 7, 3], from the mover's point of view (row 0 at the top):
  0: the mover's stones, 1: the opponent's stones, 2: all ones if the mover is X (player 0).

Win detection looks only at the four lines through the stone just dropped.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import core

ROWS, COLS = 6, 7
_EMPTY = -1
# (row step, col step) of the four line directions: horizontal, vertical, both diagonals.
_DIRS = np.array([[0, 1], [1, 0], [1, 1], [1, -1]], np.int32)


class Game(NamedTuple):
    board: jax.Array  # int8[6, 7]  -1 empty, else the player (0 = X, 1 = O); row 0 at the top
    last: jax.Array  # int32[]     cell (row * 7 + col) of the last stone, -1 before the first


def line_lengths(board: jax.Array, row, col, player, reach: int) -> jax.Array:
    """Length of the run of `player` stones through (row, col) along each of the 4 directions.

    Only 4 * 2 * `reach` cells are gathered, never the whole board; runs are counted up to
    `reach` stones on each side, so a result of `2 * reach + 1` means "at least that long".

    Args:
      board: int8[H, W], the player's id where a stone lies.
      row, col: int32[], a cell holding a `player` stone (the stone just played).
      player: int32[], whose run to count.
      reach: static int, how far to look on each side.
    Returns:
      int32[4]: runs along (horizontal, vertical, diagonal, anti-diagonal), each >= 1.
    """
    height, width = board.shape
    side = np.array([1, -1], np.int32)[:, None] * np.arange(1, reach + 1, dtype=np.int32)
    rows = row + _DIRS[:, 0, None, None] * side  # [4, 2, reach]
    cols = col + _DIRS[:, 1, None, None] * side
    on_board = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    cells = board[jnp.where(on_board, rows, 0), jnp.where(on_board, cols, 0)]
    same = on_board & (cells == player.astype(board.dtype))
    run = jnp.cumprod(same.astype(jnp.int32), axis=-1).sum(-1)  # [4, 2] contiguous stones
    return 1 + run.sum(-1)


class Connect4(core.Env):
    id = "connect4"
    version = "v1"
    num_actions = COLS
    observation_shape = (ROWS, COLS, 3)

    def _init(self, key):
        del key
        game = Game(board=jnp.full((ROWS, COLS), _EMPTY, jnp.int8), last=jnp.int32(-1))
        return core.make_state(game, 0, jnp.ones(COLS, jnp.bool_))

    def _step(self, state, action, key):
        del key
        player = state.current_player
        board = state.game.board
        row = ROWS - 1 - jnp.sum(board[:, action] != _EMPTY, dtype=jnp.int32)
        board = board.at[row, action].set(player.astype(jnp.int8))
        won = jnp.any(line_lengths(board, row, action, player, reach=3) >= 4)
        legal = board[0] == _EMPTY
        return state.replace(
            game=Game(board=board, last=row * COLS + action),
            current_player=1 - player,
            legal_action_mask=legal,
            rewards=jnp.where(won, core.win_rewards(player), 0.0),
            terminated=won | ~jnp.any(legal),
        )

    def _observe(self, state):
        board = state.game.board
        me = state.current_player.astype(jnp.int8)
        return jnp.stack(
            [board == me, board == 1 - me, jnp.full((ROWS, COLS), me == 0)], axis=-1
        ).astype(jnp.float32)

    def symmetries(self, obs, policy):
        """Identity and the left-right mirror.

        Args:
          obs: float32[6, 7, C]; policy: float32[7].
        Returns:
          obs float32[2, 6, 7, C] and policy float32[2, 7]; index 0 is the identity.
        """
        return jnp.stack([obs, obs[:, ::-1]]), jnp.stack([policy, policy[::-1]])

    # ---------------------------------------------------------------- host side
    def render(self, state) -> str:
        """The board with X/O, the last stone in parentheses, columns 1-7 below."""
        board = np.asarray(state.game.board)
        last = int(state.game.last)
        marks = {_EMPTY: ".", 0: "X", 1: "O"}
        lines = []
        for r in range(ROWS):
            cells = []
            for c in range(COLS):
                mark = marks[int(board[r, c])]
                cells.append(f"({mark})" if r * COLS + c == last else f" {mark} ")
            lines.append("".join(cells).rstrip())
        lines.append("".join(f" {c + 1} " for c in range(COLS)).rstrip())
        return "\n".join(lines)

    def action_to_str(self, action: int) -> str:
        return str(int(action) + 1)

    def _parse(self, text: str) -> int:
        if len(text) == 1 and "1" <= text <= str(COLS):
            return int(text) - 1
        raise ValueError(f"cannot read {text!r} as a Connect4 move: expected a column number 1-7")

    def _illegal_reason(self, state, action: int) -> str:
        if int(np.asarray(state.game.board)[0, action]) != _EMPTY:
            return f"column {action + 1} is full"
        return super()._illegal_reason(state, action)
