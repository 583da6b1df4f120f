"""Crash-proof training: SIGKILL at random moments (also during saves), corrupt checkpoints.

A run killed again and again must end with exactly the network of a run never killed:
the checkpoint holds the iteration, RNG stream, games in progress and replay contents, and
orbax only ever exposes complete checkpoints.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

from az_jax import checkpoint
from tests.tiny import tiny_args, tiny_training

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 20
KILLS = 6  # 3 as a save starts, 3 at a random moment after a complete one
ARGS = ["--config", str(ROOT / "configs" / "tictactoe.py"), *tiny_args(
    network__channels=8, search__num_simulations=4, selfplay__batch_size=16,
    selfplay__num_plies=5, train__updates_per_iteration=2, train__batch_size=32,
    replay__min_size=1, replay__capacity=512, train__num_iterations=ITERATIONS,
    checkpoint__every=1, checkpoint__keep=2, checkpoint__save_replay=True,
    # Restarts from the archive: its positions are part of the checkpoint too.
    selfplay__archive_starts=0.5, selfplay__archive_size=2)]


def _env(cache):
    env = dict(os.environ)
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=1",
               JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
               PYTHONUNBUFFERED="1")
    return env


def _start(workdir, cache, log):
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--workdir", str(workdir),
                             *ARGS], cwd=ROOT, env=_env(cache), stdout=log,
                            stderr=subprocess.STDOUT)


def _complete_steps(workdir):
    d = Path(workdir) / "checkpoints"
    if not d.exists():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def _saving(workdir) -> set[str]:
    """The temporary directories of saves under way (or left by a killed one)."""
    d = Path(workdir) / "checkpoints"
    return {p.name for p in d.iterdir() if "tmp" in p.name} if d.exists() else set()


def _params(workdir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = checkpoint.restore(workdir)
    return r.iteration, jax.tree.leaves(r.variables)


@pytest.mark.slow
def test_sigkill_anywhere_resumes_to_the_same_network(tmp_path):
    cache = tmp_path / "jax_cache"
    ref = tmp_path / "reference"
    with open(tmp_path / "ref.log", "w") as log:
        assert _start(ref, cache, log).wait(timeout=900) == 0
    rng = random.Random(0)
    run, log_path = tmp_path / "killed", tmp_path / "killed.log"
    kills, kills_in_save = 0, 0
    with open(log_path, "w") as log:
        while kills < KILLS:
            before, stale = _complete_steps(run), _saving(run)  # a killed save's leftovers
            proc = _start(run, cache, log)
            # Every other kill lands as soon as a save is under way; the others after one
            # more complete checkpoint plus a random fraction of a second (mid-iteration or
            # mid-save), so the run makes progress between kills.
            want_save, deadline = kills % 2 == 0, None
            while proc.poll() is None:
                if want_save and _saving(run) - stale:
                    break
                if not want_save and len(_complete_steps(run)) and (
                        max(_complete_steps(run)) > max(before or [0])):
                    deadline = deadline or time.time() + rng.uniform(0.0, 0.5)
                    if time.time() > deadline:
                        break
                time.sleep(0.002)
            assert proc.poll() is None, f"the run ended before kill {kills + 1}"
            in_save = bool(_saving(run) - stale)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            kills_in_save += in_save
            after = _complete_steps(run)
            assert not after or max(after) >= max(before or [0]), "a checkpoint was lost"
        assert _start(run, cache, log).wait(timeout=900) == 0, log_path.read_text()[-3000:]
    text = log_path.read_text()
    assert kills == KILLS and kills_in_save >= 1, (kills, kills_in_save)
    assert text.count("resumed from") >= kills - 2
    it_ref, ref_leaves = _params(ref)
    it_run, run_leaves = _params(run)
    assert it_ref == it_run == ITERATIONS
    for a, b in zip(ref_leaves, run_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
    # The log too: one row per iteration, as the run never killed wrote it (the iterations
    # a kill cut off after the last checkpoint were played and logged again, not twice).
    timing = {"seconds", "games_per_s", "moves_per_s"}
    rows = {}
    for name in (ref, run):
        lines = (name / "metrics.jsonl").read_text().splitlines()
        rows[name] = [{k: v for k, v in json.loads(x).items() if k not in timing}
                      for x in lines]
    assert [r["iteration"] for r in rows[run]] == list(range(1, ITERATIONS + 1))
    for got, want in zip(rows[run], rows[ref], strict=True):
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-5,
                                   err_msg=f"iteration {want['iteration']}")


def _tiny_config(iterations=2):
    from configs import tictactoe

    # 5 plies a window: every game (one a logical shard) ends within the first two, so each
    # shard holds a position and the second iteration trains (`trainer.replay_ready`).
    return tiny_training(tictactoe.get_config(), network__channels=8,  # batch norm, as by default
                         selfplay__num_plies=5, replay__min_size=1,
                         train__num_iterations=iterations, checkpoint__every=1,
                         checkpoint__save_replay=True)


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory):
    """A workdir trained 2 iterations with `_tiny_config` (tests copy it)."""
    from az_jax import trainer

    workdir = tmp_path_factory.mktemp("two_iterations")
    trainer.train_and_evaluate(_tiny_config(iterations=2), str(workdir))
    return workdir


@pytest.mark.slow
def test_best_network_keeps_its_batch_stats_and_old_checkpoints_resume(two_iterations,
                                                                        tmp_path, capsys):
    """The best network is saved with its own batch-norm statistics; a checkpoint written
    before they were saved (no `best_batch_stats`) still resumes instead of being skipped."""
    from az_jax import trainer

    shutil.copytree(two_iterations, tmp_path, dirs_exist_ok=True)
    c = _tiny_config(iterations=2)
    setup = trainer.Setup(c)
    init_key, _ = jax.random.split(jax.random.PRNGKey(c.seed))  # as the trainer splits it
    train_state, games, _ = setup.initial(init_key)
    target = {"train_state": train_state, "games": games.states,
              "best_params": train_state.params, "best_batch_stats": train_state.batch_stats,
              "pending": games.pending}
    mngr = checkpoint.manager(tmp_path)
    step, state, _, meta = checkpoint.restore_latest(mngr, target)
    assert step == 2
    # Without evaluation the best stays the initial network, with its initial statistics,
    # while training moved the current ones.
    flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])
    np.testing.assert_array_equal(flat(state["best_batch_stats"]),
                                  flat(train_state.batch_stats))
    assert not np.array_equal(flat(state["train_state"].batch_stats),
                              flat(train_state.batch_stats))
    # The plies of the games still running were saved with them.
    length = np.asarray(state["pending"].length)
    np.testing.assert_array_equal(length, np.asarray(state["games"].step_count))
    assert length.any()
    # Every ply played went to the replay, or is pending (the metrics of both iterations).
    rows = [json.loads(x) for x in (two_iterations / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["plies_pending"] == length.sum()
    assert sum(r["plies_added"] + r["plies_dropped"] for r in rows) + length.sum() == sum(
        r["moves"] for r in rows)
    # An old-layout checkpoint 3: no best_batch_stats, no pending plies.
    old = {k: state[k] for k in ("train_state", "games", "best_params")}
    checkpoint.save(mngr, 3, old, dict(meta, iteration=3))
    with pytest.warns(UserWarning, match="skipping checkpoint 3"):  # today's layout only
        assert checkpoint.restore_latest(mngr, target)[0] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "skipping checkpoint 3" would raise
        optional = ("best_batch_stats", "pending")
        assert checkpoint.restore_latest(mngr, target, optional=optional)[0] == 3
        c.train.num_iterations = 4
        capsys.readouterr()
        trainer.train_and_evaluate(c, str(tmp_path))
    assert _complete_steps(tmp_path)[-1] == 4
    # Its running games lost the plies they played before it, and the log says so.
    assert "pending plies did not restore" in capsys.readouterr().out


@pytest.mark.slow
def test_corrupt_latest_checkpoint_is_skipped_with_a_warning(two_iterations, tmp_path):
    from az_jax import trainer

    shutil.copytree(two_iterations, tmp_path, dirs_exist_ok=True)
    c = _tiny_config(iterations=2)
    assert _complete_steps(tmp_path) == [1, 2]
    # Damage checkpoint 2: remove the arrays of its state.
    state_dir = tmp_path / "checkpoints" / "2" / "state"
    for f in state_dir.rglob("*"):
        if f.is_file() and "metadata" not in f.name:
            f.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="skipping checkpoint 2"):
        restored = checkpoint.restore(tmp_path)
    assert restored.iteration == 1
    # The trainer resumes from 1 too, and redoes iteration 2.
    with pytest.warns(UserWarning, match="skipping checkpoint 2"):
        trainer.train_and_evaluate(c, str(tmp_path))
    assert checkpoint.restore(tmp_path).iteration == 2


def test_unwritable_workdir_is_a_clear_error(tmp_path):
    from az_jax import checkpoint as ck

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="cannot write checkpoints"):
        ck.manager(blocker / "run")


def test_a_checkpoint_of_another_layout_is_skipped_with_a_short_reason(tmp_path):
    """What the user reads when the code's state and a checkpoint's differ: the parts it
    lacks, or the error's first line; never orbax's dump of whole arrays."""
    mngr = checkpoint.manager(tmp_path)
    z = lambda *shape: np.zeros(shape, np.float32)
    checkpoint.save(mngr, 1, {"a": z(3), "b": z(2)}, {"iteration": 1})
    checkpoint.save(mngr, 2, {"a": z(3)}, {"iteration": 2})  # from a version without "b"
    checkpoint.save(mngr, 3, {"a": z(3), "b": {"c": z(2)}}, {"iteration": 3})  # another tree
    with pytest.warns(UserWarning) as record:
        assert checkpoint.restore_latest(mngr, {"a": z(3), "b": z(2)})[0] == 1
    skipped = [str(w.message) for w in record if "skipping" in str(w.message)]
    assert len(skipped) == 2
    assert "skipping checkpoint 3" in skipped[0] and "skipping checkpoint 2" in skipped[1]
    assert "it has no b: written by another version of az_jax" in skipped[1]
    assert "it has no" not in skipped[0]
    assert all(len(m) < 400 and "\n" not in m for m in skipped), skipped


def test_a_damaged_checkpoint_is_two_lines_in_a_front_end(tmp_path):
    """A real `python -m az_jax.play` on a run whose only checkpoint has truncated array
    files: exit status 2 with one warning line and one error line, and nothing else: not
    the tracebacks of orbax's reads still in flight, nor, at exit, one per read coroutine
    it abandoned (each with a page of TensorStore spec)."""
    from tests.tiny import make_run

    run = make_run(tmp_path / "run", "tictactoe")
    data = [f for f in (run / "checkpoints").rglob("*")
            if f.is_file() and f.parent.name == "d" and f.stat().st_size > 100]
    assert data
    for f in data:
        f.write_bytes(f.read_bytes()[:100])
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("AZ_JAX_DEBUG", None)
    for _ in range(2):  # the reads in flight differ from run to run
        proc = subprocess.run([sys.executable, "-m", "az_jax.play", "--workdir", str(run)],
                              input="quit\n", capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=300)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2, proc.stderr
        assert len(lines) == 2, proc.stderr[:3000]
        assert lines[0].startswith("warning: skipping checkpoint 1")
        assert lines[1].startswith(f"error: no checkpoint in {run / 'checkpoints'} restores")
        assert all(len(line) < 400 for line in lines), lines


def test_a_front_end_reads_the_network_alone(tmp_path):
    """`checkpoint.restore` (play, evaluation, export, a checkpoint opponent) reads the
    network's params and batch statistics, not the rest of the state: a checkpoint whose
    games in progress take 256 MB (as pending plies can on a big GPU run) restores in a
    real process whose peak memory grows by less than half of that, with the same weights
    as the file holds."""
    import jax.numpy as jnp
    import ml_collections

    import envs
    from az_jax import learner, network
    from configs import default

    config = default.get_config()
    config.env.id, config.env.kwargs = "tictactoe", ml_collections.ConfigDict()
    config.network.channels, config.network.num_blocks = 8, 1
    env = envs.make("tictactoe")
    variables = network.init_variables(network.make_network(config.network, env), env,
                                       jax.random.PRNGKey(3))
    state = learner.init_train_state(variables, learner.make_optimizer(config.train, 1))
    meta = {"config": checkpoint.config_json(config), **checkpoint.env_meta(env),
            "iteration": 1}
    big = jnp.arange(64 * 1024 * 1024, dtype=jnp.float32).reshape(64, 1024, 1024)  # 256 MB
    checkpoint.save(checkpoint.manager(tmp_path), 1, {"train_state": state, "games": big}, meta)
    del big
    grew_mb, read = _peak_growth(tmp_path, "jnp.zeros(1).block_until_ready()",
                                 "checkpoint.restore(sys.argv[1]).variables")
    assert grew_mb < 128, f"restoring the network grew the process by {grew_mb} MB"
    saved = jax.tree.leaves({"params": state.params, "batch_stats": state.batch_stats})
    assert len(read) == len(saved) > 2
    for got, x in zip(read, saved, strict=True):
        np.testing.assert_array_equal(got, np.asarray(x))


def _peak_growth(tmp_path, setup: str, restore: str):
    """Runs `setup`, then `restore` (an expression of what was read, a pytree; `sys.argv[1]`
    is `tmp_path`) in a new process: by how many MB its peak memory (VmHWM; ru_maxrss
    would keep pytest's) grew in `restore`, and the leaves read."""
    probe = (
        "import re, sys, jax, jax.numpy as jnp, numpy as np\n"
        "from az_jax import checkpoint\n"
        "peak = lambda: int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read())[1])\n"
        f"{setup}\n"
        "before = peak()\n"
        f"read = jax.block_until_ready({restore})\n"
        "grew = (peak() - before) // 1024\n"
        "np.savez(sys.argv[2], *map(np.asarray, jax.tree.leaves(read)))\n"
        "print(grew)\n")
    out = tmp_path / "read.npz"
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path), str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as read:
        leaves = [read[f"arr_{i}"] for i in range(len(read.files))]
    return int(proc.stdout.split()[-1]), leaves


def test_a_resume_leaves_the_state_it_no_longer_keeps_unread(tmp_path):
    """`restore_latest` (the trainer's resume) reads only the keys of its target: saved
    pending plies of 256 MB that the run no longer keeps cost a real process less than half
    of that at its peak (orbax placeholders; reading them and dropping them cost it all), and
    the keys it keeps come back whole. The files are what the standard handler always wrote:
    the checkpoint's metadata names it for the state."""
    import jax.numpy as jnp

    kept = {"train_state": {"w": jnp.arange(1000, dtype=jnp.float32)},
            "games": {"board": jnp.ones((4, 9), jnp.int8), "turn": jnp.int32(3)}}
    big = jnp.arange(64 * 1024 * 1024, dtype=jnp.float32).reshape(64, 1024, 1024)  # 256 MB
    pending = {"plies": big, "count": jnp.arange(64, dtype=jnp.int32)}
    checkpoint.save(checkpoint.manager(tmp_path), 1, dict(kept, pending=pending),
                    {"config": {}, "iteration": 1})
    del big, pending
    step_meta = json.loads((tmp_path / checkpoint.SUBDIR / "1" / "_CHECKPOINT_METADATA")
                           .read_text())
    assert step_meta["item_handlers"]["state"].endswith(".StandardCheckpointHandler")
    setup = ("target = {'train_state': {'w': jnp.zeros(1000)},\n"
             "          'games': {'board': jnp.zeros((4, 9), jnp.int8), 'turn': jnp.int32(0)}}\n"
             "mngr = checkpoint.manager(sys.argv[1])\n"
             "jax.block_until_ready(target)")
    # (step, the state, the replay, the meta's iteration): 1, the kept keys, None, 1.
    restore = "(lambda r: (r[0], r[1], r[2], r[3]['iteration']))(" \
        "checkpoint.restore_latest(mngr, target))"
    grew_mb, read = _peak_growth(tmp_path, setup, restore)
    assert grew_mb < 128, f"resuming grew the process by {grew_mb} MB"
    saved = jax.tree.leaves(kept)
    assert [int(read[0]), int(read[-1])] == [1, 1]  # the step and the meta's iteration
    assert len(read) == len(saved) + 2  # the state's leaves, no replay (None), no pending
    for got, x in zip(read[1:-1], saved, strict=True):
        np.testing.assert_array_equal(got, np.asarray(x))
