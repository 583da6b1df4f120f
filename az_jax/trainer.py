"""The training driver: self-play -> replay -> updates -> log -> evaluate -> checkpoint.

One iteration is one jitted program (`make_iteration`); this file only loops, logs,
evaluates and saves. A run resumes by itself from the newest complete checkpoint in its
workdir, with the same iteration count, config, RNG stream, games in progress and (by
default) replay contents.
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import PartitionSpec as P

import envs
from az_jax import checkpoint as ckpt
from az_jax import learner, network, parallel, replay, search, selfplay
from az_jax.parallel import DATA


def validate_config(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Checks a config before anything is compiled. Raises ValueError saying what to change."""
    problems = []
    if config.selfplay.batch_size % num_devices:
        problems.append(f"selfplay.batch_size={config.selfplay.batch_size} must be divisible "
                        f"by the number of devices ({num_devices})")
    if config.train.batch_size % num_devices:
        problems.append(f"train.batch_size={config.train.batch_size} must be divisible by "
                        f"the number of devices ({num_devices})")
    if config.replay.capacity % num_devices:
        problems.append(f"replay.capacity={config.replay.capacity} must be divisible by the "
                        f"number of devices ({num_devices})")
    for name in ("selfplay.batch_size", "selfplay.num_plies", "train.batch_size",
                 "train.updates_per_iteration", "train.num_iterations", "replay.capacity",
                 "checkpoint.every"):
        group, field = name.split(".")
        if config[group][field] < 1:
            problems.append(f"{name} must be >= 1")
    if config.replay.min_size > config.replay.capacity:
        problems.append("replay.min_size must not exceed replay.capacity")
    if problems:
        raise ValueError("invalid config:\n  " + "\n  ".join(problems))


class Setup:
    """Everything static about a run, built once from the config."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.config = config
        self.env = envs.make(config.env.id, **config.env.kwargs)
        self.net = network.make_network(config.network, self.env)
        self.search = search.make_search(self.env, self.net, config.search)
        total_updates = config.train.num_iterations * config.train.updates_per_iteration
        self.tx = learner.make_optimizer(config.train, total_updates)
        self.mesh = parallel.make_mesh()
        # Each device holds capacity / n positions of its own games.
        self.buffer = replay.ReplayBuffer(config.replay.capacity // self.mesh.size, self.env)

    def initial(self, key):
        """(train_state, games, buffer_state) for a fresh run. The key is consumed."""
        k_net, k_games = jax.random.split(key)
        variables = network.init_variables(self.net, self.env, k_net)
        train_state = learner.init_train_state(variables, self.tx)
        games = jax.vmap(self.env.init)(
            jax.random.split(k_games, self.config.selfplay.batch_size))
        example = replay.Sample(
            observation=jnp.zeros(self.env.observation_shape, jnp.float32),
            policy=jnp.zeros(self.env.num_actions, jnp.float32),
            legal_mask=jnp.zeros(self.env.num_actions, jnp.bool_),
            value=jnp.zeros((), jnp.float32),
        )
        buffer_state = self.buffer.init(example)
        n = self.mesh.size  # one buffer shard per device, each with its own counters
        buffer_state = replay.BufferState(
            data=buffer_state.data,
            insert_pos=jnp.zeros(n, jnp.int32),
            size=jnp.zeros(n, jnp.int32))
        return (parallel.replicate(self.mesh, train_state),
                parallel.shard(self.mesh, games),
                parallel.shard_buffer(self.mesh, buffer_state))


def make_iteration(setup: Setup):
    """Builds `iteration(train_state, games, buffer_state, key) -> (..., metrics)`.

    Self-play, value targets, replay writes and replay sampling run per device under
    `shard_map` (each device plays and stores its own games, keyed by global game index);
    the gradient step runs under `jit` on the sharded batch, so XLA averages gradients
    over devices. With one device it is the same program.
    """
    c = setup.config
    mesh, n_dev = setup.mesh, setup.mesh.size
    local_games = c.selfplay.batch_size // n_dev
    local_batch = c.train.batch_size // n_dev
    shard_map = functools.partial(jax.shard_map, mesh=mesh, check_vma=False)
    buf_spec = replay.BufferState(P(DATA), P(DATA), P(DATA))

    @functools.partial(shard_map, in_specs=(P(), P(DATA), buf_spec, P()),
                       out_specs=(P(DATA), buf_spec, P()))
    def play(variables, games, buffer_state, key):
        shard = jax.lax.axis_index(DATA)
        game_ids = shard * local_games + jnp.arange(local_games, dtype=jnp.int32)
        traj, games = selfplay.selfplay(
            setup.search, setup.env, variables, games, key,
            num_plies=c.selfplay.num_plies, temperature_plies=c.selfplay.temperature_plies,
            greedy_from_search=c.search.policy == "gumbel", game_ids=game_ids)
        targets, valid = selfplay.value_targets(traj)
        samples, valid_flat = replay.flatten_trajectory(traj, targets, valid)
        buffer_state = _local(setup.buffer.add)(buffer_state, samples, valid_flat)
        stats = jax.lax.psum(_selfplay_counts(traj, valid), DATA)
        return games, buffer_state, stats

    @functools.partial(shard_map, in_specs=(buf_spec, P()), out_specs=P(DATA))
    def sample(buffer_state, key):
        key = jax.random.fold_in(key, jax.lax.axis_index(DATA))
        return _local(setup.buffer.sample)(buffer_state, key, local_batch,
                                           augment=c.train.augment)

    def iteration(train_state, games, buffer_state, key):
        k_play, k_learn = jax.random.split(key)
        games, buffer_state, counts = play(train_state.variables, games, buffer_state, k_play)

        def learn(ts):
            def step(ts, k):
                return learner.update(ts, sample(buffer_state, k), net=setup.net, tx=setup.tx,
                                      value_weight=c.train.value_weight)

            return jax.lax.scan(step, ts, jax.random.split(k_learn, c.train.updates_per_iteration))

        def wait(ts):
            _, shapes = jax.eval_shape(learn, ts)
            nan = jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)
            return ts, nan

        filled = buffer_state.size.sum()
        ready = filled >= c.replay.min_size
        train_state, m = jax.lax.cond(ready, learn, wait, train_state)
        metrics = {k: jnp.nanmean(v) for k, v in m.items()}
        metrics["skipped"] = jnp.nansum(m["skipped"])
        metrics["updates"] = jnp.where(ready, c.train.updates_per_iteration, 0)
        metrics.update(_selfplay_stats(counts))
        metrics["buffer_size"] = filled
        return train_state, games, buffer_state, metrics

    return iteration


def _local(fn):
    """Runs a ReplayBuffer method on one device's shard, whose counters have shape [1]."""

    def wrapped(buffer_state, *args, **kwargs):
        squeeze = buffer_state._replace(insert_pos=buffer_state.insert_pos[0],
                                        size=buffer_state.size[0])
        out = fn(squeeze, *args, **kwargs)
        if isinstance(out, replay.BufferState):
            return out._replace(insert_pos=out.insert_pos[None], size=out.size[None])
        return out

    return wrapped


def _selfplay_counts(traj: selfplay.Trajectory, valid) -> dict:
    """Sums over the games that ended in this window (psum-able)."""
    done = traj.done
    first_won = (traj.reward > 0) == (traj.player == 0)
    return {
        "games": done.sum(),
        "moves": jnp.asarray(done.size, jnp.int32),
        "first_player_wins": (done & (traj.reward != 0) & first_won).sum(),
        "draws": (done & (traj.reward == 0)).sum(),
        "valid_positions": valid.sum(),
        "root_value_abs": jnp.abs(traj.root_value).sum(),
    }


def _selfplay_stats(counts: dict) -> dict:
    n_done = jnp.maximum(counts["games"], 1)
    return {
        "games": counts["games"],
        "moves": counts["moves"],
        "first_player_win_rate": counts["first_player_wins"] / n_done,
        "draw_rate": counts["draws"] / n_done,
        "valid_positions": counts["valid_positions"],
        "root_value_abs": counts["root_value_abs"] / jnp.maximum(counts["moves"], 1),
    }


def _to_host(metrics: dict) -> dict:
    return {k: float(np.asarray(v)) for k, v in jax.device_get(metrics).items()}


class _StopRequest:
    """Turns the first Ctrl-C / SIGTERM into a clean stop after the current iteration."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in self._old:
            signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # second Ctrl-C: stop now (the last checkpoint is intact)
            raise KeyboardInterrupt
        self.requested = True
        print("\nstopping after this iteration (saving a checkpoint); Ctrl-C again to abort",
              file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)
        return False


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains (or resumes) a run in `workdir`. Returns the last iteration's metrics."""
    from az_jax import plots

    workdir = str(Path(workdir).expanduser())
    validate_config(config, jax.device_count())
    setup = Setup(config)
    env = setup.env
    is_writer = jax.process_index() == 0
    mngr = ckpt.manager(workdir, keep=config.checkpoint.keep)

    run_key = jax.random.PRNGKey(config.seed)
    init_key, loop_key = jax.random.split(run_key)
    train_state, games, buffer_state = setup.initial(init_key)
    target = {"train_state": train_state, "games": games, "best_params": train_state.params}
    start = 0
    restored = ckpt.restore_latest(mngr, target, buffer_state if config.checkpoint.save_replay
                                   else None)
    if restored is not None:
        step, state, buf, meta = restored
        ckpt.check_env(meta, env, workdir)
        train_state, games = state["train_state"], state["games"]
        best_params = state["best_params"]
        if buf is not None:
            buffer_state = buf
        start = int(meta["iteration"])
        _log(f"resumed from {workdir} at iteration {start}", is_writer)
    else:
        best_params = train_state.params
        _log(f"new run in {workdir}: {env!r}, {jax.device_count()} device(s) "
             f"({jax.devices()[0].platform})", is_writer)
        if is_writer:
            Path(workdir).mkdir(parents=True, exist_ok=True)
            (Path(workdir) / "config.json").write_text(config.to_json(indent=2))
    meta = {"config": ckpt.config_json(config), **ckpt.env_meta(env)}

    iteration_fn = jax.jit(make_iteration(setup), donate_argnums=(1, 2))
    evaluator = None
    if config.eval.every:
        from az_jax import arena

        evaluator = arena.TrainingEvaluator(setup, workdir)
    metrics_path = Path(workdir) / "metrics.jsonl"
    writer = _tensorboard(workdir) if config.log.tensorboard and is_writer else None

    bar = _progress(config, start, is_writer)
    last = {}
    with _StopRequest() as stop:
        for it in range(start, config.train.num_iterations):
            t0 = time.perf_counter()
            key, eval_key = jax.random.split(jax.random.fold_in(loop_key, it))
            train_state, games, buffer_state, m = iteration_fn(
                train_state, games, buffer_state, key)
            m = _to_host(m)
            dt = time.perf_counter() - t0
            m.update(iteration=it + 1, seconds=dt, games_per_s=m["games"] / dt,
                     moves_per_s=m["moves"] / dt)
            if m["skipped"] > 0:
                _log(f"warning: {int(m['skipped'])} update(s) skipped at iteration {it + 1}: "
                     "non-finite loss or gradient", is_writer)
            score = None
            if evaluator is not None and (it + 1) % config.eval.every == 0:
                eval_metrics, best_params = evaluator(train_state, best_params, it + 1,
                                                      eval_key)
                m.update(eval_metrics)
                score = eval_metrics.get("score")
            last = m
            if is_writer:
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(m) + "\n")
                if writer is not None:
                    for k, v in m.items():
                        writer.add_scalar(k, v, it + 1)
            _log(_summary(m), is_writer, bar)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(games_s=f"{m['games_per_s']:.0f}",
                                moves_s=f"{m['moves_per_s']:.0f}", loss=f"{m['loss']:.3f}")
            final = it + 1 == config.train.num_iterations
            if (it + 1) % config.checkpoint.every == 0 or final or stop.requested:
                state = {"train_state": train_state, "games": games, "best_params": best_params}
                ckpt.save(mngr, it + 1, state, dict(meta, iteration=it + 1, score=score),
                          buffer_state if config.checkpoint.save_replay else None, score)
                if is_writer:
                    plots.write_training_plots(workdir)
            if stop.requested:
                _log(f"stopped at iteration {it + 1}; run the same command to resume",
                     is_writer, bar)
                break
    if bar is not None:
        bar.close()
    if writer is not None:
        writer.close()
    return last


def _summary(m: dict) -> str:
    parts = [f"it {int(m['iteration']):4d}", f"{m['seconds']:.1f}s",
             f"games/s {m['games_per_s']:.0f}", f"moves/s {m['moves_per_s']:.0f}"]
    if not math.isnan(m.get("loss", math.nan)):
        parts += [f"loss {m['loss']:.3f}", f"pol {m['policy_loss']:.3f}",
                  f"val {m['value_loss']:.3f}", f"ent {m['policy_entropy']:.2f}"]
    else:
        parts.append(f"filling replay {int(m['buffer_size'])}")
    parts.append(f"p1win {m['first_player_win_rate']:.2f} draw {m['draw_rate']:.2f}")
    for k in sorted(m):
        if k.startswith("eval/") and k.endswith("/score"):
            parts.append(f"{k[5:-6]} {m[k]:.2f}")
    return " | ".join(parts)


def _log(text: str, is_writer: bool, bar=None) -> None:
    if not is_writer:
        return
    if bar is not None:
        bar.write(text)
    else:
        print(text, flush=True)


def _progress(config, start: int, is_writer: bool):
    if not (config.log.progress and is_writer):
        return None
    from tqdm import tqdm

    return tqdm(total=config.train.num_iterations, initial=start, unit="it", dynamic_ncols=True,
                disable=not sys.stderr.isatty() and not os.environ.get("AZ_FORCE_PROGRESS"))


def _tensorboard(workdir: str):
    try:
        from tensorboardX import SummaryWriter
    except ImportError as e:
        raise ImportError('log.tensorboard=True needs tensorboardX: pip install -e ".[tensorboard]"'
                          ) from e
    return SummaryWriter(str(Path(workdir) / "tensorboard"))
