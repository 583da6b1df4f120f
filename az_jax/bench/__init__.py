"""Benchmarks for az_jax: `python -m az_jax.bench <subcommand> [options]`.

Subcommands, one module each in az_jax/bench/:
  env   (env.py) Raw environment throughput: steps/s of `jax.jit(jax.vmap(env.step))`
        playing random legal moves with auto-reset, and the same for the matching pgx game
        when pgx is installed (connect4 <-> connect_four, tictactoe <-> tic_tac_toe).

  selfplay  (selfplay.py) Bare network forward positions/s vs self-play simulations/s,
        network evaluations/s (simulations per move, plus the roots) and moves/s at the
        same batch; the ratio self-play evaluations/s over forward positions/s; compile
        times; with --devices 1,2,4 a scaling table over meshes of k devices (self-play
        alone and whole training iterations).

  train  (train.py) learner.update updates/s and positions/s on sampled replay batches,
        compile time.

  pgx   (pgx.py) Our self-play vs self-play written as pgx's AlphaZero example writes it,
        with the same network, simulations, batch and plies: the ratio ours/pgx.

  backward  (backward.py) One batched search with mctx's own backward pass vs
        az_jax.mctx_backward's (which az_jax's searches use): both times, the ratio,
        whether the trees are identical, and each program's buffers.

  threats  (threats.py) Gomoku: the threat search's root mask at several depths on
        clustered random positions whose mover has a VCF longer than the shallowest:
        positions where every first move of the VCF is pruned (numpy solver as reference),
        by the VCF's length, and the time of one root.

  all   (suite.py) env, selfplay, train and pgx with small defaults, one JSON.

  learn  (learn.py) Learning per wall-clock minute: trains from scratch with train.py for
        --minutes, then the mistake rate of its checkpoints on the stratified Connect4
        solver sets (or, for other games, the score against a fixed ladder), network alone
        and with search: learn.json and learn.png.

Every subcommand prints the load average and the peak memory: the device's
`peak_bytes_in_use` on GPU/TPU, the process's peak RSS (host memory) on CPU. Subcommands
that take a training config (--config) take its overrides as train.py does:
--config.a.b=value.

Examples:
  python -m az_jax.bench env --env gomoku --size 15 --batch 1024
  python -m az_jax.bench env --env all --steps 500 --json bench_env.json
  python -m az_jax.bench selfplay --config configs/connect4.py
  python -m az_jax.bench selfplay --config configs/connect4.py --devices 1,2
  python -m az_jax.bench train --config configs/connect4.py --config.network.channels=32
  python -m az_jax.bench pgx --config configs/connect4.py
  python -m az_jax.bench backward --model gomoku_9x9 --batch 32 --sims 1024
  python -m az_jax.bench threats --size 15 --games 100 --seed 1 --depths 3,4,5
  python -m az_jax.bench all --devices 1,2 --json bench.json
  python -m az_jax.bench learn --config configs/connect4.py --minutes 10 \\
      --config.train.learning_rate=3e-3

Run `python -m az_jax.bench <subcommand> --help` for the options of each.

Adding a subcommand: a module here with HELP (one line), DESCRIPTION, `add_args(parser)`
(its options) and `run(args) -> dict` (does the work, prints a table, returns a JSON-able
result), then one entry in `SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import os
import sys

from az_jax import config as config_lib
from az_jax.bench import backward, common, env, learn, pgx, selfplay, suite, threats, train

# name -> the module that runs it (HELP, DESCRIPTION, add_args, run).
SUBCOMMANDS = {"env": env, "selfplay": selfplay, "train": train, "pgx": pgx,
               "backward": backward, "threats": threats, "all": suite, "learn": learn}


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
            help=cmd.HELP,
            description=cmd.DESCRIPTION,
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
    common.check_out("--json", getattr(args, "json", None))
    if host_devices and getattr(args, "devices", None):
        request_host_devices(max(args.devices))
    elif host_devices and args.subcommand == "learn":  # its evaluation: one job a core
        from az_jax import parallel_setup

        # Not for train.py, its subprocess: it presents the cores itself (at most 8; 12
        # devices would not divide its batches, 16 would shard another run than train.py's).
        args.trainer_env = {"XLA_FLAGS": os.environ.get("XLA_FLAGS")}
        request_host_devices(parallel_setup.usable_cpu_count())
    return SUBCOMMANDS[args.subcommand].run(args)
