"""A Gomocup brain: a trained Gomoku model speaking the piskvork protocol on stdin/stdout.

    python -m az_jax.gomocup --model gomoku_15x15
    python -m az_jax.gomocup --workdir runs/gomoku --chunk 64   # a run of train.py

Commands (one per line; answers are flushed at once):
  START n            OK, or ERROR when n is not the model's board size (e.g. 15)
  RECTSTART w,h      OK only for the model's square board
  RESTART            a new game on the same board: OK
  BEGIN              the brain plays first: answers x,y
  TURN x,y           the opponent's move: answers the brain's move x,y
  BOARD              then lines x,y,field (1 = own stone, 2 = opponent's, 3 = ignored) and
                     DONE: the position, then the brain's move x,y
  TAKEBACK x,y       removes the last stone if it is at x,y: OK
  PLAY x,y           the brain must play x,y: answers x,y
  INFO key value     timeout_turn, timeout_match, time_left (ms), rule, ...; others ignored
  ABOUT              name="az_jax", version, author, country
  END                exits (status 0)
Coordinates are x,y = column,row counted from 0 at the top left (action = y * size + x).
Anything malformed gets ERROR with a reason, unknown commands UNKNOWN; the brain keeps going
(also after bytes that are not UTF-8, numbers too long to be coordinates, or a bug: ERROR
internal error, with the traceback on stderr).

Time: each move searches in chunks of --chunk simulations (the first without root noise,
the rest with it, visit counts added up) until about 80% of the move's budget is used:
INFO timeout_turn, or less when INFO time_left runs short (0 = one chunk only). --sims N
searches exactly N simulations per move instead and ignores the clock.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback

from az_jax import cli

# ASCII digits only, at most 9 of them: `int` would take other scripts' digits, and
# thousands of digits (Python refuses more than 4300) are no coordinate.
_INT = r"(-?[0-9]{1,9})"
_COORDS = re.compile(rf"^\s*{_INT}\s*,\s*{_INT}\s*$")
_BOARD_LINE = re.compile(rf"^\s*{_INT}\s*,\s*{_INT}\s*,\s*{_INT}\s*$")
_NUMBER = re.compile(rf"^\s*{_INT}\s*$")
_INFO_NUMBER = re.compile(r"^\s*(-?[0-9]{1,18})\s*$")  # milliseconds, bytes (max_memory)
TIME_SHARE = 0.8  # of the move's budget used for searching
SAFETY_S = 0.05  # seconds kept back for stepping, output and the pipe


def _show(text: str, limit: int = 40) -> str:
    """`text` quoted for an answer line: ASCII only, escapes visible, at most `limit` chars."""
    return ascii(text if len(text) <= limit else text[:limit] + "...")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("az_jax")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "0.1.0"


class Brain:
    """The protocol state machine around an Agent; `handle(line)` returns False at END."""

    def __init__(self, agent, write, chunk: int = 32, sims: int | None = None,
                 turn_ms: int = 5000):
        if agent.env.id != "gomoku":
            raise ValueError(f"a Gomocup brain needs a Gomoku model, this one plays "
                             f"{agent.env!r}")
        self.agent = agent
        self.env = agent.env
        self.size = agent.env.size
        self.write = write
        self.chunk = int(chunk)
        self.sims = sims
        self.info = {"timeout_turn": int(turn_ms), "timeout_match": 0, "time_left": None,
                     "rule": None}
        self.started = False
        self.warm = False
        self.board_lines: list[tuple[int, int, int]] | None = None  # inside BOARD ... DONE
        self.reset()

    # ------------------------------------------------------------------ game state
    def reset(self) -> None:
        self.moves: list[int] = []
        self.state = self.agent.new_game()

    def _replay(self, moves: list[int]) -> None:
        self.reset()
        for a in moves:
            self.state = self.agent.play(self.state, a)
            self.moves.append(a)

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

    def _check_move(self, action: int) -> None:
        if self.agent.is_over(self.state):
            raise ValueError("the game is over (RESTART or START for a new one)")
        if not bool(self.state.legal_action_mask[action]):
            raise ValueError(f"{self._xy(action)} is occupied")

    def _play(self, action: int) -> None:
        self._check_move(action)
        self.state = self.agent.play(self.state, action)
        self.moves.append(action)

    # ------------------------------------------------------------------ thinking
    def budget(self) -> float:
        """Seconds to search for this move (0: a single chunk)."""
        turn = self.info["timeout_turn"]
        if turn is None or turn <= 0:
            return 0.0
        seconds = turn / 1000.0
        left = self.info["time_left"]
        if left is not None and self.info["timeout_match"]:
            empty = self.size * self.size - len(self.moves)
            moves_left = max(8, empty // 4)  # our moves still to come, roughly
            seconds = min(seconds, left / 1000.0 / moves_left)
        return max(0.0, seconds * TIME_SHARE - SAFETY_S)

    def think_and_play(self) -> str:
        if self.agent.is_over(self.state):
            raise ValueError("the game is over (RESTART or START for a new one)")
        if self.sims:
            thought = self.agent.think(self.state, self.sims)
        else:
            thought = self.agent.think_for(self.state, self.budget(), chunk=self.chunk)
        self._play(thought.action)
        return self._xy(thought.action)

    def warmup(self) -> None:
        """Compiles the searches once, so that no move pays for it."""
        if self.warm:
            return
        if self.sims:
            self.agent.warmup(self.sims)
        else:
            self.agent.warmup(self.chunk, noisy=True)
        self.warm = True

    # ------------------------------------------------------------------ protocol
    def handle(self, line: str) -> bool:
        """Processes one input line. Returns False when the brain should exit."""
        text = line.strip()
        if not text:
            return True
        try:
            if self.board_lines is not None:
                return self._board_line(text)
            cmd, _, arg = text.partition(" ")
            cmd = cmd.upper()
            handler = getattr(self, f"_cmd_{cmd.lower()}", None)
            if handler is None or not (cmd.isascii() and cmd.isalpha()):
                self.write(f"UNKNOWN command {_show(cmd)} is not supported")
                return True
            return handler(arg.strip()) is not False
        except ValueError as e:
            self.write(f"ERROR {e}")
        except Exception as e:  # noqa: BLE001 - a bug must not end the tournament game
            traceback.print_exc(file=sys.stderr)
            self.write(f"ERROR internal error {type(e).__name__} on {_show(text)} (a bug; "
                       "the traceback is on stderr)")
        return True

    def _need_start(self) -> None:
        if not self.started:
            raise ValueError("no game: send START first")

    def _cmd_start(self, arg: str):
        m = _NUMBER.match(arg)
        if not m:
            raise ValueError(f"START needs a board size, got {_show(arg)}")
        n = int(m.group(1))
        if n != self.size:
            raise ValueError(f"unsupported size {n}: this model plays only on "
                             f"{self.size}x{self.size} boards")
        self.warmup()
        self.started = True
        self.reset()
        self.write("OK")

    def _cmd_rectstart(self, arg: str):
        m = _COORDS.match(arg)
        if not m:
            raise ValueError(f"RECTSTART needs width,height, got {_show(arg)}")
        w, h = int(m.group(1)), int(m.group(2))
        if (w, h) != (self.size, self.size):
            raise ValueError(f"unsupported board {w}x{h}: this model plays only on "
                             f"{self.size}x{self.size} boards")
        return self._cmd_start(str(w))

    def _cmd_restart(self, arg: str):
        self._need_start()
        self.reset()
        self.write("OK")

    def _cmd_begin(self, arg: str):
        self._need_start()
        if self.moves:
            raise ValueError("BEGIN is for an empty board (send RESTART or BOARD)")
        self.write(self.think_and_play())

    def _cmd_turn(self, arg: str):
        self._need_start()
        action = self._coords(arg)
        self._play(action)
        self.write(self.think_and_play())

    def _cmd_play(self, arg: str):
        self._need_start()
        action = self._coords(arg)
        self._play(action)
        self.write(self._xy(action))

    def _cmd_takeback(self, arg: str):
        self._need_start()
        action = self._coords(arg)
        if not self.moves or self.moves[-1] != action:
            raise ValueError(f"{self._xy(action)} is not the last stone played")
        self._replay(self.moves[:-1])
        self.write("OK")

    def _cmd_board(self, arg: str):
        self._need_start()
        self.board_lines = []

    def _board_line(self, text: str) -> bool:
        word = text.split()[0].upper()
        if word == "END":
            return False
        if word != "DONE":
            m = _BOARD_LINE.match(text)
            if not m:
                self.write(f"ERROR cannot read BOARD line {_show(text)}: expected x,y,field "
                           "or DONE")
                return True
            x, y, field = (int(g) for g in m.groups())
            try:
                action = self._action(x, y)
            except ValueError as e:
                self.write(f"ERROR {e}")
                return True
            if field in (1, 2):
                self.board_lines.append((action, field))
            elif field != 3:  # 3: a stone of a continuous game's winning line; not used here
                self.write(f"ERROR field {field} in {_show(text)}: expected 1 (own) or 2 "
                           "(opponent)")
            return True
        lines, self.board_lines = self.board_lines, None
        try:
            self._set_board(lines)
            self.write(self.think_and_play())
        except ValueError as e:
            self.write(f"ERROR {e}")
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
        order = [a for pair in zip(black, white, strict=False) for a in pair]
        order += black[len(white):]
        self.reset()
        for i, a in enumerate(order):
            if self.agent.is_over(self.state):
                raise ValueError(f"the position was already won before stone {i + 1}")
            self._play(a)
        if self.agent.is_over(self.state):
            raise ValueError("the position on BOARD is already decided")

    def _cmd_info(self, arg: str):
        key, _, value = arg.partition(" ")
        key = key.lower()
        if not key:
            raise ValueError("INFO needs a key and a value, e.g. INFO timeout_turn 5000")
        if key in ("timeout_turn", "timeout_match", "time_left", "rule", "max_memory",
                   "game_type"):
            m = _INFO_NUMBER.match(value)
            if not m:
                raise ValueError(f"INFO {key} needs an integer, got {_show(value)}")
            self.info[key] = int(m.group(1))
            if key == "rule":
                self._check_rule(self.info["rule"])
        # other keys (folder, evaluate, ...) are accepted and ignored

    def _check_rule(self, rule: int) -> None:
        wanted = "standard" if rule & 1 else "freestyle"
        if rule & 4:
            wanted = "renju"
        if wanted != self.env.rule:
            self.write(f"MESSAGE warning: rule {rule} asks for {wanted}; this model was "
                       f"trained for {self.env.rule} gomoku")

    def _cmd_about(self, arg: str):
        self.write(f'name="az_jax", version="{_version()}", author="az_jax authors", '
                   f'country="unknown", note="AlphaZero in JAX, {self.env.rule} '
                   f'{self.size}x{self.size}"')

    def _cmd_end(self, arg: str):
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m az_jax.gomocup", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_source_args(p, "a Gomoku training run's directory")
    p.add_argument("--chunk", type=int, default=32, metavar="N",
                   help="simulations per search chunk in timed play (default 32)")
    p.add_argument("--sims", type=int, default=None, metavar="N",
                   help="search exactly N simulations per move, ignoring the clock")
    p.add_argument("--turn-ms", type=int, default=5000, metavar="MS",
                   help="time per move until INFO timeout_turn says otherwise (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the search keys")
    return p


def main(argv=None, stdin=None, stdout=None) -> int:
    args = build_parser().parse_args(argv)
    # Only protocol lines go to stdout: anything a library prints goes to stderr meanwhile.
    out = stdout or sys.stdout
    saved, sys.stdout = sys.stdout, sys.stderr
    try:
        return _serve(args, stdin or sys.stdin, out)
    finally:
        sys.stdout = saved


def _serve(args, stdin, out) -> int:
    if hasattr(stdin, "reconfigure"):
        stdin.reconfigure(errors="replace")  # bytes that are not UTF-8 become U+FFFD
    if hasattr(out, "reconfigure"):
        out.reconfigure(errors="backslashreplace")  # e.g. a cp1252 console on Windows

    def write(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    from az_jax import agent as agent_lib

    agent_lib.quiet_logs()
    for name in ("chunk", "sims"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"error: --{name} must be >= 1", file=sys.stderr)
            return 2
    loaded = cli.load_agent(args, args.chunk, lambda agent: Brain(
        agent, write, chunk=args.chunk, sims=args.sims, turn_ms=args.turn_ms))
    if loaded is None:
        return 2
    agent, brain = loaded
    print(f"az_jax gomocup brain: {agent.description}", file=sys.stderr, flush=True)
    while True:
        line = stdin.readline()
        if not line:  # the manager closed the pipe
            return 0
        if not brain.handle(line):
            return 0


if __name__ == "__main__":
    sys.exit(main())
