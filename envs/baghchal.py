"""Bagh-Chal (tigers and goats) on the 5x5 alquerque board, with exact rules.

Rules (as in the PyPI `baghchal` package):

* 25 points; orthogonal lines everywhere, diagonal lines only through points whose
  row + column is even (A1, B2, C1, C3, ...: column letter and row number of the same parity).
* 4 tigers start on the corners, 20 goats start in hand. Goats (player 0) move first;
  tigers are player 1.
* Placement phase: each goat turn places one goat on an empty point until all 20 are placed;
  goats may not move before that. Tigers move on every turn from the start.
* A tiger steps along a line to an adjacent empty point, or captures: it jumps along a line
  over one adjacent goat to the empty point just beyond and removes that goat. Capturing is
  optional; there are no multiple jumps. A goat (once all are placed) steps along a line.
* Tigers win with the 5th capture, or when the goats are to move and have no legal move.
  Goats win when the tigers are to move and no tiger can step or jump.
* Draw by repetition: the game ends in a draw (terminated, rewards 0) when the same
  arrangement of pieces occurs for the third time, counting from the position after the
  last placement on. Whose turn it is is not part of the arrangement. This is what the
  PyPI package does (its `fen_count`). A capture makes every earlier arrangement
  unreachable, so the history is cleared there.
* Move limit: after `max_steps` plies (placements included) a running game ends as a draw
  with `truncated=True` (handled by `core.Env`). The PyPI package has no such limit.

Actions (425 = 17 planes x 25 points; a point is p = row * 5 + col, row 0 at the top, so
A5 = 0, E5 = 4, A1 = 20, E1 = 24). Action a = plane * 25 + p:

  plane 0        place a goat on p                                (actions 0..24)
  plane 1 + d    step from p one point in direction d             (actions 25..224)
  plane 9 + d    jump from p in direction d over the adjacent goat,
                 landing two points away                          (actions 225..424)

with directions d = 0..7: N, NE, E, SE, S, SW, W, NW (N = towards row 5). Goats use planes
0-8, tigers planes 1-16. Actions along no line are never legal.

Notation: points `A1`..`E5` (column letter, row number from the bottom). A placement names one
point (`C3`); a move names two (`A1B2`, `A1-B2`, `A1 B2`); a jump names the from and the
landing point (`A1-C3`, also `A1xC3`). `action_to_str` writes `B2-C3` and `A1xC3`.

Observation float32[5, 5, 7] (the pieces are not interchangeable, so the side to move is a
plane; the board is never flipped):

  0: tigers   1: goats   2: all ones if the tigers are to move   3: all ones in the placement
  phase   4: goats still in hand / 20   5: goats captured / 5   6: all ones if the current
  arrangement already occurred before (since the last placement or capture; once more draws).

Repetition history: one exact 32-bit key per arrangement (see `_arrangement_key`) since the
last placement or capture, in a fixed array of `max_steps - 38` entries (the most one game
can fill), so each step compares one word per entry.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import core

N = 5  # board side
P = N * N  # points
NUM_GOATS = 20
WIN_CAPTURES = 5
NUM_PLANES = 17
NUM_ACTIONS = NUM_PLANES * P
# The first ply at which all goats are placed: 20 placements interleaved with 19 tiger moves.
_LAST_PLACEMENT_PLY = 2 * NUM_GOATS - 1

DIR_NAMES = ("N", "NE", "E", "SE", "S", "SW", "W", "NW")
_DIRS = np.array([(-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1)])
_DELTA = _DIRS[:, 0] * N + _DIRS[:, 1]  # point offset of one step in each direction
_CORNERS = (0, N - 1, P - N, P - 1)


def _on_board(r: int, c: int) -> bool:
    return 0 <= r < N and 0 <= c < N


def _has_line(r: int, c: int, d: int, length: int) -> bool:
    """Whether a line runs `length` points from (r, c) in direction d."""
    dr, dc = _DIRS[d]
    diagonal = dr != 0 and dc != 0
    return _on_board(r + length * dr, c + length * dc) and not (diagonal and (r + c) % 2)


def _build_tables():
    """Static move tables: line bitmasks per direction and per-action endpoints."""
    step_line = np.zeros(8, np.uint32)  # bit p set if a step from p in direction d exists
    jump_line = np.zeros(8, np.uint32)
    dst = np.arange(NUM_ACTIONS) % P  # landing point (the point itself where there is none)
    mid = dst.copy()  # jumped point (jumps only)
    valid = np.zeros(NUM_ACTIONS, bool)
    valid[:P] = True
    for p in range(P):
        r, c = divmod(p, N)
        for d in range(8):
            for length, lines, plane in ((1, step_line, 1 + d), (2, jump_line, 9 + d)):
                if _has_line(r, c, d, length):
                    lines[d] |= np.uint32(1 << p)
                    a = plane * P + p
                    valid[a] = True
                    dst[a] = p + length * _DELTA[d]
                    mid[a] = p + _DELTA[d]
    return step_line, jump_line, dst, mid, valid


# Host-side tables (_DST, _MID, _VALID: per action) and per-direction line masks.
_STEP_LINE, _JUMP_LINE, _DST, _MID, _VALID = _build_tables()
_ALL = np.uint32((1 << P) - 1)
_BELOW = np.array([(1 << p) - 1 for p in range(P)], np.uint32)  # the bits below point p
_POINTS = np.arange(P, dtype=np.uint32)
_TIGERS0 = np.uint32(sum(1 << p for p in _CORNERS))


def _dihedral_tables():
    """For each of the 8 symmetries (in `core.dihedral_symmetries` order): int32[8, A] with
    new policy = policy[table[s]], i.e. the original action behind each transformed action."""
    grid = np.arange(P).reshape(N, N)
    tables = []
    for flip in (False, True):
        g = grid[:, ::-1] if flip else grid
        for k in range(4):
            old_at = np.rot90(g, k, axes=(0, 1)).reshape(-1)  # new point -> old point
            new_of = np.argsort(old_at)  # old point -> new point
            table = np.zeros(NUM_ACTIONS, np.int32)
            table[:P] = old_at
            centre = P // 2
            for d in range(8):  # the old direction d becomes new direction nd
                nd_delta = new_of[centre + _DELTA[d]] - new_of[centre]
                nd = int(np.flatnonzero(_DELTA == nd_delta)[0])
                for base in (1, 9):
                    table[(base + nd) * P : (base + nd + 1) * P] = (base + d) * P + old_at
            tables.append(table)
    return np.stack(tables)


_SYMMETRY_SRC = _dihedral_tables()


class Game(NamedTuple):
    goats: jax.Array  # uint32[]     bit p set if a goat stands on point p
    tigers: jax.Array  # uint32[]    bit p set if a tiger stands on point p
    placed: jax.Array  # int32[]     goats placed so far (0..20)
    captured: jax.Array  # int32[]   goats captured so far (0..5)
    seen_before: jax.Array  # int32[]  earlier occurrences of the current arrangement (0..2)
    history: jax.Array  # uint32[H]  arrangement keys since the last placement or capture
    hist_len: jax.Array  # int32[]  entries of the history in use


# ------------------------------------------------------------------ pure helpers
def _shifted(x: jax.Array, length: int) -> jax.Array:
    """uint32[8]: bit p of entry d = bit (p + length points in direction d) of x.

    Bits that leave the 25-bit board are dropped; wrap-around is removed by the line masks.
    """
    right = np.maximum(length * _DELTA, 0).astype(np.uint32)
    left = np.maximum(-length * _DELTA, 0).astype(np.uint32)
    return ((x >> right) << left) & _ALL


def _move_words(goats, tigers, placed, tiger_to_move) -> jax.Array:
    """The legal actions as one 25-bit word per action plane. Returns uint32[17]."""
    empty = _ALL & ~(goats | tigers)
    placing = ~tiger_to_move & (placed < NUM_GOATS)
    own = jnp.where(tiger_to_move, tigers, jnp.where(placing, jnp.uint32(0), goats))
    place = jnp.where(placing, empty, jnp.uint32(0))
    jumper = jnp.where(tiger_to_move, tigers, jnp.uint32(0))
    steps = own & _STEP_LINE & _shifted(empty, 1)
    jumps = jumper & _JUMP_LINE & _shifted(goats, 1) & _shifted(empty, 2)
    return jnp.concatenate([place[None], steps, jumps])


def _words_to_mask(words: jax.Array) -> jax.Array:
    """uint32[17] plane words -> bool[425] legal action mask."""
    bits = (words[:, None] >> _POINTS[None, :]) & 1
    return bits.reshape(-1).astype(jnp.bool_)


def _bits_to_grid(x: jax.Array) -> jax.Array:
    """uint32[] board word -> float32[5, 5]."""
    return ((x >> jnp.arange(P, dtype=jnp.uint32)) & 1).astype(jnp.float32).reshape(N, N)


def _arrangement_key(goats, tigers) -> jax.Array:
    """uint32[]: one word that identifies the arrangement once all goats are placed.

    The goats' 25-bit word, plus in bits 25-31 which of the points free of goats hold the
    tigers: the combinatorial-number-system rank sum_i C(r_i, i + 1) of the tigers' ranks
    r_0 < .. < r_3 among those points. With at most 9 such points (all 20 goats placed, at
    most 4 captured) the rank is below C(9, 4) = 126, so the key is exact (injective).
    """
    free = _ALL & ~goats
    n = jax.lax.population_count(free & _BELOW)  # [25] free points below each point
    order = jax.lax.population_count(tigers & _BELOW)  # [25] tigers below each point
    # C(n, k) for k = 1..4 by the recurrence C(n, k) = C(n, k - 1) (n - k + 1) / k (exact
    # in uint32; arithmetic instead of a table lookup, since gathers are slow under vmap).
    c1 = n
    c2 = c1 * (n - 1) // 2
    c3 = c2 * (n - 2) // 3
    c4 = c3 * (n - 3) // 4
    terms = jnp.where(order == 0, c1, jnp.where(order == 1, c2, jnp.where(order == 2, c3, c4)))
    combo = jnp.sum(jnp.where((tigers >> _POINTS) & 1 == 1, terms, 0), dtype=jnp.uint32)
    return goats | (combo << 25)


def _apply(goats, tigers, action, tiger_to_move):
    """Moves the pieces for a (legal) action. Returns (goats, tigers, placed?, captured?).

    Decoded by arithmetic rather than from the tables: gathers are slow under vmap.
    """
    plane, src = action // P, action % P
    is_place = plane == 0
    is_jump = plane >= 9
    delta = jnp.sum(jnp.where(jnp.arange(8) == (plane - 1) % 8, _DELTA.astype(np.int32), 0))
    mid = jnp.clip(src + delta, 0, P - 1)  # (clipped: impossible actions are never legal)
    dst = jnp.where(is_place, src, jnp.clip(src + jnp.where(is_jump, 2, 1) * delta, 0, P - 1))
    one = jnp.uint32(1)
    moved = jnp.where(is_place, jnp.uint32(0), one << src.astype(jnp.uint32))
    moved = moved | (one << dst.astype(jnp.uint32))
    taken = jnp.where(is_jump, one << mid.astype(jnp.uint32), jnp.uint32(0))
    goats = (goats ^ jnp.where(tiger_to_move, jnp.uint32(0), moved)) & ~taken
    tigers = tigers ^ jnp.where(tiger_to_move, moved, jnp.uint32(0))
    return goats, tigers, is_place, is_jump


class BaghChal(core.Env):
    """Bagh-Chal; see the module docstring for rules, actions and observation planes.

    Args:
      max_steps: plies (placements included) after which a running game is a draw
        (truncated). Also bounds the repetition history, so keep it moderate.
    """

    id = "baghchal"
    version = "v1"
    num_actions = NUM_ACTIONS
    observation_shape = (N, N, 7)
    deterministic = True
    side_names = ("goats", "tigers")
    side_aliases = {"goat": 0, "g": 0, "tiger": 1, "t": 1}  # noqa: RUF012 - read only
    move_help = ("goats: one point to place a goat (C3), once all 20 are placed two points "
                 "to move one (A1-B2); tigers: two points (A1-B2), a capture names the "
                 "landing point (A1-C3 or A1xC3)")
    legend = "G goat, T tiger; lines join the points a piece may step along"

    def side_move_help(self, player: int) -> str:
        if int(player) == 0:
            return ("one empty point to place a goat (C3); once all 20 goats are placed, two "
                    "points to move one along a line (A1-B2)")
        return ("two points to move a tiger along a line (A1-B2); a capture jumps over a "
                "goat and names the landing point (A1-C3, also written A1xC3)")

    def __init__(self, max_steps: int = 200):
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int (plies), got {max_steps!r}")
        self.max_steps = max_steps
        self._history = max(max_steps - _LAST_PLACEMENT_PLY + 1, 1)

    @property
    def params(self):
        return {"max_steps": self.max_steps}

    # ------------------------------------------------------------------ hooks
    def _init(self, key):
        del key
        game = Game(
            goats=jnp.uint32(0),
            tigers=jnp.uint32(_TIGERS0),
            placed=jnp.int32(0),
            captured=jnp.int32(0),
            seen_before=jnp.int32(0),
            history=jnp.zeros(self._history, jnp.uint32),
            hist_len=jnp.int32(0),
        )
        words = _move_words(game.goats, game.tigers, game.placed, jnp.asarray(False))
        return core.make_state(game, 0, _words_to_mask(words))

    def _step(self, state, action, key):
        del key
        g = state.game
        player = state.current_player
        goats, tigers, is_place, is_jump = _apply(g.goats, g.tigers, action, player == 1)
        placed = g.placed + is_place.astype(jnp.int32)
        captured = g.captured + is_jump.astype(jnp.int32)

        # Repetition: compare with the arrangements since the last placement or capture.
        counted = placed >= NUM_GOATS
        n = jnp.where(counted & ~is_jump, g.hist_len, 0)
        in_use = jnp.arange(self._history) < n
        arrangement = _arrangement_key(goats, tigers)
        seen = jnp.sum(in_use & (g.history == arrangement), dtype=jnp.int32)
        seen = jnp.where(counted, seen, 0)
        history = g.history.at[jnp.minimum(n, self._history - 1)].set(arrangement)
        hist_len = jnp.where(counted, jnp.minimum(n + 1, self._history), 0)

        words = _move_words(goats, tigers, placed, player == 0)
        # The side to move without a legal move loses; so does the goat side at 5 captures.
        # Either way the mover wins.
        won = (captured >= WIN_CAPTURES) | ~jnp.any(words != 0)
        drawn = seen >= 2
        game = Game(goats, tigers, placed, captured, seen, history, hist_len)
        return state.replace(
            game=game,
            current_player=1 - player,
            legal_action_mask=_words_to_mask(words),
            rewards=jnp.where(won, core.win_rewards(player), 0.0),
            terminated=won | drawn,
        )

    def _observe(self, state):
        g = state.game
        fill = lambda v: jnp.full((N, N), v, jnp.float32)
        return jnp.stack(
            [
                _bits_to_grid(g.tigers),
                _bits_to_grid(g.goats),
                fill(state.current_player == 1),
                fill(g.placed < NUM_GOATS),
                fill((NUM_GOATS - g.placed) / NUM_GOATS),
                fill(g.captured / WIN_CAPTURES),
                fill(g.seen_before >= 1),
            ],
            axis=-1,
        )

    def symmetries(self, obs, policy):
        """The 8 D4 variants. obs float32[5, 5, 7], policy [425] -> [8, 5, 5, 7], [8, 425].

        The policy transform permutes actions: points move with the board and the direction
        of a step or jump turns with it.
        """
        obs8, _ = core.dihedral_symmetries(obs, jnp.zeros(P, obs.dtype), N, N)
        return obs8, policy[jnp.asarray(_SYMMETRY_SRC)]

    # ---------------------------------------------------------------- host side
    def state_from_board(
        self, board: str, player: int = 0, placed: int = NUM_GOATS, captured: int = 0
    ) -> core.State:
        """A state from a text diagram (host side; for tests, puzzles and analysis).

        Args:
          board: 5 rows of `T`/`G`/`.` (row 5 first; spaces ignored).
          player: who moves, 0 = goats, 1 = tigers.
          placed: goats placed so far; captured: goats captured so far.
        Returns:
          an unbatched, unfinished state whose repetition history holds just this position
          (once all goats are placed), at the ply a game reaches it first: `2 * placed -
          player` plies played (the goats place on even plies), so the move limit counts
          those too and the history, sized for a game from `init`, never overflows (it
          did, and missed a draw, when such a state started at ply 0).
        Raises:
          ValueError: a malformed board, inconsistent counts, a finished position, or one
            no game reaches before the move limit.
        """
        rows = [r.replace(" ", "") for r in board.strip().splitlines() if r.strip()]
        if len(rows) != N or any(len(r) != N or set(r) - set("TG.") for r in rows):
            raise ValueError(f"expected {N} rows of {N} characters T, G or ., got {board!r}")
        if player not in (0, 1) or not 0 <= captured < WIN_CAPTURES or not placed <= NUM_GOATS:
            raise ValueError("player must be 0 or 1, captured 0..4 and placed at most 20")
        ply = max(2 * placed - player, 0)
        if ply >= self.max_steps:
            raise ValueError(f"a game reaches this position at ply {ply} at the earliest: not "
                             f"before the move limit (max_steps={self.max_steps})")
        cells = "".join(rows)
        if cells.count("T") != 4 or cells.count("G") != placed - captured:
            raise ValueError("need 4 tigers and placed - captured goats on the board")
        goats = jnp.uint32(sum(1 << p for p, ch in enumerate(cells) if ch == "G"))
        tigers = jnp.uint32(sum(1 << p for p, ch in enumerate(cells) if ch == "T"))
        state = self.init(jax.random.PRNGKey(0))
        counted = placed >= NUM_GOATS
        game = state.game._replace(
            goats=goats,
            tigers=tigers,
            placed=jnp.int32(placed),
            captured=jnp.int32(captured),
            history=state.game.history.at[0].set(_arrangement_key(goats, tigers)),
            hist_len=jnp.int32(1 if counted else 0),
        )
        words = _move_words(game.goats, game.tigers, game.placed, jnp.asarray(player == 1))
        if not np.any(np.asarray(words)):
            raise ValueError("the side to move has no legal move: the game is already over")
        state = state.replace(
            game=game,
            current_player=jnp.int32(player),
            legal_action_mask=_words_to_mask(words),
            step_count=jnp.int32(ply),
        )
        return state.replace(observation=self._observe(state))

    @staticmethod
    def _cells(state) -> list[str]:
        """The 25 points as 'T', 'G' or '.'."""
        goats, tigers = int(state.game.goats), int(state.game.tigers)
        return ["T" if tigers >> p & 1 else "G" if goats >> p & 1 else "." for p in range(P)]

    def render(self, state) -> str:
        cells = self._cells(state)
        lines = []
        for r in range(N):
            lines.append(f"{N - r}  " + "---".join(cells[r * N : (r + 1) * N]))
            if r < N - 1:
                diag = ("\\", "/") if r % 2 == 0 else ("/", "\\")
                lines.append("   " + " ".join(f"| {diag[c % 2]}" for c in range(N - 1)) + " |")
        lines.append("   " + "   ".join(chr(ord("A") + c) for c in range(N)))
        placed, captured = int(state.game.placed), int(state.game.captured)
        lines.append(f"goats in hand: {NUM_GOATS - placed}  captured: {captured}/{WIN_CAPTURES}")
        if bool(state.terminated) or bool(state.truncated):
            r = np.asarray(state.rewards)
            result = "goats win" if r[0] > 0 else "tigers win" if r[1] > 0 else "draw"
            lines.append(f"game over: {result}")
        else:
            side = "tigers" if int(state.current_player) == 1 else "goats"
            lines.append(f"to move: {side}")
        return "\n".join(lines)

    def action_to_str(self, action: int) -> str:
        action = int(action)
        if not 0 <= action < NUM_ACTIONS:
            return f"<action {action} out of range>"
        plane, p = divmod(action, P)
        src = _name(p)
        if plane == 0:
            return src
        if not _VALID[action]:
            kind = "jump" if plane >= 9 else "step"
            return f"{src}:{kind}-{DIR_NAMES[(plane - 1) % 8]}(no line)"
        return f"{src}{'x' if plane >= 9 else '-'}{_name(int(_DST[action]))}"

    def _parse(self, text: str) -> int:
        m = re.fullmatch(r"([a-z]\d+)(?:\s*[-x]?\s*([a-z]\d+))?", text, re.IGNORECASE)
        if not m:
            raise ValueError(
                f"cannot read {text!r}: expected one point to place a goat (like C3) or two "
                "points to move (like A1-B2; a jump names the landing point, like A1-C3)"
            )
        r1, c1 = core.parse_point(m.group(1), N, N)
        if m.group(2) is None:
            return r1 * N + c1
        r2, c2 = core.parse_point(m.group(2), N, N)
        a, b = _name(r1 * N + c1), _name(r2 * N + c2)
        dr, dc = r2 - r1, c2 - c1
        k = max(abs(dr), abs(dc))
        if k == 0:
            raise ValueError(f"{text!r}: a move needs two different points")
        if k > 2 or abs(dr) not in (0, k) or abs(dc) not in (0, k):
            raise ValueError(f"{b} is not adjacent to {a} along a line, nor a jump away")
        d = int(np.flatnonzero((_DIRS[:, 0] == dr // k) & (_DIRS[:, 1] == dc // k))[0])
        action = ((1 if k == 1 else 9) + d) * P + r1 * N + c1
        if not _VALID[action]:
            where = "adjacent to" if k == 1 else "a jump away from"
            raise ValueError(
                f"{b} is not {where} {a} along a line: diagonal lines pass only through points "
                "whose column letter and row number have the same parity (A1, B2, C1, C3, ...)"
            )
        return action

    def _illegal_reason(self, state, action: int) -> str:
        action = int(action)
        if not 0 <= action < NUM_ACTIONS:
            return f"action {action} is out of range 0..{NUM_ACTIONS - 1}"
        cells = self._cells(state)
        placed = int(state.game.placed)
        tiger = int(state.current_player) == 1
        plane, p = divmod(action, P)
        piece = "T" if tiger else "G"
        kind = {"T": "a tiger", "G": "a goat"}
        if plane == 0:
            if tiger:
                return "tigers are never placed; move a tiger by naming two points, like A1-B2"
            if placed >= NUM_GOATS:
                return "all 20 goats are placed; move a goat by naming two points, like A1-B2"
            if cells[p] != ".":
                return f"{_name(p)} is occupied by {kind[cells[p]]}"
        else:
            if not tiger and placed < NUM_GOATS:
                left = NUM_GOATS - placed
                return f"goats are still being placed ({left} left); name one empty point, like C3"
            if not _VALID[action]:
                return f"there is no line from {_name(p)} for {self.action_to_str(action)}"
            src, dst, mid = _name(p), _name(int(_DST[action])), _name(int(_MID[action]))
            if cells[p] != piece:
                return f"there is no {'tiger' if tiger else 'goat'} on {src}"
            if plane >= 9 and not tiger:
                return "goats cannot jump; a goat steps to an adjacent point"
            if cells[int(_DST[action])] != ".":
                return f"{dst} is occupied by {kind[cells[int(_DST[action])]]}"
            if plane >= 9 and cells[int(_MID[action])] != "G":
                return f"no goat to jump on {mid}"
        return super()._illegal_reason(state, action)


def _name(p: int) -> str:
    return core.point_name(p // N, p % N, N)
