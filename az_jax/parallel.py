"""One code path for 1..N devices: a `data` mesh axis over every device.

Self-play games, trajectories and the replay buffer are sharded on `data`; parameters and
optimizer state are replicated; `jit` inserts the gradient all-reduce. No pmap.
"""

from __future__ import annotations

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

DATA = "data"


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
