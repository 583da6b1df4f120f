"""`python -m az_jax.gomocup`: the brain as a subprocess speaking the piskvork protocol.

One brain process (a tiny untrained 9x9 freestyle model, see tests/test_play.py) is driven
through whole games, BOARD restores, malformed lines, RESTART, ABOUT and END.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from az_jax import gomocup
from tests.tiny import make_run

ROOT = Path(__file__).resolve().parents[1]
N = 9


class BrainProcess:
    """A brain subprocess with a reader thread, so that no read can hang the tests."""

    def __init__(self, workdir: Path, *args: str, merged: bool = False):
        """merged: stderr on the stdout pipe, as piskvork runs a brain (`self.lines` then
        holds both)."""
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "az_jax.gomocup", "--workdir", str(workdir), "--chunk", "4",
             *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
            cwd=ROOT, env=env, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put),
                         daemon=True).start()
        if not merged:
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append),
                             daemon=True).start()

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\r\n"))

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\r\n")  # the manager ends lines with CR LF
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60.0) -> str:
        """The next answer line (MESSAGE and DEBUG lines are skipped)."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer within {timeout}s; stderr:\n"
                                     + "\n".join(self.stderr[-20:])) from None
            if not line.startswith(("MESSAGE", "DEBUG")):
                return line

    def ask(self, line: str, timeout: float = 60.0) -> str:
        self.send(line)
        return self.answer(timeout)

    def nothing_pending(self) -> bool:
        time.sleep(0.3)
        return self.lines.empty()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("gomocup") / "g9", "gomoku", size=N)


@pytest.fixture(scope="module")
def brain(run):
    b = BrainProcess(run)
    yield b
    if b.proc.poll() is None:
        b.proc.kill()
        b.proc.wait(timeout=30)


def xy(answer: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+),(\d+)", answer)
    assert m, f"expected x,y, got {answer!r}"
    return int(m.group(1)), int(m.group(2))


def five(board: np.ndarray, x: int, y: int) -> bool:
    """Five or more in a row through (x, y) for the stone there (board[y, x])."""
    who = board[y, x]
    for dx, dy in ((1, 0), (0, 1), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            cx, cy = x + sign * dx, y + sign * dy
            while 0 <= cx < N and 0 <= cy < N and board[cy, cx] == who:
                run, cx, cy = run + 1, cx + sign * dx, cy + sign * dy
        if run >= 5:
            return True
    return False


def test_about_and_start(brain):
    about = brain.ask("ABOUT")
    assert re.match(r'name="az_jax", version="[^"]+", author="[^"]+", country="[^"]+"', about)
    assert brain.ask("TURN 4,4").startswith("ERROR no game: send START first")
    # BOARD's one answer comes after DONE, even when it is an error: the stone lines are
    # read as BOARD's, not answered each as an unknown command.
    for line in ["BOARD", "4,4,1", "5,5,2"]:
        brain.send(line)
    assert brain.nothing_pending()
    assert brain.ask("DONE").startswith("ERROR no game: send START first")
    assert brain.nothing_pending()
    answer = brain.ask("START 15")
    assert answer.startswith("ERROR unsupported size 15") and "9x9" in answer
    assert brain.ask("RECTSTART 9,7").startswith("ERROR unsupported board 9x7")
    assert brain.ask("START 9", timeout=240) == "OK"  # compiles the search (once)


def _play_game(brain, rng, brain_first: bool, timeout_ms: int):
    """One whole game against random moves; checks every answer. Returns the winner."""
    board = np.zeros((N, N), np.int8)  # 1 = the brain's stones, 2 = ours
    brain.send(f"INFO timeout_turn {timeout_ms}")
    brain.send("INFO timeout_match 0")
    answer = brain.ask("BEGIN" if brain_first else f"TURN {N // 2},{N // 2}")
    if not brain_first:
        board[N // 2, N // 2] = 2
    while True:
        x, y = xy(answer)
        assert 0 <= x < N and 0 <= y < N and board[y, x] == 0, (answer, board)
        board[y, x] = 1
        if five(board, x, y):
            return "brain"
        empty = np.argwhere(board == 0)
        if not len(empty):
            return "draw"
        y, x = empty[rng.integers(len(empty))]
        board[y, x] = 2
        if five(board, x, y) or len(empty) == 1:
            return "us" if five(board, x, y) else "draw"
        t0 = time.monotonic()
        answer = brain.ask(f"TURN {x},{y}")
        assert time.monotonic() - t0 < timeout_ms / 1000 + 2.0  # generous: a loaded CI box


def test_whole_games(brain):
    rng = np.random.default_rng(0)
    assert brain.ask("START 9") == "OK"
    first = _play_game(brain, rng, brain_first=True, timeout_ms=100)
    assert first in ("brain", "us", "draw")
    assert brain.ask("RESTART") == "OK"
    second = _play_game(brain, rng, brain_first=False, timeout_ms=0)  # 0: as fast as possible
    assert second in ("brain", "us", "draw")


def test_time_per_move_is_used_but_not_exceeded(brain):
    assert brain.ask("START 9") == "OK"
    brain.send("INFO timeout_match 100000")
    brain.send("INFO time_left 100000")
    brain.send("INFO timeout_turn 1000")
    t0 = time.monotonic()
    xy(brain.ask("BEGIN"))
    took = time.monotonic() - t0
    assert 0.3 < took < 1.0 + 1.0, took  # searched for most of the second, not far beyond


def test_long_turns_search_deep(run):
    """With a 2 s turn the brain compiles a deep search in the background (chunk 4 here,
    so at least 32 simulations in one search) and then plays each move with it alone;
    every answer still comes within the turn. Its own brain: the background compile must not
    slow the shared one's timed tests."""
    b = BrainProcess(run)
    try:
        assert b.ask("START 9", timeout=240) == "OK"
        b.send("INFO timeout_turn 2000")
        deep, deadline = None, time.monotonic() + 180  # a cold compile beside the moves
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            b.send("BEGIN")
            messages = []
            while (line := b.lines.get(timeout=60)).startswith(("MESSAGE", "DEBUG")):
                messages.append(line)
            took = time.monotonic() - t0
            xy(line)
            assert took < 2.0 + 0.5, (took, messages)
            found = [re.search(r"sims (\d+) \(one search of (\d+)\)", m) for m in messages]
            # The deep search's move stands: no chunks after it (their votes outweighed it).
            assert all(m.group(1) == m.group(2) for m in found if m), messages
            found = [int(m.group(2)) for m in found if m]
            assert b.ask("RESTART") == "OK"
            if found:
                deep = found[0]
                break
        assert deep is not None and deep >= 32, ("no deep search within 180 s", messages,
                                                 b.stderr[-30:])
    finally:
        if b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait(timeout=30)


def test_board_restore(brain):
    assert brain.ask("START 9") == "OK"
    brain.send("INFO timeout_turn 0")
    # Own stones (1) on row 4 from x=0..3: the brain moves next and can complete five.
    lines = ["BOARD", "0,4,1", "1,4,1", "2,4,1", "3,4,1", "0,0,2", "8,8,2", "0,8,2",
             "8,0,2", "DONE"]
    for line in lines[:-1]:
        brain.send(line)
    # (4, 4) is the only point that completes five; even this untrained net plays it, the
    # search's tactics (search.eval_tactics) keeping only winning moves at the root.
    assert xy(brain.ask(lines[-1])) == (4, 4)
    assert brain.ask("TURN 5,5").startswith("ERROR the game is over")
    # A board with nothing decided: after BOARD the game goes on with TURN; the stones are
    # where BOARD put them.
    for line in ["BOARD", "0,4,1", "1,4,1", "0,0,2", "8,8,2"]:
        brain.send(line)
    x, y = xy(brain.ask("DONE"))
    taken = {(0, 4), (1, 4), (0, 0), (8, 8)}
    assert (x, y) not in taken and 0 <= x < N and 0 <= y < N
    assert brain.ask("TURN 0,4").startswith("ERROR 0,4 is occupied")
    # Opponent to move after BOARD? Counts that cannot be the brain's turn: ERROR.
    for line in ["BOARD", "0,0,1", "1,1,1", "DONE"]:
        brain.send(line)
    assert brain.answer().startswith("ERROR BOARD has 2 own and 0 opponent stones")
    assert brain.ask("TAKEBACK 0,4").startswith("ERROR 0,4 is not the last stone")


def test_takeback_and_play(brain):
    assert brain.ask("START 9") == "OK"
    brain.send("INFO timeout_turn 0")
    assert brain.ask("PLAY 4,4") == "4,4"
    answer = brain.ask("TURN 0,0")
    assert brain.ask(f"TAKEBACK {answer}") == "OK"
    assert brain.ask("TAKEBACK 0,0") == "OK"
    xy(brain.ask("TURN 0,0"))  # the point is free again


MALFORMED = {
    "TURN": "ERROR cannot read coordinates ''",
    "TURN 4": "ERROR cannot read coordinates '4'",
    "TURN a,b": "ERROR cannot read coordinates 'a,b'",
    "TURN 9,0": "ERROR 9,0 is off the 9x9 board",
    "TURN -1,3": "ERROR -1,3 is off the 9x9 board",
    "START nine": "ERROR START needs a board size",
    "SWAP2BOARD": "UNKNOWN",
    "HELLO world": "UNKNOWN",
    "12,3": "UNKNOWN",
}


def test_malformed_lines_keep_it_alive(brain):
    assert brain.ask("START 9") == "OK"
    for line, expected in MALFORMED.items():
        assert brain.ask(line).startswith(expected), line
    # A problem with INFO answers the next command that is not INFO (the protocol: the
    # manager reads nothing after an INFO), not the INFO itself.
    brain.send("INFO timeout_turn soon")
    assert brain.nothing_pending()
    assert brain.ask("SWAP2BOARD").startswith("ERROR INFO timeout_turn needs an integer")
    assert brain.ask("SWAP2BOARD").startswith("UNKNOWN")
    brain.send("INFO folder C:\\somewhere")  # unknown or ignored INFO keys: no answer
    brain.send("INFO evaluate 1,1")
    brain.send("")  # empty lines are ignored
    assert brain.nothing_pending()
    # Inside BOARD the manager reads nothing until DONE: its problems are DONE's one
    # answer, and the board stays as it was (a board missing a stone is no position to
    # play on).
    assert brain.ask("PLAY 1,1") == "1,1"
    for line in ["BOARD", "4,4,2", "nonsense", "99,1,2", "3,3,7"]:
        brain.send(line)
    assert brain.nothing_pending()
    answer = brain.ask("DONE")
    assert answer.startswith("ERROR cannot read BOARD line 'nonsense'"), answer
    assert "(and 2 more problems)" in answer and "BOARD not set" in answer
    assert brain.nothing_pending()
    assert brain.ask("TURN 1,1").startswith("ERROR 1,1 is occupied")  # the old board
    assert brain.ask("ABOUT").startswith('name="az_jax"')  # still alive
    # A problem with INFO before BOARD is answered at DONE, not at BOARD.
    brain.send("INFO timeout_turn -1")
    for line in ["BOARD", "4,4,2"]:
        brain.send(line)
    assert brain.nothing_pending()
    assert brain.ask("DONE").startswith("ERROR INFO timeout_turn must be 0 or more, got -1")
    assert brain.nothing_pending()
    # A tab is white space like a blank, after the command and after INFO's key.
    brain.send("INFO\ttimeout_turn\t0")
    assert brain.nothing_pending()
    assert brain.ask("RESTART\t") == "OK"
    assert xy(brain.ask("TURN\t4,4")) != (4, 4)


def test_piskvork_reads_stderr_as_answers_so_it_carries_debug_lines_only(run):
    """piskvork gives a brain's stderr the pipe of its stdout and takes every line that
    does not begin with DEBUG or MESSAGE for an answer (its protocol.cpp): the start line
    the brain writes to stderr was read as the answer to START, which ended the game. So
    stderr goes out as DEBUG lines, from both processes: here a killed search process (its
    traceback on stderr) while the moves go on, tactical until the search is back."""
    b = BrainProcess(run, merged=True)
    seen = []

    def answer(line: str, timeout: float = 120.0) -> tuple[str, list[str]]:
        b.send(line)
        notes = []
        while True:
            got = b.lines.get(timeout=timeout)
            seen.append(got)
            if not got.startswith(("DEBUG ", "MESSAGE ")):
                return got, notes
            notes.append(got)

    def searched(deadline_s: float = 180.0) -> list[str]:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            got, notes = answer("BEGIN")
            xy(got)
            assert answer("RESTART")[0] == "OK"
            if any(n.startswith("MESSAGE eval") for n in notes):
                return notes
            time.sleep(0.5)
        raise AssertionError(f"the search never answered; the brain said {seen[-20:]}")

    try:
        assert answer("START 9")[0] == "OK"  # the start line was not taken for the answer
        b.send("INFO timeout_turn 1000")
        searched()
        # ... but went out as DEBUG (through the relay thread: before or after the OK)
        assert any(x.startswith("DEBUG az_jax gomocup brain:") for x in seen), seen[:5]
        children = []
        for task in Path(f"/proc/{b.proc.pid}/task").iterdir():
            try:  # (a thread may end meanwhile)
                children += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        assert len(children) == 1, children
        os.kill(children[0], 9)
        got, notes = answer("BEGIN")
        xy(got)  # answered all the same
        assert any("tactical move" in n and "the search failed" in n for n in notes), notes
        assert answer("RESTART")[0] == "OK"
        searched()  # a new search process
        assert answer("ABOUT")[0].startswith('name="az_jax"')
        b.send("END")
        assert b.proc.wait(timeout=60) == 0
        rest = [line.rstrip("\r\n") for line in b.proc.stdout]  # (after the answers)
        while not b.lines.empty():
            rest.append(b.lines.get())
        seen.extend(rest)
        assert any(line.startswith("DEBUG Traceback") for line in seen), seen
        odd = [line for line in seen if not (
            line.startswith(("DEBUG ", "MESSAGE ", 'name="az_jax"'))
            or line == "OK" or re.fullmatch(r"\d+,\d+", line))]
        assert not odd, odd
    finally:
        if b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait(timeout=30)


def test_end_exits_0(run):
    b = BrainProcess(run)
    try:
        assert b.ask("ABOUT").startswith('name="az_jax"')
        b.send("END")
        assert b.proc.wait(timeout=60) == 0
    finally:
        if b.proc.poll() is None:
            b.proc.kill()


def test_cli_errors(tmp_path, capsys):
    assert gomocup.main(["--workdir", str(tmp_path / "none")]) == 2
    assert "error: no checkpoints in" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        gomocup.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for word in ("START", "TURN x,y", "BOARD", "timeout_turn", "--chunk", "--sims"):
        assert word in out, word


def test_a_non_gomoku_model_is_refused(tmp_path):
    make_run(tmp_path / "ttt", "tictactoe")
    with pytest.raises(ValueError, match="needs a Gomoku model"):
        gomocup.read_model(tmp_path / "ttt")
    assert gomocup.main(["--workdir", str(tmp_path / "ttt")]) == 2
