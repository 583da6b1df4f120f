"""`python -m az_jax.bench env`: raw environment throughput, ours and pgx's."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import envs
from az_jax import cli
from az_jax.bench import common

HELP = "steps/s of jit(vmap(env.step)) with random legal moves and auto-reset, vs pgx"

DESCRIPTION = """\
Times jax.jit(jax.vmap(env.step)) inside one jitted lax.scan over --steps plies: each ply
draws a random legal action per game (`hashed_random_legal`), steps all --batch games and
replaces the finished ones by a fresh game, so the input changes every iteration and XLA
cannot hoist work out of the loop. Reports the compile time of the whole scan separately,
steps/s = batch * steps / seconds (best of --repeats calls after a warm-up), finished
games/s, and, where pgx is installed, the same measurement of the matching pgx game and
the ratio ours/pgx; ours and pgx's are timed in turns (one call each per round), so that a
change of the machine's load hits both alike. The machine's load average is printed: other
work slows the timings."""


def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a cheap, well-mixed uint32 -> uint32 bijection."""
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def hashed_random_legal(key: jax.Array, mask: jax.Array, tries: int = 16) -> jax.Array:
    """A uniformly random legal action per game, cheap enough not to swamp an env step.

    Each game draws `tries` candidate actions (hashes of one random word per game; the
    multiply-shift maps them to [0, A) with a bias below A / 2**16) and keeps the first legal
    one, which is uniform over the legal actions. Only if some game found none (few legal
    moves left) does a batch-wide `lax.cond` pay for the full pass: a random priority per
    action and the legal action of highest priority. `jax.random.categorical` would instead
    draw A Gumbels per game, and on CPU a per-game `argmax`/`cumsum` over A costs more than
    a Gomoku step; the timings would measure the sampler, not the env. (Measured on 2 CPU
    cores, Gomoku 15x15, B=1024: 2.9M steps/s with this sampler, 0.23M with
    `eval.players.random_legal`, the categorical one that matches and rollouts use.)

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
            state = step(state, hashed_random_legal(key, state.legal_action_mask))
            done = state.terminated | state.truncated
            state = _reset_where(done, fresh, state)
            return (state, finished + done.sum(dtype=jnp.int32)), None

        keys = jax.random.split(key, steps)
        (state, finished), _ = jax.lax.scan(ply, (state, jnp.int32(0)), keys)
        return state, finished

    return run


def time_envs(env_list: list, batch: int, steps: int, repeats: int, seed: int = 0
              ) -> list[dict]:
    """Times `make_env_loop(env, batch, steps)` for each env, in turns
    (`common.time_interleaved`: one call of each per round, the same inputs every call).

    Each env's program is compiled ahead (timed apart) and run once from its initial
    states, so that the timed calls start from games under way.
    Returns:
      per env a dict with compile_s (lowering + XLA compile of the whole scan), run_s (the
      best of `repeats` calls), cpu_s, steps_per_s = batch * steps / run_s, games_per_s,
      and times_s (every round's wall time).
    """
    calls, compile_s = [], []
    key_init, key_warm, key_run = jax.random.split(jax.random.PRNGKey(seed), 3)
    for env in env_list:
        run = make_env_loop(env, batch, steps)
        fresh = jax.jit(env.init)(key_init)
        state = jax.jit(jax.vmap(env.init))(jax.random.split(key_init, batch))
        t0 = time.perf_counter()
        compiled = jax.jit(run).lower(state, fresh, key_run).compile()
        compile_s.append(time.perf_counter() - t0)
        state, _ = jax.block_until_ready(compiled(state, fresh, key_warm))
        calls.append((compiled, (state, fresh, key_run)))
    timings = common.time_interleaved(calls, repeats, keep_output=True)
    return [{
        "batch": batch,
        "steps": steps,
        "compile_s": seconds,
        "run_s": t["best_s"],
        "cpu_s": t["cpu_s"],  # process CPU time of a call (all threads): > run_s if parallel
        "steps_per_s": batch * steps / t["best_s"],
        # every call plays the same plies: the first call's finished games
        "games_per_s": int(t["output"][1]) / t["best_s"],
        "times_s": t["times_s"],
    } for seconds, t in zip(compile_s, timings, strict=True)]


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env",
        default="all",
        help=f"env id, one of {', '.join(envs.registered())}, or 'all' (default)",
    )
    p.add_argument(
        "--size", type=int, default=None, help="board size, passed to envs that take one (gomoku)"
    )
    p.add_argument("--rule", default=None, help="rule, passed to envs that take one (gomoku)")
    p.add_argument("--batch", type=cli.integer(1), default=1024,
                   help="games side by side (default 1024)")
    p.add_argument(
        "--steps", type=cli.integer(1), default=1000,
        help="batched plies per timed call (default 1000)"
    )
    p.add_argument(
        "--repeats",
        type=cli.integer(1),
        default=3,
        help="timed calls after one warm-up; the best is reported (default 3)",
    )
    p.add_argument("--no-pgx", action="store_true", help="skip the pgx comparison")
    p.add_argument("--seed", type=cli.integer(0, cli.MAX_SEED), default=0)
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results here")


def _make_ours(env_id: str, args: argparse.Namespace):
    """Builds our env, passing --size/--rule only to envs that take them."""
    accepted = envs.make(env_id).params
    given = {"size": args.size, "rule": args.rule}
    return envs.make(env_id, **{k: v for k, v in given.items() if v is not None and k in accepted})


def run(args: argparse.Namespace) -> dict:
    """The `env` subcommand: times each env (and its pgx twin) and prints a table."""
    if args.env != "all" and args.env not in envs.registered():
        raise SystemExit(f"error: unknown --env {args.env!r}; choose from "
                         f"{', '.join(envs.registered())} or all")
    ids = envs.registered() if args.env == "all" else [args.env]
    try:
        import pgx
    except ImportError:
        pgx = None

    built = {}  # every env first: a bad --size / --rule stops before any timing
    for env_id in ids:
        try:
            built[env_id] = _make_ours(env_id, args)
        except (ImportError, AttributeError) as err:  # registered but not written yet
            print(f"skipping {env_id}: {err}", file=sys.stderr)
        except ValueError as err:  # the env says what it accepts
            raise SystemExit(f"error: {env_id}: {err}") from None
    rows = []
    for i, (env_id, env) in enumerate(built.items()):
        print(f"[{i + 1}/{len(built)}] timing {env_id} ...", file=sys.stderr, flush=True)
        pgx_id = common.PGX_MATCH.get(env_id)
        if pgx is None or args.no_pgx or pgx_id is None:
            (result,) = time_envs([env], args.batch, args.steps, args.repeats, args.seed)
            rows.append({"env": env_id, "impl": "az_jax", "params": env.params, **result})
            continue
        ours, theirs = time_envs([env, pgx.make(pgx_id)], args.batch, args.steps,
                                 args.repeats, args.seed)
        per_round = np.asarray(theirs["times_s"]) / np.asarray(ours["times_s"])
        rows.append({"env": env_id, "impl": "az_jax", "params": env.params, **ours,
                     "ours_over_pgx": ours["steps_per_s"] / theirs["steps_per_s"],
                     "ours_over_pgx_median": float(np.median(per_round))})
        rows.append({"env": pgx_id, "impl": "pgx", "params": {}, **theirs})

    out = {"subcommand": "env", **common.machine(), "results": rows}
    common.print_machine(out)
    _print_env_table(rows)
    if any("ours_over_pgx" in r for r in rows):
        print(f"ours and pgx's timed in turns, best of {args.repeats} calls each; the JSON "
              "also has the median of the per-round ratios (ours_over_pgx_median)")
    return common.finish(out, args.json)


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
            f"{r['compile_s']:>9.2f} {common.si(r['steps_per_s']):>10} "
            f"{common.si(r['games_per_s']):>9} "
            f"{ratio:>8}"
        )
