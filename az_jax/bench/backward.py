"""`python -m az_jax.bench backward`: mctx's backward pass vs az_jax.mctx_backward."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from az_jax import cli
from az_jax.bench import common

HELP = "one batched search with mctx's own backward pass vs ours: times, ratio, same tree"

DESCRIPTION = """\
Times one batched search from --batch positions (each after --plies random moves) with
--sims simulations, twice, in turns: with mctx's own backward pass (vmapped per game: a
select over every game's whole tree at each step up) and with az_jax.mctx_backward's (one
loop over the batch), which the searches of az_jax use. Prints both times, their ratio and
whether the two searches built the same tree (they must: same updates, same arithmetic),
and each program's buffers as XLA's memory analysis counts them.
--noise searches as self-play does (root noise, the self-play tactics); by default as an
evaluation does (no noise, the evaluation tactics). The network is the config's, randomly
initialized, or a shipped model (--model NAME, whose game and search settings then replace
the config's; --batch and --sims, else the config's, still size the search)."""


def add_args(p: argparse.ArgumentParser) -> None:
    common.config_args(p, plies=False)
    p.add_argument("--plies", type=cli.integer(0), default=8,
                   help="random moves played from the start before the search (default 8)")
    p.add_argument("--model", default=None,
                   help="a shipped model's network and game (az_jax/models/NAME)")
    p.add_argument("--noise", action="store_true",
                   help="search as self-play (root noise) instead of as an evaluation")


def run(args: argparse.Namespace) -> dict:
    """One search each way, timed in turns; the trees compared leaf by leaf."""
    from az_jax import checkpoint, network, search
    from az_jax.eval.players import random_legal

    c, batch, sims = common.sized_config(args)
    if args.model:
        if args.config_overrides:  # the model's network, game and search replace them
            raise SystemExit(f"error: --model {args.model} searches with its own network, "
                             "game and search settings, so --config.a.b=v overrides would "
                             f"be ignored: {', '.join(args.config_overrides)} (--batch and "
                             "--sims size the search)")
        try:
            restored = checkpoint.load(model=args.model)
        except ValueError as err:  # an unknown name: the valid ones are listed
            raise SystemExit(f"error: {err}") from None
        env, net, variables = restored.env, restored.net, restored.variables
        c.search = restored.config.search
    else:
        env = common.make_env(c.env.id, c.env.kwargs)
        net = network.make_network(c.network, env)
        variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    s = search.make_search(env, net, c.search)
    evaluation = not args.noise
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(1), batch))
    for t in range(args.plies):  # random openings, the same for both
        keys = jax.random.split(jax.random.PRNGKey(100 + t), batch)
        moves = jax.vmap(lambda k, m: random_legal(k, m[None])[0])(keys, states.legal_action_mask)
        after = jax.vmap(env.step)(states, moves, keys)
        states = jax.tree.map(  # games that ended stay where they were
            lambda a, b: jnp.where(after.done.reshape((-1,) + (1,) * (a.ndim - 1)), b, a),
            after, states)
    root = jax.jit(lambda v, x: s.root(v, x, evaluation))(variables, states)
    invalid = jax.jit(lambda x, r: s.invalid_actions(x, evaluation, r.prior_logits))(
        states, root)
    key = jax.random.PRNGKey(2)
    theirs = jax.jit(lambda v, r, i, k: s._mctx(v, r, i, k, evaluation, sims))
    ours = jax.jit(lambda v, r, i, k: s._search(v, r, i, k, evaluation, sims))
    inputs = (variables, root, invalid, key)
    t_theirs, t_ours = common.time_interleaved([(theirs, inputs), (ours, inputs)],
                                               args.repeats)
    memory = {"mctx": _program_bytes(theirs, inputs), "ours": _program_bytes(ours, inputs)}
    same = jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b, equal_nan=True)),
                        theirs(*inputs).search_tree, ours(*inputs).search_tree)
    result = {
        "subcommand": "backward", **common.machine(), "config": args.config,
        "model": args.model, "env": repr(env), "batch": batch, "simulations": sims,
        "plies": args.plies, "evaluation": evaluation,
        "mctx_s": t_theirs["best_s"], "ours_s": t_ours["best_s"],
        "ratio_mctx_over_ours": t_theirs["best_s"] / t_ours["best_s"],
        "same_tree": all(jax.tree.leaves(same)),
        "program_bytes": memory,
        "compile_s": {"mctx": t_theirs["compile_s"], "ours": t_ours["compile_s"]},
    }
    print(f"{result['env']} on {result['device']}, batch {batch}, {sims} simulations, "
          f"{'self-play' if args.noise else 'evaluation'} search "
          f"(load {result['load_average']:.1f})")
    mib = {k: f"   program buffers {b / 2**20:.1f} MiB" if b else "" for k, b in memory.items()}
    print(f"  mctx's backward   {result['mctx_s'] * 1e3:9.1f} ms{mib['mctx']}")
    print(f"  az_jax's backward {result['ours_s'] * 1e3:9.1f} ms{mib['ours']}")
    print(f"  ratio mctx/ours   {result['ratio_mctx_over_ours']:9.2f}   same tree: "
          f"{result['same_tree']}")
    return common.finish(result, args.json)


def _program_bytes(fn, inputs) -> int | None:
    """XLA's count of a jitted program's temporaries and outputs (arguments aside; the
    search tree lives there); None where the backend gives no memory analysis."""
    analysis = fn.lower(*inputs).compile().memory_analysis()
    if analysis is None:
        return None
    return int(analysis.temp_size_in_bytes + analysis.output_size_in_bytes)
