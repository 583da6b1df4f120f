"""The learner: TrainState, the AlphaZero loss, the optax chain, one update step.

loss = cross-entropy(search policy, network policy) + value_weight * (z - v)^2 (the
cross-entropy averaged over the positions that have a policy target); with the "wdl" value
head the value term is the cross-entropy between the head's win/draw/loss logits and
`wdl_target(z)`. With `surprise_weight` s > 0 each position's two terms are weighted by
(1 - s) + s * KL(target || network policy) / (the batch's mean KL): KataGo's policy surprise
weighting, with the surprise measured against the network being trained rather than the
self-play prior (the replay keeps no prior); the weights average 1 over the batch (all 1
when the batch's mean KL is at most 1e-6). Weight decay through the optimizer: decoupled in
AdamW; L2 added to the gradient before the momentum in SGD (`add_decayed_weights`).
A non-finite loss or gradient skips the update and is counted in the metrics.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from az_jax.replay import Sample

SCHEDULES = ("constant", "cosine", "onecycle")
OPTIMIZERS = ("adamw", "sgd")


def variables(params: Any, batch_stats: Any) -> dict:
    """What `net.apply` takes: the params, and the batch statistics unless empty ({})."""
    if batch_stats:
        return {"params": params, "batch_stats": batch_stats}
    return {"params": params}


class TrainState(struct.PyTreeNode):
    step: jax.Array  # int32[]
    params: Any
    batch_stats: Any  # {} without batch norm
    opt_state: Any

    @property
    def variables(self) -> dict:
        """What `net.apply` takes."""
        return variables(self.params, self.batch_stats)


def make_schedule(config, total_steps: int) -> optax.Schedule:
    """Learning-rate schedule from `config.train` (constant, cosine, onecycle as in seed 000)."""
    lr = config.learning_rate
    total = max(int(total_steps), 1)
    if config.schedule == "constant":
        return optax.constant_schedule(lr)
    if config.schedule == "cosine":
        warmup = min(config.warmup_steps, total - 1)
        return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, total, end_value=lr * 0.01)
    if config.schedule == "onecycle":
        return optax.cosine_onecycle_schedule(total, lr)
    raise ValueError(f"train.schedule={config.schedule!r}; accepted: {', '.join(SCHEDULES)}")


def make_optimizer(config, total_steps: int) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW (decoupled weight decay, scaled by the learning
    rate) or SGD with Nesterov momentum 0.9 and L2 regularisation, as AlphaZero: weight_decay
    * params is added to the gradient before the momentum."""
    schedule = make_schedule(config, total_steps)
    if config.optimizer == "adamw":
        opt = optax.adamw(schedule, weight_decay=config.weight_decay)
    elif config.optimizer == "sgd":
        opt = optax.chain(optax.add_decayed_weights(config.weight_decay),
                          optax.sgd(schedule, momentum=0.9, nesterov=True))
    else:
        raise ValueError(f"train.optimizer={config.optimizer!r}; accepted: {', '.join(OPTIMIZERS)}")
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), opt)


def init_train_state(variables: dict, tx: optax.GradientTransformation) -> TrainState:
    params = variables["params"]
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        batch_stats=variables.get("batch_stats", {}),
        opt_state=tx.init(params),
    )


def check_batch(batch: Sample) -> None:
    """Shapes of a training batch of N positions, checked while tracing: observation
    [N, H, W, C], policy float32[N, A], legal_mask bool[N, A], value float32[N]."""
    chex.assert_rank([batch.observation, batch.policy, batch.legal_mask, batch.value],
                     [4, 2, 2, 1])
    chex.assert_equal_shape([batch.policy, batch.legal_mask])
    chex.assert_equal_shape_prefix([batch.observation, batch.policy, batch.value], 1)
    chex.assert_type([batch.policy, batch.legal_mask, batch.value],
                     [jnp.float32, jnp.bool_, jnp.float32])


def wdl_target(z: jax.Array) -> jax.Array:
    """float32[N] value targets in [-1, 1] -> float32[N, 3] win/draw/loss probabilities
    whose expectation P(win) - P(loss) is z: an outcome -1, 0 or 1 is one-hot; a target in
    between (a discounted or root-value-mixed one) is shared between the outcome on its
    side and a draw (0.5 -> win 0.5, draw 0.5)."""
    z = jnp.clip(z, -1.0, 1.0)
    win, loss = jnp.maximum(z, 0.0), jnp.maximum(-z, 0.0)
    return jnp.stack([win, 1.0 - win - loss, loss], axis=-1)


def surprise_weights(logits: jax.Array, policy: jax.Array, strength: float) -> jax.Array:
    """float32[N] sample weights (1 - strength) + strength * KL_i / mean KL from the network's
    logits [N, A] and the policy targets [N, A]; positions without a policy target (all
    zero) weigh 1 and do not count in the mean. When the mean KL is at most 1e-6 (the
    network already predicts every target) all weights are 1, so they still average 1
    rather than (1 - strength). No gradient flows through the weights."""
    eps = 1e-6
    has_policy = policy.sum(-1) > 0  # bool[N]
    cross = optax.softmax_cross_entropy(logits, policy)  # [N]
    entropy = -jnp.sum(jax.scipy.special.xlogy(policy, policy), -1)  # [N]
    kl = jax.lax.stop_gradient(jnp.where(has_policy, jnp.maximum(cross - entropy, 0.0), 0.0))
    mean = kl.sum() / jnp.maximum(has_policy.sum(), 1)
    weights = (1.0 - strength) + strength * kl / jnp.maximum(mean, eps)
    return jnp.where(has_policy & (mean > eps), weights, 1.0)


def loss_fn(params: Any, batch_stats: Any, net, batch: Sample, value_weight: float,
            surprise_weight: float = 0.0
            ) -> tuple[jax.Array, tuple[dict[str, jax.Array], Any]]:
    """AlphaZero loss on a batch. Returns (loss, (metrics, new_batch_stats))."""
    check_batch(batch)
    if batch_stats:
        (logits, value, raw), updates = net.apply(
            variables(params, batch_stats), batch.observation, batch.legal_mask, train=True,
            value_outputs=True, mutable=["batch_stats"])
        new_stats = updates["batch_stats"]
    else:
        logits, value, raw = net.apply(variables(params, batch_stats), batch.observation,
                                       batch.legal_mask, train=True, value_outputs=True)
        new_stats = batch_stats
    chex.assert_equal_shape([logits, batch.policy])
    chex.assert_equal_shape([value, batch.value])
    # Positions without a policy target (all-zero policy: the fast searches of playout-cap
    # randomization) add nothing; the mean is over the positions that have one.
    has_policy = batch.policy.sum(-1) > 0  # bool[N]
    weights = (surprise_weights(logits, batch.policy, surprise_weight) if surprise_weight
               else jnp.ones_like(batch.value))  # float32[N]
    policy_loss = (jnp.sum(weights * optax.softmax_cross_entropy(logits, batch.policy))
                   / jnp.maximum(has_policy.sum(), 1))
    value_loss = jnp.mean((value - batch.value) ** 2)  # logged for every head
    if net.value_head == "wdl":
        value_term = jnp.mean(weights * optax.softmax_cross_entropy(raw,
                                                                    wdl_target(batch.value)))
    else:
        value_term = jnp.mean(weights * (value - batch.value) ** 2)
    loss = policy_loss + value_weight * value_term
    log_p = jax.nn.log_softmax(logits)
    probs = jnp.exp(log_p)
    entropy = -jnp.sum(jnp.where(batch.legal_mask, probs * log_p, 0.0), axis=-1).mean()
    vc, tc = value - value.mean(), batch.value - batch.value.mean()
    corr = jnp.sum(vc * tc) / jnp.sqrt(jnp.sum(vc**2) * jnp.sum(tc**2) + 1e-12)
    metrics = {
        "loss": loss,
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "policy_entropy": entropy,
        "value_corr": corr,
    }
    return loss, (metrics, new_stats)


def update(state: TrainState, batch: Sample, *, net, tx: optax.GradientTransformation,
           value_weight: float = 1.0, surprise_weight: float = 0.0
           ) -> tuple[TrainState, dict[str, jax.Array]]:
    """One gradient step. Skips it (state unchanged) when the loss or gradient is not finite.

    Returns:
      (new TrainState, metrics dict of float32[] scalars).
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, (metrics, new_stats)), grads = grad_fn(
        state.params, state.batch_stats, net, batch, value_weight, surprise_weight)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new = TrainState(step=state.step + 1, params=params, batch_stats=new_stats,
                     opt_state=opt_state)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    new = jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, state)
    metrics = dict(metrics, grad_norm=grad_norm, skipped=(~finite).astype(jnp.float32))
    return new, metrics
