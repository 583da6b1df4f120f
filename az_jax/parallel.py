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
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def shard(mesh: Mesh, tree):
    """Splits every leaf of `tree` along its leading (batch) axis over `data`."""
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec(DATA)))


def shard_buffer(mesh: Mesh, buffer_state):
    """Replay buffer: data sharded along capacity, one counter per device (leading axis)."""
    return shard(mesh, buffer_state)
