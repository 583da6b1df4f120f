"""Connect4 positions in Pascal Pons's file format, and the perfect solver that labels them.

File format: Pascal Pons's test sets (http://blog.gamesolver.org), one position a line,

    <moves> <score> [<column scores>]

  moves          the position, as the 1-based columns (1-7) played from the empty board;
  score          the solver's score for the side to move: 0 draw, > 0 win, < 0 loss
                 (Pons's scale: a win is worth 22 - the number of stones the winner plays);
  column scores  (optional, az_jax's extension) the scores of playing columns 1..7, same
                 scale and point of view as `score`, comma-separated, `x` for a full
                 column, e.g. `-2,-1,0,1,0,-1,-2`; `score` must be their maximum.

Blank lines and lines starting with `#` are ignored. A position must be legal and not
finished. Any other line is an error that names the file, the line number and why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import os
import random as _random
import re
import secrets
import shutil
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

ROWS, COLS = 6, 7
MAX_SCORE = 22  # |score| on Pons's scale
FULL = None  # column score of a full column
_SCORE = re.compile(r"[+-]?[0-9]{1,3}")  # ASCII digits: int() would take "1_0" or "٣"
_BITBULLY_HINT = ("needs the optional Connect4 solver bitbully (AGPL): pip install bitbully")


@dataclasses.dataclass(frozen=True)
class Position:
    """One solved position."""

    moves: str  # 1-based column digits from the empty board, e.g. "4453"
    score: int  # for the side to move: 0 draw, > 0 win, < 0 loss
    column_scores: tuple[int | None, ...] | None = None  # 7 scores, None = full column

    @property
    def actions(self) -> list[int]:
        """The moves as env actions (0-based columns)."""
        return [int(c) - 1 for c in self.moves]

    def outcomes(self) -> np.ndarray:
        """int8[7]: +1/0/-1 outcome of each column for the mover; -2 for a full column."""
        if self.column_scores is None:
            raise ValueError(f"position {self.moves!r} has no column scores")
        return np.array([-2 if s is None else int(np.sign(s)) for s in self.column_scores],
                        np.int8)

    def to_line(self) -> str:
        if not self.moves:  # "<moves>" would be empty: the line would not read back
            raise ValueError("the empty board has no line in Pons's format (moves: 1-42 "
                             "columns)")
        text = f"{self.moves} {self.score}"
        if self.column_scores is not None:
            text += " " + ",".join("x" if s is None else str(s) for s in self.column_scores)
        return text


# =========================================================================== parsing
def _check_moves(moves: str) -> tuple[np.ndarray, str | None]:
    """Replays `moves` on a host board. Returns (heights, None) or (_, why it is bad)."""
    board = np.full((ROWS, COLS), -1, np.int8)  # row 0 at the bottom here
    heights = np.zeros(COLS, np.int64)
    for i, ch in enumerate(moves):
        if ch < "1" or ch > "7":
            return heights, f"move {i + 1} is {ch!r}; moves are the columns 1-7"
        col = int(ch) - 1
        if heights[col] >= ROWS:
            return heights, f"move {i + 1} plays column {ch}, which is full"
        row, player = heights[col], i % 2
        board[row, col] = player
        heights[col] += 1
        if _wins(board, row, col, player):
            return heights, f"the game is already won at move {i + 1} of {len(moves)}"
    if heights.sum() >= ROWS * COLS:
        return heights, "the board is full (the game is over)"
    return heights, None


def _wins(board: np.ndarray, row: int, col: int, player: int) -> bool:
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < ROWS and 0 <= c < COLS and board[r, c] == player:
                run += 1
                r, c = r + sign * dr, c + sign * dc
        if run >= 4:
            return True
    return False


def _show(text: str, limit: int = 50) -> str:
    """`repr(text)` cut to `limit` characters (a bad line may be megabytes long)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _score(text: str, what: str, where: str, alternative: str = "") -> int:
    """A score in [-22, 22]; ValueError "<where>: <what> ..." otherwise."""
    if not _SCORE.fullmatch(text):
        raise ValueError(f"{where}: {what} {_show(text)} is not an integer{alternative}")
    score = int(text)
    if abs(score) > MAX_SCORE:
        raise ValueError(f"{where}: {what} {score} is outside [-22, 22] (Pons's scale)")
    return score


def parse_line(text: str, where: str = "<line>") -> Position | None:
    """One line -> a Position (None for blank and comment lines).

    Raises:
      ValueError: `"<where>: <why>"`, e.g. "set.txt:12: column 3 is full".
    """
    line = text.strip()
    if not line or line.startswith("#"):
        return None
    fields = line.split()
    if len(fields) not in (2, 3):
        raise ValueError(f"{where}: expected '<moves> <score> [<7 column scores>]', got "
                         f"{len(fields)} field(s): {_show(line, 80)}")
    moves, score_text = fields[0], fields[1]
    if not (moves.isascii() and moves.isdigit()):
        raise ValueError(f"{where}: moves {_show(moves)} must be digits 1-7 (the columns)")
    heights, why = _check_moves(moves)
    if why:
        raise ValueError(f"{where}: illegal position: {why}")
    score = _score(score_text, "score", where)
    columns = None
    if len(fields) == 3:
        items = fields[2].split(",")
        if len(items) != COLS:
            raise ValueError(f"{where}: expected 7 comma-separated column scores, got "
                             f"{len(items)}: {_show(fields[2])}")
        columns = []
        for c, item in enumerate(items):
            full = heights[c] >= ROWS
            if item == "x":
                if not full:
                    raise ValueError(f"{where}: column {c + 1} is marked full ('x') but is not")
                columns.append(FULL)
                continue
            if full:
                raise ValueError(f"{where}: column {c + 1} is full; its score must be 'x'")
            columns.append(_score(item, f"column {c + 1} score", where, " or 'x'"))
        best = max(s for s in columns if s is not None)
        if best != score:
            raise ValueError(f"{where}: score {score} is not the best column score {best}")
        columns = tuple(columns)
    return Position(moves, score, columns)


def read_positions(path, allow_empty: bool = False) -> list[Position]:
    """Reads a solver set file.

    Raises:
      FileNotFoundError: no such file. ValueError: a malformed line ("file:line: why") or
      a file without positions (unless `allow_empty`: an older `make-sets` wrote one for
      a set its games reached no position of; it now refuses to).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no solver set file {path}")
    positions = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, text in enumerate(f, 1):
            pos = parse_line(text, f"{path}:{lineno}")
            if pos is not None:
                positions.append(pos)
    if not positions and not allow_empty:
        raise ValueError(f"{path}: no positions (expected lines '<moves> <score> [...]')")
    return positions


def format_positions(positions: Iterable[Position], header: str = "") -> str:
    """A solver set file's text: `header` as `#` lines, then a line per position.

    Raises:
      ValueError: no positions (`read_positions` would refuse the file), or a position
      the format cannot hold.
    """
    lines = [p.to_line() for p in positions]
    if not lines:
        raise ValueError("no positions to write: a solver set file needs at least one")
    head = [f"# {h}" for h in header.splitlines()] if header else []
    return "\n".join(head + lines) + "\n"


def write_positions(path, positions: Iterable[Position], header: str = "") -> None:
    """Writes a solver set file atomically (see `format_positions`, `write_files`)."""
    write_files({path: format_positions(positions, header)})


def write_files(texts: dict) -> None:
    """Writes {path: text}, all files or none.

    Several files in one folder that holds nothing else (a new or empty folder, or the
    group written before: make-sets' nine sets) are written to a new folder beside it,
    which then takes its place: one rename where the folder is empty, else two (the old
    folder aside, the new one in) and the old one removed. A kill at any point leaves the
    old group or the new one, never a mix (between the two renames the folder is missing
    and the old group waits beside it as `.<folder>.old-*`; a kill while writing leaves a
    partial `.<folder>.new-*` beside it, which nothing reads).

    Otherwise (other files there, or a folder that cannot be swapped unnoticed:
    `_owned_folder`, or whose rename the system refuses) each text goes to a temporary
    file beside its path (with the mode of the file
    it replaces), and only once all are written do they replace their paths, each by an
    atomic rename: an error while writing (a full disk) leaves every path as it was; only
    the renames, last, could stop half-way (a kill, a path that is a folder).
    """
    paths = [Path(path) for path in texts]
    for folder in {path.parent for path in paths}:
        recover_swap(folder)
    for path in paths:
        if not path.parent.is_dir():
            raise FileNotFoundError(f"no folder {path.parent} to write {path.name} in")
    folder = _owned_folder(paths)
    if folder is not None and _swap_folder(
            folder, {path.name: text for path, text in zip(paths, texts.values(), strict=True)}):
        return
    tmps = {path: path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in paths}
    try:
        for (path, tmp), text in zip(tmps.items(), texts.values(), strict=True):
            tmp.write_text(text)
            if path.exists():
                os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        for path, tmp in tmps.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)
        raise


def _owned_folder(paths: list[Path]) -> Path | None:
    """The one folder of `paths` when they are several, it is a real folder (no link) that
    holds nothing but plain files of their names, and another folder can take its place
    unnoticed: its parent takes a new folder, it is no mount point (which cannot be
    renamed), this process owns it (a new folder would be this process's, not its owner's)
    and does not work in it (a shell there would be left in the removed old folder);
    None otherwise."""
    folders = {path.parent.resolve() for path in paths}
    if len(paths) < 2 or len(folders) != 1 or len({p.name for p in paths}) != len(paths):
        return None
    folder = paths[0].parent
    if folder.is_symlink() or not os.access(folder.resolve().parent, os.W_OK | os.X_OK):
        return None
    real = folder.resolve()
    here = Path.cwd().resolve()
    if (os.path.ismount(real) or real.stat().st_dev != real.parent.stat().st_dev
            or real.stat().st_uid != os.geteuid() or real == here or real in here.parents):
        return None
    names = {path.name for path in paths}
    for entry in folder.iterdir():
        if entry.name not in names or entry.is_symlink() or not entry.is_file():
            return None
    return folder.resolve()


def _swap_folder(folder: Path, texts: dict[str, str]) -> bool:
    """`write_files` for a folder that holds only files of `texts`' names: see there. False,
    with everything as it was, where the system refuses a rename (`write_files` then writes
    file by file)."""
    token = f"{_process_tag(os.getpid())}.{secrets.token_hex(4)}"
    new = folder.with_name(f".{folder.name}.new-{token}")
    old = folder.with_name(f".{folder.name}.old-{token}")
    os.mkdir(new)
    moved = False
    try:
        os.chmod(new, stat.S_IMODE(folder.stat().st_mode))
        for name, text in texts.items():
            (new / name).write_text(text)
            if (folder / name).exists():
                os.chmod(new / name, stat.S_IMODE((folder / name).stat().st_mode))
        if any(folder.iterdir()):
            os.rename(folder, old)
            moved = True
        os.rename(new, folder)  # over an empty folder: one atomic step
    except BaseException as e:
        if moved and not folder.exists():
            os.rename(old, folder)
        shutil.rmtree(new, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in _REFUSED:
            return False
        raise
    if moved:  # the old files only: anything else that came meanwhile stays, and its folder
        for name in texts:
            (old / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            old.rmdir()
    return True


def swap_leftovers(folder) -> list[Path]:
    """What a `write_files` of `folder` left beside it when it was killed mid-swap (or is
    swapping now): the hidden `.<folder>.old-<pid>[-<start>].<hex>` and
    `.<folder>.new-<pid>[-<start>].<hex>` folders (`<start>`: the writer's start time, where
    the system tells it), old ones first."""
    folder = Path(folder)
    if not folder.parent.is_dir():
        return []
    mine = _leftover(folder)  # this folder's only: `.sets.v2.old-*` is `sets.v2`'s
    found = [p for p in folder.parent.iterdir() if mine.fullmatch(p.name)
             and p.is_dir() and not p.is_symlink()]
    return sorted(found, key=lambda p: (mine.fullmatch(p.name)[1] != "old", p.name))


def _leftover(folder: Path) -> re.Pattern:
    """The names `_swap_folder` gives `folder`'s new and old groups: (old|new), pid, the
    writer's start time (absent in names written before stop 71, or where unknown)."""
    return re.compile(rf"\.{re.escape(folder.name)}\.(old|new)-(\d+)(?:-(\d+))?\.[0-9a-f]+")


def recover_swap(folder) -> None:
    """Finishes what a killed `write_files` left beside `folder`: the old group back in
    place where the folder is missing (killed between the two renames), a partial new
    group removed, and an old group the new one already replaced removed (its files; a
    folder that holds anything else stays). Leftovers of a process still running are not
    touched."""
    folder = Path(folder)
    for left in swap_leftovers(folder):
        kind, pid, start = _leftover(folder).fullmatch(left.name).group(1, 2, 3)
        if _running(int(pid), None if start is None else int(start)):
            continue
        if kind == "old" and not folder.exists():
            os.rename(left, folder)
        elif kind == "new":
            shutil.rmtree(left, ignore_errors=True)
        else:
            for entry in left.iterdir():
                if entry.is_file() and not entry.is_symlink():
                    entry.unlink()
            with contextlib.suppress(OSError):
                left.rmdir()


def _process_tag(pid: int) -> str:
    """`pid`, and where the system tells it (Linux's /proc) `-<its start time>`: a later
    process given the same pid has another."""
    start = _start_time(pid)
    return str(pid) if start is None else f"{pid}-{start}"


def _start_time(pid: int) -> int | None:
    """Process `pid`'s start time in clock ticks since boot (/proc/<pid>/stat's 22nd
    field), or None where there is no such file to read."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The name (field 2) is in parentheses and may hold spaces: count after the last one.
    fields = stat_line[stat_line.rfind(")") + 2:].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _running(pid: int, start: int | None = None) -> bool:
    """Whether process `pid` (started at `start`, where known) is alive, this one excepted
    (it is not swapping: a container's command often has the same pid every run, and would
    never put its leftovers right). A live process of that pid that started at another time
    is another process: the writer is gone."""
    if pid == os.getpid():
        return False
    if start is not None:
        now = _start_time(pid)
        if now is not None:
            return now == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or not a pid at all: leave it alone)
    return True


# A rename of a folder the system refuses (busy, another filesystem, not permitted).
_REFUSED = (errno.EBUSY, errno.EXDEV, errno.EPERM, errno.EACCES)


# =========================================================================== labels
def _bitbully(what: str = "this"):
    """The PyPI `bitbully` package; ImportError saying that `what` needs it."""
    try:
        import bitbully
    except ImportError as e:
        raise ImportError(f"{what} {_BITBULLY_HINT}") from e
    return bitbully


@functools.cache
def _solver():
    """One BitBully instance (loading its opening book takes a while)."""
    return _bitbully().BitBully()


def label(positions: Sequence[Position], progress: bool = False) -> list[Position]:
    """Adds column scores from bitbully to positions that lack them.

    Raises:
      ImportError: bitbully is not installed. ValueError: a score disagrees with bitbully.
    """
    todo = [p for p in positions if p.column_scores is None]
    if not todo:
        return list(positions)
    solver = _solver()
    out = []
    for p in _progress(positions, progress, "labelling"):
        if p.column_scores is not None:
            out.append(p)
            continue
        q = solve(p.moves, solver)
        if q.score != p.score:
            raise ValueError(f"position {p.moves}: the file says {p.score}, bitbully "
                             f"{q.score}")
        out.append(q)
    return out


def solve(moves: str, solver=None) -> Position:
    """The Position with its score and column scores, from bitbully."""
    bb = _bitbully()
    solver = solver or _solver()
    board = bb.Board.from_moves([int(c) - 1 for c in moves]) if moves else bb.Board()
    scores = solver.score_all_moves(board)
    columns = tuple(scores.get(c) for c in range(COLS))
    return Position(moves, max(s for s in columns if s is not None), columns)


def generate(n: int, min_moves: int, max_moves: int, seed: int = 0,
             progress: bool = False) -> list[Position]:
    """`n` distinct labelled positions from uniformly random play (bitbully).

    Each position has a uniformly random length in [min_moves, max_moves]; a random game
    that ends before that length is discarded.
    """
    if not 1 <= min_moves <= max_moves <= ROWS * COLS - 1:  # the format has no empty board
        raise ValueError(f"need 1 <= min_moves ({min_moves}) <= max_moves ({max_moves}) <= 41")
    if n < 1:
        raise ValueError(f"n={n} must be >= 1")
    solver = _solver()
    rng = _random.Random(seed)
    seen, out = set(), []
    bar = _bar(n, progress, "solving")
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise ValueError(f"could not find {n} distinct positions of {min_moves}-"
                             f"{max_moves} moves")
        length = rng.randint(min_moves, max_moves)
        moves = ""
        while len(moves) < length:
            heights = _check_moves(moves)[0]
            legal = [c for c in range(COLS) if heights[c] < ROWS]
            moves += str(rng.choice(legal) + 1)
            if _check_moves(moves)[1]:
                break
        if len(moves) < length or _check_moves(moves)[1] or moves in seen:
            continue
        seen.add(moves)
        out.append(solve(moves, solver))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


# =========================================================================== progress
def _progress(items, enabled: bool, desc: str):
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="pos", dynamic_ncols=True, disable=None)


def _bar(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="pos", dynamic_ncols=True, disable=None)
