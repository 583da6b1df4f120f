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


def test_conv_head_needs_one_action_per_point():
    config = ml_collections.ConfigDict(dict(channels=8, num_blocks=1, norm="batch",
                                            dtype="float32", head="conv"))
    with pytest.raises(ValueError, match="one action per board point"):
        network.make_network(config, envs.make("connect4"))
    config.head = "global"
    with pytest.raises(ValueError, match="network.head='global'; accepted: dense, conv"):
        network.make_network(config, envs.make("tictactoe"))
