"""A thin adapter that puts any two-player pgx environment on our protocol.

    env = envs.make("pgx:othello")      # also pgx:go_9x9, pgx:hex, pgx:connect_four, ...

pgx is an optional dependency (`pip install -e ".[pgx]"`). Differences it papers over:
pgx draws which player id moves first at random, while here player 0 always moves first, so
player ids and rewards are mapped through the first mover; pgx's bool observations stay
bool (others become float32). No symmetries are assumed (identity only) and the host-side
notation is the plain action index.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from envs import core


def _pgx():
    try:
        import pgx
    except ImportError as e:
        raise ValueError("pgx environments need the optional dependency pgx: "
                         'pip install -e ".[pgx]"') from e
    return pgx


# pgx games with chance (dice, dealt cards, random tiles): their states depend on the keys.
_CHANCE = frozenset({"2048", "backgammon", "kuhn_poker", "leduc_holdem", "sparrow_mahjong"})
# The longest game of pgx games with a known bound (plies): full boards (hex: plus its swap
# move) and pgx's move limits (MAX_TERMINATION_STEPS). Go reads its own limit.
_MAX_GAME_LENGTH = {"connect_four": 42, "tic_tac_toe": 9, "hex": 11 * 11 + 1, "chess": 512,
                    "shogi": 512, "gardner_chess": 256, "animal_shogi": 256}


class PgxEnv(core.Env):
    """A pgx two-player game. `game` in our State is `(pgx_state, first_mover_pgx_id)`."""

    version = "pgx-v1"

    def __init__(self, pgx_id: str):
        pgx = _pgx()
        if pgx_id not in pgx.available_envs():
            raise ValueError(f"unknown pgx env {pgx_id!r}; available: "
                             f"{', '.join(pgx.available_envs())}")
        self._env = pgx.make(pgx_id)
        if self._env.num_players != 2:
            raise ValueError(f"pgx:{pgx_id} has {self._env.num_players} players; only "
                             "two-player games are supported")
        self.pgx_id = pgx_id
        # pgx's init draws only who moves first, which `_wrap` maps away.
        self.deterministic = pgx_id not in _CHANCE
        self.num_actions = int(self._env.num_actions)
        self.observation_shape = tuple(self._env.observation_shape)
        obs = jax.eval_shape(self._env.init, jax.random.PRNGKey(0)).observation
        self.observation_dtype = jnp.bool_ if obs.dtype == jnp.bool_ else jnp.float32

    @property
    def id(self):  # noqa: D102 - instance id, e.g. "pgx:othello"
        return f"pgx:{self.pgx_id}"

    @property
    def params(self):
        return {}

    @property
    def max_game_length(self) -> int | None:
        """pgx's bound where known (go: its `max_termination_steps`), else None: set
        `selfplay.max_game_length` in the config then."""
        if self.pgx_id in _MAX_GAME_LENGTH:
            return _MAX_GAME_LENGTH[self.pgx_id]
        limit = getattr(getattr(self._env, "_game", None), "max_termination_steps", None)
        return int(limit) if limit else None

    def _wrap(self, s, first, prev=None):
        ours = jnp.where(s.current_player == first, 0, 1).astype(jnp.int32)
        rewards = jnp.where(first == 0, s.rewards, s.rewards[::-1]).astype(jnp.float32)
        base = prev if prev is not None else core.make_state(None, 0, s.legal_action_mask)
        return base.replace(
            game=(s, first),
            current_player=ours,
            legal_action_mask=s.legal_action_mask,
            rewards=rewards,
            terminated=s.terminated,
            truncated=s.truncated,
        )

    def _init(self, key):
        s = self._env.init(key)
        return self._wrap(s, s.current_player.astype(jnp.int32))

    def _step(self, state, action, key):
        s, first = state.game
        return self._wrap(self._env.step(s, action, key), first, state)

    def _observe(self, state):
        s, first = state.game
        ours = jnp.where(state.current_player == 0, first, 1 - first)
        with warnings.catch_warnings():  # pgx deprecates player_id; we need other views
            warnings.simplefilter("ignore", DeprecationWarning)
            return self._env.observe(s, ours).astype(self.observation_dtype)

    def render(self, state) -> str:
        legal = np.flatnonzero(np.asarray(state.legal_action_mask))
        obs = np.asarray(state.observation)
        player = int(state.current_player)
        return (f"pgx:{self.pgx_id} ply {int(state.step_count)}, player {player} to move; "
                f"observation planes {obs.shape}; legal actions: "
                f"{' '.join(map(str, legal[:40]))}{' ...' if len(legal) > 40 else ''}")

    @property
    def move_help(self) -> str:
        return f"an action index 0..{self.num_actions - 1} (pgx's numbering)"

    def action_to_str(self, action: int) -> str:
        return str(int(action))

    def _parse(self, text: str) -> int:
        if (not (text.isascii() and text.isdigit()) or len(text) > 9
                or not 0 <= int(text) < self.num_actions):
            raise ValueError(f"cannot read {text!r}: expected an action index "
                             f"0..{self.num_actions - 1}")
        return int(text)

