"""Benchmarks for az_jax: `python -m az_jax.bench <subcommand> [options]`.

Subcommands:
  env   Raw environment throughput: steps/s of `jax.jit(jax.vmap(env.step))` playing random
        legal moves with auto-reset, and the same for the matching pgx game when pgx is
        installed (connect4 <-> connect_four, tictactoe <-> tic_tac_toe).

Examples:
  python -m az_jax.bench env --env gomoku --size 15 --batch 1024
  python -m az_jax.bench env --env all --steps 500 --json bench_env.json

Adding a subcommand: write `_<name>_args(parser)` (its options) and `run_<name>(args) -> dict`
(does the work, prints a table, returns a JSON-able result), then add one line to `SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import envs

# Our env id -> the pgx env id of the same game, timed side by side when pgx is installed.
PGX_MATCH = {"connect4": "connect_four", "tictactoe": "tic_tac_toe"}


# ------------------------------------------------------------------------------- env
def random_legal(key: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniformly random legal action per game, from one uniform draw per game.

    Cheaper than `jax.random.categorical` (which draws one Gumbel per action), so the timing
    measures the env, not the random number generator.

    Args:
      key: consumed.
      mask: bool[B, A], at least one True per row.
    Returns:
      int32[B].
    """
    count = mask.sum(-1, dtype=jnp.int32)
    pick = (jax.random.uniform(key, count.shape) * count).astype(jnp.int32)  # [B] in [0, count)
    return jnp.argmax(jnp.cumsum(mask, -1, dtype=jnp.int32) > pick[:, None], -1).astype(jnp.int32)


def _reset_where(done: jax.Array, fresh, state):
    """Per game, `fresh` where `done` else `state`. done: bool[B]; pytrees with leading B."""
    def pick(a, b):
        return jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, fresh, state)


def make_env_loop(env: Any, batch: int, steps: int) -> tuple[Callable, Callable]:
    """Builds the timed program for any pgx-shaped env (ours or pgx's).

    Args:
      env: has `init(key)` and `step(state, action)`; states have `legal_action_mask`,
        `terminated` and `truncated`.
      batch: games played side by side (B).
      steps: plies per call, scanned inside one jitted program.
    Returns:
      `init(key) -> state` (batched, jitted) and `run(state, fresh, key) -> (state, finished)`,
      where `run` plays `steps` batched plies of random legal moves, replacing every finished
      game by the matching game of `fresh`, and `finished` int32[] counts the games that ended.
      `run` is not jitted yet, so its compile time can be measured.
    """
    init = jax.jit(jax.vmap(env.init))
    step = jax.vmap(env.step)

    def ply(carry, key):
        state, fresh, finished = carry
        state = step(state, random_legal(key, state.legal_action_mask))
        done = state.terminated | state.truncated
        state = _reset_where(done, fresh, state)
        return (state, fresh, finished + done.sum(dtype=jnp.int32)), None

    def run(state, fresh, key):
        keys = jax.random.split(key, steps)
        (state, _, finished), _ = jax.lax.scan(ply, (state, fresh, jnp.int32(0)), keys)
        return state, finished

    return init, run


def time_env(env: Any, batch: int, steps: int, repeats: int, seed: int = 0) -> dict:
    """Times `make_env_loop(env, batch, steps)`.

    Returns:
      dict with compile_s (lowering + XLA compile of the whole scan), best run seconds,
      steps_per_s = batch * steps / best seconds, and games_per_s (finished games).
    """
    init, run = make_env_loop(env, batch, steps)
    key_init, key_run = jax.random.split(jax.random.PRNGKey(seed))
    fresh = init(jax.random.split(key_init, batch))
    jax.block_until_ready(fresh)
    t0 = time.perf_counter()
    compiled = jax.jit(run).lower(fresh, fresh, key_run).compile()
    compile_s = time.perf_counter() - t0

    state, _ = jax.block_until_ready(compiled(fresh, fresh, key_run))  # warm-up
    best, finished = float("inf"), 0
    for key in jax.random.split(key_run, repeats):
        t0 = time.perf_counter()
        state, done = jax.block_until_ready(compiled(state, fresh, key))
        seconds = time.perf_counter() - t0
        if seconds < best:
            best, finished = seconds, int(done)
    return {
        "batch": batch,
        "steps": steps,
        "compile_s": compile_s,
        "run_s": best,
        "steps_per_s": batch * steps / best,
        "games_per_s": finished / best,
    }


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="all",
                   help=f"env id, one of {', '.join(envs.registered())}, or 'all' (default)")
    p.add_argument("--size", type=int, default=None,
                   help="board size, passed to envs that take one (gomoku)")
    p.add_argument("--rule", default=None, help="rule, passed to envs that take one (gomoku)")
    p.add_argument("--batch", type=int, default=1024, help="games side by side (default 1024)")
    p.add_argument("--steps", type=int, default=1000,
                   help="batched plies per timed call (default 1000)")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed calls after one warm-up; the best is reported (default 3)")
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
    ids = envs.registered() if args.env == "all" else [args.env]
    if args.env != "all" and args.env not in envs.registered():
        raise SystemExit(f"unknown --env {args.env!r}; choose from {envs.registered()} or all")
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
        result = time_env(env, args.batch, args.steps, args.repeats, args.seed)
        rows.append({"env": env_id, "impl": "az_jax", "params": env.params, **result})
        if pgx is not None and not args.no_pgx and env_id in PGX_MATCH:
            pgx_id = PGX_MATCH[env_id]
            result = time_env(pgx.make(pgx_id), args.batch, args.steps, args.repeats, args.seed)
            rows.append({"env": pgx_id, "impl": "pgx", "params": {}, **result})
            rows[-2]["ours_over_pgx"] = rows[-2]["steps_per_s"] / result["steps_per_s"]

    _print_env_table(rows)
    out = {
        "subcommand": "env",
        "jax": jax.__version__,
        "device": str(jax.devices()[0]),
        "device_count": jax.device_count(),
        "results": rows,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


def _print_env_table(rows: list[dict]) -> None:
    head = f"{'env':<34} {'impl':<7} {'batch':>6} {'steps':>6} {'compile s':>9} " \
           f"{'steps/s':>10} {'games/s':>9} {'ours/pgx':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        name = r["env"] + "".join(f" {k}={v}" for k, v in r["params"].items())
        ratio = f"{r['ours_over_pgx']:.2f}x" if "ours_over_pgx" in r else ""
        print(f"{name:<34} {r['impl']:<7} {r['batch']:>6} {r['steps']:>6} "
              f"{r['compile_s']:>9.2f} {_si(r['steps_per_s']):>10} {_si(r['games_per_s']):>9} "
              f"{ratio:>8}")


def _si(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.1f}"


# ------------------------------------------------------------------------ subcommands
class Subcommand(NamedTuple):
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], dict]


# name -> Subcommand. Add `selfplay`, `train`, `search`, ... here.
SUBCOMMANDS: dict[str, Subcommand] = {
    "env": Subcommand(
        help="steps/s of jit(vmap(env.step)) with random legal moves and auto-reset, vs pgx",
        add_args=_env_args,
        run=run_env,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m az_jax.bench",
        description=__doc__.split("\n\n")[0],
        epilog="Run `python -m az_jax.bench <subcommand> --help` for the options of each.",
    )
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="subcommand")
    for name, cmd in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_args(p)
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Parses `argv` (default: sys.argv[1:]), runs the subcommand, returns its result."""
    args = build_parser().parse_args(argv)
    return SUBCOMMANDS[args.subcommand].run(args)


if __name__ == "__main__":
    main()
