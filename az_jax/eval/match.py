"""Matches between two players, vmapped and jitted, with colours alternated.

    me = factory.network(variables, "iter-20", 32)               # players.PlayerFactory
    other = factory.build(players.parse_opponent("random"))
    result = MatchRunner(env, num_games=64).play(me, other, key)
    result.total.score, result.interval()      # 0.93, (0.85, 0.97)

A match of N games (N even) plays N/2 games with player A as the first player and N/2
with A second. Games i and i + N/2 start from the same position: the optional random
opening (`opening_plies` uniformly random plies, the same in both games of a pair) makes
deterministic players play different games. All games advance together in a
`lax.while_loop` over plies (capped at `max_plies`; it exits as soon as every game is
over); env.step is a no-op on finished games. Each ply, each player is evaluated only on
the N/2 games where it is most likely to move (gathered), not on all N.

Results are wins/draws/losses from A's point of view, as first player, as second player
and in total. The score is (W + D/2) / N; its 95% confidence interval is the Wilson score
interval for a binomial proportion with W + D/2 successes in N trials. Draws make the
true variance smaller than the binomial one, so the interval is slightly conservative.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from az_jax import parallel
from az_jax.eval.players import Act, Player, default_max_plies, random_legal

DEFAULT_OPENING_PLIES = 2  # random plies at the start of evaluation games (paired)
Z95 = 1.959963984540054


# =========================================================================== results
class WDL(NamedTuple):
    """Wins, draws and losses from one player's point of view."""

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """(W + D/2) / N; NaN for no games."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else math.nan

    def __add__(self, other):  # type: ignore[override]
        return WDL(self.wins + other.wins, self.draws + other.draws,
                   self.losses + other.losses)

    def __str__(self) -> str:
        return f"{self.wins}-{self.draws}-{self.losses}"


def wilson_interval(score: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion `score` observed over `n` trials."""
    if n <= 0:
        return (0.0, 1.0)
    denom = 1 + z * z / n
    center = (score + z * z / (2 * n)) / denom
    half = z * math.sqrt(score * (1 - score) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


@dataclasses.dataclass(frozen=True)
class MatchResult:
    """A match from player A's point of view (`player` = A, `opponent` = B)."""

    player: str
    opponent: str
    first: WDL  # A moved first
    second: WDL  # A moved second
    unfinished: int = 0  # games still running at max_plies (counted as draws)
    mean_plies: float = math.nan
    seconds: float = math.nan
    notes: str = ""  # e.g. an external engine's forfeits ("forfeits: 2 timeout")

    @property
    def total(self) -> WDL:
        return self.first + self.second

    @property
    def score(self) -> float:
        return self.total.score

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """Wilson confidence interval of the score (95% by default)."""
        return wilson_interval(self.score, self.total.games, z)

    def __add__(self, other: MatchResult) -> MatchResult:
        n1, n2 = self.total.games, other.total.games
        plies = (self.mean_plies * n1 + other.mean_plies * n2) / max(n1 + n2, 1)
        return MatchResult(self.player, self.opponent, self.first + other.first,
                           self.second + other.second, self.unfinished + other.unfinished,
                           plies, self.seconds + other.seconds,
                           "; ".join(x for x in (self.notes, other.notes) if x))

    def as_record(self) -> tuple[str, str, int, int, int]:
        """(a, b, W, D, L) for `elo.record`."""
        t = self.total
        return (self.player, self.opponent, t.wins, t.draws, t.losses)


def passes_gate(result: MatchResult, threshold: float) -> bool:
    """AlphaGo Zero gating: the challenger (A) replaces the best when its score, with draws
    as half, is strictly above `threshold` *and* it won more games than it lost. The second
    condition means that an all-draw match never passes, whatever the threshold."""
    t = result.total
    return t.games > 0 and t.score > threshold and t.wins > t.losses


# =========================================================================== matches
def take(tree, idx):
    """Rows `idx` of every leaf of a batched pytree."""
    return jax.tree.map(lambda x: x[idx], tree)


class _Pieces(NamedTuple):
    """One match's steps, shared by the two drivers (`make_match`: one program;
    `make_host_match`: plies looped from Python); see `make_match` for the semantics."""

    start: Callable  # key -> (states, keys)
    opening: Callable  # (states, keys, t) -> (actions, moved)
    select: Callable  # (states, keys, t) -> (A's states, B's states, A's key, B's key, sel)
    merge: Callable  # (A's actions, B's actions, sel) -> (actions, moved)
    advance: Callable  # (states, total, actions, moved, keys, t) -> (states, total)
    finish: Callable  # (states, total) -> per-game arrays
    cap: int
    opening_plies: int


def _pieces(env, num_games: int, max_plies: int | None, opening_plies: int) -> _Pieces:
    if num_games < 2 or num_games % 2:
        raise ValueError(f"num_games={num_games}: use an even number >= 2 (half the games "
                         "with each colour)")
    half = num_games // 2
    cap = int(max_plies or default_max_plies(env))
    a_color = jnp.repeat(jnp.array([0, 1], jnp.int32), half)  # A's player id per game
    pair = jnp.arange(num_games, dtype=jnp.int32) % half
    per_game = jax.vmap(jax.random.fold_in, in_axes=(None, 0))

    def start(key):
        k_init, k_open, k_act, k_step = jax.random.split(key, 4)
        return jax.vmap(env.init)(per_game(k_init, pair)), (k_open, k_act, k_step)

    def opening(states, keys, t):
        per = per_game(jax.random.fold_in(keys[0], t), pair)
        actions = jax.vmap(lambda k, m: random_legal(k, m[None])[0])(
            per, states.legal_action_mask)
        return actions, ~states.done

    def select(states, keys, t):
        k_a, k_b = jax.random.split(jax.random.fold_in(keys[1], t))
        a_moves = ~states.done & (states.current_player == a_color)
        b_moves = ~states.done & (states.current_player != a_color)
        # Stable sort: the games where the player is to move come first. With players
        # alternating, at most N/2 games need each player at any ply (one per pair).
        idx_a = jnp.argsort(~a_moves, stable=True)[:half]
        idx_b = jnp.argsort(~b_moves, stable=True)[:half]
        return take(states, idx_a), take(states, idx_b), k_a, k_b, (idx_a, idx_b, a_moves,
                                                                    b_moves)

    def merge(act_a, act_b, sel):
        idx_a, idx_b, a_moves, b_moves = sel
        actions = jnp.zeros(num_games, jnp.int32)
        actions = actions.at[idx_a].set(jnp.where(a_moves[idx_a], act_a, actions[idx_a]))
        actions = actions.at[idx_b].set(jnp.where(b_moves[idx_b], act_b, actions[idx_b]))
        moved = jnp.zeros(num_games, jnp.bool_).at[idx_a].set(a_moves[idx_a])
        moved = moved.at[idx_b].set(moved[idx_b] | b_moves[idx_b])
        return actions, moved

    def advance(states, total, actions, moved, keys, t):
        step_keys = per_game(jax.random.fold_in(keys[2], t), pair)
        nxt = jax.vmap(env.step)(states, actions, step_keys)
        states = jax.tree.map(
            lambda n, s: jnp.where(moved.reshape((-1,) + (1,) * (s.ndim - 1)), n, s),
            nxt, states)
        return states, total + jnp.where(moved[:, None], nxt.rewards, 0.0)

    def finish(states, total):
        mine = total[jnp.arange(num_games), a_color]
        return {"outcome": jnp.sign(mine), "a_first": a_color == 0,
                "finished": states.done, "plies": states.step_count}

    return _Pieces(start, opening, select, merge, advance, finish, cap, int(opening_plies))


def make_match(env, act_a: Act, act_b: Act, num_games: int, *, max_plies: int | None = None,
               opening_plies: int = 0):
    """Builds `match(params_a, params_b, key) -> dict of per-game arrays` (not jitted).

    Games [0, N/2) have A as player 0 (first), games [N/2, N) have A as player 1; game i
    and game i + N/2 share their initial key and their random opening plies.

    Returns (from the built function), all with leading dim N:
      outcome float32   +1 A won, 0 draw (or unfinished), -1 A lost;
      a_first bool      A moved first;
      finished bool     the game ended before the ply cap;
      plies int32       plies played.
    Raises:
      ValueError: `num_games` odd or < 2.
    """
    p = _pieces(env, num_games, max_plies, opening_plies)

    def match(params_a, params_b, key):
        states, keys = p.start(key)

        def agents(states, t):
            states_a, states_b, k_a, k_b, sel = p.select(states, keys, t)
            return p.merge(act_a(params_a, states_a, k_a), act_b(params_b, states_b, k_b), sel)

        def cond(carry):
            t, states, _ = carry
            return (t < p.cap) & ~jnp.all(states.done)

        def body(carry):
            t, states, total = carry
            if p.opening_plies > 0:
                opening = lambda states, t: p.opening(states, keys, t)
                actions, moved = jax.lax.cond(t < p.opening_plies, opening, agents, states, t)
            else:
                actions, moved = agents(states, t)
            states, total = p.advance(states, total, actions, moved, keys, t)
            return t + 1, states, total

        init = (jnp.int32(0), states, jnp.zeros((num_games, 2), jnp.float32))
        _, states, total = jax.lax.while_loop(cond, body, init)
        return p.finish(states, total)

    return match


def make_host_match(pieces: _Pieces, act_a: Act, act_b: Act, device: jax.Device):
    """`make_match`'s games (the same keys, the same results) with the plies looped from
    Python: `pieces` (from `_pieces`, jitted) and the players' `act` functions (jitted)
    are called one ply at a time, on `device`. `match(..., cancel=event)` raises
    `parallel.Cancelled` at the next ply once the event is set.

    For the CPU, where compiling dominates a match: each player's search compiles once,
    and is reused against every opponent (and on both sides of a self-match), instead of
    once inside each pairing's program. The training evaluator's first evaluation of the
    CPU Connect4 config compiled for ~115 s of its ~130 (README, Evaluation)."""
    p = pieces

    def match(params_a, params_b, key, cancel: threading.Event | None = None):
        # The key on the device: every array the match makes is then committed to it, as
        # the moves made with placed parameters are (uncommitted ones at the first ply
        # compiled each player's search twice, ~15 s for a network's on a CPU).
        states, keys = p.start(jax.device_put(key, device))
        num_games = states.current_player.shape[0]
        # Placed as `advance` will return it (one compile of `advance`, not two).
        total = jax.device_put(jnp.zeros((num_games, 2), jnp.float32), states.done.sharding)
        for ply in range(p.cap):
            if cancel is not None and cancel.is_set():
                raise parallel.Cancelled(f"match given up at ply {ply}")
            if bool(jnp.all(states.done)):
                break
            t = jnp.int32(ply)
            if ply < p.opening_plies:
                actions, moved = p.opening(states, keys, t)
            else:
                states_a, states_b, k_a, k_b, sel = p.select(states, keys, t)
                actions, moved = p.merge(act_a(params_a, states_a, k_a),
                                         act_b(params_b, states_b, k_b), sel)
            states, total = p.advance(states, total, actions, moved, keys, t)
        return p.finish(states, total)

    return match


def summarize(out: dict, player: str, opponent: str, seconds: float = math.nan) -> MatchResult:
    """Per-game arrays from a `make_match` function -> a MatchResult."""
    out = jax.device_get(out)
    outcome, first = np.asarray(out["outcome"]), np.asarray(out["a_first"])

    def wdl(sel):
        o = outcome[sel]
        return WDL(int((o > 0).sum()), int((o == 0).sum()), int((o < 0).sum()))

    return MatchResult(player, opponent, wdl(first), wdl(~first),
                       int((~np.asarray(out["finished"])).sum()),
                       float(np.mean(out["plies"])), seconds)


class MatchRunner:
    """Plays matches for one env; keeps one jitted match per (kind A, kind B, batch).

    Args:
      env: the `envs.Env`.
      num_games: games per match (rounded up to an even number, then, when larger than
        the batch, to a multiple of it); a match runs as `num_games / batch` jitted calls.
      batch_size: the most games in one jitted call; the batch is `batch_size` rounded
        down to an even number (9 games with `batch_size=5`: 3 calls of 4, 12 games).
      max_plies: ply cap (default: `default_max_plies(env)`).
      opening_plies: random plies at the start of each pair of games.
      host: plies looped from Python over each player's jitted moves (`make_host_match`),
        instead of one program per pairing (`make_match`); default: on a CPU.

    A match plays on one device: `device` (default: the first local one). `devices` lists
    where `gauntlet.Gauntlet` plays several matches at once: with `host`, every local
    device (a CPU's cores: `parallel_setup.use_all_cpu_cores`; each compiles its own copy
    of a program the first time it plays it), else the first alone.
    """

    def __init__(self, env, num_games: int, *, batch_size: int = 512,
                 max_plies: int | None = None, opening_plies: int = 0,
                 host: bool | None = None):
        if num_games < 1:
            raise ValueError(f"num_games={num_games} must be >= 1")
        if batch_size < 2:
            raise ValueError(f"batch_size={batch_size} must be >= 2")
        self.env = env
        games = num_games + num_games % 2
        batch = batch_size - batch_size % 2
        self.batch = min(games, batch)
        self.calls = -(-games // self.batch)
        self.num_games = self.batch * self.calls
        self.max_plies = max_plies
        self.opening_plies = int(opening_plies)
        self.device = jax.local_devices()[0]
        self.host = self.device.platform == "cpu" if host is None else bool(host)
        # Host matches (a CPU's cores as devices) play several at once.
        self.devices = parallel.job_devices() if self.host else [self.device]
        self._compiled: dict[tuple, Callable] = {}
        self._acts: dict[str, Callable] = {}  # host matches: jitted moves per player kind
        self._pieces = None
        self._lock = threading.Lock()  # matches on several devices build these at once

    def match_fn(self, player_a: Player, player_b: Player,
                 device: jax.Device | None = None) -> Callable:
        """The `match(params_a, params_b, key)` for these two kinds (cached; jitted, or
        with `host` a Python loop over jitted parts, on `device`: default `self.device`)."""
        device = self.device if device is None else device
        # A jitted match runs where its parameters are; a host match places its own arrays.
        key = (player_a.kind, player_b.kind, self.batch) + ((device,) if self.host else ())
        with self._lock:
            if key not in self._compiled:
                self._compiled[key] = self._build(player_a, player_b, device)
            return self._compiled[key]

    def _build(self, player_a: Player, player_b: Player, device: jax.Device) -> Callable:
        if not self.host:
            return jax.jit(make_match(self.env, player_a.act, player_b.act, self.batch,
                                      max_plies=self.max_plies,
                                      opening_plies=self.opening_plies))
        if self._pieces is None:
            parts = _pieces(self.env, self.batch, self.max_plies, self.opening_plies)
            self._pieces = parts._replace(**{
                f: jax.jit(getattr(parts, f)) for f in
                ("start", "opening", "select", "merge", "advance", "finish")})
        for p in (player_a, player_b):
            self._acts.setdefault(p.kind, jax.jit(p.act))
        return make_host_match(self._pieces, self._acts[player_a.kind],
                               self._acts[player_b.kind], device)

    @property
    def num_compiled(self) -> int:
        return len(self._compiled)

    def play(self, player_a: Player, player_b: Player, key, progress=None,
             device: jax.Device | None = None,
             cancel: threading.Event | None = None) -> MatchResult:
        """Plays `num_games` games of A against B on `device` (default `self.device`;
        the same games on any device). The key is consumed.

        Args:
          progress: optional callable, called with the number of games after each call.
          cancel: a host match stops at the next ply once it is set (`parallel.Cancelled`).
        """
        more = {"cancel": cancel} if self.host else {}
        device = self.device if device is None else device
        fn = self.match_fn(player_a, player_b, device)
        # One placement for every parameter set (replicated training state, restored
        # checkpoints, ...): jit specialises on input shardings, so mixing them recompiles.
        params_a, params_b = jax.device_put(
            parallel.local_replica((player_a.params, player_b.params)), device)
        result = None
        for i in range(self.calls):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(params_a, params_b, jax.random.fold_in(key, i),
                                           **more))
            part = summarize(out, player_a.name, player_b.name, time.perf_counter() - t0)
            result = part if result is None else result + part
            if progress is not None:
                progress(self.batch)
        return result

