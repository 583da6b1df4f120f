"""Playout-cap randomization (KataGo): fast plies move the games on without a policy
target, and the learner's policy loss leaves them out."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import envs
from az_jax import learner, network, replay, search, selfplay

ENV = envs.make("tictactoe")


def _play(reuse_root, fraction=0.3, plies=40):
    net = network.ResNet(num_actions=9, channels=4, num_blocks=1, norm="none")
    variables = network.init_variables(net, ENV, jax.random.PRNGKey(0))
    cfg = ml_collections.ConfigDict(dict(
        policy="gumbel", num_simulations=8, max_num_considered_actions=4, gumbel_scale=1.0,
        dirichlet_alpha=0.3, dirichlet_fraction=0.25, pb_c_init=1.25, pb_c_base=19652.0))
    fn = search.make_search(ENV, net, cfg)
    states = jax.vmap(ENV.init)(jax.random.split(jax.random.PRNGKey(1), 6))
    return jax.jit(lambda s, k: selfplay.selfplay(
        fn, ENV, variables, s, k, num_plies=plies, temperature_plies=4, reuse_root=reuse_root,
        fast_simulations=2, full_search_fraction=fraction))(states, jax.random.PRNGKey(2))


@pytest.fixture(scope="module")
def played():
    return {reuse: _play(reuse) for reuse in (True, False)}


def test_each_ply_is_either_searched_in_full_or_fast(played):
    traj, _ = played[True]
    mass = np.asarray(traj.policy).sum(-1)  # [T, B]
    full = np.isclose(mass, 1.0, atol=1e-5)
    fast = mass == 0
    assert np.all(full | fast)
    # One draw per ply for the whole batch: a ply is full or fast in every game at once.
    np.testing.assert_array_equal(full.all(1), full.any(1))
    n_full = int(full.all(1).sum())
    assert 3 <= n_full <= 22, n_full  # Binomial(40, 0.3): 3..22 holds with p > 0.999
    # Fast plies still play legal moves: no mover ever loses by its own move (an illegal
    # tic-tac-toe move would), and games end and restart as usual.
    assert np.asarray(traj.reward).min() >= 0
    assert np.asarray(traj.done).sum() >= 6
    legal = np.asarray(traj.legal_mask)
    assert np.all(np.asarray(traj.policy)[~legal] == 0)


def test_reused_roots_play_the_same_games_under_the_cap(played):
    """The played child's evaluation taken from either branch's tree (fast or full)
    plays exactly the games that fresh root evaluations play."""
    (reused, _), (fresh, _) = played[True], played[False]
    for name in ("observation", "player", "reward", "done", "next_player"):
        np.testing.assert_array_equal(np.asarray(getattr(reused, name)),
                                      np.asarray(getattr(fresh, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(reused.policy), np.asarray(fresh.policy), atol=1e-5)


def test_policy_loss_averages_over_positions_with_a_target():
    """Rows with an all-zero policy add nothing to the policy loss; the mean is over the
    others: the loss on the mixed batch equals the loss on those rows alone, and equals a
    numpy cross-entropy."""
    net = network.ResNet(num_actions=9, channels=4, num_blocks=1, norm="none")
    variables = network.init_variables(net, ENV, jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    n = 8
    obs = rng.integers(0, 2, (n, *ENV.observation_shape)).astype(ENV.observation_dtype)
    legal = rng.random((n, 9)) < 0.7
    legal[:, 0] = True
    pol = rng.random((n, 9)) * legal
    pol /= pol.sum(-1, keepdims=True)
    has = np.array([1, 0, 1, 1, 0, 0, 1, 0], bool)
    pol[~has] = 0.0
    batch = replay.Sample(jnp.asarray(obs), jnp.asarray(pol, jnp.float32), jnp.asarray(legal),
                          jnp.asarray(rng.uniform(-1, 1, n), jnp.float32))
    loss = lambda b: learner.loss_fn(variables["params"], {}, net, b, 0.0)[1][0]["policy_loss"]
    mixed = float(loss(batch))
    alone = float(loss(jax.tree.map(lambda x: x[has], batch)))
    assert mixed == pytest.approx(alone, rel=1e-5)
    logits, _ = net.apply(variables, jnp.asarray(obs), jnp.asarray(legal), train=False)
    logits = np.asarray(logits, np.float64)
    top = logits.max(-1, keepdims=True)
    log_p = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    ref = -(pol * np.where(pol > 0, log_p, 0.0)).sum(-1)[has].mean()
    assert mixed == pytest.approx(ref, rel=1e-4)


def test_config_checks():
    from az_jax import config as config_lib
    from configs import default

    c = default.get_config()
    c.search.num_simulations = 16
    c.selfplay.fast_simulations = 16
    c.selfplay.full_search_fraction = 0.0
    with pytest.raises(ValueError) as e:
        config_lib.validate(c, 1)
    assert "selfplay.fast_simulations=16 must be below search.num_simulations=16" in str(e.value)
    assert "selfplay.full_search_fraction=0.0 must be a finite number > 0" in str(e.value)
    # Configs saved before the fields existed read as no cap.
    d = default.get_config().to_dict()
    del d["selfplay"]["fast_simulations"], d["selfplay"]["full_search_fraction"]
    config_lib.validate(ml_collections.ConfigDict(d), 1)
