"""The Env protocol: a pgx-shaped template every game fills in.

One call handles one game; callers `jax.vmap`. A game implements three hooks:

  `_init(key) -> State`                 the initial position,
  `_step(state, action, key) -> State`  a *legal* move by `state.current_player`,
  `_observe(state) -> Array`            planes from the mover's point of view,

and `Env.step` wraps `_step` once for all games:

* stepping a finished game is a no-op with zero rewards;
* an illegal (or out-of-range) action ends the game and the mover loses (-1 / +1);
* `max_steps` (optional) ends a still-running game as a draw with `truncated=True`;
* at a finished state the legal mask is all True, so nothing downstream divides by zero;
* the next state, observation included, comes from the game's fields alone: `_step` and
  `_observe` never read `state.observation` (a search tree then stores none;
  `envs.testing.api_test` checks it).

Rewards are per player and for this step only: `rewards[p]` is what player `p` gets.
Player 0 always moves first (black, X, goats); `current_player` is a colour.
"""

from __future__ import annotations

import abc
import functools
import operator
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array


@struct.dataclass
class State:
    """One game. Every field has a fixed shape, so states stack and vmap.

    `game` holds the game-specific pytree (a NamedTuple defined in the game's file).
    """

    current_player: Array  # int32[]       0 or 1: who moves now
    observation: Array  # [H, W, C] of env.observation_dtype, `current_player`'s view
    legal_action_mask: Array  # bool[A]
    rewards: Array  # float32[2]            this step only, per player
    terminated: Array  # bool[]
    truncated: Array  # bool[]
    step_count: Array  # int32[]         plies played so far
    game: Any  # game-specific pytree

    @property
    def done(self) -> Array:
        return self.terminated | self.truncated


def make_state(game: Any, current_player, legal_action_mask) -> State:
    """A fresh, unfinished state with an empty observation (the template fills it)."""
    return State(
        current_player=jnp.asarray(current_player, jnp.int32),
        observation=jnp.zeros((), jnp.float32),
        legal_action_mask=jnp.asarray(legal_action_mask, jnp.bool_),
        rewards=jnp.zeros(2, jnp.float32),
        terminated=jnp.asarray(False),
        truncated=jnp.asarray(False),
        step_count=jnp.asarray(0, jnp.int32),
        game=game,
    )


def win_rewards(winner: Array) -> Array:
    """float32[2] rewards for `winner` in {0, 1}; -1 (no winner) gives zeros."""
    sign = jnp.where(winner == 0, 1.0, jnp.where(winner == 1, -1.0, 0.0))
    return jnp.stack([sign, -sign]).astype(jnp.float32)


def _where(cond: Array, a, b):
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


class Env(abc.ABC):
    """Static description of a game plus pure `init`/`step` (see module docstring).

    Subclasses set `id`, `version`, `num_actions`, `observation_shape` and the hooks.
    An Env holds only static configuration (no counters, no keys).
    """

    id: ClassVar[str]
    version: ClassVar[str] = "v1"
    num_players: ClassVar[int] = 2

    num_actions: int
    observation_shape: tuple[int, ...]
    # bool where every plane is 0/1 (the network casts; the replay buffer and the search
    # tree then hold 1 byte per value instead of 4), else float32.
    observation_dtype: Any = jnp.float32
    max_steps: int | None = None
    # True when `init` and `step` ignore their keys (no chance): every game starts from the
    # same position and the search's child of the played move is the next state, so
    # self-play reuses the child's network evaluation as the next root. Games with chance
    # leave it False. `envs.testing.api_test` checks it.
    deterministic: bool = False

    # True when the game implements `winning_moves` (a cheap, exact "where would this
    # player win at once" for either player); the search's "threats" tactics need it.
    has_winning_moves: bool = False

    # True when a stone never hurts its owner and every empty point stays playable (no
    # gravity, no zugzwang: Gomoku, tic-tac-toe), so that a move can be judged against
    # passing. The "threats" tactics then take a four that only delays for no defence
    # (az_jax/search.py, `_wins_despite`: the position after his block and a null
    # move). Elsewhere (Connect4, where dropping a stone opens the cell above it to both
    # sides) they prune only moves proven lost.
    zugzwang_free: bool = False

    # Parameters that change only what the network sees, not the rules (Connect4's
    # `threats` planes): two envs that differ only in these play the same games, so a
    # network of either plays the other's states after `observe` (checkpoint.play_env_for).
    observation_params: ClassVar[tuple[str, ...]] = ()

    @property
    def max_game_length(self) -> int | None:
        """The most plies one game can last, or None if the game does not bound it.

        Self-play keeps up to this many plies of a running game waiting for its outcome.
        By default `max_steps`; a game with a natural bound (a full board) says so.
        """
        return self.max_steps

    # ------------------------------------------------------------------ pure API
    def init(self, key: Array) -> State:
        """Initial state of one game. The key is consumed (games may ignore it)."""
        return self.observe(self._init(key))

    def observe(self, state: State) -> State:
        """`state` with this env's observation: a state of the same game from an env that
        differs only in `observation_params`, as this env would show it. Pure; one game."""
        return state.replace(observation=self._observe(state))

    def step(self, state: State, action: Array, key: Array | None = None) -> State:
        """Plays `action` for `state.current_player`. Pure; jittable; one game.

        Args:
          state: the current state (unbatched).
          action: int32[] in [0, num_actions); anything illegal loses the game.
          key: consumed by games with chance or random tie-breaks; may be None otherwise.
        """
        if key is None:
            key = jax.random.PRNGKey(0)  # deterministic games ignore it
        action = jnp.asarray(action, jnp.int32)
        in_range = (action >= 0) & (action < self.num_actions)
        safe_action = jnp.clip(action, 0, self.num_actions - 1)
        is_legal = in_range & state.legal_action_mask[safe_action]
        was_done = state.done

        moved = self._step(state, safe_action, key)
        moved = moved.replace(step_count=state.step_count + 1)
        if self.max_steps is not None:
            hit_limit = (moved.step_count >= self.max_steps) & ~moved.terminated
            moved = moved.replace(
                truncated=moved.truncated | hit_limit,
                rewards=jnp.where(hit_limit, 0.0, moved.rewards),
            )
        mover = state.current_player
        lost = state.replace(
            rewards=-win_rewards(mover),  # the mover gets -1
            terminated=jnp.asarray(True),
            step_count=state.step_count + 1,
        )
        nxt = _where(is_legal, moved, lost)
        nxt = nxt.replace(legal_action_mask=nxt.legal_action_mask | nxt.done)
        frozen = state.replace(rewards=jnp.zeros_like(state.rewards))
        nxt = _where(was_done, frozen, nxt)
        # Built from the game alone, never from the observation passed in: so a search
        # tree need keep no node's observation (XLA drops them; README, Benchmarks).
        return nxt.replace(observation=self._observe(nxt))

    def winning_moves(self, state: State, player: Array) -> Array:
        """bool[A]: the moves with which `player` would win at once, were it `player`'s turn.

        One game, pure, jittable. Whoever is to move in `state`: the search asks it for
        the side that just moved too (its threats). A finished state has none. For the
        mover it must equal the legal moves that `step` ends with the mover winning, and a
        winning move must stay winning after any other move of the other side (only
        playing on it stops it: the search's threat proofs step no other reply).
        `envs.testing.api_test` checks both against `step`, making either player the
        mover by replacing `current_player`: the rules must read the mover from it (the
        threat search makes null moves the same way). Optional: games that implement it
        set `has_winning_moves`.
        """
        del state, player
        raise NotImplementedError(f"{type(self).__name__} has no winning_moves "
                                  "(has_winning_moves is False)")

    def threat_counts(self, state: State) -> Array:
        """int32[A]: per move of the mover, how many winning moves (`winning_moves`) he
        holds right after it; 0 where the move is no threat: illegal, ending the game, or
        leaving the other side a win at once. One game, pure, jittable; needs
        `winning_moves`.

        The search's threat proofs ask it at every node they expand (az_jax/search.py).
        This default steps every move (A steps, A `winning_moves` scans); a game may read
        the same from its board (Gomoku does: alone 1.6x faster a call on 15x15, the
        threat search over it ~9x), and
        `envs.testing.api_test` checks that it equals this default.
        """
        actions = jnp.arange(self.num_actions, dtype=jnp.int32)
        children = jax.vmap(self.step, in_axes=(None, 0))(state, actions)
        player, other = state.current_player, 1 - state.current_player
        count = jax.vmap(self.winning_moves, in_axes=(0, None))(children, player).sum(
            -1, dtype=jnp.int32)
        his = jax.vmap(self.winning_moves, in_axes=(0, None))(children, other).any(-1)
        threat = (state.legal_action_mask & ~state.done & ~children.done
                  & (children.current_player == other) & ~his)
        return jnp.where(threat, count, 0)

    def symmetries(self, obs: Array, policy: Array) -> tuple[Array, Array]:
        """All symmetric variants of one (observation, policy) pair.

        Returns:
          obs [S, H, W, C] (the observation's dtype) and policy [S, A] (the policy's);
          index 0 is the identity.
        """
        return obs[None], policy[None]

    @property
    def num_symmetries(self) -> int:
        obs = jnp.zeros(self.observation_shape, self.observation_dtype)
        pol = jnp.zeros(self.num_actions, jnp.float32)
        return jax.eval_shape(self.symmetries, obs, pol)[1].shape[0]

    # ------------------------------------------------------------ game hooks
    @abc.abstractmethod
    def _init(self, key: Array) -> State: ...

    @abc.abstractmethod
    def _step(self, state: State, action: Array, key: Array) -> State: ...

    @abc.abstractmethod
    def _observe(self, state: State) -> Array: ...

    # ------------------------------------------------------------ host side
    # The two sides as `render` names them (player 0 moves first), and other words a person
    # may type for one (lower case -> player); the front ends use them.
    side_names: tuple[str, str] = ("first player", "second player")
    side_aliases: dict[str, int] = {}  # noqa: RUF012 - read only

    # What the marks of `render` mean, in one line ("" when the side names say it).
    legend: str = ""

    @property
    def move_help(self) -> str:
        """How a person types a move of this game, in one line."""
        return "a move in the game's notation"

    def side_move_help(self, player: int) -> str:
        """How `player` types a move, in one line (games whose sides move differently
        override it; by default `move_help`)."""
        del player
        return self.move_help

    @abc.abstractmethod
    def render(self, state: State) -> str:
        """A text board a person can read, with coordinates (one game, host side)."""

    @abc.abstractmethod
    def action_to_str(self, action: int) -> str:
        """The action in this game's notation."""

    @abc.abstractmethod
    def _parse(self, text: str) -> int:
        """Text -> action index; raises ValueError saying what is accepted."""

    def parse_action(self, text: str, state: State | None = None) -> int:
        """Parses a move typed by a person; with `state`, also checks it is legal now.

        Raises:
          ValueError: with a message that says what was wrong and what is accepted.
        """
        if not isinstance(text, str):
            raise ValueError(f"expected move text, got {type(text).__name__}")
        action = self._parse(text.strip())
        if state is not None:
            if bool(np.asarray(state.done)):
                raise ValueError("the game is over; no move is accepted")
            if not bool(np.asarray(state.legal_action_mask)[action]):
                raise ValueError(self._illegal_reason(state, action))
        return action

    def _illegal_reason(self, state: State, action: int) -> str:
        legal = np.flatnonzero(np.asarray(state.legal_action_mask))
        shown = ", ".join(self.action_to_str(int(a)) for a in legal[:12])
        more = " ..." if len(legal) > 12 else ""
        return f"{self.action_to_str(action)} is not legal here; legal moves: {shown}{more}"

    @property
    def params(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this env with `envs.make(id, **params)`."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


# ---------------------------------------------------------------- shared helpers
# Lines through one stone (Gomoku, Connect4): tables built on the host, a gather under jit.
# (row step, col step) of the four line directions: horizontal, vertical, both diagonals.
_LINE_DIRS = np.array([[0, 1], [1, 0], [1, 1], [1, -1]], np.int32)


def line_cells(height: int, width: int, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells on the 4 lines through every cell, up to `reach` away on each side (host side).

    Returns:
      cells int32[H * W, 4, 2, reach]: flat index (row * W + col) of the cell k + 1 steps away
        from cell `a` along direction d (horizontal, vertical, diagonal, anti-diagonal) on
        side s (+, -); 0 where that is off the board.
      on_board bool[H * W, 4, 2, reach]: False where the cell is off the board.
    """
    side = np.array([1, -1])[:, None] * np.arange(1, reach + 1)  # [2, reach]
    cell = np.arange(height * width)
    rows = (cell // width)[:, None, None, None] + _LINE_DIRS[:, 0, None, None] * side
    cols = (cell % width)[:, None, None, None] + _LINE_DIRS[:, 1, None, None] * side
    on_board = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    return np.where(on_board, rows * width + cols, 0).astype(np.int32), on_board


def run_lengths(same: jax.Array) -> list[jax.Array]:
    """Lengths of the 4 runs through a stone, from which neighbours hold the same colour.

    Unrolled on purpose: under `vmap` these are a few elementwise ops across the batch,
    where `cumprod`/`sum` over such tiny axes cost more than the gather itself on CPU.

    Args:
      same: bool[4, 2, reach], as `line_cells`, True where the cell holds the mover's stone.
    Returns:
      4 int32[] run lengths (>= 1; `2 * reach + 1` means "at least that long").
    """
    runs = []
    for d in range(same.shape[0]):
        run = jnp.int32(1)
        for s in range(2):
            unbroken = jnp.bool_(True)
            for k in range(same.shape[2]):
                unbroken = unbroken & same[d, s, k]
                run = run + unbroken
        runs.append(run)
    return runs


def any_of(flags: list[jax.Array]) -> jax.Array:
    """Logical or of a short list of bool[] (an unrolled `jnp.any`)."""
    return functools.reduce(operator.or_, flags)


def dihedral_symmetries(obs: Array, policy: Array, height: int, width: int):
    """The 8 transforms of the dihedral group D4 for a square board.

    Args:
      obs: [N, N, C] (any dtype).
      policy: float32[N*N] with action = row * N + col.
    Returns:
      obs [8, N, N, C], policy float32[8, N*N]; index 0 is the identity.
    """
    assert height == width, "D4 symmetries need a square board"
    grid = policy.reshape(height, width)
    obs_out, pol_out = [], []
    for flip in (False, True):
        o, p = (obs[:, ::-1], grid[:, ::-1]) if flip else (obs, grid)
        for k in range(4):
            obs_out.append(jnp.rot90(o, k, axes=(0, 1)))
            pol_out.append(jnp.rot90(p, k, axes=(0, 1)).reshape(-1))
    return jnp.stack(obs_out), jnp.stack(pol_out)


def point_name(row: int, col: int, height: int) -> str:
    """Human coordinates: column letter (A.., skipping nothing), row number from the bottom."""
    return f"{chr(ord('A') + col)}{height - row}"


def parse_point(text: str, height: int, width: int) -> tuple[int, int]:
    """'E5' -> (row, col) with row 0 at the top; raises ValueError with what is accepted."""
    t = text.strip()
    t = t.upper() if t.isascii() else t  # (not before: "ı5".upper() is "I5")
    shown = repr(text) if len(text) <= 24 else repr(text[:24]) + "..."
    last_col = chr(ord("A") + width - 1)
    accepted = (f"a column letter A-{last_col} then a row number 1-{height}, "
                f"like A1 or {last_col}{height}")
    # (at most 9 digits: int() refuses over 4300, and no board is that tall)
    if not 2 <= len(t) <= 10 or not t.isascii() or not t[0].isalpha() or not t[1:].isdigit():
        raise ValueError(f"cannot read {shown} as a point: expected {accepted}")
    col = ord(t[0]) - ord("A")
    num = int(t[1:])
    if not (0 <= col < width and 1 <= num <= height):
        raise ValueError(f"{shown} is off the board: expected {accepted}")
    return height - num, col
