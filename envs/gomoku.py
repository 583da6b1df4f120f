"""Gomoku on an N x N board (5 <= N <= 22): five in a row wins.

Rules (`rule=`):
  "freestyle": five or more stones in a row (any direction) win.
  "standard":  exactly five win; an overline (six or more) is not a win and the game goes on.
No other restrictions (no renju forbidden moves, no swap). A full board is a draw.
Player 0 plays black (X) and moves first.

Actions: 0..N*N-1 = row * N + col, row 0 at the top. Notation: column letter then row number
from the bottom (`E5`, `H8`), consecutive letters A.. (I included), as `core.point_name`.

Observation bool[N, N, 4], from the mover's point of view:
  0: the mover's stones, 1: the opponent's stones, 2: the last stone played (one-hot, empty
  before the first move), 3: all ones if the mover is black (player 0).

Win detection looks only at the four lines through the last stone (a fixed-size gather of
5 cells on each side), never at the whole board.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import core

RULES = ("freestyle", "standard")
MIN_SIZE, MAX_SIZE = 5, 22  # 22: the largest board piskvork managers offer
_EMPTY = -1
_REACH = 5  # cells looked at on each side: enough to tell exactly five from an overline


@functools.cache
def _offsets(n: int, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """For `Gomoku.threat_counts`: (index int32[4, 2R, N * N], offset int32[2R]), the flat
    index, in the board padded by `reach`, of p + o * dir for each line direction, offset
    o (1..R, then -1..-R) and point p."""
    offset = np.concatenate([np.arange(1, reach + 1), -np.arange(1, reach + 1)])
    r, c = np.divmod(np.arange(n * n), n)
    dr, dc = core._LINE_DIRS[:, 0, None, None], core._LINE_DIRS[:, 1, None, None]
    rows = r[None, None] + offset[None, :, None] * dr + reach
    cols = c[None, None] + offset[None, :, None] * dc + reach
    return (rows * (n + 2 * reach) + cols).astype(np.int32), offset.astype(np.int32)


def _runs(own, n: int, reach: int):
    """(behind, ahead), int32[4, n, n] each: per line direction and point, the stones of
    `own` (bool[n, n]) in a row next to it on that side (the point itself not counted),
    up to `reach`. Shifted slices (a gather is slower batched on a CPU)."""
    padded = jnp.pad(own, reach)  # off the board: False
    out = []
    for sign in (-1, 1):
        for dr, dc in core._LINE_DIRS.tolist():
            length, unbroken = jnp.zeros((n, n), jnp.int32), jnp.ones((n, n), jnp.bool_)
            for k in range(1, reach + 1):
                r0, c0 = reach + sign * k * dr, reach + sign * k * dc
                unbroken = unbroken & padded[r0:r0 + n, c0:c0 + n]
                length = length + unbroken
            out.append(length)
    return jnp.stack(out[:4]), jnp.stack(out[4:])


class Game(NamedTuple):
    board: jax.Array  # int8[N * N]  -1 empty, else the player (0 = black, 1 = white)
    last: jax.Array  # int32[]      action of the last stone, -1 before the first


class Gomoku(core.Env):
    """Gomoku with a board size and a rule (see the module docstring)."""

    id = "gomoku"
    version = "v1"
    deterministic = True
    side_names = ("black", "white")
    side_aliases = {"x": 0, "o": 1, "b": 0, "w": 1}  # noqa: RUF012 - read only
    legend = "X black, O white; the last stone is in parentheses"

    def __init__(self, size: int = 15, rule: str = "freestyle"):
        """Builds the env.

        Args:
          size: board side N, any of 5..22 (15 is the usual board).
          rule: "freestyle" (five or more win) or "standard" (exactly five win).
        Raises:
          ValueError: size or rule out of range, saying what is accepted.
        """
        if isinstance(size, bool) or not isinstance(size, int | np.integer):
            raise ValueError(f"size must be an int in {MIN_SIZE}..{MAX_SIZE}, got {size!r}")
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"size must be in {MIN_SIZE}..{MAX_SIZE}, got {size}")
        if rule not in RULES:
            raise ValueError(f"unknown rule {rule!r}; accepted rules: {', '.join(RULES)}")
        self.size = int(size)
        self.rule = rule
        self.num_actions = self.size * self.size
        self.observation_shape = (self.size, self.size, 4)
        self.observation_dtype = jnp.bool_
        # Static lookup tables (numpy; baked into the jitted program as constants).
        self._line_cells, self._line_on_board = core.line_cells(self.size, self.size, _REACH)

    has_winning_moves = True
    # Exactly so in freestyle. Under exactly five a stone can hurt its owner (it may turn
    # his own five-point into an overline), but rarely, and only in the "threats"
    # tactics' judgement of a four (search._wins_despite), which is not a proof.
    zugzwang_free = True

    def winning_moves(self, state, player):
        """bool[N * N]: the empty points where `player`'s stone makes five now (see the rule).

        Whole-board runs along the 4 directions: for each point, `player`'s stones in a row
        on each side (capped at 4 for freestyle, 5 for exactly five to see an overline).
        """
        n = self.size
        board = state.game.board.reshape(n, n)
        behind, ahead = _runs(board == jnp.asarray(player, jnp.int8), n, self._reach)
        win = self._five(behind + ahead + 1).any(0)  # bool[n, n]
        return (win & (board == _EMPTY)).reshape(-1) & ~state.done

    @property
    def _reach(self) -> int:
        """How far a run is counted: 4 (freestyle: five or more wins), else one more to
        see an overline."""
        return 4 if self.rule == "freestyle" else _REACH

    def _five(self, length):
        """bool[...]: a run of `length` stones (the new one included) wins."""
        return length >= 5 if self.rule == "freestyle" else length == 5

    def threat_counts(self, state):
        """int32[N * N]: `core.Env.threat_counts` read from the board, without stepping.

        A stone at p changes whether a point q is a five-point only along the line they
        share, and only within reach; so per direction and offset o (q = p + o * dir),
        q's run through p is rebuilt from two run-length arrays (the mover's stones in a
        row behind and ahead of each point), and the count is the five-points before,
        less those on p's lines and p itself, plus those on p's lines after. Every
        (direction, offset) pair at once, by one constant gather per array: a small
        program, as the threat search inlines it at each of its levels.
        """
        n, player, reach, five = self.size, state.current_player, self._reach, self._five
        board = state.game.board.reshape(n, n)
        empty = board == _EMPTY
        behind, ahead = _runs(board == player.astype(jnp.int8), n, reach)  # int32[4, n, n]
        wins = empty & five(behind + ahead + 1)  # bool[4, n, n]: five-points, per line
        win = wins.any(0)  # bool[n, n]: his five-points now
        elsewhere = wins.sum(0) - wins > 0  # a five-point on another line

        index, offset = _offsets(n, reach)  # int32[4, 2R, n * n], int32[2R] (1..R, -1..-R)
        rows = jnp.arange(4)[:, None, None]

        def at(x):  # [4, n, n] -> [4, 2R, n * n]: x at p + o * dir; off the board: 0
            x = jnp.broadcast_to(x, (4, n, n))
            return jnp.pad(x, ((0, 0), (reach, reach), (reach, reach))).reshape(4, -1)[
                rows, index]

        forward = (offset > 0)[None, :, None]
        dist = jnp.abs(offset)[None, :, None]
        # From q, the side facing p: joined through p when the o - 1 points between are
        # his, then p's own run on its far side.
        near = jnp.where(forward, at(behind), at(ahead))
        far = jnp.where(forward, behind.reshape(4, 1, -1), ahead.reshape(4, 1, -1))
        near = jnp.where(near == dist - 1, dist + far, near)
        front = jnp.where(forward, at(ahead), at(behind))
        after = at(empty) & (five(near + front + 1) | at(elsewhere))
        count = (win.sum(dtype=jnp.int32) - win.reshape(-1)
                 + (after.astype(jnp.int32) - at(win)).sum((0, 1)))
        his = self.winning_moves(state, 1 - player)  # p itself stops one
        last = min(self.num_actions, self.max_steps or self.num_actions)
        threat = (empty.reshape(-1) & ~win.reshape(-1) & ~state.done
                  & ~(his.sum() - his > 0) & (state.step_count + 1 < last))
        return jnp.where(threat, count, 0)

    @property
    def params(self):
        return {"size": self.size, "rule": self.rule}

    @property
    def max_game_length(self) -> int:
        return self.num_actions  # the board fills up

    def _init(self, key):
        del key
        game = Game(board=jnp.full(self.num_actions, _EMPTY, jnp.int8), last=jnp.int32(-1))
        return core.make_state(game, 0, jnp.ones(self.num_actions, jnp.bool_))

    def _step(self, state, action, key):
        del key
        player = state.current_player
        stone = player.astype(jnp.int8)
        board = state.game.board.at[action].set(stone)
        # The 4 lines through the new stone only: a fixed gather of 4 * 2 * 5 cells.
        cells = jnp.asarray(self._line_cells)[action]
        same = jnp.asarray(self._line_on_board)[action] & (board[cells] == stone)
        runs = core.run_lengths(same)
        if self.rule == "freestyle":
            won = core.any_of([run >= 5 for run in runs])
        else:  # "standard": exactly five; an overline in one line does not spoil a five in another
            won = core.any_of([run == 5 for run in runs])
        full = state.step_count + 1 >= self.num_actions  # every legal ply fills one point
        return state.replace(
            game=Game(board=board, last=action),
            current_player=1 - player,
            legal_action_mask=board == _EMPTY,
            rewards=jnp.where(won, core.win_rewards(player), 0.0),
            terminated=won | full,
        )

    def _observe(self, state):
        # One 4-bit code per point, then the 4 planes as its bits: on CPU this is markedly
        # cheaper than stacking 4 planes along the last axis.
        n = self.size
        board = state.game.board
        me = state.current_player.astype(jnp.int8)
        last = jnp.arange(self.num_actions, dtype=jnp.int32) == state.game.last
        code = (
            (board == me).astype(jnp.int32)
            | (board == 1 - me).astype(jnp.int32) << 1
            | last.astype(jnp.int32) << 2
            | (me == 0).astype(jnp.int32) << 3
        )
        bits = code.reshape(n, n, 1) >> jnp.arange(4, dtype=jnp.int32)
        return (bits & 1).astype(jnp.bool_)

    def symmetries(self, obs, policy):
        return core.dihedral_symmetries(obs, policy, self.size, self.size)

    # ---------------------------------------------------------------- host side
    @property
    def move_help(self) -> str:
        middle = self.action_to_str(self.num_actions // 2)
        return f"a point: column letter then row number from the bottom, like {middle}"

    def render(self, state) -> str:
        """The board with X (black) / O (white), the last stone in parentheses, A.. / 1.. labels."""
        n = self.size
        board = np.asarray(state.game.board).reshape(n, n)
        last = int(state.game.last)
        marks = {_EMPTY: ".", 0: "X", 1: "O"}
        lines = []
        for r in range(n):
            cells = []
            for c in range(n):
                mark = marks[int(board[r, c])]
                cells.append(f"({mark})" if r * n + c == last else f" {mark} ")
            lines.append(f"{n - r:>2} " + "".join(cells).rstrip())
        lines.append("   " + "".join(f" {chr(ord('A') + c)} " for c in range(n)).rstrip())
        return "\n".join(lines)

    def action_to_str(self, action: int) -> str:
        return core.point_name(int(action) // self.size, int(action) % self.size, self.size)

    def _parse(self, text: str) -> int:
        row, col = core.parse_point(text, self.size, self.size)
        return row * self.size + col

    def _illegal_reason(self, state, action: int) -> str:
        if int(np.asarray(state.game.board)[action]) != _EMPTY:
            return f"{self.action_to_str(action)} is occupied"
        return super()._illegal_reason(state, action)
