"""Benchmarks for az_jax: `python -m az_jax.bench <subcommand> [options]`.

Subcommands:
  env   Raw environment throughput: steps/s of `jax.jit(jax.vmap(env.step))` playing random
        legal moves with auto-reset, and the same for the matching pgx game when pgx is
        installed (connect4 <-> connect_four, tictactoe <-> tic_tac_toe).

  selfplay  Bare network forward positions/s vs self-play simulations/s at the same batch,
        their ratio, and compile times.

Examples:
  python -m az_jax.bench env --env gomoku --size 15 --batch 1024
  python -m az_jax.bench env --env all --steps 500 --json bench_env.json
  python -m az_jax.bench selfplay --config configs/connect4.py

Run `python -m az_jax.bench <subcommand> --help` for the options of each.

Adding a subcommand: write `_<name>_args(parser)` (its options) and `run_<name>(args) -> dict`
(does the work, prints a table, returns a JSON-able result), then add one entry to
`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import os
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

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind} x{jax.device_count()}, "
        f"{os.cpu_count()} CPUs, load average {load:.1f} (other work slows the timings)"
    )
    _print_env_table(rows)
    out = {
        "subcommand": "env",
        "jax": jax.__version__,
        "device": str(jax.devices()[0]),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "results": rows,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
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



# -------------------------------------------------------------------------- selfplay
def load_config(path: str):
    """`get_config()` of a config file (configs/<game>.py), with the repo root importable."""
    import importlib.util
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"error: no config file {path}")
    sys.path.insert(0, str(path.resolve().parent.parent))
    spec = importlib.util.spec_from_file_location(f"_bench_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def _selfplay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="configs/connect4.py", help="training config file")
    p.add_argument("--batch", type=int, default=None, help="games (default: the config's)")
    p.add_argument("--sims", type=int, default=None, help="simulations (default: config's)")
    p.add_argument("--plies", type=int, default=8, help="plies per timed self-play call")
    p.add_argument("--repeats", type=int, default=3, help="timed calls (best is reported)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")


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


def run_selfplay(args: argparse.Namespace) -> dict:
    """Bare network forward vs self-play with search, at the same batch, one device."""
    from az_jax import network, search, selfplay

    c = load_config(args.config)
    batch = args.batch or c.selfplay.batch_size
    sims = args.sims or c.search.num_simulations
    env = envs.make(c.env.id, **c.env.kwargs)
    net = network.make_network(c.network, env)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    search_fn = search.make_search(env, net, c.search)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(1), batch))
    evals = args.plies * sims  # network calls of batch B in one self-play call

    @jax.jit
    def forward(variables, obs, mask):
        def body(acc, i):  # the input changes every call: nothing is hoisted
            logits, value = net.apply(variables, obs + i * 1e-6, mask)
            return acc + value.sum() + logits[:, 0].sum(), None
        return jax.lax.scan(body, 0.0, jnp.arange(evals, dtype=jnp.float32))[0]

    @jax.jit
    def play(variables, states, key):
        traj, states = selfplay.selfplay(search_fn, env, variables, states, key,
                                         num_plies=args.plies,
                                         temperature_plies=c.selfplay.temperature_plies)
        return traj.policy.sum()

    f_first, f_best = _best_time(forward, (variables, states.observation,
                                           states.legal_action_mask), args.repeats)
    p_first, p_best = _best_time(play, (variables, states, jax.random.PRNGKey(2)),
                                 args.repeats)
    result = {
        "config": args.config, "env": repr(env), "batch": batch, "simulations": sims,
        "network": f"{c.network.num_blocks}x{c.network.channels} {c.network.dtype}",
        "device": str(jax.devices()[0].device_kind), "devices_used": 1,
        "forward_positions_per_s": batch * evals / f_best,
        "selfplay_simulations_per_s": batch * evals / p_best,
        "selfplay_moves_per_s": batch * args.plies / p_best,
        "forward_compile_s": f_first - f_best, "selfplay_compile_s": p_first - p_best,
        "load_average": os.getloadavg()[0],
    }
    result["ratio_selfplay_over_forward"] = (result["selfplay_simulations_per_s"]
                                             / result["forward_positions_per_s"])
    print(f"{result['env']} on {result['device']}, batch {batch}, {sims} simulations, "
          f"network {result['network']} (load {result['load_average']:.1f})")
    print(f"  network forward      {_si(result['forward_positions_per_s'])} positions/s "
          f"(compile {result['forward_compile_s']:.1f}s)")
    print(f"  self-play + search   {_si(result['selfplay_simulations_per_s'])} simulations/s, "
          f"{_si(result['selfplay_moves_per_s'])} moves/s "
          f"(compile {result['selfplay_compile_s']:.1f}s)")
    print(f"  ratio self-play / forward  {result['ratio_selfplay_over_forward']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


_SELFPLAY_DESCRIPTION = """\
Times, at the self-play batch and on one device: the bare network forward (a jitted scan of
plies * simulations calls on a changing input) in positions/s, and vectorized self-play with
mctx search over the real env (selfplay.selfplay over --plies plies) in simulations/s
(= batch * plies * simulations / seconds) and moves/s. Their ratio says how much of the
time is the network: 1.0 means search and env cost nothing. Compile times are reported."""

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

# name -> Subcommand. Add `selfplay`, `train`, `search`, ... here.
SUBCOMMANDS: dict[str, Subcommand] = {
    "env": Subcommand(
        help="steps/s of jit(vmap(env.step)) with random legal moves and auto-reset, vs pgx",
        description=_ENV_DESCRIPTION,
        add_args=_env_args,
        run=run_env,
    ),
    "selfplay": Subcommand(
        help="network forward vs self-play with search at the same batch: ratio, compile",
        description=_SELFPLAY_DESCRIPTION,
        add_args=_selfplay_args,
        run=run_selfplay,
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


def main(argv: list[str] | None = None) -> dict:
    """Parses `argv` (default: sys.argv[1:]), runs the subcommand, returns its result."""
    args = build_parser().parse_args(argv)
    return SUBCOMMANDS[args.subcommand].run(args)


if __name__ == "__main__":
    main()
