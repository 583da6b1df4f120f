"""Benchmarks for az_jax: `python -m az_jax.bench <subcommand> [options]`.

Subcommands:
  env   Raw environment throughput: steps/s of `jax.jit(jax.vmap(env.step))` playing random
        legal moves with auto-reset, and the same for the matching pgx game when pgx is
        installed (connect4 <-> connect_four, tictactoe <-> tic_tac_toe).

  selfplay  Bare network forward positions/s vs self-play simulations/s, network
        evaluations/s (simulations per move, plus the roots) and moves/s at the same
        batch; the ratio self-play evaluations/s over forward positions/s; compile times;
        with --devices 1,2,4 a scaling table over meshes of k devices (self-play alone and
        whole training iterations).

  train  learner.update updates/s and positions/s on sampled replay batches, compile time.

  pgx   Our self-play vs self-play written as pgx's AlphaZero example writes it, with the
        same network, simulations, batch and plies: the ratio ours/pgx.

  all   All of the above with small defaults, one JSON.

  learn  Learning per wall-clock minute: trains from scratch with train.py for --minutes,
        then the mistake rate of its checkpoints on the stratified Connect4 solver sets (or,
        for other games, the score against a fixed ladder), network alone and with search:
        learn.json and learn.png (az_jax/learn_bench.py).

Every subcommand prints the load average and the peak memory: the device's
`peak_bytes_in_use` on GPU/TPU, the process's peak RSS (host memory) on CPU.

Examples:
  python -m az_jax.bench env --env gomoku --size 15 --batch 1024
  python -m az_jax.bench env --env all --steps 500 --json bench_env.json
  python -m az_jax.bench selfplay --config configs/connect4.py
  python -m az_jax.bench selfplay --config configs/connect4.py --devices 1,2
  python -m az_jax.bench train --config configs/connect4.py
  python -m az_jax.bench pgx --config configs/connect4.py
  python -m az_jax.bench all --devices 1,2 --json bench.json
  python -m az_jax.bench learn --config configs/connect4.py --minutes 10 \
      --config.train.learning_rate=3e-3

Run `python -m az_jax.bench <subcommand> --help` for the options of each.

Adding a subcommand: write `_<name>_args(parser)` (its options) and `run_<name>(args) -> dict`
(does the work, prints a table, returns a JSON-able result), then add one entry to
`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import envs
from az_jax import config as config_lib
from az_jax import learn_bench

# Our env id -> the pgx env id of the same game, timed side by side when pgx is installed.
PGX_MATCH = {"connect4": "connect_four", "tictactoe": "tic_tac_toe"}


# ------------------------------------------------------------------------------- env
def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a cheap, well-mixed uint32 -> uint32 bijection."""
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def random_legal(key: jax.Array, mask: jax.Array, tries: int = 16) -> jax.Array:
    """A uniformly random legal action per game, cheap enough not to swamp an env step.

    Each game draws `tries` candidate actions (hashes of one random word per game; the
    multiply-shift maps them to [0, A) with a bias below A / 2**16) and keeps the first legal
    one, which is uniform over the legal actions. Only if some game found none (few legal
    moves left) does a batch-wide `lax.cond` pay for the full pass: a random priority per
    action and the legal action of highest priority. `jax.random.categorical` would instead
    draw A Gumbels per game, and on CPU a per-game `argmax`/`cumsum` over A costs more than
    a Gomoku step; the timings would measure the sampler, not the env.

    Args:
      key: consumed.
      mask: bool[B, A], at least one True per row; A < 1024.
      tries: candidates per game before the full pass.
    Returns:
      int32[B].
    """
    batch, num_actions = mask.shape
    seed = jax.random.bits(key, (batch, 1), jnp.uint32)
    draws = _fmix32(seed + jnp.arange(tries, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9))
    cand = ((draws >> 16).astype(jnp.int32) * num_actions) >> 16  # [B, tries] in [0, A)
    ok = jnp.take_along_axis(mask, cand, axis=1)
    action, found = cand[:, -1], ok[:, -1]
    for t in reversed(range(tries - 1)):  # unrolled: the first legal candidate wins
        action = jnp.where(ok[:, t], cand[:, t], action)
        found = found | ok[:, t]

    def full_pass():
        ids = jnp.arange(num_actions, dtype=jnp.uint32)
        priority = _fmix32(ids * jnp.uint32(0x632BE5AB) + (seed ^ jnp.uint32(0x5BD1E995)))
        packed = (priority >> 11).astype(jnp.int32) << 10 | ids.astype(jnp.int32)
        best = jnp.max(jnp.where(mask, packed, -1), axis=-1) & 1023
        return jnp.where(found, action, best)

    return jax.lax.cond(jnp.all(found), lambda: action, full_pass)


def _reset_where(done: jax.Array, fresh, state):
    """Per game, `fresh` (one unbatched state) where `done` else `state` (batched)."""

    def pick(a, b):
        return jnp.where(done.reshape(done.shape + (1,) * (b.ndim - 1)), a, b)

    return jax.tree.map(pick, fresh, state)


def make_env_loop(env: Any, batch: int, steps: int) -> Callable:
    """Builds the timed program for any pgx-shaped env (ours or pgx's).

    Args:
      env: has `init(key)` and `step(state, action)`; states have `legal_action_mask`,
        `terminated` and `truncated`.
      batch: games played side by side (B).
      steps: plies per call, scanned inside one jitted program.
    Returns:
      `run(state, fresh, key) -> (state, finished)`: plays `steps` batched plies of random
      legal moves, replacing every finished game by `fresh` (one unbatched initial state);
      `finished` int32[] counts the games that ended. Not jitted yet, so that its compile
      time can be measured.
    """
    step = jax.vmap(env.step)

    def run(state, fresh, key):
        def ply(carry, key):
            state, finished = carry
            state = step(state, random_legal(key, state.legal_action_mask))
            done = state.terminated | state.truncated
            state = _reset_where(done, fresh, state)
            return (state, finished + done.sum(dtype=jnp.int32)), None

        keys = jax.random.split(key, steps)
        (state, finished), _ = jax.lax.scan(ply, (state, jnp.int32(0)), keys)
        return state, finished

    return run


def time_env(env: Any, batch: int, steps: int, repeats: int, seed: int = 0) -> dict:
    """Times `make_env_loop(env, batch, steps)`.

    Returns:
      dict with compile_s (lowering + XLA compile of the whole scan), run_s (the best of
      `repeats` calls), steps_per_s = batch * steps / run_s, and games_per_s.
    """
    run = make_env_loop(env, batch, steps)
    key_init, key_run = jax.random.split(jax.random.PRNGKey(seed))
    fresh = jax.jit(env.init)(key_init)
    state = jax.jit(jax.vmap(env.init))(jax.random.split(key_init, batch))
    t0 = time.perf_counter()
    compiled = jax.jit(run).lower(state, fresh, key_run).compile()
    compile_s = time.perf_counter() - t0

    state, _ = jax.block_until_ready(compiled(state, fresh, key_run))  # warm-up
    best, cpu, finished = float("inf"), 0.0, 0
    for key in jax.random.split(key_run, repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        state, done = jax.block_until_ready(compiled(state, fresh, key))
        seconds = time.perf_counter() - t0
        if seconds < best:
            best, cpu, finished = seconds, time.process_time() - c0, int(done)
    return {
        "batch": batch,
        "steps": steps,
        "compile_s": compile_s,
        "run_s": best,
        "cpu_s": cpu,  # process CPU time of that run (all threads): > run_s when parallel
        "steps_per_s": batch * steps / best,
        "games_per_s": finished / best,
    }


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env",
        default="all",
        help=f"env id, one of {', '.join(envs.registered())}, or 'all' (default)",
    )
    p.add_argument(
        "--size", type=int, default=None, help="board size, passed to envs that take one (gomoku)"
    )
    p.add_argument("--rule", default=None, help="rule, passed to envs that take one (gomoku)")
    p.add_argument("--batch", type=int, default=1024, help="games side by side (default 1024)")
    p.add_argument(
        "--steps", type=int, default=1000, help="batched plies per timed call (default 1000)"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed calls after one warm-up; the best is reported (default 3)",
    )
    p.add_argument("--no-pgx", action="store_true", help="skip the pgx comparison")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results here")


def _make_ours(env_id: str, args: argparse.Namespace):
    """Builds our env, passing --size/--rule only to envs that take them."""
    accepted = envs.make(env_id).params
    given = {"size": args.size, "rule": args.rule}
    return envs.make(env_id, **{k: v for k, v in given.items() if v is not None and k in accepted})


def run_env(args: argparse.Namespace) -> dict:
    """The `env` subcommand: times each env (and its pgx twin) and prints a table."""
    if args.env != "all" and args.env not in envs.registered():
        raise SystemExit(f"unknown --env {args.env!r}; choose from {envs.registered()} or all")
    ids = envs.registered() if args.env == "all" else [args.env]
    try:
        import pgx
    except ImportError:
        pgx = None

    rows = []
    for env_id in ids:
        try:
            env = _make_ours(env_id, args)
        except (ImportError, AttributeError) as err:  # registered but not written yet
            print(f"skipping {env_id}: {err}", file=sys.stderr)
            continue
        except ValueError as err:  # a bad --size / --rule: the env says what it accepts
            raise SystemExit(f"{env_id}: {err}") from None
        result = time_env(env, args.batch, args.steps, args.repeats, args.seed)
        rows.append({"env": env_id, "impl": "az_jax", "params": env.params, **result})
        if pgx is not None and not args.no_pgx and env_id in PGX_MATCH:
            pgx_id = PGX_MATCH[env_id]
            result = time_env(pgx.make(pgx_id), args.batch, args.steps, args.repeats, args.seed)
            rows.append({"env": pgx_id, "impl": "pgx", "params": {}, **result})
            rows[-2]["ours_over_pgx"] = rows[-2]["steps_per_s"] / result["steps_per_s"]

    out = {"subcommand": "env", **machine(), "results": rows}
    _print_machine(out)
    _print_env_table(rows)
    out.update(peak_memory())
    _print_memory(out)
    _write_json(args.json, out)
    return out


def _print_env_table(rows: list[dict]) -> None:
    head = (
        f"{'env':<34} {'impl':<7} {'batch':>6} {'steps':>6} {'compile s':>9} "
        f"{'steps/s':>10} {'games/s':>9} {'ours/pgx':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        name = r["env"] + "".join(f" {k}={v}" for k, v in r["params"].items())
        ratio = f"{r['ours_over_pgx']:.2f}x" if "ours_over_pgx" in r else ""
        print(
            f"{name:<34} {r['impl']:<7} {r['batch']:>6} {r['steps']:>6} "
            f"{r['compile_s']:>9.2f} {_si(r['steps_per_s']):>10} {_si(r['games_per_s']):>9} "
            f"{ratio:>8}"
        )


def _si(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.1f}"



# ---------------------------------------------------------------------------- common
def load_average() -> float:
    """The 1-minute load average (nan where the OS has none): other work slows timings."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def peak_memory() -> dict:
    """The peak memory of this process so far, on the device where JAX reports it.

    Returns:
      {"peak_memory_bytes": int, "peak_memory_kind": "device" | "host"}. "device" is the
      largest `memory_stats()["peak_bytes_in_use"]` over the devices (GPU/TPU); CPU devices
      have no `memory_stats()`, so there it is the process's peak resident set size
      (`resource.getrusage`), labelled "host". Both are peaks since the process started,
      not of one measurement.
    """
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.devices()]
    peaks = [p for p in peaks if p is not None]
    if peaks:
        return {"peak_memory_bytes": int(max(peaks)), "peak_memory_kind": "device"}
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return {"peak_memory_bytes": int(rss * scale), "peak_memory_kind": "host"}


def machine() -> dict:
    """What the timings were taken on (JSON-able)."""
    return {
        "jax": jax.__version__,
        "platform": jax.devices()[0].platform,
        "device": str(jax.devices()[0].device_kind),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "load_average": load_average(),
    }


def _print_machine(m: dict) -> None:
    print(f"jax {m['jax']} on {m['device']} x{m['device_count']}, {m['cpu_count']} CPUs, "
          f"load average {m['load_average']:.1f} (other work slows the timings)")


def _print_memory(r: dict) -> None:
    kind = {"device": "device memory (peak_bytes_in_use)",
            "host": "host memory (process peak RSS; the CPU backend has no memory_stats)"}
    print(f"  peak {kind[r['peak_memory_kind']]}: {r['peak_memory_bytes'] / 2**20:.0f} MiB")


def _write_json(path: str | None, result: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)


def _best_time(fn, args, repeats: int) -> tuple[float, float]:
    """(compile + first call seconds, best of `repeats` timed calls)."""
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return first, best


def _time_interleaved(calls: list[tuple[Callable, tuple]], repeats: int) -> list[dict]:
    """Times several programs in turns, so that a change of the machine's load hits all alike.

    Each `(fn, args)` is called once first (compile + one run), then all are called in
    round-robin for `repeats` rounds.
    Returns:
      per call {"compile_s": first call minus the best, "best_s": the best wall time,
      "cpu_s": the smallest process CPU time of a call (all threads), "times_s": the wall
      time of every round}.
    """
    out = []
    for fn, args in calls:
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append({"first_s": time.perf_counter() - t, "best_s": math.inf, "cpu_s": math.inf,
                    "times_s": []})
    for _ in range(repeats):
        for (fn, args), r in zip(calls, out, strict=True):
            t, cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(*args))
            r["times_s"].append(time.perf_counter() - t)
            r["best_s"] = min(r["best_s"], r["times_s"][-1])
            r["cpu_s"] = min(r["cpu_s"], time.process_time() - cpu)
    for r in out:
        r["compile_s"] = r.pop("first_s") - r["best_s"]
    return out


def load_config(args: argparse.Namespace):
    """The --config file with the command line's --config.a.b=v overrides applied
    (`config.load`); a bad file, field or value exits with one paragraph."""
    try:
        return config_lib.load(args.config, getattr(args, "config_overrides", []))
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def _config_args(p: argparse.ArgumentParser, *, plies: bool = True) -> None:
    """Options shared by the subcommands that take a training config."""
    p.add_argument("--config", default="configs/connect4.py",
                   help="training config file; override fields with --config.a.b=value")
    p.add_argument("--batch", type=int, default=None,
                   help="games side by side (default: the config's selfplay.batch_size)")
    p.add_argument("--sims", type=int, default=None,
                   help="simulations per move (default: the config's)")
    if plies:
        p.add_argument("--plies", type=int, default=8, help="plies per timed self-play call")
    p.add_argument("--repeats", type=int, default=3, help="timed calls (best is reported)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")


def _device_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected device counts like 1,2,4, got {text!r}")
    return counts


def _sized_config(args: argparse.Namespace):
    """(config with its overrides, --batch and --sims applied, batch, simulations)."""
    c = load_config(args)
    if args.batch:
        c.selfplay.batch_size = args.batch
    if args.sims:
        c.search.num_simulations = args.sims
    return c, c.selfplay.batch_size, c.search.num_simulations


def _net_name(c) -> str:
    return f"{c.network.num_blocks}x{c.network.channels} {c.network.dtype}"


# -------------------------------------------------------------------------- selfplay
def _selfplay_args(p: argparse.ArgumentParser) -> None:
    _config_args(p)
    p.add_argument("--devices", type=_device_counts, default=None, metavar="1,2,4",
                   help="also time self-play and whole training iterations on meshes of the "
                        "first k devices, for each k (on CPU the bench presents the cores as "
                        "that many devices when run as `python -m az_jax.bench`)")


def make_selfplay_program(env, search_fn, c, plies: int,
                          reuse_root: bool | None = None) -> Callable:
    """`play(variables, states, key, game_ids) -> (Trajectory, states)`, as the trainer calls
    selfplay (game_ids a traced input, greedy late moves from Gumbel search). Not jitted."""
    from az_jax import selfplay

    def play(variables, states, key, game_ids=None):
        return selfplay.selfplay(search_fn, env, variables, states, key, num_plies=plies,
                                 temperature_plies=c.selfplay.temperature_plies,
                                 greedy_from_search=c.search.policy == "gumbel",
                                 game_ids=game_ids, reuse_root=reuse_root)

    return play


def run_selfplay(args: argparse.Namespace) -> dict:
    """Bare network forward vs self-play with search at the same batch on one device, and
    with --devices the trainer's iteration on meshes of k devices (`run_scaling`)."""
    from az_jax import network, search, selfplay

    c, batch, sims = _sized_config(args)
    env = envs.make(c.env.id, **c.env.kwargs)
    net = network.make_network(c.network, env)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    search_fn = search.make_search(env, net, c.search)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(1), batch))
    # Once per simulation, and at the root: once per window where the env is deterministic
    # (the played child's evaluation is reused), else once per move.
    evals = selfplay.network_calls(args.plies, sims, env.deterministic)  # batch B each

    @jax.jit
    def forward(variables, obs, mask):
        def body(acc, i):  # the input changes every call: nothing is hoisted
            logits, value = net.apply(variables, obs + i * 1e-6, mask)
            return acc + value.sum() + logits[:, 0].sum(), None
        return jax.lax.scan(body, 0.0, jnp.arange(evals, dtype=jnp.float32))[0]

    play = jax.jit(make_selfplay_program(env, search_fn, c, args.plies))
    game_ids = jnp.arange(batch, dtype=jnp.int32)
    # The whole trajectory is returned, as training uses it: nothing is dead code.
    f, p = _time_interleaved(
        [(forward, (variables, states.observation, states.legal_action_mask)),
         (play, (variables, states, jax.random.PRNGKey(2), game_ids))], args.repeats)
    f_best, p_best = f["best_s"], p["best_s"]
    result = {
        "subcommand": "selfplay", **machine(),
        "config": args.config, "env": repr(env), "batch": batch, "simulations": sims,
        "plies": args.plies, "network": _net_name(c), "devices_used": 1,
        "forward_positions_per_s": batch * evals / f_best,
        "selfplay_simulations_per_s": batch * args.plies * sims / p_best,
        "selfplay_evaluations_per_s": batch * evals / p_best,
        "selfplay_moves_per_s": batch * args.plies / p_best,
        "forward_compile_s": f["compile_s"], "selfplay_compile_s": p["compile_s"],
    }
    result["ratio_selfplay_over_forward"] = (result["selfplay_evaluations_per_s"]
                                             / result["forward_positions_per_s"])
    print(f"{result['env']} on {result['device']}, batch {batch}, {sims} simulations, "
          f"{args.plies} plies, network {result['network']} "
          f"(load {result['load_average']:.1f})")
    print(f"  network forward      {_si(result['forward_positions_per_s'])} positions/s "
          f"(compile {result['forward_compile_s']:.1f}s)")
    print(f"  self-play + search   {_si(result['selfplay_simulations_per_s'])} simulations/s, "
          f"{_si(result['selfplay_evaluations_per_s'])} network evaluations/s "
          f"({evals} calls of batch {batch} per window), "
          f"{_si(result['selfplay_moves_per_s'])} moves/s "
          f"(compile {result['selfplay_compile_s']:.1f}s)")
    print(f"  ratio self-play evaluations/s over forward positions/s  "
          f"{result['ratio_selfplay_over_forward']:.2f}  (1.0: search and env cost nothing)")
    if args.devices:
        result["scaling"] = run_scaling(c, args.devices, args.plies, args.repeats)
        _print_scaling(result["scaling"], batch, sims, args.plies)
    result.update(peak_memory())
    _print_memory(result)
    _write_json(args.json, result)
    return result


def time_on_mesh(config, k: int, plies: int, repeats: int) -> dict:
    """Times the trainer's own iteration on a mesh of the first k devices.

    `trainer.make_iteration_fn` builds it as the trainer does (one jitted program with games
    and replay donated; on CPU the updates looped from the host) and it is called on the
    same inputs in two ways: with an empty replay buffer it plays
    and stores (self-play, value targets, replay writes) but does not train, because
    `replay.min_size` is set to the capacity (raised above batch * plies if needed); with
    a full buffer it also runs `train.updates_per_iteration` updates on `train.batch_size`
    sampled positions. `selfplay.num_plies` is set to `plies`.
    """
    from az_jax import trainer

    c = config.copy_and_resolve_references()
    c.selfplay.num_plies = plies
    batch = c.selfplay.batch_size
    shards = c.get("parallel", {}).get("shards", 0) or 1
    unit = math.lcm(8, k, shards)  # keeps the capacity divisible by any shard count
    c.replay.capacity = max(c.replay.capacity, -(-(batch * plies + 1) // unit) * unit)
    c.replay.min_size = c.replay.capacity  # never reached from an empty buffer in one call
    setup = trainer.make_setup(c, jax.devices()[:k])
    train_state, games, empty = setup.initial(jax.random.PRNGKey(0))
    shardings = jax.tree.map(lambda x: x.sharding, (games, empty))
    fill = jax.jit(lambda b: b._replace(size=jnp.full_like(b.size, setup.buffer.capacity)),
                   out_shardings=shardings[1])
    full = fill(empty)
    copy = jax.jit(lambda t: jax.tree.map(jnp.copy, t), out_shardings=shardings)
    iteration = trainer.make_iteration_fn(setup)

    def timed(buffer_state, key):
        inputs = jax.block_until_ready(copy((games, buffer_state)))  # donated: fresh copies
        t = time.perf_counter()
        metrics = jax.block_until_ready(iteration(train_state, *inputs, key)[3])
        return time.perf_counter() - t, float(metrics["updates"])

    keys = iter(jax.random.split(jax.random.PRNGKey(1), 2 * repeats + 1))
    first, _ = timed(empty, next(keys))
    play, learn = [], []
    for _ in range(repeats):  # in turns, so that a change of load hits both alike
        play.append(timed(empty, next(keys)))
        learn.append(timed(full, next(keys)))
    if any(u for _, u in play) or not all(u for _, u in learn):
        raise RuntimeError("bench: the empty-buffer calls trained or the full-buffer calls "
                           "did not; the trainer's replay.min_size logic changed?")
    p_best, i_best = min(t for t, _ in play), min(t for t, _ in learn)
    updates = learn[0][1]
    return {
        "devices": k, "batch": batch, "games_per_device": batch // k,
        "shards": setup.shards,
        "selfplay_s": p_best,
        "selfplay_simulations_per_s": batch * plies * c.search.num_simulations / p_best,
        "selfplay_moves_per_s": batch * plies / p_best,
        "iteration_s": i_best,
        "iteration_moves_per_s": batch * plies / i_best,
        "iteration_updates_per_s": updates / i_best,
        "update_phase_s": i_best - p_best,  # the iteration minus its self-play part
        "compile_s": first - p_best,
        "updates_per_iteration": updates,
        "train_batch": c.train.batch_size,
    }


def run_scaling(config, counts: list[int], plies: int, repeats: int) -> list[dict]:
    """`time_on_mesh` for each device count k; counts the machine cannot run are skipped
    with a note (too few devices, or a batch that k does not divide)."""
    rows = []
    for k in counts:
        if k > jax.device_count():
            note = (f"only {jax.device_count()} device(s); on CPU run `python -m az_jax.bench` "
                    f"(or set XLA_FLAGS=--xla_force_host_platform_device_count={max(counts)} "
                    "before JAX starts)")
            rows.append({"devices": k, "skipped": note})
            continue
        try:
            rows.append(time_on_mesh(config, k, plies, repeats))
        except ValueError as err:  # config.validate: sizes k does not divide
            rows.append({"devices": k, "skipped": str(err).replace("\n", " ")})
    done = [r for r in rows if "skipped" not in r]
    if done:
        base = done[0]
        for r in done:
            r["speedup_selfplay"] = base["selfplay_s"] / r["selfplay_s"]
            r["speedup_iteration"] = base["iteration_s"] / r["iteration_s"]
            r["speedup_base_devices"] = base["devices"]
    return rows


def _print_scaling(rows: list[dict], batch: int, sims: int, plies: int) -> None:
    done = [r for r in rows if "skipped" not in r]
    base = done[0]["devices"] if done else 1
    updates = f"{done[0]['updates_per_iteration']:.0f}" if done else "?"
    train_batch = done[0]["train_batch"] if done else "?"
    print(f"scaling over devices: the trainer's iteration (trainer.make_iteration_fn) on the "
          f"first k devices, batch {batch} "
          f"split over the mesh, {sims} simulations, {plies} plies; self-play = an iteration "
          f"without updates (self-play + replay writes), iteration = the same + {updates} "
          f"updates of {train_batch}; speedups vs {base} device(s)")
    head = (f"  {'devices':>7} {'sims/s':>9} {'moves/s':>9} {'speedup':>8} {'iter s':>8} "
            f"{'iter moves/s':>12} {'updates/s':>9} {'speedup':>8} {'compile s':>9}")
    print(head)
    print("  " + "-" * (len(head) - 2))
    for r in rows:
        if "skipped" in r:
            print(f"  {r['devices']:>7} skipped: {r['skipped']}")
            continue
        print(f"  {r['devices']:>7} {_si(r['selfplay_simulations_per_s']):>9} "
              f"{_si(r['selfplay_moves_per_s']):>9} {r['speedup_selfplay']:>7.2f}x "
              f"{r['iteration_s']:>8.3f} {_si(r['iteration_moves_per_s']):>12} "
              f"{r['iteration_updates_per_s']:>9.1f} {r['speedup_iteration']:>7.2f}x "
              f"{r['compile_s']:>9.1f}")


_SELFPLAY_DESCRIPTION = """\
Times, at the self-play batch and on one device: the bare network forward (a jitted scan of
as many calls as self-play makes, on a changing input) in positions/s, and vectorized
self-play with mctx search over the real env (selfplay.selfplay over --plies plies, called
as the trainer calls it) in simulations/s (= batch * plies * simulations / seconds), network
evaluations/s (= batch * calls / seconds; calls = plies * simulations + 1 with a
deterministic env, whose roots reuse the previous search's evaluation, else plies *
(simulations + 1)) and moves/s. The ratio is self-play network evaluations/s over bare
forward positions/s: 1.0 means the search and the env cost nothing. Compile times and peak
memory (device, or host RSS on CPU) are reported. With --devices 1,2,4 it also times the
trainer's own iteration on meshes of the first k devices, built as the trainer builds it
(trainer.make_iteration_fn: one jitted program, or on CPU the updates looped from the
host), without updates (self-play + replay writes: sims/s, moves/s) and with them
(iteration s, updates/s), and prints a scaling table with speedups over the first k."""


# ----------------------------------------------------------------------------- train
def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="configs/connect4.py",
                   help="training config file; override fields with --config.a.b=value")
    p.add_argument("--batch", type=int, default=None,
                   help="positions per update (default: the config's train.batch_size)")
    p.add_argument("--updates", type=int, default=None,
                   help="updates per timed call (default: train.updates_per_iteration)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls (best is reported)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")


def run_train(args: argparse.Namespace) -> dict:
    """Gradient updates/s of `learner.update` on sampled replay batches, one device."""
    from az_jax import learner, network, replay

    c = load_config(args)
    batch = args.batch or c.train.batch_size
    updates = args.updates or c.train.updates_per_iteration
    env = envs.make(c.env.id, **c.env.kwargs)
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

    def step(ts, b):
        return learner.update(ts, b, net=net, tx=tx, value_weight=c.train.value_weight)

    update = jax.jit(step)

    def loop(train_state, batches):  # one jitted update per call, from Python
        for b in batches:
            train_state, metrics = update(train_state, b)
        return train_state, metrics

    scan = jax.jit(lambda ts, batches: jax.lax.scan(step, ts, batches))  # as the trainer

    s_first, s_best = _best_time(sample, (buffer_state, k_sample), args.repeats)
    batches = jax.block_until_ready(sample(buffer_state, k_sample))
    split = [jax.tree.map(lambda x, i=i: x[i], batches) for i in range(updates)]
    t_loop, t_scan = _time_interleaved([(loop, (train_state, split)),
                                        (scan, (train_state, batches))], args.repeats)
    result = {
        "subcommand": "train", **machine(),
        "config": args.config, "env": repr(env), "network": _net_name(c),
        "optimizer": c.train.optimizer, "batch": batch, "updates": updates,
        "augment": bool(c.train.augment),
        "train_updates_per_s": updates / t_loop["best_s"],
        "train_positions_per_s": updates * batch / t_loop["best_s"],
        "train_compile_s": t_loop["compile_s"],
        "train_scan_updates_per_s": updates / t_scan["best_s"],
        "train_scan_compile_s": t_scan["compile_s"],
        "sample_batches_per_s": updates / s_best,
        "sample_compile_s": s_first - s_best,
    }
    result["scan_over_calls"] = (result["train_scan_updates_per_s"]
                                 / result["train_updates_per_s"])
    print(f"{result['env']} on {result['device']}, network {result['network']}, "
          f"{result['optimizer']}, batch {batch} (load {result['load_average']:.1f})")
    print(f"  jit(learner.update)  {result['train_updates_per_s']:.1f} updates/s, "
          f"{_si(result['train_positions_per_s'])} positions/s "
          f"({updates} calls; compile {result['train_compile_s']:.1f}s)")
    print(f"  lax.scan of updates  {result['train_scan_updates_per_s']:.1f} updates/s "
          f"(as trainer.make_iteration runs them; compile {result['train_scan_compile_s']:.1f}s)"
          f": {result['scan_over_calls']:.2f}x the separate calls")
    if result["scan_over_calls"] < 0.5:
        print("  warning: updates inside lax.scan run far slower than separate calls; on XLA "
              "CPU, backward convolutions inside a loop body are slow (README, Benchmarks)")
    print(f"  replay sampling      {result['sample_batches_per_s']:.1f} batches/s "
          f"(augment={result['augment']}; compile {result['sample_compile_s']:.1f}s)")
    result.update(peak_memory())
    _print_memory(result)
    _write_json(args.json, result)
    return result


_TRAIN_DESCRIPTION = """\
Times training on one device: --updates steps of learner.update (forward + backward + optax
step), each on its own batch of --batch positions sampled (with random symmetries when
train.augment) from a full replay buffer of random positions, run two ways: a jitted update
called once per step, and one jitted lax.scan over the steps as trainer.make_iteration runs
them. Reports updates/s and positions/s of both and their ratio; the replay sampling is
timed separately. Compile times and peak memory are reported."""


# ------------------------------------------------------------------------------- pgx
def _pgx_args(p: argparse.ArgumentParser) -> None:
    _config_args(p)
    p.add_argument("--quick", action="store_true",
                   help="time only pgx-style and ours as trained (2 compiles instead of 5)")


def make_pgx_selfplay(pgx_env, apply_fn, *, batch: int, plies: int, num_simulations: int,
                      max_num_considered_actions: int) -> Callable:
    """Self-play written the way pgx's AlphaZero example writes it (examples/alphazero/
    train.py in sotetsuk/pgx): `vmap(env.step)` inside `recurrent_fn`, logits masked with
    `finfo.min`, reward of the player who moved, discount -1 (0 at the end),
    `mctx.gumbel_muzero_policy`, and a `lax.scan` over plies with `pgx.experimental.auto_reset`.

    Args:
      pgx_env: a pgx two-player env.
      apply_fn: `(variables, obs float32[B, ...]) -> (logits [B, A], value [B])`.
    Returns:
      `play(variables, states, key) -> (states, trajectory)`, not jitted.
    """
    import mctx
    from pgx.experimental import auto_reset

    def evaluate(variables, state):
        logits, value = apply_fn(variables, state.observation.astype(jnp.float32))
        logits = logits - jnp.max(logits, axis=-1, keepdims=True)
        return jnp.where(state.legal_action_mask, logits, jnp.finfo(logits.dtype).min), value

    def recurrent_fn(variables, key, action, state):
        del key
        player = state.current_player
        state = jax.vmap(pgx_env.step)(state, action)
        logits, value = evaluate(variables, state)
        out = mctx.RecurrentFnOutput(
            reward=state.rewards[jnp.arange(state.rewards.shape[0]), player],
            discount=jnp.where(state.terminated, 0.0, -1.0),
            prior_logits=logits,
            value=jnp.where(state.terminated, 0.0, value),
        )
        return out, state

    step_reset = jax.vmap(auto_reset(pgx_env.step, pgx_env.init))

    def play(variables, states, key):
        def step_fn(state, key):
            k_search, k_step = jax.random.split(key)
            logits, value = apply_fn(variables, state.observation.astype(jnp.float32))
            root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
            out = mctx.gumbel_muzero_policy(
                params=variables, rng_key=k_search, root=root, recurrent_fn=recurrent_fn,
                num_simulations=num_simulations, invalid_actions=~state.legal_action_mask,
                qtransform=mctx.qtransform_completed_by_mix_value, gumbel_scale=1.0,
                max_num_considered_actions=max_num_considered_actions)
            actor = state.current_player
            nxt = step_reset(state, out.action, jax.random.split(k_step, batch))
            record = (state.observation, out.action_weights,
                      nxt.rewards[jnp.arange(batch), actor], nxt.terminated,
                      jnp.where(nxt.terminated, 0.0, -1.0))
            return nxt, record

        return jax.lax.scan(step_fn, states, jax.random.split(key, plies))

    return play


def run_pgx(args: argparse.Namespace) -> dict:
    """Our self-play vs pgx-example-style self-play, same network, sims, batch and plies."""
    try:
        import pgx
    except ImportError:
        print("pgx is not installed: skipping the pgx comparison (pip install -e \".[pgx]\")")
        return {"subcommand": "pgx", "skipped": "pgx not installed"}
    from az_jax import network, search, selfplay

    c, batch, sims = _sized_config(args)
    if c.env.id not in PGX_MATCH:
        raise SystemExit(f"error: no pgx twin of {c.env.id!r}; pgx comparison needs one of "
                         f"{', '.join(PGX_MATCH)}")
    pgx_id = PGX_MATCH[c.env.id]
    ours = envs.make(c.env.id, **c.env.kwargs)
    adapter = envs.make(f"pgx:{pgx_id}")  # pgx's game on our protocol: pgx's observation
    pgx_env = pgx.make(pgx_id)
    considered = min(c.search.max_num_considered_actions, ours.num_actions)
    keys = jax.random.split(jax.random.PRNGKey(1), batch)
    game_ids = jnp.arange(batch, dtype=jnp.int32)
    plies = args.plies

    # Each entry: (jitted call, its arguments, network calls of batch B per window).
    def ours_call(env, with_ids, reuse_root=None):
        net = network.make_network(c.network, env)
        variables = network.init_variables(net, env, jax.random.PRNGKey(0))
        reuse_root = env.deterministic if reuse_root is None else reuse_root
        play = jax.jit(make_selfplay_program(env, search.make_search(env, net, c.search), c,
                                             plies, reuse_root))
        states = jax.vmap(env.init)(keys)
        inputs = (variables, states, jax.random.PRNGKey(2)) + ((game_ids,) if with_ids else ())
        return play, inputs, selfplay.network_calls(plies, sims, reuse_root)

    # pgx style, with our ResNet on pgx's observation (the same network as on the adapter).
    net = network.make_network(c.network, adapter)
    variables = network.init_variables(net, adapter, jax.random.PRNGKey(0))
    apply_fn = lambda v, obs: net.apply(v, obs, None, train=False)
    pgx_play = jax.jit(make_pgx_selfplay(pgx_env, apply_fn, batch=batch, plies=plies,
                                         num_simulations=sims,
                                         max_num_considered_actions=considered))
    calls = {
        "pgx-style": (pgx_play, (variables, jax.vmap(pgx_env.init)(keys),
                                 jax.random.PRNGKey(2)),
                      selfplay.network_calls(plies, sims, reuse_root=False)),
        f"ours {c.env.id}, game_ids (as trained)": ours_call(ours, True),
    }
    if not args.quick:
        calls[f"ours {c.env.id}, no game_ids"] = ours_call(ours, False)
        calls[f"ours pgx:{pgx_id} adapter, game_ids"] = ours_call(adapter, True)
        # Every root evaluated afresh, as pgx-style does: what reusing the child's saves.
        calls[f"ours {c.env.id}, game_ids, fresh roots"] = ours_call(ours, True, False)

    rows = []
    timings = _time_interleaved([call[:2] for call in calls.values()], args.repeats)
    for (name, (_, _, calls_b)), t in zip(calls.items(), timings, strict=True):
        best = t["best_s"]
        rows.append({"impl": name, "run_s": best, "cpu_s": t["cpu_s"],
                     "compile_s": t["compile_s"], "moves_per_s": batch * plies / best,
                     "simulations_per_s": batch * plies * sims / best,
                     "network_calls": calls_b, "evaluations_per_s": batch * calls_b / best})
    pgx_times = np.asarray(timings[0]["times_s"])
    for r, t in zip(rows, timings, strict=True):
        r["over_pgx"] = r["moves_per_s"] / rows[0]["moves_per_s"]
        r["over_pgx_cpu"] = rows[0]["cpu_s"] / r["cpu_s"]
        # Each round times pgx-style and ours back to back: the per-round ratio cancels
        # slow drifts of the load, and its spread shows the noise.
        per_round = pgx_times / np.asarray(t["times_s"])
        r["over_pgx_median"] = float(np.median(per_round))
        r["over_pgx_range"] = [float(per_round.min()), float(per_round.max())]
    result = {
        "subcommand": "pgx", **machine(), "config": args.config, "env": c.env.id,
        "pgx_env": pgx_id, "pgx_version": pgx.__version__, "batch": batch,
        "simulations": sims, "plies": plies, "network": _net_name(c), "rows": rows,
        "ours_over_pgx": rows[1]["over_pgx"],
        "ours_over_pgx_median": rows[1]["over_pgx_median"],
    }
    if not args.quick:
        result["ours_no_game_ids_over_pgx"] = rows[2]["over_pgx"]
        result["ours_adapter_over_pgx"] = rows[3]["over_pgx"]
        result["ours_fresh_roots_over_pgx"] = rows[4]["over_pgx"]
    print(f"self-play, ours vs pgx's AlphaZero example style ({pgx_id}, pgx "
          f"{pgx.__version__}): batch {batch}, {sims} simulations (Gumbel), {plies} plies, "
          f"network {result['network']} (load {result['load_average']:.1f})")
    head = (f"  {'implementation':<40} {'compile s':>9} {'moves/s':>9} {'sims/s':>9} "
            f"{'/pgx':>6} {'cpu s':>7} {'/pgx cpu':>8} {'per round: median':>17} {'range':>11}")
    print(head)
    print("  " + "-" * (len(head) - 2))
    for r in rows:
        lo, hi = r["over_pgx_range"]
        print(f"  {r['impl']:<40} {r['compile_s']:>9.1f} {_si(r['moves_per_s']):>9} "
              f"{_si(r['simulations_per_s']):>9} {r['over_pgx']:>5.2f}x {r['cpu_s']:>7.3f} "
              f"{r['over_pgx_cpu']:>7.2f}x {r['over_pgx_median']:>16.2f}x {lo:>5.2f}-{hi:.2f}")
    print(f"  ours/pgx = {result['ours_over_pgx']:.2f} by best wall times, "
          f"{result['ours_over_pgx_median']:.2f} by the median of the per-round ratios "
          f"(issue target >= 1.0); timed in turns over {args.repeats} rounds; 'cpu s' is the "
          "process CPU time of a call")
    result.update(peak_memory())
    _print_memory(result)
    _write_json(args.json, result)
    return result


_PGX_DESCRIPTION = """\
Times self-play written as pgx's AlphaZero example writes it (pgx env, vmap(env.step) in
recurrent_fn, mctx.gumbel_muzero_policy, lax.scan with pgx.experimental.auto_reset) against
ours (selfplay.selfplay over our env with game_ids as the trainer passes them, without
game_ids, over pgx's game through our envs.make("pgx:...") adapter, and with every root
evaluated afresh as pgx-style does instead of reusing the played child's evaluation from
the previous search), all with our
ResNet of the config's size, the same simulations, batch and plies, in one process. Prints
moves/s and the ratio ours/pgx (the issue's target: >= 1.0). Needs pgx; the config's env
must have a pgx twin (connect4 -> connect_four, tictactoe -> tic_tac_toe). Our connect4
observation has 3 planes and pgx's 2, so the first convolution of ours is slightly larger;
the adapter row runs exactly pgx's network input."""


# ------------------------------------------------------------------------------- all
def _all_args(p: argparse.ArgumentParser) -> None:
    _config_args(p)
    p.add_argument("--devices", type=_device_counts, default=None, metavar="1,2,4",
                   help="also the device scaling table (see `selfplay --help`)")
    p.add_argument("--env", default="all", help="envs for the env part (default all)")
    p.add_argument("--env-batch", type=int, default=1024, help="env part: games")
    p.add_argument("--env-steps", type=int, default=200, help="env part: plies per call")
    p.add_argument("--updates", type=int, default=None, help="train part: updates per call")
    p.add_argument("--no-pgx", action="store_true", help="skip the pgx comparisons")


def run_all(args: argparse.Namespace) -> dict:
    """env + selfplay (+ scaling) + train + pgx, one JSON."""
    parser = build_parser()
    shared = ["--config", args.config, "--repeats", str(args.repeats)]
    overrides = [f"--config.{o}" for o in args.config_overrides]
    sized = shared + ["--plies", str(args.plies)]
    if args.batch:
        sized += ["--batch", str(args.batch)]
    if args.sims:
        sized += ["--sims", str(args.sims)]
    devices = ["--devices", ",".join(map(str, args.devices))] if args.devices else []
    env_args = ["env", "--env", args.env, "--batch", str(args.env_batch), "--steps",
                str(args.env_steps), "--repeats", str(args.repeats)]
    parts = {
        "env": env_args + (["--no-pgx"] if args.no_pgx else []),
        "selfplay": ["selfplay", *sized, *devices],
        "train": ["train", *shared] + (["--updates", str(args.updates)] if args.updates
                                       else []),
    }
    if not args.no_pgx:
        parts["pgx"] = ["pgx", *sized]
    out = {"subcommand": "all", **machine()}
    for name, argv in parts.items():
        shown = argv if name == "env" else argv + overrides
        print(f"\n== {name}: python -m az_jax.bench {' '.join(shown)}")
        sub = parser.parse_args(argv)
        sub.config_overrides = args.config_overrides
        out[name] = SUBCOMMANDS[name].run(sub)
    out.update(load_average_end=load_average(), **peak_memory())
    _write_json(args.json, out)
    return out


_ALL_DESCRIPTION = """\
Runs env, selfplay (with --devices: the scaling table), train and pgx one after the other
with the same config and small defaults, and writes all their results into one JSON."""


# ------------------------------------------------------------------------ subcommands
class Subcommand(NamedTuple):
    help: str  # one line, shown in `python -m az_jax.bench --help`
    description: str  # shown in `python -m az_jax.bench <name> --help`
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], dict]


_ENV_DESCRIPTION = """\
Times jax.jit(jax.vmap(env.step)) inside one jitted lax.scan over --steps plies: each ply
draws a random legal action per game (bench.random_legal), steps all --batch games and
replaces the finished ones by a fresh game, so the input changes every iteration and XLA
cannot hoist work out of the loop. Reports the compile time of the whole scan separately,
steps/s = batch * steps / seconds (best of --repeats calls after a warm-up), finished
games/s, and, where pgx is installed, the same measurement of the matching pgx game and
the ratio ours/pgx. The machine's load average is printed: other work slows the timings."""

# name -> Subcommand.
SUBCOMMANDS: dict[str, Subcommand] = {
    "env": Subcommand(
        help="steps/s of jit(vmap(env.step)) with random legal moves and auto-reset, vs pgx",
        description=_ENV_DESCRIPTION,
        add_args=_env_args,
        run=run_env,
    ),
    "selfplay": Subcommand(
        help="network forward vs self-play with search: ratio, compile, --devices scaling",
        description=_SELFPLAY_DESCRIPTION,
        add_args=_selfplay_args,
        run=run_selfplay,
    ),
    "train": Subcommand(
        help="learner.update updates/s on sampled batches, compile time",
        description=_TRAIN_DESCRIPTION,
        add_args=_train_args,
        run=run_train,
    ),
    "pgx": Subcommand(
        help="our self-play vs pgx's AlphaZero-example self-play: ours/pgx",
        description=_PGX_DESCRIPTION,
        add_args=_pgx_args,
        run=run_pgx,
    ),
    "all": Subcommand(
        help="env + selfplay + train + pgx with small defaults, one JSON",
        description=_ALL_DESCRIPTION,
        add_args=_all_args,
        run=run_all,
    ),
    "learn": Subcommand(
        help="train for --minutes, then mistake rate (solver sets) or ladder score per "
             "checkpoint vs minutes: learn.json + learn.png",
        description=learn_bench.DESCRIPTION,
        add_args=learn_bench.add_args,
        run=learn_bench.run,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m az_jax.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="subcommand")
    for name, cmd in SUBCOMMANDS.items():
        p = sub.add_parser(
            name,
            help=cmd.help,
            description=cmd.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.add_args(p)
    return parser


def request_host_devices(count: int) -> None:
    """Asks XLA's CPU backend for `count` devices unless XLA_FLAGS already sets a count.

    Takes effect only before JAX starts its backends (the first `jax.devices()` or
    computation), which is the case when this module runs as `python -m az_jax.bench`:
    importing jax does not start them. Harmless on GPU/TPU (it only shapes the CPU backend).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def main(argv: list[str] | None = None, *, host_devices: bool = False) -> dict:
    """Parses `argv` (default: sys.argv[1:]), runs the subcommand, returns its result.

    Args:
      host_devices: with --devices, set XLA_FLAGS so that the CPU backend has that many
        devices (`request_host_devices`). The command line sets it; in-process callers
        (tests) leave it off so their environment, inherited by subprocesses, is unchanged.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, overrides = config_lib.split_overrides(argv)  # --config.a.b=v, as train.py
    args = build_parser().parse_args(argv)
    if overrides and not hasattr(args, "config"):
        raise SystemExit(f"error: {args.subcommand} takes no config, so no --config.a.b=v "
                         f"overrides: {', '.join(overrides)}")
    args.config_overrides = overrides
    if host_devices and getattr(args, "devices", None):
        request_host_devices(max(args.devices))
    return SUBCOMMANDS[args.subcommand].run(args)


if __name__ == "__main__":
    main(host_devices=True)
