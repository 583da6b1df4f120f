"""`python -m az_jax.bench learn`: end to end on a tiny Connect4 run, and its parts."""

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest

import envs
from az_jax import bench, network
from az_jax import config as config_lib
from az_jax.bench import learn as learn_bench
from az_jax.eval import players, solver_bench
from tests.tiny import make_run, tiny_args

DATA = Path(__file__).parent / "data"
CONFIGS = Path(__file__).parent.parent / "configs"
TINY = tiny_args(selfplay__num_plies=8, train__num_iterations=650)  # stopped by time


def _small_sets(tmp_path) -> Path:
    """Two 6-position set files named like the stratified sets (phases from the names)."""
    positions = solver_bench.read_positions(DATA / "connect4_solver_200.txt")
    out = tmp_path / "sets"
    out.mkdir()
    solver_bench.write_positions(out / "beginning_hard.txt", positions[:6])
    solver_bench.write_positions(out / "end_easy.txt", positions[6:12])
    return out


@pytest.mark.slow
def test_learn_connect4_end_to_end(tmp_path, capsys):
    workdir = tmp_path / "run"
    result = bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--minutes", "0.05",
                         "--workdir", str(workdir), "--checkpoint-every", "1", "--sims", "2",
                         "--sets", str(_small_sets(tmp_path)), "--max-points", "2", *TINY,
                         "--config.train.learning_rate=0.002"])
    out = capsys.readouterr().out
    data = json.loads((workdir / "learn.json").read_text())
    assert data == json.loads(json.dumps(result))
    assert (workdir / "learn.png").stat().st_size > 5000
    # The overrides reached train.py (its saved config) and are recorded.
    config = json.loads((workdir / "config.json").read_text())
    assert config["network"]["channels"] == 4 and config["train"]["learning_rate"] == 0.002
    assert config["eval"]["every"] == 0 and config["checkpoint"]["every"] == 1
    assert "network.channels=4" in data["overrides"]
    assert data["kind"] == "solver" and data["env"] == "connect4"
    assert data["evaluation"]["positions"] == 12
    train = data["train"]
    assert train["iterations"] >= 1 and train["stopped_by"] in ("time", "finished")
    assert train["checkpoints"][-1] == train["iterations"]  # SIGTERM saved the last one
    points = data["points"]
    assert 1 <= len(points) <= 2 and points[-1]["iteration"] == train["iterations"]
    assert [p["train_minutes"] for p in points] == sorted(p["train_minutes"] for p in points)
    for p in points:
        assert set(p["results"]) == {"greedy", "mcts:2"}
        for r in p["results"].values():
            assert set(r) == {"all", "beginning", "end", "sets", "horizons"}
            assert sum(r["horizons"].values()) == round(r["all"] * 12)  # every mistake once
            assert set(r["sets"]) == {"beginning_hard", "end_easy"}
            assert all(0 <= r[k] <= 1 for k in ("all", "beginning", "end"))
            # 6 positions per set: rates are multiples of 1/6, and "all" is their mean.
            assert math.isclose(r["all"], (r["beginning"] + r["end"]) / 2)
            assert math.isclose(r["end"] * 6, round(r["end"] * 6))
    assert "mistake rate by checkpoint" in out
    assert data["complete"] and data["peak_memory_bytes"] > 0 and data["train_peak_rss_bytes"] > 0
    assert "peak host memory" in out and "train.py (a subprocess, not in the above)" in out
    # Re-evaluate the same run: the network alone, the last checkpoint only.
    again = bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--stage",
                        "evaluate", "--workdir", str(workdir), "--sims", "0",
                        "--sets", str(tmp_path / "sets"), "--max-points", "1"])
    assert [p["iteration"] for p in again["points"]] == [train["iterations"]]
    assert set(again["points"][0]["results"]) == {"greedy"}
    assert again["points"][0]["results"]["greedy"] == points[-1]["results"]["greedy"]
    assert again["overrides"] == data["overrides"] and again["train"] == train
    # A train.py run has no train.json: the minutes come from metrics.jsonl.
    (workdir / "train.json").unlink()
    plain = bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--stage",
                        "evaluate", "--workdir", str(workdir), "--sims", "0",
                        "--sets", str(tmp_path / "sets"), "--max-points", "1"])
    assert plain["points"][0]["results"] == again["points"][0]["results"]
    assert plain["train"]["iterations"] == train["iterations"]
    assert plain["train"]["stopped_by"].startswith("train.py")
    # Its config: the run's full config.json, not the command line's --config.
    assert plain["config"] == str(workdir / "config.json") and plain["overrides"] == []
    p = plain["points"][0]
    assert p["wall_minutes"] == pytest.approx(p["train_minutes"]) == pytest.approx(
        points[-1]["train_minutes"])


def test_evaluate_stage_needs_a_run(tmp_path):
    with pytest.raises(SystemExit, match="neither train.json nor metrics.jsonl"):
        bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--stage", "evaluate",
                    "--workdir", str(tmp_path)])


def test_learn_refuses_a_used_workdir(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit, match="already holds a run"):
        bench.main(["learn", "--config", str(CONFIGS / "tictactoe.py"), "--workdir", str(tmp_path)])
    with pytest.raises(SystemExit, match="no field"):
        bench.main(["learn", "--config", str(CONFIGS / "tictactoe.py"), "--config.train.nope=1",
                    "--workdir", str(tmp_path / "new")])
    with pytest.raises(SystemExit, match="expected --config.KEY=VALUE"):
        bench.main(["learn", "--config.train.batch_size"])


def test_bad_sets_minutes_and_seed_fail_before_training(tmp_path, monkeypatch):
    """A --sets file that does not read, --minutes not a finite number > 0 or a --seed
    outside 0..2**32 - 1 (as every command line's, README) stops bench learn before it
    trains (a bad set file had trained for --minutes, then failed with a traceback; a
    seed of 2**70 too, in PRNGKey)."""
    monkeypatch.setattr(learn_bench, "train_for", lambda *a, **k: pytest.fail("it trained"))
    (tmp_path / "bad.txt").write_text("44 0 -1,-1,-1,0,-1,-1,-1\n4 x\n")
    with pytest.raises(SystemExit, match="bad.txt:2: score 'x' is not an integer"):
        bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--minutes", "0.01",
                    "--sets", str(tmp_path / "bad.txt"), "--workdir", str(tmp_path / "run")])
    for seed in (str(2**70), "-1", str(2**32)):  # (PRNGKey: a traceback after training;
        with pytest.raises(SystemExit) as e:    # 2**32 is seed 0 again)
            bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--seed", seed,
                        "--workdir", str(tmp_path / "run")])
        assert e.value.code == 2  # argparse's error
    # nan and inf had reached train.py, which failed; 1e308 overflowed the fit mid-run
    for minutes in ("nan", "inf", "0", "1e308"):
        with pytest.raises(SystemExit, match=r"must be a number > 0 and <= 1e\+06"):
            bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--minutes",
                        minutes, "--workdir", str(tmp_path / "run")])
    # Other games' --ladder, --workdir and the extra outputs: read before training too (a
    # bad ladder was a traceback after it; an empty one a ZeroDivisionError).
    ttt = ["learn", "--config", str(CONFIGS / "tictactoe.py"), "--minutes", "0.01"]
    for ladder, why in (("random,bogus", "unknown opponent 'bogus'"),
                        ("checkpoint:latest", "checkpoint:latest need a network"),
                        ("", "no opponent")):
        with pytest.raises(SystemExit, match=f"error: --ladder: {why}"):
            bench.main([*ttt, "--ladder", ladder, "--workdir", str(tmp_path / "run")])
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit, match="afile is a file: give a new folder"):
        bench.main([*ttt, "--workdir", str(tmp_path / "afile")])
    with pytest.raises(SystemExit, match="--json .*nowhere/l.json: no folder .*nowhere"):
        bench.main([*ttt, "--workdir", str(tmp_path / "run"), "--json",
                    str(tmp_path / "nowhere" / "l.json")])
    with pytest.raises(SystemExit, match="--png .*: is a folder: give a file"):
        bench.main([*ttt, "--workdir", str(tmp_path / "run"), "--png", str(tmp_path)])
    with pytest.raises(SystemExit, match="no file or directory"):
        bench.main(["learn", "--config", str(CONFIGS / "connect4.py"), "--minutes", "0.01",
                    "--sets", str(tmp_path / "none"), "--workdir", str(tmp_path / "run")])


# A trainer stand-in, a real subprocess: it logs an iteration and (with {checkpoint}) commits
# a checkpoint, then waits without a SIGTERM handler, as a run does while it exits.
_STANDIN = """import json, pathlib, sys, time
w = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
(w / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "seconds": 0.1}) + "\\n")
{checkpoint}
time.sleep(30)
"""


@pytest.mark.parametrize("committed", [True, False])
def test_train_for_a_sigterm_as_the_run_ends(tmp_path, monkeypatch, committed):
    """bench learn's SIGTERM can reach the trainer after its own last iteration, past its
    handler: dying of that signal with a committed checkpoint is a finished run, not an
    error (it was, and lost a 16-minute A/B arm); without a checkpoint it stays one."""
    ckpt = ('(w / "checkpoints" / "5").mkdir(parents=True); '
            '(w / "checkpoints" / "5" / "_CHECKPOINT_METADATA").write_text("{}")')
    script = tmp_path / "standin.py"
    script.write_text(_STANDIN.replace("{checkpoint}", ckpt if committed else ""))
    monkeypatch.setattr(learn_bench, "TRAIN_PY", script)
    workdir = tmp_path / "run"
    if not committed:
        with pytest.raises(RuntimeError, match="status -15 and no checkpoint"):
            learn_bench.train_for("unused.py", workdir, minutes=0.01, overrides=[],
                                  log=lambda *_: None)
        return
    out = learn_bench.train_for("unused.py", workdir, minutes=0.01, overrides=[],
                                log=lambda *_: None)
    assert out["stopped_by"] == "time" and out["returncode"] == -15
    assert list(out["checkpoint_seen_s"]) == ["5"]


# A bench learn process (train_for) whose trainer is a stand-in that writes its pid and
# sleeps; argv: the stand-in, the workdir.
_BENCH = """import pathlib, sys
from az_jax.bench import learn
learn.TRAIN_PY = pathlib.Path(sys.argv[1])
learn.train_for("unused.py", pathlib.Path(sys.argv[2]), minutes=5, overrides=[],
                log=lambda *_: None)
"""


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the trainer dies with bench learn through Linux's PR_SET_PDEATHSIG")
def test_the_trainer_dies_with_a_killed_bench_learn(tmp_path):
    """The trainer runs in its own session (a Ctrl-C reaches bench learn alone), so nothing
    stopped it when bench learn was killed outright (SIGKILL, the OOM killer): it trained
    on alone until its train.minutes were up. Now the kernel sends it SIGTERM, on which
    train.py saves and stops. Real processes: bench learn's own train_for, a stand-in
    trainer."""
    script = tmp_path / "standin.py"
    script.write_text("""import os, pathlib, signal, sys, time
w = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
def saved(signum, frame):  # as train.py: save, then stop
    (w / "stopped_by").write_text(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, saved)
(w / "pid.tmp").write_text(str(os.getpid()))
os.replace(w / "pid.tmp", w / "pid")
time.sleep(60)
""")
    workdir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(learn_bench.ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    bench_proc = subprocess.Popen([sys.executable, "-c", _BENCH, str(script), str(workdir)],
                                  env=env)
    trainer = None
    try:
        deadline = time.monotonic() + 120  # imports on a loaded machine
        while not (workdir / "pid").exists():
            assert bench_proc.poll() is None, f"bench learn exited ({bench_proc.returncode})"
            assert time.monotonic() < deadline, "the stand-in trainer never started"
            time.sleep(0.05)
        trainer = int((workdir / "pid").read_text())
        assert _alive(trainer)
        bench_proc.kill()
        bench_proc.wait()
        deadline = time.monotonic() + 10
        while _alive(trainer) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(trainer), "the trainer outlived a SIGKILLed bench learn"
        assert (workdir / "stopped_by").read_text() == "SIGTERM"  # it saves on that one
    finally:
        bench_proc.kill()
        bench_proc.wait()
        if trainer is not None and _alive(trainer):  # an orphan (the bug): ours to end
            with contextlib.suppress(OSError):
                if str(script) in Path(f"/proc/{trainer}/cmdline").read_text():
                    os.kill(trainer, signal.SIGKILL)


def test_train_for_relative_paths_outside_the_repository(tmp_path, monkeypatch):
    """A relative --config and --workdir mean the same files to the trainer (which runs in
    the repository) as to bench learn, run from elsewhere: it had trained in the
    repository's <workdir>, where bench learn never saw a checkpoint, on the repository's
    <config> if there was one."""
    script = tmp_path / "standin.py"
    script.write_text("""import json, pathlib, sys
w = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
config = pathlib.Path(sys.argv[sys.argv.index("--config") + 1])
w.mkdir(parents=True, exist_ok=True)
(w / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "seconds": 0.1}) + "\\n")
(w / "config_seen.txt").write_text(config.read_text())
(w / "checkpoints" / "1").mkdir(parents=True)
""")
    monkeypatch.setattr(learn_bench, "TRAIN_PY", script)
    (tmp_path / "repo").mkdir()
    monkeypatch.setattr(learn_bench, "ROOT", tmp_path / "repo")  # where the trainer runs
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    Path("mine.py").write_text("# my config")
    out = learn_bench.train_for("mine.py", Path("run"), minutes=5, overrides=[],
                                log=lambda *_: None)
    assert out["stopped_by"] == "finished" and list(out["checkpoint_seen_s"]) == ["1"]
    assert (tmp_path / "here" / "run" / "config_seen.txt").read_text() == "# my config"
    assert not (tmp_path / "repo" / "run").exists()


def test_a_run_that_fails_before_a_checkpoint_is_not_sent_to_evaluate(tmp_path, monkeypatch,
                                                                      capsys):
    """train.py failing before its first save: the note says so, instead of pointing to
    --stage evaluate for its checkpoints (which then exits: none)."""
    script = tmp_path / "standin.py"
    script.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(learn_bench, "TRAIN_PY", script)
    with pytest.raises(SystemExit, match="status 3 and no checkpoint"):
        bench.main(["learn", "--config", str(CONFIGS / "tictactoe.py"), "--workdir",
                    str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert "failed (status 3)" in out and "(no checkpoint was saved)" in out
    assert "evaluates its checkpoints" not in out


def test_train_py_presents_the_cores_itself(tmp_path, monkeypatch):
    """`python -m az_jax.bench learn` asks for a CPU device a core for its evaluation, but
    train.py gets XLA_FLAGS as they were (it takes at most 8 devices): on 12 cores it had
    been given 12 devices, which its batches of 256 do not divide (it failed)."""
    from az_jax import parallel_setup

    script = tmp_path / "standin.py"
    script.write_text("""import json, os, pathlib, sys
w = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
(w / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "seconds": 0.1}) + "\\n")
(w / "xla_flags.txt").write_text(os.environ.get("XLA_FLAGS", "(unset)"))
(w / "checkpoints" / "1").mkdir(parents=True)
""")
    monkeypatch.setattr(learn_bench, "TRAIN_PY", script)
    monkeypatch.setattr(parallel_setup, "usable_cpu_count", lambda: 12)
    for flags in (None, "--xla_dump_to=/tmp/nowhere"):
        if flags is None:
            monkeypatch.delenv("XLA_FLAGS", raising=False)
        else:
            monkeypatch.setenv("XLA_FLAGS", flags)
        workdir = tmp_path / f"run-{flags is None}"
        bench.main(["learn", "--config", str(CONFIGS / "tictactoe.py"), "--stage", "train",
                    "--workdir", str(workdir)], host_devices=True)
        assert "device_count=12" in os.environ["XLA_FLAGS"]  # the evaluation's
        assert (workdir / "xla_flags.txt").read_text() == (flags or "(unset)")


def _tictactoe_run(workdir: Path, steps=(1,)) -> Path:
    """A train.py workdir (no train.json) with checkpoints `steps` of an untrained network,
    its metrics.jsonl and config.json."""
    import shutil

    make_run(workdir, "tictactoe")
    for step in steps[1:]:
        shutil.copytree(workdir / "checkpoints" / "1", workdir / "checkpoints" / str(step))
    (workdir / "metrics.jsonl").write_text("".join(
        json.dumps({"iteration": s, "seconds": 6.0}) + "\n" for s in steps))
    (workdir / "config.json").write_text(json.dumps({"env": {"id": "tictactoe"}}))
    return workdir


def test_evaluate_stage_takes_the_runs_game_and_writes_each_point(tmp_path, monkeypatch):
    """--stage evaluate on a tictactoe train.py run with the command line's default --config
    (connect4): the game is the run's (no --sets check; env in learn.json), its config the
    run's config.json. learn.json is written after each point, so an interrupted
    evaluation keeps what it did."""
    workdir = _tictactoe_run(tmp_path / "run", steps=(1, 2))
    cmd = ["learn", "--stage", "evaluate", "--workdir", str(workdir), "--sims", "0",
           "--ladder", "random", "--games", "2", "--sets", str(tmp_path / "no-sets")]
    calls = []

    def interrupt_at_the_second(self, agent, factory, key):
        calls.append(agent.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"random": 0.5, "mean": 0.5}

    with monkeypatch.context() as m:
        m.setattr(learn_bench.LadderEvaluator, "__call__", interrupt_at_the_second)
        with pytest.raises(KeyboardInterrupt):
            bench.main(cmd)
    partial = json.loads((workdir / "learn.json").read_text())
    assert [p["iteration"] for p in partial["points"]] == [1] and not partial["complete"]
    result = bench.main(cmd)
    # The evaluation before it is kept beside it, not overwritten point by point.
    kept = sorted(workdir.glob("learn.before-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == partial
    assert result["env"] == "tictactoe" and result["kind"] == "ladder" and result["complete"]
    assert result["config"] == str(workdir / "config.json") and result["overrides"] == []
    assert [p["iteration"] for p in result["points"]] == [1, 2]
    assert result["points"][-1]["train_minutes"] == pytest.approx(0.2)
    assert json.loads((workdir / "learn.json").read_text()) == json.loads(json.dumps(result))
    # Two 6 s iterations: minutes 0.1 and 0.2, the wall-clock axis the same (no train.json).
    assert [p["wall_minutes"] for p in result["points"]] == pytest.approx([0.1, 0.2])
    assert result["points"][0]["train_minutes"] == pytest.approx(0.1)
    train = result["train"]
    assert (train["iterations"], train["checkpoints"]) == (2, [1, 2])
    assert train["train_minutes"] == pytest.approx(0.2) == train["wall_minutes"]
    # --max-points 1: the last checkpoint alone, and the evaluation is complete.
    last = bench.main([*cmd, "--max-points", "1"])
    assert [p["iteration"] for p in last["points"]] == [2] and last["complete"]
    # --games 1 plays 2 (an even count, as --help says), as 65 plays 66; it was refused.
    one = bench.main([*cmd, "--max-points", "1", "--games", "1"])
    assert one["evaluation"] == {"ladder": "random", "games": 2}


def test_interrupted_training_keeps_its_checkpoint_and_provenance(tmp_path, monkeypatch):
    """A Ctrl-C in bench learn while it trains: the trainer gets one SIGTERM and time to save
    (not SIGKILL), train.json is written, marked interrupted, and --stage evaluate takes
    the run with its config."""
    ready = _tictactoe_run(tmp_path / "ready")
    # The trainer's stand-in: logs an iteration, and on SIGTERM saves its checkpoint (a
    # real one, copied) and exits 0, as train.py does.
    script = tmp_path / "standin.py"
    script.write_text(f"""import json, pathlib, shutil, signal, sys, time
w = pathlib.Path(sys.argv[sys.argv.index("--workdir") + 1])
def save(*_):
    shutil.copytree({str(ready / "checkpoints")!r}, w / "checkpoints")
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
(w / "metrics.jsonl").write_text(json.dumps({{"iteration": 1, "seconds": 6.0}}) + "\\n")
time.sleep(60)
""")
    monkeypatch.setattr(learn_bench, "TRAIN_PY", script)
    real_steps, fired = learn_bench._steps, []

    def ctrl_c_once_it_runs(workdir):  # what the training loop polls
        if not fired and (workdir / "metrics.jsonl").exists():
            fired.append(True)
            raise KeyboardInterrupt
        return real_steps(workdir)

    workdir = tmp_path / "run"
    tictactoe = str(CONFIGS / "tictactoe.py")
    with monkeypatch.context() as m:
        m.setattr(learn_bench, "_steps", ctrl_c_once_it_runs)
        with pytest.raises(KeyboardInterrupt):
            bench.main(["learn", "--config", tictactoe, "--minutes", "5", "--workdir",
                        str(workdir), "--config.train.learning_rate=0.002"])
    saved = json.loads((workdir / "train.json").read_text())
    trained = saved["trained"]
    assert trained["stopped_by"] == "interrupted (KeyboardInterrupt)"
    assert trained["returncode"] == 0 and list(trained["checkpoint_seen_s"]) == ["1"]
    assert saved["config"] == tictactoe
    assert saved["overrides"] == ["train.learning_rate=0.002"]
    with pytest.raises(SystemExit, match="already holds a run"):
        bench.main(["learn", "--config", tictactoe, "--workdir", str(workdir)])
    result = bench.main(["learn", "--stage", "evaluate", "--workdir", str(workdir), "--sims",
                         "0", "--ladder", "random", "--games", "2"])
    assert result["env"] == "tictactoe" and result["config"] == tictactoe
    assert result["overrides"] == ["train.learning_rate=0.002"]
    assert result["train"]["stopped_by"] == "interrupted (KeyboardInterrupt)"
    assert [p["iteration"] for p in result["points"]] == [1]
    # Minutes of training from metrics.jsonl (one 6 s iteration), of wall clock from
    # train.json: the stand-in ran for seconds.
    assert result["train"]["train_minutes"] == pytest.approx(0.1)
    assert result["train"]["wall_minutes"] == pytest.approx(trained["seconds"] / 60)
    assert result["points"][0]["wall_minutes"] == pytest.approx(
        trained["checkpoint_seen_s"]["1"] / 60)


def test_ladder_plays_the_games_asked():
    """--games is what each match plays, and what learn.json records (min(games, 256) as the
    batch had played 128 for 65 and 512 for 300)."""
    env = envs.make("tictactoe")
    for games, played in ((300, 300), (65, 66), (64, 64), (1000, 1000), (514, 516),
                          (258, 260)):  # 2 x 129 would split the colours unevenly: 2 x 130
        ladder = learn_bench.LadderEvaluator(env, "random", games=games)
        assert ladder.runner.num_games == played, games
        assert ladder.describe() == {"ladder": "random", "games": played}


def test_split_overrides_and_points():
    rest, over = config_lib.split_overrides(
        ["learn", "--config", "c.py", "--config.a.b=1", "--minutes", "2", "--config.c=x=y"])
    assert rest == ["learn", "--config", "c.py", "--minutes", "2"]
    assert over == ["a.b=1", "c=x=y"]
    minutes = learn_bench.train_minutes([{"iteration": 2, "seconds": 60.0},
                                         {"iteration": 1, "seconds": 30.0}])
    assert minutes == {1: 0.5, 2: 1.5}
    steps = list(range(1, 101))
    even = {s: s / 10 for s in steps}
    picked = learn_bench.pick_points(steps, even, 5)
    assert picked == [20, 40, 60, 80, 100]
    assert learn_bench.pick_points([3, 6], even, 5) == [3, 6]
    # As many steps as points: all of them, however unevenly they lie on the minutes axis.
    assert learn_bench.pick_points([1, 2, 3], {1: 0.1, 2: 0.2, 3: 3.0}, 3) == [1, 2, 3]


def test_ladder_evaluator_and_plot(tmp_path):
    env = envs.make("tictactoe")
    import ml_collections

    net = network.make_network(ml_collections.ConfigDict(
        {"channels": 4, "num_blocks": 1, "norm": "batch", "dtype": "float32"}), env)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    factory = players.PlayerFactory(env, net, search=object())
    ladder = learn_bench.LadderEvaluator(env, "random", games=4)
    scores = ladder(factory.greedy(variables, "iter-1"), factory, jax.random.PRNGKey(0))
    assert set(scores) == {"random", "mean"} and scores["mean"] == scores["random"]
    assert scores["random"] in (0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1)
    with pytest.raises(ValueError, match="need a network"):
        learn_bench.LadderEvaluator(env, "random,greedy", games=4)
    result = {"kind": "ladder", "env": "tictactoe", "config": "configs/tictactoe.py",
              "overrides": [], "points": [
                  {"iteration": 5, "train_minutes": 0.5, "results": {"greedy": scores}},
                  {"iteration": 9, "train_minutes": 1.0, "results": {"greedy": scores}}]}
    assert "score by checkpoint" in learn_bench.format_table(result)
    assert learn_bench.plot(result, tmp_path / "l.png").stat().st_size > 5000


def _column_4():
    """A player that always plays the fourth column (action 3), as an agent under test."""
    import jax.numpy as jnp

    def act(params, states, key):
        del params, key
        return jnp.full(states.current_player.shape, 3, jnp.int32)

    return players.Player("col4/greedy", "col4", act)


def test_solver_evaluator_rates_by_hand(tmp_path):
    """Mistake rates over positions whose column scores are made up by hand (the evaluator
    trusts them): "all" counts every position once (not the mean of the sets), a phase pools
    the sets whose names start with it, and the random player's rate is per group too."""
    sets = tmp_path / "sets"
    sets.mkdir()
    # Playing column 4: right, wrong, right (beginning); wrong, wrong (end).
    (sets / "beginning_hard.txt").write_text(
        "3 0 -1,-1,-1,0,-1,-1,-1\n1 1 1,1,1,-1,1,1,1\n12 0 0,0,0,0,-1,-1,-1\n")
    (sets / "end_easy.txt").write_text("4 1 1,1,1,-1,1,1,1\n44 0 -1,-1,-1,-1,0,-1,-1\n")
    env = envs.make("connect4")
    evaluator = learn_bench.SolverEvaluator([str(sets)], env)
    assert evaluator.describe()["positions"] == 5
    # A random player errs with the share of legal moves that lose the best outcome.
    assert evaluator.random["all"] == pytest.approx((6 + 1 + 3 + 1 + 6) / 7 / 5)
    assert evaluator.random["beginning"] == pytest.approx((6 + 1 + 3) / 7 / 3)
    assert evaluator.random["end"] == pytest.approx((1 + 6) / 7 / 2)
    assert evaluator.random["sets"]["end_easy"] == pytest.approx(0.5)
    out = evaluator(_column_4(), jax.random.PRNGKey(0))
    assert out["all"] == pytest.approx(3 / 5)  # 3 mistakes in 5 positions
    assert out["beginning"] == pytest.approx(1 / 3) and out["end"] == 1.0
    assert "middle" not in out
    assert out["sets"] == pytest.approx({"beginning_hard": 1 / 3, "end_easy": 1.0})
    assert sum(out["horizons"].values()) == 3  # every mistake once


def test_ladder_scores_from_the_agents_side():
    """The score is the agent's, not the opponent's: a rollout MCTS of 32 simulations
    beats a random player at tic-tac-toe (about 0.97; the sides swapped would give 0.03)."""
    env = envs.make("tictactoe")
    factory = players.PlayerFactory(env)
    ladder = learn_bench.LadderEvaluator(env, "random", games=16)
    scores = ladder(factory.rollout(32), factory, jax.random.PRNGKey(0))
    assert scores["random"] > 0.6 and scores["mean"] == scores["random"]


def _second_network(workdir: Path, step: int) -> None:
    """Adds checkpoint `step` to `make_run`'s connect4 run: the same config, another
    initialisation (another network)."""
    from az_jax import checkpoint as ckpt
    from az_jax import learner

    r = ckpt.restore(workdir, step=1)
    variables = network.init_variables(r.net, r.env, jax.random.PRNGKey(1))
    state = learner.init_train_state(variables, learner.make_optimizer(r.config.train, 1))
    ckpt.save(ckpt.manager(workdir), step, {"train_state": state}, {**r.meta, "iteration": step})


def test_each_point_evaluates_its_own_checkpoint(tmp_path):
    """Two checkpoints of different networks evaluated together, each with the network alone
    and with 2 simulations: each point's network-alone results are those its checkpoint gets
    evaluated alone with the network alone (--sims 0)."""
    import argparse

    workdir = make_run(tmp_path / "run", "connect4")
    _second_network(workdir, 2)
    sets = str(_small_sets(tmp_path))

    def evaluate(steps, sims):
        args = argparse.Namespace(sets=sets, sims=sims, seed=0)
        return learn_bench.evaluate_steps(workdir, steps, args, log=lambda *_: None)[0]

    both = evaluate([1, 2], sims=2)
    alone = [evaluate([1], sims=0)[0], evaluate([2], sims=0)[0]]
    assert [p["iteration"] for p in both] == [1, 2]
    assert [set(p["results"]) for p in both] == [{"greedy", "mcts:2"}] * 2
    assert alone[0]["results"] != alone[1]["results"]  # the two networks play differently
    assert [p["results"]["greedy"] for p in both] == [p["results"]["greedy"] for p in alone]
    # The search plays otherwise than the network alone somewhere (so swapped columns show).
    assert any(p["results"]["mcts:2"] != p["results"]["greedy"] for p in both)
