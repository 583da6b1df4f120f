"""A small Gomoku threat solver (numpy, host side): fives, fours, open fours, threes, VCF.

    board, player = board_from_moves(moves, size=15)      # int8[N, N], -1 empty
    winning_points(board, player)       # bool[N, N]  points that make five now
    open_four_moves(board, player)      # bool[N, N]  points that make >= 2 winning points
    vcf_moves(board, player, 3)         # bool[N, N]  first moves of a VCF in <= 3 moves
    classify(board, player)             # Tactic(category, answers) or None
    clustered_games(9, games, plies, seed)  # move lists of random games with threats

Definitions (for the side to move, `player`; the opponent is `1 - player`):

* winning point: an empty point where `player`'s stone makes five: five or more in a row
  with `rule="freestyle"`, exactly five (an overline does not count) with `rule="standard"`,
  as `envs/gomoku.py` decides a win. Both rules are supported everywhere here.
* four: a position where `player` has at least one winning point; a move "makes a four"
  when `player` has a winning point after it.
* open four (win in two): a move after which `player` has two or more winning points. When
  the opponent has no winning point of his own, he cannot stop both: the mover wins with
  his next move. This includes double fours (4-4), not just `.XXXX.`.
* open three (of the opponent): the opponent has a move that makes an open four. A
  defence is a move after which the opponent has no such move any more.
* VCF (victory by continuous fours) in at most k attacker moves: every attacker move makes
  a four (or five), each four has exactly one winning point so the defender's reply is
  forced, the defender never has a five of his own when he replies, and the attacker makes
  five by his k-th move. When the defender already has a four, the attacker's move must
  block it (and still make a four). A move that makes an open four ends the VCF early.

`classify` labels a position by the first category that applies, in this order:
win_in_one, block_four, open_four_win, vcf3, block_open_three. Its `answers` are the set of
correct moves (see `classify`). The solver knows no renju restrictions (none in the env).

Costs: a winning-point scan is a few dozen vectorised numpy operations on the board; move
generators only try points that have three of the player's stones within four points on
a line, so a full `classify` takes a few milliseconds to a few tens on 15x15.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

RULES = ("freestyle", "standard")
CATEGORIES = ("win_in_one", "block_four", "open_four_win", "vcf3", "block_open_three")
# block_open_three: a position whose mover has a VCF of at most this many fours is not one
# (until stop 35 it was 3, and 12 of the 9x9 suite's 250 and 21 of the 15x15's had one of
# 4-5 moves: they are dropped from the shipped suites).
DEFENCE_VCF_MOVES = 5
EMPTY = -1
_PAD = 5  # padding on each side: five cells each way tell five from an overline
_DIRS = ((0, 1), (1, 0), (1, 1), (1, -1))


class Tactic(NamedTuple):
    category: str  # one of CATEGORIES
    answers: np.ndarray  # bool[N, N]  the correct moves


def board_from_moves(moves, size: int) -> tuple[np.ndarray, int]:
    """The board after `moves` (actions row * size + col, black first) and the player to move.

    Raises:
      ValueError: an action off the board or on an occupied point.
    """
    board = np.full((size, size), EMPTY, np.int8)
    for i, a in enumerate(moves):
        a = int(a)
        if not 0 <= a < size * size:
            raise ValueError(f"move {i + 1}: action {a} is off the {size}x{size} board")
        r, c = divmod(a, size)
        if board[r, c] != EMPTY:
            raise ValueError(f"move {i + 1}: action {a} is on an occupied point")
        board[r, c] = i % 2
    return board, len(moves) % 2


def clustered_games(size: int, games: int, plies: int, seed: int) -> list[list[int]]:
    """Move lists (actions from the empty board, black first) of random games that play
    next to the stones, so that threats arise: each move is uniform among the empty points
    within two of a stone; a game stops at `plies` or, with probability 1/2, once someone
    has a winning point, and is then cut at a random ply of its second half. Callers
    leave out the positions they do not want (a win at once, a game already over).
    Test and benchmark positions (tests/test_threats.py, `bench threats`)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(games):
        board = np.full((size, size), EMPTY, np.int8)
        moves = []
        for ply in range(plies):
            empty = board == EMPTY
            near = np.zeros_like(empty)
            for r, c in zip(*np.nonzero(~empty), strict=True):
                near[max(0, r - 2):r + 3, max(0, c - 2):c + 3] = True
            cands = np.flatnonzero(empty & near) if moves else [size * size // 2]
            a = int(rng.choice(cands))
            board.flat[a] = ply % 2
            moves.append(a)
            if winning_points(board, 0).any() or winning_points(board, 1).any():
                if rng.random() < 0.5:
                    break
        out.append(moves[:int(rng.integers(len(moves) // 2, len(moves) + 1))])
    return out


def _check(board: np.ndarray, player: int, rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; accepted: {', '.join(RULES)}")
    if player not in (0, 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}")
    if board.ndim != 2 or board.shape[0] != board.shape[1]:
        raise ValueError(f"board must be square [N, N], got shape {board.shape}")


@functools.cache
def _line_index(n: int) -> np.ndarray:
    """Flat indices into the padded board of the points k = 1..5 steps away from each board
    point, per direction and way: int[4 directions, 2 ways, 5 steps, N, N]."""
    width = n + 2 * _PAD
    r, c = np.meshgrid(np.arange(n) + _PAD, np.arange(n) + _PAD, indexing="ij")
    steps = np.arange(1, _PAD + 1)[:, None, None]
    return np.stack([np.stack([(r + sign * steps * dr) * width + (c + sign * steps * dc)
                               for sign in (1, -1)]) for dr, dc in _DIRS])


def _lines(board: np.ndarray, player: int) -> np.ndarray:
    """Whether each of the 5 points each way along each line from every point holds one of
    `player`'s stones (off the board: no). bool[4 directions, 2 ways, 5 steps, N, N]."""
    n = board.shape[0]
    own = np.zeros((n + 2 * _PAD, n + 2 * _PAD), bool)  # the padding holds no stone
    own[_PAD:_PAD + n, _PAD:_PAD + n] = board == player
    return own.reshape(-1)[_line_index(n)]


def winning_points(board: np.ndarray, player: int, rule: str = "freestyle") -> np.ndarray:
    """Empty points where `player`'s stone makes five (see the module docstring).

    Args:
      board: int8[N, N], -1 empty, 0 black, 1 white.
      player: 0 or 1 (need not be the side to move).
      rule: "freestyle" or "standard".
    Returns:
      bool[N, N].
    """
    _check(board, player, rule)
    # Own stones in a row next to each point, both ways, each way capped at 5 (the point
    # itself not counted): the stones up to the first point that is not one of them.
    runs = np.logical_and.accumulate(_lines(board, player), axis=2).sum(axis=(1, 2))
    length = runs + 1  # [4, N, N]: the line a stone on the point would make
    win = (length >= 5) if rule == "freestyle" else (length == 5)
    return win.any(0) & (board == EMPTY)


def _near_three(board: np.ndarray, player: int) -> np.ndarray:
    """Empty points with at least 3 of `player`'s stones within 4 points on one line: the
    only points where a new stone can create a new winning point. bool[N, N]."""
    count = _lines(board, player)[:, :, :4].sum(axis=(1, 2))  # [4, N, N]
    return (count >= 3).any(0) & (board == EMPTY)


def _with(board: np.ndarray, point: int, player: int) -> np.ndarray:
    b = board.copy()
    b.flat[point] = player
    return b


def count_after(board: np.ndarray, player: int, rule: str = "freestyle") -> np.ndarray:
    """For every empty point p: how many winning points `player` has after playing p.

    Returns int32[N, N] (0 on occupied points). Exact: points that cannot create a new
    winning point (see `_near_three`) keep the current ones, minus p itself; in the
    standard rule a stone can also spoil an existing five (overline), so while `player`
    already has winning points every empty point is recomputed.
    """
    current = winning_points(board, player, rule)
    out = np.zeros(board.shape, np.int32)
    if current.any():
        cands = board == EMPTY
    else:
        cands = _near_three(board, player)
    for p in np.flatnonzero(cands):
        out.flat[p] = winning_points(_with(board, p, player), player, rule).sum()
    return out


def four_moves(board: np.ndarray, player: int, rule: str = "freestyle") -> np.ndarray:
    """Empty points after which `player` has at least one winning point. bool[N, N]."""
    return count_after(board, player, rule) >= 1


def open_four_moves(board: np.ndarray, player: int, rule: str = "freestyle") -> np.ndarray:
    """Empty points after which `player` has two or more winning points (an open four or a
    double four). bool[N, N]."""
    return count_after(board, player, rule) >= 2


def _line_reach(n: int, point: int, radius: int = 5) -> np.ndarray:
    """The point and the points on its 4 lines within `radius`. bool[N, N]."""
    r, c = divmod(int(point), n)
    out = np.zeros((n, n), bool)
    out[r, c] = True
    for dr, dc in _DIRS:
        for k in range(-radius, radius + 1):
            rr, cc = r + k * dr, c + k * dc
            if 0 <= rr < n and 0 <= cc < n:
                out[rr, cc] = True
    return out


def open_three_defences(board: np.ndarray, player: int, rule: str = "freestyle"):
    """Moves of `player` after which the opponent has no open-four move any more.

    Returns:
      (threats, defences): bool[N, N] each; `threats` are the opponent's open-four moves
      now (all False: no open three to stop, and `defences` is then all False too).
    """
    opp = 1 - player
    threats = open_four_moves(board, opp, rule)
    defences = np.zeros(board.shape, bool)
    if not threats.any():
        return threats, defences
    cands = board == EMPTY
    if not winning_points(board, opp, rule).any():
        # A stone stops an open-four move f only on f or on f's lines near it.
        for f in np.flatnonzero(threats):
            cands = cands & _line_reach(board.shape[0], f)
    for m in np.flatnonzero(cands):
        if not open_four_moves(_with(board, m, player), opp, rule).any():
            defences.flat[m] = True
    return threats, defences


def _vcf_wins(board: np.ndarray, player: int, rule: str, moves_left: int) -> bool:
    """Whether `player` (to move) wins by continuous fours within `moves_left` moves."""
    return bool(vcf_moves(board, player, moves_left, rule, first_only=True).any())


def vcf_moves(board: np.ndarray, player: int, max_moves: int = 3, rule: str = "freestyle",
              first_only: bool = False) -> np.ndarray:
    """First moves of every VCF of `player` (to move) in at most `max_moves` of his moves.

    A winning point counts as a VCF of one move. See the module docstring for the rules
    of the search.

    Args:
      board: int8[N, N]; player: the attacker, who moves now; max_moves: >= 1.
      first_only: stop at the first winning move found (for the recursion).
    Returns:
      bool[N, N].
    """
    _check(board, player, rule)
    wins = winning_points(board, player, rule)
    if wins.any() or max_moves <= 1:
        return wins
    opp = 1 - player
    threats = winning_points(board, opp, rule)
    out = np.zeros(board.shape, bool)
    if threats.sum() >= 2:
        return out
    cands = threats if threats.any() else _near_three(board, player)
    for m in np.flatnonzero(cands):
        after = _with(board, m, player)
        fives = winning_points(after, player, rule)
        if not fives.any() or winning_points(after, opp, rule).any():
            continue  # not a four, or the defender makes five now
        if fives.sum() >= 2:
            out.flat[m] = True
        else:
            reply = _with(after, int(np.flatnonzero(fives)[0]), opp)  # forced block
            out.flat[m] = _vcf_wins(reply, player, rule, max_moves - 1)
        if out.flat[m] and first_only:
            break
    return out


def classify(board: np.ndarray, player: int, rule: str = "freestyle") -> Tactic | None:
    """The tactical category of a position for the side to move, or None.

    In order, the first that applies:
      win_in_one: `player` has winning points; answers: all of them.
      block_four: the opponent has exactly one winning point; answers: that point. (With
        two or more the position is lost, and it gets no category.)
      open_four_win: `player` has moves that make two or more winning points (the
        opponent has no four); answers: all such moves.
      vcf3: `player` has a VCF in exactly three moves (none shorter); answers: the first
        moves of every VCF of at most three moves. A non-four move that wins as fast (a
        double three, say) is not a VCF and is not among the answers.
      block_open_three: the opponent has open-four moves, `player` has no VCF in
        `DEFENCE_VCF_MOVES` and can stop them all; answers: every move that leaves the
        opponent no open-four move and no VCF in `DEFENCE_VCF_MOVES` (not every legal
        move, else nothing is tested). A mover with a longer VCF wins by force whatever
        the three: the position gets no category (the answers would call his winning
        fours mistakes); nor does one where every stop of the three leaves him a VCF (a
        four-three, say: the position is lost, and no answer would be right).
    """
    _check(board, player, rule)
    empty = board == EMPTY
    if not empty.any():
        return None
    wins = winning_points(board, player, rule)
    if wins.any():
        return Tactic("win_in_one", wins)
    threats = winning_points(board, 1 - player, rule)
    if threats.sum() == 1:
        return Tactic("block_four", threats)
    if threats.any():
        return None
    open_fours = open_four_moves(board, player, rule)
    if open_fours.any():
        return Tactic("open_four_win", open_fours)
    vcf = vcf_moves(board, player, 3, rule)
    if vcf.any():
        return Tactic("vcf3", vcf)
    opp_threats, defences = open_three_defences(board, player, rule)
    if not opp_threats.any() or vcf_moves(board, player, DEFENCE_VCF_MOVES, rule).any():
        return None
    for m in np.flatnonzero(defences):  # a stop of the three that leaves him a VCF loses
        defences.flat[m] = not _vcf_wins(_with(board, m, player), 1 - player, rule,
                                         DEFENCE_VCF_MOVES)
    if defences.any() and defences.sum() < empty.sum():
        return Tactic("block_open_three", defences)
    return None


@functools.cache
def _symmetry_index(n: int) -> np.ndarray:
    """int[8, N*N]: for each dihedral symmetry, the source point of every target point."""
    grid = np.arange(n * n).reshape(n, n)
    out = []
    for k in range(4):
        rot = np.rot90(grid, k)
        out += [rot.ravel(), np.fliplr(rot).ravel()]
    return np.stack(out)


def canonical_key(board: np.ndarray, player: int) -> bytes:
    """The same bytes for a position and its 7 dihedral images (the side to move
    included), for deduplication."""
    n = board.shape[0]
    flat = board.ravel()
    images = flat[_symmetry_index(n)]  # [8, N*N]
    return bytes([player]) + min(img.tobytes() for img in images)
