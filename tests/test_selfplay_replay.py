"""Value targets (hand-made trajectories), self-play records, and the replay buffer."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import envs
from az_jax import network, replay, search, selfplay

ENV = envs.make("tictactoe")


def _traj(player, reward, done, next_player):
    T, B = np.asarray(player).shape
    z = jnp.zeros((T, B))
    return selfplay.Trajectory(
        observation=z, policy=z, legal_mask=z, root_value=z,
        player=jnp.asarray(player, jnp.int32), reward=jnp.asarray(reward, jnp.float32),
        done=jnp.asarray(done, bool), next_player=jnp.asarray(next_player, jnp.int32))


def _tiny_search(policy="gumbel", num_simulations=4, **more):
    """A one-block, 8-channel tic-tac-toe network and its (4-simulation) search."""
    net = network.ResNet(num_actions=9, channels=8, num_blocks=1, norm="none")
    variables = network.init_variables(net, ENV, jax.random.PRNGKey(0))
    cfg = ml_collections.ConfigDict(dict(
        policy=policy, num_simulations=num_simulations, max_num_considered_actions=4,
        gumbel_scale=1.0, dirichlet_alpha=0.3, dirichlet_fraction=0.25, pb_c_init=1.25,
        pb_c_base=19652.0,
        **more))
    return variables, search.make_search(ENV, net, cfg)


def test_value_targets_hand_made():
    # Column 0: p0 wins at t=2; a new game starts at t=3 and p1 wins at t=4 (p1 moved);
    #           then t=5 starts a game that has not ended (invalid).
    # Column 1: a draw at t=1; then p1 loses (illegal move) at t=3; t=4,5 unfinished.
    # Column 2: p0 moves twice in a row at t=0,1 (same mover: no sign flip), wins at t=1;
    #           p1 resigns-by-illegal at t=2 (reward -1 for p1); the next game is a draw
    #           at t=5.
    player = [[0, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 1], [0, 1, 0]]
    reward = [[0, 0, 0], [0, 0, 1], [1, 0, -1], [0, -1, 0], [1, 0, 0], [0, 0, 0]]
    done = [[0, 0, 0], [0, 1, 1], [1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1]]
    nxt = [[1, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 0], [1, 0, 1]]
    targets, valid = selfplay.value_targets(_traj(player, reward, done, nxt))
    expected = np.array([
        [1, 0, 1],
        [-1, 0, 1],
        [1, 1, -1],
        [-1, -1, 0],
        [1, 0, 0],
        [0, 0, 0],
    ], np.float32)
    expected_valid = np.array([
        [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 0, 1], [0, 0, 1]], bool)
    np.testing.assert_array_equal(np.asarray(valid), expected_valid)
    np.testing.assert_array_equal(np.asarray(targets)[expected_valid], expected[expected_valid])


def test_value_targets_discounted_by_hand():
    """gamma^n for an outcome n plies ahead, with the same sign rules as undiscounted."""
    g = 0.9
    # Column 0: p0 wins at t=2; p1 wins the next game at t=4. Column 1: p0 moves twice
    # (t=0,1) and wins at t=1; then p1 loses by its own move at t=3 (p0 moved at t=2).
    player = [[0, 0], [1, 0], [0, 0], [1, 1], [0, 0]]
    reward = [[0, 0], [0, 1], [1, 0], [0, -1], [1, 0]]
    done = [[0, 0], [0, 1], [1, 0], [0, 1], [1, 0]]
    nxt = [[1, 0], [0, 1], [1, 1], [0, 0], [1, 1]]
    targets, valid = selfplay.value_targets(_traj(player, reward, done, nxt), discount=g)
    expected = np.array([[g * g, g], [-g, 1], [1, g], [-g, -1], [1, 0]], np.float32)
    expected_valid = np.array([[1, 1], [1, 1], [1, 1], [1, 1], [1, 0]], bool)
    np.testing.assert_array_equal(np.asarray(valid), expected_valid)
    np.testing.assert_allclose(np.asarray(targets)[expected_valid],
                               expected[expected_valid], rtol=1e-6)


def test_value_targets_bootstrap_by_hand():
    """Plies of a game running at the window's end chain back from the last root value."""
    g = 0.9
    # Column 0: p0 wins at t=2; the next game (p1 to move at t=3) is still running.
    # Column 1: one game running through the whole window, players alternating.
    player = [[0, 0], [1, 1], [0, 0], [1, 1]]
    reward = [[0, 0], [0, 0], [1, 0], [0, 0]]
    done = [[0, 0], [0, 0], [1, 0], [0, 0]]
    nxt = [[1, 1], [0, 0], [1, 1], [0, 0]]
    traj = _traj(player, reward, done, nxt)._replace(
        root_value=jnp.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.3, -0.5]]))
    targets, valid = selfplay.value_targets(traj, discount=g, bootstrap=True)
    assert np.asarray(valid).all()
    expected = [[g * g, 0.5 * g**3], [-g, -0.5 * g * g], [1, 0.5 * g], [0.3, -0.5]]
    np.testing.assert_allclose(np.asarray(targets), expected, rtol=1e-6)
    # Without bootstrapping the running plies are left out; the finished game is unchanged.
    targets, valid = selfplay.value_targets(traj, discount=g)
    np.testing.assert_array_equal(np.asarray(valid), [[1, 0], [1, 0], [1, 0], [0, 0]])
    np.testing.assert_allclose(np.asarray(targets)[:3, 0], [g * g, -g, 1], rtol=1e-6)


def test_selfplay_records_consistent_games():
    variables, fn = _tiny_search()
    states = jax.vmap(ENV.init)(jax.random.split(jax.random.PRNGKey(1), 4))
    traj, states = jax.jit(lambda s, k: selfplay.selfplay(
        fn, ENV, variables, s, k, num_plies=20, temperature_plies=4))(states,
                                                                       jax.random.PRNGKey(2))
    assert traj.observation.shape == (20, 4, 3, 3, 3)
    done = np.asarray(traj.done)
    assert done.sum() >= 4  # tic-tac-toe ends within 9 plies
    pol = np.asarray(traj.policy)
    np.testing.assert_allclose(pol.sum(-1), 1.0, atol=1e-5)
    assert np.all(pol[~np.asarray(traj.legal_mask)] == 0), "policy mass on illegal moves"
    # Plies alternate within a game, and a game ends within 9 plies.
    player, nxt = np.asarray(traj.player), np.asarray(traj.next_player)
    np.testing.assert_array_equal(nxt[~done], 1 - player[~done])
    targets, valid = selfplay.value_targets(traj)
    assert set(np.unique(np.asarray(targets)[np.asarray(valid)])) <= {-1.0, 0.0, 1.0}


def test_reused_roots_play_the_same_games(policy="gumbel"):
    """Taking each root's evaluation from the previous search's tree (and the initial
    position's after a restart) plays exactly the games that fresh root evaluations play:
    20 plies of tic-tac-toe with restarts, sampled openings and Dirichlet/Gumbel noise,
    with the search's root tactics (wins and blocks masked) and node tactics on (the root
    must get the same node tactics as the tree's nodes, or the reused roots differ)."""
    variables, fn = _tiny_search(policy=policy, tactics="win_and_block")
    states = jax.vmap(ENV.init)(jax.random.split(jax.random.PRNGKey(1), 6))

    def play(reuse_root):
        return jax.jit(lambda s, k: selfplay.selfplay(
            fn, ENV, variables, s, k, num_plies=20, temperature_plies=4,
            greedy_from_search=policy == "gumbel", reuse_root=reuse_root))(
                states, jax.random.PRNGKey(2))

    (reused, end_reused), (fresh, end_fresh) = play(True), play(False)
    assert np.asarray(fresh.done).sum() >= 6  # games restart inside the window
    for name in ("observation", "player", "reward", "done", "next_player", "legal_mask"):
        np.testing.assert_array_equal(np.asarray(getattr(reused, name)),
                                      np.asarray(getattr(fresh, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(reused.policy), np.asarray(fresh.policy), atol=1e-5)
    np.testing.assert_allclose(np.asarray(reused.root_value), np.asarray(fresh.root_value),
                               atol=1e-5)
    np.testing.assert_array_equal(np.asarray(end_reused.observation),
                                  np.asarray(end_fresh.observation))


def test_sampled_moves_are_visited_children():
    weights = jnp.array([0.5, 0.3, 0.0, 0.2])  # the improved policy puts mass on action 0
    visited = jnp.array([False, True, False, True])
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    pick = jax.vmap(selfplay.select_action, in_axes=(0, None, None, None, None, None, None))
    sampled = np.asarray(pick(keys, 0, weights, visited, 0, 4, False))
    assert set(np.unique(sampled)) == {1, 3}
    assert 0.5 < np.mean(sampled == 1) < 0.7  # 0.3 / (0.3 + 0.2)
    greedy = np.asarray(pick(keys[:1], 0, weights, visited, 9, 4, False))
    np.testing.assert_array_equal(greedy, [1])


def test_random_plies_are_uniform_over_visited_children():
    weights = jnp.array([0.05, 0.9, 0.0, 0.05, 0.0])  # a sharp policy on action 1
    visited = jnp.array([True, True, False, True, True])
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)
    pick = jax.vmap(selfplay.select_action, in_axes=(0,) + (None,) * 7)
    # Ply 2 of 3 random plies: uniform among the 4 visited moves, whatever the policy.
    opening = np.asarray(pick(keys, 1, weights, visited, 2, 10, True, 3))
    assert set(np.unique(opening)) == {0, 1, 3, 4}
    np.testing.assert_allclose(np.bincount(opening, minlength=5)[[0, 1, 3, 4]] / 4000,
                               0.25, atol=0.03)
    # From ply 3 on, the moves are the ones without random plies (sampled, then greedy).
    for ply in (3, 12):
        np.testing.assert_array_equal(
            np.asarray(pick(keys, 1, weights, visited, ply, 10, True, 3)),
            np.asarray(pick(keys, 1, weights, visited, ply, 10, True, 0)))
    later = np.asarray(pick(keys, 4, weights, visited, 12, 10, True, 3))
    np.testing.assert_array_equal(later, 4)  # the search's own choice


def _positions(opening_moves):
    """Tic-tac-toe states [N] after each list of moves."""
    states = []
    for moves in opening_moves:
        state = ENV.init(jax.random.PRNGKey(0))
        for m in moves:
            state = ENV.step(state, jnp.int32(m), jax.random.PRNGKey(0))
        states.append(state)
    return jax.tree.map(lambda *x: jnp.stack(x), *states)


def test_restarts_from_the_archive():
    """With archive_starts=1 every game that ends starts again from a position of the
    archive (hand-made here: 2 game slots x 2 positions, none of them the empty board),
    and plays on legally from it; the archive takes a window's end positions newest
    first."""
    variables, fn = _tiny_search()
    kept = _positions([[4], [0, 8], [4, 0, 2], [1, 3, 5, 7]])  # 4 positions
    archive = jax.tree.map(lambda x: x.reshape((2, 2) + x.shape[1:]), kept)  # [B=2, K=2]
    states = jax.vmap(ENV.init)(jax.random.split(jax.random.PRNGKey(1), 2))
    traj, end = jax.jit(lambda s, k: selfplay.selfplay(
        fn, ENV, variables, s, k, num_plies=30, temperature_plies=0, archive=archive,
        archive_starts=1.0))(states, jax.random.PRNGKey(2))
    obs, done = np.asarray(traj.observation), np.asarray(traj.done)
    starts = {np.asarray(o).tobytes() for o in np.asarray(kept.observation)}
    restarted = [(t + 1, b) for t, b in zip(*np.nonzero(done[:-1]), strict=True)]
    assert len(restarted) >= 4  # games end within 9 plies
    for t, b in restarted:
        assert obs[t, b].tobytes() in starts, f"game {b} restarted at ply {t} elsewhere"
    assert len({obs[t, b].tobytes() for t, b in restarted}) > 1  # drawn, not always one
    # Plies alternate within a game from the restart on, and every move was legal.
    player, nxt = np.asarray(traj.player), np.asarray(traj.next_player)
    np.testing.assert_array_equal(nxt[~done], 1 - player[~done])
    assert np.all(np.asarray(traj.reward) >= 0)  # an illegal move would lose (-1)
    pushed = selfplay.archive_push(archive, end)
    np.testing.assert_array_equal(np.asarray(pushed.observation[:, 0]),
                                  np.asarray(end.observation))
    np.testing.assert_array_equal(np.asarray(pushed.observation[:, 1]),
                                  np.asarray(archive.observation[:, 0]))
    with pytest.raises(ValueError, match="reuse_root"):
        selfplay.selfplay(fn, ENV, variables, states, jax.random.PRNGKey(2), num_plies=1,
                          temperature_plies=0, archive=archive, archive_starts=0.5,
                          reuse_root=True)


def test_restart_states_draw_uniformly_with_the_given_probability():
    kept = _positions([[0], [1], [2], [3], [4], [5]])
    archive = jax.tree.map(lambda x: x.reshape((3, 2) + x.shape[1:]), kept)  # [3, 2]
    ids = jnp.arange(3000, dtype=jnp.int32)
    starts = jax.jit(lambda k1, k2: selfplay.restart_states(
        ENV, archive, 0.3, k1, k2, ids))(jax.random.PRNGKey(3), jax.random.PRNGKey(4))
    board = np.asarray(starts.observation)[..., :2].any(-1).reshape(3000, 9)  # stones
    stones = board.sum(-1)
    assert set(np.unique(stones)) == {0, 1}  # the empty board or one archived stone
    from_archive = stones == 1
    assert 0.27 < from_archive.mean() < 0.33
    # Which archived position: uniform over the six.
    which = board.argmax(-1)  # its one stone's cell
    counts = np.bincount(which[from_archive], minlength=9)[:6]
    np.testing.assert_allclose(counts / from_archive.sum(), 1 / 6, atol=0.04)


def test_restart_positions_count_against_memory():
    from az_jax import config as config_lib
    from configs import tictactoe

    config = tictactoe.get_config()
    config.selfplay.archive_size = 2**31 - 1  # positions per game slot: far beyond the RAM
    config_lib.check_memory(config, ENV, 0, jax.devices())  # restarts off: nothing kept
    config.selfplay.archive_starts = 0.5
    with pytest.raises(ValueError, match="restart positions"):
        config_lib.check_memory(config, ENV, 0, jax.devices())


def test_reuse_root_refused_for_games_with_chance():
    class Chancy(type(ENV)):
        deterministic = False

    env = Chancy()
    with pytest.raises(ValueError, match="deterministic"):
        selfplay.selfplay(None, env, None, jax.vmap(env.init)(jax.random.split(
            jax.random.PRNGKey(0), 2)), jax.random.PRNGKey(1), num_plies=1,
            temperature_plies=0, reuse_root=True)


def _samples(values):
    n = len(values)
    return replay.Sample(
        observation=jnp.zeros((n, 3, 3, 3)), policy=jnp.zeros((n, 9)),
        legal_mask=jnp.ones((n, 9), bool), value=jnp.asarray(values, jnp.float32))


def _example():
    return jax.tree.map(lambda x: x[0], _samples([0.0]))


def test_replay_wraps_around_and_skips_invalid():
    buf = replay.ReplayBuffer(capacity=5, env=ENV)
    state = buf.init(_example())
    add = jax.jit(buf.add, donate_argnums=0)
    state = add(state, _samples([1, 2, 3, 4]), jnp.array([1, 0, 1, 1], bool))
    np.testing.assert_array_equal(state.data.value[:3], [1, 3, 4])
    assert int(state.size) == 3 and int(state.insert_pos) == 3
    state = add(state, _samples([5, 6, 7, 8]), jnp.ones(4, bool))
    # 5, 6 fill slots 3, 4; 7, 8 overwrite the oldest (slots 0, 1).
    np.testing.assert_array_equal(state.data.value, [7, 8, 4, 5, 6])
    assert int(state.size) == 5 and int(state.insert_pos) == 2
    # More valid rows than capacity at once: the newest ones are kept.
    state = add(state, _samples(list(range(10, 17))), jnp.ones(7, bool))
    assert sorted(np.asarray(state.data.value).tolist()) == [12, 13, 14, 15, 16]


def test_replay_samples_only_filled_slots():
    buf = replay.ReplayBuffer(capacity=64, env=ENV)
    state = buf.add(buf.init(_example()), _samples([3, 5, 7]), jnp.ones(3, bool))
    batch = jax.jit(lambda s, k: buf.sample(s, k, 512, augment=False))(state,
                                                                        jax.random.PRNGKey(0))
    assert set(np.asarray(batch.value).tolist()) == {3.0, 5.0, 7.0}


def test_replay_symmetry_keeps_policy_obs_and_mask_aligned():
    """Put the policy on the mover's own stone and mark a blocked point in the mask: after
    any random symmetry, the policy must still point at an own stone and the mask agree."""
    rng = np.random.default_rng(0)
    n = 64
    obs = np.zeros((n, 3, 3, 3), np.float32)
    pol = np.zeros((n, 9), np.float32)
    mask = np.ones((n, 9), bool)
    for i in range(n):
        own, other = rng.choice(9, 2, replace=False)
        obs[i].reshape(9, 3)[own, 0] = 1
        obs[i].reshape(9, 3)[other, 1] = 1
        pol[i, own] = 1
        mask[i, other] = False
    samples = replay.Sample(jnp.asarray(obs), jnp.asarray(pol), jnp.asarray(mask),
                            jnp.zeros(n))
    buf = replay.ReplayBuffer(capacity=n, env=ENV)
    state = buf.add(buf.init(_example()), samples, jnp.ones(n, bool))
    batch = jax.jit(lambda s, k: buf.sample(s, k, 256))(state, jax.random.PRNGKey(1))
    b_obs, b_pol, b_mask = map(np.asarray, (batch.observation, batch.policy, batch.legal_mask))
    seen = set()
    for o, p, m in zip(b_obs, b_pol, b_mask, strict=True):
        a = int(p.argmax())
        assert o.reshape(9, 3)[a, 0] == 1, "policy no longer on the own stone"
        blocked = int(np.flatnonzero(~m)[0])
        assert o.reshape(9, 3)[blocked, 1] == 1, "mask no longer on the opponent stone"
        seen.add(a)
    assert len(seen) > 3  # symmetries really were applied


def test_updates_wait_for_every_shard():
    """Each logical shard samples its own share of a batch, and an empty one gives rows of
    zeros, so the updates start once the buffer holds `replay.min_size` positions and every
    shard holds one (jax and numpy sizes alike)."""
    from az_jax.trainer import replay_ready

    for xp in (np, jnp):
        assert not replay_ready(xp.array([500, 0]), 100)  # enough in all, one shard empty
        assert replay_ready(xp.array([99, 1]), 100)
        assert not replay_ready(xp.array([50, 49]), 100)
        assert replay_ready(xp.array([1, 1, 1, 1]), 0)


def _sample_one(env, state, action, n, seed):
    """`n` rows sampled (with symmetries) from a replay holding only `state`'s observation,
    its legal mask and a one-hot policy target at `action`, value 1."""
    one = replay.Sample(state.observation[None], jax.nn.one_hot(action, env.num_actions)[None],
                        state.legal_action_mask[None], jnp.ones(1))
    buf = replay.ReplayBuffer(capacity=1, env=env)
    data = buf.add(buf.init(replay.example_sample(env)), one, jnp.ones(1, bool))
    batch = jax.jit(lambda s, k: buf.sample(s, k, n))(data, jax.random.PRNGKey(seed))
    np.testing.assert_array_equal(batch.value, 1.0)
    return [tuple(np.asarray(x[i]).tobytes() for x in batch[:3]) for i in range(n)]


def test_replay_draws_every_symmetry_uniformly():
    """Tic-tac-toe: X on cell 1 and O on cell 0, X to move (no symmetry maps the position to
    itself), policy target on cell 5. 512 draws show exactly the 8 images of the square's
    symmetry group, made here with numpy (rotations of the board and of its transpose), each
    about 1/8 of the time; the policy and the mask move with the board. A sampler that never
    drew one of the symmetries fails (for Connect4 that would leave only the identity)."""
    state = ENV.step(ENV.step(ENV.init(jax.random.PRNGKey(0)), 1), 0)
    obs = np.asarray(state.observation)
    assert obs[0, 1, 0] and obs[0, 0, 1] and obs[..., 0].sum() + obs[..., 1].sum() == 2
    pol = np.zeros((3, 3), np.float32)
    pol[1, 2] = 1.0  # cell 5
    mask = np.asarray(state.legal_action_mask).reshape(3, 3)
    want = set()
    for base in (lambda g: g, lambda g: np.swapaxes(g, 0, 1)):
        for k in range(4):
            t = lambda g: np.ascontiguousarray(np.rot90(base(g), k, axes=(0, 1)))
            want.add((t(obs).tobytes(), t(pol).reshape(9).tobytes(),
                      t(mask).reshape(9).tobytes()))
    assert len(want) == 8
    rows = _sample_one(ENV, state, 5, 512, seed=3)
    counts = {key: rows.count(key) for key in set(rows)}
    assert len(counts) == 8, f"{len(counts)} of the 8 symmetries drawn"
    assert set(counts) == want, "a drawn row is no symmetric image of the position"
    assert all(32 <= c <= 96 for c in counts.values()), counts  # 64 expected, sd 7.5


def test_replay_draws_both_connect4_mirrors():
    """Connect4 after X drops in column 0 (O to move), policy target column 2: the samples
    show the position and its left-right mirror (made with numpy), with the policy on
    column 2 and column 4 respectively, and nothing else."""
    env = envs.make("connect4")
    state = env.step(env.init(jax.random.PRNGKey(0)), 0)
    obs = np.asarray(state.observation)
    assert obs[5, 0, 1] and obs[..., :2].sum() == 1  # the opponent's stone, bottom left
    pol = np.zeros(7, np.float32)
    pol[2] = 1.0
    mask = np.ones(7, bool)
    np.testing.assert_array_equal(state.legal_action_mask, mask)
    mirror = np.ascontiguousarray(np.flip(obs, 1))
    want = {(obs.tobytes(), pol.tobytes(), mask.tobytes()),
            (mirror.tobytes(), np.roll(pol, 2).tobytes(), mask.tobytes())}  # column 4
    rows = _sample_one(env, state, 2, 64, seed=4)
    assert len(set(rows)) == 2, f"{len(set(rows))} of the 2 symmetries drawn"
    assert set(rows) == want, "a drawn row is neither the position nor its mirror"


def test_sampled_moves_follow_the_policy_until_temperature_plies():
    """The first `temperature_plies` plies sample in proportion to the search policy (not
    to a softmax of it), and ply `temperature_plies` itself is already greedy: a hand-given
    policy 0.6 / 0.3 / 0.1 over three visited moves, 4000 draws."""
    weights = jnp.array([0.6, 0.0, 0.3, 0.1])
    visited = jnp.array([True, False, True, True])
    keys = jax.random.split(jax.random.PRNGKey(3), 4000)
    pick = jax.vmap(selfplay.select_action, in_axes=(0,) + (None,) * 7)
    last_sampled = np.asarray(pick(keys, 3, weights, visited, 4, 5, False, 0))
    freq = np.bincount(last_sampled, minlength=4) / len(keys)
    np.testing.assert_allclose(freq, [0.6, 0.0, 0.3, 0.1], atol=0.03)  # softmax: .43/0/.32/.26
    for greedy_from_search, expected in ((False, 0), (True, 3)):  # argmax, or search's own
        first_greedy = np.asarray(pick(keys, 3, weights, visited, 5, 5, greedy_from_search, 0))
        np.testing.assert_array_equal(first_greedy, expected)


def _single_winning_move():
    """X to move with one empty cell (8) left, which wins (2-5-8): X O X / X O X / O X ."""
    state = ENV.init(jax.random.PRNGKey(0))
    for m in (2, 0, 3, 1, 5, 4, 7, 6):
        state = ENV.step(state, jnp.int32(m), jax.random.PRNGKey(0))
    assert np.asarray(state.legal_action_mask).tolist() == [False] * 8 + [True]
    return state


def test_recorded_root_value_is_the_search_value():
    """The trajectory's root value (bootstrap and q-target data) is the search's value of
    the root, not the network's: with a network whose value is 0 and N simulations that
    all play the one winning move, mctx averages the root's 0 with N wins: N / (N + 1)."""
    variables, fn = _tiny_search()  # 4 simulations
    flat = jax.tree.map(jnp.zeros_like, variables)  # logits 0, value 0
    states = jax.tree.map(lambda x: jnp.stack([x, x]), _single_winning_move())
    traj, _ = jax.jit(lambda s, k: selfplay.selfplay(
        fn, ENV, flat, s, k, num_plies=1, temperature_plies=0, reuse_root=False))(
            states, jax.random.PRNGKey(0))
    np.testing.assert_allclose(np.asarray(traj.root_value), [[4 / 5, 4 / 5]], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(traj.reward), [[1.0, 1.0]])


def test_puct_selfplay_plays_the_most_visited_move_after_temperature_plies():
    """PUCT's own choice in self-play is sampled in proportion to the visits; past the
    sampled plies self-play plays the most visited move instead (selfplay's default for
    `policy=muzero`). 32 games, one ply, temperature_plies 0: the stone each game added
    is a most visited root move."""
    variables, fn = _tiny_search(policy="muzero", num_simulations=24)
    states = _positions([[], [4], [0], [0, 4]] * 8)
    play = jax.jit(lambda s, k: selfplay.selfplay(fn, ENV, variables, s, k, num_plies=1,
                                                  temperature_plies=0))
    traj, after = play(states, jax.random.PRNGKey(5))
    before = np.asarray(states.observation[..., :2].sum(-1))  # [B, 3, 3] stones
    added = np.asarray(after.observation[..., :2].sum(-1)) - before
    moves = added.reshape(len(before), 9).argmax(-1)  # the cell that got a stone
    assert (added.reshape(len(before), 9).sum(-1) == 1).all()
    policy = np.asarray(traj.policy[0])  # [B, 9] visit shares
    np.testing.assert_array_equal(policy[np.arange(len(moves)), moves], policy.max(-1))
