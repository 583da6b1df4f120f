"""mctx's backward pass (the value backup from a new leaf to the root), for a whole batch.

mctx (0.0.x) writes `backward` for one game and `jax.vmap`s it. Its `while_loop` carries the
whole tree, and under `vmap` a loop whose condition differs per game becomes a loop over
every game that, at each step up the tree, selects between the old and the updated carry:
the four value and visit arrays, all of them ([B, N] and [B, N, A]). So each simulation
costs batch x nodes x actions, and a search of S simulations grows with B x S² x A. On a
CPU this dominates large searches: a batch of 32 Gomoku 9x9 positions searched with 1024
simulations took 64 s, 4.5 s with the function below (`python -m az_jax.bench backward`).

`backward` here does the same updates, in the same order and arithmetic (bit-identical
trees, tests/test_search.py), as one loop over the batch whose condition is "some game has
not reached its root". A game already at its root writes out of range and is dropped, so
each step touches one entry per game. `batched_backward()` puts it in mctx's place while
a search is traced; the search calls of `az_jax.search` trace under it.
"""

from __future__ import annotations

import contextlib
import threading

import jax
import jax.numpy as jnp
from mctx import Tree

try:  # mctx's private module: where a later mctx moves it, searches keep mctx's own
    from mctx._src import search as _mctx_search
    MCTX_BACKWARD = _mctx_search.backward  # the original, vmapped per game
except (ImportError, AttributeError):
    _mctx_search = MCTX_BACKWARD = None
_LOCK = threading.RLock()


@jax.custom_batching.custom_vmap
def backward(tree: Tree, leaf_index: jax.Array) -> Tree:
    """Backs the value of each game's new leaf up to its root (mctx's `backward`).

    Args:
      tree: a batched mctx `Tree` (leaves [B, ...]).
      leaf_index: int32[B] each game's leaf, the node expanded by this simulation.
    Returns:
      The tree with node values and visits and children values and visits updated along
      each game's path.
    """
    batch, num_nodes = tree.node_values.shape
    games = jnp.arange(batch)
    index = jnp.asarray(leaf_index, jnp.int32)

    def cond(loop):
        return jnp.any(loop[2] != Tree.ROOT_INDEX)

    def body(loop):
        tree, leaf_value, index = loop
        going = index != Tree.ROOT_INDEX  # bool[B]
        parent = jnp.where(going, tree.parents[games, index], 0)
        action = jnp.where(going, tree.action_from_parent[games, index], 0)
        count = tree.node_visits[games, parent]
        reward = tree.children_rewards[games, parent, action]
        value = reward + tree.children_discounts[games, parent, action] * leaf_value
        parent_value = (tree.node_values[games, parent] * count + value) / (count + 1.0)
        child_value = tree.node_values[games, index]
        child_visits = tree.children_visits[games, parent, action] + 1
        at = jnp.where(going, parent, num_nodes)  # a game at its root writes nowhere

        def put(x, new, *where):
            return x.at[(games, at) + where].set(new, mode="drop")

        tree = tree.replace(
            node_values=put(tree.node_values, parent_value),
            node_visits=put(tree.node_visits, count + 1),
            children_values=put(tree.children_values, child_value, action),
            children_visits=put(tree.children_visits, child_visits, action))
        return tree, jnp.where(going, value, leaf_value), jnp.where(going, parent, index)

    return jax.lax.while_loop(cond, body, (tree, tree.node_values[games, index], index))[0]


@backward.def_vmap
def _backward_vmap(axis_size, in_batched, tree, leaf_index):
    """Under an outer `vmap` (a search per game, `Search` with per-game keys), the outer
    axis joins the batch: still one loop, not a select over every tree per step."""
    def join(x, batched):  # [axis_size, B, ...] -> [axis_size * B, ...]
        if not batched:
            x = jnp.broadcast_to(x, (axis_size, *x.shape))
        return x.reshape(-1, *x.shape[2:])

    tree = jax.tree.map(join, tree, in_batched[0])
    out = backward(tree, join(leaf_index, in_batched[1]))
    out = jax.tree.map(lambda x: x.reshape(axis_size, -1, *x.shape[1:]), out)
    return out, jax.tree.map(lambda _: True, out)


@contextlib.contextmanager
def batched_backward():
    """Within this block, mctx searches traced in this process back values up with
    `backward` (mctx looks its `backward` up when a search is traced). Threads that trace
    at once wait for each other; a search already compiled is not affected."""
    if _mctx_search is None:
        yield
        return
    with _LOCK:
        before, _mctx_search.backward = _mctx_search.backward, backward
        try:
            yield
        finally:
            _mctx_search.backward = before
