"""Process-level setup before JAX compiles anything: CPU devices, jax.distributed, the
persistent compilation cache."""

from __future__ import annotations

import os


def use_all_cpu_cores(power_of_two: bool = False) -> None:
    """Presents the CPU cores as separate XLA devices (one core each, at most 8), unless
    XLA_FLAGS says otherwise. One CPU device uses about one core for convolutions; sharding
    the game batch over the cores gave 1.7-2x more simulations/s on 2 cores. Only affects
    the CPU backend. Must run before jax is imported.

    power_of_two: the largest power of two the cores allow (1, 2, 4 or 8), for training,
      whose batch sizes must divide by the device count: the configs' powers of two do
      not divide by 3, 5, 6 or 7 (6 cores give 4 devices).
    """
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    n = max(1, min(usable_cpu_count(), 8))
    if power_of_two:
        n = 1 << (n.bit_length() - 1)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={n}").strip()


def usable_cpu_count() -> int:
    """The cores this process may run on (taskset, cgroups' cpusets), not the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def cache_dir() -> str | None:
    """Where compiled programs are kept between runs: $AZ_JAX_CACHE, else
    $XDG_CACHE_HOME/az_jax/jax (~/.cache/az_jax/jax); None when AZ_JAX_CACHE=off."""
    cache = os.environ.get("AZ_JAX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "az_jax", "jax")
    return None if cache == "off" else cache


def use_compilation_cache(min_compile_seconds: float = 1.0) -> str | None:
    """Turns on JAX's persistent compilation cache (`cache_dir()`), unless
    JAX_COMPILATION_CACHE_DIR already chose one. A run of a config compiled before (the
    iteration, the evaluation's matches: a minute on a CPU) then starts at once. Call
    before the first compile. Returns the directory in use (None: off)."""
    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    cache = cache_dir()
    if cache is not None:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_seconds)
    return cache


def initialize_distributed(coordinator=None, num_processes=None, process_id=None) -> None:
    """Starts jax.distributed when asked to or when a multi-process launcher is detected.

    Explicit flags win. Otherwise `jax.distributed.initialize()` (which reads the cluster
    from the environment) runs for: `srun` with several tasks (SLURM), `mpirun` (Open MPI),
    TPU pods on GKE / Multislice, or any environment when AZ_JAX_DISTRIBUTED=1 (e.g. a
    Cloud TPU VM slice, where JAX asks the metadata server). A plain process, a one-task
    SLURM job included, stays single-process.

    Every process must then run the same command on the same (shared) --workdir; see the
    README, "Devices".
    """
    import jax

    if coordinator or num_processes or process_id is not None:
        if not (coordinator and num_processes and process_id is not None):
            raise SystemExit("error: multi-host needs all of --coordinator, --num_processes "
                             "and --process_id")
        if not 0 <= process_id < num_processes:  # (jax would wait, or raise a traceback)
            raise SystemExit(f"error: --process_id={process_id} with --num_processes="
                             f"{num_processes}: give each process an index from 0 to "
                             f"{num_processes - 1}")
        host, sep, port = str(coordinator).rpartition(":")
        if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise SystemExit(f"error: --coordinator={coordinator}: give process 0's address "
                             "as host:port, e.g. 10.0.0.1:1234 (the same on every process)")
        jax.distributed.initialize(coordinator, num_processes, process_id)
    elif _launcher_detected(os.environ):
        jax.distributed.initialize()


def _launcher_detected(env) -> bool:
    """Whether `env` comes from a launcher of several processes that JAX recognises."""
    if env.get("AZ_JAX_DISTRIBUTED", "0") not in ("", "0"):
        return True
    # The variables JAX's SLURM support reads; they are set for tasks started by srun.
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
             "SLURM_LOCALID")
    if all(v in env for v in slurm) and int(env["SLURM_NTASKS"]) > 1:
        return True
    if "OMPI_MCA_orte_hnp_uri" in env and int(env.get("OMPI_COMM_WORLD_SIZE", "2")) > 1:
        return True
    return any(v in env for v in ("TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS"))
