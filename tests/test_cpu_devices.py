"""CPU cores as XLA devices (parallel_setup): a core starved by other work must not abort a
run. XLA kills the whole process when one device's thread reaches a collective (the
gradient all-reduce) much later than another (a 2-device training run died so while two
evaluations ran beside it); `cpu_device_flags` gives XLA a patient timeout.

The subprocess check makes a real stall: device 1 sleeps in a host callback before a psum,
with XLA's stuck warning at 1 s. With a 1 s termination timeout XLA aborts the process
(so the stall is real and XLA reads the flag); with the flags `cpu_device_flags` adds (the
timeout among them) the same program finishes.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from az_jax import parallel_setup

ROOT = Path(__file__).resolve().parents[1]
FLAG = parallel_setup.COLLECTIVE_TERMINATE_FLAG

STALL = """
import os, sys, time
import numpy as np
from az_jax import parallel_setup
os.environ["XLA_FLAGS"] = parallel_setup.cpu_device_flags(os.environ["XLA_FLAGS"], 2)
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

def slow(i):  # device 1 reaches the psum 3 s after device 0
    if int(i) == 1:
        time.sleep(3.0)
    return np.float32(i)

def f(x):
    y = jax.pure_callback(slow, jax.ShapeDtypeStruct((), jnp.float32), jax.lax.axis_index("d"))
    return jax.lax.psum(x + y, "d")

mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
print("sum", float(jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P()))(
    jnp.arange(2.0))[0]))
print("flags", os.environ["XLA_FLAGS"])
"""


def test_flags_add_the_timeout_once_and_only_where_xla_knows_it():
    flags = parallel_setup.cpu_device_flags("--xla_foo=1", 2, jaxlib_version="0.10.2")
    assert flags.split() == ["--xla_foo=1", "--xla_force_host_platform_device_count=2",
                             f"--{FLAG}={parallel_setup.COLLECTIVE_TERMINATE_SECONDS}"]
    mine = f"--{FLAG}=60"  # the user's own setting wins
    assert parallel_setup.cpu_device_flags(mine, 2, "0.10.2").count(FLAG) == 1
    # jaxlib before 0.8 rejects the flag (XLA exits on unknown flags); one device has no
    # collectives to wait for.
    assert FLAG not in parallel_setup.cpu_device_flags("", 2, jaxlib_version="0.7.2")
    assert FLAG not in parallel_setup.cpu_device_flags("", 1, jaxlib_version="0.10.2")
    assert FLAG not in parallel_setup.cpu_device_flags("", 2, jaxlib_version="nightly")


@pytest.mark.skipif(not parallel_setup._jaxlib_at_least((0, 8)), reason="jaxlib < 0.8")
def test_a_starved_device_no_longer_aborts_the_process(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text(STALL)
    warn = "--xla_cpu_collective_call_warn_stuck_timeout_seconds=1"

    def run(flags):
        env = dict(os.environ, XLA_FLAGS=flags, PYTHONPATH=str(ROOT))
        return subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, timeout=300)

    strict = run(f"{warn} --{FLAG}=1")
    assert strict.returncode != 0 and "Termination timeout" in strict.stderr, strict.stderr[-2000:]
    patient = run(warn)
    assert patient.returncode == 0, patient.stderr[-2000:]
    assert "sum 2.0" in patient.stdout
    # ... because of the helper's timeout (XLA's own, 40 s after the warning, would also
    # outlast 3 s; the strict run shows that XLA reads the flag it sets).
    assert f"--{FLAG}={parallel_setup.COLLECTIVE_TERMINATE_SECONDS}" in patient.stdout
