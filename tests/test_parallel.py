"""`parallel.run_on_devices`: independent jobs, one a device at a time (plain Python jobs:
the pool does not care what a device is; the matches on real devices are in
tests/test_multidevice.py); and `parallel_setup`'s process set-up: CPU devices, launchers."""

import os
import threading
import time
from pathlib import Path

import pytest

from az_jax import parallel


def test_jobs_run_one_a_device_and_results_keep_the_order_of_the_jobs():
    running, most, lock = [], [0], threading.Lock()

    def job(i, wait):
        def run(device):
            with lock:
                assert device not in running  # one job a device at a time
                running.append(device)
                most[0] = max(most[0], len(running))
            time.sleep(wait)
            with lock:
                running.remove(device)
            return i, device
        return run

    # The first job is the slowest: the others finish before it, on the other devices.
    waits = [0.3, 0.01, 0.01, 0.01, 0.01]
    out = parallel.run_on_devices([job(i, w) for i, w in enumerate(waits)], ["d0", "d1", "d2"])
    assert [i for i, _ in out] == [0, 1, 2, 3, 4]
    assert out[0][1] == "d0" and {d for _, d in out[1:]} <= {"d1", "d2"}
    assert most[0] >= 2  # ran at the same time


def test_one_device_runs_the_jobs_here_in_order():
    seen = []
    out = parallel.run_on_devices(
        [lambda d, i=i: seen.append((i, d, threading.current_thread())) or i
         for i in range(3)], ["only"])
    assert out == [0, 1, 2]
    assert [(i, d) for i, d, _ in seen] == [(0, "only"), (1, "only"), (2, "only")]
    assert {t for _, _, t in seen} == {threading.current_thread()}


def test_an_error_cancels_the_running_jobs_and_starts_no_more():
    cancel = threading.Event()
    started, stopped = [], []

    def failing(device):
        started.append("failing")
        time.sleep(0.05)
        raise ValueError("boom")

    def watching(device):  # as a match does at every ply
        started.append("watching")
        for _ in range(200):
            if cancel.is_set():
                stopped.append("watching")
                raise parallel.Cancelled("given up")
            time.sleep(0.01)
        return "finished"

    def later(device):
        started.append("later")

    with pytest.raises(ValueError, match="boom"):
        parallel.run_on_devices([failing, watching, later, later], ["d0", "d1"], cancel)
    assert cancel.is_set() and stopped == ["watching"]
    assert "later" not in started
    # The job that gives up comes first: the error raised is still the one that made it.
    cancel.clear()
    started.clear()
    with pytest.raises(ValueError, match="boom"):
        parallel.run_on_devices([watching, failing, later], ["d0", "d1"], cancel)
    assert "later" not in started


# ====================================================== process set-up (parallel_setup)
def test_cpu_cores_become_devices_up_to_eight_unless_xla_flags_say(monkeypatch):
    from az_jax import parallel_setup

    for cores, devices in ((1, 1), (3, 3), (8, 8), (20, 8)):
        monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
        monkeypatch.setattr(parallel_setup, "usable_cpu_count", lambda n=cores: n)
        parallel_setup.use_all_cpu_cores()
        assert os.environ["XLA_FLAGS"] == ("--xla_cpu_use_thunk_runtime=false "
                                           f"--xla_force_host_platform_device_count={devices}")
    # Training's count divides the configs' batch sizes: 3, 5, 6 or 7 cores stopped every
    # shipped config with "must be divisible by the number of devices (6)".
    for cores, devices in ((1, 1), (2, 2), (3, 2), (6, 4), (7, 4), (8, 8), (20, 8)):
        monkeypatch.delenv("XLA_FLAGS")
        monkeypatch.setattr(parallel_setup, "usable_cpu_count", lambda n=cores: n)
        parallel_setup.use_all_cpu_cores(power_of_two=True)
        assert os.environ["XLA_FLAGS"] == f"--xla_force_host_platform_device_count={devices}"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    parallel_setup.use_all_cpu_cores()  # the user's count stays
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


def test_one_process_under_mpirun_stays_single_process():
    from az_jax.parallel_setup import _launcher_detected

    mpi = {"OMPI_MCA_orte_hnp_uri": "1;tcp://10.0.0.1:1"}
    assert not _launcher_detected(dict(mpi, OMPI_COMM_WORLD_SIZE="1"))
    assert _launcher_detected(dict(mpi, OMPI_COMM_WORLD_SIZE="2"))


@pytest.mark.parametrize("flags", [
    {"coordinator": "10.0.0.1:1234", "num_processes": 2},  # no --process_id
    {"num_processes": 2, "process_id": 0},  # no --coordinator
    {"coordinator": "10.0.0.1:1234", "process_id": 1},  # no --num_processes
])
def test_multi_host_flags_come_all_together(flags, monkeypatch):
    """A partial set of multi-host flags is a one-line error before jax.distributed
    (which would wait for processes that never come)."""
    import jax

    from az_jax import parallel_setup

    started = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit, match="multi-host needs all of --coordinator, "
                                         "--num_processes and --process_id"):
        parallel_setup.initialize_distributed(**flags)
    assert started == []


@pytest.mark.parametrize("coordinator", ["nohost", "10.0.0.1:", ":1234", "h:0", "h:70000",
                                         "h:12x"])
def test_a_coordinator_without_host_and_port_is_one_line(coordinator, monkeypatch):
    """JAX split it itself and raised an IndexError traceback (no port)."""
    import jax

    from az_jax import parallel_setup

    started = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit, match=f"--coordinator={coordinator}: give process 0's "
                                         "address as host:port"):
        parallel_setup.initialize_distributed(coordinator, 1, 0)
    parallel_setup.initialize_distributed("[::1]:1234", 1, 0)  # IPv6 in brackets passes
    assert started == [("[::1]:1234", 1, 0)]


@pytest.mark.parametrize("argv, needle", [
    (["--num_processes", "2", "--process_id", "2"], "--process_id=2 with --num_processes=2: "
                                                    "give each process an index from 0 to 1"),
    (["--num_processes", "0", "--process_id", "0"], "--num_processes"),
    (["--num_processes", "2", "--process_id", "-1"], "--process_id"),
])
def test_multi_host_flags_out_of_range_are_one_line(argv, needle):
    """An index outside the process count was JAX's traceback (or a wait); a count below
    one or a negative index likewise: now one `error:` line, exit status 2 or 1, before
    jax.distributed starts."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "train.py", "--coordinator", "127.0.0.1:1",
                             *argv], cwd=Path(__file__).resolve().parents[1],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert needle in result.stderr and result.stderr.count("error:") == 1, result.stderr
