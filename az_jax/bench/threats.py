"""`python -m az_jax.bench threats`: the Gomoku threat search's depth, what it finds and costs."""

from __future__ import annotations

import argparse

import numpy as np

from az_jax import cli
from az_jax.bench import common

HELP = "Gomoku: root tactics at several threat depths: long VCFs pruned, time per root"

DESCRIPTION = """\
Plays --games clustered random Gomoku games (envs.gomoku_tactics.clustered_games: moves
next to the stones, so threats arise) and keeps every position where neither side can win
at once and the mover has a VCF (victory by continuous fours) of --min-fours to
--max-fours moves and none shorter, by the numpy threat solver (envs/gomoku_tactics.py,
independent of the search). For each --depths value it computes the "threats" root mask
(az_jax.search.tactical_mask with search.threat_depth = depth) of every such position and
counts, by the VCF's length, the positions where the mask pruned every first move of the
mover's VCFs (the search then cannot play the win), separately for those where the
opponent has an open three (where the defence check prunes fours that only delay it), and
times the mask of one position (a batch of one, as in play), best of --repeats, the depths
in turns (one call each per round).
README, Training, "Tactical safety of the search", has the figures."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=9, help="board size (default 9)")
    p.add_argument("--rule", default="freestyle", choices=("freestyle", "standard"))
    p.add_argument("--games", type=cli.integer(1), default=300,
                   help="random games played (default 300)")
    p.add_argument("--plies", type=cli.integer(1), default=60, help="longest game (default 60)")
    p.add_argument("--seed", type=cli.integer(0), default=0)
    p.add_argument("--depths", type=_depths, default="3,4",
                   help="threat depths compared, each >= 2 (default 3,4)")
    p.add_argument("--min-fours", type=cli.integer(1), default=4,
                   help="shortest VCF kept (default 4: longer than the old depth 3)")
    p.add_argument("--max-fours", type=cli.integer(1), default=6,
                   help="longest VCF looked for (default 6)")
    p.add_argument("--repeats", type=cli.integer(1), default=5,
                   help="timed calls per depth (default 5)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result here")


def _depths(text: str) -> list[int]:
    try:
        depths = [int(x) for x in text.split(",")]
    except ValueError:
        depths = []
    if not depths or min(depths) < 2:
        raise argparse.ArgumentTypeError(f"expected threat depths >= 2 like 3,4, got {text!r}")
    return depths


def _positions(args) -> tuple[list[list[int]], list[np.ndarray], list[int], list[bool]]:
    """(move lists, flat VCF first moves, VCF length, opponent has an open three)."""
    from envs import gomoku_tactics as gt

    moves_out, vcfs, lengths, threes = [], [], [], []
    for moves in gt.clustered_games(args.size, args.games, args.plies, args.seed):
        for i in range(6, len(moves) + 1):
            board, player = gt.board_from_moves(moves[:i], args.size)
            if (gt.winning_points(board, player, args.rule).any()
                    or gt.winning_points(board, 1 - player, args.rule).any()
                    or (args.min_fours > 2
                        and gt.vcf_moves(board, player, args.min_fours - 1, args.rule).any())):
                continue
            for n in range(args.min_fours, args.max_fours + 1):
                vcf = gt.vcf_moves(board, player, n, args.rule)
                if vcf.any():
                    moves_out.append(moves[:i])
                    vcfs.append(vcf.reshape(-1))
                    lengths.append(n)
                    threes.append(bool(gt.open_three_defences(board, player, args.rule)[0].any()))
                    break
    return moves_out, vcfs, lengths, threes


def run(args: argparse.Namespace) -> dict:
    import jax

    import envs
    from az_jax import search
    from az_jax.eval import solver_bench

    depths = args.depths
    if not 2 <= args.min_fours <= args.max_fours:
        raise SystemExit("error: need 2 <= --min-fours <= --max-fours")
    try:
        env = envs.make("gomoku", size=args.size, rule=args.rule)
    except ValueError as err:  # a bad --size: the env says what it accepts
        raise SystemExit(f"error: gomoku: {err}") from None
    moves, vcfs, lengths, threes = _positions(args)
    if not moves:
        raise SystemExit("error: no position with such a VCF: play more --games")
    states = solver_bench.replay(env, moves)
    one = jax.tree.map(lambda x: x[:1], states)
    lengths_arr, threes_arr = np.asarray(lengths), np.asarray(threes)
    span = range(args.min_fours, args.max_fours + 1)
    rows, calls = [], []
    for d in depths:
        mask = jax.jit(jax.vmap(lambda s, d=d: search.tactical_mask(env, s, "threats", depth=d)))
        masks = np.asarray(mask(states))
        pruned = np.array([not (m & v).any() for m, v in zip(masks, vcfs, strict=True)])
        calls.append((mask, (one,)))
        rows.append({"depth": d,
                     "pruned": {str(n): int(pruned[lengths_arr == n].sum()) for n in span},
                     "pruned_open_three": {
                         str(n): int((pruned & threes_arr)[lengths_arr == n].sum())
                         for n in span}})
    # The depths' roots timed in turns, so that a change of the machine's load hits all alike.
    for r, t in zip(rows, common.time_interleaved(calls, args.repeats), strict=True):
        r.update(root_ms=t["best_s"] * 1e3, compile_s=t["compile_s"])
    result = {"subcommand": "threats", **common.machine(), "env": repr(env),
              "games": args.games, "seed": args.seed,
              "positions": {str(n): int((lengths_arr == n).sum()) for n in span},
              "open_three": {str(n): int((threes_arr & (lengths_arr == n)).sum()) for n in span},
              "rows": rows}
    common.print_machine(result)
    print(f"{result['env']}: {len(moves)} positions whose mover has a VCF of "
          f"{args.min_fours}-{args.max_fours} fours and none shorter ({args.games} clustered "
          f"random games, seed {args.seed})")
    head = "  ".join(f"{n} fours" for n in span)
    print(f"{'':24}{head}   root, batch of 1")
    print(f"{'positions':24}" + "  ".join(f"{result['positions'][str(n)]:>7}" for n in span))
    print(f"{'  opponent open three':24}" + "  ".join(f"{result['open_three'][str(n)]:>7}"
                                                     for n in span))
    for r in rows:
        label = f"depth {r['depth']}: all pruned"
        print(f"{label:24}"
              + "  ".join(f"{r['pruned'][str(n)]:>7}" for n in span)
              + f"   {r['root_ms']:8.1f} ms (compile {r['compile_s']:.1f} s)")
        print(f"{'  of them open three':24}"
              + "  ".join(f"{r['pruned_open_three'][str(n)]:>7}" for n in span))
    return common.finish(result, args.json)
