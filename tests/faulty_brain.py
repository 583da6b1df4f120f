"""A tiny Gomocup (piskvork) brain for the tests of `gomocup:` opponents, faulty on demand.

    python tests/faulty_brain.py MODE [AFTER]

It plays the first empty point (x fastest, from 0,0) and, from its AFTER-th move request on
(default 2; counted per process), misbehaves as MODE says:
  ok       never (and it writes MESSAGE / DEBUG lines before each answer, echoes each
           INFO as a MESSAGE, and answers UNKNOWN to an unknown command, as the
           protocol allows)
  crash    exits with status 3 without answering
  hang     never answers (sleeps until killed)
  garbage  answers 'hello there'
  illegal  plays an occupied point (its own or the opponent's last stone)
  offboard plays -1,0
  error    answers 'ERROR something went wrong'
  flood    writes MESSAGE lines without end (a stuck brain that keeps reporting)
  ponder   answers, then writes MESSAGE lines without end (never reading again)
  chatter  writes a line that is not an answer ('thinking...'), then 0.3 s later its move
and, whatever AFTER:
  refuse       answers START with 'ERROR unsupported size N'
  slowstart    sleeps before answering START (a brain loading a big model), until killed
  closein      closes its input, answers START and sleeps until killed
  unknowninfo  answers each INFO with 'UNKNOWN INFO key', the first one 0.3 s late (so
               that the answers come after the next command was sent)
  skeleton     as the protocol's C skeleton (pisqpipe) on Windows: BOARD adds its stones to
               the board it has (a manager sends RESTART first when a game is open), and
               its lines end in CR LF
  cr           ends its lines with CR alone (the protocol allows CR LF, LF or CR)
  norestart    answers RESTART with 'UNKNOWN RESTART' (an optional command)
  slowrestart  answers RESTART after 1 s (a brain clearing big tables)
  suggest      answers each move request with 'SUGGEST x,y' (the protocol: the manager
               then sends PLAY x,y, answered x,y)

With FAULTY_BRAIN_LOG=FILE in its environment it appends 'PID MODE COMMAND' to FILE for
each command it reads (a test learns its pid, and whether it got END).
"""

import os
import sys
import time


def main() -> int:
    mode = sys.argv[1]
    after = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    size, stones, requests, board = 0, [], 0, None
    log = os.environ.get("FAULTY_BRAIN_LOG")

    def say(line):
        sys.stdout.write(line + {"skeleton": "\r\n", "cr": "\r"}.get(mode, "\n"))
        sys.stdout.flush()

    def answer():
        nonlocal requests
        requests += 1
        if mode == "ok":
            say("MESSAGE thinking hard")
            say("DEBUG 42 nodes")
        if mode != "ok" and requests >= after:
            if mode == "crash":
                sys.exit(3)
            if mode == "hang":
                time.sleep(3600)
            if mode == "garbage":
                return say("hello there")
            if mode == "illegal" and stones:
                x, y = stones[-1]
                return say(f"{x},{y}")
            if mode == "offboard":
                return say("-1,0")
            if mode == "error":
                return say("ERROR something went wrong")
            if mode == "flood":
                while True:
                    say("MESSAGE still searching")
            if mode == "chatter":
                say("thinking...")
                time.sleep(0.3)
        for y in range(size):
            for x in range(size):
                if (x, y) not in stones:
                    if mode == "suggest":
                        return say(f"SUGGEST {x},{y}")
                    stones.append((x, y))
                    say(f"{x},{y}")
                    while mode == "ponder" and requests >= after:
                        say("MESSAGE still thinking")
                    return

    for line in sys.stdin:
        text = line.strip()
        cmd, _, arg = text.partition(" ")
        cmd = cmd.upper()
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {mode} {cmd}\n")
        if board is not None:
            if cmd == "DONE":
                stones, board = (stones + board if mode == "skeleton" else board), None
                answer()
            else:
                x, y, _ = (int(v) for v in text.split(","))
                board.append((x, y))
        elif cmd == "START":
            size, stones = int(arg), []
            if mode == "slowstart":
                time.sleep(3600)
            if mode == "closein":
                os.close(0)
                say("OK")
                time.sleep(3600)
            say(f"ERROR unsupported size {size}" if mode == "refuse" else "OK")
        elif cmd == "RESTART" and mode != "norestart":
            stones = []
            time.sleep(1 if mode == "slowrestart" else 0)
            say("OK")
        elif cmd == "INFO":
            if mode == "ok":
                say(f"MESSAGE got INFO {arg}")
            if mode == "unknowninfo":
                time.sleep(0.3 if arg.startswith("timeout_turn") else 0)
                say(f"UNKNOWN INFO {arg.split()[0]}")
        elif cmd == "PLAY" and mode == "suggest":
            stones.append(tuple(int(v) for v in arg.split(",")))
            say(arg)
        elif cmd == "BEGIN":
            answer()
        elif cmd == "TURN":
            stones.append(tuple(int(v) for v in arg.split(",")))
            answer()
        elif cmd == "BOARD":
            board = []
        elif cmd == "END":
            return 0
        else:
            say(f"UNKNOWN {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
