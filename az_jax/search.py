"""Batched MCTS over the real game dynamics with mctx.

    search = make_search(env, net, config.search)
    out = search(variables, states, key)                 # self-play (root noise)
    out = search(variables, states, key, evaluation=True, num_simulations=800)
    out.action          int32[B]
    out.action_weights  float32[B, A]   the policy target (visit counts / improved policy)

Conventions (DESIGN.md): the embedding is the env `State` itself; `recurrent_fn` steps the
env and evaluates the network; reward is that of the player who just moved; discount is -1
while the game goes on (the next node belongs to the opponent; -gamma with
`config.discount = gamma < 1`) and 0 at the end, where the value is 0 too. mctx masks
invalid actions only at the root, so interior logits are masked here with the env's legal
mask.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import mctx

POLICIES = ("gumbel", "muzero")


def qtransform_parent_fpu(tree, node_index):
    """Q in [-1, 1] rescaled to [0, 1]; unvisited children get the parent's value.

    The default PUCT transform scores unvisited children at the minimum, which makes
    search with flat priors on many actions degenerate into a single deep chain. Using the
    parent's value as "first play urgency" keeps the search wide.
    """
    q = tree.qvalues(node_index)
    visits = tree.children_visits[node_index]
    parent = tree.node_values[node_index]
    q = jnp.where(visits > 0, q, parent)
    return (jnp.clip(q, -1.0, 1.0) + 1.0) / 2.0


def make_recurrent_fn(env, apply_fn, discount: float = 1.0):
    """mctx `recurrent_fn` over the env.

    Args:
      env: an `envs.Env`.
      apply_fn: `(variables, obs [B, ...], legal_mask [B, A]) -> (logits [B, A], value [B])`.
      discount: per-ply value discount gamma (1 = AlphaZero). With gamma < 1 a win n plies
        away is worth gamma^n, so the search prefers quicker wins and slower losses.
    """

    def recurrent_fn(variables, key, action, state):
        batch = action.shape[0]
        next_state = jax.vmap(env.step)(state, action, jax.random.split(key, batch))
        logits, value = apply_fn(variables, next_state.observation, next_state.legal_action_mask)
        reward = next_state.rewards[jnp.arange(batch), state.current_player]
        done = next_state.done
        out = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, -discount),
            prior_logits=logits,
            value=jnp.where(done, 0.0, value),
        )
        return out, next_state

    return recurrent_fn


def make_search(env, net, config) -> Search:
    """The batched search over `env` with the Flax network `net` (eval mode).

    Args:
      env: an `envs.Env`.
      net: the Flax network (its `apply` takes `(variables, obs, legal_mask)`).
      config: `config.search` (policy, num_simulations, dirichlet_alpha, dirichlet_fraction,
        pb_c_init, pb_c_base, max_num_considered_actions, gumbel_scale, discount).
    """
    return Search(env, lambda v, obs, mask: net.apply(v, obs, mask, train=False), config)


class Search:
    """A batched search over the real game dynamics (build it with `make_search`).

        out = search(variables, state, key)          # mctx.PolicyOutput, batch B
        root = search.root(variables, state)         # the network at the roots only

    `Search(env, apply_fn, config)` takes any `apply_fn(variables, obs, legal_mask) ->
    (logits, value)`. It holds only static configuration, so it can be a static argument of
    `jit`.

    Raises:
      ValueError: unknown policy or a non-positive simulation count.
    """

    def __init__(self, env, apply_fn, config):
        if config.policy not in POLICIES:
            raise ValueError(f"search.policy={config.policy!r}; accepted: "
                             f"{', '.join(POLICIES)}")
        if config.num_simulations < 1:
            raise ValueError("search.num_simulations must be >= 1")
        self.env, self.apply_fn, self.config = env, apply_fn, config
        # Configs saved before `discount` existed have none: they searched undiscounted.
        self.recurrent_fn = make_recurrent_fn(env, apply_fn, float(config.get("discount", 1.0)))

    def root(self, variables, state) -> mctx.RootFnOutput:
        """The network's prior logits [B, A] and value [B] at a batch of env states."""
        logits, value = self.apply_fn(variables, state.observation, state.legal_action_mask)
        return mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)

    def __call__(self, variables, state, key, *, evaluation: bool = False,
                 num_simulations: int | None = None,
                 root: mctx.RootFnOutput | None = None) -> mctx.PolicyOutput:
        """Runs a batched search from `state` (batched env states, leading dim B).

        `key` is one key for the batch, or one key per game (shape [B, 2]): per-game keys
        make each game's noise independent of how the batch is split over devices. The
        key is consumed. `evaluation=True` turns the root noise off. `root`: the network's
        output at `state` when the caller already has it (self-play reuses the played
        child's evaluation from the previous search); None evaluates it here.
        """
        sims = int(num_simulations or self.config.num_simulations)
        if root is None:
            root = self.root(variables, state)
        if key.ndim == 1:
            return self._search(variables, root, key, evaluation, sims)

        def one(root, key):  # a batch of one game, so its noise depends on its key only
            root = jax.tree.map(lambda x: x[None], root)
            out = self._search(variables, root, key, evaluation, sims)
            return jax.tree.map(lambda x: x[0], out)

        return jax.vmap(one)(root, key)

    def _search(self, variables, root, key, evaluation, sims) -> mctx.PolicyOutput:
        config = self.config
        invalid = ~root.embedding.legal_action_mask
        chex.assert_equal_shape([root.prior_logits, invalid])
        if config.policy == "gumbel":
            return mctx.gumbel_muzero_policy(
                variables, key, root, self.recurrent_fn,
                num_simulations=sims,
                invalid_actions=invalid,
                max_num_considered_actions=min(config.max_num_considered_actions,
                                               self.env.num_actions),
                gumbel_scale=0.0 if evaluation else config.gumbel_scale,
            )
        return mctx.muzero_policy(
            variables, key, root, self.recurrent_fn,
            num_simulations=sims,
            invalid_actions=invalid,
            qtransform=qtransform_parent_fpu,
            dirichlet_fraction=0.0 if evaluation else config.dirichlet_fraction,
            dirichlet_alpha=config.dirichlet_alpha,
            pb_c_init=config.pb_c_init,
            pb_c_base=config.pb_c_base,
            temperature=0.0 if evaluation else 1.0,
        )


@functools.partial(jax.jit, static_argnames=("search", "evaluation", "num_simulations"))
def jit_search(search, variables, state, key, evaluation=True, num_simulations=None):
    """A jitted call of `search`, for host-side front ends (play, web, arena)."""
    return search(variables, state, key, evaluation=evaluation, num_simulations=num_simulations)
