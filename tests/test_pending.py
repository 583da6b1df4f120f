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
        step, state, _, _ = checkpoint.restore_latest(mngr, longer, optional=("pending",))
        assert step == 1 and list(state) == ["a"]
        same = {"a": jnp.zeros(3), "pending": pending}
        _, state, _, _ = checkpoint.restore_latest(mngr, same, optional=("pending",))
        assert isinstance(state["pending"], selfplay.Pending)
        np.testing.assert_array_equal(state["a"], np.ones(3))


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
