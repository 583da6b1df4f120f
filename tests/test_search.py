"""Search over real env dynamics: wins in one, forced blocks, value signs, masking."""

import functools

import jax
import jax.numpy as jnp
import mctx
import ml_collections
import numpy as np
import pytest

import envs
from az_jax import network, search
from tests.tiny import TwiceGame

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


def _unmasked(variables, obs, mask):
    """A network that masks nothing: uniform logits, value 0."""
    del variables, obs
    return jnp.zeros(mask.shape, jnp.float32), jnp.zeros(mask.shape[:1], jnp.float32)


@pytest.mark.parametrize("apply_fn", [lambda v, o, m: NET.apply(v, o, m), _unmasked],
                         ids=["network", "unmasked"])
def test_interior_logits_masked(apply_fn):
    """recurrent_fn masks illegal children with finfo.min (never -inf), whether or not the
    network masks its own logits."""
    rec = search.make_recurrent_fn(ENV, apply_fn)
    state = _batch([0, 4])
    out, nxt = rec(VARS, jax.random.PRNGKey(0), jnp.array([8]), state)
    logits = np.asarray(out.prior_logits[0])
    legal = np.asarray(nxt.legal_action_mask[0])
    assert legal.sum() == 6 and np.all(np.isfinite(logits))
    assert np.all(logits[~legal] == np.finfo(np.float32).min)
    assert np.all(logits[legal] > -1e9)
    np.testing.assert_array_equal(out.discount, [-1.0])
    rec = search.make_recurrent_fn(ENV, lambda v, o, m: NET.apply(v, o, m), discount=0.95)
    out, _ = rec(VARS, jax.random.PRNGKey(0), jnp.array([8]), state)
    np.testing.assert_allclose(out.discount, [-0.95])


def test_discount_keeps_the_sign_when_the_mover_moves_again():
    """The value of a node belongs to its mover: after a move that leaves the turn with the
    same player (backgammon), mctx's backup must not flip it. A search over `TwiceGame` then
    plays action 1, whose line wins; flipping the sign makes it prefer the losing action 0
    (hand-worked: q(1) = +1, q(0) = -1 for player 0)."""
    env = TwiceGame()
    rec = search.make_recurrent_fn(env, _unmasked, discount=0.9)
    root = jax.tree.map(lambda x: jnp.stack([x, x]), env.init())
    out, mid = rec(None, jax.random.PRNGKey(0), jnp.array([1, 0]), root)
    np.testing.assert_allclose(out.discount, [0.9, 0.9])  # player 0 moves again
    out, _ = rec(None, jax.random.PRNGKey(0), jnp.array([1, 1]), mid)
    np.testing.assert_allclose(out.discount, [0.0, 0.0])
    np.testing.assert_allclose(out.reward, [1.0, -1.0])  # the mover's (player 0's) result
    policy = jax.jit(lambda k: mctx.gumbel_muzero_policy(
        None, k, mctx.RootFnOutput(prior_logits=jnp.zeros((2, 2)), value=jnp.zeros(2),
                                   embedding=root),
        search.make_recurrent_fn(env, _unmasked), num_simulations=16))
    for seed in range(4):
        out = policy(jax.random.PRNGKey(seed))
        np.testing.assert_array_equal(out.action, [1, 1])
        assert (np.asarray(out.search_tree.qvalues(jnp.zeros(2, jnp.int32)))[:, 1] > 0.5).all()


def test_terminal_step_reward_and_discount():
    rec = search.make_recurrent_fn(ENV, lambda v, o, m: NET.apply(v, o, m))
    out, nxt = rec(VARS, jax.random.PRNGKey(0), jnp.array([2, 5]), _batch(X_WINS, O_WINS))
    np.testing.assert_array_equal(out.reward, [1.0, 1.0])  # the mover's reward
    np.testing.assert_array_equal(out.discount, [0.0, 0.0])
    np.testing.assert_array_equal(out.value, [0.0, 0.0])


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="accepted"):
        search.make_search(ENV, NET, _config("alphabeta"))


# ---------------------------------------------------------------- tactical safety
# A prior that hides the decisive move: the network "prefers" `prefer` (logit +30), gives the
# decisive point -30 (probability ~e-26) and a value of 0 everywhere. Without tactics a
# search of one simulation cannot find it (test_hidden_move_is_missed_without_tactics).

def _blind_prior(num_actions, prefer, hide):
    logits = jnp.zeros(num_actions).at[prefer].set(30.0).at[hide].set(-30.0)

    def apply_fn(variables, obs, mask):
        del variables, mask
        batch = obs.shape[0]
        return jnp.broadcast_to(logits, (batch, num_actions)), jnp.zeros(batch)

    return apply_fn


def _tactics_config(policy, tactics, **kw):
    c = _config(policy)
    c.tactics = c.eval_tactics = tactics
    c.update(kw)
    return c


def _play(env, *move_lists):
    """Batched states of `env` after the given move lists."""
    step = jax.jit(env.step)
    states = []
    for moves in move_lists:
        s = env.init(jax.random.PRNGKey(0))
        for a in moves:
            s = step(s, a)
        assert not bool(s.done)
        states.append(s)
    return jax.tree.map(lambda *x: jnp.stack(x), *states)


GOMOKU = envs.make("gomoku", size=7)
# Black (first) has four on row 3, columns 0-3 (actions 21-24): the only winning point is 25
# (column 4; the row starts at the edge). White has four lone corner-ish stones.
_BLACK_FOUR = [21, 0, 22, 6, 23, 42, 24]
GOMOKU_WIN = [*_BLACK_FOUR, 48]  # black to move: wins at 25
GOMOKU_BLOCK = _BLACK_FOUR  # white to move, no win of its own: must block at 25
CONNECT4 = envs.make("connect4")
# X stacks three in column 0, O answers in columns 1 and 2 (actions are columns).
C4_WIN = [0, 1, 0, 1, 0, 2]  # X to move: column 0 wins
C4_BLOCK = [0, 1, 0, 1, 0]  # O to move, no win of its own: must block column 0
TACTICAL = {  # env, positions (win, block), the decisive move, the prior's favourite
    "gomoku": (GOMOKU, (GOMOKU_WIN, GOMOKU_BLOCK), 25, 10),
    "connect4": (CONNECT4, (C4_WIN, C4_BLOCK), 0, 3),
}


def _tactical_run(game, policy, tactics, evaluation, num_simulations=1):
    env, positions, decisive, prefer = TACTICAL[game]
    s = search.Search(env, _blind_prior(env.num_actions, prefer, decisive),
                      _tactics_config(policy, tactics))
    fn = jax.jit(lambda st, k: s(None, st, k, evaluation=evaluation,
                                 num_simulations=num_simulations))
    return fn(_play(env, *positions), jax.random.PRNGKey(5)), decisive


def test_tactical_mask_hand_worked():
    """The one-ply facts themselves: the winning point, the block, and nothing else."""
    for env, (win, block), decisive, _ in TACTICAL.values():
        states = _play(env, win, block)
        for tactics, expect_block in (("win", False), ("win_and_block", True),
                                      ("threats", True)):
            mask = np.asarray(jax.jit(jax.vmap(
                lambda st, t=tactics, e=env: search.tactical_mask(e, st, t)))(states))
            only = np.zeros(env.num_actions, bool)
            only[decisive] = True
            np.testing.assert_array_equal(mask[0], only)  # the win, whatever the tactics
            legal = np.asarray(states.legal_action_mask[1])
            np.testing.assert_array_equal(mask[1], only if expect_block else legal)


@pytest.mark.parametrize(("game", "policy", "evaluation", "tactics"), [
    ("gomoku", "gumbel", True, "win_and_block"), ("gomoku", "gumbel", False, "win_and_block"),
    ("gomoku", "muzero", True, "win_and_block"), ("gomoku", "muzero", False, "win_and_block"),
    ("connect4", "gumbel", True, "win_and_block"), ("connect4", "muzero", False, "threats"),
    ("gomoku", "gumbel", True, "threats")])
def test_one_simulation_wins_and_blocks(game, policy, evaluation, tactics):
    """A single simulation plays the win in one and the only block, against the prior."""
    out, decisive = _tactical_run(game, policy, tactics, evaluation)
    np.testing.assert_array_equal(out.action, [decisive, decisive])
    weights = np.asarray(out.action_weights)
    assert np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights[:, decisive], 1.0, atol=1e-6)


@pytest.mark.parametrize(("game", "policy"), [("gomoku", "gumbel"), ("connect4", "muzero")])
def test_hidden_move_is_missed_without_tactics(game, policy):
    """The same searches without tactics follow the prior (what the tactics fix)."""
    out, decisive = _tactical_run(game, policy, "none", evaluation=True)
    assert not np.any(np.asarray(out.action) == decisive), out.action


# Tic-tac-toe. X has two threats (2 and 6) and O no win: every O move loses.
TTT_FORK = [0, 4, 1, 8, 3]
TTT_QUIET = [0, 4]  # X to move: nothing is decided one move ahead


def _linear_net(variables, obs, mask):
    """A cheap stand-in network whose prior and value depend on the position."""
    del mask
    x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
    w = jax.random.normal(jax.random.PRNGKey(3), (x.shape[1], ENV.num_actions + 1))
    out = x @ w
    return out[:, :-1], jnp.tanh(out[:, -1])


@pytest.mark.parametrize(("policy", "evaluation"), [("gumbel", False), ("muzero", True)])
def test_tactics_change_nothing_when_nothing_is_decided(policy, evaluation):
    """Every move loses / nothing to detect: the same output as the plain search (the root
    tactics alone: node tactics, inside the tree, have tests of their own below)."""
    states = _batch(TTT_FORK, TTT_QUIET)
    outs = {}
    for tactics in ("none", "win_and_block"):
        s = search.Search(ENV, _linear_net, _tactics_config(policy, tactics,
                                                            node_tactics=False))
        with jax.debug_nans(True):
            outs[tactics] = jax.jit(
                lambda st, k, s=s: s(None, st, k, evaluation=evaluation, num_simulations=8)
            )(states, jax.random.PRNGKey(7))
    plain, safe = outs["none"], outs["win_and_block"]
    np.testing.assert_array_equal(plain.action, safe.action)
    np.testing.assert_array_equal(plain.action_weights, safe.action_weights)
    assert np.all(np.isfinite(np.asarray(safe.action_weights)))
    fork_mask = search.tactical_mask(ENV, jax.tree.map(lambda x: x[0], states), "win_and_block")
    np.testing.assert_array_equal(fork_mask, states.legal_action_mask[0])


# ---------------------------------------------------------------- node tactics
# Hand-worked positions (7x7 Gomoku, row 3 = actions 21..27; Connect4 actions are columns):
# what one move ahead decides for the mover, and the prior and value `node_tactics` give.
_LOGITS = jnp.linspace(-1.0, 1.0, 49)  # a made-up prior (none of it decides anything)
NODE_CASES = {  # moves: (env, moves, the only moves kept (None: all legal), value)
    # black to move, four 21-24: wins at 25 (value +1)
    "win": (GOMOKU, GOMOKU_WIN, [25], 1.0),
    # white to move, black's four 21-24: the block at 25, the value stays the network's
    "block": (GOMOKU, GOMOKU_BLOCK, [25], 0.25),
    # white to move, black's open four 22-25: 21 and 26 win for him, a loss for white
    "open four": (GOMOKU, [22, 0, 23, 6, 24, 42, 25], [21, 26], -1.0),
    # black to move with a four (21-24) while white has one (0-3): black's win comes first
    "win beats block": (GOMOKU, [21, 0, 22, 1, 23, 2, 24, 3], [25], 1.0),
    # black to move, an open three 23-25 and nothing decided yet
    "quiet": (GOMOKU, [23, 0, 24, 6, 25, 42], None, 0.25),
    # Connect4, X to move, three in column 0: wins there
    "c4 win": (CONNECT4, C4_WIN, [0], 1.0),
    # Connect4, O to move, X's bottom row 1-3 open at both ends (columns 0 and 4)
    "c4 two threats": (CONNECT4, [1, 1, 2, 2, 3], [0, 4], -1.0),
}


@pytest.mark.parametrize("case", list(NODE_CASES))
def test_node_tactics_hand_worked(case):
    env, moves, kept, value = NODE_CASES[case]
    state = jax.tree.map(lambda x: x[0], _play(env, moves))
    logits = _LOGITS[:env.num_actions]
    out_logits, out_value = jax.jit(functools.partial(search.node_tactics, env))(
        state, logits, jnp.float32(0.25))
    expect = np.asarray(state.legal_action_mask) if kept is None else np.isin(
        np.arange(env.num_actions), kept)
    low = np.finfo(np.float32).min
    np.testing.assert_array_equal(np.asarray(out_logits), np.where(expect, logits, low))
    assert float(out_value) == pytest.approx(value)
    if value == -1.0:  # the loss comes one ply after the mover's block: -gamma
        _, discounted = search.node_tactics(env, state, logits, jnp.float32(0.25), 0.9)
        assert float(discounted) == pytest.approx(-0.9)


def test_node_tactics_see_an_open_four_one_ply_deeper():
    """Black's open three (23-25): 22 or 26 makes an open four. With a flat value and a
    prior that prefers another point, only the nodes' tactics tell the search that those
    moves win (the open four is decided one move ahead of white's node)."""
    def net(variables, obs, mask):
        del variables, mask
        batch = obs.shape[0]
        return (jnp.broadcast_to(jnp.zeros(49).at[10].set(1.0), (batch, 49)),
                jnp.zeros(batch))

    state = _play(GOMOKU, NODE_CASES["quiet"][1])
    chosen = {}
    for nodes in (False, True):
        s = search.Search(GOMOKU, net, _tactics_config(
            "gumbel", "win", max_num_considered_actions=49, node_tactics=nodes))
        out = jax.jit(lambda st, k, s=s: s(None, st, k, evaluation=True, num_simulations=64))(
            state, jax.random.PRNGKey(0))
        chosen[nodes] = int(out.action[0])
        q = np.asarray(out.search_tree.qvalues(jnp.zeros(1, jnp.int32))[0])
        if nodes:
            np.testing.assert_allclose(q[[22, 26]], 1.0)
    assert chosen[False] == 10  # the prior's favourite: nothing told it otherwise
    assert chosen[True] in (22, 26)


def test_eval_considered_set_grows_with_the_budget():
    """Gumbel in evaluation looks at num_simulations // eval_sims_per_considered moves."""
    flat = lambda v, obs, mask: (jnp.zeros((obs.shape[0], GOMOKU.num_actions)),  # noqa: E731
                                 jnp.zeros(obs.shape[0]))
    state = _play(GOMOKU, [24])  # 48 legal moves, nothing decided
    visited = {}
    for per in (0, 2):
        s = search.Search(GOMOKU, flat, _tactics_config("gumbel", "none",
                                                        max_num_considered_actions=16,
                                                        eval_sims_per_considered=per))
        assert s.num_considered(64, evaluation=False) == 16
        out = jax.jit(lambda st, k, s=s: s(None, st, k, evaluation=True, num_simulations=64))(
            state, jax.random.PRNGKey(0))
        visited[per] = int((out.search_tree.children_visits[0, 0] > 0).sum())
    assert visited == {0: 16, 2: 32}
    s = search.Search(GOMOKU, flat, _tactics_config("gumbel", "none",
                                                    eval_sims_per_considered=16))
    assert s.num_considered(800, evaluation=True) == 49  # 50, capped at the board
    assert s.num_considered(64, evaluation=True) == 9  # max_num_considered_actions=9


def test_value_scale_weighs_the_search_values_against_the_prior():
    """Gumbel's `value_scale` (self-play) and `eval_value_scale` (evaluation) reach mctx's
    qtransform, each in its own mode: X can win at once in column 0, the prior prefers
    column 3 by 3 logits and values every position 0, and no tactics say so. A tiny scale
    trusts the prior, a large one the search's values (the win)."""
    logits = jnp.zeros(CONNECT4.num_actions).at[3].set(3.0)

    def apply_fn(variables, obs, mask):
        del variables, mask
        return jnp.broadcast_to(logits, (obs.shape[0], 7)), jnp.zeros(obs.shape[0])

    state = _play(CONNECT4, C4_WIN)
    for selfplay_scale, eval_scale in ((0.01, 1.0), (1.0, 0.01)):
        s = search.Search(CONNECT4, apply_fn, _tactics_config(
            "gumbel", "none", value_scale=selfplay_scale, eval_value_scale=eval_scale))
        run = jax.jit(lambda st, k, e, s=s: s(None, st, k, evaluation=e, num_simulations=64),
                      static_argnums=2)
        chosen = int(run(state, jax.random.PRNGKey(0), True).action[0])
        target = float(run(state, jax.random.PRNGKey(0), False).action_weights[0, 0])
        assert chosen == (0 if eval_scale == 1.0 else 3)
        assert (target > 0.9) if selfplay_scale == 1.0 else (target < 0.5), target
    for field in ("value_scale", "eval_value_scale"):
        with pytest.raises(ValueError, match=f"search.{field}=0.0 must be > 0"):
            search.make_search(ENV, NET, _tactics_config("gumbel", "none", **{field: 0.0}))


def test_bad_tactics_are_rejected():
    for field in ("tactics", "eval_tactics"):
        c = _tactics_config("gumbel", "none")
        c[field] = "always"
        with pytest.raises(ValueError, match=f"search.{field}='always'; accepted: none, win, "
                                             "win_and_block"):
            search.make_search(ENV, NET, c)


def test_configs_saved_before_the_fields_existed_still_load():
    """No tactics / eval_tactics / eval_sims_per_considered: validated, and the defaults."""
    from az_jax import config as config_lib
    from configs import default

    c = default.get_config()
    fields = ("tactics", "eval_tactics", "eval_sims_per_considered", "threat_depth",
              "threat_width", "node_tactics", "value_scale")
    assert tuple(c.search[f] for f in fields) == (
        search.DEFAULT_TACTICS, search.DEFAULT_EVAL_TACTICS,
        search.DEFAULT_EVAL_SIMS_PER_CONSIDERED, search.DEFAULT_THREAT_DEPTH,
        search.DEFAULT_THREAT_WIDTH, search.DEFAULT_NODE_TACTICS,
        search.DEFAULT_VALUE_SCALE)  # one default, old and new
    del c.search.eval_value_scale  # saved before it: mctx's scale, as they searched
    for field in fields:
        del c.search[field]
    config_lib.validate(c, 1)
    s = search.make_search(ENV, NET, c.search)
    assert s.tactics == {False: search.DEFAULT_TACTICS, True: search.DEFAULT_EVAL_TACTICS}
    assert s.sims_per_considered == search.DEFAULT_EVAL_SIMS_PER_CONSIDERED
    assert (s.threat_depth, s.threat_width) == (search.DEFAULT_THREAT_DEPTH,
                                                search.DEFAULT_THREAT_WIDTH)
    assert s.node_tactics == {False: False, True: search.DEFAULT_NODE_TACTICS}
    assert s.value_scale == {False: search.DEFAULT_VALUE_SCALE, True: search.DEFAULT_VALUE_SCALE}
    c.search.tactics = "always"
    with pytest.raises(ValueError, match="search.tactics='always'; accepted"):
        config_lib.validate(c, 1)


@pytest.mark.parametrize("policy", search.POLICIES)
@pytest.mark.parametrize("per_game_keys", [False, True])
def test_batched_backward_builds_mctx_tree(policy, per_game_keys):
    """az_jax's backward pass (one loop over the batch, mctx_backward) against mctx's own,
    the reference: the same tree, bit for bit, with root noise, also under the outer vmap
    of per-game keys (its custom batching rule)."""
    s = SEARCH[policy]
    states = _batch([], [4], [0, 4, 1], X_WINS)
    root = s.root(VARS, states)
    invalid = ~states.legal_action_mask
    key = jax.random.PRNGKey(3)
    if per_game_keys:
        key = jax.random.split(key, 4)

    def run(use_ours):
        def one(r, i, k):
            r, i = jax.tree.map(lambda x: x[None], (r, i))
            search_ = s._search if use_ours else s._mctx
            return jax.tree.map(lambda x: x[0], search_(VARS, r, i, k, False, 24))
        if per_game_keys:
            return jax.jit(jax.vmap(one))(root, invalid, key).search_tree
        search_ = s._search if use_ours else s._mctx
        return jax.jit(lambda *a: search_(VARS, *a, False, 24))(root, invalid, key).search_tree

    ours, theirs = run(True), run(False)
    assert int(ours.node_visits[:, 0].min()) == 25  # every simulation was backed up
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_batched_backward_leaves_games_at_their_root_alone():
    """A direct call: a game whose leaf is its root gets no update, the others theirs."""
    from az_jax import mctx_backward
    states = _batch([], [4, 0])
    tree = jax.jit(lambda r, i, k: SEARCH["muzero"]._mctx(VARS, r, i, k, False, 6))(
        SEARCH["muzero"].root(VARS, states), ~states.legal_action_mask,
        jax.random.PRNGKey(0)).search_tree
    leaf = jnp.array([0, 5], jnp.int32)  # game 0: at its root; game 1: node 5
    ours = jax.jit(mctx_backward.backward)(tree, leaf)
    theirs = jax.jit(mctx_backward.MCTX_BACKWARD)(tree, leaf)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(ours.node_visits[0], tree.node_visits[0])
    assert int(ours.node_visits[1, 0]) == int(tree.node_visits[1, 0]) + 1


@pytest.mark.parametrize("masked", [False, True], ids=["legal", "zero prior"])
def test_fpu_gives_unvisited_children_the_parent_value(masked):
    """`qtransform_parent_fpu`, hand-worked on a one-node tree: the visited child's Q 0.8
    maps to (0.8 + 1) / 2 = 0.9, and the unvisited ones get the parent's value 0.4, i.e.
    0.7 (mctx's own default would score them at the minimum), unless their prior is 0 (an
    illegal move inside the tree, logit finfo.min): then -1, i.e. 0."""
    a = 3
    logits = jnp.zeros((2, a))
    if masked:
        logits = logits.at[0, 2].set(jnp.finfo(jnp.float32).min)
    tree = mctx.Tree(
        node_visits=jnp.array([2, 1], jnp.int32), raw_values=jnp.zeros(2),
        node_values=jnp.array([0.4, 0.8]), parents=jnp.array([-1, 0], jnp.int32),
        action_from_parent=jnp.array([-1, 0], jnp.int32),
        children_index=jnp.array([[1, -1, -1], [-1, -1, -1]], jnp.int32),
        children_prior_logits=logits,
        children_visits=jnp.array([[1, 0, 0], [0, 0, 0]], jnp.int32),
        children_rewards=jnp.zeros((2, a)), children_discounts=jnp.ones((2, a)),
        children_values=jnp.array([[0.8, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        embeddings=jnp.zeros(2), root_invalid_actions=jnp.zeros(a), extra_data=None)
    np.testing.assert_allclose(search.qtransform_parent_fpu(tree, 0),
                               [0.9, 0.7, 0.0 if masked else 0.7], atol=1e-6)


def test_puct_evaluation_plays_the_most_visited_move():
    """PUCT in evaluation (arena, front ends) plays the most visited root move, with any
    key; in self-play it samples in proportion to the visits. An empty board and this
    random network's 64 simulations spread the visits unevenly over the 9 moves."""
    state = _batch([], [4], [0, 4])
    fn = jax.jit(lambda k, evaluation: SEARCH["muzero"](VARS, state, k, evaluation=evaluation),
                 static_argnums=1)
    off_max = 0
    for seed in range(16):
        for evaluation in (True, False):
            out = fn(jax.random.PRNGKey(seed), evaluation)
            weights = np.asarray(out.action_weights)
            chosen = weights[np.arange(3), np.asarray(out.action)]
            if evaluation:
                np.testing.assert_array_equal(chosen, weights.max(-1))
            else:
                off_max += int((chosen < weights.max(-1)).sum())
    assert off_max > 0  # self-play's moves are sampled (the check above can fail)


def _optimistic(variables, obs, mask):
    """An over-optimistic network: a uniform prior over the legal moves, value 0.95."""
    del variables, obs
    return network.mask_logits(jnp.zeros(mask.shape), mask), jnp.full(mask.shape[:1], 0.95)


def test_puct_plays_no_illegal_move_inside_the_tree():
    """mctx masks invalid actions only at the root. With the parent's value as every
    unvisited child's, an illegal child (prior 0) of an interior node scored (0.95 + 1) / 2
    and, with a small `pb_c_init`, beat the legal children once their values dropped: the
    simulation played an illegal move (23 such edges in these 300 simulations). Zero-prior
    children score as a loss: none."""
    s = search.Search(ENV, _optimistic, _tactics_config("muzero", "none", pb_c_init=0.1))
    out = jax.jit(lambda st, k: s(None, st, k, evaluation=True, num_simulations=300))(
        _batch([0, 4, 8]), jax.random.PRNGKey(0))
    tree = out.search_tree
    assert int(tree.node_visits[0, 0]) == 301
    # Each expanded node's state is its embedding (a finished one has every move legal).
    illegal = ~np.asarray(tree.embeddings.legal_action_mask)  # [B, N, A]
    assert int(np.asarray(tree.children_visits)[illegal].sum()) == 0


def test_num_simulations_is_checked():
    """An explicit 0 is not "the config's" (it raised nothing and searched 64), and a
    negative count is rejected before any search."""
    for sims in (0, -3):
        with pytest.raises(ValueError, match=f"num_simulations={sims} must be >= 1"):
            SEARCH["muzero"](VARS, _batch([]), jax.random.PRNGKey(0), num_simulations=sims)


class _TicTacToeWithLimit(type(ENV)):
    """Tic-tac-toe with a move limit (no shipped game with `winning_moves` has one)."""

    def __init__(self, max_steps):
        self.max_steps = max_steps


@pytest.mark.parametrize(("moves", "max_steps", "line", "kept", "value"), [
    (X_WINS, 5, [2], [2], 1.0),  # X wins on ply 5, the last allowed: a win
    (TTT_FORK, 7, [5, 2], [2, 6], -1.0),  # O's reply is ply 6, X's win ply 7 (the last)
    (TTT_FORK, 6, [5], [2, 6], 0.25),  # O's reply reaches the limit: a draw, the net's value
], ids=["win on the last ply", "loss on the last ply", "limit first"])
def test_node_tactics_count_a_win_on_the_last_allowed_ply(moves, max_steps, line, kept, value):
    """`env.step` ends by the move limit only the games the move did not end, so a win on
    the last allowed ply counts (`line` checks it with `step`), and `node_tactics` agrees:
    the mover's win at once, or the opponent's two winning points when the mover's reply
    does not reach the limit."""
    env = _TicTacToeWithLimit(max_steps)
    state = jax.tree.map(lambda x: x[0], _play(env, moves))
    end = state
    for action in line:
        end = env.step(end, action)
    assert bool(end.done) and bool(end.terminated) == (value != 0.25)
    if value != 0.25:
        assert float(end.rewards[state.current_player]) == value
    out_logits, out_value = search.node_tactics(env, state, jnp.zeros(9), jnp.float32(0.25))
    np.testing.assert_array_equal(np.asarray(out_logits) == 0.0, np.isin(np.arange(9), kept))
    assert float(out_value) == pytest.approx(value)


@pytest.mark.parametrize("per_game", [False, True], ids=["one key", "a key per game"])
def test_typed_keys_search_as_raw_ones(per_game):
    """`jax.random.key` (a typed key, shape []) is one key for the batch like a raw
    `PRNGKey` (shape [2]), and [B] typed keys are one per game like [B, 2] raw ones: the
    same search (it took the typed key for a batch of keys and failed to vmap over it)."""
    states = _batch([], [4], [0, 4])
    raw = jax.random.PRNGKey(5)
    typed = jax.random.wrap_key_data(raw)
    if per_game:
        raw, typed = jax.random.split(raw, 3), jax.random.split(typed, 3)
    run = jax.jit(lambda k: SEARCH["gumbel"](VARS, states, k, num_simulations=4))
    a, b = run(raw), run(typed)
    np.testing.assert_array_equal(np.asarray(a.action_weights), np.asarray(b.action_weights))


def test_an_unknown_tactics_name_is_refused_for_a_game_with_chance_too():
    """A game with chance gets no tactics (one step ahead is not decided there), but a
    misspelt name is still an error, not silently "none"."""
    class Chancy(type(ENV)):
        deterministic = False

    s = search.make_search(Chancy(), NET, _config("gumbel"))
    state = _batch([])
    assert bool((s.invalid_actions(state, tactics="win") == ~state.legal_action_mask).all())
    with pytest.raises(ValueError, match="tactics='wins'; accepted"):
        s.invalid_actions(state, tactics="wins")
