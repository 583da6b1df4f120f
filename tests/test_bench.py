"""The benchmark suite runs end to end at tiny sizes and reports positive, finite figures.

Timings here mean nothing (tiny network, unoptimised compiles); only the plumbing and the
JSON fields are checked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from az_jax import bench
from tests.tiny import tiny_args

ROOT = Path(__file__).resolve().parent.parent
TINY = [*tiny_args(replay__capacity=64), "--repeats", "1"]
SIZED = TINY + ["--batch", "4", "--sims", "2", "--plies", "2"]


def _positive(result: dict, *keys: str) -> None:
    for key in keys:
        value = result[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, value)


def _run(tmp_path, *argv: str) -> dict:
    """bench.main in-process; checks that the JSON written equals the result returned."""
    path = tmp_path / f"{argv[0]}.json"
    result = bench.main([*argv, "--json", str(path)])
    written = json.loads(path.read_text())
    assert written == json.loads(json.dumps(result))
    _positive(written, "peak_memory_bytes", "device_count", "cpu_count")
    assert written["peak_memory_kind"] in ("host", "device")
    return written


def _log_interleaved_calls(monkeypatch) -> list[int]:
    """Wraps `common.time_interleaved` so that each call of a timed program appends the
    program's index to the returned list (the order the programs ran in)."""
    from az_jax.bench import common

    order = []
    interleaved = common.time_interleaved

    def spy(calls, repeats, **kwargs):
        def logged(i, fn):
            def call(*args):
                order.append(i)
                return fn(*args)
            return call
        return interleaved([(logged(i, fn), args) for i, (fn, args) in enumerate(calls)],
                           repeats, **kwargs)

    monkeypatch.setattr(common, "time_interleaved", spy)
    return order


def test_env(tmp_path):
    out = _run(tmp_path, "env", "--env", "connect4", "--batch", "8", "--steps", "4",
               "--repeats", "1", "--no-pgx")
    (row,) = out["results"]
    _positive(row, "steps_per_s", "compile_s", "run_s")
    assert row["steps_per_s"] == pytest.approx(8 * 4 / row["run_s"])  # batch x plies / s
    assert row["run_s"] == min(row["times_s"])


def test_env_all_with_a_size_one_game_refuses_stops_before_any_timing(monkeypatch, capsys):
    """`env --env all --size 3`: gomoku refuses the size; that is the one error line,
    before the games listed ahead of it are timed (not after minutes of timing); a run
    that goes on says which game it times."""
    from az_jax.bench import env as env_bench

    timed = []
    monkeypatch.setattr(env_bench, "time_envs", lambda es, *a: timed.extend(es) or [
        dict.fromkeys(("batch", "steps", "compile_s", "steps_per_s", "games_per_s"), 1)
        for _ in es])
    with pytest.raises(SystemExit, match="^error: gomoku: size must be in 5..22, got 3$"):
        bench.main(["env", "--env", "all", "--size", "3", "--no-pgx"])
    assert timed == []
    bench.main(["env", "--env", "connect4", "--no-pgx"])
    assert "[1/1] timing connect4 ..." in capsys.readouterr().err and len(timed) == 1


def test_env_times_ours_and_pgx_in_turns(tmp_path, monkeypatch):
    """`env` runs ours and pgx's twin in turns (one call each per round), so the ratio
    is of timings under the same load."""
    pytest.importorskip("pgx")

    order = _log_interleaved_calls(monkeypatch)
    out = _run(tmp_path, "env", "--env", "tictactoe", "--batch", "8", "--steps", "4",
               "--repeats", "2")
    assert order == [0, 1, 0, 1, 0, 1]  # a warm call each, then two rounds in turns
    ours, theirs = out["results"]
    assert (ours["impl"], theirs["impl"]) == ("az_jax", "pgx")
    assert ours["ours_over_pgx"] == pytest.approx(ours["steps_per_s"] / theirs["steps_per_s"])
    assert len(ours["times_s"]) == len(theirs["times_s"]) == 2
    # ours/pgx of a round is pgx's time over ours (the same plies in both)
    (t1, t2), (p1, p2) = ours["times_s"], theirs["times_s"]
    assert ours["ours_over_pgx_median"] == pytest.approx((p1 / t1 + p2 / t2) / 2)
    _positive(ours, "ours_over_pgx_median", "games_per_s")


def test_train(tmp_path):
    out = _run(tmp_path, "train", *TINY, "--updates", "1")
    assert out["batch"] == 8 and out["updates"] == 1
    assert out["train_positions_per_s"] == pytest.approx(8 * out["train_updates_per_s"])
    assert out["train_scan_positions_per_s"] == pytest.approx(
        8 * out["train_scan_updates_per_s"])  # positions/s of both ways, as described
    assert out["scan_over_calls"] == pytest.approx(out["train_scan_updates_per_s"]
                                                   / out["train_updates_per_s"])
    _positive(out, "train_updates_per_s", "train_positions_per_s", "train_compile_s",
              "train_scan_updates_per_s", "train_scan_compile_s", "scan_over_calls",
              "sample_batches_per_s", "sample_compile_s")


def test_train_updates_as_the_trainer_does(tmp_path, monkeypatch):
    """`train` times learner.update with the config's loss settings, as the trainer calls
    it: a surprise weight given on the command line reaches every update."""
    from az_jax import learner

    seen = []
    update = learner.update

    def spy(*args, **kwargs):
        seen.append(kwargs.get("surprise_weight", 0.0))
        return update(*args, **kwargs)

    monkeypatch.setattr(learner, "update", spy)
    bench.main(["train", *TINY, "--updates", "1", "--config.train.surprise_weight=0.5"])
    assert seen and set(seen) == {0.5}, seen


def test_backward(tmp_path):
    out = _run(tmp_path, "backward", *SIZED, "--noise")
    assert out["same_tree"] is True and out["evaluation"] is False
    _positive(out, "mctx_s", "ours_s", "ratio_mctx_over_ours")
    assert out["ratio_mctx_over_ours"] == pytest.approx(out["mctx_s"] / out["ours_s"])
    _positive(out["program_bytes"], "mctx", "ours")


def test_backward_plies_are_random_opening_moves(capsys):
    """`backward --plies` is the random moves before the one search, not plies of a timed
    self-play call (the help of the self-play subcommands' --plies); 0 searches from the
    start."""
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["backward", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    plies = text[text.rindex("--plies PLIES"):].split(" --")[0]  # the options list
    assert "random moves played from the start" in plies and "self-play" not in plies
    assert bench.build_parser().parse_args(["backward", "--plies", "0"]).plies == 0


def test_backward_with_a_model_refuses_what_it_would_ignore():
    """`backward --model` takes the model's network, game and search: a --config.a.b=v
    override is an error, not silently dropped; an unknown model is one line naming the
    shipped ones."""
    with pytest.raises(SystemExit, match="^error: --model tictactoe searches with its own "
                                         ".*ignored: search.tactics=none "):
        bench.main(["backward", "--model", "tictactoe", "--config.search.tactics=none"])
    with pytest.raises(SystemExit, match="^error: no shipped model 'nope'; available: .*"
                                         "tictactoe"):
        bench.main(["backward", "--model", "nope"])


def test_pgx_comparison(tmp_path):
    pytest.importorskip("pgx")
    out = _run(tmp_path, "pgx", *SIZED, "--quick")  # pgx-style and ours as trained
    assert len(out["rows"]) == 2 and out["rows"][0]["over_pgx"] == 1.0
    for row in out["rows"]:
        _positive(row, "moves_per_s", "simulations_per_s", "evaluations_per_s", "over_pgx",
                  "compile_s")
    _positive(out, "ours_over_pgx")
    # 2 plies x 2 simulations: pgx-style evaluates every root, ours once per window.
    assert [row["network_calls"] for row in out["rows"]] == [6, 5]
    _check_rates(out, batch=4, plies=2, sims=2)


def _check_rates(out: dict, batch: int, plies: int, sims: int) -> None:
    """bench pgx's figures from its rows' times (--repeats 1: one round, so the best time
    is the round's and ours/pgx is pgx's time over ours however it is taken)."""
    pgx_row = out["rows"][0]
    for row in out["rows"]:
        assert row["moves_per_s"] == pytest.approx(batch * plies / row["run_s"])
        assert row["simulations_per_s"] == pytest.approx(batch * plies * sims / row["run_s"])
        assert row["evaluations_per_s"] == pytest.approx(
            batch * row["network_calls"] / row["run_s"])
        ratio = pgx_row["run_s"] / row["run_s"]
        assert row["over_pgx"] == pytest.approx(ratio)
        assert row["over_pgx_median"] == pytest.approx(ratio)
        assert row["over_pgx_range"] == pytest.approx([ratio, ratio])
        assert row["over_pgx_cpu"] == pytest.approx(pgx_row["cpu_s"] / row["cpu_s"])
    ours = out["rows"][1]  # ours as trained
    assert out["ours_over_pgx"] == pytest.approx(pgx_row["run_s"] / ours["run_s"])
    assert out["ours_over_pgx_median"] == pytest.approx(pgx_row["run_s"] / ours["run_s"])


def test_pgx_comparison_null_network_over_our_env(tmp_path, capsys):
    """--null-network: the search's bookkeeping and the env alone; a game pgx lacks is
    compared with the pgx example's loop written over our env, which searches as ours
    (the config's discount) and without the root tactics it has no twin of."""
    out = _run(tmp_path, "pgx", "--config", str(ROOT / "configs" / "gomoku_9x9.py"),
               "--config.env.kwargs.size=5", "--config.search.discount=0.9",
               "--config.search.tactics=win", *SIZED, "--null-network")
    assert out["network"] == "null (constant)" and out["versus"] == "our env"
    assert out["search"]["discount"] == 0.9 and out["search"]["policy"] == "gumbel"
    assert "ours without search.tactics='win'" in capsys.readouterr().out
    assert [row["impl"] for row in out["rows"]] == [
        "pgx-style loop over our env", "ours gomoku, game_ids (as trained)",
        "ours gomoku, game_ids, fresh roots"]
    for row in out["rows"]:
        _positive(row, "moves_per_s", "simulations_per_s", "over_pgx")
    assert [row["network_calls"] for row in out["rows"]] == [6, 5, 6]
    _check_rates(out, batch=4, plies=2, sims=2)
    with pytest.raises(SystemExit, match="--null-network"):
        bench.main(["pgx", "--config", str(ROOT / "configs" / "gomoku_9x9.py"), *SIZED])


def _search_config(policy: str):
    """The default config's search, with settings away from mctx's defaults."""
    from configs import default

    c = default.get_config().search
    c.policy, c.num_simulations, c.max_num_considered_actions = policy, 4, 4
    c.gumbel_scale, c.value_scale, c.discount = 0.5, 0.3, 0.9
    c.dirichlet_fraction, c.dirichlet_alpha, c.pb_c_init = 0.4, 0.5, 0.2
    return c


def _toy_apply(num_actions: int):
    """A network without parameters whose prior and value depend on the position."""
    def apply(variables, obs, mask=None):
        del variables, mask
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        w = jnp.sin(jnp.arange(x.shape[1] * num_actions, dtype=jnp.float32))
        logits = x @ w.reshape(x.shape[1], num_actions) + jnp.cos(jnp.arange(num_actions))
        return logits, jnp.tanh(x @ jnp.cos(jnp.arange(x.shape[1], dtype=jnp.float32)) + 0.1)
    return apply


@pytest.mark.parametrize("policy", ["gumbel", "muzero"])
def test_pgx_style_search_is_ours(policy):
    """`bench pgx`'s pgx-style loops search as our self-play does: the config's policy,
    gumbel_scale, value_scale (or Dirichlet noise and PUCT constants) and discount; the same
    root and key give the same search."""
    import envs
    from az_jax import search
    from az_jax.bench import pgx as pgx_bench

    config, env = _search_config(policy), envs.make("tictactoe")
    apply = _toy_apply(env.num_actions)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 3))
    states = jax.vmap(env.step)(states, jnp.array([0, 4, 8]), jax.random.split(
        jax.random.PRNGKey(1), 3))
    ours = search.Search(env, apply, config)
    root, key = ours.root({}, states), jax.random.PRNGKey(2)
    invalid = ~states.legal_action_mask
    policy_fn = pgx_bench.search_policy(config, env.num_actions)
    recurrent = search.make_recurrent_fn(env, apply, config.discount)
    want = jax.jit(lambda: ours({}, states, key, root=root, invalid=invalid))()
    got = jax.jit(lambda: policy_fn({}, key, root, recurrent, invalid, 4))()
    assert (got.action == want.action).all()
    np.testing.assert_array_equal(got.action_weights, want.action_weights)
    np.testing.assert_array_equal(got.search_tree.node_values, want.search_tree.node_values)


def test_pgx_style_loops_trace_our_batched_backward(monkeypatch):
    """Both pgx-style programs trace mctx's search with az_jax's batched backup, as ours
    does (`batched_backward`): the comparison is of the loops, not of two backups."""
    import envs
    from az_jax import mctx_backward
    from az_jax.bench import pgx as pgx_bench

    traced = []

    def counting(tree, leaf_index):
        traced.append(leaf_index.shape)
        return original(tree, leaf_index)

    original = mctx_backward.backward
    monkeypatch.setattr(mctx_backward, "backward", counting)
    config, env = _search_config("gumbel"), envs.make("tictactoe")
    play = pgx_bench.make_pgx_style_over(env, pgx_bench.null_apply(env.num_actions), config,
                                         batch=2, plies=1, num_simulations=2)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 2))
    jax.eval_shape(play, {}, states, jax.random.PRNGKey(1))
    assert traced == [(2,)]  # the simulations' loop body, traced once
    pgx = pytest.importorskip("pgx")
    pgx_env = pgx.make("tic_tac_toe")
    play = pgx_bench.make_pgx_selfplay(pgx_env, pgx_bench.null_apply(9), config, batch=2,
                                       plies=1, num_simulations=2)
    states = jax.vmap(pgx_env.init)(jax.random.split(jax.random.PRNGKey(0), 2))
    jax.eval_shape(play, {}, states, jax.random.PRNGKey(1))
    assert traced == [(2,), (2,)]




def test_pgx_style_loop_over_our_env_searches_as_ours():
    """One ply of the pgx-style loop over our env: its search is ours from the same root
    (the network's prior and value at the position) with the same key, in positions a move
    or two from the end (the tree reaches finished games: their reward and value 0)."""
    import envs
    from az_jax import search
    from az_jax.bench import pgx as pgx_bench

    config, env = _search_config("gumbel"), envs.make("tictactoe")
    # 5 legal moves, 4 considered (the winning one among them), 8 simulations: the move left
    # out is valued from the root's value.
    apply = _toy_apply(env.num_actions)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 2))
    for moves in ([0, 4], [3, 0], [1, 8], [4, 2]):  # X 0 1 / O 3 4 and X 4 8 / O 0 2
        states = jax.vmap(env.step)(states, jnp.array(moves), jax.random.split(
            jax.random.PRNGKey(1), 2))
    play = pgx_bench.make_pgx_style_over(env, apply, config, batch=2, plies=1,
                                         num_simulations=8)
    key = jax.random.PRNGKey(5)
    _, (_, weights, _, _, _) = jax.jit(play)({}, states, key)
    k_search = jax.random.split(jax.random.split(key, 1)[0], 3)[0]  # the loop's first ply
    ours = search.Search(env, apply, config)
    want = jax.jit(lambda: ours({}, states, k_search, root=ours.root({}, states),
                                invalid=~states.legal_action_mask, num_simulations=8))()
    np.testing.assert_allclose(weights[0], want.action_weights, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("over", ["ours", "pgx"])
def test_pgx_style_loops_play_whole_games(over):
    """The pgx-style loops' trajectories, by the rules of tic-tac-toe: a move can only win
    for its mover, so each ply's reward (the mover's) is +1 or 0, and 0 where a game ends
    only on the ninth stone; a game goes on with one more stone, or restarts empty once it
    ended; the discount is -gamma, 0 at the end."""
    import envs
    from az_jax.bench import pgx as pgx_bench

    config = _search_config("gumbel")  # discount 0.9
    if over == "ours":
        env = envs.make("tictactoe")
        make = pgx_bench.make_pgx_style_over
    else:
        env = pytest.importorskip("pgx").make("tic_tac_toe")
        make = pgx_bench.make_pgx_selfplay
    play = make(env, _toy_apply(9), config, batch=2, plies=12, num_simulations=2)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 2))
    _, (obs, _, reward, done, discount) = jax.jit(play)({}, states, jax.random.PRNGKey(3))
    obs, reward, done = np.asarray(obs), np.asarray(reward), np.asarray(done)
    stones = obs[..., :2].sum(axis=(2, 3, 4))  # [plies, B]: both sides' marks
    assert stones[0].tolist() == [0, 0]
    np.testing.assert_array_equal(stones[1:], np.where(done[:-1], 0, stones[:-1] + 1))
    assert set(reward.ravel().tolist()) <= {0.0, 1.0}
    assert (reward[done & (stones < 8)] == 1).all() and (reward[~done] == 0).all()
    assert done.sum() >= 2 and (reward == 1).any()
    np.testing.assert_allclose(discount, np.where(done, 0.0, -0.9))


@pytest.mark.slow
def test_selfplay_and_devices_subprocess(tmp_path):
    """`selfplay --devices 2,4` on two host devices, in a fresh process (XLA_FLAGS must be
    set before JAX starts): the one-device figures, a 2-device row, and 4 skipped."""
    path = tmp_path / "selfplay.json"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "az_jax.bench", "selfplay", *SIZED, "--devices", "2,4",
         "--json", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scaling over devices" in proc.stdout and "ratio self-play evaluations" in proc.stdout
    out = json.loads(path.read_text())
    _positive(out, "forward_positions_per_s", "selfplay_simulations_per_s",
              "selfplay_evaluations_per_s", "selfplay_moves_per_s",
              "ratio_selfplay_over_forward", "forward_compile_s", "selfplay_compile_s",
              "peak_memory_bytes")
    # Connect4 is deterministic: 2 plies x 2 simulations, plus the roots once per window.
    assert math.isclose(out["selfplay_evaluations_per_s"],
                        out["selfplay_simulations_per_s"] * 5 / 4)
    assert math.isclose(out["ratio_selfplay_over_forward"],
                        out["selfplay_evaluations_per_s"] / out["forward_positions_per_s"])
    two, four = out["scaling"]
    assert two["devices"] == 2 and two["games_per_device"] == 2 and "skipped" not in two
    _positive(two, "selfplay_simulations_per_s", "selfplay_moves_per_s", "iteration_s",
              "iteration_moves_per_s", "iteration_updates_per_s", "speedup_selfplay",
              "speedup_iteration", "compile_s")
    assert math.isfinite(two["update_phase_s"])  # may be ~0 or below at this size
    assert four["devices"] == 4 and "only 2 device(s)" in four["skipped"]


def test_scaling_times_no_compile(monkeypatch):
    """`selfplay --devices` (and `all --devices`) with --repeats 1: the timed iterations
    compile nothing. On CPU the update step is jitted on the first call with a full buffer
    (`trainer.make_host_iteration`), so the warm-up makes one."""
    from az_jax import trainer
    from az_jax.bench import common
    from az_jax.bench import selfplay as selfplay_bench

    compiles, per_call = [], []

    def listener(event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            compiles.append(event)

    make = trainer.make_iteration_fn

    def counted(setup):
        iteration = make(setup)

        def call(*args):
            before = len(compiles)
            out = jax.block_until_ready(iteration(*args))
            per_call.append(len(compiles) - before)
            return out
        return call

    monkeypatch.setattr(trainer, "make_iteration_fn", counted)
    overrides = [o.removeprefix("--config.") for o in tiny_args(selfplay__batch_size=4)]
    c = common.load_config(argparse.Namespace(config=str(ROOT / "configs" / "connect4.py"),
                                              config_overrides=overrides))
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        (row,) = selfplay_bench.run_scaling(c, [1], plies=2, repeats=1)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert row["updates_per_iteration"] == 1
    assert row["update_phase_s"] == pytest.approx(row["iteration_s"] - row["selfplay_s"])
    assert row["speedup_selfplay"] == row["speedup_iteration"] == 1.0  # the first k
    assert per_call[0] > 0  # the warm-up compiled
    assert per_call[-2:] == [0, 0], per_call  # the timed calls: without and with updates


def test_selfplay_program_plays_the_config_s_random_plies(monkeypatch):
    """The timed self-play (`bench selfplay`, and ours in `bench pgx`) plays the config's
    temperature and random plies as the trainer does, each ply searched in full (no playout
    cap: the simulations counted are the ones run)."""
    import envs
    from az_jax import search, selfplay
    from az_jax.bench import pgx as pgx_bench
    from az_jax.bench import selfplay as selfplay_bench
    from configs import default

    seen = {}
    real = selfplay.selfplay

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(selfplay, "selfplay", spy)
    c, env = default.get_config(), envs.make("tictactoe")
    c.search.num_simulations, c.selfplay.temperature_plies, c.selfplay.random_plies = 2, 5, 3
    c.selfplay.fast_simulations = 1
    play = selfplay_bench.make_selfplay_program(
        env, search.Search(env, pgx_bench.null_apply(9), c.search), c, plies=2)
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 2))
    jax.eval_shape(play, {}, states, jax.random.PRNGKey(1))
    assert (seen["temperature_plies"], seen["random_plies"]) == (5, 3)
    assert seen.get("fast_simulations", 0) == 0


def test_scaling_searches_every_ply_in_full(monkeypatch):
    """`selfplay --devices` counts batch x plies x simulations: the trainer's iteration it
    times searches every ply in full, also where the config has a playout cap."""
    from az_jax import trainer
    from az_jax.bench import common
    from az_jax.bench import selfplay as selfplay_bench

    built = []

    def refuse(config, devices):  # record the config, then skip the row (cheap)
        built.append(config.selfplay.fast_simulations)
        raise ValueError("recorded")

    monkeypatch.setattr(trainer, "make_setup", refuse)
    overrides = [o.removeprefix("--config.") for o in tiny_args(selfplay__fast_simulations=1)]
    c = common.load_config(argparse.Namespace(config=str(ROOT / "configs" / "connect4.py"),
                                              config_overrides=overrides))
    assert c.selfplay.fast_simulations == 1
    (row,) = selfplay_bench.run_scaling(c, [1], plies=2, repeats=1)
    assert row["skipped"] == "recorded" and built == [0]


def test_all_skips_pgx_for_a_game_pgx_lacks(tmp_path, capsys):
    """`all` on Gomoku: env, selfplay and train run, the pgx part is skipped with a note
    (pgx has no Gomoku), and the JSON holds them all."""
    out = _run(tmp_path, "all", "--config", str(ROOT / "configs" / "gomoku_9x9.py"),
               "--config.env.kwargs.size=5", *SIZED, "--env", "gomoku", "--env-batch", "4",
               "--env-steps", "2", "--updates", "1",
               "--config.train.updates_per_iteration=2")  # --updates wins in the train part
    assert out["pgx"] == {"subcommand": "pgx", "skipped": out["pgx"]["skipped"]}
    assert "pgx has no twin of 'gomoku'" in out["pgx"]["skipped"]
    printed = capsys.readouterr().out
    assert "== pgx: skipped: pgx has no twin" in printed
    # each part's command line, to run it alone: with the overrides where it takes a config
    train_line = next(line for line in printed.splitlines() if line.startswith("== train:"))
    assert " --updates 1 --config.env.kwargs.size=5 " in train_line, train_line
    assert train_line.endswith(" --config.train.updates_per_iteration=2"), train_line
    assert [out[p]["subcommand"] for p in ("env", "selfplay", "train")] == [
        "env", "selfplay", "train"]
    _positive(out["selfplay"], "selfplay_moves_per_s")
    _positive(out["train"], "train_updates_per_s")
    assert out["train"]["updates"] == 1 and out["selfplay"]["plies"] == 2
    # Gomoku is deterministic: 2 plies x 2 simulations, plus the roots once per window.
    sp = out["selfplay"]
    assert sp["selfplay_evaluations_per_s"] == pytest.approx(
        sp["selfplay_simulations_per_s"] * 5 / 4)
    assert sp["selfplay_moves_per_s"] == pytest.approx(sp["selfplay_simulations_per_s"] / 2)
    assert "failed_part" not in out


def test_all_writes_the_finished_parts_when_one_fails(tmp_path, monkeypatch):
    """A part that fails leaves the JSON of the parts before it, and its name."""
    from az_jax.bench import suite

    def part(name):
        def run(args):
            if name == "train":
                raise RuntimeError("the train part failed")
            return {"subcommand": name}
        return types.SimpleNamespace(add_args=suite.PARTS[name].add_args, run=run)

    monkeypatch.setattr(suite, "PARTS", {name: part(name) for name in suite.PARTS})
    path = tmp_path / "all.json"
    with pytest.raises(RuntimeError, match="the train part failed"):
        bench.main(["all", *SIZED, "--json", str(path)])
    out = json.loads(path.read_text())
    assert out["env"] == {"subcommand": "env"} and out["selfplay"] == {"subcommand": "selfplay"}
    assert out["failed_part"] == "train" and "train" not in out and "pgx" not in out


def test_threats(tmp_path):
    out = _run(tmp_path, "threats", "--size", "7", "--games", "40", "--depths", "2,3",
               "--min-fours", "3", "--max-fours", "3", "--repeats", "1")
    row, deep = out["rows"]
    assert row["depth"] == 2 and out["positions"]["3"] > 0
    # depth 3 reaches a VCF of three fours: the mask keeps its first move everywhere
    assert deep["depth"] == 3 and deep["pruned"]["3"] == deep["pruned_open_three"]["3"] == 0
    # a VCF of three fours is beyond depth 2: pruned or not, never more than there are
    assert 0 <= row["pruned_open_three"]["3"] <= row["pruned"]["3"] <= out["positions"]["3"]
    assert out["open_three"]["3"] <= out["positions"]["3"]
    _positive(row, "root_ms", "compile_s")


def test_threats_times_the_depths_in_turns(tmp_path, monkeypatch):
    """`threats` times its depths' roots in turns (one call each per round), as README says
    of programs compared with each other, so a change of load hits all depths alike."""

    order = _log_interleaved_calls(monkeypatch)
    out = _run(tmp_path, "threats", "--size", "7", "--games", "40", "--depths", "2,3",
               "--min-fours", "3", "--max-fours", "3", "--repeats", "2")
    assert order == [0, 1, 0, 1, 0, 1]  # a warm call each, then two rounds in turns
    assert [r["depth"] for r in out["rows"]] == [2, 3]


@pytest.mark.parametrize("argv", [["env", "--batch", "0"], ["env", "--steps", "-1"],
                                  ["train", "--repeats", "0"], ["selfplay", "--sims", "0"],
                                  ["threats", "--games", "x"], ["learn", "--games", "0"],
                                  ["selfplay", "--sims", "100001"],
                                  ["selfplay", "--devices", "0,2"], ["all", "--devices", "x"],
                                  ["pgx", "--sims", "1000000000"]])
def test_counts_below_one_stop_at_the_command_line(argv, capsys):
    """A batch, step, repeat or game count of 0 or less (or simulations beyond the front
    ends' 100,000) is argparse's one-line error (exit status 2), not a ZeroDivisionError or
    an XLA traceback after the imports."""
    with pytest.raises(SystemExit) as e:
        bench.build_parser().parse_args(argv)
    assert e.value.code == 2
    assert f"error: argument {argv[1]}: " in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--depths", "3,x"], ["--depths", ","], ["--depths", "1,3"],
                                  ["--seed", "-1"]])
def test_threats_options_stop_at_the_command_line(argv, capsys):
    """`threats` with depths that are not integers of at least 2, or a negative seed
    (numpy's generator takes none): argparse's one-line error, not a traceback."""
    with pytest.raises(SystemExit) as e:
        bench.build_parser().parse_args(["threats", *argv])
    assert e.value.code == 2
    assert f"error: argument {argv[0]}: " in capsys.readouterr().err


def test_threats_board_size_out_of_range_is_one_line():
    with pytest.raises(SystemExit, match="^error: gomoku: size must be in 5..22, got 3$"):
        bench.main(["threats", "--size", "3"])


@pytest.mark.parametrize("argv", [["train"], ["selfplay"], ["backward"],
                                  ["pgx", "--null-network"]])
def test_a_config_s_env_refused_by_the_game_is_one_line(argv):
    """A config whose env parameters the game refuses is one error line, as in train.py,
    not a ValueError traceback."""
    with pytest.raises(SystemExit, match="^error: size must be in 5..22, got 3$"):
        bench.main([*argv, "--config", str(ROOT / "configs" / "gomoku_9x9.py"),
                    "--config.env.kwargs.size=3"])


@pytest.mark.parametrize("argv", [["train"], ["selfplay"], ["backward"],
                                  ["pgx", "--null-network"], ["all"]])
def test_a_config_train_py_would_refuse_is_refused_before_any_work(argv):
    """Overrides are checked as train.py checks them (`config.validate`): every problem
    in one message before anything compiles, not a ZeroDivisionError (train.batch_size=0
    in bench train) or a ValueError traceback from deep in the search."""
    with pytest.raises(SystemExit, match=r"(?s)^error: invalid config:.*train\.batch_size"
                                         r".*search\.num_simulations"):
        bench.main([*argv, "--config", str(ROOT / "configs" / "tictactoe.py"),
                    "--config.train.batch_size=0", "--config.search.num_simulations=0"])


def test_overrides_for_a_subcommand_without_a_config_are_refused():
    """--config.a.b=v overrides for a subcommand without a config are an error, not
    ignored; an unknown --env names the choices."""
    with pytest.raises(SystemExit, match="env takes no config, so no --config.a.b=v "
                                         "overrides: train.batch_size=2"):
        bench.main(["env", "--env", "nope", "--config.train.batch_size=2"])
    with pytest.raises(SystemExit, match="^error: unknown --env 'nope'; choose from "
                                         ".*connect4, .*tictactoe or all$"):
        bench.main(["env", "--env", "nope"])


def test_devices_ask_the_cpu_backend_for_the_most_devices(monkeypatch):
    """`python -m az_jax.bench selfplay --devices 2,4,1` presents the CPU as 4 devices
    (the largest count), unless XLA_FLAGS already sets a count; `learn` as its cores."""
    from az_jax.bench import selfplay as selfplay_bench

    monkeypatch.setattr(selfplay_bench, "run", lambda args: {"devices": args.devices})
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert bench.main(["selfplay", "--devices", "2,4,1"], host_devices=True) == {
        "devices": [2, 4, 1]}
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    bench.main(["selfplay", "--devices", "8"], host_devices=True)
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    # learn's evaluation runs one job a core: as many devices as usable cores
    from az_jax import parallel_setup
    from az_jax.bench import learn as learn_bench

    monkeypatch.setattr(learn_bench, "run", lambda args: {})
    monkeypatch.setattr(parallel_setup, "usable_cpu_count", lambda: 3)
    monkeypatch.delenv("XLA_FLAGS")
    bench.main(["learn"], host_devices=True)
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=3"


def test_speedups_are_over_the_first_device_count_that_ran(monkeypatch):
    """The scaling table's speedups: the first row that ran over each row (times halve:
    2x), and counts beyond the machine's devices are skipped rows."""
    from az_jax.bench import selfplay as selfplay_bench

    times = {1: (4.0, 10.0), 2: (2.0, 4.0)}  # devices -> (self-play s, iteration s)
    monkeypatch.setattr(selfplay_bench, "time_on_mesh", lambda c, k, plies, repeats: {
        "devices": k, "selfplay_s": times[k][0], "iteration_s": times[k][1]})
    monkeypatch.setattr(jax, "device_count", lambda: 2)
    one, two, many = selfplay_bench.run_scaling(None, [1, 2, 64], plies=2, repeats=1)
    assert (one["speedup_selfplay"], one["speedup_iteration"]) == (1.0, 1.0)
    assert (two["speedup_selfplay"], two["speedup_iteration"]) == (2.0, 2.5)
    assert two["speedup_base_devices"] == 1
    assert many["devices"] == 64 and "only 2 device(s)" in many["skipped"]


def test_time_interleaved_separates_the_first_call_from_the_best():
    """Calls that sleep 0.3 s the first time and 0.1 s after: compile_s is the difference
    (0.2 s), best_s the 0.1 s, cpu_s (sleeping costs none) below it; calls in turns."""
    from az_jax.bench import common

    order = []

    def sleeper(name):
        def call():
            time.sleep(0.3 if name not in order else 0.1)
            order.append(name)
        return call

    a, b = common.time_interleaved([(sleeper("a"), ()), (sleeper("b"), ())], repeats=2)
    assert order == ["a", "b", "a", "b", "a", "b"]
    for r in (a, b):
        assert len(r["times_s"]) == 2 and r["best_s"] == min(r["times_s"])
        assert 0.1 <= r["best_s"] < 0.2 and 0.1 < r["compile_s"] < 0.3, r  # not 0.4
        assert r["cpu_s"] < r["best_s"]


def test_time_interleaved_shows_progress_on_a_terminal(monkeypatch):
    """On a terminal, a bar counts the calls: compiling first, then timing."""
    import io

    from az_jax.bench import common

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    common.time_interleaved([(lambda: None, ())], repeats=2)
    assert "compiling" in err.getvalue() and "timing" in err.getvalue()
    assert "/3 [" in err.getvalue()  # three calls: one to compile, two timed


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc only")
def test_peak_rss_is_the_kernel_s_high_water_mark_in_bytes():
    from az_jax.bench import common

    def vm_hwm() -> int:  # the kernel's peak resident set size, in kB
        line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                    if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    peak, kernel = common.peak_rss(), vm_hwm()
    assert abs(peak - kernel) < 0.05 * kernel, (peak, kernel)  # the two counts differ a bit


def test_si_prefixes():
    from az_jax.bench import common

    assert [common.si(x) for x in (999.0, 1000.0, 1.5e6, 2e9, 12.34)] == [
        "999.0", "1.00k", "1.50M", "2.00G", "12.3"]


def test_random_legal_actions_of_the_env_bench():
    """The env bench's sampler: legal moves only, also where its 16 cheap draws all miss
    (one legal action in 512), spread over the legal ones."""
    from az_jax.bench import env as env_bench

    rows = jnp.arange(64)
    mask = jnp.zeros((64, 512), bool).at[rows, (rows * 37) % 512].set(True)
    mask = mask.at[:32, 500].set(True).at[:32, 3].set(True)  # 3 legal in the first half
    picks = np.asarray(jax.jit(env_bench.hashed_random_legal)(jax.random.PRNGKey(0), mask))
    assert np.asarray(mask)[np.arange(64), picks].all(), picks
    own = (np.arange(32) * 37) % 512
    assert (picks[:32] == own).any() and np.isin(picks[:32], [3, 500]).any()  # not one only


def test_env_loop_restarts_finished_games():
    """Tic-tac-toe from the start for 9 plies: every game ends once (at ply 5 or later,
    and a fresh game cannot end in the 4 plies left), so 8 finished games, and each of the
    8 games is a fresh one under way."""
    import envs
    from az_jax.bench import env as env_bench

    ttt = envs.make("tictactoe")
    run = jax.jit(env_bench.make_env_loop(ttt, 8, 9))
    states = jax.vmap(ttt.init)(jax.random.split(jax.random.PRNGKey(0), 8))
    states, finished = run(states, ttt.init(jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
    assert int(finished) == 8
    assert not np.asarray(states.done).any() and (np.asarray(states.step_count) <= 4).all()


@pytest.mark.parametrize("where,says", [("missing/x.json", "no folder"),
                                        (".", "is a folder: give a file")])
def test_a_bad_json_path_is_refused_before_the_benchmark_runs(tmp_path, capsys, where, says):
    """It was a FileNotFoundError/IsADirectoryError traceback after the timings, which
    were lost; now the path is checked first (nothing printed, nothing compiled)."""
    with pytest.raises(SystemExit) as e:
        bench.main(["env", "--env", "tictactoe", "--no-pgx", "--json", str(tmp_path / where)])
    assert says in str(e.value)
    assert capsys.readouterr().out == ""


def test_a_huge_seed_is_a_usage_error():
    """An OverflowError traceback deep in JAX after compiling; now argparse's error."""
    with pytest.raises(SystemExit) as e:
        bench.main(["env", "--env", "tictactoe", "--no-pgx", "--seed", "9" * 30])
    assert e.value.code == 2
