"""Multi-host on localhost: two `train.py` processes joined by `jax.distributed`
(coordinator on 127.0.0.1), one CPU device each, train a few iterations and write one
checkpoint (process 0 logs)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from az_jax import checkpoint

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "known bug: both processes train, but orbax's multi-process save fails in "
    "jax_array_handlers._serialize_arrays ('input arrays must have one shard each'); "
    "remove this mark when fixed"))
def test_two_processes_train_and_write_one_checkpoint(tmp_path):
    port = _free_port()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
               PYTHONUNBUFFERED="1")
    args = [
        "--config", str(ROOT / "configs" / "tictactoe.py"), "--workdir", str(tmp_path / "run"),
        "--config.network.channels=8", "--config.network.num_blocks=1",
        "--config.search.num_simulations=4", "--config.selfplay.batch_size=8",
        "--config.selfplay.num_plies=4", "--config.train.updates_per_iteration=2",
        "--config.train.batch_size=8", "--config.replay.min_size=1",
        "--config.replay.capacity=256", "--config.train.num_iterations=2",
        "--config.checkpoint.every=2", "--config.eval.every=0", "--config.log.progress=False",
        "--coordinator", f"127.0.0.1:{port}", "--num_processes", "2",
    ]
    procs = [subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args,
                               "--process_id", str(i)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=600)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the two processes did not finish")
    assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(o[-3000:] for o in outs)
    assert "2 device(s)" in outs[0]  # one global mesh over both processes
    assert "it    2" in outs[0] and "it    2" not in outs[1]  # only process 0 logs
    steps = sorted(int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir()
                   if p.name.isdigit())
    assert steps == [2]
    assert checkpoint.restore(tmp_path / "run").iteration == 2
