"""Gomoku engines of az_jax/eval/external.py: `gomokubench:LEVEL` (the PyPI package's rules
checked against our env's) and `gomocup[...]:COMMAND` brains in real subprocesses: our own
brain (az_jax.gomocup, the shipped gomoku_9x9) and tests/faulty_brain.py, whose crashes,
hangs, garbage, errors and illegal moves must each forfeit the game, be counted, and leave
no process behind."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import libs.piece as gp  # gomokubench's code (a top-level package 'libs')
import numpy as np
import pytest

import envs
from az_jax.eval import external, match, players

FAULTY = str(Path(__file__).with_name("faulty_brain.py"))
ROOT = Path(__file__).resolve().parents[1]
N = 9
env = envs.make("gomoku", size=N)
standard = envs.make("gomoku", size=N, rule="standard")
step = jax.jit(env.step)
step_std = jax.jit(standard.step)
factory = players.PlayerFactory(env)
runner = external.ExternalMatchRunner(env, 2, opening_plies=0)  # one compile per module


def _brain(mode: str, options: str = "200ms;grace=300ms;start=20s", after: int = 2):
    cmd = shlex.join([sys.executable, FAULTY, mode, str(after)])
    return external.make_engine(external.parse_opponent(f"gomocup[{options}]:{cmd}"), env)


def _within(seconds: float, fn):
    """fn()'s result, or the exception it raised; fails if it runs longer than `seconds`
    (it is left running in a daemon thread)."""
    out = []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return out[0]


def _gone(pid: int, wait: float = 5.0) -> bool:
    """Whether process `pid` has ended (a zombie counts) within `wait` seconds (Linux)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _pids(log: Path, mode: str) -> list[int]:
    """The pids of the faulty brains in `mode` that wrote to the FAULTY_BRAIN_LOG `log`."""
    lines = log.read_text().splitlines() if log.exists() else []
    return sorted({int(line.split()[0]) for line in lines if line.split()[1] == mode})


def _reaped(engine) -> None:
    engine.close()
    procs = engine.brain.spawned
    assert procs and all(p.returncode is not None for p in procs)
    for p in procs:  # no zombie: a reaped child is gone from /proc
        assert not Path(f"/proc/{p.pid}").exists() or \
            "Z" not in Path(f"/proc/{p.pid}/stat").read_text().split()[2]


# =========================================================================== gomokubench
def _play(moves, rule_env=env, the_step=step):
    """Plays env actions through the env and gomokubench's engine game; returns both views
    after every ply: [(env over, env winner player or -1, bench over, bench winner)]."""
    state = rule_env.init(jax.random.PRNGKey(0))
    game = external.gomokubench(env, "easy").new_game()
    out = []
    for a in moves:
        state = the_step(state, a)
        game.push(a)
        winner = int(np.argmax(state.rewards)) if float(np.max(state.rewards)) > 0 else -1
        win, colour = game.state.check_five_in_a_row()
        out.append((bool(state.terminated), winner, game.is_over(),
                    {gp.BLACK: 0, gp.WHITE: 1}.get(colour, -1) if win else -1))
    return out


def _with_fillers(black, white_far):
    """Black stones `black` (env actions) interleaved with white's `white_far`, black's
    last stone last."""
    white = white_far[:len(black) - 1]
    return [a for pair in zip(black, white, strict=False) for a in pair] + black[len(white):]


def test_gomokubench_coordinates_and_first_player():
    game = external.gomokubench(env, "easy").new_game()
    game.push(env.parse_action("B9"))  # column B, top row: x=1, y=0 = action 1
    assert env.parse_action("B9") == 1 and game.state.values[0, 1] == gp.BLACK
    game.push(env.parse_action("A8"))  # x=0, y=1
    assert game.state.values[1, 0] == gp.WHITE  # black moved first, then white
    with pytest.raises(ValueError, match="occupied"):
        game.push(1)


def test_gomokubench_win_detection_matches_the_env():
    """Hand-made lines (edges, both diagonals, an overline, a four) and random games: the
    package's win check agrees with freestyle Gomoku, and calls an overline a win where
    standard Gomoku does not."""
    a = lambda r, c: r * N + c  # noqa: E731
    far = [a(8, 0), a(8, 2), a(8, 4), a(8, 6), a(8, 8), a(6, 8)]
    lines = {
        "edge row": [a(0, c) for c in range(5)],
        "edge column": [a(r, 8) for r in range(4, 9)][::-1][:5],
        "diagonal": [a(i, i) for i in range(5)],
        "anti-diagonal": [a(i, 8 - i) for i in range(2, 7)],
    }
    for name, black in lines.items():
        views = _play(_with_fillers(black, far))
        assert views[-1] == (True, 0, True, 0), name
        assert all(v == (False, -1, False, -1) for v in views[:-1]), name
    four = [a(4, c) for c in range(4)]
    assert _play(_with_fillers(four, far))[-1] == (False, -1, False, -1)
    # Overline: five split by a hole, then the hole: six in a row.
    six = [a(2, 0), a(2, 1), a(2, 3), a(2, 4), a(2, 5), a(2, 2)]
    moves = _with_fillers(six, far)
    assert _play(moves)[-1] == (True, 0, True, 0)  # freestyle and gomokubench: a win
    std = _play(moves, standard, step_std)[-1]
    assert std[0] is False and std[2] is True  # standard: no win; the package: a win
    # Random games (uniform moves on 7x7 so that some fill the board: draws too).
    small = envs.make("gomoku", size=7)
    small_step = jax.jit(small.step)
    rng = np.random.default_rng(0)
    ends = set()
    for _ in range(4):
        state = small.init(jax.random.PRNGKey(0))
        game = external.gomokubench(small, "easy").new_game()
        while not bool(state.terminated):
            act = int(rng.choice(np.flatnonzero(np.asarray(state.legal_action_mask))))
            state, _ = small_step(state, act), game.push(act)
            assert game.is_over() == bool(state.terminated)
        win, colour = game.state.check_five_in_a_row()
        env_winner = int(np.argmax(state.rewards)) if float(np.max(state.rewards)) else -1
        assert env_winner == ({gp.BLACK: 0, gp.WHITE: 1}[colour] if win else -1)
        ends.add(env_winner)
    assert len(ends) >= 2  # both colours won some (or drew)


def test_gomokubench_match_and_rule_errors():
    engine = external.make_engine(external.parse_opponent("gomokubench:easy"), env)
    res = runner.play(factory.onestep(), engine, jax.random.PRNGKey(1))
    assert res.total.games == 2 and res.unfinished == 0 and res.mean_plies >= 9
    assert res.opponent == "gomokubench:easy" and not res.notes
    with pytest.raises(ValueError, match="freestyle gomoku only"):
        external.make_engine(external.parse_opponent("gomokubench:hard"), standard)
    with pytest.raises(ValueError, match="unknown level 'expert'; accepted: easy"):
        external.parse_opponent("gomokubench:expert")
    with pytest.raises(ValueError, match="plays gomoku only, not connect4"):
        external.check_opponents("random,gomokubench:easy", "connect4")


# =========================================================================== gomocup
def test_gomocup_names_options_and_config_errors():
    cmd = "my brain --weights a\\,b.bin"
    opps = external.parse_opponents(f"random,gomocup[250ms;grace=1s]:{cmd},gomokubench:Hard")
    assert [type(o).__name__ for o in opps] == ["Opponent", "ExternalOpponent",
                                                "ExternalOpponent"]
    spec = opps[1].arg
    assert spec.command == ("my", "brain", "--weights", "a,b.bin")
    assert (spec.turn_ms, spec.grace_ms, spec.answer_s) == (250, 1000, 1.25)
    assert opps[1].name == "gomocup[250ms;grace=1000ms]:my brain --weights a,b.bin"
    assert opps[2].name == "gomokubench:hard"
    assert external.parse_opponent("gomocup:x").arg.answer_s == 2.0  # 1 s + 1 s grace
    assert external.parse_opponent("gomocup[1.5s]:x").arg.turn_ms == 1500
    for bad, msg in [("gomocup[fast]:x", "cannot read the time per move 'fast'"),
                     ("gomocup[1s;depth=3]:x", "unknown gomocup option 'depth=3'"),
                     ("gomocup[1s]:", "needs a command"),
                     ("gomocup:'unclosed", "cannot split"),
                     ("gomokubench[1s]:easy", "takes no \\[options\\]")]:
        with pytest.raises(ValueError, match=msg):
            external.parse_opponents(bad)
    with pytest.raises(ValueError, match="no program 'no-such-brain-xyz' on the PATH"):
        external.check_opponents("gomocup:no-such-brain-xyz --fast", "gomoku")
    with pytest.raises(ValueError, match="plays gomoku only, not baghchal"):
        external.check_opponents(f"gomocup:{sys.executable}", "baghchal")
    assert external.gomocup_rule(env) == 0 and external.gomocup_rule(standard) == 1


def _keep_brains(monkeypatch) -> list:
    """The GomocupBrain objects made from now on, in a list (to check they were reaped)."""
    made = []
    monkeypatch.setattr(external, "GomocupBrain", lambda *a, **kw: made.append(
        external_brain(*a, **kw)) or made[-1])
    return made


def test_a_brain_that_refuses_the_board_is_a_config_error(monkeypatch):
    made = _keep_brains(monkeypatch)
    with pytest.raises(ValueError, match="cannot play 9x9 gomoku: error: answered 'ERROR "
                                         "unsupported size 9'"):
        _brain("refuse")
    assert made[0].proc is None and all(p.returncode is not None for p in made[0].spawned)


external_brain = external.GomocupBrain


@pytest.mark.parametrize("mode,kind", [("crash", "crash"), ("hang", "timeout"),
                                       ("garbage", "garbage"), ("illegal", "illegal"),
                                       ("offboard", "illegal"), ("error", "error")])
def test_a_faulty_brain_forfeits_and_is_reported(mode, kind):
    engine = _brain(mode)
    warnings = []
    res = runner.play(factory.random(), engine, jax.random.PRNGKey(2), warn=warnings.append)
    assert res.total.games == 2 and res.total.wins == 2  # both games lost by the brain
    assert res.notes.startswith(f"forfeits: 2 {kind}")
    assert warnings[-1].startswith(f"warning: {engine.name}: forfeits: 2 {kind}")
    assert sum(f": {kind}: " in w for w in warnings) == 2  # one line per forfeited game
    # restarted after each forfeit but an illegal move (a move line: the brain is in step)
    assert len(engine.brain.spawned) == (1 if kind == "illegal" else 2)
    _reaped(engine)


def test_a_brain_that_closed_its_input_is_said_so(monkeypatch):
    """Writing to a brain that closed its input: a crash, said as that (it read 'the brain
    cannot write to it', as if the brain could not write, and 'exit status -9', the status
    of the kill that followed, as if something else had killed it)."""
    made = _keep_brains(monkeypatch)
    with pytest.raises(ValueError, match="cannot play 9x9 gomoku: crash: the brain closed "
                                         "its input \\(BrokenPipeError writing to it\\)$"):
        _brain("closein")
    assert made[0].proc is None and all(p.returncode is not None for p in made[0].spawned)


def test_a_brain_that_floods_message_lines_times_out():
    """MESSAGE lines written faster than they are logged (the log takes 1 ms a line, as a
    terminal may): the lines never run out, and the deadline still holds."""
    engine = _brain("flood", after=1)
    engine.brain.log = lambda line: time.sleep(0.001)
    t0 = time.monotonic()
    err = _within(20, lambda: engine.brain.move([]))
    assert isinstance(err, external.EngineForfeit) and err.kind == "timeout", err
    assert time.monotonic() - t0 < 5  # the deadline is 0.5 s
    _reaped(engine)


def test_a_brain_that_floods_after_its_answer_times_out_on_the_next_request():
    """MESSAGE lines without end after a move, faster than they are logged: the next
    request's wait for the lines before it (unasked) ended only when they ran out, so it
    never sent the request nor reached a deadline; and logging each of those there took
    a millisecond a line."""
    engine = _brain("ponder", after=1)
    logged = []
    engine.brain.log = lambda line: (time.sleep(0.001), logged.append(line))
    assert engine.brain.move([]) == 0  # answered; then the lines start
    time.sleep(0.2)  # (tens of thousands of lines)
    t0 = time.monotonic()
    err = _within(20, lambda: engine.brain.move([0, 1]))
    assert isinstance(err, external.EngineForfeit) and err.kind == "timeout", err
    assert time.monotonic() - t0 < 5, len(logged)  # the deadline is 0.5 s
    assert any("more lines unasked, not logged" in m for m in logged)
    _reaped(engine)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="POSIX groups, Linux /proc")
def test_a_brain_behind_a_wrapper_is_killed_with_it(tmp_path, monkeypatch):
    """A brain run through `sh -c` (the shell stays, the brain is its child): a timeout
    kills both, and closing does not wait on the pipe the brain held."""
    log = tmp_path / "brains.log"
    monkeypatch.setenv("FAULTY_BRAIN_LOG", str(log))
    inner = shlex.join([sys.executable, FAULTY, "hang", "1"])
    cmd = shlex.join(["sh", "-c", f"{inner}; echo wrapper-done >&2"])
    engine = external.make_engine(
        external.parse_opponent(f"gomocup[200ms;grace=300ms;start=20s]:{cmd}"), env)
    (pid,) = _pids(log, "hang")
    try:
        err = _within(20, lambda: engine.brain.move([]))
        assert isinstance(err, external.EngineForfeit) and err.kind == "timeout", err
        assert _gone(pid), "the brain outlived its wrapper"
        _within(20, lambda: _reaped(engine))
    finally:
        if not _gone(pid, 0):
            os.kill(pid, signal.SIGKILL)


def test_a_late_answer_is_never_taken_for_another_position():
    """A brain that writes a line that is no answer, then (late) its move: the game is
    forfeited as garbage and the brain restarted, so that the next position gets its own
    answer, not the move computed for the position before."""
    engine = _brain("chatter", "200ms;grace=1s;start=20s")
    brain = engine.brain
    brain.log = lambda line: None
    assert brain.move([]) == 0  # request 1: answered at once
    with pytest.raises(external.EngineForfeit, match="garbage: answered 'thinking...'"):
        brain.move([1, 2, 3])  # request 2: 'thinking...', then 0,0 for this position
    assert brain.move([0, 1, 2]) == 3  # its first empty point, not 0,0 (occupied here)
    assert len(brain.spawned) == 2
    _reaped(engine)


def test_unknown_answers_to_info_are_logged_not_forfeits():
    """UNKNOWN to each INFO key, read after the first request was sent: logged, and the
    move is the answer. An ERROR not followed by a move is still one (at the deadline)."""
    engine = _brain("unknowninfo", "200ms;grace=1s;start=20s")
    logged = []
    engine.brain.log = logged.append
    assert engine.brain.move([]) == 0
    assert engine.brain.move([0, 40]) == 1
    assert sum("'UNKNOWN INFO " in m for m in logged) == 5, logged
    _reaped(engine)
    engine = _brain("error", after=1)  # ERROR to its first request after INFO
    engine.brain.log = logged.append
    with pytest.raises(external.EngineForfeit, match="error: answered 'ERROR something"):
        engine.brain.move([])
    _reaped(engine)


def test_a_chatty_brain_plays_whole_games():
    """MESSAGE lines are logged, DEBUG dropped, an UNKNOWN to a command it does not know
    (sent unasked) is logged and not taken for a move; every path (BEGIN, BOARD, TURN,
    RESTART) is used."""
    engine = _brain("ok")
    logged = []
    engine.brain.log = logged.append
    res = runner.play(factory.random(), engine, jax.random.PRNGKey(3), warn=logged.append)
    assert res.total.games == 2 and res.unfinished == 0 and not res.notes
    assert res.mean_plies >= 9
    assert any("MESSAGE thinking hard" in m for m in logged)
    infos = [m.split("MESSAGE got INFO ")[1] for m in logged if "got INFO" in m]
    assert infos == ["timeout_turn 200", "timeout_match 0", "max_memory 0", "game_type 1",
                     "rule 0"]  # freestyle
    assert not any("DEBUG" in m for m in logged)
    brain = engine.brain
    brain._send(["YXSHOWINFO"])  # answered UNKNOWN: an unasked line, logged
    time.sleep(0.5)  # (an answer still on its way would be read as RESTART's)
    assert brain.move([]) == 0  # RESTART + BEGIN: the first empty point
    assert brain.move([0, 40]) == 1  # TURN 4,4: the brain's own game goes on
    assert brain.move([5, 6, 7]) == 0  # BOARD: another position
    assert any("unasked line 'UNKNOWN YXSHOWINFO'" in m for m in logged)
    _reaped(engine)
    cmd = shlex.join([sys.executable, FAULTY, "ok"])
    engine = external.make_engine(external.parse_opponent(f"gomocup:{cmd}"), standard)
    engine.brain.log = logged.append
    assert engine.brain.move([]) == 0  # the INFO lines come before the first request
    assert logged[-2:] == [f"{engine.name}: MESSAGE got INFO rule 1",  # exactly five
                           f"{engine.name}: MESSAGE thinking hard"]
    _reaped(engine)


def test_a_skeleton_brain_gets_restart_before_board():
    """The protocol's C skeleton (pisqpipe) adds the stones of BOARD to the board it holds:
    a manager sends RESTART first when a game is open (BOARD alone left the game before
    on its board, and the brain played into that)."""
    engine = _brain("skeleton", "200ms;grace=1s;start=20s")
    brain = engine.brain
    assert brain.move([]) == 0  # BEGIN: the first empty point
    assert brain.move([0, 1]) == 2  # TURN: its own game goes on
    assert brain.move([5, 6, 7]) == 0  # RESTART, BOARD: not 1 (0,0 of the game before)
    assert brain.move([3, 4]) == 0  # RESTART, BOARD (one stone each)
    assert brain.move([]) == 0  # RESTART, BEGIN
    assert len(brain.spawned) == 1
    _reaped(engine)


def test_a_brain_may_end_its_lines_with_cr():
    """The protocol: a brain ends its lines with CR LF, LF or CR. CR alone was held back
    (a text stream waits for a possible LF), so START, then every move, timed out."""
    engine = _within(30, lambda: _brain("cr", "200ms;grace=1s;start=5s"))
    assert not isinstance(engine, BaseException), engine
    brain = engine.brain
    brain.log = lambda line: None
    assert brain.move([]) == 0 and brain.move([0, 1]) == 2 and brain.move([5, 6, 7]) == 0
    assert brain.late == 0 and len(brain.spawned) == 1
    _reaped(engine)


def test_restart_is_answered_within_the_start_time():
    """The protocol counts RESTART as initialization (as START), not in a turn's time: a
    brain that takes 1 s to clear its tables on a 200 ms turn (+ 300 ms grace) plays on
    (it lost the game as a timeout, and now RESTART comes before most BOARDs)."""
    engine = _brain("slowrestart", "200ms;grace=300ms;start=20s")
    brain = engine.brain
    assert brain.move([]) == 0  # BEGIN
    assert brain.move([5, 6, 7]) == 0  # RESTART (1 s), BOARD
    assert brain.late == 0 and len(brain.spawned) == 1
    _reaped(engine)


def test_a_brain_that_suggests_its_moves_plays():
    """The protocol: a brain may answer SUGGEST x,y, and the manager imposes a move with
    PLAY x,y (Gomocup's: the same), whose answer is the move (it was garbage: every game
    lost)."""
    engine = _brain("suggest", "200ms;grace=1s;start=20s")
    brain = engine.brain
    res = runner.play(factory.random(), engine, jax.random.PRNGKey(3))
    assert res.total.games == 2 and res.unfinished == 0 and not res.notes, res
    assert brain.move([]) == 0 and brain.move([0, 1]) == 2 and brain.move([5, 6, 7]) == 0
    assert len(brain.spawned) == 1
    _reaped(engine)


def test_a_brain_without_restart_is_run_again(tmp_path, monkeypatch):
    """RESTART is optional in the protocol: to UNKNOWN a manager sends END and runs the
    brain again (it was an error: the game lost, as every other game from the empty
    board)."""
    log = tmp_path / "brains.log"
    monkeypatch.setenv("FAULTY_BRAIN_LOG", str(log))
    engine = _brain("norestart", "200ms;grace=1s;start=20s")
    brain = engine.brain
    logged = []
    brain.log = logged.append
    assert brain.move([]) == 0  # BEGIN
    assert brain.move([]) == 0  # RESTART: UNKNOWN; END, START again, BEGIN
    assert brain.move([5, 6, 7]) == 0  # again, then BOARD
    assert len(brain.spawned) == 3
    first, second, _ = (p.pid for p in brain.spawned)
    commands = log.read_text().splitlines()
    assert f"{first} norestart END" in commands and f"{second} norestart END" in commands
    assert any("'UNKNOWN RESTART' to RESTART" in m for m in logged), logged
    _reaped(engine)


@pytest.mark.slow  # the brain's start-up (import, restore, compile): ~40 s on a loaded CPU
def test_our_own_brain_as_a_gomocup_opponent():
    """az_jax.gomocup with the shipped gomoku_9x9 (8 simulations a move) in a subprocess:
    a 2-game match that random loses, then a position where the brain completes its four
    (the coordinates must be x = column, y = row for it to find the win)."""
    cmd = shlex.join([sys.executable, "-m", "az_jax.gomocup", "--model", "gomoku_9x9",
                      "--sims", "8"])
    opp = external.parse_opponent(f"gomocup[2s;start=120s]:{cmd}")
    engine = external.make_engine(opp, env)
    try:
        res = runner.play(factory.random(), engine, jax.random.PRNGKey(4))
        assert isinstance(res, match.MatchResult) and res.total.games == 2
        assert res.total.losses == 2 and not res.notes, res
        # The brain (to move, black) has x=2..5 on row y=6; 1,6 is white: 6,6 wins.
        a = lambda x, y: y * N + x  # noqa: E731
        black = [a(2, 6), a(3, 6), a(4, 6), a(5, 6)]
        white = [a(1, 6), a(0, 0), a(8, 0), a(0, 8)]
        moves = [m for pair in zip(black, white, strict=True) for m in pair]
        assert engine.brain.move(moves) == a(6, 6)
    finally:
        _reaped(engine)


def test_the_training_evaluator_ends_its_brains(tmp_path, monkeypatch):
    """The trainer closes its evaluator however training ends, and that ends each brain the
    evaluator started with END (they were left to the finalizer's kill at exit)."""
    import types

    from az_jax import network, search
    from az_jax.eval import evaluator
    from configs import gomoku_9x9

    log = tmp_path / "brains.log"
    monkeypatch.setenv("FAULTY_BRAIN_LOG", str(log))
    config = gomoku_9x9.get_config()
    config.network.channels, config.network.num_blocks = 4, 1
    config.eval.opponents = f"gomocup[200ms;start=20s]:{shlex.join([sys.executable, FAULTY, 'ok'])}"
    net = network.make_network(config.network, env)
    setup = types.SimpleNamespace(config=config, env=env, net=net,
                                  search=search.make_search(env, net, config.search))
    ev = evaluator.TrainingEvaluator(setup, tmp_path)
    (engine,) = ev.engines.values()
    engine.brain.move([])  # started, as a match would
    (pid,) = _pids(log, "ok")
    ev.close()
    assert f"{pid} ok END" in log.read_text().splitlines()
    assert _gone(pid)


def test_training_config_check_and_the_result_table():
    from az_jax import config as config_lib
    from az_jax import evaluate
    from configs import gomoku_9x9

    config = gomoku_9x9.get_config()
    config.eval.opponents = "random,gomocup[1s]:no-such-brain-xyz,gomokubench:easy"
    with pytest.raises(ValueError, match="eval.opponents: opponent 'gomocup\\[1000ms\\]:"
                                         "no-such-brain-xyz': no program 'no-such-brain-xyz'"):
        config_lib.validate(config, 1)
    config.eval.opponents = f"random,gomocup[1s]:{sys.executable} -c pass,gomokubench:easy"
    config_lib.validate(config, 1)  # starts nothing
    res = match.MatchResult("me", "gomocup[1000ms]:x", match.WDL(1, 0, 0), match.WDL(1, 0, 0),
                            notes="forfeits: 2 timeout")
    assert evaluate.format_results([res]).splitlines()[-1].endswith("(forfeits: 2 timeout)")
    assert (res + res).notes == "forfeits: 2 timeout; forfeits: 2 timeout"


@pytest.mark.slow  # restores and compiles the shipped 9x9 model (~20-40 s on a loaded CPU)
def test_evaluate_cli_reports_forfeits(capsys):
    from az_jax import evaluate

    brain = shlex.join([sys.executable, FAULTY, "garbage"])
    code = evaluate.main(["--model", "gomoku_9x9", "--sims", "2", "--games", "2", "--quiet",
                          "--against", f"gomokubench:easy,gomocup[200ms;grace=300ms]:{brain}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("gomo")}
    assert set(rows) == {"gomokubench:easy", "gomocup[200ms;grace=300ms]:" + sys.executable}
    bad = rows["gomocup[200ms;grace=300ms]:" + sys.executable]
    assert "2-0-0" in bad and bad.endswith("(forfeits: 2 garbage)")
    assert "warning: gomocup[200ms;grace=300ms]:" in err and "forfeits: 2 garbage" in err


def test_evaluate_ends_every_brain_it_started(tmp_path, monkeypatch, capsys):
    """`evaluate` closes (END) each brain it started, here when the next one refuses the
    board: the first gets END, before `main` returns."""
    from az_jax import evaluate

    log = tmp_path / "brains.log"
    monkeypatch.setenv("FAULTY_BRAIN_LOG", str(log))
    ok, refuse = (shlex.join([sys.executable, FAULTY, mode]) for mode in ("ok", "refuse"))
    code = evaluate.main(["--model", "gomoku_9x9", "--games", "2", "--quiet", "--against",
                          f"gomocup[200ms;start=20s]:{ok},gomocup[200ms;start=20s]:{refuse}"])
    assert code == 2 and "cannot play 9x9 gomoku" in capsys.readouterr().err
    (pid,) = _pids(log, "ok")
    assert f"{pid} ok END" in log.read_text().splitlines()
    assert _gone(pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="POSIX signals, Linux /proc")
def test_sigterm_ends_evaluate_and_its_brains(tmp_path):
    """SIGTERM to `python -m az_jax.evaluate` while a brain is busy (loading, here): the
    evaluation ends (143) and takes the brain with it, rather than leaving it running."""
    log = tmp_path / "brains.log"
    brain = shlex.join([sys.executable, FAULTY, "slowstart"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "az_jax.evaluate", "--model", "gomoku_9x9", "--games", "2",
         "--quiet", "--against", f"gomocup[200ms;start=600s]:{brain}"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), FAULTY_BRAIN_LOG=str(log)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        deadline = time.monotonic() + 240  # importing JAX, restoring the model
        while not pids and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = _pids(log, "slowstart")
        assert pids, proc.communicate(timeout=10)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and "terminated" in err, (proc.returncode, out, err)
        assert _gone(pids[0]), "the brain outlived the evaluation"
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:
            if not _gone(pid, 0):  # (the old driver's orphan)
                os.kill(pid, signal.SIGKILL)


# =========================================================================== engine under test
def _flip(w):
    return match.WDL(w.losses, w.draws, w.wins)


def test_an_engine_under_test_plays_engines_and_players():
    """`evaluate --brain`: the side under test is an engine too. The first-empty-point brain
    (tests/faulty_brain.py ok) loses both games to gomokubench:standard from either seat,
    and the two seats see the same games; against a JAX player (random) the gauntlet plays
    the player's match and turns it round."""
    from az_jax.eval import gauntlet

    naive = _brain("ok", "2s;grace=2s;start=20s")
    bench = external.gomokubench(env, "standard")
    key = jax.random.PRNGKey(5)
    res = runner.play(naive, bench, key)
    assert (res.player, res.opponent) == (naive.name, "gomokubench:standard")
    assert res.total == match.WDL(0, 0, 2), res  # the engine beats a first-free-point mover
    back = runner.play(bench, naive, key)  # the same games, from the other seat
    assert (back.first, back.second) == (_flip(res.second), _flip(res.first)), (res, back)
    g = gauntlet.Gauntlet(env, 2)
    g._host_runner = runner  # (one compile per module)
    rnd = factory.random()
    mine = g.play(naive, rnd, key)
    theirs = runner.play(rnd, naive, key)
    assert (mine.player, mine.opponent) == (naive.name, "random")
    assert (mine.first, mine.second) == (_flip(theirs.second), _flip(theirs.first))
    assert mine.total.games == 2 and not mine.notes
    _reaped(naive)


def test_an_engine_under_test_that_fails_loses_its_games():
    crashing = _brain("crash")
    warnings = []
    res = runner.play(crashing, external.gomokubench(env, "easy"), jax.random.PRNGKey(6),
                      warn=warnings.append)
    assert res.total == match.WDL(0, 0, 2), res  # both forfeited by the side under test
    assert res.notes == f"{crashing.name}: forfeits: 2 crash"
    assert sum(": crash: " in w for w in warnings) == 2
    _reaped(crashing)


def test_evaluate_brain_flag_errors(capsys):
    from az_jax import evaluate

    for argv, why in [(["--brain", "1x"], "cannot read --brain '1x'"),
                      (["--brain", "0ms"], "--brain=0ms: the time per move must be > 0"),
                      (["--brain", "1s", "--search-tactics", "none"],
                       "--brain plays with the brain's own search settings"),
                      (["--brain", "1s", "--threat-depth", "4"],
                       "--brain plays with the brain's own search settings"),
                      (["--brain", "1s", "--value-scale", "0.3"],
                       "--brain plays with the brain's own search settings"),
                      (["--threat-depth", "1"], "--threat-depth=1 must be >= 2"),
                      (["--value-scale", "0"], "--value-scale=0.0 must be a finite number > 0"),
                      (["--value-scale", "nan"], "--value-scale=nan must be a finite")]:
        assert evaluate.main(["--model", "gomoku_9x9", "--against", "random"] + argv) == 2
        assert why in capsys.readouterr().err


@pytest.mark.slow  # the brain's start-up and warm-up, in a subprocess (~30-60 s loaded)
def test_evaluate_through_the_brain(capsys):
    from az_jax import evaluate

    code = evaluate.main(["--model", "gomoku_9x9", "--brain", "300ms", "--games", "2",
                          "--against", "random", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"network under test: iter-\d+-brain\[300ms\]", out), out
    row = next(line for line in out.splitlines() if line.startswith("random "))
    assert row.split()[4] == "2-0-0", out
    m = re.search(r"brain: (\d+) searched moves, simulations per move median (\d+)", out)
    assert m and int(m.group(1)) >= 3 and int(m.group(2)) >= 8, out
