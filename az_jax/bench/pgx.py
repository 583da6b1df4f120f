"""`python -m az_jax.bench pgx`: our self-play vs self-play written as pgx's AlphaZero example."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import envs
from az_jax.bench import common
from az_jax.bench import selfplay as selfplay_bench
from az_jax.mctx_backward import batched_backward

HELP = "our self-play vs pgx's AlphaZero-example self-play: ours/pgx"

DESCRIPTION = """\
Times self-play written as pgx's AlphaZero example writes it (pgx env, vmap(env.step) in
recurrent_fn, mctx.gumbel_muzero_policy, lax.scan with pgx.experimental.auto_reset) against
ours (selfplay.selfplay over our env with game_ids as the trainer passes them, without
game_ids, over pgx's game through our envs.make("pgx:...") adapter, and with every root
evaluated afresh as pgx-style does instead of reusing the played child's evaluation from
the previous search), all with our
ResNet of the config's size, the same simulations, batch and plies, in one process. Prints
moves/s and the ratio ours/pgx (the issue's target: >= 1.0). Both sides run the same
search: the config's policy, gumbel_scale, value_scale (or Dirichlet noise and PUCT
constants) and discount, traced under az_jax's batched value backup (`batched_backward`,
which ours always uses), so the ratio measures the loop around the search: the env step,
root reuse and the bookkeeping. mctx's own backup against ours is `bench backward`. Root
tactics (search.tactics) have no pgx-style twin: ours runs without them here, with a note.
Needs pgx; the config's env must have a pgx twin (connect4 -> connect_four, tictactoe ->
tic_tac_toe), except with --null-network. Our connect4 observation has 3 planes and pgx's 2,
so the first convolution of ours is slightly larger; the adapter row runs exactly pgx's
network input."""


def add_args(p: argparse.ArgumentParser) -> None:
    common.config_args(p)
    p.add_argument("--quick", action="store_true",
                   help="time only pgx-style and ours as trained (2 compiles instead of 5)")
    p.add_argument("--null-network", action="store_true",
                   help="a constant network (uniform prior, value 0) in every row: times the "
                        "search's bookkeeping and the env alone. Games without a pgx twin "
                        "(gomoku, baghchal) are then compared with the pgx example's loop "
                        "written over our env")


def null_apply(num_actions: int) -> Callable:
    """A network that costs nothing: `(variables, obs, mask=None) -> (zeros [B, A],
    zeros [B])`, a uniform prior and a value of 0 whatever the position."""
    def apply(variables, obs, mask=None):
        del variables, mask
        batch = obs.shape[0]
        return jnp.zeros((batch, num_actions), jnp.float32), jnp.zeros((batch,), jnp.float32)
    return apply


def search_policy(config, num_actions: int) -> Callable:
    """The mctx call of our self-play searches (`search.run_policy`, not evaluating), for
    the pgx-style loops: the config's policy with its noise and value settings, traced under
    `batched_backward()` as ours is. So both sides of `bench pgx` run the same search and
    the ratio measures the loop around it; mctx's own backward against ours is `bench
    backward`.

    Args:
      config: `config.search` (policy; gumbel: max_num_considered_actions, gumbel_scale,
        value_scale; muzero: dirichlet_fraction, dirichlet_alpha, pb_c_init, pb_c_base).
      num_actions: A.
    Returns:
      `policy(variables, key, root, recurrent_fn, invalid_actions, num_simulations) ->
      mctx.PolicyOutput`, batched as mctx's policies.
    Raises:
      ValueError: a policy `search.Search` does not know.
    """
    from az_jax import search

    if config.policy not in search.POLICIES:
        raise ValueError(f"search.policy={config.policy!r}; accepted: "
                         f"{', '.join(search.POLICIES)}")
    value_scale = float(config.get("value_scale", search.DEFAULT_VALUE_SCALE))

    def policy(variables, key, root, recurrent_fn, invalid_actions, num_simulations):
        with batched_backward():  # as `search.Search._search`: the same backup code
            return search.run_policy(
                config, variables, key, root, recurrent_fn, invalid_actions, num_simulations,
                considered=min(config.max_num_considered_actions, num_actions),
                value_scale=value_scale)

    return policy


def make_pgx_style_over(env, apply_fn, search_config, *, batch: int, plies: int,
                        num_simulations: int) -> Callable:
    """The loop of `make_pgx_selfplay` (a fresh root evaluation every ply, vmap(env.step)
    in recurrent_fn, logits masked with finfo.min, the search of `search_policy`, finished
    games reset) written over one of our envs, for games pgx does not have.

    Args:
      env: one of our envs (`envs.make`).
      apply_fn: `(variables, obs float32[B, ...]) -> (logits [B, A], value [B])`.
      search_config: `config.search`: the policy and its settings (`search_policy`) and the
        per-ply discount gamma (-gamma where the turn passes, 0 at the end).
    Returns:
      `play(variables, states, key) -> (states, trajectory)`, not jitted.
    """
    import mctx

    evaluate = functools.partial(_masked_evaluation, apply_fn)
    policy = search_policy(search_config, env.num_actions)
    gamma = float(search_config.get("discount", 1.0))

    def recurrent_fn(variables, key, action, state):
        player = state.current_player
        state = jax.vmap(env.step)(state, action, jax.random.split(key, batch))
        logits, value = evaluate(variables, state)
        out = mctx.RecurrentFnOutput(
            reward=state.rewards[jnp.arange(batch), player],
            discount=jnp.where(state.done, 0.0, -gamma),
            prior_logits=logits,
            value=jnp.where(state.done, 0.0, value),
        )
        return out, state

    def play(variables, states, key):
        def step_fn(state, key):
            k_search, k_step, k_reset = jax.random.split(key, 3)
            logits, value = apply_fn(variables, state.observation.astype(jnp.float32))
            root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
            out = policy(variables, k_search, root, recurrent_fn, ~state.legal_action_mask,
                         num_simulations)
            actor = state.current_player
            nxt = jax.vmap(env.step)(state, out.action, jax.random.split(k_step, batch))
            fresh = jax.vmap(env.init)(jax.random.split(k_reset, batch))
            reset = jax.tree.map(
                lambda f, x: jnp.where(nxt.done.reshape((-1,) + (1,) * (x.ndim - 1)), f, x),
                fresh, nxt)
            record = (state.observation, out.action_weights,
                      nxt.rewards[jnp.arange(batch), actor], nxt.done,
                      jnp.where(nxt.done, 0.0, -gamma))
            return reset, record

        return jax.lax.scan(step_fn, states, jax.random.split(key, plies))

    return play


def _masked_evaluation(apply_fn, variables, state):
    """pgx's example: the network at `state`, logits shifted and masked with finfo.min."""
    logits, value = apply_fn(variables, state.observation.astype(jnp.float32))
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(state.legal_action_mask, logits, jnp.finfo(logits.dtype).min), value


def make_pgx_selfplay(pgx_env, apply_fn, search_config, *, batch: int, plies: int,
                      num_simulations: int) -> Callable:
    """Self-play written the way pgx's AlphaZero example writes it (examples/alphazero/
    train.py in sotetsuk/pgx): `vmap(env.step)` inside `recurrent_fn`, logits masked with
    `finfo.min`, reward of the player who moved, discount -1 (0 at the end),
    `mctx.gumbel_muzero_policy`, and a `lax.scan` over plies with `pgx.experimental.auto_reset`.
    The search follows our config as ours does (`search_policy`: the policy, its noise and
    value settings, az_jax's batched backup; the discount -gamma), so that only the loop
    differs from ours.

    Args:
      pgx_env: a pgx two-player env whose turns alternate.
      apply_fn: `(variables, obs float32[B, ...]) -> (logits [B, A], value [B])`.
      search_config: `config.search` (`search_policy`; discount gamma).
    Returns:
      `play(variables, states, key) -> (states, trajectory)`, not jitted.
    """
    import mctx
    from pgx.experimental import auto_reset

    evaluate = functools.partial(_masked_evaluation, apply_fn)
    policy = search_policy(search_config, pgx_env.num_actions)
    gamma = float(search_config.get("discount", 1.0))

    def recurrent_fn(variables, key, action, state):
        del key
        player = state.current_player
        state = jax.vmap(pgx_env.step)(state, action)
        logits, value = evaluate(variables, state)
        out = mctx.RecurrentFnOutput(
            reward=state.rewards[jnp.arange(state.rewards.shape[0]), player],
            discount=jnp.where(state.terminated, 0.0, -gamma),
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
            out = policy(variables, k_search, root, recurrent_fn, ~state.legal_action_mask,
                         num_simulations)
            actor = state.current_player
            nxt = step_reset(state, out.action, jax.random.split(k_step, batch))
            record = (state.observation, out.action_weights,
                      nxt.rewards[jnp.arange(batch), actor], nxt.terminated,
                      jnp.where(nxt.terminated, 0.0, -gamma))
            return nxt, record

        return jax.lax.scan(step_fn, states, jax.random.split(key, plies))

    return play


def run(args: argparse.Namespace) -> dict:
    """Our self-play vs pgx-example-style self-play, same network, sims, batch and plies."""
    try:
        import pgx
    except ImportError:
        print("pgx is not installed: skipping the pgx comparison (pip install -e \".[pgx]\")")
        return common.finish({"subcommand": "pgx", "skipped": "pgx not installed"}, args.json)
    from az_jax import network, search, selfplay

    c, batch, sims = common.sized_config(args)
    null = args.null_network
    twin = c.env.id in common.PGX_MATCH
    if not twin and not null:
        raise SystemExit(f"error: no pgx twin of {c.env.id!r}; pgx comparison needs one of "
                         f"{', '.join(common.PGX_MATCH)} (or --null-network, which compares "
                         "with the pgx example's loop written over our env)")
    # pgx's twin is the game with its default parameters (Connect4: no threat planes).
    if twin and dict(c.env.kwargs):
        print(f"pgx comparison: {c.env.id} with its default parameters, not "
              f"{dict(c.env.kwargs)} (like for like with pgx)")
    # The pgx-style loops search as ours (`search_policy`), but without root tactics.
    if c.search.get("tactics", search.DEFAULT_TACTICS) != "none":
        print(f"pgx comparison: ours without search.tactics={c.search.tactics!r}, which "
              "the pgx-style loop has no twin of (like for like)")
        c.search.tactics = "none"
    ours = common.make_env(c.env.id, {} if twin else c.env.kwargs)
    pgx_id = common.PGX_MATCH.get(c.env.id)
    if not twin:
        return _run_null_over_ours(args, c, ours, batch, sims)
    adapter = envs.make(f"pgx:{pgx_id}")  # pgx's game on our protocol: pgx's observation
    pgx_env = pgx.make(pgx_id)
    keys = jax.random.split(jax.random.PRNGKey(1), batch)
    game_ids = jnp.arange(batch, dtype=jnp.int32)
    plies = args.plies

    # Each entry: (jitted call, its arguments, network calls of batch B per window).
    def ours_call(env, with_ids, reuse_root=None):
        net = network.make_network(c.network, env)
        variables = network.init_variables(net, env, jax.random.PRNGKey(0))
        reuse_root = env.deterministic if reuse_root is None else reuse_root
        search_fn = (search.Search(env, null_apply(env.num_actions), c.search) if null
                     else search.make_search(env, net, c.search))
        play = jax.jit(selfplay_bench.make_selfplay_program(env, search_fn, c, plies,
                                                            reuse_root))
        states = jax.vmap(env.init)(keys)
        inputs = (variables, states, jax.random.PRNGKey(2)) + ((game_ids,) if with_ids else ())
        return play, inputs, selfplay.network_calls(plies, sims, reuse_root)

    # pgx style, with our ResNet on pgx's observation (the same network as on the adapter).
    net = network.make_network(c.network, adapter)
    variables = network.init_variables(net, adapter, jax.random.PRNGKey(0))
    apply_fn = (null_apply(adapter.num_actions) if null
                else lambda v, obs: net.apply(v, obs, None, train=False))
    pgx_play = jax.jit(make_pgx_selfplay(pgx_env, apply_fn, c.search, batch=batch,
                                         plies=plies, num_simulations=sims))
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

    return _report(args, c, calls, batch, sims, plies, pgx_id, f"pgx {pgx.__version__}")


def _run_null_over_ours(args, c, env, batch, sims) -> dict:
    """--null-network for a game pgx lacks: the pgx example's loop over our env against
    ours, both with a constant network."""
    from az_jax import search, selfplay

    plies = args.plies
    keys = jax.random.split(jax.random.PRNGKey(1), batch)
    states = jax.vmap(env.init)(keys)
    apply_fn = null_apply(env.num_actions)
    pgx_style = jax.jit(make_pgx_style_over(env, apply_fn, c.search, batch=batch,
                                            plies=plies, num_simulations=sims))
    search_fn = search.Search(env, apply_fn, c.search)
    game_ids = jnp.arange(batch, dtype=jnp.int32)

    def ours(reuse_root):
        play = jax.jit(selfplay_bench.make_selfplay_program(env, search_fn, c, plies,
                                                            reuse_root))
        return (play, ({}, states, jax.random.PRNGKey(2), game_ids),
                selfplay.network_calls(plies, sims, reuse_root))

    calls = {"pgx-style loop over our env": (pgx_style, ({}, states, jax.random.PRNGKey(2)),
                                             selfplay.network_calls(plies, sims, False)),
             f"ours {c.env.id}, game_ids (as trained)": ours(env.deterministic)}
    if not args.quick:
        calls[f"ours {c.env.id}, game_ids, fresh roots"] = ours(False)
    return _report(args, c, calls, batch, sims, plies, None, "our env")


def search_settings(config) -> dict:
    """The search both sides of the comparison run (JSON-able): `config.search`'s policy,
    the settings `search_policy` and the discount take from it, and the backup code."""
    from az_jax import search

    if config.policy == "gumbel":
        settings = {"gumbel_scale": float(config.gumbel_scale),
                    "value_scale": float(config.get("value_scale",
                                                    search.DEFAULT_VALUE_SCALE))}
    else:
        settings = {k: float(config[k]) for k in ("dirichlet_fraction", "dirichlet_alpha",
                                                   "pb_c_init", "pb_c_base")}
    return {"policy": config.policy, **settings,
            "discount": float(config.get("discount", 1.0)),
            "backward": "az_jax's batched backward (batched_backward)"}


def _report(args, c, calls, batch, sims, plies, pgx_id, versus) -> dict:
    """Times `calls` in turns and prints/returns the table (first row: the reference)."""
    rows = []
    timings = common.time_interleaved([call[:2] for call in calls.values()], args.repeats)
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
    network = "null (constant)" if args.null_network else common.net_name(c)
    result = {
        "subcommand": "pgx", **common.machine(), "config": args.config, "env": c.env.id,
        "pgx_env": pgx_id, "versus": versus, "batch": batch,
        "simulations": sims, "plies": plies, "network": network,
        "search": search_settings(c.search), "rows": rows,
        "ours_over_pgx": rows[1]["over_pgx"],
        "ours_over_pgx_median": rows[1]["over_pgx_median"],
    }
    for r in rows[2:]:
        result[r["impl"] + " over pgx"] = r["over_pgx"]
    settings = result["search"]
    shown = ", ".join(f"{k} {v}" for k, v in settings.items() if k not in ("policy", "backward"))
    print(f"self-play, ours vs pgx's AlphaZero example style ({pgx_id or c.env.id}, "
          f"{versus}): batch {batch}, {sims} simulations, {plies} plies, "
          f"network {network} (load {result['load_average']:.1f})")
    print(f"  both sides run the same search: {settings['policy']} ({shown}) with "
          f"{settings['backward']},\n  so the ratio is the loop's (env step, root reuse, "
          "bookkeeping); mctx's backward against ours: `bench backward`")
    head = (f"  {'implementation':<40} {'compile s':>9} {'moves/s':>9} {'sims/s':>9} "
            f"{'/pgx':>6} {'cpu s':>7} {'/pgx cpu':>8} {'per round: median':>17} {'range':>11}")
    print(head)
    print("  " + "-" * (len(head) - 2))
    for r in rows:
        lo, hi = r["over_pgx_range"]
        print(f"  {r['impl']:<40} {r['compile_s']:>9.1f} {common.si(r['moves_per_s']):>9} "
              f"{common.si(r['simulations_per_s']):>9} {r['over_pgx']:>5.2f}x {r['cpu_s']:>7.3f} "
              f"{r['over_pgx_cpu']:>7.2f}x {r['over_pgx_median']:>16.2f}x {lo:>5.2f}-{hi:.2f}")
    print(f"  ours/pgx = {result['ours_over_pgx']:.2f} by best wall times, "
          f"{result['ours_over_pgx_median']:.2f} by the median of the per-round ratios "
          f"(issue target >= 1.0); timed in turns over {args.repeats} rounds; 'cpu s' is the "
          "process CPU time of a call")
    return common.finish(result, args.json)
