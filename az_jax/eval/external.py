"""Matches against engines that run outside JAX (plain Python on the host).

    python -m az_jax.evaluate --model baghchal --against baghchal-minimax:2 --games 20

    opp = external.parse_opponent("baghchal-minimax:2")
    engine = external.make_engine(opp, env)           # checks the game and the package
    runner = external.ExternalMatchRunner(env, num_games=20, opening_plies=2)
    result = runner.play(agent, engine, key)           # a match.MatchResult

    python train.py --config configs/baghchal.py --config.eval.opponents=random,baghchal-minimax:1

A match (`match.py`) compiles a whole match into one jitted program, so both players
must be JAX functions. An engine written in Python cannot run inside jit, so this module
plays the match with a Python loop over plies instead: all games advance together, the
agent under test (a `players.Player`, e.g. the network with N simulations) moves in every
game where it is to move with one jitted call on that batch (padded to a power of two, so
few shapes compile), and the engine then moves in each of its games in turn. Every move,
whoever made it, is mirrored into the engine's own copy of the game, and the engine's view
of the result is checked against the env's after each ply (a mismatch raises: the move
conversion or the rules disagree).

Colours and openings are as in `match.make_match`: of N games (N even), games [0, N/2)
have the agent as the first player and [N/2, N) as the second, and game i and i + N/2 start
with the same `opening_plies` uniformly random plies (the same key derivation as
`make_match`, so the same openings as a jitted match with this key and batch). The openings
matter here: the engines below are deterministic and so is the agent in evaluation mode (no
root noise, argmax move), so without random openings every game with the same colours would
be the same game, and N games would measure only two.

Results are `match.MatchResult`s from the agent's point of view, so the tables, the Elo
ladder and the JSON records of `evaluate.py` treat them like any other match. Games still
running at `max_plies` count as draws (`unfinished`).

Training (`config.eval.opponents`): `config.validate` calls `check_opponents` with
the config's env id before anything is built (an engine of another game, or a missing
package, is a config error), and `evaluator.TrainingEvaluator` plays the engines with an
`ExternalMatchRunner` next to its jitted matches, in every process like those (with the
same parameters and key, every process plays the same games and gets the same score, which
ranks checkpoints).

Engines (`parse_opponent`; keyed by the name's prefix in `_ENGINES`; `PREFIX:ARG` or
`PREFIX[OPTIONS]:ARG`):
  baghchal-minimax:D   the PyPI `baghchal` package's alpha-beta minimax `Engine(depth=D)`,
                       D from 1 to 6 (`BAGHCHAL_MAX_DEPTH`: deeper, a match takes a day)
                       (static evaluation 150 x trapped tigers - 120 x captured goats);
                       Bagh-Chal only; needs `pip install baghchal` (a test extra).
  gomokubench:LEVEL    the PyPI `gomokubench` package's alpha-beta (numpy patterns),
                       LEVEL easy | standard | hard; freestyle Gomoku only (its win check
                       is five or more), any board size; a test extra.
  bitbully:D           the PyPI `bitbully` Connect4 solver (AGPL, optional: `pip install
  bitbully:perfect     bitbully`, never required) as an engine: `perfect` solves every
                       position (its opening book, then search) and plays a best move;
                       `D` searches D plies (no opening book) and plays a move of the best
                       depth-limited score; ties at random among the best, seeded from
                       the moves and the game's index in the match. Connect4 only. Its
                       matches also count the games where the agent held the solved
                       value of the opening (`held_note`; `perfect` only).
  gomocup[OPTS]:CMD    any Gomocup/piskvork brain, run as the command line CMD (shlex-split,
                       no shell) and spoken to over the protocol (`GomocupBrain`); Gomoku
                       only, INFO rule 0 (freestyle) or 1 (standard, exactly five). OPTS,
                       ';'-separated: the time per move (`200ms`, `1.5s`; default 1 s) sent
                       as INFO timeout_turn, `grace=TIME` (the answer may come that much
                       later; default max(1 s, half the move time)), `start=TIME` (for the
                       answers to START and RESTART; default 180 s). Its faults forfeit the game
                       (`EngineForfeit`), see `ExternalMatchRunner.play`.

In a comma-separated list (`--against`, `eval.opponents`) a comma inside a gomocup command
is written `\\,` (`split_names`).

The package iterates Python sets of move strings, whose order changes from process to
process with PYTHONHASHSEED, and minimax keeps the first of equally scored moves; the
adapter hands it the moves in sorted order so that a match is reproducible. When every
move loses (the package then returns no move), the engine plays the first legal move.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import dataclasses
import os
import queue
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from az_jax import parallel
from az_jax.eval import connect4_positions, match, players


# =========================================================================== protocol
class EngineGame(Protocol):
    """One game as an external engine sees it (host side, mutable: the engine's own board)."""

    def push(self, action: int) -> None:
        """Mirrors one ply (either side's move) given as an env action."""

    def best_action(self) -> int:
        """The engine's move for the side to move, as an env action."""

    def is_over(self) -> bool | None:
        """Whether the engine considers the game finished (None: it does not say)."""

    # Optional: `value() -> int | None`, the position's game-theoretic outcome for the side
    # to move (1 win, 0 draw, -1 loss) when the engine knows it (a solver). The runner asks
    # it once, after the opening, and counts the games where the agent held that value.


@dataclasses.dataclass(frozen=True)
class Engine:
    """An external opponent: `new_game()` starts an `EngineGame` at the initial position.

    `close()` (optional) ends what the engine started (a gomocup brain's process; it is
    also ended when the engine is garbage-collected or Python exits); `brain` is that
    `GomocupBrain` (None for in-process engines). `numbered`: `new_game(i)` takes the
    game's index in the match (an engine that varies its play from game to game
    reproducibly, e.g. `bitbully`'s random ties)."""

    name: str  # name on the Elo ladder, e.g. "baghchal-minimax:2"
    new_game: Callable[..., EngineGame] = dataclasses.field(repr=False)
    close: Callable[[], None] = dataclasses.field(default=lambda: None, repr=False)
    brain: Any = dataclasses.field(default=None, repr=False)
    numbered: bool = False

    def game(self, index: int) -> EngineGame:
        """A new game, the match's `index`-th."""
        return self.new_game(index) if self.numbered else self.new_game()


@dataclasses.dataclass(frozen=True)
class ExternalOpponent:
    """A parsed external opponent name: `kind` is the registry prefix, `arg` its parsed
    argument (a depth, a level, a `BrainSpec`)."""

    name: str  # canonical name, e.g. "baghchal-minimax:2"
    kind: str  # "baghchal-minimax"
    arg: Any

    @property
    def metric(self) -> str:
        return re.sub(r"[^A-Za-z0-9._\-]", "_", self.name)


@dataclasses.dataclass(frozen=True)
class _Spec:
    form: str  # how to write it, for error messages
    env_id: str  # the only game it plays
    make: Callable[[Any, Any], Engine]  # (env, arg) -> Engine
    parse: Callable[[str | None, str], tuple[str, Any]]  # (options, arg) -> (name, arg)
    load: Callable[[Any], Any]  # (ExternalOpponent) -> None; ImportError / ValueError


# =========================================================================== baghchal
# The deepest `baghchal-minimax:D`. The package's alpha-beta copies the board at every node
# (plain Python), and each ply costs ~3-5x: an opening move took 0.16 s at depth 4, 1.2 s
# at 5, 3-6 s at 6 and 22-24 s at 7 on a 2-core CPU. A 20-game match asks it some 500-1000
# moves: an hour or two at 6, most of a day at 7, and ever longer deeper.
BAGHCHAL_MAX_DEPTH = 6


def _import_baghchal(what: str):
    """The PyPI package's `env` and `engine` modules. Importing `baghchal.env` changes the
    working directory (to load its images); it is restored here."""
    cwd = os.getcwd()
    try:
        import baghchal.engine as ref_engine
        import baghchal.env as ref_env
    except ImportError as e:
        raise ImportError(f"opponent {what!r} needs the PyPI package 'baghchal' "
                          f"(pip install 'baghchal>=1.0.1,<1.1'): {e}") from None
    finally:
        os.chdir(cwd)
    return ref_env, ref_engine


def _ref_point(name: str) -> str:
    """Our point name (column letter, row from the bottom: 'B2') -> the package's 'xy'
    (row from the top, column; both 1-based: '42')."""
    col, row = ord(name[0].upper()) - ord("A"), int(name[1:])
    return f"{5 - row + 1}{col + 1}"


def baghchal_move_tables(env) -> tuple[dict[tuple[int, int], str], dict[str, int]]:
    """The conversion between env actions and the package's move strings.

    Built from `env.action_to_str` (placements 'C3', steps 'A1-B2', jumps 'A1xC3'); the
    package writes placements 'G33', steps 'G2122' / 'B2122' (goat / tiger) and jumps
    'Bx1133', with points 'xy' = row from the top, column (1-based).

    Returns:
      to_ref: (action, player) -> move string, for every action the player may ever play.
      from_ref: move string -> action.
    """
    to_ref: dict[tuple[int, int], str] = {}
    for a in range(env.num_actions):
        text = env.action_to_str(a)
        if "(" in text:  # along no line: never legal
            continue
        if "-" in text:
            src, dst = text.split("-")
            for player, piece in ((0, "G"), (1, "B")):
                to_ref[a, player] = f"{piece}{_ref_point(src)}{_ref_point(dst)}"
        elif "x" in text:
            src, dst = text.split("x")
            to_ref[a, 1] = f"Bx{_ref_point(src)}{_ref_point(dst)}"
        else:
            to_ref[a, 0] = f"G{_ref_point(text)}"
    from_ref = {move: a for (a, _), move in to_ref.items()}
    return to_ref, from_ref


def baghchal_minimax(env, depth: int) -> Engine:
    """The PyPI `baghchal` package's minimax engine at `depth` plies (see the module
    docstring for tie-breaking).

    Raises:
      ImportError: the package is not installed.
    """
    name = f"baghchal-minimax:{depth}"
    ref_env, ref_engine = _import_baghchal(name)
    to_ref, from_ref = baghchal_move_tables(env)
    engine = ref_engine.Engine(depth=depth)

    class SortedBoard(ref_env.Board):
        """The package's board with its moves in a fixed (sorted) order."""

        def possible_moves(self):
            moves = super().possible_moves()
            return sorted(moves) if moves else moves

    class Game:
        def __init__(self):
            self.board = SortedBoard()

        def push(self, action: int) -> None:
            player = 0 if self.board.next_turn == "G" else 1
            move = to_ref.get((int(action), player))
            if move is None:
                raise ValueError(f"{name}: action {action} ({env.action_to_str(action)}) "
                                 f"is not a move of player {player}")
            try:
                self.board.move(move)
            except Exception as e:  # the package raises bare Exceptions for illegal moves
                raise ValueError(f"{name}: the package rejects {move}: {e}") from None

        def best_action(self) -> int:
            move, _ = engine.get_best_move(self.board)
            if not move:  # every move loses: the package keeps none
                move = self.board.possible_moves()[0]
            return from_ref[move]

        def is_over(self) -> bool:
            return bool(self.board.is_game_over())

    return Engine(name, Game)


# =========================================================================== gomokubench
_GOMOKUBENCH_PIN = "gomokubench>=0.1.10,<0.2"


def _import_gomokubench(what: str):
    """The PyPI `gomokubench` package's `libs.ai` and `libs.board` modules (it installs
    its code as a top-level package named `libs`)."""
    try:
        import libs.ai as ai
        import libs.board as board
        import libs.piece as piece
    except ImportError as e:
        raise ImportError(f"opponent {what!r} needs the PyPI package 'gomokubench' "
                          f"(pip install '{_GOMOKUBENCH_PIN}'): {e}") from None
    if not hasattr(ai, "AI_LEVELS") or not hasattr(board, "BoardState"):
        raise ImportError(f"opponent {what!r}: the 'libs' package at {ai.__file__} is not "
                          f"gomokubench's (pip install '{_GOMOKUBENCH_PIN}')")
    return ai, board, piece


def gomokubench_levels() -> tuple[str, ...]:
    return ("easy", "standard", "hard")


def gomokubench(env, level: str) -> Engine:
    """The PyPI `gomokubench` package's alpha-beta engine at `level` (easy: 1 ply, 4
    candidates, a random one of the best 2; standard: 2 plies, 10 candidates; hard: 3
    plies, 12 candidates at the root). Freestyle only: its win check is "five or more".

    The package draws from numpy's global generator (the first stone, and `easy`'s pick).
    Each move here seeds it from the position (a CRC of the moves) and restores the global
    state afterwards, so that a match is reproducible and leaves numpy's state alone.

    Raises:
      ImportError: the package is not installed.
      ValueError: the env is not freestyle Gomoku.
    """
    name = f"gomokubench:{level}"
    ai, board, piece = _import_gomokubench(name)
    if env.rule != "freestyle":
        raise ValueError(f"opponent {name!r} plays freestyle gomoku only (five or more win); "
                         f"this env is {env.rule} (exactly five): use an env with "
                         "rule='freestyle' or a gomocup: brain")
    settings = ai.resolve_ai_settings(level)
    size = env.size

    class Game:
        def __init__(self):
            self.state = board.BoardState(size)  # black (the package's 1) moves first
            self.moves: list[int] = []

        def push(self, action: int) -> None:
            pos = divmod(int(action), size)  # (row, column), row 0 at the top, as the env
            if not self.state.is_valid_position(pos):
                raise ValueError(f"{name}: {env.action_to_str(action)} is occupied or off "
                                 "the board")
            self.state = self.state.next(pos)
            self.moves.append(int(action))

        def best_action(self) -> int:
            black_to_move = -self.state.color == piece.BLACK
            saved = np.random.get_state()
            np.random.seed(zlib.crc32(np.asarray(self.moves, np.int32).tobytes()))
            try:
                move, _ = ai.get_best_move(
                    self.state, settings["depth"], black_to_move,
                    candidate_count=settings["candidate_count"],
                    random_top_n=settings["random_top_n"])
            finally:
                np.random.set_state(saved)
            row, col = (int(v) for v in move)
            return row * size + col

        def is_over(self) -> bool:
            return bool(self.state.is_terminal())

    return Engine(name, Game)


# =========================================================================== bitbully
def _import_bitbully(what: str):
    """The PyPI `bitbully` package (an AGPL Connect4 solver; optional, never required)."""
    return connect4_positions._bitbully(f"opponent {what!r}")


def bitbully_engine(env, depth: int | None) -> Engine:
    """The `bitbully` solver as a Connect4 engine: `depth` None plays perfectly (its
    opening book, then a full search), an int searches that many plies without the book.
    A depth-limited search starts from an empty transposition table at every move (its
    scores depend on what the table holds: ~0.1 s a move to clear it). Among equally
    scored moves it picks one at random, from a generator seeded with the
    moves so far and the game's index in the match (`Engine.numbered`), so that a match is
    reproducible and the engine still varies its play from game to game, also from the
    same opening.

    Raises:
      ImportError: the package is not installed.
    """
    name = f"bitbully:{depth or 'perfect'}"
    bitbully = _import_bitbully(name)
    # perfect: the one book-loaded solver the solver sets use (loading the book is slow)
    solver = connect4_positions._solver() if depth is None else bitbully.BitBully(None)
    max_depth = -1 if depth is None else depth

    class Game:
        def __init__(self, index: int = 0):
            self.board = bitbully.Board()
            self.moves: list[int] = []
            self.index = index

        def push(self, action: int) -> None:
            column = int(action)  # the env's action is the column, 0..6 left to right
            if not (0 <= column < 7 and self.board.is_legal_move(column)):
                raise ValueError(f"{name}: {env.action_to_str(action)} is not a legal move "
                                 f"after {self.moves}")
            self.board.play(column)
            self.moves.append(column)

        def best_action(self) -> int:
            rng = random.Random(zlib.crc32(bytes(self.moves), self.index))
            if depth is not None:  # depth-limited scores depend on what the table holds
                solver.reset_transposition_table()  # ~0.1 s
            return int(solver.best_move(self.board, tie_break="random", rng=rng,
                                        max_depth=max_depth))

        def is_over(self) -> bool:
            return bool(self.board.is_game_over())

        def value(self) -> int | None:
            """The solved outcome for the side to move (perfect only)."""
            if depth is not None or self.board.is_game_over():
                return None
            return int(np.sign(max(solver.score_all_moves(self.board).values())))

    return Engine(name, Game, numbered=True)


# =========================================================================== gomocup
GOMOCUP_TURN_MS = 1000  # default time per move
GOMOCUP_START_S = 180.0  # default time for START (a brain may load and compile then)
GOMOCUP_FAULTS = ("crash", "timeout", "garbage", "illegal", "error")


@dataclasses.dataclass(frozen=True)
class BrainSpec:
    """A `gomocup[...]:COMMAND` opponent: the command line and its clock.

    turn_ms: INFO timeout_turn, the time per move; the answer may come up to `grace_ms`
    later (default max(1000, turn_ms / 2)) before it is a timeout. start_s: the time for
    the answer to START (loading and compiling a brain takes a while) and to RESTART."""

    command: tuple[str, ...]
    turn_ms: int = GOMOCUP_TURN_MS
    grace_ms: int | None = None
    start_s: float = GOMOCUP_START_S

    @property
    def answer_s(self) -> float:
        grace = self.grace_ms if self.grace_ms is not None else max(1000, self.turn_ms // 2)
        return (self.turn_ms + grace) / 1000.0

    def label(self) -> str:
        opts = [f"{self.turn_ms}ms"]
        if self.grace_ms is not None:
            opts.append(f"grace={self.grace_ms}ms")
        if self.start_s != GOMOCUP_START_S:
            opts.append(f"start={self.start_s:g}s")
        return f"gomocup[{';'.join(opts)}]:{shlex.join(self.command)}"


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s)$")


def duration_ms(text: str, what: str) -> int:
    """'200ms' or '1.5s' -> milliseconds. Raises ValueError naming `what` otherwise."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"cannot read {what} {text!r}: write e.g. 200ms or 1.5s")
    value = float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
    return int(round(value))


def parse_brain(options: str | None, command: str) -> BrainSpec:
    """`gomocup[OPTIONS]:COMMAND` -> BrainSpec. OPTIONS, separated by ';': a time per move
    (`200ms`, `1.5s`), `grace=TIME`, `start=TIME`. COMMAND is split as a shell would
    (shlex) and run without a shell.

    Raises:
      ValueError: unreadable options or an empty command.
    """
    kw: dict[str, Any] = {}
    for item in (options or "").split(";"):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq:
            kw["turn_ms"] = duration_ms(item, "the time per move")
        elif key.strip() == "grace":
            kw["grace_ms"] = duration_ms(value, "grace")
        elif key.strip() == "start":
            kw["start_s"] = duration_ms(value, "start") / 1000.0
        else:
            raise ValueError(f"unknown gomocup option {item!r}: accepted are a time per "
                             "move (200ms, 1s), grace=TIME and start=TIME, separated by ';'")
    if kw.get("turn_ms", 1) < 1 or kw.get("start_s", 1) <= 0:
        raise ValueError("gomocup times must be > 0")
    try:
        argv = tuple(shlex.split(command))
    except ValueError as e:
        raise ValueError(f"cannot split the gomocup command {command!r}: {e}") from None
    if not argv:
        raise ValueError("gomocup: needs a command after ':', e.g. "
                         "gomocup[1s]:python -m az_jax.gomocup --model gomoku_9x9")
    return BrainSpec(argv, **kw)


class EngineForfeit(Exception):
    """An engine lost a game by a fault: `kind` is one of GOMOCUP_FAULTS."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


_XY = re.compile(r"^\s*(-?[0-9]{1,9})\s*,\s*(-?[0-9]{1,9})\s*$")
_MOVE = re.compile(r"^\s*(SUGGEST\s+)?(-?[0-9]{1,9})\s*,\s*(-?[0-9]{1,9})\s*$", re.I)
_RESTARTED = re.compile(r"^\s*(OK|UNKNOWN\b.*?)\s*$", re.I)  # (UNKNOWN: not supported)


_LINE_CHARS = 65536  # a brain's longer lines are cut (the protocol allows it)
_UNASKED_LOGGED = 100  # lines that came unasked logged before a request, at most

# POSIX: a brain leads its own session, so that a timeout or the close kills its whole
# process group (a wrapper's child, or the brain's own workers, also hold its pipes).
_GROUPS = os.name == "posix"


def _end(proc: subprocess.Popen) -> None:
    """Kills a brain process and its process group, waits for it (no zombie) and closes its
    stdin. Its stdout and stderr are closed by their reader threads at EOF: closing a pipe
    that another thread is blocked reading waits for that read to end."""
    if _GROUPS:
        with contextlib.suppress(OSError):  # no such group: all of it has exited
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:  # (without groups; a no-op once the group's kill has landed)
        proc.kill()
    proc.wait()
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.close()


def _reap(procs: list) -> None:
    """`_end`s every process of the list not yet reaped (the brain's finalizer)."""
    for proc in procs:
        if proc.returncode is None:  # (a reaped one's group id may belong to others now)
            _end(proc)


class GomocupBrain:
    """One brain subprocess spoken to over the Gomocup (piskvork) protocol.

    One process serves every game of a match: a move in a game the brain is not following
    is asked with BOARD (the whole position, field 1 = own stones, 2 = the opponent's)
    then DONE; a move that continues the brain's own game with TURN x,y; a move on an empty
    board with BEGIN; an answer SUGGEST x,y gets PLAY x,y, whose answer is the move (the
    protocol; Gomocup's manager does so). Before BOARD or BEGIN, RESTART empties the
    brain's board if it holds a game (the protocol; a brain that answers UNKNOWN is ended
    and run again). Its lines may end in CR LF, LF or CR. x,y = column,row from 0 at the
    top left, i.e. action = y * size + x, as `az_jax.gomocup`. Lines MESSAGE (logged),
    DEBUG (dropped) are skipped; UNKNOWN or ERROR as the answer to a move is a fault (but see
    `_ask` for one that may answer INFO instead). A process that dies, misses its deadline
    or answers anything but a move (garbage, UNKNOWN, ERROR: it may still be busy with that
    position, and its next line could be taken for another's answer) is killed with its
    process group (and reaped) and started again on the next request; START and RESTART
    are answered within `start_s`, a move within `BrainSpec.answer_s`.
    """

    def __init__(self, spec: BrainSpec, size: int, rule: int, name: str, log=None):
        self.spec, self.size, self.rule, self.name = spec, int(size), int(rule), name
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.proc: subprocess.Popen | None = None
        self.spawned: list[subprocess.Popen] = []  # every process started (tests: reaped)
        self.board: list[int] | None = None  # the brain's game, if it follows one
        self.late = 0  # answers after timeout_turn but within the grace
        self._lines: queue.Queue | None = None
        self._stderr: collections.deque = collections.deque(maxlen=20)
        self._info_sent = False  # INFO sent, and no answer read since (see `_ask`)
        self._finalizer = weakref.finalize(self, _reap, self.spawned)

    # ------------------------------------------------------------------ process
    def start(self) -> None:
        """Starts the process and sends START and INFO.

        Raises:
          EngineForfeit: the process could not start, died, refused or missed START.
        """
        self.close()
        try:
            proc = subprocess.Popen(self.spec.command, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, bufsize=1, errors="replace",
                                    start_new_session=_GROUPS)
        except OSError as e:
            raise EngineForfeit("crash", f"cannot run {shlex.join(self.spec.command)}: "
                                         f"{e}") from None
        self.proc, self._lines = proc, queue.Queue()
        self.spawned.append(proc)
        self._stderr.clear()
        threading.Thread(target=self._pump, args=(proc.stdout, self._lines), daemon=True).start()
        threading.Thread(target=self._pump, args=(proc.stderr, None), daemon=True).start()
        try:
            answer = self._ask([f"START {self.size}"], self.spec.start_s, "START")
            if answer.strip().upper() != "OK":
                raise EngineForfeit("error", f"answered {answer.strip()[:80]!r} to START "
                                             f"{self.size}")
        except BaseException:  # a fault, or Ctrl-C while the brain loads
            self.close()
            raise
        self._send([f"INFO timeout_turn {self.spec.turn_ms}", "INFO timeout_match 0",
                    "INFO max_memory 0", "INFO game_type 1", f"INFO rule {self.rule}"])
        self._info_sent = True
        self.board = []

    def _pump(self, stream, lines) -> None:
        """Reader thread: stdout lines into the queue (None at EOF), stderr into a tail.
        Closes the stream at EOF (the process group has ended).

        A brain may end its lines with CR LF, LF or CR alone (the protocol), so lines are
        split here, as soon as their bytes come: a text stream holds back a line that ends
        in CR until the next byte (a CR LF may follow), which never comes while the brain
        waits for the next command. Empty lines (also between CR and LF) are dropped, and a
        line is cut after `_LINE_CHARS` (the protocol allows it: a brain that writes without
        end costs no memory)."""
        decoder = codecs.getincrementaldecoder(stream.encoding)(errors="replace")
        text = ""  # the line begun
        try:
            while True:
                chunk = stream.buffer.read1(65536)
                done = re.split(r"[\r\n]+", decoder.decode(chunk, final=not chunk))
                done[0] = text + done[0]
                text = done.pop()[:_LINE_CHARS]
                if not chunk and text:
                    done.append(text)
                for line in done:
                    if not line:
                        continue
                    if lines is None:
                        self._stderr.append(line[:_LINE_CHARS].rstrip())
                    else:
                        lines.put(line[:_LINE_CHARS] + "\n")
                if not chunk:
                    break
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        if lines is not None:
            lines.put(None)

    def _send(self, lines: list[str]) -> None:
        try:
            self.proc.stdin.write("".join(line + "\n" for line in lines))
            self.proc.stdin.flush()
        except (OSError, ValueError) as e:
            self._died(f"closed its input ({type(e).__name__} writing to it)")

    def _died(self, what: str):
        proc = self.proc
        code = proc.poll() if proc is not None else None  # its own, not the kill's below
        self.close()
        tail = " | ".join(list(self._stderr)[-3:])
        raise EngineForfeit("crash", f"the brain {what}" + (f", exit status {code}"
                                                            if code is not None else "")
                            + (f"; stderr: {tail[:300]}" if tail else ""))

    def _ask(self, lines: list[str], seconds: float, what: str, unknown: bool = False) -> str:
        """Sends `lines` and returns the answer: the first line that is not MESSAGE/DEBUG
        (nor UNKNOWN, unless `unknown`: an optional command's answer).

        INFO is sent without waiting (the protocol: a brain does not answer it), yet some
        brains answer UNKNOWN or ERROR to a key they do not know, and that line may come
        after this request is sent. So until the first answer after INFO, an UNKNOWN or
        ERROR is logged and the wait goes on: it is this request's answer only if nothing
        else comes before the deadline (a brain that refuses an INFO value may answer the
        next command so, as `az_jax.gomocup` does).

        Raises:
          EngineForfeit: timeout (the brain is killed), crash, or error (UNKNOWN / ERROR).
        """
        self._drain()
        self._send(lines)
        deadline = time.monotonic() + seconds
        doubt = None  # an UNKNOWN / ERROR that may answer an INFO line
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:  # checked at every line: a brain may flood MESSAGE lines
                    raise queue.Empty
                line = self._lines.get(timeout=left)
            except queue.Empty:
                self.close(graceful=False)
                if doubt is not None:
                    raise EngineForfeit("error", f"answered {doubt!r} to {what}") from None
                raise EngineForfeit("timeout", f"no answer to {what} within {seconds:g} s"
                                    ) from None
            if line is None:  # EOF on stdout: the process ended (or closed its output)
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
                self._died(f"exited during {what}")
            if self._skip(line):
                continue
            text = line.strip()
            word = text.split(maxsplit=1)[0].upper()
            if word == "UNKNOWN" and unknown and not self._info_sent:
                return line
            if word in ("UNKNOWN", "ERROR"):
                if self._info_sent:
                    self.log(f"{self.name}: {text[:200]!r}, an answer to INFO or to {what}")
                    doubt = text[:120]
                    continue
                raise EngineForfeit("error", f"answered {text[:120]!r} to {what}")
            self._info_sent = False
            return line

    def _skip(self, line: str) -> bool:
        """MESSAGE (logged) and DEBUG lines, and empty lines, are not answers."""
        text = line.strip()
        word = text.split(maxsplit=1)[0].upper() if text else ""
        if word == "MESSAGE":
            self.log(f"{self.name}: {text[:300]}")
        return word in ("", "MESSAGE", "DEBUG")

    def _drain(self) -> None:
        """Lines that came unasked (after INFO, say): logged unless DEBUG, the first
        `_UNASKED_LOGGED` of them. Only those there now: a brain that keeps writing (MESSAGE
        lines without end, faster than they are logged) must not hold the request back;
        later lines are read under its deadline."""
        n = self._lines.qsize() if self._lines is not None else 0
        for i in range(n):
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self._lines.put(None)  # the EOF is for the next request to see
                return
            if i < _UNASKED_LOGGED and not self._skip(line):
                self.log(f"{self.name}: unasked line {line.strip()[:200]!r}")
        if n > _UNASKED_LOGGED:
            self.log(f"{self.name}: {n - _UNASKED_LOGGED} more lines unasked, not logged")

    def close(self, graceful: bool = True) -> None:
        """Ends the process: END, then kill (with its process group) after 1 s, at once if
        not `graceful`; always reaped."""
        proc, self.proc, self.board, self._info_sent = self.proc, None, None, False
        if proc is None:
            return
        if graceful and proc.poll() is None:
            try:
                proc.stdin.write("END\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                pass
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
        _end(proc)  # also what it started and left behind

    # ------------------------------------------------------------------ moves
    def _xy(self, action: int) -> str:
        return f"{action % self.size},{action // self.size}"

    def _request(self, lines: list[str], what: str, expect: re.Pattern,
                 unknown: bool = False, seconds: float | None = None) -> re.Match:
        """`_ask` for `move`: the answer, matched by `expect`, within `seconds` (default
        `BrainSpec.answer_s`). After any other answer (garbage, UNKNOWN, ERROR) the brain
        is killed: it may still be busy with this position, and its late answer must not be
        read as the next request's (another game's position).

        Raises:
          EngineForfeit: as `_ask`, or garbage.
        """
        try:
            answer = self._ask(lines, self.spec.answer_s if seconds is None else seconds,
                               what, unknown)
        except EngineForfeit as e:
            if e.kind == "error":
                self.close(graceful=False)
            raise
        m = expect.match(answer)
        if not m:
            self.close(graceful=False)
            raise EngineForfeit("garbage", f"answered {answer.strip()[:80]!r} to {what}")
        return m

    def _restart(self) -> None:
        """RESTART, answered OK: an empty board. The command is optional in the protocol: a
        brain that answers UNKNOWN is ended (END) and run again, as the protocol says. It is
        answered within `start_s`: the protocol counts it as initialization, as START, not
        in the time for a turn (a brain may clear big tables then).

        Raises:
          EngineForfeit: as `_request`, or a failed start.
        """
        m = self._request(["RESTART"], "RESTART", _RESTARTED, unknown=True,
                          seconds=self.spec.start_s)
        if m.group(1).upper().startswith("UNKNOWN"):
            self.log(f"{self.name}: answered {m.group(0).strip()[:80]!r} to RESTART: ended and "
                     "run again")
            self.start()  # (END first)
        else:
            self.board = []

    def move(self, moves: list[int]) -> int:
        """The brain's move in the position after `moves` (env actions, black first).

        Raises:
          EngineForfeit: crash, timeout, garbage, illegal or error (the game is lost).
        """
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        turn = bool(moves) and self.board is not None and self.board == moves[:-1]
        if not turn and self.board != []:  # a game on the board, or one unknown after a fault
            # The protocol: RESTART before BEGIN or BOARD (its C skeleton's BOARD adds stones).
            self._restart()
        if turn:
            lines, what = [f"TURN {self._xy(moves[-1])}"], "TURN"
        elif not moves:
            lines, what = ["BEGIN"], "BEGIN"
        else:
            n = len(moves)
            lines = ["BOARD"] + [f"{self._xy(a)},{1 if (n - i) % 2 == 0 else 2}"
                                 for i, a in enumerate(moves)] + ["DONE"]
            what = "BOARD"
        self.board = None
        t0 = time.monotonic()
        m = self._request(lines, what, _MOVE)
        x, y = int(m.group(2)), int(m.group(3))
        if m.group(1):  # SUGGEST x,y (the protocol): imposed with PLAY x,y, as Gomocup does;
            self._action(x, y, moves)  # the brain's answer to it is its move
            m = self._request([f"PLAY {x},{y}"], "PLAY", _XY)
            x, y = int(m.group(1)), int(m.group(2))
        if time.monotonic() - t0 > self.spec.turn_ms / 1000.0:
            self.late += 1
        action = self._action(x, y, moves)
        self.board = [*moves, action]
        return action

    def _action(self, x: int, y: int, moves: list[int]) -> int:
        """The action of the brain's x,y after `moves`.

        Raises:
          EngineForfeit: illegal (off the board or occupied).
        """
        if not (0 <= x < self.size and 0 <= y < self.size):
            raise EngineForfeit("illegal", f"played {x},{y}, off the {self.size}x{self.size} "
                                           "board")
        action = y * self.size + x
        if action in moves:
            raise EngineForfeit("illegal", f"played {x},{y}, an occupied point")
        return action


def gomocup_rule(env) -> int:
    """INFO rule for the env: 0 = freestyle (five or more), 1 = exactly five."""
    return {"freestyle": 0, "standard": 1}[env.rule]


def gomocup(env, spec: BrainSpec, log=None) -> Engine:
    """A Gomocup/piskvork brain (`gomocup[...]:COMMAND`) as an engine: one subprocess for
    all games (see `GomocupBrain`). The brain is started now, so that a brain that cannot
    run or refuses the board size is an error before any game. `log` gets its MESSAGE
    lines (default: stderr).

    Raises:
      ValueError: the brain cannot start or does not accept START <size>.
    """
    name = spec.label()
    brain = GomocupBrain(spec, env.size, gomocup_rule(env), name, log=log)
    try:
        brain.start()
    except EngineForfeit as e:
        raise ValueError(f"opponent {name!r} cannot play {env.size}x{env.size} gomoku: "
                         f"{e}") from None

    class Game:
        def __init__(self):
            self.moves: list[int] = []

        def push(self, action: int) -> None:
            self.moves.append(int(action))

        def best_action(self) -> int:
            return brain.move(self.moves)

        def is_over(self) -> bool | None:
            return None  # the brain does not say; the env decides

    return Engine(name, Game, close=brain.close, brain=brain)


def _check_command(spec: BrainSpec) -> str | None:
    exe = spec.command[0]
    if os.sep in exe or (os.altsep and os.altsep in exe):
        return None if os.path.exists(exe) else f"no file {exe!r} (the gomocup brain)"
    if shutil.which(exe) is None:
        return f"no program {exe!r} on the PATH (the gomocup brain)"
    return None


# =========================================================================== registry
def _parse_depth(options: str | None, arg: str) -> tuple[str, int]:
    if options is not None:
        raise ValueError("takes no [options]")
    if not re.fullmatch(r"\d+", arg.strip()):
        raise ValueError("expected baghchal-minimax:D with a number D")
    depth = int(arg)
    if depth < 1:
        raise ValueError("the depth (plies searched) must be >= 1")
    if depth > BAGHCHAL_MAX_DEPTH:
        raise ValueError(f"the depth (plies searched) must be at most {BAGHCHAL_MAX_DEPTH}: "
                         "each ply more costs the package's plain-Python search ~3-5x")
    return f"baghchal-minimax:{depth}", depth


def _parse_bitbully(options: str | None, arg: str) -> tuple[str, int | None]:
    if options is not None:
        raise ValueError("takes no [options]")
    text = arg.strip().lower()
    if text == "perfect":
        return "bitbully:perfect", None
    if not re.fullmatch(r"\d+", text) or not 1 <= int(text) <= 42:
        raise ValueError("expected bitbully:perfect or bitbully:D with a search depth D "
                         "of 1-42 plies")
    return f"bitbully:{int(text)}", int(text)


def _parse_level(options: str | None, arg: str) -> tuple[str, str]:
    level = arg.strip().lower()
    if options is not None:
        raise ValueError("takes no [options]")
    if level not in gomokubench_levels():
        raise ValueError(f"unknown level {arg.strip()!r}; accepted: "
                         f"{', '.join(gomokubench_levels())}")
    return f"gomokubench:{level}", level


def _parse_brain(options: str | None, arg: str) -> tuple[str, BrainSpec]:
    spec = parse_brain(options, arg)
    return spec.label(), spec


def _load_brain(opp) -> None:
    why = _check_command(opp.arg)
    if why:
        raise ValueError(f"opponent {opp.name!r}: {why}")


_ENGINES: dict[str, _Spec] = {
    "baghchal-minimax": _Spec(
        "baghchal-minimax:D", "baghchal", baghchal_minimax, _parse_depth,
        lambda opp: _import_baghchal(opp.name)),
    "gomokubench": _Spec(
        "gomokubench:easy|standard|hard", "gomoku", gomokubench, _parse_level,
        lambda opp: _import_gomokubench(opp.name)),
    "bitbully": _Spec(
        "bitbully:D|perfect", "connect4", bitbully_engine, _parse_bitbully,
        lambda opp: _import_bitbully(opp.name)),
    "gomocup": _Spec(
        "gomocup[TIME]:COMMAND", "gomoku", gomocup, _parse_brain, _load_brain),
}

# PREFIX[OPTIONS]:ARG; the command of a gomocup brain may hold any character but ',' (write
# '\,' inside a comma-separated list).
_NAME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)(?:\[([^\]]*)\])?:(.*)$", re.S)


def forms() -> str:
    """The external opponent names, for help and error messages."""
    return ", ".join(s.form for s in _ENGINES.values())


def is_external(name: str) -> bool:
    """Whether `name` names an external engine (by its prefix before '[' or ':')."""
    m = _NAME.match(name) if isinstance(name, str) else None
    return bool(m) and m.group(1) in _ENGINES


def split_names(names: str) -> list[str]:
    """A comma-separated list of opponents -> names; '\\,' is a comma inside a name (a
    gomocup command line that holds one)."""
    return [n.replace("\\,", ",") for n in re.split(r"(?<!\\),", names)]


def parse_opponent(name: str) -> ExternalOpponent:
    """Parses 'PREFIX:ARG' or 'PREFIX[OPTIONS]:ARG' for a registered prefix.

    Raises:
      ValueError: an unknown prefix or a bad argument.
    """
    m = _NAME.match(name) if isinstance(name, str) else None
    spec = _ENGINES.get(m.group(1)) if m else None
    if spec is None:
        raise ValueError(f"unknown external opponent {name!r}; accepted forms: {forms()}")
    try:
        canonical, arg = spec.parse(m.group(2), m.group(3).strip())
    except ValueError as e:
        raise ValueError(f"opponent {name.strip()!r}: {e}") from None
    return ExternalOpponent(canonical, m.group(1), arg)


def parse_opponents(names: str | list[str]) -> list:
    """Like `players.parse_opponents`, with external engines too: a list of `players.Opponent`
    and `ExternalOpponent`, in the given order (`split_names` splits a string).

    Raises:
      ValueError: an unknown name (listing the players' and the external forms).
    """
    items = split_names(names) if isinstance(names, str) else list(names)
    out = []
    for n in items:
        if not str(n).strip():
            continue
        if is_external(n):
            out.append(parse_opponent(n))
            continue
        try:
            out.append(players.parse_opponent(n))
        except ValueError as e:
            raise ValueError(f"{e}; external engines: {forms()}") from None
    return out


def _wrong_game(opp: ExternalOpponent, env_id: str) -> str | None:
    """Why `opp` cannot play `env_id` (None when it plays that game)."""
    spec = _ENGINES[opp.kind]
    if env_id != spec.env_id:
        return f"opponent {opp.name!r} plays {spec.env_id} only, not {env_id}"
    return None


def check_opponents(names: str | list[str], env_id: str) -> list:
    """`parse_opponents`, with each external engine checked for a run of `env_id`: that it
    plays this game and that its package imports (a gomocup brain: that its program
    exists). Builds no env and no engine and starts nothing, so that a training config can
    be checked before anything is compiled (the env's rule and size are checked by
    `make_engine`).

    Raises:
      ValueError: an unknown name, an engine of another game or one whose package or
        program is missing (all such engines, one sentence each).
    """
    opponents = parse_opponents(names)
    problems = []
    for opp in opponents:
        if not isinstance(opp, ExternalOpponent):
            continue
        why = _wrong_game(opp, env_id)
        if why is None:
            try:
                _ENGINES[opp.kind].load(opp)
            except (ImportError, ValueError) as e:
                why = str(e)
        if why:
            problems.append(why)
    if problems:
        raise ValueError("; ".join(problems))
    return opponents


def make_engine(opp: ExternalOpponent, env) -> Engine:
    """The engine for a parsed name, for this env (a gomocup brain is started here).

    Raises:
      ValueError: the engine does not play this game (or this rule; or a brain refuses
        the board).
      ImportError: its package is not installed.
    """
    why = _wrong_game(opp, env.id)
    if why:
        raise ValueError(why)
    return _ENGINES[opp.kind].make(env, opp.arg)


# =========================================================================== matches
def _bucket(n: int) -> int:
    """The smallest power of two >= n."""
    return 1 << max(n - 1, 0).bit_length()


class ExternalMatchRunner:
    """Plays matches of a `players.Player` against an external `Engine` (see the module
    docstring). Keeps the jitted env functions and one jitted act per (agent kind, batch).

    Args:
      env: the `envs.Env`.
      num_games: games per match (rounded up to an even number).
      max_plies: ply cap (default: `players.default_max_plies(env)`).
      opening_plies: random plies at the start of each pair of games.
    """

    def __init__(self, env, num_games: int, *, max_plies: int | None = None,
                 opening_plies: int = 0):
        if num_games < 1:
            raise ValueError(f"num_games={num_games} must be >= 1")
        if opening_plies < 0:
            raise ValueError(f"opening_plies={opening_plies} must be >= 0")
        self.env = env
        self.num_games = num_games + num_games % 2
        self.max_plies = int(max_plies or players.default_max_plies(env))
        self.opening_plies = int(opening_plies)
        half = self.num_games // 2
        self._a_color = np.repeat(np.array([0, 1], np.int32), half)  # the agent's player id
        pair = jnp.arange(self.num_games, dtype=jnp.int32) % half
        per_game = jax.vmap(jax.random.fold_in, in_axes=(None, 0))

        def init(k_init):
            return jax.vmap(env.init)(per_game(k_init, pair))

        def opening(states, k_open, t):
            keys = per_game(jax.random.fold_in(k_open, t), pair)
            return jax.vmap(lambda k, m: players.random_legal(k, m[None])[0])(
                keys, states.legal_action_mask)

        def step(states, actions, moved, k_step, t):
            keys = per_game(jax.random.fold_in(k_step, t), pair)
            nxt = jax.vmap(env.step)(states, actions, keys)
            states = jax.tree.map(
                lambda n, s: jnp.where(moved.reshape((-1,) + (1,) * (s.ndim - 1)), n, s),
                nxt, states)
            return states, jnp.where(moved[:, None], nxt.rewards, 0.0)

        self._init, self._opening, self._step = jax.jit(init), jax.jit(opening), jax.jit(step)
        self._acts: dict[str, Callable] = {}
        self.device = jax.local_devices()[0]

    def _act_fn(self, agent: players.Player) -> Callable:
        """`act(params, states, idx int32[K], key) -> int32[K]`: the agent on games idx."""
        if agent.kind not in self._acts:
            self._acts[agent.kind] = jax.jit(
                lambda params, states, idx, key: agent.act(params, match.take(states, idx),
                                                           key))
        return self._acts[agent.kind]

    def play(self, agent: players.Player | Engine, engine: Engine, key, progress=None,
             on_ply=None, warn=None) -> match.MatchResult:
        """Plays `num_games` games of the agent against the engine. The key is consumed.

        Args:
          agent: the player under test (`players.PlayerFactory` builds them), or an
            `Engine` too (e.g. a network through its own Gomocup brain: `evaluate
            --brain`), which then moves game by game like the opponent.
          engine: from `make_engine`.
          progress: optional callable, called with the number of games that just ended.
          on_ply: optional callable, called with the ply number before each ply.
        Returns:
          the MatchResult from the agent's point of view.
        Raises:
          RuntimeError: an engine's view of a game disagrees with the env's.
          ValueError: an engine chose an illegal move (an in-process engine: a bug; a
            gomocup brain's faults are forfeits instead, see below).

        A game whose engine move raises `EngineForfeit` (a gomocup brain that crashed,
        timed out, answered garbage or an error, or played an illegal move) ends there,
        lost by the side whose engine failed; the counts per fault are in the result's
        `notes` and in a warning line (`warn`, default: stderr).
        """
        t0 = time.perf_counter()
        n = self.num_games
        k_init, k_open, k_act, k_step = jax.random.split(key, 4)
        jitted = not isinstance(agent, Engine)
        if jitted:
            act = self._act_fn(agent)
            # As in `match.MatchRunner.play`: this process's copy of replicated (training)
            # parameters, on one device.
            params = jax.device_put(parallel.local_replica(agent.params), self.device)
        engines = [engine] if jitted else [agent, engine]
        states = self._init(k_init)
        games = {id(e): [e.game(i) for i in range(n)] for e in engines}
        late0 = {id(e): e.brain.late for e in engines if e.brain is not None}
        total = np.zeros((n, 2), np.float32)
        lost = {id(e): np.zeros(n, bool) for e in engines}  # forfeited by this engine
        faults = {id(e): collections.Counter() for e in engines}
        done = np.asarray(states.done)
        t = 0

        def engine_moves(e, sel, actions, mask):
            """Moves of engine `e` in the games `sel` (in turn), into `actions`; returns
            the games it forfeited."""
            for g in np.flatnonzero(sel):
                try:
                    a = int(games[id(e)][g].best_action())
                except EngineForfeit as err:
                    lost[id(e)][g] = True
                    faults[id(e)][err.kind] += 1
                    (warn or _warn)(f"{e.name}: game {g}, ply {t}: {err}")
                    continue
                if not mask[g, a]:
                    raise ValueError(f"{e.name} chose {self.env.action_to_str(a)}, "
                                     f"illegal in game {g} at ply {t}")
                actions[g] = a
            return sel & lost[id(e)]

        theory = np.full(n, np.nan)  # the opening's solved outcome for the agent, if known
        while t < self.max_plies and not done.all():
            if on_ply is not None:
                on_ply(t)
            player = np.asarray(states.current_player)
            if t == self.opening_plies and hasattr(games[id(engine)][0], "value"):
                for g in np.flatnonzero(~done):
                    v = games[id(engine)][g].value()
                    if v is not None:
                        theory[g] = v if player[g] == self._a_color[g] else -v
            if t < self.opening_plies:
                actions = np.asarray(self._opening(states, k_open, t)).astype(np.int32)
                moved = ~done
            else:
                mine = ~done & (player == self._a_color)
                theirs = ~done & (player != self._a_color)
                actions = np.zeros(n, np.int32)
                mask = np.asarray(states.legal_action_mask)
                idx = np.flatnonzero(mine)
                if not jitted:
                    mine &= ~engine_moves(agent, mine, actions, mask)
                elif idx.size:
                    padded = np.resize(idx, _bucket(idx.size)).astype(np.int32)
                    chosen = act(params, states, padded, jax.random.fold_in(k_act, t))
                    actions[idx] = np.asarray(chosen)[:idx.size]
                theirs &= ~engine_moves(engine, theirs, actions, mask)
                moved = mine | theirs
            states, rewards = self._step(states, jnp.asarray(actions), jnp.asarray(moved),
                                         k_step, t)
            total += np.asarray(rewards)
            terminated = np.asarray(states.terminated)
            for g in np.flatnonzero(moved):
                for e in engines:
                    games[id(e)][g].push(int(actions[g]))
                    over = games[id(e)][g].is_over()
                    if over is not None and over != bool(terminated[g]):
                        raise RuntimeError(
                            f"game {g}, ply {t}: {e.name} says the game is "
                            f"{'over' if over else 'not over'}, the env says "
                            f"{'over' if terminated[g] else 'not over'}")
            forfeit = np.logical_or.reduce([lost[id(e)] for e in engines])
            now_done = np.asarray(states.done) | forfeit
            if progress is not None and (now_done & ~done).any():
                progress(int((now_done & ~done).sum()))
            done = now_done
            t += 1
        mine = total[np.arange(n), self._a_color]
        outcome = np.where(lost[id(engine)], 1.0, np.sign(mine))
        if not jitted:
            outcome = np.where(lost[id(agent)], -1.0, outcome)
        out = {"outcome": outcome, "a_first": self._a_color == 0, "finished": done,
               "plies": np.asarray(states.step_count)}
        if progress is not None and (~done).any():
            progress(int((~done).sum()))
        result = match.summarize(out, agent.name, engine.name, time.perf_counter() - t0)
        notes = [held_note(theory, outcome)] if (~np.isnan(theory)).any() else []
        for e in engines:
            late = e.brain.late - late0[id(e)] if e.brain is not None else 0
            note = format_faults(faults[id(e)], late)
            if note:
                (warn or _warn)(f"warning: {e.name}: {note} (in {n} games)")
                notes.append(note if e is engine else f"{e.name}: {note}")
        if notes:
            result = dataclasses.replace(result, notes="; ".join(notes))
        return result


def held_note(theory: np.ndarray, outcome: np.ndarray) -> str:
    """'held the solved value of the opening in 31 of 40 games (won 12/14, drawn 8/10, lost
    11/16)': of the games whose opening a solver valued (`theory`, the agent's -1/0/1; NaN:
    unknown), those whose result (`outcome`, the agent's sign) is that value, per value.
    Against a perfect engine no result can beat it: a game not held was misplayed."""
    known = ~np.isnan(theory)
    held = known & (outcome == theory)
    parts = [f"{word} {int(held[theory == v].sum())}/{int((theory == v).sum())}"
             for v, word in ((1, "won"), (0, "drawn"), (-1, "lost")) if (theory == v).any()]
    return (f"held the solved value of the opening in {int(held.sum())} of "
            f"{int(known.sum())} games ({', '.join(parts)})")


def format_faults(faults: dict[str, int], late: int = 0) -> str:
    """'forfeits: 2 timeout, 1 crash; 3 late answers' ('' when there is nothing)."""
    parts = []
    if faults:
        parts.append("forfeits: " + ", ".join(f"{faults[k]} {k}" for k in GOMOCUP_FAULTS
                                              if faults.get(k)))
    if late:
        parts.append(f"{late} late answer{'s' if late > 1 else ''} (past timeout_turn, "
                     "within the grace)")
    return "; ".join(parts)


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

