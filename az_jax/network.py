"""The AlphaZero network: a ResNet with a policy head and a value head (Flax linen).

    net = make_network(config.network, env)
    variables = init_variables(net, env, key)
    logits, value = net.apply(variables, obs, legal_mask)      # inference
    (logits, value), updates = net.apply(variables, obs, legal_mask, train=True,
                                         mutable=["batch_stats"])   # training (batch norm)

The value head (`value_head`) is "tanh" (AlphaZero's: one output through tanh, trained by
squared error) or "wdl" (three logits for win / draw / loss of the player to move, trained by
cross-entropy, as Leela Chess Zero's; the value is P(win) - P(loss)). Either way `value` is
float32[B] in [-1, 1] and the search sees no difference; `value_outputs=True` also returns
the head's raw outputs ([B, 1] before tanh, or [B, 3] logits) for the loss.

Parameters are float32; `dtype="bfloat16"` runs the convolutions in bfloat16 and returns
float32 logits and values. Illegal actions get `jnp.finfo(float32).min`, never `-inf`,
so softmax and cross-entropy stay finite.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

_NORMS = ("batch", "layer", "none")
HEADS = ("dense", "conv")
VALUE_HEADS = ("tanh", "wdl")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def mask_logits(logits: jax.Array, legal_mask: jax.Array | None) -> jax.Array:
    """Sets illegal logits to the most negative finite value. Shapes `[..., A]`."""
    if legal_mask is None:
        return logits
    return jnp.where(legal_mask, logits, jnp.finfo(logits.dtype).min)


def _pool(x: jax.Array) -> jax.Array:
    """[B, H, W, C] -> [B, 2C]: the mean and the max over the board (global pooling)."""
    return jnp.concatenate([x.mean(axis=(1, 2)), x.max(axis=(1, 2))], axis=-1)


def conv_even_channels(lhs, rhs, *args, **kwargs):
    """`lax.conv_general_dilated` with an odd input-channel count (> 1) zero-padded to even.

    The same convolution (the padded kernel slice is zero, and so is its gradient's use);
    the kernel parameter keeps its true shape. XLA's CPU convolution runs the Connect4 stem
    (3 input planes, 6x7) about 10% faster on 4 planes than on 3; see README, Benchmarks.
    """
    channels = lhs.shape[-1]  # NHWC input, HWIO kernel (flax.linen.Conv's layout)
    if channels % 2 and channels > 1:
        lhs = jnp.pad(lhs, [(0, 0)] * (lhs.ndim - 1) + [(0, 1)])
        rhs = jnp.pad(rhs, [(0, 0)] * (rhs.ndim - 2) + [(0, 1), (0, 0)])
    return lax.conv_general_dilated(lhs, rhs, *args, **kwargs)


class ResNet(nn.Module):
    """Stem conv, `num_blocks` residual blocks, policy and value heads.

    Attributes:
      num_actions: size of the policy output.
      channels: width of every conv layer.
      num_blocks: number of residual blocks (conv-norm-relu-conv-norm-skip-relu).
      norm: "batch", "layer" or "none".
      dtype: computation dtype (parameters stay float32).
      head: "dense" (AlphaZero's heads: a dense layer over the flattened board) or "conv"
        (fully convolutional: a 1x1 convolution gives one logit per board point, and the
        value head pools the board globally, mean and max, before its dense layers). With
        "conv" no parameter depends on the board's size, so one network plays any size
        (a board-size curriculum, 20x20 Gomoku); it needs one action per board point,
        action = row * W + col.
      value_head: "tanh" or "wdl" (see the module docstring).
      value_channels: channels of the dense value head's 1x1 convolution (AlphaZero: 1),
        flattened into its dense layer.
      global_pool: KataGo's global pooling bias in every residual block: the mean and max
        over the board of the first convolution's output after its norm and ReLU, through
        a dense layer, are added to every point as a per-channel bias, so each block sees
        the whole board at once.
    """

    num_actions: int
    channels: int = 64
    num_blocks: int = 6
    norm: str = "batch"
    dtype: Any = jnp.float32
    head: str = "dense"
    value_head: str = "tanh"
    value_channels: int = 1
    global_pool: bool = False

    def _norm(self, train: bool):
        if self.norm == "batch":
            return nn.BatchNorm(use_running_average=not train, momentum=0.9, dtype=self.dtype)
        if self.norm == "layer":
            # Over the whole feature map [H, W, C] of each position, a scale and bias per
            # channel (no parameter depends on the board's size). Not over the channels
            # alone: the heads' 1x1 convolutions have 1-2 channels, which that would flatten
            # to a constant or a sign.
            return nn.LayerNorm(reduction_axes=(-3, -2, -1), dtype=self.dtype)
        return lambda x: x

    @nn.compact
    def __call__(self, obs, legal_mask=None, train: bool = False, value_outputs: bool = False):
        """obs: [B, H, W, C], float or bool; legal_mask: bool[B, A] or None.

        Returns:
          logits float32[B, A] (illegal actions masked) and value float32[B] in [-1, 1];
          with `value_outputs`, also the value head's raw outputs float32[B, 1] (tanh: before
          it) or [B, 3] (wdl: logits of win, draw, loss).
        """
        conv = lambda ch, k, **kw: nn.Conv(ch, (k, k), padding="SAME",
                                           use_bias=self.norm == "none", dtype=self.dtype, **kw)
        x = obs.astype(self.dtype)
        stem = conv(self.channels, 3, conv_general_dilated=conv_even_channels)
        x = nn.relu(self._norm(train)(stem(x)))
        for _ in range(self.num_blocks):
            y = nn.relu(self._norm(train)(conv(self.channels, 3)(x)))
            if self.global_pool:  # [B, H, W, C] -> [B, 2C] -> a bias [B, 1, 1, C]
                y = y + nn.Dense(self.channels, dtype=self.dtype)(_pool(y))[:, None, None, :]
            y = self._norm(train)(conv(self.channels, 3)(y))
            x = nn.relu(x + y)

        p = nn.relu(self._norm(train)(conv(2, 1)(x)))
        if self.head == "conv":  # one logit per point: [B, H, W, 1] -> [B, H * W]
            logits = nn.Conv(1, (1, 1), dtype=self.dtype)(p).reshape(p.shape[0], -1)
            v = nn.relu(self._norm(train)(conv(self.channels, 1)(x)))
            v = _pool(v)
        else:
            logits = nn.Dense(self.num_actions, dtype=self.dtype)(p.reshape(p.shape[0], -1))
            v = nn.relu(self._norm(train)(conv(self.value_channels, 1)(x)))
            v = v.reshape(v.shape[0], -1)
        v = nn.relu(nn.Dense(self.channels, dtype=self.dtype)(v))
        raw = nn.Dense(3 if self.value_head == "wdl" else 1, dtype=self.dtype)(v)
        raw = raw.astype(jnp.float32)
        if self.value_head == "wdl":
            wdl = jax.nn.softmax(raw)
            value = wdl[:, 0] - wdl[:, 2]
        else:
            value = jnp.tanh(raw[:, 0])

        logits = mask_logits(logits.astype(jnp.float32), legal_mask)
        if value_outputs:
            return logits, value, raw
        return logits, value


def make_network(config, env) -> ResNet:
    """Builds the ResNet for `env` from `config.network`-style fields.

    Raises:
      ValueError: unknown `norm`, `dtype`, `head` or `value_head`; `channels` or
        `value_channels` below 1 or `num_blocks` below 0; or a conv head on a game whose
        actions are not the board's points.
    """
    if config.norm not in _NORMS:
        raise ValueError(f"network.norm={config.norm!r}; accepted: {', '.join(_NORMS)}")
    if config.dtype not in _DTYPES:
        raise ValueError(f"network.dtype={config.dtype!r}; accepted: {', '.join(_DTYPES)}")
    value_channels = config.get("value_channels", 1)  # configs saved before it: 1
    if config.channels < 1 or config.num_blocks < 0 or value_channels < 1:
        raise ValueError("network.channels and network.value_channels must be >= 1 and "
                         "network.num_blocks >= 0")
    head = config.get("head", "dense")  # configs saved before `head` existed: dense
    if head not in HEADS:
        raise ValueError(f"network.head={head!r}; accepted: {', '.join(HEADS)}")
    value_head = config.get("value_head", "tanh")  # configs saved before it existed: tanh
    if value_head not in VALUE_HEADS:
        raise ValueError(f"network.value_head={value_head!r}; accepted: "
                         f"{', '.join(VALUE_HEADS)}")
    points = env.observation_shape[0] * env.observation_shape[1]
    if head == "conv" and env.num_actions != points:
        raise ValueError(f"network.head='conv' needs one action per board point; {env!r} has "
                         f"{env.num_actions} actions on a {env.observation_shape[0]}x"
                         f"{env.observation_shape[1]} board: use network.head='dense'")
    return ResNet(
        num_actions=env.num_actions,
        channels=config.channels,
        num_blocks=config.num_blocks,
        norm=config.norm,
        dtype=_DTYPES[config.dtype],
        head=head,
        value_head=value_head,
        value_channels=value_channels,
        global_pool=bool(config.get("global_pool", False)),
    )


def init_variables(net: ResNet, env, key: jax.Array) -> dict:
    """Float32 variables ({"params", and "batch_stats" with batch norm}), initialized on a
    dummy batch of one; they apply to any batch size."""
    obs = jnp.zeros((1, *env.observation_shape), env.observation_dtype)
    return dict(net.init(key, obs, None, train=False))
