"""An on-device ring buffer of training samples, as pure `init / add / sample`.

    buffer = ReplayBuffer(capacity=100_000, env=env)
    state = buffer.init(example_sample(env))            # BufferState pytree
    state = jax.jit(buffer.add, donate_argnums=0)(state, samples, valid)
    batch = buffer.sample(state, key, batch_size)       # random symmetry per sample

Written small on purpose (flashbax's trajectory buffers are built for sequences; AlphaZero
needs independent positions with a validity mask and per-sample symmetries).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp


class Sample(NamedTuple):
    """One training position."""

    observation: jax.Array  # [*obs_shape] of env.observation_dtype
    policy: jax.Array  # float32[A]       search policy target
    legal_mask: jax.Array  # bool[A]
    value: jax.Array  # float32[]         value target for the mover: the game's outcome,
    #                                     or a bootstrapped, discounted or root-value-mixed
    #                                     one (see trainer.py)


def example_sample(env) -> Sample:
    """The shape and dtype of one position of `env` (leaves: `jax.ShapeDtypeStruct`)."""
    return Sample(
        observation=jax.ShapeDtypeStruct(env.observation_shape, env.observation_dtype),
        policy=jax.ShapeDtypeStruct((env.num_actions,), jnp.float32),
        legal_mask=jax.ShapeDtypeStruct((env.num_actions,), jnp.bool_),
        value=jax.ShapeDtypeStruct((), jnp.float32),
    )


class BufferState(NamedTuple):
    data: Sample  # every leaf [capacity, ...]
    insert_pos: jax.Array  # int32[]   next slot to write
    size: jax.Array  # int32[]         filled slots (<= capacity)


@dataclasses.dataclass(frozen=True)
class ReplayBuffer:
    """Static description of the buffer; its state is a separate pytree."""

    capacity: int
    env: Any  # the Env, for `symmetries`

    def init(self, example: Sample) -> BufferState:
        """An empty buffer shaped like one `example` (unbatched; arrays or shape structs)."""
        data = jax.tree.map(lambda x: jnp.zeros((self.capacity, *x.shape), x.dtype), example)
        return BufferState(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def add(self, state: BufferState, samples: Sample, valid: jax.Array) -> BufferState:
        """Writes the valid rows of `samples` (leading dim M) after the last insert.

        Invalid rows are skipped (no gap is left). Oldest samples are overwritten first.
        Args:
          samples: leaves [M, ...]; valid: bool[M].
        """
        chex.assert_rank(valid, 1)
        chex.assert_tree_shape_prefix(samples, valid.shape)
        chex.assert_trees_all_equal_shapes_and_dtypes(
            jax.tree.map(lambda x: x[0], samples), jax.tree.map(lambda d: d[0], state.data))
        valid = valid.astype(jnp.int32)
        offset = jnp.cumsum(valid) - valid  # rank of each valid row
        pos = (state.insert_pos + offset) % self.capacity
        # Invalid rows go to an out-of-bounds slot and are dropped by the scatter.
        pos = jnp.where(valid > 0, pos, self.capacity)
        n_new = valid.sum()
        # If more than `capacity` valid rows arrive at once, keep the last ones.
        keep = offset >= n_new - self.capacity
        pos = jnp.where(keep, pos, self.capacity)
        data = jax.tree.map(lambda d, x: d.at[pos].set(x, mode="drop"), state.data, samples)
        return BufferState(
            data=data,
            insert_pos=(state.insert_pos + n_new) % self.capacity,
            size=jnp.minimum(state.size + n_new, self.capacity),
        )

    def sample(self, state: BufferState, key: jax.Array, batch_size: int,
               augment: bool = True) -> Sample:
        """Uniform samples from the filled slots, each under a random board symmetry.

        Sampling an empty buffer returns zeros (callers check `size` first).
        Returns: leaves [batch_size, ...].
        """
        chex.assert_shape([state.insert_pos, state.size], [(), ()])
        k_idx, k_sym = jax.random.split(key)
        idx = jax.random.randint(k_idx, (batch_size,), 0, jnp.maximum(state.size, 1))
        batch = jax.tree.map(lambda d: d[idx], state.data)
        if not augment:
            return batch
        return jax.vmap(self._symmetry)(batch, jax.random.split(k_sym, batch_size))

    def _symmetry(self, sample: Sample, key: jax.Array) -> Sample:
        """One random symmetric variant of one sample (observation, policy and mask agree)."""
        # Two calls: `core.dihedral_symmetries` (Gomoku, tic-tac-toe) reshapes the policy to
        # the board, so an [A, 2] stack of policy and mask does not fit it.
        obs, pol = self.env.symmetries(sample.observation, sample.policy)
        _, mask = self.env.symmetries(sample.observation, sample.legal_mask.astype(jnp.float32))
        s = jax.random.randint(key, (), 0, pol.shape[0])
        return Sample(obs[s], pol[s], mask[s] > 0.5, sample.value)


def flatten_trajectory(traj, targets: jax.Array, valid: jax.Array
                       ) -> tuple[Sample, jax.Array]:
    """Time-major self-play output -> (Sample with leaves [T*B, ...], valid [T*B]).

    Args:
      traj: a `selfplay.Trajectory`, leaves [T, B, ...]; targets float32[T, B];
        valid bool[T, B].
    """
    chex.assert_equal_shape([targets, valid, traj.player])
    flat = lambda x: x.reshape((-1, *x.shape[2:]))
    samples = Sample(
        observation=flat(traj.observation),
        policy=flat(traj.policy),
        legal_mask=flat(traj.legal_mask),
        value=flat(targets),
    )
    return samples, flat(valid)
