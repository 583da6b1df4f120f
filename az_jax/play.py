"""Play a trained model in the terminal.

    python -m az_jax.play --model connect4                  # you move first
    python -m az_jax.play --model gomoku_15x15 --human-color white --sims 400
    python -m az_jax.play --workdir runs/connect4 --ai-vs-ai  # a run of train.py

Type moves in the game's notation (E5 for Gomoku, 4 for Connect4, B2 or 5 for tic-tac-toe;
Bagh-Chal: C3 places a goat, A1-B2 moves a piece, A1-C3 or A1xC3 is a tiger's capture).
The board is printed after every move with the last move marked and named. After each AI
move you see its estimate of the position after that move (the search's Q of the move
played, as an expected score: a draw counts half), and its candidate moves with the
search's policy for each (Gumbel search: the improved policy; PUCT: the visit share) and
their own estimates. At the end: the result, why, and the winning line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from az_jax import cli

_COMMANDS = """commands:
  undo    take back your last move (and the AI's reply to it)
  hint    what the AI would play in your place
  moves   list the legal moves
  board   print the board again
  new     start a new game (same sides)
  help    this text
  quit    leave (also Ctrl-D)"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m az_jax.play", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1] + "\n" + _COMMANDS + "\n\nExit status 2 with a "
        "one-line error when there is no model to load.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_source_args(p)
    side = p.add_mutually_exclusive_group()
    side.add_argument("--human-color", "--human", default=None, metavar="SIDE",
                      help="your side: first or second (also 1 or 2), or the game's name for "
                           "it: X/O (tic-tac-toe, Connect4), black/white (Gomoku), "
                           "goats/tigers (Bagh-Chal). Default: first; not with --ai-vs-ai")
    side.add_argument("--human-first", action="store_const", dest="human_color",
                      const="first", help="same as --human-color first")
    side.add_argument("--human-second", action="store_const", dest="human_color",
                      const="second", help="same as --human-color second")
    p.add_argument("--sims", type=cli.integer(1, cli.MAX_SIMULATIONS), default=None, metavar="N",
                   help="search simulations per AI move (default: max(the run's "
                        "search.num_simulations, 64)); more is stronger and slower")
    p.add_argument("--ai-vs-ai", action="store_true",
                   help="watch the model play both sides")
    p.add_argument("--delay", type=cli.seconds, default=None, metavar="SECONDS",
                   help=f"pause between moves, only with --ai-vs-ai (0 to {cli.MAX_SECONDS:g}; "
                        "default 0)")
    p.add_argument("--top", type=cli.integer(0), default=5,
                   help="candidate moves shown (default 5; 0: none)")
    p.add_argument("--seed", type=cli.integer(0, cli.MAX_SEED), default=0,
                   help="seed of the search keys, 0 to 4294967295 (default 0)")
    return p


class TerminalGame:
    """The interactive loop. `read(prompt)` returns a line or None at end of input."""

    def __init__(self, agent, human: int | None, num_simulations: int, top: int = 5,
                 delay: float = 0.0, read=None, write=print):

        self.agent = agent
        self.env = agent.env
        self.human = human  # None: AI vs AI
        self.sims = num_simulations
        self.top = top
        self.delay = delay
        self.read = read or _read_line
        self.write = write
        self.sides = self.env.side_names
        self.new_game()

    def new_game(self) -> None:
        self.states = [self.agent.new_game()]
        self.actions: list[int] = []

    @property
    def state(self):
        return self.states[-1]

    # ------------------------------------------------------------------ output
    def move_help(self, player: int | None = None) -> str:
        """How the side to move (or `player`) types a move."""
        player = int(self.state.current_player) if player is None else player
        return self.env.side_move_help(player)

    def show(self) -> None:
        from az_jax.web import geometry

        self.write("")
        last = None
        if self.actions:
            last = geometry.move_cells(self.env, self.states[-2], self.actions[-1]) \
                if self.env.id == "baghchal" else None
        line = geometry.winning_line(self.env, self.state) \
            if self.agent.is_over(self.state) else ()
        self.write(render(self.env, self.state, last, line))
        if self.actions:
            mover = int(self.states[-2].current_player)
            move = self.env.action_to_str(self.actions[-1])
            who = self._who(mover)
            self.write(f"last move: {self.sides[mover]} {move}{who}")

    def _who(self, player: int) -> str:
        if self.human is None:
            return ""
        return " (you)" if player == self.human else " (AI)"

    def describe(self, thought, player: int, verb: str) -> None:
        cands = "  ".join(
            f"{c.move} {c.weight:.0%}" + ("" if c.value is None else f" ({_score(c.value)})")
            for c in thought.top(self.top))
        side = self.sides[player]
        self.write(f"{side}{self._who(player)} {verb} {thought.move}   "
                   f"[{thought.simulations} simulations, {thought.seconds:.1f}s]")
        self.write(f"  estimate for {side} after {thought.move}: {_score(thought.value)}   "
                   f"(Q {thought.value:+.2f}; root value {thought.root_value:+.2f})")
        if cands:  # --top 0: none shown, so no line
            self.write(f"  candidates, {thought.weight_label} (estimate): {cands}")

    def result_text(self) -> str:
        from az_jax import agent as agent_lib
        from az_jax.web import geometry

        end = geometry.outcome(self.env, self.state)
        winner = end["winner"]
        why = f" ({end['reason']})" if end["reason"] else ""
        if winner is None:
            return f"game over: a draw{why}."
        name = self.sides[winner]
        if self.human is None:
            return f"game over: {agent_lib.wins(name)}{why}."
        if winner == self.human:
            return f"game over: you win ({name}){why}! Well played."
        return f"game over: the AI wins ({name}){why}."

    # ------------------------------------------------------------------ actions
    def ai_move(self) -> None:
        player = int(self.state.current_player)
        thought = self.agent.think(self.state, self.sims)
        self.describe(thought, player, "plays")
        self.push(thought.action)

    def push(self, action: int) -> None:
        self.states.append(self.agent.play(self.state, action))
        self.actions.append(int(action))

    def undo(self) -> str:
        """Back to the position before the human's last move."""
        for i in range(len(self.actions) - 1, -1, -1):
            if int(self.states[i].current_player) == self.human:
                taken = [self.env.action_to_str(a) for a in self.actions[i:]]
                del self.states[i + 1:]
                del self.actions[i:]
                return f"took back: {', '.join(taken)}"
        return "nothing to undo: you have not moved yet"

    def hint(self) -> None:
        thought = self.agent.think(self.state, self.sims)
        self.describe(thought, int(self.state.current_player), "would play (hint)")

    def legal_moves(self) -> str:
        if self.agent.is_over(self.state):  # (the env marks every action legal there)
            return "the game is over: no legal moves (type new, undo or quit)"
        moves = [self.env.action_to_str(int(a)) for a in self.agent.legal_actions(self.state)]
        return f"legal moves ({len(moves)}): {' '.join(moves)}"

    def handle(self, text: str) -> str | None:
        """One line of input at the human's turn. Returns 'quit', or None to go on."""
        cmd = text.strip().lower()
        if not cmd:
            return None
        if cmd in ("quit", "exit", "q"):
            return "quit"
        if cmd in ("help", "?", "h"):
            self.write(f"moves: {self.move_help()}\n{_COMMANDS}")
        elif cmd == "undo":
            self.write(self.undo())
            self.show()
        elif cmd == "hint":
            if self.agent.is_over(self.state):
                self.write("the game is over; no hint")
            else:
                self.hint()
        elif cmd in ("moves", "legal"):
            self.write(self.legal_moves())
        elif cmd == "board":
            self.show()
        elif cmd == "new":
            self.new_game()
            self.write("new game")
            self.show()
        elif self.agent.is_over(self.state):
            self.write("the game is over: type new, undo or quit")
        else:
            try:
                action = self.env.parse_action(text, self.state)
            except ValueError as e:
                self.write(f"not accepted: {e}")
                self.write(f"  enter {self.move_help()}, or help")
                return None
            self.push(action)
            self.show()
        return None

    # ------------------------------------------------------------------ loop
    def run(self) -> int:
        if self.human is None:
            return self._watch()
        self.write(f"you play {self.sides[self.human]}; the AI plays "
                   f"{self.sides[1 - self.human]} with {self.sims} simulations per move.")
        self.write(f"your moves: {self.move_help(self.human)}.")
        if self.env.legend:
            self.write(f"board: {self.env.legend}.")
        self.write("Type help for the commands.")
        self.show()
        announced = None  # the finished state whose result was printed
        while True:
            if self.agent.is_over(self.state):
                if announced is not self.state:
                    self.write(self.result_text())
                    announced = self.state
                line = self.read("game over - new, undo or quit> ")
            elif int(self.state.current_player) != self.human:
                self.ai_move()
                self.show()
                continue
            else:
                line = self.read(f"your move ({self.sides[self.human]})> ")
            if line is None or self.handle(line) == "quit":
                self.write("bye")
                return 0

    def _watch(self) -> int:
        self.write(f"AI vs AI, {self.sims} simulations per move.")
        if self.env.legend:
            self.write(f"board: {self.env.legend}.")
        self.show()
        while not self.agent.is_over(self.state):
            if self.delay:
                time.sleep(self.delay)
            self.ai_move()
            self.show()
        self.write(self.result_text())
        return 0


def _score(value: float) -> str:
    """A value in [-1, 1] as an expected score (a draw counts half): '63%'."""
    return f"{min(max((value + 1.0) / 2.0, 0.0), 1.0):.0%}"


# Where `env.render` draws cell (row, col): (line, column of the mark), for the games whose
# boards the terminal marks; the characters either side of the mark are free.
_MARK_AT = {
    "baghchal": lambda r, c, n: (2 * r, 3 + 4 * c),  # points joined by "---"
    "gomoku": lambda r, c, n: (r, 4 + 3 * c),  # "15 " then 3 characters per point
    "connect4": lambda r, c, n: (r, 1 + 3 * c),  # 3 characters per cell
}


def render(env, state, last: tuple[int, int] | None = None, line=()) -> str:
    """`env.render(state)`, with marks the env's own drawing lacks: for Bagh-Chal, whose
    state does not keep the last move, `last` = (from, to) cells, the landing point in
    parentheses and the point it came from in brackets; for Gomoku and Connect4 the cells of
    a winning `line` in brackets (cells are row * cols + col, as `web.geometry`)."""
    text = env.render(state)
    at = _MARK_AT.get(env.id)
    marks = []
    if env.id == "baghchal" and last is not None:
        marks = [(cell, pair) for cell, pair in zip(last, ("[]", "()"), strict=True) if cell >= 0]
    elif at is not None:
        marks = [(cell, "[]") for cell in line]
    if not marks:
        return text
    cols = {"baghchal": 5, "connect4": 7}.get(env.id) or env.size
    lines = text.split("\n")
    for cell, (left, right) in marks:
        r, c = divmod(int(cell), cols)
        i, j = at(r, c, cols)
        row = list(lines[i].ljust(j + 2))
        row[j - 1], row[j + 1] = left, right
        lines[i] = "".join(row).rstrip()
    return "\n".join(lines)


def _read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        print()
        return None


def parse_args(argv=None) -> argparse.Namespace:
    """`build_parser().parse_args`, refusing (exit status 2, one line) the flags that
    --ai-vs-ai would ignore or that need it; then fills in their defaults."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.ai_vs_ai and args.human_color is not None:
        parser.error("--ai-vs-ai plays both sides: leave out --human-color/--human-first/"
                     "--human-second")
    if not args.ai_vs_ai and args.delay is not None:
        parser.error("--delay is the pause between moves of --ai-vs-ai: give both, or "
                     "leave out --delay")
    args.human_color = "first" if args.human_color is None else args.human_color
    args.delay = 0.0 if args.delay is None else args.delay
    return args


def main(argv=None, read=None, write=print) -> int:
    args = parse_args(argv)
    from az_jax import agent as agent_lib
    from az_jax.checkpoint import quiet_logs

    quiet_logs()
    loaded = cli.load_agent(args, args.sims, lambda agent: (
        None if args.ai_vs_ai else agent_lib.parse_side(agent.env, args.human_color)))
    if loaded is None:
        return 2
    agent, human = loaded
    if read is None and hasattr(sys.stdin, "reconfigure"):
        # Bytes that are not text (in the terminal's encoding) become U+FFFD, so they read
        # as a bad move ("not accepted: ...") instead of ending the game with a traceback.
        sys.stdin.reconfigure(errors="replace")
    if write is print and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # echoing them on, e.g., cp1252
    try:
        write(f"model: {agent.description}")
        write("compiling the search (once per simulation count)...")
        game = TerminalGame(agent, human, agent.num_simulations, top=args.top,
                            delay=args.delay, read=read, write=write)
        agent.warmup()  # compile before the first prompt
        return game.run()
    except KeyboardInterrupt:  # at a prompt, mid-search, or while compiling
        write("\ninterrupted")
        return 130
    except BrokenPipeError:  # the reader left (`--ai-vs-ai | head`): stop quietly
        if write is print:  # nor a second error as Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    status = main()
    from az_jax.checkpoint import quiet_exit  # loaded by then (not before: a fast --help)

    sys.exit(quiet_exit(status))
