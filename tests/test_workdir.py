"""A run is never overwritten: `train.py` on a workdir holding another run stops before
writing anything, with one line; `checkpoint.restart=True` moves the old run aside."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from az_jax import workdir as runs
from tests.tiny import tiny_args

ROOT = Path(__file__).resolve().parents[1]
TINY = tiny_args(replay__min_size=1, checkpoint__every=1, checkpoint__save_replay=True)
TTT = ["--config", str(ROOT / "configs" / "tictactoe.py"), *TINY]


def _config(**fields) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict({
        "env": {"id": "connect4", "kwargs": {}}, "network": {"channels": 8, "dtype": "float32"},
        "train": {"num_iterations": 10, "learning_rate": 0.001}, "selfplay": {"num_plies": 8},
        "eval": {"every": 5}, "checkpoint": {"every": 1, "restart": False}})
    for name, value in fields.items():
        group, field = name.split("__")
        c[group][field] = value
    return c


def test_differences_name_each_field_and_allow_only_the_harmless_ones():
    saved = json.loads(_config().to_json())
    assert runs.differences(saved, _config()) == []
    # How long to train, evaluation and checkpoint cadence may change on resume.
    assert runs.differences(saved, _config(train__num_iterations=99, eval__every=1,
                                           checkpoint__every=7, checkpoint__restart=True)) == []
    diff = runs.differences(saved, _config(network__channels=4, env__id="tictactoe",
                                           train__learning_rate=0.01))
    assert diff == ["env.id (run: 'connect4', command: 'tictactoe')",
                    "network.channels (run: 8, command: 4)",
                    "train.learning_rate (run: 0.001, command: 0.01)"]
    # Game parameters are compared field by field, also when the run has one the command
    # lacks.
    gomoku = json.loads(_config(env__kwargs={"size": 15}).to_json())
    assert runs.differences(gomoku, _config(env__kwargs={"size": 9})) == [
        "env.kwargs.size (run: 15, command: 9)"]
    assert runs.differences(gomoku, _config()) == [
        "env.kwargs.size (run: 15, command: no such field)"]
    # A field the run predates takes the command's value.
    older = json.loads(_config().to_json())
    del older["network"]["dtype"]
    assert runs.differences(older, _config(network__dtype="bfloat16")) == []
    # ... except a field whose arrays every older run had in one form: the value head. A
    # run saved before it existed had the tanh head, whatever today's default is.
    assert "value_head" not in older["network"]
    assert runs.differences(older, _config(network__value_head="tanh")) == []
    assert runs.differences(older, _config(network__value_head="wdl")) == [
        "network.value_head (run: 'tanh', command: 'wdl')"]
    # And how it played: a run saved before random opening plies existed played none.
    assert "random_plies" not in older["selfplay"]
    assert runs.differences(older, _config(selfplay__random_plies=0)) == []
    assert runs.differences(older, _config(selfplay__random_plies=4)) == [
        "selfplay.random_plies (run: 0, command: 4)"]
    # The value head's width and the pooling bias: an older run had one plane and none.
    assert runs.differences(older, _config(network__value_channels=1,
                                           network__global_pool=False)) == []
    assert runs.differences(older, _config(network__value_channels=32,
                                           network__global_pool=True)) == [
        "network.value_channels (run: 1, command: 32)",
        "network.global_pool (run: False, command: True)"]
    # Connect4's observation planes likewise: an older run had none of the threat planes.
    assert runs.differences(older, _config(env__kwargs={"threats": False})) == []
    assert runs.differences(older, _config(env__kwargs={"threats": True})) == [
        "env.kwargs.threats (run: False, command: True)"]


def test_aside_path_never_reuses_a_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "run.old-1").mkdir()
    assert runs.aside_path(run) == tmp_path / "run.old-2"
    (run / "x").write_text("kept")
    moved = runs.move_aside(run)
    assert moved == tmp_path / "run.old-2" and (moved / "x").read_text() == "kept"
    assert not run.exists()


def _train(workdir, *args, cache):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
               JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    env.pop("AZ_JAX_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "--workdir", str(workdir),
                           *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def _snapshot(directory: Path) -> dict:
    """Every file under `directory` with its content hash and modification time."""
    return {str(p.relative_to(directory)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                            p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _refused(result, *needles):
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Event loop is closed" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    for needle in ("Nothing was written", "--workdir", "checkpoint.restart=True", *needles):
        assert needle in errors[0], errors[0]
    return errors[0]


@pytest.mark.slow
def test_a_changed_command_never_overwrites_the_run(tmp_path):
    cache, run = tmp_path / "cache", tmp_path / "run"
    first = _train(run, *TTT, cache=cache)
    assert first.returncode == 0, first.stderr[-3000:]
    before = _snapshot(run)
    assert "checkpoints/1/meta/metadata" in before

    # Another network size, then another game: refused, field by field; nothing written.
    line = _refused(_train(run, *TTT, "--config.network.channels=8", cache=cache),
                    "network.channels (run: 4, command: 8)")
    assert "env.id" not in line
    assert "repeat its command, or add --config.network.channels=4 (" in line
    _refused(_train(run, "--config", str(ROOT / "configs" / "connect4.py"), *TINY,
                    cache=cache), "env.id (run: 'tictactoe', command: 'connect4')")
    assert _snapshot(run) == before

    # Checkpoints that do not restore (here: damaged arrays; also what code that changed
    # the checkpoint's layout gives) are not replaced by a new run either.
    for f in (run / "checkpoints" / "1" / "state").rglob("*"):
        if f.is_file() and "metadata" not in f.name:
            f.write_bytes(b"garbage")
    damaged = _snapshot(run)
    _refused(_train(run, *TTT, cache=cache), "no checkpoint", "restores")
    assert _snapshot(run) == damaged

    # restart=True moves that run aside, untouched, and starts a new one; the same command
    # then resumes the new run (a matching run is never moved), with a longer schedule.
    moved = _train(run, *TTT, "--config.checkpoint.restart=True", cache=cache)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert f"moved the run in {run} aside to {run}.old-1" in moved.stdout
    assert _snapshot(tmp_path / "run.old-1") == damaged
    again = _train(run, *TTT, "--config.checkpoint.restart=True",
                   "--config.train.num_iterations=2", cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stdout and "moved" not in again.stdout
    assert not (tmp_path / "run.old-2").exists()
    # Checkpoints of another version of the game (its arrays the same shapes): refused,
    # and restart=True moves that run aside too.
    path = run / "checkpoints" / "2" / "meta" / "metadata"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(dict(meta, env_version=meta["env_version"] + "-old")))
    other = _snapshot(run)
    _refused(_train(run, *TTT, "--config.train.num_iterations=2", cache=cache),
             "-old, this code has")
    assert _snapshot(run) == other
    moved = _train(run, *TTT, "--config.train.num_iterations=1",
                   "--config.checkpoint.restart=True", cache=cache)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert (f"moved the run in {run} aside to {run}.old-2 (its checkpoints are of another "
            "version of the game)") in moved.stdout
    assert _snapshot(tmp_path / "run.old-2") == other
    (run / "config.json").unlink()  # lost: a resume writes it again (the errors name it)
    assert _train(run, *TTT, "--config.train.num_iterations=2", cache=cache).returncode == 0
    assert json.loads((run / "config.json").read_text())["env"]["id"] == "tictactoe"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in lines] == [1, 2]


def _files(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_never_overwrites_a_run_or_other_files(tmp_path, capsys):
    """`python -m az_jax.checkpoint export` writes only into a new or empty folder, or, with
    --replace, over an exported model (keeping its other files); a training run, the run
    itself and other files are refused with one line and left byte for byte."""
    from az_jax import checkpoint
    from tests.tiny import make_run

    run, other = make_run(tmp_path / "run", "tictactoe"), make_run(tmp_path / "other", "connect4")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    before = {p: _files(p) for p in (run, other, tmp_path / "notes")}

    def export(out, *flags, source=run):
        code = checkpoint._main(["export", "--workdir", str(source), "--out", str(out), *flags])
        return code, capsys.readouterr().out

    for out, want in ((run, "is the run itself"), (other, "holds a training run"),
                      (tmp_path / "notes", "holds other files"), ("", "--out is empty"),
                      (tmp_path / "file", "is a file")):
        code, printed = export(out, "--replace")
        assert code == 2 and printed.startswith("error: ") and want in printed, printed
        assert printed.count("\n") == 1
    assert {p: _files(p) for p in before} == before
    assert (tmp_path / "file").read_text() == "mine"

    model = tmp_path / "models" / "m"
    assert export(model) == (0, f"exported to {model / checkpoint.SUBDIR / '1'}\n")
    assert checkpoint.restore(model).env.id == "tictactoe"
    (model / "train.log").write_text("how it was trained")
    shipped = _files(model)
    code, printed = export(model, source=other)
    assert code == 2 and "already holds an exported model" in printed and "--replace" in printed
    assert _files(model) == shipped
    assert export(model, "--replace", source=other)[0] == 0
    assert checkpoint.restore(model).env.id == "connect4"
    assert checkpoint.load_weights(model / checkpoint.WEIGHTS).env.id == "connect4"
    assert (model / "train.log").read_text() == "how it was trained"
    assert sorted(p.name for p in model.iterdir()) == [checkpoint.SUBDIR, "train.log",
                                                       checkpoint.WEIGHTS]
    assert sorted(p.name for p in model.parent.iterdir()) == ["m"]  # no staging left


def test_weights_without_their_metadata_are_unreadable_not_a_key_error(tmp_path):
    """load_weights' documented ValueError (export again), not a KeyError traceback."""
    import numpy as np

    from az_jax import checkpoint

    path = tmp_path / checkpoint.WEIGHTS
    checkpoint.save_weights(path, {"params": {"w": np.zeros(2, np.float32)}}, {"iteration": 1})
    with pytest.raises(ValueError, match="cannot read the weights in .*: it lacks config, "
                                         "env_id; export the model again"):
        checkpoint.load_weights(path)


def test_a_workdir_inside_a_runs_checkpoints_is_refused(tmp_path):
    """`train.py` never nests a run in another run's checkpoint folder, and the front ends
    say which flag a checkpoint folder or a file given as --workdir needs."""
    from az_jax import checkpoint
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "tictactoe")
    (run / "config.json").write_text("{}")
    for inside in (run / "checkpoints", run / "checkpoints" / "1", run / "checkpoints" / "x"):
        with pytest.raises(ValueError, match=rf"inside the checkpoint folder of the run in "
                                             rf"{run}.*--workdir {run}"):
            runs.check(_config(), inside)
    runs.check(_config(), tmp_path / "elsewhere")  # a new run: nothing to say
    with pytest.raises(ValueError, match=r"is one checkpoint, not a workdir: pass it as "
                                         r"--checkpoint"):
        checkpoint.load(workdir=str(run / "checkpoints" / "1"))
    with pytest.raises(ValueError, match=rf"checkpoint folder, not its workdir: pass "
                                         rf"--workdir {run}"):
        checkpoint.load(workdir=str(run / "checkpoints"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        checkpoint.load(workdir=str(tmp_path / "file"))
    assert checkpoint.load(checkpoint=str(run / "checkpoints" / "1")).iteration == 1


def _default(env_id="connect4") -> ml_collections.ConfigDict:
    from configs import default

    c = default.get_config()
    c.env.id = env_id
    return c


def _set(c: ml_collections.ConfigDict, field: str, value) -> ml_collections.ConfigDict:
    group, name = field.split(".")
    c[group][name] = value
    return c


# The README's "These may change on resume" list, by hand, each with a value other than the
# default config's.
RESUME_MAY_CHANGE = [
    ("train.num_iterations", 7), ("train.minutes", 3.0), ("train.init_from", "/elsewhere"),
    ("eval.every", 3), ("eval.opponents", "random"), ("eval.num_games", 4),
    ("log.progress", False), ("log.tensorboard", True),
    ("checkpoint.every", 2), ("checkpoint.keep", 9), ("checkpoint.save_replay", False),
    ("checkpoint.restart", True),
    ("search.eval_tactics", "none"), ("search.eval_sims_per_considered", 4),
    ("search.eval_value_scale", 0.5), ("search.threat_depth", 2), ("search.threat_width", 4),
]
# Fields that decide how the run plays or its arrays: a change is another run.
RESUME_REFUSED = [("search.tactics", "threats"), ("search.num_simulations", 8),
                  ("selfplay.random_plies", 2), ("network.channels", 16)]


@pytest.mark.parametrize("field, value", RESUME_MAY_CHANGE + RESUME_REFUSED,
                         ids=[f for f, _ in RESUME_MAY_CHANGE + RESUME_REFUSED])
def test_each_field_the_readme_lets_change_on_resume_and_no_other(field, value):
    saved = json.loads(_default().to_json())
    command = _set(_default(), field, value)
    run_value = saved[field.split(".")[0]][field.split(".")[1]]
    if (field, value) in RESUME_MAY_CHANGE:
        assert runs.differences(saved, command) == []
    else:
        assert runs.differences(saved, command) == [
            f"{field} (run: {run_value!r}, command: {value!r})"]


@pytest.mark.parametrize("tactics", ["none", "threats"])
def test_threat_depth_may_change_only_where_self_play_does_not_read_it(tactics):
    """`search.threat_depth` and `threat_width` rule evaluation's root, and self-play's
    too where `search.tactics` is "threats": only then is a change another run."""
    saved = json.loads(_set(_default(), "search.tactics", tactics).to_json())
    for field, value in (("search.threat_depth", 2), ("search.threat_width", 4)):
        command = _set(_set(_default(), "search.tactics", tactics), field, value)
        run_value = saved["search"][field.split(".")[1]]
        assert runs.differences(saved, command) == (
            [] if tactics == "none" else [f"{field} (run: {run_value!r}, command: {value!r})"])


def test_a_run_saved_before_archive_starts_played_without_them():
    saved = json.loads(_default().to_json())
    del saved["selfplay"]["archive_starts"]
    assert runs.differences(saved, _set(_default(), "selfplay.archive_starts", 0.0)) == []
    assert runs.differences(saved, _set(_default(), "selfplay.archive_starts", 0.5)) == [
        "selfplay.archive_starts (run: 0.0, command: 0.5)"]


def test_a_saved_value_head_is_the_runs_own_not_the_older_runs_default():
    wdl = json.loads(_config(network__value_head="wdl").to_json())
    assert wdl["network"]["value_head"] == "wdl"
    assert runs.differences(wdl, _config(network__value_head="wdl")) == []
    assert runs.differences(wdl, _config(network__value_head="tanh")) == [
        "network.value_head (run: 'wdl', command: 'tanh')"]
    older = json.loads(_config().to_json())
    assert "value_head" not in older["network"]  # saved before the field: the tanh head
    assert runs.differences(older, _config(network__value_head="wdl")) == [
        "network.value_head (run: 'tanh', command: 'wdl')"]


def test_aside_path_skips_every_taken_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "x").write_text("kept")
    for n in (1, 2):
        (tmp_path / f"run.old-{n}").mkdir()
        (tmp_path / f"run.old-{n}" / "y").write_text(f"old {n}")
    assert runs.aside_path(run) == tmp_path / "run.old-3"
    assert runs.move_aside(run) == tmp_path / "run.old-3"
    assert (tmp_path / "run.old-3" / "x").read_text() == "kept" and not run.exists()
    for n in (1, 2):  # untouched, nothing nested in them
        assert sorted(p.name for p in (tmp_path / f"run.old-{n}").iterdir()) == ["y"]


def test_without_config_json_the_checkpoint_decides(tmp_path):
    """make_run's run: connect4, 8 channels, one block, gumbel, 4 simulations."""
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "connect4")
    same = _default()
    same.network.channels, same.network.num_blocks, same.search.num_simulations = 8, 1, 4
    (run / "config.json").write_text(same.to_json())
    (run / "config.json").unlink()  # lost
    runs.check(same, run)
    with pytest.raises(runs.RunMismatch, match=r"network\.channels \(run: 8, command: 16\)"):
        runs.check(_set(ml_collections.ConfigDict(same.to_dict()), "network.channels", 16), run)
    assert not (run / "config.json").exists()


@pytest.mark.parametrize("stage", ["old aside", "clean-up"])
def test_an_export_killed_while_replacing_is_settled_by_the_next(tmp_path, stage):
    """A `--replace` export swaps two names in: killed after setting the old checkpoint
    folder aside and before its new one arrived, the model had no checkpoint (and the
    next export refused the folder as "other files"); killed while removing the old
    folder once all was in, `.checkpoints.replaced` stayed and the next export failed on
    it (a folder cannot be renamed over a non-empty one). The next export settles
    either, then replaces as asked."""
    from az_jax import checkpoint
    from tests.tiny import make_run

    run, other = make_run(tmp_path / "run", "tictactoe"), make_run(tmp_path / "other", "connect4")
    model = tmp_path / "m"
    checkpoint.export_model(run, model)
    if stage == "old aside":
        os.replace(model / checkpoint.SUBDIR, model / f".{checkpoint.SUBDIR}.replaced")
    else:
        shutil.copytree(model / checkpoint.SUBDIR, model / f".{checkpoint.SUBDIR}.replaced")
    checkpoint.export_model(other, model, replace=True)
    assert sorted(p.name for p in model.iterdir()) == [checkpoint.SUBDIR, checkpoint.WEIGHTS]
    assert checkpoint.restore(model).env.id == "connect4"
    assert checkpoint.load_weights(model / checkpoint.WEIGHTS).env.id == "connect4"


def test_export_into_an_existing_empty_folder(tmp_path, capsys):
    from az_jax import checkpoint
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "tictactoe")
    out = tmp_path / "empty"
    out.mkdir()
    code = checkpoint._main(["export", "--workdir", str(run), "--out", str(out)])
    assert (code, capsys.readouterr().out) == (0, f"exported to {out / checkpoint.SUBDIR / '1'}\n")
    assert sorted(p.name for p in out.iterdir()) == [checkpoint.SUBDIR, checkpoint.WEIGHTS]
    assert checkpoint.restore(out).env.id == "tictactoe"


def test_a_checkpoint_of_another_env_version_is_refused(tmp_path):
    import envs
    from az_jax import checkpoint
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "tictactoe")
    path = run / "checkpoints" / "1" / "meta" / "metadata"
    meta = json.loads(path.read_text())
    assert meta["env_version"] == envs.make("tictactoe").version
    checkpoint.restore(run, env=envs.make("tictactoe"))  # as saved: restores
    meta["env_version"] = meta["env_version"] + "-old"
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"version v\w*-old, this code has"):
        checkpoint.restore(run, env=envs.make("tictactoe"))
    with pytest.raises(ValueError, match=r"version v\w*-old, this code has"):
        checkpoint.restore(run)
    # What to do about it, too.
    with pytest.raises(ValueError, match="the version of az_jax that made it, or train a new"):
        checkpoint.restore(run)


def test_check_env_fills_parameters_a_checkpoint_predates_with_their_defaults():
    import envs
    from az_jax import checkpoint

    c4 = envs.make("connect4", threats=False)
    checkpoint.check_env({"env_id": "connect4", "env_params": {}, "env_version": c4.version},
                         c4, "x")
    # Gomoku names each parameter: one saved before `rule` existed played freestyle.
    gomoku = envs.make("gomoku")
    assert dict(gomoku.params) == {"size": 15, "rule": "freestyle"}
    for params in ({}, {"size": 15}):
        checkpoint.check_env({"env_id": "gomoku", "env_params": params,
                              "env_version": gomoku.version}, gomoku, "x")
    with pytest.raises(ValueError, match="is for gomoku"):
        checkpoint.check_env({"env_id": "gomoku", "env_params": {"size": 9},
                              "env_version": gomoku.version}, gomoku, "x")


def test_a_workdir_named_dot_is_moved_aside_beside_its_folder(tmp_path, monkeypatch):
    """`--workdir .` on a folder holding another run: the mismatch message, naming the
    folder's own `.old-N` (`Path(".")` has no name to add `.old-N` to)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(_config().to_json())
    monkeypatch.chdir(run)
    assert runs.aside_path(".") == tmp_path / "run.old-1"
    assert str(tmp_path / "run.old-1") in runs.choices(".")
    with pytest.raises(runs.RunMismatch, match=rf"network\.channels \(run: 8, command: 4\).*"
                                               rf"{tmp_path / 'run.old-1'}"):
        runs.check(_config(network__channels=4), ".")
    assert runs.move_aside(".") == tmp_path / "run.old-1"
    assert not run.exists() and (tmp_path / "run.old-1" / "config.json").is_file()


def test_a_checkpoint_whose_metadata_lacks_the_config_is_skipped(tmp_path):
    """Metadata without "config" (a hand edit, other code) is a damaged checkpoint: skipped
    like one whose metadata does not read, not a KeyError."""
    from az_jax import checkpoint
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "tictactoe")
    path = run / "checkpoints" / "1" / "meta" / "metadata"
    meta = json.loads(path.read_text())
    del meta["config"]
    path.write_text(json.dumps(meta))
    assert runs.saved_config(run) is None  # no checkpoint decides, and no config.json
    (run / "config.json").write_text(_config().to_json())
    assert runs.saved_config(run) == (json.loads(_config().to_json()), "config.json")
    with pytest.warns(UserWarning, match=r"skipping checkpoint 1: .*lacks config"):
        with pytest.raises(FileNotFoundError, match=r"restores: ValueError: .*lacks config"):
            checkpoint.restore(run)


@pytest.mark.parametrize("text", ["not json", "[1, 2]"], ids=["unreadable", "not-a-dict"])
def test_a_config_json_that_does_not_read_is_a_mismatch_and_stays(tmp_path, text):
    """Without a checkpoint, config.json decides: one that does not read (or is no JSON
    object) is another run's (or the user's) file, never "no run" to write over."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(text)
    with pytest.raises(runs.RunMismatch, match=r"config\.json (does not read|is not a JSON "
                                               r"object).*--workdir.*checkpoint\.restart=True"):
        runs.check(_config(), run)
    assert (run / "config.json").read_text() == text


def test_restart_on_dot_moves_a_bad_config_aside_and_a_resume_keeps_the_saved_replay(
        tmp_path, monkeypatch):
    """Two tiny runs. `restart=True` with `--workdir .` on a folder whose config.json does
    not read moves the folder aside untouched and writes the new run where it was (not
    into the moved folder, the process's working directory now). Resumed with
    `save_replay=False`, the run still restores the replay its checkpoint holds."""
    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("not json")
    # 5 plies: games end in the first iteration, so its replay holds positions.
    c = tiny_training(tictactoe.get_config(), selfplay__num_plies=5, replay__min_size=1,
                      checkpoint__every=1, checkpoint__save_replay=True,
                      checkpoint__restart=True)
    monkeypatch.chdir(run)
    trainer.train_and_evaluate(c, ".")
    assert sorted(p.name for p in (tmp_path / "run.old-1").iterdir()) == ["config.json"]
    assert (tmp_path / "run.old-1" / "config.json").read_text() == "not json"
    assert json.loads((run / "config.json").read_text())["env"]["id"] == "tictactoe"
    assert not list(run.glob(".config.json*"))  # write_config's temporary file: gone
    probe = runs.Lock()  # the run's locks, on both folders, dropped on return
    for folder in (run, tmp_path / "run.old-1"):
        probe.take(folder)  # (raises where a lock is still held)
    probe.release()

    c.train.num_iterations, c.checkpoint.save_replay = 2, False
    trainer.train_and_evaluate(c, str(run))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2] and rows[0]["buffer_size"] > 0
    assert rows[1]["buffer_size"] == rows[0]["buffer_size"] + rows[1]["plies_added"]


def test_tensorboard_without_its_package_is_a_value_error_before_anything_is_written(
        tmp_path, monkeypatch):
    # Was an ImportError (a traceback from train.py) after the compile, with config.json
    # and the checkpoint folder already written.
    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # its import raises ImportError
    c = tiny_training(tictactoe.get_config(), log__tensorboard=True)
    with pytest.raises(ValueError, match=r"log.tensorboard=True needs tensorboardX"):
        trainer.train_and_evaluate(c, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_bad_init_from_leaves_the_run_restart_would_move_aside_in_place(tmp_path):
    # The run was moved aside to run.old-1 before train.init_from was read and refused.
    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import make_run, tiny_training

    run = make_run(tmp_path / "run", "tictactoe")  # another config than the command's
    before = _snapshot(run)
    c = tiny_training(tictactoe.get_config(), checkpoint__restart=True,
                      train__init_from="model:nope")
    with pytest.raises(ValueError, match="train.init_from='model:nope'"):
        trainer.train_and_evaluate(c, str(run))
    assert _snapshot(run) == before and not (tmp_path / "run.old-1").exists()


def test_a_bad_init_from_leaves_a_run_that_does_not_restore_in_place(tmp_path):
    # The same command, but the run's checkpoint does not restore (it has no games): with
    # checkpoint.restart=True it was moved aside before train.init_from was read.
    import ml_collections

    from az_jax import trainer
    from configs import default
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "tictactoe")
    before = _snapshot(run)
    c = default.get_config()  # make_run's config
    c.env.id, c.search.policy = "tictactoe", "gumbel"
    c.env.kwargs = ml_collections.ConfigDict({})
    c.network.channels, c.network.num_blocks, c.network.head = 8, 1, "dense"
    c.search.num_simulations = 4
    c.checkpoint.restart, c.train.init_from = True, "model:nope"
    with pytest.raises(ValueError, match="train.init_from='model:nope'"):
        trainer.train_and_evaluate(c, str(run))
    assert _snapshot(run) == before and not (tmp_path / "run.old-1").exists()


def test_a_folder_another_process_trains_is_refused(tmp_path):
    """Two `train.py` on one folder (the same command started twice) would delete each
    other's saves under way and log every iteration twice: the second stops with one line
    while the first holds the folder's lock (a real flock, here from a descriptor of this
    process, as another process's would be). Released: see the restart test above."""
    import fcntl

    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import make_run, tiny_training

    run = make_run(tmp_path / "run", "tictactoe")
    before = _snapshot(run)
    c = tiny_training(tictactoe.get_config(), checkpoint__restart=True)
    other = os.open(run, os.O_RDONLY)  # "the first process"
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with pytest.raises(ValueError, match=r"another process is training the run in .*run "
                                         r"right now.*Nothing was written.*--workdir"):
        trainer.train_and_evaluate(c, str(run))  # restart=True moves nothing either
    assert _snapshot(run) == before and not (tmp_path / "run.old-1").exists()
    os.close(other)


def test_a_lock_moves_with_its_folder_and_the_new_folder_is_locked_anew(tmp_path):
    """`Lock`: one holder per folder; taking a folder it holds again is no conflict; the
    lock is on the folder, so a run moved aside stays locked and a new folder at the old
    path is free until taken."""
    run = tmp_path / "run"
    run.mkdir()
    first, second = runs.Lock(), runs.Lock()
    first.take(run)
    first.take(run)  # held already: no error
    with pytest.raises(ValueError, match="another process is training"):
        second.take(run)
    moved = runs.move_aside(run)
    run.mkdir()
    second.take(run)  # the new folder: free
    with pytest.raises(ValueError, match="another process is training"):
        second.take(moved)  # the moved run: still the first's
    first.release()
    second.take(moved)
    second.release()
    first.take(tmp_path / "none")  # no folder yet: nothing to lock, no error


def test_a_run_that_cannot_be_renamed_is_not_copied_aside(tmp_path, monkeypatch):
    """A mount point (EBUSY) or another filesystem (EXDEV) refuses the rename: before,
    the whole run was copied beside it (replays and all, enough to fill a disk) and the
    mount's contents deleted. Now one clear error, and nothing moves."""
    import errno

    run = tmp_path / "run"
    run.mkdir()
    (run / "x").write_text("kept")

    def refuse(src, dst):
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src))

    monkeypatch.setattr(runs.os, "rename", refuse)
    with pytest.raises(ValueError, match=r"cannot move the run in .*run aside to .*run\.old-1 "
                                         r"\(Device or resource busy; a mount point.*Nothing "
                                         r"was moved.*--workdir"):
        runs.move_aside(run)
    assert (run / "x").read_text() == "kept" and not (tmp_path / "run.old-1").exists()


def test_a_resume_skips_a_checkpoint_whose_metadata_lacks_its_iteration_or_game(tmp_path):
    """The newest checkpoint's metadata without its iteration and game (a hand edit, other
    code) is damaged like one that does not read: `restore_latest` (the trainer's resume)
    skips it with a warning and takes the one before (was a KeyError traceback from
    train.py)."""
    import jax

    from az_jax import checkpoint as ckpt
    from tests.tiny import make_run

    state = ckpt.restore(make_run(tmp_path / "made", "tictactoe"))
    target = {"train_state": jax.tree.map(np.asarray, dict(state.variables))}
    mngr = ckpt.manager(tmp_path / "run")
    ckpt.save(mngr, 1, target, state.meta)
    ckpt.save(mngr, 2, target, {"config": state.meta["config"]})  # no iteration, no game
    with pytest.warns(UserWarning, match=r"skipping checkpoint 2: .*lacks iteration, env_id"):
        step, _, _, meta = ckpt.restore_latest(mngr, target, required=ckpt.META_KEYS)
    assert step == 1 and meta["iteration"] == 1 and meta["env_id"] == "tictactoe"
