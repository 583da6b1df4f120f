"""`python -m az_jax.bench all`: env, selfplay, train and pgx in turn, one JSON."""

from __future__ import annotations

import argparse

from az_jax import cli
from az_jax.bench import common
from az_jax.bench import env as env_bench
from az_jax.bench import pgx as pgx_bench
from az_jax.bench import selfplay as selfplay_bench
from az_jax.bench import train as train_bench

HELP = "env + selfplay + train + pgx with small defaults, one JSON"

DESCRIPTION = """\
Runs env, selfplay (with --devices: the scaling table), train and pgx one after the other
with the same config and small defaults, and writes all their results into one JSON (also
the parts finished when a later one fails). The pgx part is skipped, with a note, for games
pgx does not have (`bench pgx --null-network` compares the loops over our env there)."""

# The parts, in order: subcommand name -> its module.
PARTS = {"env": env_bench, "selfplay": selfplay_bench, "train": train_bench, "pgx": pgx_bench}


def add_args(p: argparse.ArgumentParser) -> None:
    common.config_args(p)
    p.add_argument("--devices", type=common.device_counts, default=None, metavar="1,2,4",
                   help="also the device scaling table (see `selfplay --help`)")
    p.add_argument("--env", default="all", help="envs for the env part (default all)")
    p.add_argument("--env-batch", type=cli.integer(1), default=1024, help="env part: games")
    p.add_argument("--env-steps", type=cli.integer(1), default=200, help="env part: plies per call")
    p.add_argument("--updates", type=cli.integer(1), default=None,
                   help="train part: updates per call")
    p.add_argument("--no-pgx", action="store_true", help="skip the pgx comparisons")


def run(args: argparse.Namespace) -> dict:
    """env + selfplay (+ scaling) + train + pgx, one JSON."""
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
    skipped = {}
    game = common.load_config(args).env.id
    if not args.no_pgx and game in common.PGX_MATCH:
        parts["pgx"] = ["pgx", *sized]
    elif not args.no_pgx:
        skipped["pgx"] = (f"pgx has no twin of {game!r} (only of "
                          f"{', '.join(common.PGX_MATCH)}); `python -m az_jax.bench pgx "
                          "--null-network` compares the self-play loops over our env")
    out = {"subcommand": "all", **common.machine()}
    name = None
    try:
        for name, argv in parts.items():
            shown = argv if name == "env" else argv + overrides
            print(f"\n== {name}: python -m az_jax.bench {' '.join(shown)}")
            parser = argparse.ArgumentParser(prog=f"python -m az_jax.bench {name}")
            PARTS[name].add_args(parser)
            sub = parser.parse_args(argv[1:])
            sub.subcommand, sub.config_overrides = name, args.config_overrides
            out[name] = PARTS[name].run(sub)
        name = None
        for part, note in skipped.items():
            print(f"\n== {part}: skipped: {note}")
            out[part] = {"subcommand": part, "skipped": note}
    finally:  # the parts finished so far, also when one fails
        if name is not None:
            out["failed_part"] = name
        out.update(load_average_end=common.load_average(), **common.peak_memory())
        common.write_json(args.json, out)
    return out
