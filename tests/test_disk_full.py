"""A full disk during a save: a clear error, the previous checkpoint intact and restorable.

No mocks: the failing run gets a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored), so the
kernel fails its checkpoint writes with EFBIG, as a full disk fails them with ENOSPC (both
are handled alike). This works as root or not, on any POSIX filesystem. What is left after
the failure is what a kill mid-save leaves, and resuming from that is tested in
tests/test_crash_resume.py.
"""

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

from az_jax import checkpoint
from tests.tiny import tiny_args

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 16 * 1024  # bytes per file: metrics.jsonl fits, a 3x3x32x32 conv kernel (36 KiB) not


def _args(workdir, iterations):
    return [
        "--config", str(ROOT / "configs" / "tictactoe.py"), "--workdir", str(workdir),
        *tiny_args(network__channels=32, selfplay__batch_size=4, selfplay__num_plies=5,
                   train__batch_size=4, replay__min_size=1, replay__capacity=64,
                   train__num_iterations=iterations, checkpoint__every=1,
                   checkpoint__save_replay=True),
    ]


# Runs its arguments with a file size limit (argv[1] bytes): a write past it fails (EFBIG).
_LIMITED = """
import os, resource, signal, sys
from tests.tiny import tiny_args
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def _run(workdir, iterations, cache, file_limit=None):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
               JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", PYTHONUNBUFFERED="1")
    env.pop("AZ_JAX_DEBUG", None)
    limit = ["-c", _LIMITED, str(file_limit)] if file_limit else []
    return subprocess.run([sys.executable, *limit, str(ROOT / "train.py"),
                           *_args(workdir, iterations)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _restored(workdir, step=None):
    """(iteration, params as numpy) of a checkpoint (the newest by default)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = checkpoint.restore(workdir, step=step)
    return r.iteration, [np.asarray(x) for x in jax.tree.leaves(r.variables)]


@pytest.mark.slow
def test_disk_full_at_save_is_clear_and_keeps_the_last_checkpoint(tmp_path):
    run, cache = tmp_path / "run", tmp_path / "jax_cache"
    first = _run(run, 2, cache)
    assert first.returncode == 0, first.stderr[-3000:]
    params_1 = _restored(run, 1)[1]
    # Back to "stopped after iteration 1" (same config, so the compiled program is reused).
    shutil.rmtree(run / "checkpoints" / "2")

    # The next save cannot fit: a clear error, non-zero exit, checkpoint 1 untouched.
    full = _run(run, 2, cache, file_limit=LIMIT)
    out = full.stdout + full.stderr
    assert full.returncode == 2, out[-3000:]
    assert "resumed from" in full.stdout and "it    2" in full.stdout  # trained, then saved
    error = [line for line in full.stderr.splitlines() if line.startswith("error: ")]
    assert error, out[-3000:]
    assert "the disk is full: saving checkpoint 2" in error[-1]
    assert "last good checkpoint is iteration 1" in error[-1]
    assert "run the same command again to resume from iteration 1" in error[-1]
    # Only that: not the dozens of tracebacks orbax's writer threads print when writes fail.
    assert "Traceback" not in full.stderr and "never retrieved" not in full.stderr, (
        full.stderr[:3000])
    # No partial checkpoint is left, nor seen by a new manager.
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["1"]
    assert list(checkpoint.manager(run, read_only=True).all_steps()) == [1]
    it, params = _restored(run)
    assert it == 1
    for a, b in zip(params_1, params, strict=True):
        np.testing.assert_array_equal(a, b)

