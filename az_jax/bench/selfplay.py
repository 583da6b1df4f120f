"""`python -m az_jax.bench selfplay`: network forward vs self-play with search; device scaling."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from az_jax import trainer
from az_jax.bench import common

HELP = "network forward vs self-play with search: ratio, compile, --devices scaling"

DESCRIPTION = """\
Times, at the self-play batch and on one device: the bare network forward (a jitted scan of
as many calls as self-play makes, on a changing input) in positions/s, and vectorized
self-play with mctx search over the real env (selfplay.selfplay over --plies plies, called
as the trainer calls it, without its playout cap and archive restarts) in simulations/s (=
batch * plies * simulations / seconds), network evaluations/s (= batch * calls / seconds;
calls = plies * simulations + 1 with a deterministic env, whose roots reuse the previous
search's evaluation, else plies * (simulations + 1)) and moves/s. The ratio is self-play
network evaluations/s over bare forward positions/s: 1.0 means the search and the env cost
nothing. Compile times and peak memory (device, or host RSS on CPU) are reported. With
--devices 1,2,4 it also times the trainer's own iteration on meshes of the first k devices,
built as the trainer builds it (trainer.make_iteration_fn: one jitted program, or on CPU
the updates looped from the host; every ply searched in full, as above), without updates
(self-play + replay writes: sims/s, moves/s) and with them (iteration s, updates/s), and
prints a scaling table with speedups over the first k."""


def add_args(p: argparse.ArgumentParser) -> None:
    common.config_args(p)
    p.add_argument("--devices", type=common.device_counts, default=None, metavar="1,2,4",
                   help="also time self-play and whole training iterations on meshes of the "
                        "first k devices, for each k (on CPU the bench presents the cores as "
                        "that many devices when run as `python -m az_jax.bench`)")


def make_selfplay_program(env, search_fn, c, plies: int,
                          reuse_root: bool | None = None) -> Callable:
    """`play(variables, states, key, game_ids) -> (Trajectory, states)`, as the trainer calls
    selfplay (game_ids a traced input, greedy late moves from Gumbel search, the config's
    temperature and random plies), but every ply with the full search (no playout cap:
    `selfplay.fast_simulations` is left out, so that the simulations counted are the ones
    run) and no restarts from an archive. Not jitted."""
    from az_jax import selfplay

    def play(variables, states, key, game_ids=None):
        return selfplay.selfplay(search_fn, env, variables, states, key, num_plies=plies,
                                 temperature_plies=c.selfplay.temperature_plies,
                                 random_plies=c.selfplay.get("random_plies", 0),
                                 game_ids=game_ids, reuse_root=reuse_root)

    return play


def run(args: argparse.Namespace) -> dict:
    """Bare network forward vs self-play with search at the same batch on one device, and
    with --devices the trainer's iteration on meshes of k devices (`run_scaling`)."""
    from az_jax import network, search, selfplay

    c, batch, sims = common.sized_config(args)
    env = common.make_env(c.env.id, c.env.kwargs)
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
    f, p = common.time_interleaved(
        [(forward, (variables, states.observation, states.legal_action_mask)),
         (play, (variables, states, jax.random.PRNGKey(2), game_ids))], args.repeats)
    f_best, p_best = f["best_s"], p["best_s"]
    result = {
        "subcommand": "selfplay", **common.machine(),
        "config": args.config, "env": repr(env), "batch": batch, "simulations": sims,
        "plies": args.plies, "network": common.net_name(c), "devices_used": 1,
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
    print(f"  network forward      {common.si(result['forward_positions_per_s'])} positions/s "
          f"(compile {result['forward_compile_s']:.1f}s)")
    print(f"  self-play + search   {common.si(result['selfplay_simulations_per_s'])} "
          "simulations/s, "
          f"{common.si(result['selfplay_evaluations_per_s'])} network evaluations/s "
          f"({evals} calls of batch {batch} per window), "
          f"{common.si(result['selfplay_moves_per_s'])} moves/s "
          f"(compile {result['selfplay_compile_s']:.1f}s)")
    print(f"  ratio self-play evaluations/s over forward positions/s  "
          f"{result['ratio_selfplay_over_forward']:.2f}  (1.0: search and env cost nothing)")
    if args.devices:
        result["scaling"] = run_scaling(c, args.devices, args.plies, args.repeats)
        _print_scaling(result["scaling"], batch, sims, args.plies)
    return common.finish(result, args.json)


def time_on_mesh(config, k: int, plies: int, repeats: int) -> dict:
    """Times the trainer's own iteration on a mesh of the first k devices.

    `trainer.make_iteration_fn` builds it as the trainer does (one jitted program with games
    and replay donated; on CPU the updates looped from the host) and it is called on the
    same inputs in two ways: with an empty replay buffer it plays
    and stores (self-play, value targets, replay writes) but does not train, because
    `replay.min_size` is set to the capacity (raised above batch * plies if needed); with
    a full buffer it also runs `train.updates_per_iteration` updates on `train.batch_size`
    sampled positions. `selfplay.num_plies` is set to `plies`, and
    `selfplay.fast_simulations` to 0 (every ply searched in full). Both ways are called once
    before the timed calls: on CPU the update step is jitted on its first call with a full
    buffer (`trainer.make_host_iteration`), so only then is everything compiled.
    """
    c = config.copy_and_resolve_references()
    c.selfplay.num_plies = plies
    # Every ply searched in full (no playout cap), so that the simulations/s count the
    # simulations run, as in the one-device figures.
    c.selfplay.fast_simulations = 0
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

    keys = iter(jax.random.split(jax.random.PRNGKey(1), 2 * repeats + 2))
    first_play, _ = timed(empty, next(keys))  # compiles
    first_learn, warm_updates = timed(full, next(keys))  # compiles the updates too (CPU)
    play, learn = [], []
    for _ in range(repeats):  # in turns, so that a change of load hits both alike
        play.append(timed(empty, next(keys)))
        learn.append(timed(full, next(keys)))
    if any(u for _, u in play) or not (warm_updates and all(u for _, u in learn)):
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
        # the two first calls (one each way) beyond the best timed ones
        "compile_s": first_play - p_best + first_learn - i_best,
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
        print(f"  {r['devices']:>7} {common.si(r['selfplay_simulations_per_s']):>9} "
              f"{common.si(r['selfplay_moves_per_s']):>9} {r['speedup_selfplay']:>7.2f}x "
              f"{r['iteration_s']:>8.3f} {common.si(r['iteration_moves_per_s']):>12} "
              f"{r['iteration_updates_per_s']:>9.1f} {r['speedup_iteration']:>7.2f}x "
              f"{r['compile_s']:>9.1f}")
