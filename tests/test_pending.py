"""Pending plies: every ply of a game gets its exact outcome target once, whatever window
its game ends in (hand-made trajectories, a checkpoint in the middle, real self-play)."""

import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import envs
from az_jax import checkpoint, network, search, selfplay

# A fake env for `init_pending`: the "observation" of a ply is its id (column * 100 + the
# ply's index in the column's whole timeline), so the test can tell every ply apart.
FAKE = types.SimpleNamespace(observation_shape=(1,), observation_dtype=jnp.float32,
                             num_actions=2)
T, B = 4, 2  # plies per window, games
# Three windows of two columns (one game slot each), time-major [3 * T, B]. Per ply:
# (mover, mover's reward, done, next mover).
#
# Column 0: game A, 10 plies (0..9, players alternating from p0), spans the three windows
#   and ends at ply 9 (window 3, t=1) with a win for its mover p1; game A2 starts at ply 10
#   and is still running at the end (plies 10, 11 pending).
# Column 1: game B1 is a draw after 2 plies (window 1, t=0..1); B2 (p0, p1, p0) ends when
#   p0 wins at window 2, t=0; inside window 2, B3 starts, and ends at t=2 with p1's
#   illegal move (p1 gets -1), and B4 starts at t=3 and runs to the end (5 plies pending).
COLUMNS = [
    [(k % 2, 1.0 if k == 9 else 0.0, k == 9, 1 - k % 2) for k in range(10)]
    + [(0, 0.0, False, 1), (1, 0.0, False, 0)],
    [(0, 0.0, False, 1), (1, 0.0, True, 0),  # B1: a draw
     (0, 0.0, False, 1), (1, 0.0, False, 0), (0, 1.0, True, 1),  # B2: p0 wins
     (0, 0.0, False, 1), (1, -1.0, True, 0),  # B3: p1 loses by its own move
     (0, 0.0, False, 1), (1, 0.0, False, 0), (0, 0.0, False, 1), (1, 0.0, False, 0),
     (0, 0.0, False, 1)],  # B4: running
]


def _expected(g):
    """Hand-worked targets {ply id: value} of the plies whose game ended, gamma = g."""
    out = {k: (-g) ** (9 - k) for k in range(10)}  # A: p1 (ply 9's mover) won
    out.update({100: 0.0, 101: 0.0})  # B1: draw
    out.update({102: g * g, 103: -g, 104: 1.0})  # B2: p0 won at 104
    out.update({105: g, 106: -1.0})  # B3: p1 (106) lost: p0's ply before it is worth +g
    return out


RUNNING = {0: [10, 11], 1: [107, 108, 109, 110, 111]}  # pending at the end, oldest first


def _window(w):
    """Window w (0, 1, 2) as a Trajectory [T, B]."""
    rows = [[COLUMNS[b][w * T + t] for b in range(B)] for t in range(T)]
    field = lambda i, dtype: jnp.asarray([[r[b][i] for b in range(B)] for r in rows], dtype)
    ids = jnp.asarray([[b * 100 + w * T + t for b in range(B)] for t in range(T)], jnp.float32)
    z = jnp.zeros((T, B, FAKE.num_actions))
    return selfplay.Trajectory(
        observation=ids[..., None], policy=z, legal_mask=z.astype(bool),
        player=field(0, jnp.int32), reward=field(1, jnp.float32), done=field(2, bool),
        next_player=field(3, jnp.int32), root_value=jnp.zeros((T, B)))


settle = jax.jit(selfplay.settle_pending, static_argnames="discount")


def _run(max_length, discount, save_between=None):
    """Settles the three windows in turn. Returns ({id: [targets]}, pending ids per game,
    dropped per game, plies written per window). With `save_between` (a tmp dir) the
    pending store is saved and restored through orbax between windows 2 and 3."""
    pending = selfplay.init_pending(FAKE, B, max_length)
    got, dropped, written = {}, np.zeros(B, int), []
    for w in range(3):
        timeline, targets, valid, pending, drop = settle(pending, _window(w), discount)
        assert timeline.player.shape == targets.shape == valid.shape == (max_length + T, B)
        ids = np.asarray(timeline.observation[..., 0]).astype(int)
        valid, targets = np.asarray(valid), np.asarray(targets)
        for i, v in zip(ids[valid], targets[valid], strict=True):
            got.setdefault(int(i), []).append(float(v))
        dropped += np.asarray(drop)
        written.append(int(valid.sum()))
        if save_between is not None and w == 1:
            mngr = checkpoint.manager(save_between)
            checkpoint.save(mngr, 2, {"pending": pending}, {"iteration": 2})
            empty = selfplay.init_pending(FAKE, B, max_length)
            _, state, _, _ = checkpoint.restore_latest(mngr, {"pending": empty})
            restored = state["pending"]
            assert type(restored) is selfplay.Pending  # noqa: E721 - the NamedTuple comes back
            jax.tree.map(np.testing.assert_array_equal, restored, pending)
            pending = restored
    obs = np.asarray(pending.traj.observation[..., 0]).astype(int)
    length = np.asarray(pending.length)
    running = {b: obs[b, max_length - length[b]:].tolist() for b in range(B)}
    return got, running, dropped.tolist(), written


@pytest.mark.parametrize("discount", [1.0, 0.9])
def test_every_ply_gets_its_exact_target_once(discount, tmp_path):
    got, running, dropped, written = _run(max_length=10, discount=discount)
    want = _expected(discount)
    assert sorted(got) == sorted(want), "plies lost or invented"
    for i, values in got.items():
        assert len(values) == 1, f"ply {i} written {len(values)} times"
        assert values[0] == pytest.approx(want[i], rel=1e-6, abs=1e-7), i
    assert running == RUNNING and dropped == [0, 0]
    # Window 1: B1 ended (2 plies); window 2: B2 and B3 (3 + 2); window 3: A (10).
    assert written == [2, 5, 10]
    # Saved and restored through orbax in the middle: the same result.
    again = _run(max_length=10, discount=discount, save_between=tmp_path / "ckpt")
    assert again == (got, running, dropped, written)


def test_a_game_longer_than_the_store_drops_its_oldest_plies():
    """L = 5: game A's first plies fall out of the store (counted); the rest keep their
    exact targets; B4 (5 plies running) still fits."""
    got, running, dropped, _ = _run(max_length=5, discount=0.9)
    want = _expected(0.9)
    lost = set(range(10)) - set(got)
    # After window 2, A's tail is plies 0..7: 8 > 5, so 0..2 go.
    assert lost == {0, 1, 2} and dropped == [3, 0]
    for i in got:
        assert got[i] == [pytest.approx(want[i], rel=1e-6, abs=1e-7)]
    assert running == RUNNING
    played = 3 * T * B
    assert sum(map(len, got.values())) + sum(dropped) + sum(map(len, running.values())) == played


def _random_column(rng, n):
    """n plies of back-to-back random games (lengths 1-13; a mover may move twice; the
    last ply's mover wins, loses or draws), as (mover, reward, done, next mover)."""
    plies = []
    while len(plies) < n:
        player, game = int(rng.integers(2)), []
        for _ in range(int(rng.choice([1, 2, 3, 5, 8, 13]))):
            nxt = player if rng.random() < 0.2 else 1 - player
            game.append([player, 0.0, False, nxt])
            player = nxt
        game[-1][1:3] = [float(rng.choice([1.0, -1.0, 0.0])), True]
        plies += game
    return plies[:n]


def _reference_targets(plies, g):
    """A plain backward pass: each ply's discounted outcome for its mover, None while its
    game has not ended."""
    out, v, known = [None] * len(plies), 0.0, False
    for t in range(len(plies) - 1, -1, -1):
        mover, reward, done, nxt = plies[t]
        if done:
            v, known = reward, True
        elif known:
            v = reward + (1.0 if nxt == mover else -1.0) * g * v
        out[t] = v if known else None
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_windows_match_a_plain_reference(seed):
    """Random games cut into 5 windows of T plies, a store of 5: every ply of a finished
    game is written once with the reference's target unless its game outgrew the store
    (then only its oldest plies are dropped, and counted); the store holds each running
    game's newest plies; played = written + dropped + pending."""
    rng = np.random.default_rng(seed)
    windows, store, g = 5, 5, float(rng.choice([1.0, 0.9]))
    columns = [_random_column(rng, windows * T) for _ in range(B)]
    pending = selfplay.init_pending(FAKE, B, store)
    got, dropped = {}, 0
    for w in range(windows):
        rows = [[columns[b][w * T + t] for b in range(B)] for t in range(T)]
        field = lambda i, dtype, rows=rows: jnp.asarray(
            [[r[b][i] for b in range(B)] for r in rows], dtype)
        ids = jnp.asarray([[b * 100 + w * T + t for b in range(B)] for t in range(T)],
                          jnp.float32)
        z = jnp.zeros((T, B, FAKE.num_actions))
        window = selfplay.Trajectory(
            observation=ids[..., None], policy=z, legal_mask=z.astype(bool),
            player=field(0, jnp.int32), reward=field(1, jnp.float32),
            done=field(2, bool), next_player=field(3, jnp.int32),
            root_value=jnp.zeros((T, B)))
        timeline, targets, valid, pending, drop = settle(pending, window, g)
        valid = np.asarray(valid)
        for i, v in zip(np.asarray(timeline.observation[..., 0]).astype(int)[valid],
                        np.asarray(targets)[valid], strict=True):
            assert int(i) not in got, f"ply {i} written twice"
            got[int(i)] = float(v)
        dropped += int(np.asarray(drop).sum())
    length = np.asarray(pending.length)
    assert len(got) + dropped + length.sum() == windows * T * B
    for b, plies in enumerate(columns):
        want, start = _reference_targets(plies, g), 0
        for t, v in enumerate(want):
            if v is None:
                assert b * 100 + t not in got, "a running game's ply was written"
            elif b * 100 + t in got:
                assert got[b * 100 + t] == pytest.approx(v, rel=1e-5, abs=1e-6)
            if plies[t][2]:  # a game ends: if it fit in the store, none of it is lost
                if t - start + 1 <= store:
                    assert all(b * 100 + u in got for u in range(start, t + 1))
                start = t + 1
        newest = [b * 100 + u for u in range(start, len(plies))][-store:]
        obs = np.asarray(pending.traj.observation[b, :, 0]).astype(int)
        assert obs[store - length[b]:].tolist() == newest


def test_real_selfplay_adds_exactly_the_plies_of_finished_games():
    """Tic-tac-toe self-play with a real network and search, 5-ply windows (games span
    windows and restart inside them): over 4 windows the plies written to the replay are
    exactly the plies of the games that finished, counted from the `done` flags alone, and
    what is pending is each game's unfinished tail."""
    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=4, num_blocks=1, norm="none")
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    cfg = ml_collections.ConfigDict(dict(
        policy="gumbel", num_simulations=2, max_num_considered_actions=4, gumbel_scale=1.0,
        dirichlet_alpha=0.3, dirichlet_fraction=0.25, pb_c_init=1.25, pb_c_base=19652.0))
    fn = search.make_search(env, net, cfg)
    batch, plies, windows = 8, 5, 4

    @jax.jit
    def window(states, pending, key):
        traj, states = selfplay.selfplay(fn, env, variables, states, key, num_plies=plies,
                                         temperature_plies=9)
        return (traj.done, *selfplay.settle_pending(pending, traj)[2:], states)

    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(1), batch))
    pending = selfplay.init_pending(env, batch, env.max_game_length)
    dones, added = [], 0
    for key in jax.random.split(jax.random.PRNGKey(2), windows):
        done, valid, pending, dropped, states = window(states, pending, key)
        dones.append(np.asarray(done))
        added += int(np.asarray(valid).sum())
        assert not np.asarray(dropped).any()
    done = np.concatenate(dones)  # [windows * plies, B]
    # A ply belongs to a finished game iff its game's `done` comes at or after it.
    finished = np.flip(np.logical_or.accumulate(np.flip(done, 0), 0), 0)
    assert done.sum() >= batch  # games ended, several inside windows
    assert added == finished.sum() > 0
    np.testing.assert_array_equal(np.asarray(pending.length), (~finished).sum(0))


def test_config_switches_and_older_configs():
    from az_jax import config as config_lib
    from az_jax import trainer
    from configs import default

    c = default.get_config()
    assert trainer.targets_mode(c) == "pending"
    assert trainer.pending_length(c, envs.make("connect4")) == 42
    c.selfplay.max_game_length = 7
    assert trainer.pending_length(c, envs.make("connect4")) == 7
    unbounded = types.SimpleNamespace(id="pgx:othello", max_game_length=None)
    c.selfplay.max_game_length = 0
    with pytest.raises(ValueError, match="set --config.selfplay.max_game_length=N"):
        trainer.pending_length(c, unbounded)
    c.selfplay.bootstrap = True  # takes precedence; nothing kept pending
    assert trainer.targets_mode(c) == "bootstrap" and trainer.pending_length(c, unbounded) == 0
    c.selfplay.bootstrap, c.selfplay.pending = False, False
    assert trainer.targets_mode(c) == "drop"
    # A config saved before the fields existed: valid, and pending by default.
    d = default.get_config().to_dict()
    del d["selfplay"]["pending"], d["selfplay"]["max_game_length"]
    old = ml_collections.ConfigDict(d)
    config_lib.validate(old, 1)
    assert trainer.targets_mode(old) == "pending"
    d["selfplay"].update(pending=None, max_game_length=-1)
    with pytest.raises(ValueError) as e:
        config_lib.validate(ml_collections.ConfigDict(d), 1)
    assert "selfplay.pending=None must be True or False" in str(e.value)
    assert "selfplay.max_game_length=-1 must be from 0" in str(e.value)


def test_checkpoints_with_and_without_pending_plies_restore(tmp_path):
    """A run that stops keeping plies pending (or changes L) resumes from a checkpoint
    that has them (they are read and left out); one without them restores with
    `optional`."""
    import warnings

    mngr = checkpoint.manager(tmp_path)
    pending = selfplay.init_pending(FAKE, B, 3)
    checkpoint.save(mngr, 1, {"a": jnp.ones(3), "pending": pending}, {"iteration": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "skipping checkpoint" would raise
        step, state, _, _ = checkpoint.restore_latest(mngr, {"a": jnp.zeros(3)})
        assert step == 1 and list(state) == ["a"]
        longer = {"a": jnp.zeros(3), "pending": selfplay.init_pending(FAKE, B, 5)}
        with pytest.warns(UserWarning, match="checkpoint 1: its pending do not fit"):
            step, state, _, _ = checkpoint.restore_latest(mngr, longer, optional=("pending",))
        assert step == 1 and list(state) == ["a"]
        same = {"a": jnp.zeros(3), "pending": pending}
        _, state, _, _ = checkpoint.restore_latest(mngr, same, optional=("pending",))
        assert isinstance(state["pending"], selfplay.Pending)
        np.testing.assert_array_equal(state["a"], np.ones(3))
    # Only what does not fit starts afresh: another optional item that fits comes back.
    checkpoint.save(mngr, 2, {"a": jnp.ones(3), "pending": pending, "archive": jnp.ones(4)},
                    {"iteration": 2})
    mngr.wait_until_finished()
    longer["archive"] = jnp.zeros(4)
    with pytest.warns(UserWarning, match="checkpoint 2: its pending do not fit"):
        step, state, _, _ = checkpoint.restore_latest(mngr, longer,
                                                      optional=("pending", "archive"))
    assert step == 2 and sorted(state) == ["a", "archive"]
    np.testing.assert_array_equal(state["archive"], np.ones(4))


def test_q_target_weight_mixes_the_root_value_in():
    """train.q_target_weight = 1: the stored value targets are the searches' root values
    (not game results); 0: the results (-1, 0, 1) alone. Tic-tac-toe games all end within
    the 9-ply window, so every ply is stored."""
    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    stored = {}
    for weight in (0.0, 1.0):
        c = tiny_training(tictactoe.get_config(), selfplay__num_plies=9,
                          train__q_target_weight=weight)
        setup = trainer.Setup(c, jax.devices()[:1])
        train_state, games, buffer = setup.initial(jax.random.PRNGKey(0))
        play, _ = trainer.make_steps(setup)
        _, buffer, _ = jax.jit(play)(train_state.variables, games, buffer, jax.random.PRNGKey(1))
        sizes, values = np.asarray(buffer.size), np.asarray(buffer.data.value)
        stored[weight] = np.concatenate([values[s, :n] for s, n in enumerate(sizes)])
    assert len(stored[0.0]) == len(stored[1.0]) >= 8 * 5  # every ply of every game
    assert set(np.unique(stored[0.0])) <= {-1.0, 0.0, 1.0}
    assert np.abs(stored[1.0]).max() <= 1.0
    assert not np.isin(stored[1.0], [-1.0, 0.0, 1.0]).all()  # root values, not results


def test_the_trainer_discounts_pending_targets():
    """With search.discount = 0.9 the trainer's stored value targets are the discounted
    outcomes, hand-derived: 0 for a draw, +-0.9^k for a ply k plies before the game's
    last move (Bagh-Chal's config trains so); never only the undiscounted +-1."""
    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    c = tiny_training(tictactoe.get_config(), selfplay__num_plies=9, search__discount=0.9)
    assert trainer.targets_mode(c) == "pending"
    setup = trainer.Setup(c, jax.devices()[:1])
    train_state, games, buffer = setup.initial(jax.random.PRNGKey(0))
    play, _ = trainer.make_steps(setup)
    _, buffer, _ = jax.jit(play)(train_state.variables, games, buffer, jax.random.PRNGKey(1))
    sizes, values = np.asarray(buffer.size), np.asarray(buffer.data.value)
    stored = np.concatenate([values[s, :n] for s, n in enumerate(sizes)])
    allowed = np.array([0.0] + [sign * 0.9 ** k for k in range(9) for sign in (1, -1)])
    assert len(stored) >= 8 * 5  # every ply of every game (all end within the window)
    assert np.isclose(stored[:, None], allowed[None]).any(1).all(), np.unique(stored)
    assert ((np.abs(stored) > 0) & (np.abs(stored) < 0.95)).any()


def test_selfplay_metrics_by_hand():
    """The metrics of one window, hand-counted from a made-up trajectory [T=3, B=3]: four
    games end (a win for each player, one by the loser's own illegal move, and a draw that
    the second player ends), and the per-update metrics of three updates, one skipped."""
    from az_jax import trainer

    # Per ply (mover, mover's reward, done, |root value|); columns are game slots.
    plies = [[(0, 0.0, False, 0.1), (1, 0.0, False, 0.2), (0, 1.0, True, 0.3)],
             [(1, 1.0, True, 0.4), (0, 0.0, False, 0.5), (0, 0.0, False, 0.6)],
             [(0, 0.0, False, 0.7), (1, 0.0, True, 0.8), (1, -1.0, True, 0.9)]]
    field = lambda i, dtype: jnp.asarray([[p[i] for p in row] for row in plies], dtype)
    policy = jnp.ones((3, 3, 9)).at[2, 0].set(0.0)  # one ply searched fast (no policy target)
    sign = jnp.asarray([[1, -1, 1], [-1, 1, -1], [1, -1, 1]], jnp.float32)
    traj = selfplay.Trajectory(
        observation=jnp.zeros((3, 3, 1)), policy=policy, legal_mask=policy > 0,
        player=field(0, jnp.int32), reward=field(1, jnp.float32), done=field(2, bool),
        next_player=1 - field(0, jnp.int32), root_value=sign * field(3, jnp.float32))
    valid = jnp.zeros((5, 3), bool).at[:2].set(True)  # 6 plies written
    dropped = jnp.zeros((5, 3), bool).at[4, 2].set(True)  # 1 ply lost
    counts = trainer._selfplay_counts(traj, valid, jnp.int32(7), dropped)
    c = ml_collections.ConfigDict({"train": {"updates_per_iteration": 3}})
    m = {"loss": jnp.asarray([1.0, jnp.nan, 3.0]), "skipped": jnp.asarray([0.0, 1.0, 0.0])}
    got = trainer._to_host(trainer._iteration_metrics(m, True, counts, jnp.int32(40), c))
    assert got == pytest.approx(dict(
        loss=2.0, skipped=1.0, updates=3.0, games=4.0, moves=9.0,
        # first player's wins: slot 2 at t=0 (p0 wins), slot 2 at t=2 (p1 loses); the draw
        # (slot 1, t=2, ended by p1) is no win for anyone
        first_player_win_rate=2 / 4, draw_rate=1 / 4,
        plies_added=6.0, plies_pending=7.0, plies_dropped=1.0, plies_full_search=8.0,
        root_value_abs=4.5 / 9, buffer_size=40.0))
    m = {"loss": jnp.full(3, jnp.nan), "skipped": jnp.full(3, jnp.nan)}  # none ran
    waiting = trainer._to_host(trainer._iteration_metrics(m, False, counts, jnp.int32(5), c))
    assert (waiting["updates"], waiting["skipped"]) == (0.0, 0.0)


# A tiny tic-tac-toe run of 5 iterations (3-ply windows of 8 games in 2 shards: 24 plies
# an iteration; no game ends within the first window), evaluated every 2 iterations (no
# time cap), saved every 2 (and at its end) with its replay; and a copy of it killed after
# logging iteration 3, before saving iteration 4 (checkpoints 4 and 5 gone), resumed by the
# same command: it goes on from checkpoint 2 and plays iterations 3 to 5 again. New games
# may start from archived positions. Training starts at 49 plies in the replay: more than
# the first two windows can write (8 x 6 plies).
PLIES, MIN_SIZE = 8 * 3, 49


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    import shutil

    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    c = tiny_training(tictactoe.get_config(), train__num_iterations=5, eval__every=2,
                      checkpoint__every=2, checkpoint__save_replay=True, parallel__shards=2,
                      replay__min_size=MIN_SIZE, selfplay__archive_starts=0.5)
    c.eval.opponents, c.eval.max_share = "random", 0.0
    c.search.eval_tactics = "none"
    straight = tmp_path_factory.mktemp("run") / "straight"
    trainer.train_and_evaluate(c, str(straight))
    saved = checkpoint.saved_steps(straight)
    killed = straight.parent / "killed"
    shutil.copytree(straight, killed)
    for step in (4, 5):
        shutil.rmtree(killed / checkpoint.SUBDIR / str(step), ignore_errors=True)
    log = killed / "metrics.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:3]))
    trainer.train_and_evaluate(c, str(killed))
    return c, straight, killed, saved


def _rows(workdir):
    from az_jax import plots

    return plots.read_metrics(workdir)


def _saved(c, workdir, step, tmp_path):
    """Checkpoint `step`'s (train_state, best_params)."""
    import shutil

    from az_jax import trainer

    alone = tmp_path / f"step{step}"  # restore_latest reads the newest: a copy of it alone
    shutil.copytree(workdir / checkpoint.SUBDIR / str(step), alone / checkpoint.SUBDIR / str(step))
    train_state, _, _ = trainer.Setup(c, jax.devices()[:1]).initial(jax.random.PRNGKey(0))
    target = {"train_state": train_state, "best_params": train_state.params}
    _, state, _, _ = checkpoint.restore_latest(checkpoint.manager(alone), target)
    return state["train_state"], state["best_params"]


def test_the_run_log_accounts_for_every_ply_once(resumed_run):
    """Each iteration's row, hand-counted: 24 plies played; a ply is either written to the
    replay, still pending or dropped (none: tic-tac-toe fits the store), so what was pending
    before plus 24 is what was added plus what is pending now; the replay (never full) holds
    every ply added. The first window ends no game; by the end of the third every game
    that started the run has ended (9 plies at most), so from then on each shard holds some
    and the steps run exactly when the replay holds MIN_SIZE plies; the last one does, as
    at most 8 plies of each game are pending. The resumed run carries the pending plies and
    the replay of checkpoint 2 on."""
    _, straight, killed, _ = resumed_run
    for workdir in (straight, killed):
        rows = _rows(workdir)
        assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5], workdir.name
        assert (rows[0]["games"], rows[0]["plies_added"], rows[0]["plies_pending"],
                rows[0]["buffer_size"], rows[0]["updates"]) == (0, 0, PLIES, 0, 0)
        pending = added = 0
        for r in rows:
            assert r["moves"] == PLIES and r["plies_dropped"] == 0, r["iteration"]
            assert pending + PLIES == r["plies_added"] + r["plies_pending"], r["iteration"]
            pending, added = r["plies_pending"], added + r["plies_added"]
            assert r["buffer_size"] == added, r["iteration"]
            ready = r["iteration"] >= 3 and r["buffer_size"] >= MIN_SIZE
            assert r["updates"] == ready and np.isfinite(r["loss"]) == ready, r["iteration"]
        assert rows[-1]["updates"] == 1


def test_a_killed_run_resumes_where_its_checkpoint_left_it(resumed_run):
    """Iterations 3 to 5, played again from checkpoint 2 (games, pending plies, replay,
    network, RNG stream), are those of the run that was not killed; each is logged once."""
    _, straight, killed, _ = resumed_run
    counted = ["games", "first_player_win_rate", "draw_rate", "plies_added", "plies_pending",
               "plies_dropped", "buffer_size", "updates", "skipped"]
    for a, b in zip(_rows(straight), _rows(killed), strict=True):
        assert {k: a[k] for k in counted} == {k: b[k] for k in counted}, a["iteration"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, nan_ok=True), a["iteration"]


def test_evaluations_and_checkpoints_come_at_their_iterations(resumed_run, tmp_path):
    """eval.every=2: iterations 2 and 4 evaluate; checkpoint.every=2: 2, 4 and the last, 5,
    are saved. eval_share is evaluation's share of the run's time so far (rows' seconds
    and eval/seconds), across a resume: the checkpoint keeps both sums. Without gating the
    best network is the last evaluated one, and the saved network took one gradient step
    per iteration that reported one."""
    c, straight, killed, saved = resumed_run
    assert saved == checkpoint.saved_steps(killed) == [2, 4, 5]
    for workdir in (straight, killed):
        assert [r["iteration"] for r in _rows(workdir) if "eval/seconds" in r] == [2, 4]
    share = lambda rows, upto: (  # noqa: E731
        sum(r.get("eval/seconds", 0.0) for r in rows[:upto])
        / sum(r["seconds"] + r.get("eval/seconds", 0.0) for r in rows[:upto]))
    rows = _rows(straight)
    assert rows[1]["eval_share"] == pytest.approx(share(rows, 2), rel=0.02)
    assert rows[3]["eval_share"] == pytest.approx(share(rows, 4), rel=0.02)
    # Resumed from iteration 2: the rows of 1-2 are the first process's, 3-5 the resumed
    # one's; its share at 4 counts them all (before stop 65, only its own).
    rows = _rows(killed)
    assert rows[3]["eval_share"] == pytest.approx(share(rows, 4), rel=0.02)
    rows = _rows(straight)
    last, best = _saved(c, straight, 5, tmp_path)
    evaluated, _ = _saved(c, straight, 4, tmp_path)
    assert int(last.step) == sum(r["updates"] for r in rows)
    jax.tree.map(np.testing.assert_array_equal, best, evaluated.params)


def test_without_pending_plies_the_running_games_plies_are_dropped():
    """selfplay.pending=False: a 4-ply window of tic-tac-toe (8 games) ends no game (5 plies
    at least), so its 32 plies are all counted as dropped, none added or pending."""
    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    c = tiny_training(tictactoe.get_config(), selfplay__num_plies=4, selfplay__pending=False)
    assert trainer.targets_mode(c) == "drop"
    setup = trainer.Setup(c, jax.devices()[:1])
    train_state, games, buffer = setup.initial(jax.random.PRNGKey(0))
    play, _ = trainer.make_steps(setup)
    _, buffer, counts = jax.jit(play)(train_state.variables, games, buffer, jax.random.PRNGKey(1))
    names = ["moves", "games", "plies_added", "plies_pending", "plies_dropped"]
    assert {k: int(counts[k]) for k in names} == dict(
        moves=32, games=0, plies_added=0, plies_pending=0, plies_dropped=32)
    assert int(np.asarray(buffer.size).sum()) == 0
