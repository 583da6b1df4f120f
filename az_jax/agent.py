"""A trained network as a player, for the front ends (terminal, browser, Gomocup).

    agent = Agent.load(workdir="runs/c4")               # or checkpoint=..., model=...
    state = agent.new_game()
    thought = agent.think(state, num_simulations=128)
    thought.action, thought.win_rate, thought.top(3)     # move, its expected score, candidates
    state = agent.play(state, thought.action)

Host side only: states are single (unbatched) games; each search runs as a batch of one
through `search.make_search` inside one jitted function per simulation count (the first call
with a new count compiles). `think` holds a lock, so one Agent can serve many threads.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import jax
import numpy as np

from az_jax import checkpoint as ckpt
from az_jax import search as search_lib


def parse_side(env, text: str) -> int:
    """'first'/'second', '1'/'2' or a side name of this game (`env.side_names`,
    `env.side_aliases`) -> player 0 or 1.

    Raises:
      ValueError: listing the accepted values.
    """
    t = str(text).strip().lower()
    names = [n.lower() for n in env.side_names]
    table = {"first": 0, "second": 1, "1": 0, "2": 1, names[0]: 0, names[1]: 1,
             **env.side_aliases}
    if t in table:
        return table[t]
    accepted = ", ".join(["first", "second", "1", "2", *names])
    raise ValueError(f"unknown side {text!r} for {env.id}; accepted: {accepted}")


def _positive(sims) -> int:
    """A simulation count as an int; ValueError when it is below 1."""
    if int(sims) < 1:
        raise ValueError(f"the number of simulations must be >= 1, got {sims}")
    return int(sims)


def wins(side: str) -> str:
    """'black wins', 'tigers win'."""
    return f"{side} {'win' if side.endswith('s') else 'wins'}"


# What stands beside each candidate move, by search policy (`config.search.policy`).
WEIGHT_LABELS = {"gumbel": "improved policy", "muzero": "visit share"}


@dataclasses.dataclass(frozen=True)
class Candidate:
    action: int
    move: str  # in the env's notation
    visits: int
    weight: float  # the search's policy for this move (see `Thought.weight_label`)
    value: float | None  # Q for the mover in [-1, 1]; None if never visited

    @property
    def share(self) -> float:
        """Alias of `weight` (the visit share under PUCT)."""
        return self.weight


@dataclasses.dataclass(frozen=True)
class Thought:
    """The result of a search from one position, from the point of view of the mover.

    `visits` int64[A] are the root visit counts (summed over chunks for `think_for`);
    `q` float32[A] the root Q values (mover's view, NaN where unvisited); `weights`
    float32[A] the search's policy at the root (`mctx.PolicyOutput.action_weights`): the
    improved policy softmax(logits + sigma(completed Q)) under Gumbel search, whose visit
    counts follow a fixed schedule and say little, or the visit share under PUCT.
    `value` is the Q of the chosen move (the value of the position after it, for the
    mover), and `root_value` the search's average over everything it visited.
    """

    action: int
    move: str
    value: float
    visits: np.ndarray
    q: np.ndarray
    simulations: int
    seconds: float
    env: Any = dataclasses.field(repr=False, compare=False)
    weights: np.ndarray | None = None
    root_value: float = float("nan")
    weight_label: str = "visit share"

    @property
    def win_rate(self) -> float:
        """The value (Q of the chosen move) as an expected score in [0, 1] (a draw counts
        half)."""
        return float(np.clip((self.value + 1.0) / 2.0, 0.0, 1.0))

    def top(self, k: int = 5) -> list[Candidate]:
        """The k visited moves with the highest search policy (`weights`), best first (ties:
        the chosen move, then the more visited, then the lower action). The chosen move is
        always among them: Gumbel search picks it by sequential halving, so it need not be
        the top of the improved policy."""
        weights = self.policy()
        actions = np.arange(len(self.visits))
        order = np.lexsort((actions, actions != self.action, -self.visits, -weights))
        order = [a for a in order if self.visits[a] > 0][:k]
        if k > 0 and self.action not in order:
            order[-1:] = [self.action]
        out = []
        for a in order:
            n = int(self.visits[a])
            q = float(self.q[a])
            out.append(Candidate(int(a), self.env.action_to_str(int(a)), n,
                                 float(weights[a]), None if np.isnan(q) else q))
        return out

    def policy(self) -> np.ndarray:
        """float64[A]: `weights`, or the visit share when the search gave none."""
        if self.weights is not None:
            return np.asarray(self.weights, np.float64)
        return self.visits / max(int(self.visits.sum()), 1)


class Agent:
    """A restored network plus a jitted batched search; see the module docstring.

    Args:
      restored: what `checkpoint.load` returns.
      num_simulations: the default search size (None: max(config sims, 64); below 1 raises
        ValueError).
      seed: seeds the search keys (only noisy searches use them).
    """

    def __init__(self, restored: ckpt.Restored, num_simulations: int | None = None,
                 seed: int = 0):
        self.restored = restored
        self.env = restored.env
        self.config = restored.config
        self.variables = restored.variables
        self.num_simulations = _positive(max(int(self.config.search.num_simulations), 64)
                                         if num_simulations is None else num_simulations)
        self._search = search_lib.make_search(self.env, restored.net, self.config.search)
        self._init = jax.jit(self.env.init)
        self._step = jax.jit(self.env.step)
        self._think_jit = jax.jit(self._think_batch,
                                  static_argnames=("num_simulations", "evaluation"))
        self._mask_jit = jax.jit(self._mask_batch, static_argnames=("tactics",))
        self._plain_jit = jax.jit(lambda state: ~state.legal_action_mask[None])
        # Masks are committed to the variables' device: the compiled search then takes
        # either kind (`root_mask`, `plain_mask`) without compiling again.
        self._device = next(iter(jax.tree.leaves(self.variables)[0].devices()))
        self.mask_seconds: float | None = None  # the last `root_mask`, once compiled
        # The root tactics of every search (one of search.TACTICS); None: the config's
        # search.eval_tactics. The Gomocup brain lowers it to fit INFO max_memory.
        self.tactics: str | None = None
        self._key = jax.random.PRNGKey(seed)
        self._lock = threading.Lock()
        self._compiled: dict[tuple[int, bool], object] = {}  # (sims, evaluation) -> program

    @classmethod
    def load(cls, workdir=None, checkpoint=None, model=None, num_simulations=None,
             seed: int = 0) -> Agent:
        """Restores from exactly one source (see `checkpoint.load`).

        Raises:
          ValueError, FileNotFoundError: with a message for the user.
        """
        if workdir is not None and not str(workdir).strip():
            raise ValueError("--workdir is empty")
        return cls(ckpt.load(workdir=workdir, checkpoint=checkpoint, model=model),
                   num_simulations=num_simulations, seed=seed)

    @property
    def description(self) -> str:
        """One line: the game and where the network comes from."""
        return f"{self.env!r}, iteration {self.restored.iteration} ({self.restored.path})"

    # ------------------------------------------------------------------ game helpers
    def new_game(self):
        """The initial state (one game)."""
        return self._init(jax.random.PRNGKey(0))

    def play(self, state, action: int):
        """The state after `action` (which the caller checked is legal)."""
        return self._step(state, np.int32(action))

    def legal_actions(self, state) -> np.ndarray:
        return np.flatnonzero(np.asarray(state.legal_action_mask))

    @staticmethod
    def is_over(state) -> bool:
        return bool(np.asarray(state.terminated)) or bool(np.asarray(state.truncated))

    @staticmethod
    def winner(state) -> int | None:
        """At a finished state (the one the last move returned): 0, 1 or None (a draw)."""
        rewards = np.asarray(state.rewards)
        if rewards[0] > 0:
            return 0
        if rewards[1] > 0:
            return 1
        return None

    # ------------------------------------------------------------------ search
    def _mask_batch(self, variables, state, tactics=None):
        batch = jax.tree.map(lambda x: x[None], state)
        root = self._search.root(variables, batch)
        return self._search.invalid_actions(batch, evaluation=True, prior=root.prior_logits,
                                            tactics=tactics)

    def root_mask(self, state, tactics: str | None = None) -> jax.Array:
        """bool[1, A]: the moves the search may not play from `state` under the evaluation
        tactics (`tactics`, else `self.tactics`, else `search.eval_tactics`), for the
        searches of one position (`think_for`'s chunks use one mask); `mask_seconds` is how
        long it took."""
        with self._lock:
            t0 = time.perf_counter()
            invalid = jax.block_until_ready(jax.device_put(
                self._mask_jit(self.variables, state, tactics=tactics or self.tactics),
                self._device))
            self.mask_seconds = time.perf_counter() - t0
        return invalid

    def plain_mask(self, state) -> jax.Array:
        """bool[1, A]: the illegal moves only (a search without tactics, when there is no
        time for them)."""
        return jax.device_put(self._plain_jit(state), self._device)

    def _think_batch(self, variables, state, key, invalid, num_simulations, evaluation):
        batch = jax.tree.map(lambda x: x[None], state)
        out = self._search(variables, batch, key, evaluation=evaluation,
                           num_simulations=num_simulations, invalid=invalid)
        summary = out.search_tree.summary()
        visits = summary.visit_counts[0]
        q = jax.numpy.where(visits > 0, summary.qvalues[0], jax.numpy.nan)
        return out.action[0], summary.value[0], visits, q, out.action_weights[0]

    def _next_key(self):
        self._key, key = jax.random.split(self._key)
        return key

    def _run(self, state, sims: int, evaluation: bool, invalid=None):
        """One search (under the lock), with root noise unless `evaluation`; `invalid` from
        `root_mask` (None: computed now). Returns (action, root value, visits, q, weights)
        on the host."""
        if invalid is None:
            invalid = self.root_mask(state)
        compiled = self._compiled.get((int(sims), bool(evaluation)))
        with self._lock:
            if compiled is not None:
                out = compiled(self.variables, state, self._next_key(), invalid)
            else:
                out = self._think_jit(self.variables, state, self._next_key(), invalid,
                                      num_simulations=int(sims), evaluation=evaluation)
            action, value, visits, q, weights = jax.device_get(out)
        return (int(action), float(value), np.asarray(visits).astype(np.int64), np.asarray(q),
                np.asarray(weights, np.float32))

    def compile_search(self, state, sims: int, evaluation: bool) -> None:
        """Compiles the search of `sims` simulations (or reads it from the persistent
        cache) without taking the agent's lock, so that another thread keeps searching
        meanwhile; `_run` uses it from then on. `state`: any position of the game."""
        compiled = self._think_jit.lower(
            self.variables, state, jax.random.PRNGKey(0), self.plain_mask(state),
            num_simulations=int(sims), evaluation=bool(evaluation)).compile()
        self._compiled[(int(sims), bool(evaluation))] = compiled

    def time_search(self, state, sims: int, evaluation: bool) -> None:
        """Runs the search `compile_search` compiled once, without the lock (a thread
        that times it leaves the agent's searches to another thread)."""
        compiled = self._compiled[(int(sims), bool(evaluation))]
        jax.block_until_ready(compiled(self.variables, state, jax.random.PRNGKey(0),
                                       self.plain_mask(state)))

    @property
    def weight_label(self) -> str:
        """What `Thought.weights` are under this agent's search policy."""
        return WEIGHT_LABELS.get(str(self.config.search.policy), "search policy")

    def _thought(self, action, root_value, visits, q, weights, sims, t0) -> Thought:
        # (arrays, or lists from the Gomocup brain, which adds up searches without numpy)
        visits, q = np.asarray(visits).astype(np.int64), np.asarray(q, np.float32)
        weights = np.asarray(weights, np.float32)
        chosen = float(q[action])
        value = root_value if np.isnan(chosen) else chosen  # the chosen move is always visited
        return Thought(action, self.env.action_to_str(action), value, visits, q, sims,
                       time.perf_counter() - t0, self.env, weights=weights,
                       root_value=float(root_value), weight_label=self.weight_label)

    def think(self, state, num_simulations: int | None = None) -> Thought:
        """Searches from `state` (not finished) without root noise; the best move and stats.

        Raises:
          ValueError: the game is over, or a non-positive simulation count.
        """
        sims = self._sims(num_simulations)
        self._check(state)
        t0 = time.perf_counter()
        action, value, visits, q, weights = self._run(state, sims, evaluation=True)
        return self._thought(action, value, visits, q, weights, sims, t0)

    def think_for(self, state, seconds: float, chunk: int | None = None,
                  max_simulations: int | None = None) -> Thought:
        """Searches in chunks of `chunk` simulations until the next chunk would pass `seconds`.

        The first chunk is the plain evaluation search; later chunks search again with root
        noise (fresh keys), all under the evaluation tactics (`root_mask`, computed once),
        and their root visit counts are added up, so the result widens
        with the time given. The move is the most visited one over all chunks (the first
        chunk's choice on a tie). Q values are visit-weighted means over the chunks, the
        search policy (`weights`) the mean over chunks, the root value the mean. At least
        one chunk always runs.

        Raises:
          ValueError: the game is over, or a non-positive `chunk`.
        """
        chunk = self._sims(chunk)
        self._check(state)
        t0 = time.perf_counter()
        invalid = self.root_mask(state)  # the tactics, once for every chunk
        action, value, visits, q, weights = self._run(state, chunk, True, invalid)
        longest = time.perf_counter() - t0
        values, weight_sum, sims = [value], weights.astype(np.float64), chunk
        q_sum = np.where(np.isnan(q), 0.0, q * visits)
        while True:
            now = time.perf_counter() - t0
            if now + longest > seconds or (max_simulations and sims + chunk > max_simulations):
                break
            t1 = time.perf_counter()
            _, v, n, qq, w = self._run(state, chunk, False, invalid)
            longest = max(longest, time.perf_counter() - t1)
            values.append(v)
            visits = visits + n
            q_sum = q_sum + np.where(np.isnan(qq), 0.0, qq * n)
            weight_sum = weight_sum + w
            sims += chunk
        best = int(np.max(visits))
        if visits[action] < best:
            action = int(np.flatnonzero(visits == best)[0])
        q_mean = np.where(visits > 0, q_sum / np.maximum(visits, 1), np.nan).astype(np.float32)
        weights = (weight_sum / len(values)).astype(np.float32)
        return self._thought(action, float(np.mean(values)), visits, q_mean, weights, sims, t0)

    def warmup(self, num_simulations: int | None = None, noisy: bool = False) -> float:
        """Compiles step and search (and the noisy search of `think_for` chunks when `noisy`)
        on the initial position, so that the first real move is fast. Returns seconds."""
        t0 = time.perf_counter()
        state = self.new_game()
        self.play(state, int(self.legal_actions(state)[0]))
        sims = self._sims(num_simulations)
        self._run(state, sims, evaluation=True)
        if noisy:
            self._run(state, sims, evaluation=False)
        return time.perf_counter() - t0

    def _sims(self, num_simulations: int | None) -> int:
        """`num_simulations`, or the agent's default for None (0 is an error, not None)."""
        return self.num_simulations if num_simulations is None else _positive(num_simulations)

    def _check(self, state) -> None:
        if self.is_over(state):
            raise ValueError("the game is over; there is nothing to search")

