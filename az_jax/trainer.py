"""The training driver: self-play -> replay -> updates -> log -> evaluate -> checkpoint.

One iteration is one jitted program (`make_iteration`); this file only loops, logs,
evaluates and saves. A run resumes by itself from the newest complete checkpoint in its
workdir, with the same iteration count, config, RNG stream, games in progress and (by
default) replay contents.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import PartitionSpec as P

import envs
from az_jax import checkpoint as ckpt
from az_jax import config as config_lib
from az_jax import files, learner, network, parallel, replay, search, selfplay
from az_jax import workdir as runs
from az_jax.parallel import DATA

T = TypeVar("T")


def targets_mode(config: ml_collections.ConfigDict) -> str:
    """How the plies of games still running at a window's end are trained.

    "pending" (`selfplay.pending`, the default): they wait on the device until their game
    ends, then get their exact outcome; "bootstrap" (`selfplay.bootstrap`, which takes
    precedence): n-step targets from the window's last root value; "drop": left out.
    Configs saved before `selfplay.pending` existed read as its default, True.
    """
    if config.selfplay.bootstrap:
        return "bootstrap"
    return "pending" if config.selfplay.get("pending", True) else "drop"


def pending_length(config: ml_collections.ConfigDict, env) -> int:
    """L, the plies kept pending per game: `selfplay.max_game_length`, or when 0 (the
    default) the env's longest game; 0 when the run does not keep plies pending.

    Raises:
      ValueError: pending plies with an env that does not bound its games and no
        `selfplay.max_game_length`.
    """
    if targets_mode(config) != "pending":
        return 0
    length = config.selfplay.get("max_game_length", 0) or env.max_game_length
    if not length:
        raise ValueError(
            f"invalid config:\n  selfplay.max_game_length=0 but {env.id} does not say how "
            "long its games can be; set --config.selfplay.max_game_length=N (plies kept "
            "per running game; older plies of longer games are dropped) or "
            "--config.selfplay.pending=False")
    return int(length)


class Games(NamedTuple):
    """The self-play games in progress, sharded on the batch dimension like any game."""

    states: Any  # envs.State, leaves [B, ...]
    # With targets_mode "pending": the plies of each game still waiting for its outcome,
    # leaves [B, L, ...] (see `selfplay.Pending`); else None.
    pending: selfplay.Pending | None
    # With selfplay.archive_starts > 0: positions of earlier windows that new games may
    # start from, envs.State leaves [B, selfplay.archive_size, ...]; else None.
    archive: Any = None


class Setup:
    """Everything static about a run, built once from the config.

    Args:
      config: the run's config.
      devices: the devices of the `data` mesh (default: all of them).
    """

    def __init__(self, config: ml_collections.ConfigDict, devices=None):
        self.config = config
        self.env = envs.make(config.env.id, **config.env.kwargs)
        self.net = network.make_network(config.network, self.env)
        self.search = search.make_search(self.env, self.net, config.search)
        total_updates = config.train.num_iterations * config.train.updates_per_iteration
        self.tx = learner.make_optimizer(config.train, total_updates)
        self.mesh = parallel.make_mesh(devices)
        self.shards = config_lib.num_shards(config, self.mesh.size)
        # Each logical shard keeps capacity / S positions of its own games.
        self.buffer = replay.ReplayBuffer(config.replay.capacity // self.shards, self.env)
        self.pending_length = pending_length(config, self.env)  # L (0: none kept)
        self._host_play = None  # `host_play`, once built

    def host_play(self):
        """`make_steps`' self-play half, jitted with games and replay donated, as a CPU
        iteration runs it. Built once and shared with the copies `with_iterations` makes:
        self-play does not depend on the schedule, so a run fitted to `train.minutes`
        compiles only its gradient step again (self-play took ~20 s to compile on a 2-core
        CPU, 2-3% of the 15-minute default)."""
        if self._host_play is None:
            self._host_play = jax.jit(make_steps(self)[0], donate_argnums=(1, 2))
        return self._host_play

    def initial(self, key):
        """(train_state, games, buffer_state) for a fresh run; `games` is a `Games`, with
        nothing pending yet. The key is consumed. One compiled program (op by op, the
        network's initialisers alone were a hundred small compiles at every start)."""
        train_state, games, buffer_state = jax.jit(self._fresh)(key)
        return (parallel.replicate(self.mesh, train_state), parallel.shard(self.mesh, games),
                parallel.shard(self.mesh, buffer_state))

    def _fresh(self, key):
        k_net, k_games = jax.random.split(key)
        variables = network.init_variables(self.net, self.env, k_net)
        train_state = learner.init_train_state(variables, self.tx)
        batch = self.config.selfplay.batch_size
        games = Games(jax.vmap(self.env.init)(jax.random.split(k_games, batch)), None)
        if self.pending_length:
            games = games._replace(
                pending=selfplay.init_pending(self.env, batch, self.pending_length))
        if self.config.selfplay.get("archive_starts", 0.0):
            games = games._replace(archive=selfplay.init_archive(
                games.states, self.config.selfplay.get("archive_size", 4)))
        return train_state, games, self._empty_buffer()

    def empty_buffer(self):
        """An empty replay buffer, sharded on the mesh (`initial`'s)."""
        return parallel.shard(self.mesh, jax.jit(self._empty_buffer)())

    def _empty_buffer(self):
        example = replay.example_sample(self.env)
        # One buffer per logical shard: every leaf [S, capacity / S, ...], counters [S].
        return jax.vmap(lambda _: self.buffer.init(example))(jnp.arange(self.shards))

    def with_iterations(self, num_iterations: int) -> Setup:
        """This setup for a run of `num_iterations` (the learning-rate schedule is the only
        thing that changes; the optimizer state keeps its structure, and the CPU's compiled
        self-play, `host_play`, is shared)."""
        config = self.config.copy_and_resolve_references()
        config.train.num_iterations = int(num_iterations)
        other = copy.copy(self)
        other.config = config
        other.tx = learner.make_optimizer(
            config.train, config.train.num_iterations * config.train.updates_per_iteration)
        return other

    def train_state(self, variables):
        """A fresh TrainState (step 0, a new optimizer state) around `variables`, on every
        device of the mesh."""
        state = jax.jit(lambda v: learner.init_train_state(v, self.tx))(variables)
        return parallel.replicate(self.mesh, state)


def make_setup(config: ml_collections.ConfigDict, devices=None) -> Setup:
    """The run's `Setup` on `devices` (default: all) after the config passed
    `config.validate` and the replay buffer `config.check_memory`.

    Raises:
      ValueError: "invalid config: ..." listing what to change.
    """
    devices = list(devices if devices is not None else jax.devices())
    config_lib.validate(config, len(devices))
    setup = Setup(config, devices)
    config_lib.check_memory(config, setup.env, setup.pending_length, devices)
    return setup


def make_steps(setup: Setup):
    """The two jittable halves of an iteration.

    Returns:
      play(variables, games, buffer_state, key) -> (games, buffer_state, counts): one
        self-play window, value targets (`targets_mode`), replay writes; and
      learn_step(train_state, buffer_state, key) -> (train_state, metrics): one gradient step
        on a batch sampled from the replay.

    The data-parallel work is cut into S logical shards (`config.num_shards`), spread over the
    devices (S / n each): shard s plays games [s * B/S, (s+1) * B/S) with its own search
    key, stores them in its own replay buffer and contributes B_train / S samples, drawn
    with its own key, to every gradient step. Self-play, value targets and replay run per
    device under `shard_map`, vmapped over the device's shards; the gradient step runs
    under `jit` on the sharded batch, so XLA averages gradients over devices. Because the
    shards, not the devices, own games, keys and buffers, any device count dividing S runs
    the same computation (up to float summation order).
    """
    c = setup.config
    mesh, shards = setup.mesh, setup.shards
    local_shards = shards // mesh.size
    shard_games = c.selfplay.batch_size // shards
    shard_batch = c.train.batch_size // shards
    shard_map = functools.partial(jax.shard_map, mesh=mesh, check_vma=False)
    buf_spec = replay.BufferState(P(DATA), P(DATA), P(DATA))

    def split(x):  # [S_local * b, ...] -> [S_local, b, ...]
        return x.reshape((local_shards, -1) + x.shape[1:])

    def merge(x):  # [S_local, b, ...] -> [S_local * b, ...]
        return x.reshape((-1,) + x.shape[2:])

    def local_shard_ids():  # int32[S_local], global indices of this device's shards
        return jax.lax.axis_index(DATA) * local_shards + jnp.arange(local_shards)

    mode = targets_mode(c)

    def play_shard(variables, games, buffer_state, key, shard):
        game_ids = shard * shard_games + jnp.arange(shard_games, dtype=jnp.int32)
        traj, states = selfplay.selfplay(
            setup.search, setup.env, variables, games.states, key,
            num_plies=c.selfplay.num_plies, temperature_plies=c.selfplay.temperature_plies,
            game_ids=game_ids,
            fast_simulations=c.selfplay.get("fast_simulations", 0),
            full_search_fraction=c.selfplay.get("full_search_fraction", 1.0),
            random_plies=c.selfplay.get("random_plies", 0), archive=games.archive,
            archive_starts=c.selfplay.get("archive_starts", 0.0))
        archive = None if games.archive is None else selfplay.archive_push(games.archive, states)
        if mode == "pending":  # pending plies first, then the window: [L + T, B]
            timeline, targets, valid, pending, dropped = selfplay.settle_pending(
                games.pending, traj, c.search.discount)
            waiting = pending.length.sum()
        else:
            targets, valid = selfplay.value_targets(traj, c.search.discount, mode == "bootstrap")
            timeline, pending, dropped, waiting = traj, None, ~valid, jnp.zeros((), jnp.int32)
        q_weight = c.train.get("q_target_weight", 0.0)
        if q_weight:  # the search's root value mixed into the outcome
            targets = (1.0 - q_weight) * targets + q_weight * timeline.root_value
        samples, valid_flat = replay.flatten_trajectory(timeline, targets, valid)
        buffer_state = setup.buffer.add(buffer_state, samples, valid_flat)
        counts = _selfplay_counts(traj, valid, waiting, dropped)
        return Games(states, pending, archive), buffer_state, counts

    @functools.partial(shard_map, in_specs=(P(), P(DATA), buf_spec, P()),
                       out_specs=(P(DATA), buf_spec, P()))
    def play(variables, games, buffer_state, key):
        games, buffer_state, counts = jax.vmap(play_shard, in_axes=(None, 0, 0, None, 0))(
            variables, jax.tree.map(split, games), buffer_state, key, local_shard_ids())
        counts = jax.tree.map(lambda x: jax.lax.psum(x.sum(0), DATA), counts)
        return jax.tree.map(merge, games), buffer_state, counts

    @functools.partial(shard_map, in_specs=(buf_spec, P()), out_specs=P(DATA))
    def sample(buffer_state, key):
        def one(buffer_state, shard):
            return setup.buffer.sample(buffer_state, jax.random.fold_in(key, shard),
                                       shard_batch, augment=c.train.augment)

        return jax.tree.map(merge, jax.vmap(one)(buffer_state, local_shard_ids()))

    def learn_step(train_state, buffer_state, key):
        """One gradient step on a fresh batch from the replay shards."""
        return learner.update(train_state, sample(buffer_state, key), net=setup.net,
                              tx=setup.tx, value_weight=c.train.value_weight,
                              surprise_weight=c.train.get("surprise_weight", 0.0))

    return play, learn_step


def _preserved(config) -> list[tuple[int, int]]:
    """The checkpoints the training evaluator's `checkpoint:latest-K` opponents need kept
    (`players.preserved_steps`); none without evaluation."""
    if not config.eval.every or not config.eval.opponents:
        return []
    from az_jax.eval import external, players

    return players.preserved_steps(external.parse_opponents(config.eval.opponents),
                                   config.eval.every, config.checkpoint.every)


def forget_after(workdir, iteration: int) -> None:
    """Drops what a killed process logged after the checkpoint its run resumes from (all of
    it for a new run): metrics.jsonl's rows of later iterations (and a torn last line), and
    the training evaluator's matches of later iterations in elo.json. The resumed run plays
    those iterations again, exactly, and logs them anew; kept, they would appear twice."""
    from az_jax import plots
    from az_jax.eval import elo

    path = Path(workdir) / "metrics.jsonl"
    if path.exists():
        keep = [r for r in plots.read_metrics(workdir) if r.get("iteration", 0) <= iteration]
        if len(keep) != len(path.read_text().splitlines()):
            files.write_atomic(path, "".join(json.dumps(r) + "\n" for r in keep))
    elo.forget_after(workdir, iteration)


def replay_ready(sizes, min_size: int):
    """Whether the gradient steps may start: the buffer holds `replay.min_size` positions
    and every logical shard at least one (each shard samples its own share of the batch; an
    empty one would give rows of zeros). sizes: int32[S] (jax or numpy)."""
    return (sizes.sum() >= min_size) & (sizes > 0).all()


def make_iteration(setup: Setup):
    """Builds `iteration(train_state, games, buffer_state, key) -> (..., metrics)`: one
    jittable program, self-play then `train.updates_per_iteration` steps in a `lax.scan`
    (see `make_steps` for how the work is split over devices)."""
    c = setup.config
    play, learn_step = make_steps(setup)

    def iteration(train_state, games, buffer_state, key):
        k_play, k_learn = jax.random.split(key)
        games, buffer_state, counts = play(train_state.variables, games, buffer_state, k_play)

        def learn(ts):
            step = lambda ts, k: learn_step(ts, buffer_state, k)
            return jax.lax.scan(step, ts, jax.random.split(k_learn, c.train.updates_per_iteration))

        def wait(ts):
            _, shapes = jax.eval_shape(learn, ts)
            nan = jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)
            return ts, nan

        filled = buffer_state.size.sum()
        ready = replay_ready(buffer_state.size, c.replay.min_size)
        train_state, m = jax.lax.cond(ready, learn, wait, train_state)
        return train_state, games, buffer_state, _iteration_metrics(m, ready, counts, filled, c)

    return iteration


def make_host_iteration(setup: Setup):
    """`make_iteration`'s computation (same keys, same result up to float), with the
    gradient steps looped from Python over one jitted step.

    For the CPU: XLA's CPU backend (jax 0.10) runs backward convolutions inside a loop body
    20-30x slower than the same step jitted alone (`python -m az_jax.bench train` measures
    both), so a scanned iteration spends nearly all its time in the updates there. Games and
    replay are donated to the self-play program, as in the jitted iteration.
    """
    c = setup.config
    play = setup.host_play()
    # The step not donated: the caller may hold the params (the best network).
    step = jax.jit(make_steps(setup)[1])

    def iteration(train_state, games, buffer_state, key):
        k_play, k_learn = jax.random.split(key)
        games, buffer_state, counts = play(train_state.variables, games, buffer_state, k_play)
        filled = buffer_state.size.sum()
        ready = bool(replay_ready(buffer_state.size, c.replay.min_size))
        if ready:
            ms = []
            for k in jax.random.split(k_learn, c.train.updates_per_iteration):
                train_state, m = step(train_state, buffer_state, k)
                # One program with collectives in flight at a time: a 2-device CPU run hung
                # in the gradient all-reduce (README, Devices) with the next steps queued.
                jax.block_until_ready(train_state)
                ms.append(m)
            m = jax.tree.map(lambda *x: jnp.stack(x), *ms)
        else:
            _, shapes = jax.eval_shape(step, train_state, buffer_state, k_learn)
            m = jax.tree.map(lambda s: jnp.full((1, *s.shape), jnp.nan, s.dtype), shapes)
        return train_state, games, buffer_state, _iteration_metrics(m, ready, counts, filled, c)

    return iteration


def make_iteration_fn(setup: Setup):
    """The iteration as `train_and_evaluate` runs it: on CPU devices `make_host_iteration`,
    elsewhere `make_iteration` jitted with games and replay donated."""
    if setup.mesh.devices.flat[0].platform == "cpu":
        return make_host_iteration(setup)
    return jax.jit(make_iteration(setup), donate_argnums=(1, 2))


def _iteration_metrics(m: dict, ready, counts: dict, filled, c) -> dict:
    """Per-update metrics [U] averaged (non-finite ones ignored), plus self-play stats."""
    metrics = {k: jnp.nanmean(v) for k, v in m.items()}
    metrics["skipped"] = jnp.nansum(m["skipped"])
    metrics["updates"] = jnp.where(ready, c.train.updates_per_iteration, 0)
    metrics.update(_selfplay_stats(counts))
    metrics["buffer_size"] = filled
    return metrics


def _selfplay_counts(traj: selfplay.Trajectory, valid, pending, dropped) -> dict:
    """Sums over one shard's window (psum-able): the games that ended, and where the plies
    went. `valid` marks the plies written to the replay, `pending` (int32[]) counts those
    still waiting for their game's end, `dropped` marks those that never get a target."""
    done = traj.done
    first_won = (traj.reward > 0) == (traj.player == 0)
    return {
        "games": done.sum(),
        "moves": jnp.asarray(done.size, jnp.int32),
        "first_player_wins": (done & (traj.reward != 0) & first_won).sum(),
        "draws": (done & (traj.reward == 0)).sum(),
        "plies_added": valid.sum(dtype=jnp.int32),
        # plies searched in full (with a policy target; all of them without a playout cap)
        "plies_full_search": (traj.policy.sum(-1) > 0).sum(dtype=jnp.int32),
        "plies_pending": pending,
        "plies_dropped": dropped.sum(dtype=jnp.int32),
        "root_value_abs": jnp.abs(traj.root_value).sum(),
    }


def _selfplay_stats(counts: dict) -> dict:
    n_done = jnp.maximum(counts["games"], 1)
    return {
        "games": counts["games"],
        "moves": counts["moves"],
        "first_player_win_rate": counts["first_player_wins"] / n_done,
        "draw_rate": counts["draws"] / n_done,
        "plies_added": counts["plies_added"],
        "plies_pending": counts["plies_pending"],
        "plies_dropped": counts["plies_dropped"],
        "plies_full_search": counts["plies_full_search"],
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


# Iterations a process times (and two checkpoint writes, within 2 x checkpoint.every)
# before `train.minutes` fixes the run's length.
FIT_AFTER = 4
# Seconds between two writes of the training plots (at a checkpoint; the last checkpoint
# always writes them): matplotlib takes ~0.5 s, as much as the checkpoint itself.
PLOT_EVERY_S = 60.0


def fit_iterations(budget_s: float, elapsed_s: float, done: int, seconds: list[float],
                   cap: int, *, max_share: float = 0.0, save_s: float = 0.0) -> int:
    """How many iterations end a run within `budget_s` of wall clock (`train.minutes`).

    `done` iterations have run in `elapsed_s` (start-up and compiles included). Each
    further one is taken to cost the median of `seconds[1:]` (this process's iteration
    times; the first one compiled) plus `save_s` (its share of the checkpoint writes),
    evaluation to take up to `max_share` of the time, and the program rebuilt with the new
    schedule to compile once more (the first iteration's excess over that median). At least
    `done`, at most `cap` (train.num_iterations).
    """
    median = float(np.median(seconds[1:]))
    recompile = max(seconds[0] - median, 0.0)
    left = max(budget_s - elapsed_s - recompile, 0.0)
    per = median + save_s
    more = math.floor(left * (1.0 - max_share) / per) if per > 0 else cap
    return int(min(done + more, cap))


def _fit_length(setup: Setup, n: int, fitted_from: str, is_writer: bool, bar) -> Setup:
    """`setup` for a run of n iterations (a new schedule), logged; every process of a
    multi-host run takes process 0's n."""
    n = _from_process0(n)
    c = setup.config
    cap = c.train.num_iterations
    _log(f"train.minutes={c.train.minutes:g}: {fitted_from}, {n} iterations"
         + (f" (train.num_iterations={cap} is the most)" if n == cap else
            f" instead of train.num_iterations={cap}; the learning-rate schedule ends there"),
         is_writer, bar)
    if bar is not None:
        bar.total = n
        bar.refresh()
    return setup if n == cap else setup.with_iterations(n)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, devices=None,
                       started: float | None = None) -> dict:
    """Trains (or resumes) a run in `workdir` on `devices` (default: all).

    With `train.minutes` > 0, the run's length is fitted to that wall clock once, after
    its first iterations (`FIT_AFTER`, `fit_iterations`), and kept in its checkpoints: a
    resumed run ends where the first fit decided. A process also stops (and saves) when
    another iteration would end past the minutes. `started`: the `time.monotonic()` the
    minutes count from (train.py passes its own start; default now).

    Returns the last iteration's metrics.
    """
    lock = runs.Lock()  # process 0 holds the run's folder while it trains it
    try:
        return _train_and_evaluate(config, workdir, devices, started, lock)
    finally:
        lock.release()


def _train_and_evaluate(config, workdir, devices, started, lock: runs.Lock) -> dict:
    from az_jax import plots

    started = time.monotonic() if started is None else started
    # `.` resolved: moving the run there aside moves this process's working directory too.
    workdir = str(runs.named(Path(workdir).expanduser()))
    devices = list(devices if devices is not None else jax.devices())
    setup = make_setup(config, devices)
    env = setup.env
    is_writer = jax.process_index() == 0
    _lock(lock, workdir, is_writer)  # another process training it: all stop, none writes
    if config.log.tensorboard:  # a missing package stops every process before any write
        missing = None  # (only process 0 writes events: the others wait for its answer)
        if is_writer:
            try:
                _summary_writer_class()
            except ValueError as e:
                missing = e
        if _any_process(missing is not None):
            raise missing or ValueError("log.tensorboard=True: process 0 of this run lacks "
                                        "tensorboardX (its error says what to install)")
    restart = bool(config.checkpoint.get("restart", False))
    mismatch = None
    try:  # before anything is written: a command that describes another run stops here
        runs.check(config, workdir)
    except runs.RunMismatch as e:
        mismatch = e
    # Decided by all processes together, each having checked before process 0 moves the run
    # aside (one that checked after the move would find no run, and never reach the move's
    # barrier).
    if _any_process(mismatch is not None):
        mismatch = mismatch or runs.RunMismatch(
            f"another process of this run finds that {workdir} holds another run (its error "
            f"says why). Nothing was written.", reason="another process found it differs")
        if not restart:
            raise mismatch
    source = config.train.get("init_from", "")
    init = None  # only a new run starts from train.init_from; read it before writing
    # (a run killed before its first save too; a bad source leaves a mismatching run in place)
    if source and (mismatch is not None or not ckpt.saved_steps(workdir)):
        init = init_variables(source, setup)
    if mismatch is not None:
        _move_aside(workdir, mismatch.reason, is_writer)
    mngr = ckpt.manager(workdir, keep=config.checkpoint.keep, every=_preserved(config))

    run_key = jax.random.PRNGKey(config.seed)
    init_key, loop_key = jax.random.split(run_key)
    train_state, games, buffer_state = setup.initial(init_key)
    target = {"train_state": train_state, "games": games.states,
              "best_params": train_state.params, "best_batch_stats": train_state.batch_stats,
              **_games_items(games)}
    start = 0
    # The replay restores whenever the checkpoint has one, whatever `save_replay` says now,
    # into arrays of its own: the empty buffer is freed first where a checkpoint holds a
    # replay (holding both would take the replay's memory twice; `check_memory` counts it
    # once) and made again if none restores.
    replay_target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), buffer_state)
    if ckpt.holds_replay(mngr):
        jax.tree.map(lambda x: x.delete(), buffer_state)
        buffer_state = None
    restored = ckpt.restore_latest(mngr, target, replay_target,
                                   optional=("best_batch_stats", "pending", "archive"),
                                   required=ckpt.META_KEYS)
    why = "no checkpoint of it restores"
    if restored is not None:
        try:  # (a game whose arrays kept their shapes, but not their meaning)
            ckpt.check_env(restored[3], env, workdir)
        except ValueError as e:
            if not restart:
                raise runs.RunMismatch(
                    f"{e}. Nothing was written. To start a new run, pass another --workdir, "
                    f"or add --config.checkpoint.restart=True to move this one aside to "
                    f"{runs.aside_path(workdir)} (nothing is deleted).",
                    reason="another version of the game") from None
            restored, why = None, "its checkpoints are of another version of the game"
    # Checkpoints, none of which restores: decided together, as above.
    if _any_process(restored is None and bool(mngr.all_steps())):
        if _any_process(restored is not None):  # (before the move: it would be lost)
            raise ValueError(
                f"the processes of this run restore differently: one restores no checkpoint "
                f"in {mngr.directory}, another does. Check that every host sees the same files "
                f"under {workdir}, then run the same command again. Nothing was written.")
        if not restart:
            raise runs.RunMismatch(
                f"no checkpoint in {mngr.directory} restores with this code and config (the "
                f"warnings above say why). Nothing was written. If its files are damaged, no "
                f"command continues the run: add --config.checkpoint.restart=True to move it "
                f"aside to {runs.aside_path(workdir)} and start a new one (nothing is "
                f"deleted). Else another config or version of az_jax wrote it. "
                f"{runs.choices(workdir)}")
        if source and init is None:  # the new run starts from train.init_from, as any new
            init = init_variables(source, setup)  # run (read first: a bad one moves nothing)
        mngr.close()
        _move_aside(workdir, why, is_writer)
        mngr = ckpt.manager(workdir, keep=config.checkpoint.keep, every=_preserved(config))
    fitted = None  # the run's length under train.minutes, once decided
    older = False  # a run made before train.minutes existed
    if restored is not None:
        step, state, buf, meta = restored
        fitted = meta.get("fitted_iterations")
        older = "minutes" not in (meta.get("config") or {}).get("train", {"minutes": 0})
        # A checkpoint without pending plies (older, or saved without them) starts empty.
        if games.pending is not None and "pending" not in state:
            _log("its games' pending plies did not restore (the checkpoint holds none, or "
                 "of another length): the games play on, and the plies they played before "
                 "it are not trained", is_writer)
        train_state = state["train_state"]
        games = Games(state["games"], state.get("pending", games.pending),
                      state.get("archive", games.archive))
        # The best network (evaluation, gating). Checkpoints written before its batch
        # statistics were saved lend it the current ones.
        best = {"params": state["best_params"],
                "batch_stats": state.get("best_batch_stats", train_state.batch_stats)}
        if buf is not None:
            buffer_state = buf
        start = int(meta["iteration"])
        _log(f"resumed from {workdir} at iteration {start}", is_writer)
    else:
        if init is not None:  # a new run that starts from another run's network
            train_state = setup.train_state(init)
        best = {"params": train_state.params, "batch_stats": train_state.batch_stats}
        _log(f"new run in {workdir}: {env!r}, {len(devices)} device(s) "
             f"({devices[0].platform}), {setup.shards} data shards"
             + (f", network from {source}" if init is not None else ""), is_writer)
        if is_writer:
            Path(workdir).mkdir(parents=True, exist_ok=True)
        _lock(lock, workdir, is_writer)  # (a new folder, or the one made after a move aside)
        if is_writer:
            runs.write_config(workdir, config)
    if buffer_state is None:  # freed for a replay that did not restore: empty again
        buffer_state = setup.empty_buffer()
    first = _from_process0(start)
    if _any_process(start != first):  # every process raises alike, none waits for the others
        raise ValueError(
            f"the processes of this run restored different checkpoints (process 0: iteration "
            f"{first}, process {jax.process_index()}: {start}): one reads a checkpoint that "
            f"another cannot. Check that every host sees the same files under {workdir}, "
            f"then run the same command again.")
    if is_writer:
        forget_after(workdir, start)
        if not (Path(workdir) / "config.json").exists():  # lost: the errors point to it
            runs.write_config(workdir, config)
    meta = {"config": ckpt.config_json(config), **ckpt.env_meta(env)}
    minutes = config.train.get("minutes", 0.0)
    bar = _progress(config, start, is_writer)
    if not minutes:  # train.num_iterations rules, and is the run's length from now on: a
        # later command with a budget keeps it (a fit from the middle would cut its schedule)
        was = fitted if fitted is not None else _saved_length(restored)
        fitted = meta["fitted_iterations"] = config.train.num_iterations
        if was is not None and was != fitted and start < fitted:  # never silently
            _log(f"the run's length changes from {was} to {fitted} iterations (this "
                 f"command's train.num_iterations): its learning-rate schedule is rescaled "
                 f"to {fitted} from iteration {start} on. To keep {was}, stop and run "
                 f"again with --config.train.num_iterations={was}", is_writer, bar)
    elif older:  # fitting it now would cut its schedule short mid-run
        was = _saved_length(restored)
        fitted = meta["fitted_iterations"] = config.train.num_iterations
        changed = was is not None and was != fitted and start < fitted
        _log(f"train.minutes={minutes:g} is not applied: this run was made before "
             f"train.minutes existed, so its length is this command's train.num_iterations, "
             f"{fitted} iterations"
             + (f" (it was made with {was}: its learning-rate schedule is rescaled to "
                f"{fitted} from iteration {start} on; --config.train.num_iterations={was} "
                "keeps it)" if changed else
                " (--config.train.num_iterations=N gives it another length)"),
             is_writer, bar)
    elif fitted is not None:  # kept as it is, above this command's train.num_iterations too
        # (a length given on a command line earlier, which the config's default would cut)
        setup = _fit_length(setup, fitted, "the length this run was given", is_writer, bar)
        fitted = meta["fitted_iterations"] = setup.config.train.num_iterations
    num_iterations = setup.config.train.num_iterations
    if start >= num_iterations:  # resumed at (or past) its length: say so, not just exit
        _log(f"nothing to train: the run is at iteration {start} and its length is "
             f"{num_iterations}; --config.train.num_iterations=N with N above {start} "
             "trains on" + (" (with no --config.train.minutes beside it: a budget keeps "
                            "the run's length)" if minutes else ""), is_writer, bar)

    iteration_fn = make_iteration_fn(setup)
    evaluator = None
    if config.eval.every:
        from az_jax.eval.evaluator import TrainingEvaluator

        evaluator = TrainingEvaluator(setup, workdir)
        if restored is not None:  # the best's name on the ladder, as the checkpoint had it
            evaluator.resume(restored[3].get("best_name"))
    metrics_path = Path(workdir) / "metrics.jsonl"
    writer = _tensorboard(workdir, start) if config.log.tensorboard and is_writer else None

    last = {}
    # Seconds spent training and evaluating in this run (kept in its checkpoints: a resumed
    # process goes on from them), for eval.max_share.
    spent = restored[3] if restored is not None else {}
    train_spent = float(spent.get("train_seconds", 0.0))
    eval_spent = float(spent.get("eval_seconds", 0.0))
    seconds = []  # this process's iteration times, for train.minutes
    saves = []  # and its checkpoint writes' (with the plots, when written)
    plotted = -math.inf  # when the plots were last written
    told_skip = False
    # The evaluator's engines (Gomocup brains) get END however training ends.
    closing = contextlib.closing(evaluator) if evaluator is not None else contextlib.nullcontext()
    with _StopRequest() as stop, closing:
        # To the run's length: the fit below may shorten it, never lengthen it.
        for it in range(start, num_iterations):
            if it >= num_iterations:  # (fitted in this process, shorter)
                break
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
            train_spent += dt
            seconds.append(dt)
            # Fitted once this process has timed FIT_AFTER iterations and two checkpoint
            # writes (the first one imports and sets up more).
            if (minutes and fitted is None and len(seconds) >= FIT_AFTER
                    and (len(saves) >= 2 or len(seconds) > 2 * config.checkpoint.every)):
                save_s = min(saves, default=0.0)
                fitted = fit_iterations(
                    60 * minutes, time.monotonic() - started, it + 1, seconds,
                    config.train.num_iterations,
                    max_share=config.eval.get("max_share", 0.0) if evaluator is not None else 0.0,
                    save_s=save_s / config.checkpoint.every)
                setup = _fit_length(setup, fitted, f"{np.median(seconds[1:]):.2f} s an "
                                    f"iteration and {save_s:.2f} s a checkpoint here",
                                    is_writer, bar)
                fitted = num_iterations = setup.config.train.num_iterations
                meta["fitted_iterations"] = fitted
                if num_iterations != config.train.num_iterations:
                    iteration_fn = make_iteration_fn(setup)
            due = evaluator is not None and (it + 1) % config.eval.every == 0
            if due and not within_budget(eval_spent, train_spent,
                                         config.eval.get("max_share", 0.0)):
                due = False
                if not told_skip:
                    told_skip = True
                    _log(f"evaluation at iteration {it + 1} skipped: evaluation has taken "
                         f"{eval_spent / (eval_spent + train_spent):.0%} of the time, more than "
                         f"eval.max_share={config.eval.max_share} (later ones run when the "
                         "share allows)", is_writer, bar)
            if due:
                t_eval = time.perf_counter()
                eval_metrics, best = evaluator(train_state, best, it + 1, eval_key)
                eval_spent += time.perf_counter() - t_eval
                m.update(eval_metrics, eval_share=eval_spent / (eval_spent + train_spent))
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
            final = it + 1 == num_iterations
            # Overheads the fit could not foresee (a slow first evaluation, a busy machine)
            # end the run with the minutes, the schedule nearly done.
            time_up = bool(minutes) and not final and time_is_up(started, minutes, seconds)
            # A signal reaches each host on its own: all stop when any has one (else one host
            # would wait in the save's barrier while the others ran the next iteration).
            stopping = _any_process(stop.requested)
            if (it + 1) % config.checkpoint.every == 0 or final or stopping or time_up:
                t_save = time.monotonic()
                state = {"train_state": train_state, "games": games.states,
                         "best_params": best["params"], "best_batch_stats": best["batch_stats"],
                         **_games_items(games)}
                if evaluator is not None:
                    meta["best_name"] = evaluator.best_name
                ckpt.save(mngr, it + 1, state, dict(meta, iteration=it + 1, score=score,
                                                    train_seconds=train_spent,
                                                    eval_seconds=eval_spent),
                          buffer_state if config.checkpoint.save_replay else None, score)
                last_save = final or stopping or time_up
                if is_writer and (last_save or time.monotonic() - plotted >= PLOT_EVERY_S):
                    plots.write_training_plots(workdir)
                    plotted = time.monotonic()
                saves.append(time.monotonic() - t_save)
            if stopping and not final:
                _log(f"stopped at iteration {it + 1}; run the same command to resume",
                     is_writer, bar)
            elif time_up:
                _log(f"train.minutes={minutes:g} are up at iteration {it + 1} of "
                     f"{num_iterations}; the same command trains on to {num_iterations}",
                     is_writer, bar)
            if stopping or final or time_up:
                break
    if bar is not None:
        bar.close()
    if writer is not None:
        writer.close()
    return last


def time_is_up(started: float, minutes: float, seconds: list[float]) -> bool:
    """Whether another iteration (the median of `seconds[1:]`, this process's iteration
    times after the first) would end past `minutes` after `started` (`time.monotonic()`).
    Every process of a multi-host run takes process 0's answer."""
    per = float(np.median(seconds[1:])) if len(seconds) > 1 else 0.0
    return _from_process0(time.monotonic() - started + per > 60 * minutes)


def within_budget(eval_spent: float, train_spent: float, max_share: float) -> bool:
    """Whether a due evaluation runs under `eval.max_share`: only while evaluation so far
    has taken at most that share of the run's time so far (training + evaluation, kept
    across resumes; the run's first one always runs). 0 = no cap. Every process of a
    multi-host run takes process 0's answer (the matches are collective)."""
    return _from_process0(not max_share or eval_spent <= max_share * (eval_spent + train_spent))


def _any_process(flag: bool) -> bool:
    """Whether `flag` is set on any process of a multi-host run (the same answer on all)."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.asarray(multihost_utils.process_allgather(np.int32(bool(flag)))).any())


def _from_process0(x: T) -> T:
    """`x` (a bool or an int) as process 0 of a multi-host run has it: a decision every
    process takes alike (a host's clock decides it, and the programs are collective)."""
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return type(x)(multihost_utils.broadcast_one_to_all(np.asarray(x, np.int32)))


def init_variables(source: str, setup: Setup) -> dict:
    """The network variables named by `train.init_from`: a training workdir, a checkpoint
    directory (<workdir>/checkpoints/<iteration>) or `model:NAME` (a shipped model). The
    network must have this run's shapes and the game and observation planes must be this
    run's; its rules and board size may differ (e.g. Gomoku 9x9 freestyle -> 15x15, or ->
    exactly five), where the shapes allow: another board size needs a fully convolutional
    network.

    Raises:
      ValueError / FileNotFoundError: saying what does not fit, naming train.init_from.
    """
    where = f"train.init_from={source!r}"
    try:
        if source.startswith("model:"):
            restored = ckpt.load(model=source[len("model:"):])
        elif Path(source).name.isdigit() and Path(source).parent.name == ckpt.SUBDIR:
            restored = ckpt.load(checkpoint=source)
        else:
            restored = ckpt.load(workdir=source)
    except (ValueError, FileNotFoundError) as e:
        raise type(e)(f"{where}: {e}") from None
    if restored.env.id != setup.env.id:
        raise ValueError(f"{where}: its network plays {restored.env!r}, this run "
                         f"{setup.env!r}; start from a network of the same game")
    # Other observation planes (Connect4's threat, parity, ... planes) may still give the
    # same shapes: the network would then read each plane as another one.
    theirs, ours = ({**envs.defaults(e.id), **dict(e.params)} for e in (restored.env, setup.env))
    planes = [k for k in setup.env.observation_params if theirs.get(k) != ours.get(k)]
    if planes:
        raise ValueError(f"{where}: its network was trained on other observation planes ("
                         + ", ".join(f"env.kwargs.{k}={theirs.get(k)}" for k in planes)
                         + "; this run has " + ", ".join(str(ours.get(k)) for k in planes)
                         + "); give this run the same env.kwargs")
    want = jax.eval_shape(lambda: network.init_variables(setup.net, setup.env,
                                                         jax.random.PRNGKey(0)))
    shapes = lambda tree: {jax.tree_util.keystr(k): tuple(v.shape)
                           for k, v in jax.tree_util.tree_leaves_with_path(tree)}
    if shapes(want) != shapes(restored.variables):
        diff = sorted(set(shapes(want).items()) ^ set(shapes(restored.variables).items()))
        raise ValueError(f"{where}: its network ({restored.config.network.num_blocks} blocks "
                         f"x {restored.config.network.channels} channels, "
                         f"{restored.config.network.get('head', 'dense')} head, "
                         f"{restored.config.network.get('value_head', 'tanh')} value head, norm "
                         f"{restored.config.network.norm}) does not fit this run's "
                         f"(first differences: {diff[:4]}); give the same network.* fields")
    # Host copies: the restored arrays are committed to one device, which a run on a mesh
    # of several devices cannot take as they are.
    return jax.tree.map(np.asarray, restored.variables)


def _saved_length(restored) -> int | None:
    """The length in a restored checkpoint's config (None: no checkpoint, or none kept)."""
    if restored is None:
        return None
    n = ((restored[3].get("config") or {}).get("train") or {}).get("num_iterations")
    return n if isinstance(n, int) else None


def _lock(lock: runs.Lock, workdir: str, is_writer: bool) -> None:
    """Process 0 locks `workdir` (`runs.Lock`); where another process holds it, every
    process of the run raises the ValueError (none waits for the others)."""
    busy = None
    if is_writer:
        try:
            lock.take(workdir)
        except ValueError as e:
            busy = e
    if _any_process(busy is not None):
        raise busy or ValueError(f"process 0 of this run found another process training "
                                 f"{workdir} (its error says more); nothing was written")


def _move_aside(workdir: str, why: str, is_writer: bool) -> None:
    """`checkpoint.restart=True` on a run this command cannot continue: process 0 renames
    the workdir to `<workdir>.old-N`; every process waits for it, and raises its error
    where it cannot (a mount point)."""
    refused = None
    if is_writer:
        try:
            moved = runs.move_aside(workdir)
        except ValueError as e:
            refused = e
        else:
            _log(f"moved the run in {workdir} aside to {moved} ({why}); starting a new run",
                 is_writer)
    if _any_process(refused is not None):  # (also the barrier: every process after the move)
        raise refused or ValueError(f"process 0 of this run cannot move the run in {workdir} "
                                    f"aside (its error says why); nothing was moved")


def _games_items(games: Games) -> dict:
    """The checkpoint items of the pending plies and the archive ({} for what the run
    keeps none of)."""
    items = {"pending": games.pending, "archive": games.archive}
    return {k: v for k, v in items.items() if v is not None}


def _summary(m: dict) -> str:
    parts = [f"it {int(m['iteration']):4d}", f"{m['seconds']:.1f}s",
             f"games/s {m['games_per_s']:.0f}", f"moves/s {m['moves_per_s']:.0f}"]
    if not math.isnan(m.get("loss", math.nan)):
        parts += [f"loss {m['loss']:.3f}", f"pol {m['policy_loss']:.3f}",
                  f"val {m['value_loss']:.3f}", f"ent {m['policy_entropy']:.2f}"]
    else:
        parts.append(f"filling replay {int(m['buffer_size'])}")
    parts.append(f"p1win {m['first_player_win_rate']:.2f} draw {m['draw_rate']:.2f}")
    if m.get("moves"):  # plies written to the replay per ply played (pending: can pass 100%)
        parts.append(f"added {m['plies_added'] / m['moves']:.0%}")
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


def _tensorboard(workdir: str, start: int):
    """A tensorboardX writer for a run at iteration `start`: on resume it hides the events
    of the iterations after `start` (logged before a crash, replayed now)."""
    return _summary_writer_class()(str(Path(workdir) / "tensorboard"),
                                   purge_step=start + 1 if start else None)


def _summary_writer_class():
    """tensorboardX's SummaryWriter. Raises ValueError (train.py's one line) without it."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ValueError('log.tensorboard=True needs tensorboardX: pip install -e '
                         '".[tensorboard]", or leave --config.log.tensorboard=False') from None
    return SummaryWriter
