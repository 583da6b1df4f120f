"""A Gomocup brain: Gomoku models speaking the piskvork protocol on stdin/stdout.

    pbrain-az_jax                                  # what a manager runs: no arguments
    python -m az_jax.gomocup                       # the same
    python -m az_jax.gomocup --model gomoku_15x15  # one shipped model only
    python -m az_jax.gomocup --workdir runs/gomoku --chunk 16   # a run of train.py

Without a source flag the brain picks, at START, a shipped model (az_jax/models/) for the
board size and INFO rule: of those that play it (a model trained on that size, or a fully
convolutional one, network.head="conv", any size 5-22), the one trained nearest that size,
ties by PREFERRED (gomoku_15x15 plays 15x15 and 20x20). INFO rule may come after START:
the choice is made again (gomoku_conv_exact plays exactly five). No model for the rule
(renju, caro): ERROR.

Commands (one per line; answers are flushed at once):
  START n            OK (at once: the model loads and compiles in the search process), or
                     ERROR when no model plays an n x n board
  RECTSTART w,h      OK only for a square board
  RESTART            a new game on the same board: OK
  BEGIN              the brain plays first: answers x,y
  TURN x,y           the opponent's move: answers the brain's move x,y
  BOARD              then lines x,y,field (1 = own stone, 2 = opponent's, 3 = ignored) and
                     DONE: the position, then the brain's move x,y (one answer, after
                     DONE, also for problems: ERROR, and the board stays as it was)
  TAKEBACK x,y       removes the last stone if it is at x,y: OK
  PLAY x,y           the brain must play x,y: answers x,y
  INFO key value     timeout_turn, timeout_match, time_left (ms), max_memory (bytes), rule
                     (0 freestyle, 1 exactly five; 2 continuous, 4 renju and 8 caro are
                     refused: ERROR at the next command that is not INFO, as the
                     protocol has it for every problem with an INFO, in place of
                     that command, or at DONE after BOARD)
  ABOUT              name="az_jax", version, author, country
  END                exits (status 0)
Coordinates are x,y = column,row counted from 0 at the top left (action = y * size + x).
Before each move the brain prints `MESSAGE eval ... sims ...`: the chosen move's value for
the brain (-1..1) and its expected score, and the simulations searched.
Anything malformed gets ERROR with a reason, unknown commands UNKNOWN; the brain keeps going
(also after bytes that are not UTF-8, numbers too long to be coordinates, or a bug: ERROR
internal error, with the traceback on stderr). What either process writes to stderr goes
out as DEBUG lines: piskvork reads a brain's stderr as answers, skipping only DEBUG and
MESSAGE lines.

Processes: this one reads the commands and never imports JAX; the model lives in a
search process it starts (az_jax.gomocup_worker, one at a time; ended with the brain). So
the tactical answers stay on time while JAX imports and compiled programs load there (calls
that hold Python's interpreter lock for up to ~0.2 s), and a search call still running when
the move's time is nearly over (20 ms left) is given up (the move is made of what came back
in time).

Time: a move searches in small compiled chunks of --chunk simulations (each with fresh
Gumbel noise: one compiled search; visit counts added up) while the next chunk, timed by the
slowest so far, still fits in the move's budget: 80% of INFO timeout_turn less 10 ms, or
less when INFO time_left runs short (timeout_turn 0: one chunk, as fast as possible).
Long turns (a budget of 0.75 s or more) without an INFO max_memory below 540 MB also get a
deep search: a search of chunk x 2^k simulations is compiled in the background (the first
long move starts it; timed once, halved while it does not fit 75% of the budget, else grown
2x while that fits it, at most 4096; one that later gets too slow, the machine loaded, steps
down to the half size), and from then on each move is one such search, without noise, and
no chunks. When
not even one chunk fits (or the search is still compiling) the move comes from a one-ply
tactical check (win now, else block a five, else next to the stones). A move that wins at
once is always played, and a five the opponent threatens is always blocked. Before the
first chunk, the search's root tactics (`search.eval_tactics`, default `threats`: a forced
win by fours, a block, no move that leaves an open three open; ~7 ms on 9x9, ~50 ms on
15x15 on a CPU core) are computed once when they and a chunk fit the budget; else the
chunks search without them. --sims N
searches exactly N simulations per move and ignores the clock (START then answers once the
search is compiled). Compiled searches are kept in a persistent cache ($AZ_JAX_CACHE,
default ~/.cache/az_jax/jax; "off" disables it), so later starts are fast: --precompile
fills it once after installing.

Memory (both processes): XLA runs on one thread with no thread pool; the JAX runtime alone
is ~190 MB, this process ~18 MB, a brain whose search is cached ~290-320 MB with
`win_and_block` root tactics, ~410 MB with the threat search (its program adds ~100 MB as
it loads, up to ~490 MB in all measured under load; a compile adds ~250 MB at its peak).
INFO max_memory below 540 MB, read when the model is loaded (managers send it just after
START), selects `win_and_block`; below 350 MB gets ERROR.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path

from az_jax import cli
from az_jax.gomocup_worker import RemoteAgent, WorkerError, load_agent  # noqa: F401

# ASCII digits only, at most 9 of them: `int` would take other scripts' digits, and
# thousands of digits (Python refuses more than 4300) are no coordinate.
_INT = r"(-?[0-9]{1,9})"
_COORDS = re.compile(rf"^\s*{_INT}\s*,\s*{_INT}\s*$")
_BOARD_LINE = re.compile(rf"^\s*{_INT}\s*,\s*{_INT}\s*,\s*{_INT}\s*$")
_NUMBER = re.compile(rf"^\s*{_INT}\s*$")
_INFO_NUMBER = re.compile(r"^\s*(-?[0-9]{1,18})\s*$")  # milliseconds, bytes (max_memory)
TIME_SHARE = 0.8  # of the move's budget used for searching
SAFETY_S = 0.010  # seconds kept back for the tactical check, output and the pipe
MIN_SIZE, MAX_SIZE = 5, 22  # envs/gomoku.py
UNLIMITED_MS = 2**31 - 1  # the protocol's "no limit" for INFO time_left
MAX_TURN_S = 86_400.0  # a longer INFO timeout_turn is read as a day (waits would overflow)
MAX_RELOADS = 3  # loads whose search process died, in a row, before the brain says ERROR
MIN_MEMORY_MB = 350  # what a brain may peak at (measured: ~300 MB on a 20x20 board)
# Below this INFO max_memory the root tactics are win_and_block, not the threat search,
# whose compiled program adds ~100 MB to the peak when it loads (~410 MB in all on 9x9 on a
# quiet machine, 489 MB in a clean-clone CI run under load).
THREATS_MEMORY_MB = 540
RULES = {0: "freestyle", 1: "standard"}  # INFO rule bit 1: exactly five
# Between shipped models trained equally near the board's size, the first of these: the
# first stage of the retrained gomoku_15x15 beat gomoku_conv 19-0-1 on 15x15, and the
# shipped one (700 iterations more) beat that first stage 27-1-12 (README, Shipped models);
# gomoku_9x9 beat it 10-7-3 on 9x9 at iteration 125 of its 700 (the final one not measured).
PREFERRED = ("gomoku_15x15", "gomoku_9x9", "gomoku_conv")
# Deep searches: when a move's budget is at least DEEP_BUDGET_S (a turn of about 1 s or
# more) and no INFO max_memory below THREATS_MEMORY_MB holds the brain back, a second
# search program of chunk x 2^k simulations (the most that DEEP_SHARE of the budget fits,
# by the chunk's measured speed; at most DEEP_MAX_SIMS) is compiled in the background;
# from then on each move is one such search (evaluation mode: no noise, the considered
# set grows with the budget) when it fits, else chunks: one search of 512 simulations sees
# far deeper than 64 chunks of 8. No chunks after it: their visits, added up, outvoted its
# choice (at 1 s a move on 9x9, 1024 deep plus ~2900 in chunks scored 30-8-2 against
# gomokubench:hard where one search of 1024 alone scored 35-2-3).
DEEP_BUDGET_S = 0.75
DEEP_SHARE = 0.75
DEEP_MAX_SIMS = 4096


def search_budget(seconds: float) -> float:
    """The seconds a move of `seconds` may search (the rest covers the tactical check, the
    output and the pipe)."""
    return max(0.0, seconds * TIME_SHARE - SAFETY_S)


def searches_deep(turn_ms: int) -> bool:
    """Whether turns of `turn_ms` (no memory limit, no match clock) get a deep search."""
    return search_budget(turn_ms / 1000.0) >= DEEP_BUDGET_S


def _floats(values) -> list[float]:
    """A search result's per-action figures as a list of floats (an in-process agent gives
    numpy arrays, a remote one lists)."""
    return [float(x) for x in (values.tolist() if hasattr(values, "tolist") else values)]


def _show(text: str, limit: int = 40) -> str:
    """`text` quoted for an answer line: ASCII only, escapes visible, at most `limit` chars."""
    return ascii(text if len(text) <= limit else text[:limit] + "...")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("az_jax")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "0.1.0"


# ====================================================================== models (no JAX)
@dataclasses.dataclass(frozen=True)
class Model:
    """A model's facts from its checkpoint's JSON metadata (read without importing JAX)."""

    name: str
    workdir: Path
    step: int
    size: int
    rule: str
    head: str
    weights: Path | None  # <model>/weights.msgpack (`checkpoint.load_weights`), if any

    def plays(self, size: int, rule: str) -> bool:
        return self.rule == rule and (self.size == size or (
            self.head == "conv" and MIN_SIZE <= size <= MAX_SIZE))


def read_model(workdir, step: int | None = None, name: str | None = None) -> Model:
    """The newest (or `step`) checkpoint of a workdir, described from its metadata.

    Raises:
      FileNotFoundError: no checkpoint; ValueError: not a Gomoku model.
    """
    workdir = Path(workdir).expanduser().absolute()
    root = workdir / "checkpoints"
    steps = sorted((int(p.name) for p in root.glob("*")
                    if p.name.isdigit() and (p / "meta" / "metadata").is_file()),
                   reverse=True) if root.is_dir() else []
    if step is not None:
        steps = [step] if step in steps else []
    if not steps:
        raise FileNotFoundError(f"no checkpoints in {root}" + (
            "" if step is None else f" (wanted iteration {step})"))
    meta = json.loads((root / str(steps[0]) / "meta" / "metadata").read_text())
    if meta.get("env_id") != "gomoku":
        raise ValueError(f"a Gomocup brain needs a Gomoku model; {workdir} plays "
                         f"{meta.get('env_id')}")
    params = meta.get("env_params", {})
    weights = workdir / "weights.msgpack"
    return Model(name or workdir.name, workdir, steps[0], int(params.get("size", 15)),
                 str(params.get("rule", "freestyle")),
                 str(meta["config"].get("network", {}).get("head", "dense")),
                 weights if weights.is_file() and step is None else None)


def shipped_gomoku_models() -> list[Model]:
    out = []
    for name in cli.shipped_models():
        try:
            out.append(read_model(cli.MODELS / name, name=name))
        except (ValueError, FileNotFoundError, OSError, KeyError):
            continue  # another game
    return out


def choose(models: list[Model], size: int, rule: str) -> Model:
    """The model for a size x size board under `rule`: of those that play it (trained on
    that size, or a conv head), the one trained nearest that size; ties go to the first
    in `PREFERRED`, then by name.

    Raises:
      ValueError: none fits, saying what the models play.
    """
    fits = [m for m in models if m.plays(size, rule)]
    if not fits:
        have = ", ".join(f"{m.name} ({m.rule} {m.size}x{m.size}"
                         + (", any size" if m.head == "conv" else "") + ")" for m in models)
        if not any(m.rule == rule for m in models):
            raise ValueError(f"no model for {rule} gomoku; have {have or 'none'}")
        raise ValueError(f"unsupported size {size}: no model plays {rule} gomoku on "
                         f"{size}x{size} boards; have {have or 'none'}")
    rank = {name: i for i, name in enumerate(PREFERRED)}
    return min(fits, key=lambda m: (abs(m.size - size), rank.get(m.name, len(rank)), m.name))


def _info_key(arg: str) -> str:
    """The key of an INFO command's argument (`timeout_turn 5000` -> timeout_turn)."""
    return (arg.split(None, 1) or [""])[0].lower()


def _close(agent) -> None:
    """Ends an agent's child process, if it has one."""
    if hasattr(agent, "close"):
        agent.close()


# ====================================================================== board (no JAX)
def _quiet_order(stones: list[int], size: int, rule: str, limit: int = 20_000):
    """An order of one side's stones in which none makes a five as it goes down (under
    exactly five a six is no win, so 0..4 then 5 is decided, but 0..3, 5, then 4 is not),
    or None when there is none (or none within `limit` steps). Searched backwards: the last
    stone is one that makes no five on all the others, and so on, backtracking."""
    board = Board(size, rule)
    for a in stones:
        board.cells[a] = 0
    order: list[int] = []
    dead: set[frozenset] = set()
    steps = [limit]

    def five(left: frozenset) -> bool:  # a five among `left` (on the board now)
        n = size
        for a in left:
            y0, x0 = divmod(a, n)
            for dx, dy in ((1, 0), (0, 1), (1, 1), (1, -1)):
                px, py = x0 - dx, y0 - dy
                if 0 <= px < n and 0 <= py < n and board.cells[py * n + px] == 0:
                    continue  # not the run's first stone
                run, x, y = 0, x0, y0
                while 0 <= x < n and 0 <= y < n and board.cells[y * n + x] == 0:
                    run, x, y = run + 1, x + dx, y + dy
                if run == 5 or (run > 5 and rule == "freestyle"):
                    return True
        return False

    def place(left: frozenset) -> bool:
        if not left:
            return True
        # Stones that hold a five are no position of the game: every order of them made
        # it on the way (runs only grow as stones come), so none is tried.
        if left in dead or steps[0] <= 0 or five(left):
            return False
        steps[0] -= 1
        for a in sorted(left):
            board.cells[a] = -1
            if not board.wins(a, 0):  # `a` last, on the others: no five
                order.append(a)
                if place(left - {a}):
                    return True
                order.pop()
            board.cells[a] = 0
        dead.add(left)
        return False

    return order[::-1] if place(frozenset(stones)) else None


class Board:
    """The position in plain Python: stones, whose turn, wins (the env's rules, checked
    against it in the tests), and the one-ply tactical move."""

    def __init__(self, size: int, rule: str):
        self.size, self.rule = size, rule
        self.cells = [-1] * (size * size)  # -1 empty, else the player (0 = black)
        self.moves: list[int] = []
        self.winner: int | None = None

    @property
    def to_move(self) -> int:
        return len(self.moves) % 2

    @property
    def over(self) -> bool:
        return self.winner is not None or len(self.moves) == self.size * self.size

    def run_lengths(self, action: int, who: int) -> list[int]:
        """The length of `who`'s line through `action` in each direction, as if there."""
        n, out = self.size, []
        y0, x0 = divmod(action, n)
        for dx, dy in ((1, 0), (0, 1), (1, 1), (1, -1)):
            run = 1
            for sign in (1, -1):
                x, y = x0 + sign * dx, y0 + sign * dy
                while 0 <= x < n and 0 <= y < n and self.cells[y * n + x] == who:
                    run, x, y = run + 1, x + sign * dx, y + sign * dy
            out.append(run)
        return out

    def wins(self, action: int, who: int) -> bool:
        runs = self.run_lengths(action, who)
        return any(r == 5 for r in runs) or (self.rule == "freestyle" and max(runs) >= 5)

    def play(self, action: int) -> None:
        who = self.to_move
        if self.wins(action, who):
            self.winner = who
        self.cells[action] = who
        self.moves.append(action)

    def tactical(self) -> tuple[int, str]:
        """(move, why): a win now, else a block of the opponent's five, else the empty
        point next to the most stones (the centre on an empty board)."""
        me, n = self.to_move, self.size
        empty = [a for a, c in enumerate(self.cells) if c < 0]
        for who, why in ((me, "wins"), (1 - me, "blocks a five")):
            near = set()  # a winning point touches one of `who`'s stones
            for a in range(n * n):
                if self.cells[a] == who:
                    y, x = divmod(a, n)
                    near.update(j * n + i for j in range(max(0, y - 1), min(n, y + 2))
                                for i in range(max(0, x - 1), min(n, x + 2)))
            for a in sorted(near):
                if self.cells[a] < 0 and self.wins(a, who):
                    return a, why
        if not self.moves:
            return (n // 2) * n + n // 2, "centre"

        def score(a):
            y, x = divmod(a, n)
            near = sum(self.cells[j * n + i] >= 0 for j in range(max(0, y - 1), min(n, y + 2))
                       for i in range(max(0, x - 1), min(n, x + 2)))
            return near, -abs(y - n // 2) - abs(x - n // 2)

        return max(empty, key=score), "next to the stones"


# ====================================================================== the brain
class Brain:
    """The protocol state machine; `handle(line)` returns False at END.

    Args:
      write: writes one answer line.
      models: the models to choose from (`shipped_gomoku_models`, or the one a flag names).
      loader: `loader(model, size, rule)` -> Agent (default: a
        `gomocup_worker.RemoteAgent`, the Agent in a child process, so that this one never
        imports JAX); runs in a background thread after START.
      chunk, sims, turn_ms: see the command-line flags.
    """

    def __init__(self, write, models: list[Model], loader=None, chunk: int = 8,
                 sims: int | None = None, turn_ms: int = 5000, seed: int = 0):
        self.write = write
        self.models = list(models)
        self.loader = loader or self._start_remote
        self.seed = seed
        self.chunk = int(chunk)
        self.sims = sims
        self.info = {"timeout_turn": int(turn_ms), "timeout_match": 0, "time_left": None,
                     "rule": 0, "max_memory": 0}
        self.size: int | None = None
        self.model: Model | None = None
        self.board_lines: list[tuple[int, int]] | None = None  # inside BOARD ... DONE
        self._board_errors: list[str] = []  # problems inside BOARD, answered at DONE
        self._info_errors: dict[str, str] = {}  # INFO key -> its problem, for the next command
        self._job = None  # (model, size, rule, thread, box) of the agent being loaded
        self._chunk_s = None  # the slowest chunk seen (seconds)
        self._reloads = 0  # loads started again after their search process died, in a row
        self._deep_sims = 0  # the deep search's simulations in the last move (0: none)
        self.board = Board(15, "freestyle")
        self._received = time.perf_counter()

    @property
    def started(self) -> bool:
        return self.size is not None

    @property
    def rule(self) -> str:
        rule = self.info["rule"]
        if rule & 2:  # after a five the game goes on, and BOARD marks its stones as 3
            raise ValueError(f"rule {rule} (a continuous game) is not supported: az_jax "
                             "plays freestyle (rule 0) and exactly five (rule 1)")
        if rule & 4:
            raise ValueError(f"rule {rule} (renju) is not supported: az_jax plays freestyle "
                             "(rule 0) and exactly five (rule 1)")
        if rule & 8:
            raise ValueError(f"rule {rule} (caro) is not supported: az_jax plays freestyle "
                             "(rule 0) and exactly five (rule 1)")
        return RULES[rule & 1]

    # ------------------------------------------------------------------ model choice
    def _select(self, size: int) -> None:
        """Chooses the model for `size` and the rule; loads it in the background."""
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"unsupported size {size}: boards from {MIN_SIZE} to {MAX_SIZE}")
        model = choose(self.models, size, self.rule)
        self._check_memory()
        key = (model, size, self.rule)
        if self._job is None or self._job[:3] != key:
            if self._job is not None:
                old = self._job[-1]
                _close(old.pop("agent", None))
                # One still loading (INFO rule just after START) ends now, not once it has
                # loaded: two search processes would take twice the memory meanwhile.
                if old.get("loading") is not None:
                    old["loading"].kill()
            box: dict = {}
            thread = threading.Thread(target=self._load, args=(key, box), daemon=True)
            self._job = (*key, thread, box)
            self._chunk_s = None
            thread.start()
        self.model = model

    def _start_remote(self, model, size, rule, box=None):
        """The default loader: the model in a search process (`RemoteAgent`), put in
        `box["loading"]` as soon as that process exists (so that `_select` can end it)."""
        def started(agent):
            box["loading"] = agent
            if self._job is None or self._job[-1] is not box:  # replaced meanwhile
                agent.kill()

        return RemoteAgent(model, size, rule, self.seed,
                           started=started if box is not None else None)

    def _load(self, key, box) -> None:
        try:
            if self.loader == self._start_remote:
                agent = self._start_remote(*key, box=box)
            else:
                agent = self.loader(*key)
            # Read now, late: managers send INFO max_memory just after START.
            agent.tactics = self._tactics_for_memory()
            t0 = time.perf_counter()
            state = agent.new_game()
            agent.play(state, 0)  # compiles the step
            if self.sims:
                agent.warmup(self.sims)
            else:  # one compiled chunk (noisy: each chunk adds a fresh sample)
                invalid = agent.root_mask(state)  # compiles the root tactics
                agent.plain_mask(state)  # and the mask of a move with no time for them
                agent._run(state, self.chunk, False, invalid)
                t1 = time.perf_counter()
                agent._run(state, self.chunk, False, invalid)  # compiled now: its speed
                box["chunk_s"] = time.perf_counter() - t1
                agent.root_mask(state)  # and the tactics' (agent.mask_seconds)
            box["warmup_s"] = time.perf_counter() - t0
            box["agent"] = agent
            if self._job is None or self._job[-1] is not box:  # replaced meanwhile
                _close(box.pop("agent", None))
        except Exception as e:  # noqa: BLE001 - reported at the next move
            box["error"] = f"{type(e).__name__}: {e}"
            box["ended"] = isinstance(e, WorkerError) and str(e).startswith(
                "the search process ended")
            if self._job is not None and self._job[-1] is box:  # (else ended on purpose)
                traceback.print_exc(file=sys.stderr)

    def _restart_if_ended(self, agent) -> None:
        """Starts loading the model again when `agent`'s search process has ended (killed,
        out of memory): the next moves are tactical until it is back."""
        if getattr(agent, "ended", False) and self._job is not None and (
                self._job[-1].get("agent") is agent):
            _close(agent)
            self._job = None
            self._select(self.size)

    def _agent(self, wait_s: float):
        """The loaded agent, waiting at most `wait_s` for it (None if not ready)."""
        if self._job is None:
            return None
        *_, thread, box = self._job
        if "agent" not in box and "error" not in box:
            thread.join(None if wait_s == float("inf") else max(0.0, wait_s))
        if "error" in box:
            if box.get("ended") and self._reloads < MAX_RELOADS:
                # Its search process died while loading (killed, out of memory): this move
                # is the tactical one, and the model loads again.
                self._reloads += 1
                self._job = None
                self._select(self.size)
                return None
            raise ValueError(f"the model {self.model.name} failed to load: {box['error']}")
        if "agent" in box:
            self._reloads = 0
            if self._chunk_s is None:
                self._chunk_s = box.get("chunk_s")
        return box.get("agent")

    def _deep(self, agent, state, budget: float):
        """(simulations, seconds) of the deep search when it is compiled, else None; starts
        compiling it (a background thread, once per loaded model) when this move's budget
        calls for one (`DEEP_BUDGET_S`) and the memory limit allows it."""
        box = self._job[-1]
        if "deep" in box or self._chunk_s is None:
            return box.get("deep")
        if "deep_job" not in box and budget >= DEEP_BUDGET_S and (
                self._tactics_for_memory() is None):
            sims = self.chunk
            while (sims * 2 <= DEEP_MAX_SIMS
                   and self._chunk_s * sims * 2 / self.chunk <= DEEP_SHARE * budget):
                sims *= 2
            if sims >= 8 * self.chunk:
                def compile_deep(sims=sims):
                    shrunk = False
                    try:
                        while True:
                            agent.compile_search(state, sims, evaluation=True)
                            # Timed once here, beside the moves (so rather slower than
                            # alone), then by the moves that use it.
                            t0 = time.perf_counter()
                            agent.time_search(state, sims, evaluation=True)
                            took = time.perf_counter() - t0
                            # The chunk's speed is only a guess at a bigger tree's: halve
                            # a size that does not fit, then stop there.
                            if took > DEEP_SHARE * budget and sims // 2 >= 8 * self.chunk:
                                sims, shrunk = sims // 2, True
                                continue
                            box["deep"] = (sims, took)  # the smaller one stays compiled:
                            # a move may be about to run it
                            # Grow it while twice the time still fits.
                            if (shrunk or sims * 2 > DEEP_MAX_SIMS
                                    or 2 * took > DEEP_SHARE * budget):
                                return
                            sims *= 2
                    except Exception:  # noqa: BLE001 - chunks go on; the cause on stderr
                        traceback.print_exc(file=sys.stderr)

                box["deep_job"] = threading.Thread(target=compile_deep, daemon=True)
                box["deep_job"].start()
        return None

    def _tactics_for_memory(self) -> str | None:
        """The root tactics that fit INFO max_memory: `win_and_block` below
        THREATS_MEMORY_MB (the threat search's program adds ~100 MB when it loads), else
        None (the model's `search.eval_tactics`, `threats` by default)."""
        limit = self.info["max_memory"]
        return "win_and_block" if limit and limit < THREATS_MEMORY_MB * 2**20 else None

    def _check_memory(self) -> None:
        limit = self.info["max_memory"]
        if limit and limit < MIN_MEMORY_MB * 2**20:
            raise ValueError(f"INFO max_memory {limit} bytes is below the {MIN_MEMORY_MB} MB "
                             "this brain needs (JAX alone takes ~190 MB)")

    # ------------------------------------------------------------------ game state
    def reset(self) -> None:
        self.board = Board(self.size or 15, self.rule)
        self._state, self._synced, self._synced_moves = None, 0, []

    def _coords(self, text: str) -> int:
        m = _COORDS.match(text)
        if not m:
            raise ValueError(f"cannot read coordinates {_show(text.strip())}: expected x,y")
        return self._action(int(m.group(1)), int(m.group(2)))

    def _action(self, x: int, y: int) -> int:
        n = self.size
        if not (0 <= x < n and 0 <= y < n):
            raise ValueError(f"{x},{y} is off the {n}x{n} board (0 <= x,y < {n})")
        return y * n + x

    def _xy(self, action: int) -> str:
        return f"{action % self.size},{action // self.size}"

    def _play(self, action: int) -> None:
        if self.board.over:
            raise ValueError("the game is over (RESTART or START for a new one)")
        if self.board.cells[action] >= 0:
            raise ValueError(f"{self._xy(action)} is occupied")
        self.board.play(action)

    def _sync(self, agent):
        """The env state of the board (stepping only the new moves)."""
        if self._state is None or self.board.moves[:self._synced] != self._synced_moves:
            self._state, self._synced, self._synced_moves = agent.new_game(), 0, []
        for a in self.board.moves[self._synced:]:
            self._state = agent.play(self._state, a)
        self._synced = len(self.board.moves)
        self._synced_moves = list(self.board.moves)
        return self._state

    # ------------------------------------------------------------------ thinking
    def move_seconds(self) -> float:
        """Seconds this move may take, from when its command arrived: the turn, or less
        when INFO time_left runs short."""
        turn = self.info["timeout_turn"]
        # (clamped: a turn of 1e17 ms overflowed the waits for a model still loading)
        seconds = min(turn / 1000.0, MAX_TURN_S) if turn and turn > 0 else 0.0
        share = self._time_left_share()
        return seconds if share is None else min(seconds, share)

    def _time_left_share(self) -> float | None:
        """This move's share of `INFO time_left` in seconds; None when the match's time is
        not limited. (The protocol: a manager sends time_left whenever it is, and the brain
        may rely on it alone, not on timeout_match; 2147483647 = no limit.)"""
        left = self.info["time_left"]
        if left is None or left >= UNLIMITED_MS:
            return None
        empty = self.size * self.size - len(self.board.moves)
        moves_left = max(8, empty // 4)  # our moves still to come, roughly
        return max(0.0, left / 1000.0 / moves_left)

    def budget(self) -> float:
        """Seconds to search for this move, from when its command arrived."""
        return search_budget(self.move_seconds())

    def think_and_play(self) -> str:
        if self.board.over:
            raise ValueError("the game is over (RESTART or START for a new one)")
        t0 = self._received
        self._deep_sims = 0  # set by `_search` when a deep search ran
        fallback, why = self.board.tactical()
        if self.sims:
            agent = self._agent(float("inf"))
        else:  # wait for a model still loading only while a chunk would still fit after
            agent = self._agent(self.budget() - (time.perf_counter() - t0) - (
                self._chunk_s or self.budget() / 2))
        thought, failed = None, None
        if agent is not None and why != "wins":
            state = self._sync(agent)
            try:
                if self.sims:
                    thought = agent.think(state, self.sims)
                else:
                    thought = self._search(agent, state, t0)
            except WorkerError as e:  # this move is the tactical one; the game goes on
                traceback.print_exc(file=sys.stderr)
                failed = str(e)
                self._restart_if_ended(agent)
        if thought is None or why == "wins" or (
                why == "blocks a five" and not self.board.wins(thought.action,
                                                             self.board.to_move)):
            action = fallback
            self.write(f"MESSAGE tactical move ({why}); "
                       + ("search not ready" if agent is None else
                          f"the search failed: {failed}" if failed else
                          "no time to search" if thought is None else
                          f"the search chose {self._xy(thought.action)}"))
        else:
            action = thought.action
            deep = f" (one search of {self._deep_sims})" if self._deep_sims else ""
            self.write(f"MESSAGE eval {thought.value:+.3f} (expected score "
                       f"{100 * thought.win_rate:.0f}%) sims {thought.simulations}{deep} "
                       f"time {1000 * (time.perf_counter() - t0):.0f} ms "
                       f"model {self.model.name}")
        self._play(action)
        return self._xy(action)

    def _search(self, agent, state, t0: float):
        """Chunks of `self.chunk` simulations while the next one (timed by the slowest so
        far) still fits the budget; None when none fits. The aggregate as `think_for`.
        The root tactics (`Agent.root_mask`) are computed once, before the first chunk,
        when they and a chunk fit the budget; else the chunks search without them. With
        a long turn, one deep search comes first once it is compiled (`_deep`).

        An agent in a child process (`gomocup_worker.RemoteAgent`) gives up a call still
        running when the move's time is nearly over (`deadline`: the budget is what the
        searches plan to fill; this is the time left to them, less SAFETY_S twice for the
        answer): the move is then made of the chunks that came back in time (none: the
        tactical check plays). Results are added up in plain Python (lists: a remote
        agent's replies), so that this process never imports numpy."""
        budget = self.budget()
        fastest = not self.info["timeout_turn"]  # 0: as fast as possible, one chunk
        if hasattr(agent, "deadline"):
            agent.deadline = None if fastest else t0 + max(
                budget, self.move_seconds() - 2 * SAFETY_S)
        with_tactics = fastest or (time.perf_counter() - t0 + (agent.mask_seconds or 0.0)
                                   + (self._chunk_s or 0.0) <= budget)
        share = self._time_left_share() if fastest else None
        if share is not None:  # as fast as possible, and within the match's time left too
            spent = time.perf_counter() - t0 + (self._chunk_s or 0.0)
            if spent > share:
                return None  # not even one chunk: the tactical check plays
            with_tactics = spent + (agent.mask_seconds or 0.0) <= share
        try:
            invalid = agent.root_mask(state) if with_tactics else agent.plain_mask(state)
        except TimeoutError:
            return None
        deep = None if fastest else self._deep(agent, state, budget)
        visits = q_sum = weights = None
        values, sims, first = [], 0, None
        while True:
            size, est = self.chunk, self._chunk_s or 0.0
            # The deep search first (once: it has no noise), while it fits.
            if (first is None and deep is not None
                    and time.perf_counter() - t0 + deep[1] <= budget):
                size, est = deep
            if first is not None and (fastest or self._deep_sims):
                break  # one chunk as fast as possible; or a deep search's move stands
            if not fastest and time.perf_counter() - t0 + est > budget:
                break
            t1 = time.perf_counter()
            try:
                action, v, n, q, w = agent._run(state, size, size != self.chunk, invalid)
            except TimeoutError:  # given up at the deadline (a deep search: at least that slow)
                action = None
            took = time.perf_counter() - t1
            if size == self.chunk:
                if action is not None:  # (a call given up says nothing of a chunk's speed)
                    self._chunk_s = took if self._chunk_s is None else max(
                        took, 0.9 * self._chunk_s + 0.1 * took)
            else:  # the slowest deep search so far, decaying as the chunk's
                deep = (size, max(took, 0.9 * deep[1] + 0.1 * took))
                box = self._job[-1]
                if box["deep"][0] == size:  # not grown meanwhile by the compiling thread
                    box["deep"] = deep
                    # Too slow to fit a move now (a loaded machine): it would never run,
                    # and be timed, again. The half size instead, when it is compiled.
                    if (deep[1] > 0.9 * budget
                            and (size // 2, True) in agent._compiled):
                        box["deep"] = (size // 2, deep[1] / 2)
                self._deep_sims = size if action is not None else 0
            if action is None:
                break
            n, q, w = _floats(n), _floats(q), _floats(w)
            q = [0.0 if x != x else x * k for x, k in zip(q, n, strict=True)]  # NaN: unvisited
            if first is None:
                first, visits, q_sum, weights = action, n, q, w
            else:
                visits = [a + b for a, b in zip(visits, n, strict=True)]
                q_sum = [a + b for a, b in zip(q_sum, q, strict=True)]
                weights = [a + b for a, b in zip(weights, w, strict=True)]
            values.append(v)
            sims += size
        if first is None:
            if not fastest and self._chunk_s:
                # No chunk ran. An estimate that keeps chunks out is never timed again, so
                # it decays: after one slow chunk (a stalled machine) the brain searches
                # again a few moves later instead of never.
                self._chunk_s *= 0.8
            return None
        action = first
        if visits[action] < max(visits):
            action = visits.index(max(visits))
        q_mean = [qs / k if k > 0 else math.nan for qs, k in zip(q_sum, visits, strict=True)]
        return agent._thought(action, sum(values) / len(values), visits, q_mean,
                              [x / len(values) for x in weights], sims, t0)

    # ------------------------------------------------------------------ protocol
    def handle(self, line: str) -> bool:
        """Processes one input line. Returns False when the brain should exit."""
        self._received = time.perf_counter()
        text = line.strip()
        if not text:
            return True
        cmd = arg = ""
        try:
            if self.board_lines is not None:
                return self._board_line(text)
            cmd, arg = (text.split(None, 1) + [""])[:2]
            cmd = cmd.upper()
            if cmd not in ("INFO", "END") and self._info_errors:
                # The protocol: a problem with INFO waits for the first command that is not
                # INFO (the manager reads nothing meanwhile), and is its answer; that
                # command is not carried out. BOARD's answer comes after its DONE.
                errors, self._info_errors = self._info_errors, {}
                error = next(iter(errors.values()))
                if cmd == "BOARD":
                    self._open_board(error)
                else:
                    self.write(f"ERROR {error}")
                return True
            handler = getattr(self, f"_cmd_{cmd.lower()}", None)
            if handler is None or not (cmd.isascii() and cmd.isalpha()):
                self.write(f"UNKNOWN command {_show(cmd)} is not supported")
                return True
            going_on = handler(arg.strip()) is not False
            if cmd == "INFO":  # a later INFO of the same key that is fine mends it
                self._info_errors.pop(_info_key(arg), None)
            return going_on
        except ValueError as e:
            error = str(e)
        except Exception as e:  # noqa: BLE001 - a bug must not end the tournament game
            traceback.print_exc(file=sys.stderr)
            error = (f"internal error {type(e).__name__} on {_show(text)} (a bug; the "
                     "traceback is on stderr)")
        if cmd == "INFO":
            self._info_errors[_info_key(arg)] = error
        else:
            self.write(f"ERROR {error}")
        return True

    def _need_start(self) -> None:
        if not self.started:
            raise ValueError("no game: send START first")
        self.rule  # noqa: B018 - raises for a refused rule
        if self.model is None:
            raise ValueError("no model for this board and rule (see the ERROR after START "
                             "or INFO rule)")

    def _cmd_start(self, arg: str):
        m = _NUMBER.match(arg)
        if not m:
            raise ValueError(f"START needs a board size, got {_show(arg)}")
        n = int(m.group(1))
        self.size, self.model = None, None
        self._select(n)
        if self.sims:  # a fixed search, not a clock: START answers once it is compiled
            self._agent(float("inf"))
        self.size = n
        self.reset()
        self.write("OK")

    def _cmd_rectstart(self, arg: str):
        m = _COORDS.match(arg)
        if not m:
            raise ValueError(f"RECTSTART needs width,height, got {_show(arg)}")
        w, h = int(m.group(1)), int(m.group(2))
        if w != h:
            raise ValueError(f"unsupported board {w}x{h}: az_jax plays square boards only")
        return self._cmd_start(str(w))

    def _cmd_restart(self, arg: str):
        self._need_start()
        self.reset()
        self.write("OK")

    def _cmd_begin(self, arg: str):
        self._need_start()
        if self.board.moves:
            raise ValueError("BEGIN is for an empty board (send RESTART or BOARD)")
        self.write(self.think_and_play())

    def _cmd_turn(self, arg: str):
        self._need_start()
        self._play(self._coords(arg))
        try:
            reply = self.think_and_play()
        except Exception:
            if not self.board.over:  # no answer: the board as before the TURN, so that the
                self._take_back()    # same TURN sent again is the opponent's stone again
            raise
        self.write(reply)

    def _take_back(self) -> None:
        """Removes the last stone."""
        moves = self.board.moves[:-1]
        self.reset()
        for a in moves:
            self.board.play(a)

    def _cmd_play(self, arg: str):
        self._need_start()
        action = self._coords(arg)
        self._play(action)
        self.write(self._xy(action))

    def _cmd_takeback(self, arg: str):
        self._need_start()
        action = self._coords(arg)
        if not self.board.moves or self.board.moves[-1] != action:
            raise ValueError(f"{self._xy(action)} is not the last stone played")
        self._take_back()
        self.write("OK")

    def _cmd_board(self, arg: str):
        try:
            self._need_start()
        except ValueError as e:  # answered at DONE: the stone lines come first
            self._open_board(str(e))
            return
        self._open_board()

    def _open_board(self, error: str | None = None) -> None:
        """Reads the lines up to DONE as BOARD's (the manager sends them all before it reads
        the one answer); `error`, if any, is that answer."""
        self.board_lines, self._board_errors = [], [error] if error else []

    def _board_line(self, text: str) -> bool:
        """One line inside BOARD. A problem is kept for DONE, whose one answer is then
        ERROR (the first problem) and the board stays as it was, not half set."""
        word = text.split()[0].upper()
        if word == "END":
            return False
        if word != "DONE":
            if not self.started:  # no board to check them against: DONE answers that
                return True
            m = _BOARD_LINE.match(text)
            if not m:
                self._board_errors.append(f"cannot read BOARD line {_show(text)}: expected "
                                          "x,y,field or DONE")
                return True
            x, y, field = (int(g) for g in m.groups())
            try:
                action = self._action(x, y)
            except ValueError as e:
                self._board_errors.append(str(e))
                return True
            if field in (1, 2):
                self.board_lines.append((action, field))
            elif field != 3:  # 3: a stone of a continuous game's winning line; not used here
                self._board_errors.append(f"field {field} in {_show(text)}: expected 1 (own) "
                                          "or 2 (opponent)")
            return True
        lines, self.board_lines = self.board_lines, None
        errors, self._board_errors = self._board_errors, []
        if errors:
            more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
            self.write(f"ERROR {errors[0]}{more}; BOARD not set")
            return True
        kept = self.board, self._state, self._synced, self._synced_moves
        try:
            self._set_board(lines)
        except ValueError as e:
            self.board, self._state, self._synced, self._synced_moves = kept
            self.write(f"ERROR {e}")
            return True
        self.write(self.think_and_play())
        return True

    def _set_board(self, lines: list[tuple[int, int]]) -> None:
        own = [a for a, f in lines if f == 1]
        opp = [a for a, f in lines if f == 2]
        points = own + opp
        if len(set(points)) != len(points):
            raise ValueError("BOARD names a point twice")
        # The brain moves next, so it is black (moves first) when the counts are equal.
        if len(own) == len(opp):
            black, white = own, opp
        elif len(opp) == len(own) + 1:
            black, white = opp, own
        else:
            raise ValueError(f"BOARD has {len(own)} own and {len(opp)} opponent stones: "
                             "not a position where it is the brain's turn")
        # The stones go down in turn, each side's in an order that makes no five on the
        # way (the manager may send them in any order): under exactly five, a five can
        # become a six, which does not win, when a later stone joins it.
        self.reset()
        orders = [_quiet_order(side, self.size, self.rule) for side in (black, white)]
        if None in orders:
            raise ValueError("the position on BOARD is already decided (found no order of "
                             "its stones that avoids a five before the last one)")
        for i in range(len(points)):  # the two sides' stones never make each other's fives
            self._play(orders[i % 2][i // 2])
        if self.board.over:
            raise ValueError("the position on BOARD is already decided")

    def _cmd_info(self, arg: str):
        key, value = _info_key(arg), (arg.split(None, 1) + ["", ""])[1]
        if not key:
            raise ValueError("INFO needs a key and a value, e.g. INFO timeout_turn 5000")
        if key in ("timeout_turn", "timeout_match", "time_left", "rule", "max_memory",
                   "game_type"):
            m = _INFO_NUMBER.match(value)
            if not m:
                raise ValueError(f"INFO {key} needs an integer, got {_show(value)}")
            number = int(m.group(1))
            if number < 0 and key != "time_left":  # time_left < 0: the match's time is out
                raise ValueError(f"INFO {key} must be 0 or more, got {number}")
            self.info[key] = number
            if key in ("rule", "max_memory") and self.started:
                if key == "max_memory":
                    self._check_memory()
                    return
                self.model = None
                self._select(self.size)  # the rule may need another model
                moves = list(self.board.moves)
                self.reset()
                for a in moves:
                    self.board.play(a)
        # other keys (folder, evaluate, ...) are accepted and ignored

    def _cmd_about(self, arg: str):
        what = (f"{self.model.rule} {self.size}x{self.size}, model {self.model.name}"
                if self.model else "freestyle and exactly five, 5x5 to 22x22")
        self.write(f'name="az_jax", version="{_version()}", author="az_jax authors", '
                   f'country="unknown", note="AlphaZero in JAX, {what}"')

    def _cmd_end(self, arg: str):
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m az_jax.gomocup", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workdir", help="a Gomoku training run's directory (its newest "
                                       "checkpoint) instead of the shipped models")
    src.add_argument("--checkpoint", metavar="PATH",
                     help="one checkpoint directory: <workdir>/checkpoints/<iteration>")
    src.add_argument("--model", metavar="NAME",
                     help="only this shipped Gomoku model: " + (", ".join(
                         m for m in cli.shipped_models() if m.startswith("gomoku"))
                         or "none in az_jax/models/"))
    p.add_argument("--chunk", type=cli.integer(1, cli.MAX_SIMULATIONS), default=8, metavar="N",
                   help="simulations per compiled search chunk in timed play (default 8)")
    p.add_argument("--sims", type=cli.integer(1, cli.MAX_SIMULATIONS), default=None,
                   metavar="N",
                   help="search exactly N simulations per move, ignoring the clock")
    p.add_argument("--turn-ms", type=cli.integer(0), default=5000, metavar="MS",
                   help="time per move until INFO timeout_turn says otherwise (default 5000)")
    p.add_argument("--seed", type=cli.integer(0, cli.MAX_SEED), default=0,
                   help="seed of the search keys, 0 to 4294967295 (default 0)")
    p.add_argument("--precompile", nargs="?", const="15,20", metavar="SIZES",
                   help="compile the searches for these board sizes (default 15,20), under "
                        "each rule a model plays, into the persistent cache and exit: run "
                        "once after installing, so that no tournament game pays for a "
                        "compile (~500 MB peak, tens of seconds; a brain that finds its "
                        "search cached peaks near 300 MB)")
    return p


def precompile(models: list[Model], sizes: str, args) -> int:
    """Fills the compilation cache for `sizes`, under each rule (INFO rule 0 and 1) that a
    model plays; returns the exit status."""
    try:
        wanted = [int(n) for n in sizes.split(",")]
    except ValueError:
        print(f"error: --precompile takes sizes like 15,20, got {sizes!r}", file=sys.stderr)
        return 2
    for n in wanted:
        compiled = 0
        for rule, name in RULES.items():
            brain = Brain(lambda line: None, models, chunk=args.chunk, sims=args.sims,
                          seed=args.seed)
            brain.handle(f"INFO rule {rule}")
            t0 = time.perf_counter()
            brain.handle(f"START {n}")
            if brain.model is None:  # no model plays this size under this rule
                continue
            try:
                brain._agent(float("inf"))
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            finally:
                _close(brain._job[-1].get("agent"))
            compiled += 1
            print(f"compiled {brain.model.name} for {n}x{n} {name} in "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        if not compiled:
            print(f"error: no model plays {n}x{n}", file=sys.stderr)
            return 2
    return 0


def source_models(args) -> list[Model]:
    """The models the flags allow (all shipped Gomoku models without a flag).

    Raises:
      ValueError, FileNotFoundError: with a message for the user.
    """
    if args.workdir is not None:
        if not str(args.workdir).strip():
            raise ValueError("--workdir is empty")
        return [read_model(args.workdir)]
    if args.checkpoint is not None:
        path = Path(args.checkpoint).expanduser().absolute()
        if not path.name.isdigit() or path.parent.name != "checkpoints":
            raise ValueError(f"{args.checkpoint} is not a checkpoint directory: expected "
                             "<workdir>/checkpoints/<iteration>")
        return [read_model(path.parent.parent, step=int(path.name))]
    models = shipped_gomoku_models()
    if args.model is not None:
        models = [m for m in models if m.name == args.model]
        if not models:
            raise ValueError(f"no shipped Gomoku model {args.model!r}; available: "
                             + ", ".join(m.name for m in shipped_gomoku_models()))
    return models


def main(argv=None, stdin=None, stdout=None, debug_stderr: bool = False) -> int:
    """The brain on `stdin`/`stdout` (default: the process's). `debug_stderr`: once the
    flags are read and it serves a manager, its stderr goes out as DEBUG lines
    (`stderr_as_debug_lines`; the console script does this)."""
    args = build_parser().parse_args(argv)
    # Only protocol lines go to stdout: anything a library prints goes to stderr meanwhile.
    out = stdout or sys.stdout
    saved, sys.stdout = sys.stdout, sys.stderr
    try:
        return _serve(args, stdin or sys.stdin, out, debug_stderr)
    finally:
        sys.stdout = saved


def _serve(args, stdin, out, debug_stderr: bool = False) -> int:
    if hasattr(stdin, "reconfigure"):
        stdin.reconfigure(errors="replace")  # bytes that are not UTF-8 become U+FFFD
    if hasattr(out, "reconfigure"):
        out.reconfigure(errors="backslashreplace")  # e.g. a cp1252 console on Windows
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            out.write(line + "\n")
            out.flush()

    # Threads (a loader, the reader of the search process's replies) hand the interpreter
    # over often, so that none holds up an answer by more than a millisecond.
    sys.setswitchinterval(0.0005)
    for name in ("chunk", "sims"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"error: --{name} must be >= 1", file=sys.stderr)
            return 2
    try:
        models = source_models(args)
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.precompile:
        return precompile(models, args.precompile, args)
    global _relay
    if debug_stderr:
        _relay = stderr_as_debug_lines()
    brain = Brain(write, models, chunk=args.chunk, sims=args.sims, turn_ms=args.turn_ms,
                  seed=args.seed)
    print("az_jax gomocup brain: " + ", ".join(
        f"{m.name} ({m.rule} {m.size}x{m.size}, {m.head} head)" for m in models),
        file=sys.stderr, flush=True)
    while True:
        line = stdin.readline()
        if not line:  # the manager closed the pipe
            return 0
        if not brain.handle(line):
            return 0


def stderr_as_debug_lines() -> threading.Thread:
    """Makes everything written to this process's stderr (fd 2, which the search process
    inherits) reach the real stderr as `DEBUG ...` lines, through a pipe and a thread.

    piskvork gives a brain's stderr the pipe of its stdout and skips only the lines that
    begin with DEBUG or MESSAGE: any other line is read as the answer to its command, so
    the start line, a traceback or a library's warning ended the brain's game (at START,
    the start line was taken for the answer). Every manager ignores DEBUG lines. Returns
    the relay thread (`run` gives it a moment to drain at exit)."""
    read_fd, write_fd = os.pipe()
    real = os.dup(2)
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    end = os.linesep.encode()

    def relay() -> None:
        with open(read_fd, "rb") as lines:
            for line in lines:  # one write a line: whole lines between the answers
                os.write(real, b"DEBUG " + line.rstrip(b"\r\n") + end)

    thread = threading.Thread(target=relay, name="stderr-relay", daemon=True)
    thread.start()
    return thread


_relay: threading.Thread | None = None  # `stderr_as_debug_lines`'s thread, once started


def run() -> None:
    """The console script `pbrain-az_jax`: `main`, then an immediate exit (a model still
    compiling in the background must not hold up, or crash, the exit at END). While it
    serves a manager its stderr goes out as DEBUG lines (`stderr_as_debug_lines`)."""
    code = main(debug_stderr=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if _relay is not None:
        os.close(2)  # the relay drains, then ends (once the search process has gone too)
        _relay.join(timeout=0.2)  # (managers wait ~0.7 s after END before they kill)
    os._exit(code)


if __name__ == "__main__":
    run()
