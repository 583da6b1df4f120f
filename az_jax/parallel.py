"""One code path for 1..N devices: a `data` mesh axis over every device.

Self-play games, trajectories and the replay buffer are sharded on `data`; parameters and
optimizer state are replicated; `jit` inserts the gradient all-reduce. No pmap.
Evaluation's independent jobs (matches, batches of positions) run one a device instead
(`run_on_devices`): on a CPU, one a core.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

DATA = "data"
T = TypeVar("T")


def make_mesh(devices=None) -> Mesh:
    """A 1-D mesh named `data` over `devices` (all devices by default).

    Axis type Auto: with jax's explicit default, mctx fails on sharded batches.
    """
    devices = list(devices if devices is not None else jax.devices())
    return jax.make_mesh((len(devices),), (DATA,), axis_types=(AxisType.Auto,),
                         devices=devices)


def replicate(mesh: Mesh, tree):
    """Puts every leaf of `tree` on every device."""
    return _put(tree, NamedSharding(mesh, PartitionSpec()))


def shard(mesh: Mesh, tree):
    """Splits every leaf of `tree` along its leading (batch) axis over `data`."""
    return _put(tree, NamedSharding(mesh, PartitionSpec(DATA)))


def _put(tree, sharding: NamedSharding):
    """`tree` (the same host-local values in every process) as global arrays on `sharding`.

    Not `jax.device_put`: with several processes (jax 0.10), putting an uncommitted
    single-device array on a replicated sharding that spans processes gives an array whose
    per-device buffers are themselves global arrays; jit computes on it, but
    `addressable_shards` raises ("input arrays must have one shard each"), so orbax cannot
    save it. The output of a jitted identity is a well-formed global array.
    """
    return jax.jit(lambda t: t, out_shardings=sharding)(tree)


def local_replica(tree):
    """This process's copy of each replicated array in `tree` (other leaves unchanged).

    With several processes a replicated array spans hosts, and `device_put` onto one local
    device refuses it; work on one device (evaluation matches) takes the local copy.
    """
    def local(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if not x.is_fully_replicated:
                raise ValueError(f"array of shape {x.shape} is split over processes "
                                 f"({x.sharding}); only replicated arrays have a local copy")
            return x.addressable_data(0)
        return x

    return jax.tree.map(local, tree)


# ====================================================== independent jobs, one a device
def job_devices() -> list[jax.Device]:
    """Where independent jobs (evaluation matches, batches of solver positions) run at
    once: every local device on a CPU, whose cores `parallel_setup.use_all_cpu_cores`
    presents as devices; elsewhere the first alone, where compiling a copy of each program
    per device would cost more than it saves."""
    local = jax.local_devices()
    return local if local[0].platform == "cpu" else local[:1]


class Cancelled(Exception):
    """A job gave up because another one failed (`run_on_devices`' `cancel`)."""


def run_on_devices(jobs: Sequence[Callable[[jax.Device], T]], devices: Sequence[jax.Device],
                   cancel: threading.Event | None = None) -> list[T]:
    """`job(device)` for every job, at most one at a time on each device: each device takes
    the next job as it is free (one thread a device; JAX computes without the GIL). The
    results are in the order of `jobs`. On an error (or Ctrl-C) no further job starts,
    `cancel` is set, so that running jobs that watch it stop early (a match checks it at
    every ply, raising `Cancelled`), and the error is raised. With one device (or one
    job) the jobs run in this thread, in order."""
    if len(devices) < 2 or len(jobs) < 2:
        return [job(devices[0]) for job in jobs]
    free: queue.SimpleQueue = queue.SimpleQueue()
    for d in devices[:len(jobs)]:
        free.put(d)
    stop = threading.Event() if cancel is None else cancel

    def run(job):  # as many threads as devices: one is free whenever a job starts
        if stop.is_set():
            raise Cancelled("another job failed")
        device = free.get()
        try:
            return job(device)
        except BaseException:
            stop.set()
            raise
        finally:
            free.put(device)

    with ThreadPoolExecutor(min(len(devices), len(jobs)), thread_name_prefix="job") as pool:
        futures = [pool.submit(run, job) for job in jobs]
        try:
            return [f.result() for f in futures]
        except BaseException as e:  # a job's error, or Ctrl-C here
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)  # the running ones stop soon
            if isinstance(e, Cancelled):  # a job that gave up: raise what made it
                errors = [f.exception() for f in futures if not f.cancelled()]
                raise next((x for x in errors if x is not None
                            and not isinstance(x, Cancelled)), e) from None
            raise
