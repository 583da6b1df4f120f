"""Stratified Connect4 solver sets: positions that real games reach, labelled by bitbully
and sorted by game phase and difficulty.

    python -m az_jax.eval.solver_bench make-sets --out tests/data/connect4      # needs bitbully

Labels (of a position with column scores, see `connect4_positions`):

  phase       by the number of stones on the board: beginning 0-13, middle 14-27, end 28-41
              (the 42 plies of a full game cut in equal thirds of 14 plies, 7 moves a side).
  difficulty  by k, the number of legal moves that keep the best outcome (win > draw >
              loss), out of n legal moves:
                hard    k = 1          exactly one move keeps the outcome;
                medium  2 <= k <= n/2  several do, but at most half of the legal moves;
                easy    k > n/2        most legal moves keep it;
                none    k = n          no mistake is possible: left out of every set.
              So a uniformly random player errs with probability (n - k) / n: under 1/2 on
              easy positions, at least 1/2 on medium ones and (n - 1)/n on hard ones.

Positions come from whole games between agents of varied strength (`DEFAULT_RECIPE`):
uniformly random, `onestep`, rollout MCTS, the shipped `connect4` network (its policy
sampled, or a noisy search) and bitbully itself with epsilon-random moves. Every position
before a move of a game is a candidate; candidates are deduplicated as boards (different
move orders that reach the same stones, and left-right mirror images, count once), merged
round-robin over the game sources in a seeded random order, solved by bitbully and dealt
into the nine (phase, difficulty) sets until each holds `per_set` positions. The nine sets
are disjoint by construction (one label per position).
"""

from __future__ import annotations

import dataclasses
import random as _random
import time
from collections.abc import Sequence

import numpy as np

from az_jax.eval.connect4_positions import COLS, ROWS, Position, _check_moves, solve

PHASES = ("beginning", "middle", "end")
PHASE_STARTS = (0, 14, 28)  # first stone count of each phase
DIFFICULTIES = ("easy", "medium", "hard")
NONE = "none"  # every legal move keeps the best outcome
DIFFICULTY_RULES = {"easy": "k > n/2", "medium": "2 <= k <= n/2", "hard": "k = 1"}


# =========================================================================== labels
def phase(moves: str) -> str:
    """The phase of a position by its number of stones (see the module docstring)."""
    n = len(moves)
    if not 0 <= n < ROWS * COLS:
        raise ValueError(f"a position has 0-41 stones, not {n}")
    return PHASES[sum(n >= s for s in PHASE_STARTS) - 1]


def keep_count(position: Position) -> tuple[int, int]:
    """(k, n): legal moves that keep the best outcome, and legal moves."""
    out = position.outcomes()
    legal = out[out > -2]
    return int(np.sum(legal == legal.max())), int(legal.size)


def difficulty(position: Position) -> str:
    """'easy', 'medium', 'hard' or 'none' (no mistake possible); needs column scores."""
    k, n = keep_count(position)
    if k == n:
        return NONE
    if k == 1:
        return "hard"
    return "easy" if 2 * k > n else "medium"


def set_name(position: Position) -> str | None:
    """'<phase>_<difficulty>', or None where no mistake is possible."""
    d = difficulty(position)
    return None if d == NONE else f"{phase(position.moves)}_{d}"


def set_names() -> list[str]:
    """The nine set names, beginning_easy ... end_hard."""
    return [f"{p}_{d}" for p in PHASES for d in DIFFICULTIES]


def board_key(moves: str) -> str:
    """The same string for positions with the same stones up to a left-right mirror.

    Each column is written bottom-up as the movers of its stones ('a' = first player,
    'b' = second); the key is the smaller of the board's and its mirror's.
    """
    cols = [""] * COLS
    for i, ch in enumerate(moves):
        cols["1234567".index(ch)] += "ab"[i % 2]
    return min("|".join(cols), "|".join(reversed(cols)))


# =========================================================================== players
@dataclasses.dataclass(frozen=True)
class Player:
    """A game player for `play_games`.

    kind: 'random', 'onestep', 'rollout' (MCTS with random playouts, `sims`), 'policy' (the
    network's policy, sampled), 'search' (the network with `sims` simulations of noisy
    search, the move sampled from the search policy) or 'bitbully' (a perfect player, a
    random best move). With probability `epsilon` the move is uniformly random instead.
    """

    kind: str
    sims: int = 0
    epsilon: float = 0.0

    @property
    def name(self) -> str:
        text = self.kind + (f":{self.sims}" if self.sims else "")
        return text + (f"(eps {self.epsilon:g})" if self.epsilon else "")


@dataclasses.dataclass(frozen=True)
class Source:
    """`games` games of `first` against `second`, half of them with each moving first."""

    first: Player
    second: Player
    games: int

    @property
    def name(self) -> str:
        return f"{self.first.name} vs {self.second.name}"


P = Player
DEFAULT_RECIPE = (
    Source(P("random"), P("random"), 200),
    Source(P("onestep"), P("onestep"), 200),
    Source(P("onestep"), P("rollout", 64), 200),
    Source(P("rollout", 64), P("rollout", 256), 200),
    Source(P("policy"), P("policy"), 200),
    Source(P("search", 8, 0.05), P("onestep"), 200),
    # The longer games (strong players on both sides) feed the end phase: more of them.
    Source(P("search", 8, 0.05), P("search", 16, 0.05), 300),
    Source(P("bitbully", 0, 0.3), P("search", 8, 0.05), 300),
    Source(P("bitbully", 0, 0.15), P("bitbully", 0, 0.15), 600),
    Source(P("bitbully", 0, 0.3), P("rollout", 256), 200),
)


def _uniform(rng: np.random.Generator, mask: np.ndarray) -> int:
    return int(rng.choice(np.flatnonzero(mask)))


class _Players:
    """Builds each player's batched act function once (the network only when needed)."""

    def __init__(self, env, model: str):
        import jax

        self.env, self.model = env, model
        self._acts, self._restored = {}, None
        self.step = jax.jit(jax.vmap(env.step))
        self.init = jax.jit(jax.vmap(env.init))

    def _network(self):
        if self._restored is None:
            from az_jax import checkpoint as ckpt
            from az_jax import search as search_lib

            # The network may see other planes of this game (the shipped `connect4` has
            # threat planes): it plays on its own env, given our states through `observe`.
            r = ckpt.load(model=self.model, play_env=self.env)
            self._restored = (r, search_lib.make_search(r.env, r.net, r.config.search))
        return self._restored

    def act(self, player: Player):
        """jitted (states, key) -> int32[B], or None for host-side players."""
        import jax
        import jax.numpy as jnp

        from az_jax.eval import players

        if player.kind in ("bitbully",):
            return None
        key_ = (player.kind, player.sims)
        if key_ in self._acts:
            return self._acts[key_]
        if player.kind == "random":
            fn = lambda s, k: players.random_act(self.env)(None, s, k)
        elif player.kind == "onestep":
            fn = lambda s, k: players.onestep_act(self.env)(None, s, k)
        elif player.kind == "rollout":
            act = players.rollout_mcts_act(self.env, player.sims)
            fn = lambda s, k: act(None, s, k)
        elif player.kind == "policy":
            r, _ = self._network()

            def fn(s, k):
                s = jax.vmap(r.env.observe)(s)
                logits, _ = r.net.apply(r.variables, s.observation, s.legal_action_mask,
                                        train=False)
                logits = jnp.where(s.legal_action_mask, logits, jnp.finfo(logits.dtype).min)
                return jax.random.categorical(k, logits).astype(jnp.int32)
        elif player.kind == "search":
            r, search = self._network()

            def fn(s, k):
                s = jax.vmap(r.env.observe)(s)
                k_search, k_pick = jax.random.split(k)
                out = search(r.variables, s, k_search, evaluation=False,
                             num_simulations=player.sims)
                w = jnp.where(s.legal_action_mask, out.action_weights, 0.0)
                logits = jnp.where(w > 0, jnp.log(jnp.maximum(w, 1e-30)),
                                   jnp.finfo(jnp.float32).min)
                return jax.random.categorical(k_pick, logits).astype(jnp.int32)
        else:
            raise ValueError(f"unknown player kind {player.kind!r}")
        self._acts[key_] = jax.jit(fn)
        return self._acts[key_]


def play_games(env, players: _Players, source: Source, seed: int) -> list[str]:
    """Plays the source's games to the end. Returns their move strings (columns 1-7).

    The first half of the games has `source.first` moving first, the second half
    `source.second` (two batches: each ply then runs one player's act only).
    """
    half = source.games // 2
    return (_play(env, players, source.first, source.second, source.games - half, seed)
            + _play(env, players, source.second, source.first, half, seed + 7919))


def _play(env, players: _Players, first: Player, second: Player, n: int,
          seed: int) -> list[str]:
    import jax

    if n == 0:
        return []
    step = players.step
    key = jax.random.PRNGKey(seed)
    key, k_init = jax.random.split(key)
    states = players.init(jax.random.split(k_init, n))
    rng = np.random.default_rng(seed)
    moves = [""] * n
    done = np.zeros(n, bool)
    for ply in range(ROWS * COLS):
        if done.all():
            break
        mask = np.asarray(states.legal_action_mask)
        player = first if ply % 2 == 0 else second
        key, k_act, k_step = jax.random.split(key, 3)
        fn = players.act(player)
        if fn is None:  # bitbully: a random one of the best moves
            actions = np.zeros(n, np.int32)
            for i in np.flatnonzero(~done):
                scores = solve(moves[i]).column_scores
                best = max(s for s in scores if s is not None)
                actions[i] = rng.choice([c for c, s in enumerate(scores) if s == best])
        else:
            actions = np.array(fn(states, k_act), np.int32)
        for i in np.flatnonzero(~done):
            if rng.random() < player.epsilon or not mask[i, actions[i]]:
                actions[i] = _uniform(rng, mask[i])
        states = step(states, actions, jax.random.split(k_step, n))
        for i in np.flatnonzero(~done):
            moves[i] += str(actions[i] + 1)
        done |= np.asarray(states.terminated | states.truncated)
    return moves


def candidates(games: Sequence[str]) -> list[str]:
    """Every position before a move of the games (the move strings of their prefixes),
    but the empty board, which the set files cannot hold (Pons's format names a position by
    its moves)."""
    out = []
    for g in games:
        for t in range(1, len(g)):
            if _check_moves(g[:t])[1] is None:
                out.append(g[:t])
    return out


def make_sets(recipe: Sequence[Source] = DEFAULT_RECIPE, per_set: int = 200, seed: int = 0,
              model: str = "connect4", exclude: Sequence[str] = (), log=print,
              players: _Players | None = None):
    """Plays the recipe's games and deals solved positions into the nine sets.

    Args:
      recipe: the game sources.
      per_set: positions per set (a set that runs short keeps what it has).
      seed: seeds the games (source i uses seed + i) and the order of candidates.
      model: the shipped model the 'policy' and 'search' players use.
      exclude: move strings whose boards (or their mirrors) must not appear (e.g. another
        shipped set).
      log: progress lines go here.
      players: reuse the compiled players of an earlier call (tests).
    Returns:
      ({set name: [Position]}, {set name: {source name: count}}, stats dict).
    """
    import envs

    env = envs.make("connect4")
    players = players or _Players(env, model)
    per_source: list[list[str]] = []
    seen = {board_key(m) for m in exclude}
    t0 = time.perf_counter()
    for i, src in enumerate(recipe):
        games = play_games(env, players, src, seed + i)
        unique = []
        for m in candidates(games):
            k = board_key(m)
            if k not in seen:
                seen.add(k)
                unique.append(m)
        _random.Random(seed * 1000 + i).shuffle(unique)
        per_source.append(unique)
        log(f"  {src.name}: {src.games} games, mean length "
            f"{np.mean([len(g) for g in games]):.1f} plies, {len(unique)} new positions "
            f"({time.perf_counter() - t0:.0f}s)")
    sets = {name: [] for name in set_names()}
    origin = {name: {} for name in set_names()}
    # (not len(seen): that counts the excluded boards too, reached by the games or not)
    stats = {"games": sum(s.games for s in recipe),
             "candidates": sum(len(q) for q in per_source), "solved": 0,
             "no_mistake_possible": 0}
    queues = [list(reversed(q)) for q in per_source]
    while any(queues) and any(len(v) < per_set for v in sets.values()):
        for i, q in enumerate(queues):  # round-robin over the sources
            if not q:
                continue
            moves = q.pop()
            # A set's phase is known before solving: skip the solve where that phase is full.
            if all(len(sets[f"{phase(moves)}_{d}"]) >= per_set for d in DIFFICULTIES):
                continue
            pos = solve(moves)
            stats["solved"] += 1
            name = set_name(pos)
            if name is None:
                stats["no_mistake_possible"] += 1
            elif len(sets[name]) < per_set:
                sets[name].append(pos)
                origin[name][recipe[i].name] = origin[name].get(recipe[i].name, 0) + 1
    stats["seconds"] = time.perf_counter() - t0
    return sets, origin, stats
