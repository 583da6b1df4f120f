"""`python -m az_jax.bench train`: gradient updates/s on sampled replay batches."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from az_jax import cli
from az_jax.bench import common

HELP = "learner.update updates/s on sampled batches, compile time"

DESCRIPTION = """\
Times training on one device: --updates steps of learner.update (forward + backward + optax
step), each on its own batch of --batch positions sampled (with random symmetries when
train.augment) from a full replay buffer of random positions, run two ways: a jitted update
called once per step, and one jitted lax.scan over the steps as trainer.make_iteration runs
them. Reports updates/s and positions/s of both and their ratio; the replay sampling is
timed separately. Compile times and peak memory are reported."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="configs/connect4.py",
                   help="training config file; override fields with --config.a.b=value")
    p.add_argument("--batch", type=cli.integer(1), default=None,
                   help="positions per update (default: the config's train.batch_size)")
    p.add_argument("--updates", type=cli.integer(1), default=None,
                   help="updates per timed call (default: train.updates_per_iteration)")
    p.add_argument("--repeats", type=cli.integer(1), default=3,
                   help="timed calls (best is reported)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")


def run(args: argparse.Namespace) -> dict:
    """Gradient updates/s of `learner.update` on sampled replay batches, one device."""
    from az_jax import learner, network, replay

    c = common.load_config(args)
    batch = args.batch or c.train.batch_size
    updates = args.updates or c.train.updates_per_iteration
    env = common.make_env(c.env.id, c.env.kwargs)
    net = network.make_network(c.network, env)
    k_net, k_data, k_sample = jax.random.split(jax.random.PRNGKey(0), 3)
    tx = learner.make_optimizer(c.train, c.train.num_iterations * c.train.updates_per_iteration)
    train_state = learner.init_train_state(network.init_variables(net, env, k_net), tx)

    # A full buffer of random positions: the cost of an update does not depend on them.
    capacity = max(4 * batch, 1024)
    buffer = replay.ReplayBuffer(capacity, env)
    k_obs, k_pol, k_val = jax.random.split(k_data, 3)
    data = replay.Sample(
        observation=jax.random.bernoulli(k_obs, 0.3, (capacity, *env.observation_shape)
                                         ).astype(env.observation_dtype),
        policy=jax.nn.softmax(jax.random.normal(k_pol, (capacity, env.num_actions))),
        legal_mask=jnp.ones((capacity, env.num_actions), jnp.bool_),
        value=jax.random.uniform(k_val, (capacity,), minval=-1.0, maxval=1.0),
    )
    buffer_state = replay.BufferState(data, jnp.int32(0), jnp.int32(capacity))

    @jax.jit
    def sample(buffer_state, key):  # `updates` batches, as the trainer samples them
        return jax.vmap(lambda k: buffer.sample(buffer_state, k, batch, augment=c.train.augment)
                        )(jax.random.split(key, updates))

    def step(ts, b):  # the trainer's update (trainer.make_steps' learn_step)
        return learner.update(ts, b, net=net, tx=tx, value_weight=c.train.value_weight,
                              surprise_weight=c.train.get("surprise_weight", 0.0))

    update = jax.jit(step)

    def loop(train_state, batches):  # one jitted update per call, from Python
        for b in batches:
            train_state, metrics = update(train_state, b)
        return train_state, metrics

    scan = jax.jit(lambda ts, batches: jax.lax.scan(step, ts, batches))  # as the trainer

    s_first, s_best = common.best_time(sample, (buffer_state, k_sample), args.repeats)
    batches = jax.block_until_ready(sample(buffer_state, k_sample))
    split = [jax.tree.map(lambda x, i=i: x[i], batches) for i in range(updates)]
    t_loop, t_scan = common.time_interleaved([(loop, (train_state, split)),
                                        (scan, (train_state, batches))], args.repeats)
    result = {
        "subcommand": "train", **common.machine(),
        "config": args.config, "env": repr(env), "network": common.net_name(c),
        "optimizer": c.train.optimizer, "batch": batch, "updates": updates,
        "augment": bool(c.train.augment),
        "train_updates_per_s": updates / t_loop["best_s"],
        "train_positions_per_s": updates * batch / t_loop["best_s"],
        "train_compile_s": t_loop["compile_s"],
        "train_scan_updates_per_s": updates / t_scan["best_s"],
        "train_scan_positions_per_s": updates * batch / t_scan["best_s"],
        "train_scan_compile_s": t_scan["compile_s"],
        "sample_batches_per_s": updates / s_best,
        "sample_compile_s": s_first - s_best,
    }
    result["scan_over_calls"] = (result["train_scan_updates_per_s"]
                                 / result["train_updates_per_s"])
    print(f"{result['env']} on {result['device']}, network {result['network']}, "
          f"{result['optimizer']}, batch {batch} (load {result['load_average']:.1f})")
    print(f"  jit(learner.update)  {result['train_updates_per_s']:.1f} updates/s, "
          f"{common.si(result['train_positions_per_s'])} positions/s "
          f"({updates} calls; compile {result['train_compile_s']:.1f}s)")
    print(f"  lax.scan of updates  {result['train_scan_updates_per_s']:.1f} updates/s, "
          f"{common.si(result['train_scan_positions_per_s'])} positions/s "
          f"(as trainer.make_iteration runs them; compile {result['train_scan_compile_s']:.1f}s)"
          f": {result['scan_over_calls']:.2f}x the separate calls")
    if result["scan_over_calls"] < 0.5:
        print("  warning: updates inside lax.scan run far slower than separate calls; on XLA "
              "CPU, backward convolutions inside a loop body are slow (README, Benchmarks)")
    print(f"  replay sampling      {result['sample_batches_per_s']:.1f} batches/s "
          f"(augment={result['augment']}; compile {result['sample_compile_s']:.1f}s)")
    return common.finish(result, args.json)
