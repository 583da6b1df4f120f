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
  refuse   answers START with 'ERROR unsupported size N'
"""

import sys
import time


def main() -> int:
    mode = sys.argv[1]
    after = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    size, stones, requests, board = 0, [], 0, None

    def say(line):
        sys.stdout.write(line + "\n")
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
        for y in range(size):
            for x in range(size):
                if (x, y) not in stones:
                    stones.append((x, y))
                    return say(f"{x},{y}")

    for line in sys.stdin:
        text = line.strip()
        cmd, _, arg = text.partition(" ")
        cmd = cmd.upper()
        if board is not None:
            if cmd == "DONE":
                stones, board = board, None
                answer()
            else:
                x, y, _ = (int(v) for v in text.split(","))
                board.append((x, y))
        elif cmd == "START":
            size, stones = int(arg), []
            say(f"ERROR unsupported size {size}" if mode == "refuse" else "OK")
        elif cmd == "RESTART":
            stones = []
            say("OK")
        elif cmd == "INFO":
            if mode == "ok":
                say(f"MESSAGE got INFO {arg}")
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
