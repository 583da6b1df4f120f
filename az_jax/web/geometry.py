"""What the front ends need to draw a game: its geometry (once), each position (as JSON),
and how a finished game ended (`outcome`: the reason and the winning line, also used by the
terminal).

The page is generic: it draws a board of `rows` x `cols` points or cells of a `kind`, and
maps every action to a (from, to) pair of cell indices (row * cols + col, row 0 at the top):

  kind "grid"      tic-tac-toe: cells; action = to = the cell, from = -1
  kind "gomoku"    stones on the intersections, star points; action = to = the point
  kind "connect4"  columns; to = the column (the stone falls to the lowest empty cell)
  kind "baghchal"  points joined by `lines`; a placement has from = -1, a step or jump
                   goes from -> to (the landing point)

Boards are lists of -1 (empty) or the owner (0 or 1) per cell.
"""

from __future__ import annotations

import functools

import numpy as np

from envs import core

KINDS = {"tictactoe": "grid", "gomoku": "gomoku", "connect4": "connect4",
         "baghchal": "baghchal"}


def supported(env) -> bool:
    return env.id in KINDS


def _check(env) -> None:
    if not supported(env):
        raise ValueError(f"the web front end has no board for {env.id!r}; it knows "
                         f"{', '.join(sorted(KINDS))}")


def shape(env) -> tuple[int, int]:
    """(rows, cols) of the drawn board."""
    _check(env)
    if env.id == "tictactoe":
        return 3, 3
    if env.id == "connect4":
        return 6, 7
    if env.id == "gomoku":
        return env.size, env.size
    return 5, 5


def star_points(n: int) -> list[int]:
    """The marked points of an n x n Gomoku board (as on a Go board)."""
    if n < 7:
        return [(n // 2) * n + n // 2] if n % 2 else []
    e = 3 if n >= 13 else 2
    coords = [e, n - 1 - e]
    points = [r * n + c for r in coords for c in coords]
    if n % 2:
        mid = n // 2
        points.append(mid * n + mid)
        if n >= 19:
            points += [e * n + mid, (n - 1 - e) * n + mid, mid * n + e, mid * n + n - 1 - e]
    return sorted(points)


def _baghchal_lines() -> list[list[int]]:
    """Segments between neighbouring points; diagonals only through even (row + col)."""
    lines = []
    for r in range(5):
        for c in range(5):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                r2, c2 = r + dr, c + dc
                if not (0 <= r2 < 5 and 0 <= c2 < 5):
                    continue
                if dr and dc and (r + c) % 2:
                    continue
                lines.append([r * 5 + c, r2 * 5 + c2])
    return lines


def _endpoints(env, rows: int, cols: int) -> tuple[list[int], list[int]]:
    """action -> (from cell or -1, to cell or -1)."""
    if env.id in ("tictactoe", "gomoku"):
        return [-1] * env.num_actions, list(range(env.num_actions))
    if env.id == "connect4":
        return [-1] * env.num_actions, list(range(env.num_actions))
    src, dst = [], []
    for a in range(env.num_actions):  # Bagh-Chal: read the env's own notation
        text = env.action_to_str(a)
        parts = text.replace("x", "-").split("-")
        try:
            points = [core.parse_point(p, rows, cols) for p in parts]
        except ValueError:  # an action along no line
            src.append(-1)
            dst.append(-1)
            continue
        cells = [r * cols + c for r, c in points]
        src.append(cells[0] if len(cells) == 2 else -1)
        dst.append(cells[-1])
    return src, dst


def describe(env) -> dict:
    """The static geometry of the game (served once by /api/info)."""
    rows, cols = shape(env)
    src, dst = _endpoints(env, rows, cols)
    geo = {
        "kind": KINDS[env.id],
        "rows": rows,
        "cols": cols,
        "num_actions": int(env.num_actions),
        "action_from": src,
        "action_to": dst,
        "col_labels": [chr(ord("A") + c) for c in range(cols)],
        "row_labels": [str(rows - r) for r in range(rows)],
    }
    if env.id == "gomoku":
        geo["star_points"] = star_points(env.size)
    if env.id == "connect4":
        geo["col_labels"] = [str(c + 1) for c in range(cols)]
        geo["row_labels"] = [""] * rows
    if env.id == "baghchal":
        geo["lines"] = _baghchal_lines()
    return geo


def board(env, state) -> list[int]:
    """The cells of a position: -1 empty, else the owner (0 or 1; Bagh-Chal: goats 0)."""
    _check(env)
    if env.id == "baghchal":
        goats, tigers = int(state.game.goats), int(state.game.tigers)
        return [1 if tigers >> p & 1 else 0 if goats >> p & 1 else -1 for p in range(25)]
    return [int(v) for v in np.asarray(state.game.board).reshape(-1)]


def move_cells(env, before, action: int) -> tuple[int, int]:
    """(from, to) cells of `action` played from `before` (Connect4: the landing cell)."""
    rows, cols = shape(env)
    if env.id == "connect4":
        column = np.asarray(before.game.board)[:, action]
        row = int(np.sum(column == -1)) - 1
        return -1, row * cols + int(action)
    src, dst = _endpoints_cached(env)
    return src[action], dst[action]


@functools.lru_cache(maxsize=16)
def _endpoints_cached(env):
    return _endpoints(env, *shape(env))


def extra(env, state) -> dict:
    """Game-specific counters shown beside the board."""
    if env.id == "baghchal":
        placed, captured = int(state.game.placed), int(state.game.captured)
        return {"goats_in_hand": 20 - placed, "captured": captured}
    return {}


# ---------------------------------------------------------------------- the end of a game
_IN_A_ROW = {"tictactoe": 3, "connect4": 4, "gomoku": 5}
_COUNT_WORDS = {3: "three", 4: "four", 5: "five"}


def _runs(cells: np.ndarray, player: int, k: int, exact: bool) -> list[list[int]]:
    """Maximal runs of `player` in int[rows, cols] along the 4 line directions, of length
    >= k (== k when `exact`), as flat cell lists."""
    rows, cols = cells.shape
    runs = []
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        for r in range(rows):
            for c in range(cols):
                pr, pc = r - dr, c - dc
                if cells[r, c] != player or (
                        0 <= pr < rows and 0 <= pc < cols and cells[pr, pc] == player):
                    continue  # not the start of a run
                run, rr, cc = [], r, c
                while 0 <= rr < rows and 0 <= cc < cols and cells[rr, cc] == player:
                    run.append(rr * cols + cc)
                    rr, cc = rr + dr, cc + dc
                if len(run) == k or (len(run) > k and not exact):
                    runs.append(run)
    return runs


def winning_line(env, state) -> list[int]:
    """The cells (row * cols + col, as `board`) of the winner's line at a won position of an
    n-in-a-row game (tic-tac-toe, Connect4, Gomoku): the runs through the last stone, or
    every winning run when the game does not record the last stone. [] otherwise."""
    k = _IN_A_ROW.get(getattr(env, "id", None))
    winner = _winner(state)
    if k is None or winner is None:
        return []
    rows, cols = shape(env)
    cells = np.asarray(state.game.board).reshape(rows, cols)
    exact = getattr(env, "rule", "freestyle") == "standard"
    runs = _runs(cells, winner, k, exact)
    last = int(getattr(state.game, "last", -1))
    through = [run for run in runs if last in run]
    return sorted({cell for run in (through or runs) for cell in run})


def _winner(state) -> int | None:
    rewards = np.asarray(state.rewards)
    return 0 if rewards[0] > 0 else 1 if rewards[1] > 0 else None


def cell_name(env, cell: int) -> str:
    """A drawn cell in words: the point name (E5), or column and row for Connect4."""
    rows, cols = shape(env)
    r, c = divmod(int(cell), cols)
    if env.id == "connect4":
        return f"column {c + 1} row {rows - r}"
    return core.point_name(r, c, rows)


def outcome(env, state) -> dict:
    """How a finished game ended, for the front ends.

    Returns:
      {"winner": 0, 1 or None (a draw), "reason": why, in words ("" when the game cannot
      tell), "line": the winning cells (`winning_line`)}.
    """
    winner = _winner(state)
    result = {"winner": winner, "reason": "", "line": []}
    env_id = getattr(env, "id", None)
    if bool(np.asarray(state.truncated)) and winner is None:
        limit = getattr(env, "max_steps", None)
        result["reason"] = f"move limit reached ({limit} plies)" if limit else \
            "move limit reached"
        return result
    if env_id in _IN_A_ROW:
        if winner is None:
            result["reason"] = "the board is full"
        else:
            line = winning_line(env, state)
            result["line"] = line
            words = _COUNT_WORDS[_IN_A_ROW[env_id]]
            if line:
                result["reason"] = f"{words} in a row: " + ", ".join(
                    cell_name(env, c) for c in line)
    elif env_id == "baghchal":
        game = state.game
        if winner is None:
            result["reason"] = ("repetition: the same arrangement of pieces occurred a "
                                "third time")
        elif winner == 1 and int(game.captured) >= 5:
            result["reason"] = "the tigers captured 5 goats"
        elif winner == 1:
            result["reason"] = "the goats have no legal move"
        else:
            result["reason"] = "the tigers are trapped: no tiger can move"
    return result
