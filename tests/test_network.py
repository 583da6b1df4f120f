"""The ResNet's convolution helper and parameter layout."""

import jax
import jax.numpy as jnp
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
