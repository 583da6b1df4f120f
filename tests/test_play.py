"""`python -m az_jax.play`: a real tic-tac-toe game typed into tmux, every game through the
same loop, and the errors a user meets first.

The models are tiny untrained networks saved as real checkpoints: the front end needs a
restorable model of the right game, not a good player (training would only add compile time).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jax
import pytest

import envs
from az_jax import agent as agent_lib
from az_jax import play
from tests.tiny import make_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ttt_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("play") / "ttt", "tictactoe")


# ---------------------------------------------------------------------- errors and help
def test_help_lists_options_and_commands(capsys):
    with pytest.raises(SystemExit) as e:
        play.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for word in ("--workdir", "--checkpoint", "--model", "--human-color", "--human-first",
                 "--sims", "--ai-vs-ai", "undo", "hint", "quit", "black/white", "goats/tigers"):
        assert word in out, word


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert play.main(["--workdir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no checkpoints in") and "Traceback" not in err
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    assert play.main(["--workdir", str(tmp_path / "empty")]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err


def test_unknown_model_exits_2_with_the_names():
    proc = subprocess.run([sys.executable, "-m", "az_jax.play", "--model", "no-such-model"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert "no shipped model 'no-such-model'; available:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_huge_seed_is_one_line_not_a_traceback():
    """--seed 99999999999999999999 crashed with an OverflowError traceback in the search key."""
    proc = subprocess.run([sys.executable, "-m", "az_jax.play", "--model", "tictactoe",
                           "--seed", "99999999999999999999"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "python -m az_jax.play: error: argument --seed: 99999999999999999999 is out of range: "
        "give an integer from 0 to 4294967295")


@pytest.mark.parametrize("argv, error", [
    (["--ai-vs-ai", "--human-color", "second"], "--ai-vs-ai plays both sides: leave out"),
    (["--ai-vs-ai", "--human-first"], "--ai-vs-ai plays both sides: leave out"),
    (["--delay", "1"], "--delay is the pause between moves of --ai-vs-ai"),
])
def test_flags_that_ai_vs_ai_would_ignore_are_refused(argv, error, capsys):
    """They were silently ignored; now argparse refuses them before any model loads."""
    with pytest.raises(SystemExit) as e:
        play.main(["--model", "no-such-model", *argv])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        f"python -m az_jax.play: error: {error}")
    args = play.parse_args(["--model", "tictactoe", "--ai-vs-ai", "--delay", "0.5"])
    assert (args.delay, args.human_color) == (0.5, "first")
    args = play.parse_args(["--model", "tictactoe", "--human-second"])
    assert (args.delay, args.human_color) == (0.0, "second")


def test_zero_simulations_is_an_error_not_the_default(ttt_run):
    """`think`'s docstring promised a ValueError for a non-positive count, but 0 (falsy)
    silently became the agent's default; `Agent(num_simulations=0)` and `think_for` too."""
    agent = agent_lib.Agent.load(workdir=ttt_run, num_simulations=2)
    state = agent.new_game()
    for call in (lambda: agent.think(state, 0), lambda: agent.think_for(state, 1.0, chunk=0),
                 lambda: agent_lib.Agent(agent.restored, num_simulations=0)):
        with pytest.raises(ValueError, match="simulations must be >= 1, got 0"):
            call()
    assert agent.think(state).simulations == 2  # None: the agent's own


def test_bad_side_lists_what_is_accepted(ttt_run, capsys):
    assert play.main(["--workdir", str(ttt_run), "--human-color", "purple"]) == 2
    err = capsys.readouterr().err
    assert "unknown side 'purple'" in err and "first, second, 1, 2, x, o" in err


def test_input_that_is_not_text_is_a_bad_move():
    """Bytes that are not UTF-8, under a strict decoder: answered like any bad move, and the
    game goes on (it ended with a UnicodeDecodeError traceback)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONIOENCODING="utf-8:strict")
    proc = subprocess.run([sys.executable, "-m", "az_jax.play", "--model", "tictactoe",
                           "--sims", "8"], input=b"\xff\xfe\nB2\n", capture_output=True,
                          cwd=ROOT, timeout=300, env=env)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "not accepted: cannot read '\ufffd\ufffd' as a point" in out
    assert "last move: X B2 (you)" in out and "O (AI) plays" in out
    assert out.rstrip().endswith("bye")  # at the end of the input


def test_a_reader_that_leaves_ends_the_game_quietly(ttt_run):
    """`--ai-vs-ai | head -1`: the reader closes the pipe after one line; the next print
    raised BrokenPipeError, a traceback on stderr. Now the game stops quietly (status 1)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-m", "az_jax.play", "--workdir", str(ttt_run),
                             "--ai-vs-ai", "--sims", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdout.readline().startswith(b"model: ")
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_top_0_shows_no_candidates_line(ttt_run):
    """`--top 0` is documented as "0: none": it printed an empty `candidates ...:` line
    after every move; now there is no such line, and the rest of the report stays."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "az_jax.play", "--workdir", str(ttt_run),
                           "--ai-vs-ai", "--sims", "2", "--top", "0"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "estimate for" in proc.stdout and "game over:" in proc.stdout
    assert "candidates" not in proc.stdout


def test_parse_side_names():
    gomoku, bagh = envs.make("gomoku", size=9), envs.make("baghchal")
    assert agent_lib.parse_side(gomoku, "White") == 1
    assert agent_lib.parse_side(gomoku, "first") == 0
    # --human-color 1 or 2 (the help: "first or second (also 1 or 2)"): 1 moves first.
    assert agent_lib.parse_side(gomoku, "1") == 0 and agent_lib.parse_side(gomoku, " 2 ") == 1
    assert agent_lib.parse_side(bagh, "tigers") == 1
    assert agent_lib.parse_side(bagh, "goat") == 0
    with pytest.raises(ValueError, match="accepted: first, second, 1, 2, goats, tigers"):
        agent_lib.parse_side(bagh, "lions")


# ---------------------------------------------------------------------- every game
def _scripted(game_ref: list, log: list[str]):
    """A `read` that types one bad move, then the first legal move each time, then quit."""
    said_bad = []

    def read(prompt: str):
        log.append(prompt)
        game = game_ref[0]
        if prompt.startswith("game over"):
            return "quit"
        if not said_bad:
            said_bad.append(1)
            return "Z99 nonsense"
        legal = game.agent.legal_actions(game.state)
        return game.env.action_to_str(int(legal[0]))

    return read


@pytest.mark.slow
@pytest.mark.parametrize("env_id, kwargs, human", [
    ("connect4", {}, 0),
    ("gomoku", {"size": 7}, 1),
    ("baghchal", {}, 1),
])
def test_every_game_plays_to_the_end(tmp_path, env_id, kwargs, human):
    """The human side types moves in the game's notation (Bagh-Chal moves like A1-B2); the
    intro says how this side moves and what the board's marks mean; the end says why."""
    run = make_run(tmp_path / env_id, env_id, **kwargs)
    agent = agent_lib.Agent.load(workdir=run, num_simulations=2)
    log: list[str] = []
    ref: list = []
    game = play.TerminalGame(agent, human, 2, read=_scripted(ref, log), write=log.append)
    ref.append(game)
    assert game.run() == 0
    text = "\n".join(log)
    assert "not accepted:" in text and "enter " in text  # the bad move was re-prompted
    assert "game over:" in text and text.rstrip().endswith("bye")
    assert agent.is_over(game.state)
    assert "candidates, improved policy (estimate):" in text and "estimate for " in text
    assert f"your moves: {game.env.side_move_help(human)}." in text
    if env_id == "gomoku":
        assert "board: X black, O white; the last stone is in parentheses." in text
    if env_id == "baghchal":  # the human plays tigers: no goat instructions
        assert "place a goat" not in text.split("Type help")[0]
        assert "(T)" in text or "(G)" in text  # the last move marked on the board
    assert re.search(r"game over: .*\((.+ in a row: |the board is full|repetition|move limit"
                     r"|the tigers|the goats)", text)


def test_ai_vs_ai_to_the_end(ttt_run, capsys):
    assert play.main(["--workdir", str(ttt_run), "--ai-vs-ai", "--sims", "2"]) == 0
    out = capsys.readouterr().out
    assert "AI vs AI" in out and "game over:" in out
    assert out.count("last move:") >= 5  # at least 5 plies in tic-tac-toe


# ---------------------------------------------------------------------- tmux
class Tmux:
    """One program in a detached tmux session on a private server socket."""

    def __init__(self, command: str, width: int = 110, height: int = 50):
        self.socket = f"az_jax_test_{uuid.uuid4().hex[:8]}"
        self.name = "play"
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
                   command)
        self.path = self._tmux("display-message", "-p", "#{socket_path}").strip()

    def _tmux(self, *args) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def screen(self) -> str:
        """The pane with its scrollback."""
        return self._tmux("capture-pane", "-p", "-t", self.name, "-S", "-3000")

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", text)
        self._tmux("send-keys", "-t", self.name, "Enter")

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "") -> str:
        end = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{screen[-3000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=30)
        if self.path:
            Path(self.path).unlink(missing_ok=True)


def _last_board(screen: str) -> list[str]:
    """The 9 cells ('.', 'X', 'O') of the last tic-tac-toe board on the screen."""
    lines = screen.splitlines()
    footer = max(i for i, line in enumerate(lines) if line.rstrip() == "  A B C")
    rows = lines[footer - 3:footer]
    assert [r[0] for r in rows] == ["3", "2", "1"], rows
    return [c for r in rows for c in r[2:].split()]


@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed (apt-get install -y tmux); CI installs it")
def test_tictactoe_game_in_tmux(ttt_run):
    env = {"JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    command = (f"cd {ROOT} && env {exports} {sys.executable} -m az_jax.play "
               f"--workdir {ttt_run} --sims 4 --human-color x; echo EXIT=$?; sleep 120")
    tmux = Tmux(command)
    prompt = "your move (X)>"
    try:
        screen = tmux.wait_for(lambda s: prompt in s, 180, "the first prompt")
        assert "you play X; the AI plays O" in screen

        def typed(text: str) -> str:
            before = tmux.screen().count(prompt)
            tmux.type(text)
            return tmux.wait_for(
                lambda s: s.count(prompt) > before or "game over - new" in s, 60,
                f"the answer to {text!r}")

        screen = typed("Z9")
        assert "not accepted: 'Z9' is off the board" in screen
        assert "enter a cell: column letter and row number" in screen  # what is accepted
        screen = typed("B2")
        assert re.search(r"O \(AI\) plays [A-C][1-3] ", screen)
        assert re.search(r"estimate for O after [A-C][1-3]: \d+% +\(Q [+-]\d\.\d\d; root value",
                         screen)
        assert "candidates, improved policy (estimate):" in screen
        assert "last move: O" in screen
        screen = typed("undo")
        assert "took back: B2, " in screen
        assert _last_board(screen) == ["."] * 9
        screen = typed("hint")
        assert "X (you) would play (hint)" in screen
        order = ["B2", "A1", "C3", "A3", "C1", "B1", "B3", "A2", "C2"]
        cells = {name: i for i, name in enumerate(
            ["A3", "B3", "C3", "A2", "B2", "C2", "A1", "B1", "C1"])}
        for _ in range(5):
            if "game over:" in screen:
                break
            board = _last_board(screen)
            move = next(m for m in order if board[cells[m]] == ".")
            screen = typed(move)
        assert re.search(r"game over: (you win \(X\)|the AI wins \(O\)|a draw)", screen)
        tmux.type("quit")
        screen = tmux.wait_for(lambda s: "EXIT=" in s, 30, "the exit")
        assert "bye" in screen and "EXIT=0" in screen
        assert "Traceback" not in screen
    finally:
        tmux.close()



# ---------------------------------------------------------------------- honest numbers
# Tic-tac-toe, X to move with A3 B3 filled: C3 wins at once (hand-checked).
_X_WINS_IN_ONE = ["A3", "A1", "B3", "C1"]


def _position(agent, moves):
    state = agent.new_game()
    for m in moves:
        state = agent.play(state, agent.env.parse_action(m, state))
    return state


SIMS = 16


@pytest.fixture(scope="module")
def agents(ttt_run, tmp_path_factory):
    """policy -> (an Agent, a jitted search of the same network built here): one compile
    of each per module. Without node tactics: with them the won root's value is exactly 1
    too (every simulation plays the win), and these tests tell the shown numbers apart."""
    from az_jax import checkpoint as ckpt
    from az_jax import search as search_lib

    puct = make_run(tmp_path_factory.mktemp("play") / "ttt_puct", "tictactoe", policy="muzero")
    out = {}
    for policy, run in (("gumbel", ttt_run), ("muzero", puct)):
        restored = ckpt.load(workdir=run)
        restored.config.search.node_tactics = False
        agent = agent_lib.Agent(restored, num_simulations=SIMS)
        search = search_lib.make_search(agent.env, agent.restored.net, agent.config.search)
        out[policy] = agent, jax.jit(functools.partial(search, evaluation=True,
                                                       num_simulations=SIMS))
    return out


@pytest.mark.parametrize("which", ["gumbel", "muzero"])
def test_the_estimate_is_the_chosen_childs_q(agents, which):
    """Checked against a search tree built here: the shown value is the Q of the chosen
    root child, not the root value; the per-move numbers are the search's policy (Gumbel:
    the improved policy computed from the tree; PUCT: the visit share)."""
    import mctx
    import numpy as np

    agent, search = agents[which]
    state = _position(agent, _X_WINS_IN_ONE)
    thought = agent.think(state)
    assert thought.move == "C3" and thought.value == pytest.approx(1.0)  # a win: Q = 1
    assert thought.win_rate == pytest.approx(1.0)
    assert thought.root_value < 0.999  # the average over the search is not the move's Q

    # The same search (no root noise: deterministic), its tree read independently.
    out = search(agent.variables, jax.tree.map(lambda x: x[None], state),
                 jax.random.PRNGKey(7))
    tree, root = out.search_tree, out.search_tree.ROOT_INDEX
    q, completed = jax.jit(lambda t: (  # one compile instead of many eager ops
        t.qvalues(jax.numpy.zeros(1, jax.numpy.int32)),
        jax.vmap(mctx.qtransform_completed_by_mix_value, in_axes=[0, None])(t, root)))(tree)
    q = np.asarray(q)[0]
    assert int(out.action[0]) == thought.action
    assert thought.value == pytest.approx(float(q[thought.action]), abs=1e-6)
    assert thought.root_value == pytest.approx(float(tree.node_values[0, root]), abs=1e-6)
    visits = np.asarray(tree.children_visits[0, root])
    if which == "gumbel":
        assert thought.weight_label == "improved policy"
        logits = tree.children_prior_logits[:, root] + completed
        logits = np.where(np.asarray(state.legal_action_mask)[None], logits, -np.inf)
        improved = np.asarray(jax.nn.softmax(logits))[0]
        np.testing.assert_allclose(thought.weights, improved, atol=1e-5)
        # The root tactics (search.eval_tactics) leave only the winning move to search.
        assert visits[thought.action] == visits.sum()
        # In a position where nothing is decided the weights are not Gumbel's visit
        # schedule.
        quiet = agent.think(_position(agent, ["B2"]))
        assert (quiet.visits > 0).sum() > 1
        assert np.abs(quiet.weights - quiet.visits / quiet.visits.sum()).max() > 0.05
    else:
        assert thought.weight_label == "visit share"
        np.testing.assert_allclose(thought.weights, visits / visits.sum(), atol=1e-6)
    top = thought.top(3)
    assert top[0].action == int(np.argmax(thought.weights)) == thought.action
    assert [c.weight for c in top] == sorted((c.weight for c in top), reverse=True)
    for c in top:
        assert c.weight == pytest.approx(float(thought.weights[c.action]))
        assert c.value == pytest.approx(float(q[c.action]), abs=1e-6)


def test_gumbel_weights_change_with_the_position(agents):
    """Gumbel's visit counts follow a fixed schedule; the improved policy does not."""
    import numpy as np

    agent = agents["gumbel"][0]
    a = agent.think(_position(agent, ["B2"]))
    b = agent.think(_position(agent, _X_WINS_IN_ONE))
    top3 = lambda x: np.sort(x)[::-1][:3]  # noqa: E731
    assert np.abs(top3(a.weights) - top3(b.weights)).max() > 0.1
    assert b.top(1)[0].move == "C3" and b.top(1)[0].weight > 0.5  # it learned C3 wins


def test_after_the_human_wins_no_estimate_says_the_ai_wins(agents):
    """The human completes a row: the result names the line; nothing printed after the
    winning move is an estimate."""
    agent = agents["gumbel"][0]
    log: list[str] = []
    moves = iter(["C3", "B2", "hint", "quit"])
    game = play.TerminalGame(agent, 0, SIMS, write=log.append,
                             read=lambda prompt: log.append(prompt) or next(moves))
    for m in _X_WINS_IN_ONE:  # X (the human) has A3 and B3; O (the AI) A1 and C1
        game.push(agent.env.parse_action(m, game.state))
    assert game.run() == 0
    text = "\n".join(log)
    after = text[text.rindex("your move (X)>"):]
    assert "game over: you win (X) (three in a row: A3, B3, C3)! Well played." in after
    assert "estimate" not in after and "%" not in after
    # A move typed after the end is refused as such, and not played.
    assert "the game is over: type new, undo or quit" in after
    assert "the game is over; no hint" in after
    assert game.env.action_to_str(game.actions[-1]) == "C3" and len(game.actions) == 5


def test_moves_after_the_end_lists_none(ttt_run):
    """`moves` once the game is over: the env marks every action legal at a terminal state
    (no division by zero), which the terminal listed as the legal moves (occupied cells
    too)."""
    agent = agent_lib.Agent.load(workdir=ttt_run, num_simulations=2)
    log: list[str] = []
    game = play.TerminalGame(agent, 0, 2, read=lambda prompt: None, write=log.append)
    for m in [*_X_WINS_IN_ONE, "C3"]:
        game.push(agent.env.parse_action(m, game.state))
    assert agent.is_over(game.state)
    game.handle("moves")
    assert log[-1] == "the game is over: no legal moves (type new, undo or quit)", log[-1]


def test_bagh_chal_board_marks_the_last_move():
    env = envs.make("baghchal")
    step = jax.jit(env.step)
    state = env.init(None)
    placed = step(state, env.parse_action("C3", state))
    text = play.render(env, placed, (-1, 12))
    assert "3  .---.--(G)--.---." in text.splitlines()
    moved = step(placed, env.parse_action("A1-B2", placed))
    lines = play.render(env, moved, (20, 16)).splitlines()
    assert "2  .--(T)--.---.---." in lines and "1 [.]--.---.---.---T" in lines
    assert play.render(env, moved, None) == env.render(moved)  # nothing marked


def test_side_help_and_legends():
    bagh, gomoku = envs.make("baghchal"), envs.make("gomoku", size=9)
    assert "place a goat" in bagh.side_move_help(0) and "tiger" not in bagh.side_move_help(0)
    tigers = bagh.side_move_help(1)
    assert "place" not in tigers and "A1xC3" in tigers and "A1-C3" in tigers
    assert bagh.parse_action("A1xC3") == bagh.parse_action("A1-C3")  # the documented forms
    assert "X black, O white" in gomoku.legend
    assert gomoku.side_move_help(1) == gomoku.move_help  # sides that move alike


def test_winning_stones_are_marked_on_the_terminal_board():
    import types

    import numpy as np

    c4 = envs.make("connect4")
    board = np.full((6, 7), -1, np.int8)
    board[5, :4] = 0  # X: the bottom row, columns 1-4
    board[4, :3] = 1
    state = types.SimpleNamespace(game=types.SimpleNamespace(board=board, last=5 * 7 + 3))
    lines = play.render(c4, state, line=[35, 36, 37, 38]).splitlines()
    assert lines[-2] == "[X][X][X][X] .  .  ." and lines[-3] == " O  O  O  .  .  .  ."
    g5 = envs.make("gomoku", size=5)
    board = np.full(25, -1, np.int8)
    board[[0, 6, 12, 18, 24]] = 0
    state = types.SimpleNamespace(game=types.SimpleNamespace(board=board, last=24))
    lines = play.render(g5, state, line=[0, 6, 12, 18, 24]).splitlines()
    assert lines[0] == " 5 [X] .  .  .  ." and lines[4] == " 1  .  .  .  . [X]"
    assert play.render(g5, state) == g5.render(state)  # no line, no marks


def test_top_always_holds_the_chosen_move():
    """Gumbel's choice (sequential halving) need not top the improved policy: it is listed."""
    import numpy as np

    env = envs.make("tictactoe")
    visits = np.array([4, 4, 1, 1, 0, 0, 0, 0, 2])
    q = np.where(visits > 0, 0.1, np.nan).astype(np.float32)
    weights = np.array([0.3, 0.3, 0.2, 0.15, 0, 0, 0, 0, 0.05], np.float32)
    t = agent_lib.Thought(8, "C1", 0.2, visits, q, 12, 0.0, env, weights=weights)
    assert [c.action for c in t.top(3)] == [0, 1, 8]
    assert [c.action for c in t.top(5)] == [0, 1, 2, 3, 8]
    assert t.top(1)[0].action == 8


def test_ctrl_c_while_compiling_is_interrupted_not_a_traceback(ttt_run):
    """Ctrl-C before the first prompt (the search compiling) escaped main as a
    KeyboardInterrupt traceback; only the game itself was covered. The person's key press
    lands here as the write of the compiling line raising it."""
    said = []

    def write(text):
        said.append(text)
        if text.startswith("compiling the search"):
            raise KeyboardInterrupt

    assert play.main(["--workdir", str(ttt_run), "--sims", "2"], read=lambda _: "A1",
                     write=write) == 130
    assert said[-1] == "\ninterrupted"
