"""The ResNet's convolution helper and parameter layout."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax import lax

import envs
from az_jax import network


@pytest.mark.parametrize("channels", [1, 3, 4, 7])
def test_conv_even_channels_is_the_same_convolution(channels):
    """Values and gradients (input and kernel) match lax.conv_general_dilated itself."""
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(channels), 3)
    x = jax.random.normal(k1, (5, 6, 7, channels))  # NHWC
    w = jax.random.normal(k2, (3, 3, channels, 8))  # HWIO
    cot = jax.random.normal(k3, (5, 6, 7, 8))
    dims = lax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "HWIO", "NHWC"))

    def run(conv):
        f = lambda x, w: jnp.vdot(conv(x, w, (1, 1), "SAME", dimension_numbers=dims), cot)
        return f(x, w), jax.grad(f, argnums=(0, 1))(x, w)

    (want, (gx, gw)), (got, (hx, hw)) = run(lax.conv_general_dilated), run(
        network.conv_even_channels)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert hx.shape == x.shape and hw.shape == w.shape
    np.testing.assert_allclose(hx, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(hw, gw, rtol=1e-4, atol=1e-4)


def test_stem_kernel_keeps_the_observation_planes():
    """Checkpoints stay as they were: the stem kernel has the env's own plane count."""
    env = envs.make("connect4")
    net = network.ResNet(num_actions=env.num_actions, channels=8, num_blocks=1)
    params = network.init_variables(net, env, jax.random.PRNGKey(0))["params"]
    assert params["Conv_0"]["kernel"].shape == (3, 3, env.observation_shape[-1], 8)
    assert env.observation_shape[-1] % 2  # the padded case is the one checked


def test_conv_head_plays_every_board_size_with_one_set_of_parameters():
    """head="conv": the parameters of a 7x7 Gomoku network play 11x11 as they are, and the
    logit of action row * W + col sees only the board around (row, col)."""
    config = ml_collections.ConfigDict(dict(channels=8, num_blocks=0, norm="batch",
                                            dtype="float32", head="conv"))
    small, large = envs.make("gomoku", size=7), envs.make("gomoku", size=11)
    net = network.make_network(config, small)
    variables = network.init_variables(net, small, jax.random.PRNGKey(0))
    assert jax.tree.structure(variables) == jax.tree.structure(network.init_variables(
        network.make_network(config, large), large, jax.random.PRNGKey(0)))
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (2, *large.observation_shape))
    logits, value = network.make_network(config, large).apply(variables, obs)
    assert logits.shape == (2, 121) and value.shape == (2,)
    # Without residual blocks the receptive field is the 3x3 stem: flipping one input point
    # changes only the logits of the points next to it.
    row, col = 3, 8
    flipped = obs.at[:, row, col, 0].set(~obs[:, row, col, 0])
    changed, _ = network.make_network(config, large).apply(variables, flipped)
    moved = np.abs(np.asarray(changed - logits)).max(axis=0).reshape(11, 11) > 1e-6
    near = np.zeros((11, 11), bool)
    near[row - 1:row + 2, col - 1:col + 2] = True
    assert moved.any() and not (moved & ~near).any()


def test_global_pool_lets_every_point_see_the_whole_board():
    """network.global_pool: with one residual block the conv head's receptive field is 7x7
    (stem and two 3x3 convolutions), so a stone in one corner moves no logit in the other
    corner; with the pooled bias it moves logits there (those whose ReLUs are not all off)."""
    env = envs.make("gomoku", size=11)
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (2, *env.observation_shape))
    flipped = obs.at[:, 0, 0, 0].set(~obs[:, 0, 0, 0])
    far = np.zeros((11, 11), bool)
    far[4:, 4:] = True  # more than 3 points from (0, 0)
    for pooled in (False, True):
        config = ml_collections.ConfigDict(dict(channels=8, num_blocks=1, norm="batch",
                                                dtype="float32", head="conv",
                                                global_pool=pooled))
        net = network.make_network(config, env)
        variables = network.init_variables(net, env, jax.random.PRNGKey(0))
        logits, _ = net.apply(variables, obs)
        changed, _ = net.apply(variables, flipped)
        moved = np.abs(np.asarray(changed - logits)).max(axis=0).reshape(11, 11) > 1e-6
        assert moved[0, 0] and moved[far].any() == pooled
        if pooled:
            assert moved[far].mean() > 0.5


def test_value_channels_widen_the_value_head_and_older_configs_keep_one():
    env = envs.make("connect4")
    config = ml_collections.ConfigDict(dict(channels=8, num_blocks=1, norm="batch",
                                            dtype="float32"))  # saved before value_channels
    kernels = lambda config: [x.shape for x in jax.tree.leaves(network.init_variables(
        network.make_network(config, env), env, jax.random.PRNGKey(0))["params"])
        if x.shape[:2] == (1, 1)]  # the 1x1 convolutions: policy (2) and value
    assert kernels(config) == [(1, 1, 8, 2), (1, 1, 8, 1)]
    config.value_channels = 16
    assert kernels(config) == [(1, 1, 8, 2), (1, 1, 8, 16)]
    config.value_channels = 0
    with pytest.raises(ValueError, match="network.value_channels must be >= 1"):
        network.make_network(config, env)


@pytest.mark.parametrize("norm", network._NORMS)
def test_every_norm_lets_the_observation_reach_both_heads(norm):
    """The value head's 1x1 convolution has one channel and the policy head's two: a
    normalisation over the channels alone would make the value a constant and the
    policy a function of signs. With each norm, different positions get different
    values, and a small change of the input moves every position's logits a little."""
    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=env.num_actions, channels=4, num_blocks=1, norm=norm)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (4, *env.observation_shape))
    logits, value = net.apply(variables, obs)
    assert float(jnp.std(value)) > 1e-4
    eps = jax.random.normal(jax.random.PRNGKey(2), obs.shape) * 1e-3
    logits2, _ = net.apply(variables, obs + eps)
    moved = jnp.abs(logits2 - logits).max(axis=1)
    assert bool((moved > 0).all()) and float(moved.max()) < 0.1


def test_conv_head_needs_one_action_per_point():
    config = ml_collections.ConfigDict(dict(channels=8, num_blocks=1, norm="batch",
                                            dtype="float32", head="conv"))
    with pytest.raises(ValueError, match="one action per board point"):
        network.make_network(config, envs.make("connect4"))
    config.head = "global"
    with pytest.raises(ValueError, match="network.head='global'; accepted: dense, conv"):
        network.make_network(config, envs.make("tictactoe"))


def test_wdl_target_hand_worked():
    """Outcomes are one-hot; a target in between is shared with a draw; the expectation
    P(win) - P(loss) is the target."""
    from az_jax import learner

    z = jnp.array([1.0, 0.0, -1.0, 0.5, -0.25, 2.0])
    want = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.5, 0.5, 0], [0, 0.75, 0.25],
                     [1, 0, 0]], np.float32)  # 2.0 clipped to a win
    got = np.asarray(learner.wdl_target(z))
    np.testing.assert_allclose(got, want, atol=1e-7)
    np.testing.assert_allclose(got[:5, 0] - got[:5, 2], z[:5], atol=1e-7)


def test_surprise_weights_hand_worked():
    """KL(target || softmax(logits)) over the batch's mean: a uniform network and a one-hot
    target are log 2 apart, a uniform target 0; a position without a target weighs 1."""
    from az_jax import learner

    logits = jnp.zeros((3, 2))
    policy = jnp.array([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]])
    # mean KL over the two targets: log(2) / 2, so the weights are 2, 0 (and 1 unweighted)
    np.testing.assert_allclose(learner.surprise_weights(logits, policy, 1.0), [2, 0, 1],
                               atol=1e-6)
    np.testing.assert_allclose(learner.surprise_weights(logits, policy, 0.5), [1.5, 0.5, 1],
                               atol=1e-6)
    assert learner.surprise_weights(logits, jnp.zeros((3, 2)), 1.0).tolist() == [1, 1, 1]


@pytest.mark.parametrize("strength", [0.5, 1.0])
def test_surprise_weights_are_one_when_the_network_predicts_every_target(strength):
    """A batch whose mean KL is 0 (below the 1e-6 clamp) weighs every position 1, so the
    weights still average 1 and no position's value term is dropped (not 1 - strength)."""
    from az_jax import learner

    policy = jnp.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5], [0.0, 0.0]])
    logits = jnp.log(jnp.where(policy > 0, policy, 1.0))  # the last row has no target
    np.testing.assert_allclose(learner.surprise_weights(logits, policy, strength), [1, 1, 1, 1])
    # a uniform network and uniform targets
    np.testing.assert_allclose(
        learner.surprise_weights(jnp.zeros((2, 2)), jnp.full((2, 2), 0.5), strength), [1, 1])


@pytest.mark.parametrize("value_head", network.VALUE_HEADS)
def test_surprise_weight_one_ignores_a_position_the_network_already_predicts(value_head):
    """With surprise_weight=1 a position whose target equals the network's policy weighs 0:
    its value target no longer moves the loss; with 0 (AlphaZero) it does. For both value
    heads: the wdl head's cross-entropy is weighted as the tanh head's squared error."""
    from az_jax import learner
    from az_jax.replay import Sample

    env = envs.make("tictactoe")
    # no batch norm: the loss's training-mode policy is the one computed here
    net = network.ResNet(num_actions=env.num_actions, channels=4, num_blocks=0, norm="none",
                         value_head=value_head)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (2, *env.observation_shape))
    mask = jnp.ones((2, env.num_actions), bool)
    logits, _ = net.apply(variables, obs, mask)
    policy = jnp.stack([jax.nn.softmax(logits[0]), jax.nn.one_hot(4, env.num_actions)])

    def loss(z0, strength):
        batch = Sample(obs.astype(env.observation_dtype), policy, mask, jnp.array([z0, 1.0]))
        return float(learner.loss_fn(variables["params"], variables.get("batch_stats", {}),
                                     net, batch, 1.0, strength)[0])

    assert abs(loss(1.0, 1.0) - loss(-1.0, 1.0)) < 1e-5
    assert abs(loss(1.0, 0.0) - loss(-1.0, 0.0)) > 1e-3


def test_optimizers_decay_weights_as_documented():
    """Hand-worked first steps with a zero gradient, so only weight decay moves the weights
    (constant learning rate lr, decay wd). AdamW decays by lr * wd, outside its moments.
    SGD adds wd * w to the gradient before Nesterov momentum 0.9: the first update is
    lr * 1.9 * wd * w0, the second lr * (1.9 * wd * w1 + 0.81 * wd * w0) (its momentum
    still holds the first step's term). Decay applied after the momentum would fail."""
    from az_jax import learner

    lr, wd, w = 0.1, 0.01, jnp.array([2.0, -4.0])
    zero = jnp.zeros(2)

    def steps(optimizer, n):
        c = ml_collections.ConfigDict(dict(optimizer=optimizer, learning_rate=lr,
                                           schedule="constant", warmup_steps=0,
                                           weight_decay=wd, max_grad_norm=1.0))
        tx = learner.make_optimizer(c, 10)
        params, state, out = w, tx.init(w), []
        for _ in range(n):
            updates, state = tx.update(zero, state, params)
            params = params + updates
            out.append(params)
        return out

    (a1,) = steps("adamw", 1)
    np.testing.assert_allclose(a1, w * (1 - lr * wd), rtol=1e-6)
    s1, s2 = steps("sgd", 2)
    np.testing.assert_allclose(s1, w * (1 - lr * wd * 1.9), rtol=1e-6)
    np.testing.assert_allclose(s2, s1 - lr * wd * (s1 + 0.9 * (0.9 * w + s1)), rtol=1e-6)


@pytest.mark.parametrize("value_head", ["tanh", "wdl"])
def test_value_heads_give_the_value_of_their_raw_outputs(value_head):
    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=4, num_blocks=1, value_head=value_head)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.4, (5, *env.observation_shape))
    logits, value, raw = net.apply(variables, obs, value_outputs=True)
    raw = np.asarray(raw, np.float64)
    if value_head == "tanh":
        assert raw.shape == (5, 1)
        want = np.tanh(raw[:, 0])
    else:
        assert raw.shape == (5, 3)
        p = np.exp(raw - raw.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        want = p[:, 0] - p[:, 2]  # win - loss
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    plain_logits, plain_value = net.apply(variables, obs)
    np.testing.assert_array_equal(plain_value, value)
    np.testing.assert_array_equal(plain_logits, logits)


def test_wdl_head_learns_its_targets():
    """The wdl loss is the cross-entropy against `wdl_target`, and minimising it moves the
    value (win - loss) to each position's target: a label order that disagreed with the
    value's sign would send the values the wrong way."""
    import optax

    from az_jax import learner
    from az_jax.replay import Sample

    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=8, num_blocks=1, norm="none",
                         value_head="wdl")
    params = network.init_variables(net, env, jax.random.PRNGKey(0))["params"]
    obs = jax.random.bernoulli(jax.random.PRNGKey(2), 0.4, (4, *env.observation_shape))
    target = jnp.array([1.0, -1.0, 0.0, 0.5])
    batch = Sample(observation=obs, policy=jnp.zeros((4, 9)),
                   legal_mask=jnp.ones((4, 9), bool), value=target)
    loss, (metrics, _) = learner.loss_fn(params, {}, net, batch, 1.0)
    _, _, raw = net.apply({"params": params}, obs, value_outputs=True)
    log_p = np.log(np.asarray(jax.nn.softmax(raw), np.float64))
    t = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [0.5, 0.5, 0]])
    np.testing.assert_allclose(loss, -(t * log_p).sum(-1).mean(), rtol=1e-5)
    assert metrics["policy_loss"] == 0.0  # no policy targets here

    tx = optax.adam(3e-2)
    opt = tx.init(params)
    grad = jax.jit(jax.grad(lambda p: learner.loss_fn(p, {}, net, batch, 1.0)[0]))
    for _ in range(150):
        updates, opt = tx.update(grad(params), opt)
        params = optax.apply_updates(params, updates)
    _, value = net.apply({"params": params}, obs)
    np.testing.assert_allclose(value, target, atol=0.1)


def test_unknown_value_head_is_refused():
    config = ml_collections.ConfigDict(dict(channels=8, num_blocks=1, norm="batch",
                                            dtype="float32", head="dense", value_head="mse"))
    with pytest.raises(ValueError, match="network.value_head='mse'; accepted: tanh, wdl"):
        network.make_network(config, envs.make("tictactoe"))


@pytest.mark.parametrize("value_head", network.VALUE_HEADS)
def test_loss_is_the_policy_cross_entropy_plus_the_weighted_value_term(value_head):
    """Worked in numpy from the network's own outputs: the cross-entropy summed over the
    positions with a policy target and divided by their count (here 2 of 3), plus
    value_weight times the value term (tanh: mean (v - z)^2; wdl: the mean cross-entropy of
    the raw logits against hand-written win/draw/loss targets). Two value weights, so a
    loss that ignored the weight fails."""
    from az_jax import learner
    from az_jax.replay import Sample

    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=4, num_blocks=0, norm="none",
                         value_head=value_head)
    params = network.init_variables(net, env, jax.random.PRNGKey(0))["params"]
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (3, *env.observation_shape))
    mask = jnp.ones((3, 9), bool).at[0, 4].set(False)  # one masked (illegal) action
    policy = np.zeros((3, 9), np.float32)
    policy[0, [0, 2]] = 0.5
    policy[1, 8] = 1.0  # row 2: no policy target (a fast search's position)
    z = np.array([1.0, -0.5, 0.0], np.float32)
    batch = Sample(obs, jnp.asarray(policy), mask, jnp.asarray(z))
    logits, value, raw = (np.asarray(x, np.float64) for x in net.apply(
        {"params": params}, obs, mask, value_outputs=True))

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    ce = -(policy * log_softmax(logits)).sum() / 2
    if value_head == "tanh":
        term = ((value - z) ** 2).mean()
    else:  # win, draw, loss for z = 1, -0.5, 0
        t = np.array([[1, 0, 0], [0, 0.5, 0.5], [0, 1, 0]])
        term = -(t * log_softmax(raw)).sum(-1).mean()
    loss = jax.jit(lambda w: learner.loss_fn(params, {}, net, batch, w)[0])
    for weight in (0.5, 2.0):
        np.testing.assert_allclose(loss(weight), ce + weight * term, rtol=1e-5)


def test_a_non_finite_batch_skips_the_update_and_counts_it():
    """A NaN or infinite value target makes the loss non-finite: `learner.update` returns
    the state it was given bit for bit (params, batch statistics, optimizer moments, and
    the step count: "state unchanged") with metrics["skipped"] = 1. A finite batch moves
    the params and the step, skipped 0 (so the test fails both ways)."""
    import functools

    from az_jax import learner
    from az_jax.replay import Sample

    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=4, num_blocks=0, norm="batch")
    config = ml_collections.ConfigDict(dict(optimizer="adamw", learning_rate=0.1,
                                            schedule="constant", warmup_steps=0,
                                            weight_decay=0.01, max_grad_norm=1.0))
    tx = learner.make_optimizer(config, 10)
    start = learner.init_train_state(
        network.init_variables(net, env, jax.random.PRNGKey(0)), tx)
    update = jax.jit(functools.partial(learner.update, net=net, tx=tx))
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.4, (4, *env.observation_shape))
    batch = Sample(obs, jax.nn.one_hot(jnp.arange(4), 9), jnp.ones((4, 9), bool),
                   jnp.array([1.0, -1.0, 0.0, 1.0]))
    leaves = lambda state: [np.asarray(x) for x in jax.tree.leaves(state)]

    state, metrics = update(start, batch)  # a finite step: moments no longer zero
    assert int(state.step) == 1 and float(metrics["skipped"]) == 0
    assert any(not np.array_equal(a, b) for a, b in zip(
        leaves(state.params), leaves(start.params), strict=True))
    for bad in (np.nan, np.inf):
        after, metrics = update(state, batch._replace(value=batch.value.at[2].set(bad)))
        assert not np.isfinite(float(metrics["loss"]))
        assert float(metrics["skipped"]) == 1
        assert jax.tree.structure(after) == jax.tree.structure(state)
        for got, want in zip(leaves(after), leaves(state), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("head", network.HEADS)
def test_illegal_actions_get_the_most_negative_finite_logit(head):
    """net.apply(variables, obs, legal_mask): every illegal action's logit is exactly
    finfo(float32).min (finite, never -inf), every legal one is the unmasked network's own
    finite logit, and the softmax gives the illegal actions no probability."""
    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=4, num_blocks=1, head=head)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.4, (4, *env.observation_shape))
    mask = jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (4, 9)).at[:, 0].set(True)
    masked, _ = net.apply(variables, obs, mask)
    free, _ = net.apply(variables, obs)
    masked, free, mask = np.asarray(masked), np.asarray(free), np.asarray(mask)
    assert masked.dtype == np.float32 and (~mask).any()
    lowest = np.finfo(np.float32).min
    np.testing.assert_array_equal(masked[~mask], lowest)
    np.testing.assert_array_equal(masked[mask], free[mask])
    assert np.isfinite(free).all() and (free > lowest).all()
    assert (np.asarray(jax.nn.softmax(masked))[~mask] == 0).all()


def _np_conv(x, kernel, bias):
    """A 'SAME' convolution in numpy: NHWC input, HWIO kernel (flax's layout), odd sizes."""
    kh, kw = kernel.shape[:2]
    b, h, w, _ = x.shape
    padded = np.pad(x, [(0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)])
    out = np.zeros((b, h, w, kernel.shape[-1]))
    for i in range(kh):
        for j in range(kw):
            out += padded[:, i:i + h, j:j + w, :] @ kernel[i, j]
    return out + bias


@pytest.mark.parametrize("head, norm", [("dense", "none"), ("conv", "none"), ("dense", "layer")])
def test_forward_pass_is_the_documented_architecture(head, norm):
    """One residual block, written out in numpy (float64) from the docstrings: stem
    conv-norm-relu; the block conv-norm-relu (+ the global pooling bias: a dense layer of
    the mean and the max over the board), conv-norm, the skip, relu; the policy head's 1x1
    conv (2 channels)-norm-relu, then a dense layer over the flattened board (dense) or a
    1x1 conv to one logit per point (conv); the value head's 1x1 conv-norm-relu, flattened
    (dense) or pooled (conv), dense-relu-dense-tanh. Convolutions have biases only without
    a norm; the layer norm normalises each position's whole [H, W, C] feature map."""
    env = envs.make("tictactoe")
    net = network.ResNet(num_actions=9, channels=4, num_blocks=1, norm=norm, head=head,
                         global_pool=head == "conv")
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.4, (3, *env.observation_shape))
    logits, value = net.apply(variables, obs)
    q = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
    relu = lambda a: np.maximum(a, 0.0)
    conv = lambda a, name: _np_conv(a, q[name]["kernel"], q[name].get("bias", 0.0))
    dense = lambda a, name: a @ q[name]["kernel"] + q[name]["bias"]
    pool = lambda a: np.concatenate([a.mean(axis=(1, 2)), a.max(axis=(1, 2))], axis=-1)
    norms = iter(range(5))

    def nrm(a):
        if norm == "none":
            return a
        ln = q[f"LayerNorm_{next(norms)}"]  # flax's epsilon 1e-6
        mean, var = a.mean(axis=(1, 2, 3), keepdims=True), a.var(axis=(1, 2, 3), keepdims=True)
        return (a - mean) / np.sqrt(var + 1e-6) * ln["scale"] + ln["bias"]

    x = relu(nrm(conv(np.asarray(obs, np.float64), "Conv_0")))
    y = relu(nrm(conv(x, "Conv_1")))
    if head == "conv":
        y = y + dense(pool(y), "Dense_0")[:, None, None, :]
    x = relu(x + nrm(conv(y, "Conv_2")))
    p = relu(nrm(conv(x, "Conv_3")))
    if head == "conv":
        want_logits = conv(p, "Conv_4").reshape(3, 9)
        v = pool(relu(nrm(conv(x, "Conv_5"))))
    else:
        want_logits = dense(p.reshape(3, -1), "Dense_0")
        v = relu(nrm(conv(x, "Conv_4"))).reshape(3, -1)
    want_value = np.tanh(dense(relu(dense(v, "Dense_1")), "Dense_2")[:, 0])
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", network._NORMS)
def test_convolutions_have_biases_only_without_a_norm(norm):
    """A bias before a batch or layer norm is a parameter the norm (mostly) undoes; the
    layout of saved checkpoints has none there. The conv head's last 1x1 convolution
    (no norm after it) always has one."""
    env = envs.make("tictactoe")
    for head in network.HEADS:
        net = network.ResNet(num_actions=9, channels=4, num_blocks=1, norm=norm, head=head)
        params = jax.eval_shape(lambda: network.init_variables(net, env,
                                                               jax.random.PRNGKey(0)))["params"]
        convs = {k: "bias" in v for k, v in params.items() if k.startswith("Conv")}
        logit_conv = {"Conv_4"} if head == "conv" else set()
        assert {k for k, b in convs.items() if b} == (set(convs) if norm == "none"
                                                      else logit_conv), (head, convs)


@pytest.mark.slow
def test_a_wdl_run_trains_evaluates_and_restores(tmp_path):
    """network.value_head=wdl through the whole loop: self-play, the learner, an evaluation,
    the checkpoint, and a front end's Agent restored from it."""
    import json

    from az_jax import agent, trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    c = tiny_training(tictactoe.get_config(), train__num_iterations=2, eval__every=2,
                      selfplay__num_plies=9, replay__min_size=1)
    c.network.value_head = "wdl"
    c.eval.opponents = "random"
    c.search.eval_tactics = "none"  # the head is under test: a smaller program to compile
    trainer.train_and_evaluate(c, str(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(np.isfinite(r["loss"]) and r["loss"] > 0 for r in rows)
    assert any("eval/seconds" in r for r in rows)
    player = agent.Agent.load(workdir=str(tmp_path), num_simulations=4)
    assert player.restored.net.value_head == "wdl"
    state = player.new_game()
    thought = player.think(state)
    assert bool(player.legal_actions(state)[thought.action]) and -1 <= thought.value <= 1
