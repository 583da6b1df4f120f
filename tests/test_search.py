"""Search over real env dynamics: wins in one, forced blocks, value signs, masking."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import envs
from az_jax import network, search

ENV = envs.make("tictactoe")
NET = network.ResNet(num_actions=9, channels=8, num_blocks=1, norm="none")
VARS = network.init_variables(NET, ENV, jax.random.PRNGKey(0))


def _config(policy):
    c = ml_collections.ConfigDict(dict(
        policy=policy, num_simulations=64, max_num_considered_actions=9, gumbel_scale=1.0,
        dirichlet_alpha=0.3, dirichlet_fraction=0.25, pb_c_init=1.25, pb_c_base=19652.0))
    return c


SEARCH = {p: search.make_search(ENV, NET, _config(p)) for p in search.POLICIES}
_step = jax.jit(ENV.step)


def _batch(*move_lists):
    """Batched tic-tac-toe states after the given moves (actions 0..8, X first)."""
    states = []
    for moves in move_lists:
        s = ENV.init(jax.random.PRNGKey(0))
        for a in moves:
            s = _step(s, a)
        states.append(s)
    return jax.tree.map(lambda *x: jnp.stack(x), *states)


@pytest.fixture(scope="module", params=search.POLICIES)
def run(request):
    fn = jax.jit(lambda s, k: SEARCH[request.param](VARS, s, k, evaluation=True,
                                                    num_simulations=200))
    return fn


# X to move with a win in one at 2 (row 0); O to move with a win in one at 5 (row 1).
X_WINS = [0, 3, 1, 4]  # X: 0,1  O: 3,4 -> X plays 2
O_WINS = [0, 3, 1, 4, 8]  # O to move, plays 5
# O to move must block X's row at 2 (X: 0,1; O: 4).
O_BLOCKS = [0, 4, 1]


def test_finds_win_in_one_for_both_players(run):
    out = run(_batch(X_WINS, O_WINS), jax.random.PRNGKey(1))
    np.testing.assert_array_equal(out.action, [2, 5])


def test_blocks_forced_loss(run):
    out = run(_batch(O_BLOCKS), jax.random.PRNGKey(2))
    assert int(out.action[0]) == 2


def test_value_signs_at_terminal_in_one(run):
    """The winning child's Q is +1 for the player to move, whoever that is."""
    out = run(_batch(X_WINS, O_WINS), jax.random.PRNGKey(3))
    tree = out.search_tree
    q = jax.vmap(lambda t: t.qvalues(0))(tree)  # [B, A] from the root mover's view
    assert float(q[0, 2]) == pytest.approx(1.0)
    assert float(q[1, 5]) == pytest.approx(1.0)


def test_single_legal_move_is_finite(run):
    # 8 marks, no line: X O X / X O O / O X . -> only 8 is legal.
    moves = [0, 1, 2, 4, 3, 5, 7, 6]
    state = _batch(moves)
    assert int(state.legal_action_mask.sum()) == 1
    with jax.debug_nans(True):
        out = run(state, jax.random.PRNGKey(4))
    assert int(out.action[0]) == 8
    assert np.all(np.isfinite(np.asarray(out.action_weights)))
    assert float(out.action_weights[0, 8]) == pytest.approx(1.0)


def test_interior_logits_masked():
    """recurrent_fn masks illegal children with finfo.min (never -inf)."""
    rec = search.make_recurrent_fn(ENV, lambda v, o, m: NET.apply(v, o, m))
    state = _batch([0, 4])
    out, nxt = rec(VARS, jax.random.PRNGKey(0), jnp.array([8]), state)
    logits = np.asarray(out.prior_logits[0])
    legal = np.asarray(nxt.legal_action_mask[0])
    assert np.all(np.isfinite(logits))
    assert np.all(logits[~legal] == np.finfo(np.float32).min)
    np.testing.assert_array_equal(out.discount, [-1.0])
    rec = search.make_recurrent_fn(ENV, lambda v, o, m: NET.apply(v, o, m), discount=0.95)
    out, _ = rec(VARS, jax.random.PRNGKey(0), jnp.array([8]), state)
    np.testing.assert_allclose(out.discount, [-0.95])


def test_terminal_step_reward_and_discount():
    rec = search.make_recurrent_fn(ENV, lambda v, o, m: NET.apply(v, o, m))
    out, nxt = rec(VARS, jax.random.PRNGKey(0), jnp.array([2, 5]), _batch(X_WINS, O_WINS))
    np.testing.assert_array_equal(out.reward, [1.0, 1.0])  # the mover's reward
    np.testing.assert_array_equal(out.discount, [0.0, 0.0])
    np.testing.assert_array_equal(out.value, [0.0, 0.0])


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="accepted"):
        search.make_search(ENV, NET, _config("alphabeta"))
