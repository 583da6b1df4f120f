"""4 CPU devices vs 1: the same run, and the data really is sharded.

The worker runs in its own process (`XLA_FLAGS=--xla_force_host_platform_device_count=4`
must be set before jax starts, as in rlax's tests). It trains the same tiny config twice
with the real driver, `trainer.train_and_evaluate`, once on a mesh of one device and once
on a mesh of four, and reports what the test compares.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.tiny import tiny_training

ROOT = Path(__file__).resolve().parents[1]


def _tiny_config(archive_starts=0.5):
    from configs import tictactoe

    # Playout-cap randomization on: its per-ply draw must be the same on every device; and
    # restarts from the archive: each shard draws from its own games' positions. Without
    # restarts (archive_starts=0) self-play reuses each root's evaluation from the previous
    # search's tree instead (`selfplay.reuse_root`), so both paths run on four devices.
    return tiny_training(
        tictactoe.get_config(), network__channels=8, search__num_simulations=4,
        selfplay__batch_size=16, selfplay__num_plies=5, train__batch_size=16,
        train__updates_per_iteration=2, train__num_iterations=4, replay__min_size=1,
        parallel__shards=4, selfplay__fast_simulations=2, selfplay__full_search_fraction=0.5,
        checkpoint__every=4, checkpoint__save_replay=True,
        selfplay__archive_starts=archive_starts, selfplay__archive_size=2)


def _worker(out_dir: str) -> None:
    import jax
    import jax.numpy as jnp

    from az_jax import checkpoint, parallel_setup, trainer

    # The persistent cache ($AZ_JAX_CACHE, the tests' own): the runs below share programs.
    parallel_setup.use_compilation_cache(min_compile_seconds=0.5)
    devices = jax.devices()
    assert len(devices) == 4, devices
    config = _tiny_config()
    report = {}
    for n in (1, 4):
        workdir = Path(out_dir) / f"d{n}"
        metrics = trainer.train_and_evaluate(config, str(workdir), devices=devices[:n])
        restored = checkpoint.restore(workdir)
        params = jax.tree.leaves(restored.variables["params"])
        np.savez(Path(out_dir) / f"params{n}.npz", *[np.asarray(p) for p in params])
        report[f"loss{n}"] = metrics["loss"]
        report[f"games{n}"] = metrics["games"]
        report[f"full{n}"] = metrics["plies_full_search"]
        report[f"moves{n}"] = metrics["moves"]
    # Root reuse (restarts off): two iterations on one device and on four, the same network.
    reuse = _tiny_config(archive_starts=0.0)
    reuse.train.num_iterations = 2
    for n in (1, 4):
        metrics = trainer.train_and_evaluate(reuse, str(Path(out_dir) / f"reuse{n}"),
                                             devices=devices[:n])
        params = jax.tree.leaves(checkpoint.restore(Path(out_dir) / f"reuse{n}").variables)
        np.savez(Path(out_dir) / f"reuse{n}.npz", *[np.asarray(p) for p in params])
        report[f"reuse_loss{n}"] = metrics["loss"]

    # A new 4-device run starting from the 1-device run's network (train.init_from; no
    # update: the replay never fills) holds exactly that network.
    start = config.copy_and_resolve_references()
    start.train.init_from, start.train.num_iterations = str(Path(out_dir) / "d1"), 1
    start.replay.min_size = start.replay.capacity  # > the 80 plies of one iteration
    trainer.train_and_evaluate(start, str(Path(out_dir) / "from1"), devices=devices)
    report["init_from_diff"] = max(
        float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(
            jax.tree.leaves(checkpoint.restore(Path(out_dir) / "d1").variables),
            jax.tree.leaves(checkpoint.restore(Path(out_dir) / "from1").variables),
            strict=True))

    # The accelerator path (one jitted program, updates in a lax.scan) and the CPU path
    # (updates looped from the host) compute the same iterations.
    one = trainer.Setup(config, devices[:1])
    scanned = jax.jit(trainer.make_iteration(one))
    looped = trainer.make_host_iteration(one)
    results = []
    for fn in (scanned, looped):
        state = one.initial(jax.random.PRNGKey(3))
        for it in range(3):
            state = fn(*state[:3], jax.random.PRNGKey(10 + it))
        results.append(state)
    report["paths_loss"] = [float(r[3]["loss"]) for r in results]
    report["paths_diff"] = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in
                               zip(jax.tree.leaves(results[0][0].params),
                                   jax.tree.leaves(results[1][0].params), strict=True))

    # Where the state of the 4-device run lives: games and replay split over 4 devices,
    # parameters on all of them.
    setup = trainer.Setup(config, devices)
    train_state, games, buffer = setup.initial(jax.random.PRNGKey(0))
    report["games_devices"] = len(games.states.observation.sharding.device_set)
    report["games_shard_shape"] = list(games.states.observation.addressable_shards[0].data.shape)
    report["games_shape"] = list(games.states.observation.shape)
    pending = games.pending.traj.observation  # [B, L, ...]: split like the games
    report["pending_devices"] = len(pending.sharding.device_set)
    report["pending_shard_shape"] = list(pending.addressable_shards[0].data.shape)
    archive = games.archive.observation  # [B, K, ...]: split like the games
    report["archive_devices"] = len(archive.sharding.device_set)
    report["archive_shard_shape"] = list(archive.addressable_shards[0].data.shape)
    report["buffer_devices"] = len(buffer.data.observation.sharding.device_set)
    report["buffer_shard_shape"] = list(buffer.data.observation.addressable_shards[0].data.shape)
    report["buffer_shape"] = list(buffer.data.observation.shape)
    init_key, _ = jax.random.split(jax.random.PRNGKey(config.seed))
    initial = jax.tree.leaves(setup.initial(init_key)[0].params)
    final = np.load(Path(out_dir) / "params1.npz")
    report["moved"] = max(float(np.abs(np.asarray(a) - final[k]).max())
                          for a, k in zip(initial, final.files, strict=True))
    leaf = jax.tree.leaves(train_state.params)[0]
    report["params_replicated"] = bool(leaf.sharding.is_fully_replicated)
    report["params_devices"] = len(leaf.sharding.device_set)

    # The evaluation's matches on the 4 CPU devices at once: the same results as one
    # after the other on one device, each match on a device of its own.
    from az_jax.eval import external
    from az_jax.eval.gauntlet import Gauntlet
    from az_jax.eval.players import PlayerFactory

    factory = PlayerFactory(setup.env, setup.net, setup.search, str(Path(out_dir) / "d4"))
    me = factory.network(train_state.variables, "me", 4)
    others = [factory.build(o, variables=train_state.variables, label="me", sims=4)
              for o in external.parse_opponents("random,onestep,mcts:4")]
    totals, used = [], []
    for parallel in (False, True):
        g = Gauntlet(setup.env, 8, opening_plies=2)
        if not parallel:
            g.runner.devices = g.runner.devices[:1]
        play = g.play  # records the device each match was given

        def spy(*args, device=None, play=play, **kwargs):
            used.append(device)
            return play(*args, device=device, **kwargs)

        g.play = spy
        totals.append([list(r.total) for r in g.play_all(me, others, jax.random.PRNGKey(5))])
    report["gauntlet_totals"] = totals
    report["gauntlet_devices"] = [None if d is None else d.id for d in used]

    # The solver benchmark's batches of positions, likewise: the same moves.
    from az_jax.eval import solver_bench

    states = jax.vmap(setup.env.init)(jax.random.split(jax.random.PRNGKey(6), 40))
    states = jax.vmap(setup.env.step)(states, jnp.arange(40) % 9,
                                      jax.random.split(jax.random.PRNGKey(7), 40))
    moves = [solver_bench.agent_actions(me, states, jax.random.PRNGKey(8), batch_size=8,
                                        devices=d) for d in (devices[:1], None)]
    report["batches_same"] = bool(np.array_equal(*moves)) and len(moves[0]) == 40
    (Path(out_dir) / "report.json").write_text(json.dumps(report))


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("multidevice")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "tests.test_multidevice", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    p1, p4 = np.load(out / "params1.npz"), np.load(out / "params4.npz")
    r1, r4 = np.load(out / "reuse1.npz"), np.load(out / "reuse4.npz")
    report["reuse_params"] = ([r1[k] for k in r1.files], [r4[k] for k in r4.files])
    return report, [p1[k] for k in p1.files], [p4[k] for k in p4.files]


@pytest.mark.slow
def test_four_devices_train_like_one(result):
    report, p1, p4 = result
    assert report["games1"] == report["games4"] > 0
    assert report["full1"] == report["full4"]
    # One draw per ply for all 16 games (on every device): whole plies are full or fast.
    assert report["full1"] % 16 == 0 and 0 <= report["full1"] <= report["moves1"]
    assert report["loss4"] == pytest.approx(report["loss1"], rel=1e-4, abs=1e-5)
    assert len(p1) == len(p4) > 0
    for a, b in zip(p1, p4, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # The run trained: the parameters moved away from their initial values.
    assert report["moved"] > 1e-3


@pytest.mark.slow
def test_four_devices_reuse_roots_like_one(result):
    report, _, _ = result
    assert report["reuse_loss4"] == pytest.approx(report["reuse_loss1"], rel=1e-4, abs=1e-5)
    r1, r4 = report["reuse_params"]
    assert len(r1) == len(r4) > 0
    for a, b in zip(r1, r4, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_run_on_four_devices_starts_from_another_runs_network(result):
    report, _, _ = result
    assert report["init_from_diff"] == 0.0


@pytest.mark.slow
def test_scanned_and_host_looped_updates_agree(result):
    report, _, _ = result
    scanned, looped = report["paths_loss"]
    assert np.isfinite(scanned) and looped == pytest.approx(scanned, rel=1e-4)
    assert report["paths_diff"] < 1e-5


@pytest.mark.slow
def test_games_and_replay_are_sharded(result):
    report, _, _ = result
    assert report["games_devices"] == 4
    assert report["games_shard_shape"][0] * 4 == report["games_shape"][0]
    assert report["pending_devices"] == 4
    assert report["pending_shard_shape"][:2] == [report["games_shard_shape"][0], 9]
    assert report["archive_devices"] == 4
    assert report["archive_shard_shape"][:2] == [report["games_shard_shape"][0], 2]
    assert report["buffer_devices"] == 4
    # Replay: [shards, capacity / shards, ...], one shard of the 4 on each device.
    assert report["buffer_shape"][:2] == [4, 64]
    assert report["buffer_shard_shape"][0] == 1
    assert report["params_replicated"] and report["params_devices"] == 4


@pytest.mark.slow
def test_matches_play_on_the_devices_at_once_with_the_same_games(result):
    report, _, _ = result
    sequential, parallel = report["gauntlet_totals"]
    assert parallel == sequential and len(parallel) == 3
    assert all(sum(t) == 8 for t in parallel)
    # One device for the sequential three; then one device each (the first three, 0-2).
    assert report["gauntlet_devices"][:3] == [None] * 3
    assert sorted(report["gauntlet_devices"][3:]) == [0, 1, 2]
    assert report["batches_same"]


if __name__ == "__main__":  # python -m tests.test_multidevice OUT_DIR (from the repository)
    _worker(sys.argv[1])
