"""Connect Four on a 6x7 board: drop stones, four in a row (any direction) wins.

Actions: 0..6 = the column, left to right. Notation: `1`..`7` (the action + 1).
Player 0 plays X and moves first. A full board with no four in a row is a draw.
The board is stored with row 0 at the top; a stone falls to the lowest empty row.

Observation bool[6, 7, 3], from the mover's point of view (row 0 at the top):
  0: the mover's stones, 1: the opponent's stones, 2: all ones if the mover is X (player 0).
With `threats=True` (`envs.make("connect4", threats=True)`) three more planes, bool[6, 7, 6]:
  3: the mover's threats: empty cells where his stone would make four (whether or not a
     stone can drop there yet), 4: the opponent's threats, the same,
  5: the playable cells (where each column's next stone lands).
These are the facts Connect Four strategy is built on (threats and the rows they stand on,
Allis 1988); a small network otherwise spends its first layers finding them.
With `twos=True` two more planes, after those: the empty cells where a stone of the mover
(the first) or of the opponent (the second) would make a new threat, i.e. that lie in a
window of four cells holding two of that player's stones and none of the other's (gravity
ignored). They are the moves that build the threats the planes above show.
With `ones=True` two more planes, after those: the same for windows holding one stone of
that player (where a stone makes a new two).
With `lowest=True` two more planes, after those: the mover's and the opponent's threats
(as in planes 3 and 4) that have no threat of either player below them in their column,
the first of each column to become playable; in a filled-up endgame these decide who
must give way (Allis 1988).
With `parity=True` one more plane, the last: the odd rows counted from the bottom (1st,
3rd, 5th). In a filled-up endgame (zugzwang) a threat of the first player counts on an odd
row and one of the second player on an even row (Allis's rules); with plane 2 and the
threat planes a 1x1 convolution can tell a good threat from a useless one, where otherwise
the network must count rows from the board's edge.

Win detection looks only at the four lines through the stone just dropped (the helpers in
core.py are shared with gomoku.py: Connect Four is four-in-a-row with gravity).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import core

ROWS, COLS = 6, 7
_EMPTY = -1
# Cells on the 4 lines through each cell, up to 3 away: int32/bool[42, 4, 2, 3].
_LINE_CELLS, _LINE_ON_BOARD = core.line_cells(ROWS, COLS, reach=3)
# The 69 windows of four cells in a line: int32[69, 4] (flat cells, row * 7 + col).
_WINDOWS = np.array([[(r + i * dr) * COLS + c + i * dc for i in range(4)]
                     for r in range(ROWS) for c in range(COLS)
                     for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1))
                     if 0 <= r + 3 * dr < ROWS and 0 <= c + 3 * dc < COLS], np.int32)
# bool[6, 7, 1]: the 1st, 3rd and 5th rows from the bottom (rows 5, 3, 1 from the top).
_ODD_ROWS = np.broadcast_to(((ROWS - 1 - np.arange(ROWS)) % 2 == 0)[:, None, None],
                            (ROWS, COLS, 1))


class Game(NamedTuple):
    board: jax.Array  # int8[6, 7]  -1 empty, else the player (0 = X, 1 = O); row 0 at the top
    last: jax.Array  # int32[]     cell (row * 7 + col) of the last stone, -1 before the first


def _fours(board: jax.Array, stone: jax.Array) -> jax.Array:
    """bool[6, 7]: the empty cells where `stone` would make four, gravity ignored."""
    flat = board.reshape(-1)
    same = jnp.asarray(_LINE_ON_BOARD) & (
        flat[jnp.asarray(_LINE_CELLS)] == stone.astype(jnp.int8))  # [42, 4, 2, 3]
    four = jax.vmap(lambda s: core.any_of([run >= 4 for run in core.run_lengths(s)]))(same)
    return (four & (flat == _EMPTY)).reshape(ROWS, COLS)


def _makers(board: jax.Array, stone: jax.Array, count: int) -> jax.Array:
    """bool[6, 7]: the empty cells of a window of four holding `count` stones of `stone`
    and none of the other's (count 2: where a stone makes a new threat), gravity ignored."""
    stone = stone.astype(jnp.int8)
    cells = board.reshape(-1)[jnp.asarray(_WINDOWS)]  # [69, 4]
    mine = jnp.sum(cells == stone, axis=1)
    theirs = jnp.sum((cells != _EMPTY) & (cells != stone), axis=1)
    hit = ((mine == count) & (theirs == 0))[:, None] & (cells == _EMPTY)  # [69, 4]
    counts = jnp.zeros(ROWS * COLS, jnp.int32).at[jnp.asarray(_WINDOWS).reshape(-1)].add(
        hit.reshape(-1).astype(jnp.int32))
    return (counts > 0).reshape(ROWS, COLS)


def _lowest(mine: jax.Array, theirs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The threats (bool[6, 7] each, row 0 at the top) with no threat of either player
    below them in their column: the first of each column to become playable."""
    either = (mine | theirs).astype(jnp.int32)
    below = jnp.cumsum(either[::-1], axis=0)[::-1] - either  # threats strictly below
    return mine & (below == 0), theirs & (below == 0)


FLAGS = ("threats", "parity", "twos", "ones", "lowest")  # the optional planes


class Connect4(core.Env):
    id = "connect4"
    version = "v1"
    num_actions = COLS
    # 3 more planes with threats=True, 2 each with twos, ones or lowest, 1 with parity
    observation_shape = (ROWS, COLS, 3)
    # The planes change what a network sees, not the game.
    observation_params = FLAGS
    observation_dtype = jnp.bool_
    deterministic = True
    max_game_length = ROWS * COLS  # the board fills up
    side_names = ("X", "O")
    move_help = "a column number 1-7"
    legend = "the last stone is in parentheses"

    def __init__(self, threats: bool = False, parity: bool = False, twos: bool = False,
                 ones: bool = False, lowest: bool = False):
        """Builds the env.

        Args:
          threats: add the threat and playable-cell planes to the observation (see the
            module docstring).
          parity: add the odd-row plane to the observation (the same).
          twos: add the threat-making planes to the observation (the same).
          ones: add the two-making planes to the observation (the same).
          lowest: add the lowest-threat planes to the observation (the same).
        Raises:
          ValueError: a flag is not a bool.
        """
        flags = dict(threats=threats, parity=parity, twos=twos, ones=ones, lowest=lowest)
        for name, flag in flags.items():
            if not isinstance(flag, bool | np.bool_):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
            setattr(self, name, bool(flag))
        self.observation_shape = (ROWS, COLS, 3 + 3 * self.threats + self.parity
                                  + 2 * (self.twos + self.ones + self.lowest))

    @property
    def params(self):
        # (Defaults left out: the env of every checkpoint saved before the flags existed.)
        return {k: True for k in FLAGS if getattr(self, k)}

    def _init(self, key):
        del key
        game = Game(board=jnp.full((ROWS, COLS), _EMPTY, jnp.int8), last=jnp.int32(-1))
        return core.make_state(game, 0, jnp.ones(COLS, jnp.bool_))

    def _step(self, state, action, key):
        del key
        player = state.current_player
        stone = player.astype(jnp.int8)
        column = state.game.board[:, action]
        # Stones stack from the bottom, so the empty cells of a column are its top rows.
        # (A full column gives row -1: garbage that `core.Env.step` discards as illegal.)
        row = jnp.sum(column == _EMPTY, dtype=jnp.int32) - 1
        cell = row * COLS + action
        board = state.game.board.reshape(-1).at[cell].set(stone)
        same = jnp.asarray(_LINE_ON_BOARD)[cell] & (board[jnp.asarray(_LINE_CELLS)[cell]] == stone)
        won = core.any_of([run >= 4 for run in core.run_lengths(same)])
        board = board.reshape(ROWS, COLS)
        legal = board[0] == _EMPTY
        return state.replace(
            game=Game(board=board, last=cell),
            current_player=1 - player,
            legal_action_mask=legal,
            rewards=jnp.where(won, core.win_rewards(player), 0.0),
            terminated=won | (state.step_count + 1 >= ROWS * COLS),  # full board: a draw
        )

    has_winning_moves = True

    def winning_moves(self, state, player):
        """bool[7]: the columns where `player`'s stone, dropped now, makes four."""
        board = state.game.board
        row = jnp.sum(board == _EMPTY, axis=0, dtype=jnp.int32) - 1  # [7] landing row
        cell = jnp.maximum(row, 0) * COLS + jnp.arange(COLS)  # [7]
        stone = jnp.asarray(player, jnp.int8)
        same = jnp.asarray(_LINE_ON_BOARD)[cell] & (
            board.reshape(-1)[jnp.asarray(_LINE_CELLS)[cell]] == stone)  # [7, 4, 2, 3]
        four = jax.vmap(lambda s: core.any_of([run >= 4 for run in core.run_lengths(s)]))(same)
        return four & (row >= 0) & ~state.done

    def _observe(self, state):
        # One 3-bit code per cell, then the planes as its bits (cheaper on CPU than a stack).
        board = state.game.board
        me = state.current_player.astype(jnp.int8)
        code = (
            (board == me).astype(jnp.int32)
            | (board == 1 - me).astype(jnp.int32) << 1
            | (me == 0).astype(jnp.int32) << 2
        )
        planes = ((code[..., None] >> jnp.arange(3, dtype=jnp.int32)) & 1).astype(jnp.bool_)
        if self.threats or self.lowest:
            fours = _fours(board, me), _fours(board, 1 - me)
        if self.threats:
            below = jnp.concatenate([board[1:] != _EMPTY, jnp.ones((1, COLS), jnp.bool_)])
            extra = jnp.stack([*fours, (board == _EMPTY) & below], axis=-1)  # [6, 7, 3]
            planes = jnp.concatenate([planes, extra], axis=-1)
        for flag, count in ((self.twos, 2), (self.ones, 1)):
            if flag:
                extra = jnp.stack([_makers(board, me, count), _makers(board, 1 - me, count)],
                                  axis=-1)
                planes = jnp.concatenate([planes, extra], axis=-1)
        if self.lowest:
            planes = jnp.concatenate([planes, jnp.stack(_lowest(*fours), axis=-1)], axis=-1)
        if self.parity:
            planes = jnp.concatenate([planes, jnp.asarray(_ODD_ROWS)], axis=-1)
        return planes

    def symmetries(self, obs, policy):
        """Identity and the left-right mirror.

        Args:
          obs: [6, 7, C]; policy: float32[7].
        Returns:
          obs [2, 6, 7, C] and policy float32[2, 7]; index 0 is the identity.
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
