"""The arena: matches between two agents, vmapped and jitted, with colours alternated.

    agent_a = Agent("iter-20/mcts:32", "mcts:32", search_act(search, 32), variables)
    agent_b = make_agent(parse_opponent("random"), env)
    result = MatchRunner(env, num_games=64).play(agent_a, agent_b, key)
    result.total.score, result.interval()      # 0.93, (0.85, 0.97)

An agent is a pure function `act(params, states, key) -> int32[B]` over a batch of env
states (only the games where it is to move matter; its other outputs are ignored), plus
its `params` pytree (network variables, or None). Agents of the same `kind` share one
`act`, so a match between two kinds compiles once, whatever the parameters.

A match of N games (N even) plays N/2 games with agent A as the first player and N/2
with A second. Games i and i + N/2 start from the same position: the optional random
opening (`opening_plies` uniformly random plies, the same in both games of a pair) makes
deterministic agents play different games. All games advance together in a
`lax.while_loop` over plies (capped at `max_plies`; it exits as soon as every game is
over); env.step is a no-op on finished games. Each ply, each agent is evaluated only on
the N/2 games where it is most likely to move (gathered), not on all N.

Results are wins/draws/losses from A's point of view, as first player, as second player
and in total. The score is (W + D/2) / N; its 95% confidence interval is the Wilson score
interval for a binomial proportion with W + D/2 successes in N trials. Draws make the
true variance smaller than the binomial one, so the interval is slightly conservative.

Opponent names (`parse_opponent`):
  random            uniformly random legal moves
  onestep           plays a winning move if one exists, else a random legal move
  greedy            the network alone: argmax of the masked policy, no search
  mcts:N            the network with N simulations of search (evaluation mode, no noise)
  mcts-rollout:N    pure MCTS without a network: uniform prior, the value of a leaf is the
                    result of one uniformly random playout to the end of the game
  checkpoint:latest, checkpoint:latest-K, checkpoint:<iteration>
                    a saved network of this run (searching with the agent's simulations);
                    latest-K is the newest checkpoint at least K iterations older than the
                    latest one.
  checkpoint:<workdir>[@latest|@<iteration>]
                    a network from another run of the same game.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mctx
import numpy as np

from az_jax import learner, parallel

Act = Callable[[Any, Any, jax.Array], jax.Array]

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
    """A match from agent A's point of view (`player` = A, `opponent` = B)."""

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


# =========================================================================== agents
def random_legal(key, mask):
    """A uniformly random legal action per game. mask: bool[B, A] -> int32[B]."""
    logits = jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def default_max_plies(env) -> int:
    """A ply cap for one game: twice the env's move limit, or twice its number of cells."""
    if getattr(env, "max_steps", None):
        return 2 * int(env.max_steps)
    h, w = env.observation_shape[:2]
    return 2 * int(h) * int(w)


def random_act(env) -> Act:
    """Uniformly random legal moves."""
    del env

    def act(params, states, key):
        del params
        return random_legal(key, states.legal_action_mask)

    return act


def onestep_act(env) -> Act:
    """One-ply lookahead: a winning move if there is one (random among them), else random.

    Generic over envs: it steps every action of every game (A env steps per game).
    """
    actions = jnp.arange(env.num_actions, dtype=jnp.int32)

    def one(state, key):
        k_step, k_pick = jax.random.split(key)
        children = jax.vmap(env.step, in_axes=(None, 0, None))(state, actions, k_step)
        wins = (children.rewards[:, state.current_player] > 0) & state.legal_action_mask
        choice = jnp.where(jnp.any(wins), wins, state.legal_action_mask)
        return random_legal(k_pick, choice[None])[0]

    def act(params, states, key):
        del params
        batch = states.current_player.shape[0]
        return jax.vmap(one)(states, jax.random.split(key, batch))

    return act


def greedy_act(apply_fn) -> Act:
    """The network alone: argmax of the masked policy logits.

    Args:
      apply_fn: `(variables, obs [B, ...], legal_mask [B, A]) -> (logits, value)`.
    """

    def act(variables, states, key):
        del key
        logits, _ = apply_fn(variables, states.observation, states.legal_action_mask)
        logits = jnp.where(states.legal_action_mask, logits, -jnp.inf)  # argmax only
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    return act


def search_act(search, num_simulations: int) -> Act:
    """The network with `num_simulations` of search (evaluation mode: no root noise).

    Args:
      search: from `search.make_search`.
    """

    def act(variables, states, key):
        out = search(variables, states, key, evaluation=True, num_simulations=num_simulations)
        return out.action.astype(jnp.int32)

    return act


def random_rollout_value(env, state, key, max_plies: int):
    """The result of one uniformly random playout from `state`, for its player to move.

    One game (vmap for a batch). A `lax.while_loop` runs until the game ends (at most
    `max_plies` plies; then the result is a draw). Returns float32[].
    """

    def cond(carry):
        s, _, _, t = carry
        return ~s.done & (t < max_plies)

    def body(carry):
        s, k, total, t = carry
        k, k_act, k_step = jax.random.split(k, 3)
        a = random_legal(k_act, s.legal_action_mask[None])[0]
        s = env.step(s, a, k_step)
        return s, k, total + s.rewards, t + 1

    init = (state, key, jnp.zeros(2, jnp.float32), jnp.int32(0))
    _, _, total, _ = jax.lax.while_loop(cond, body, init)
    return total[state.current_player]


def rollout_mcts_act(env, num_simulations: int, *, max_plies: int | None = None,
                     pb_c_init: float | None = None) -> Act:
    """Pure MCTS without a network (classic MCTS), with mctx over env.step.

    The prior is uniform over legal moves; the value of a new leaf is the result of one
    uniformly random playout to the end of the game (`random_rollout_value`). The tree
    policy is PUCT with first-play urgency = the parent's value (see search.py) and, by
    default, c_puct = the number of actions, so that c_puct * prior is about 1 (UCT-like
    exploration). The root's value is 0 (not a playout). The move is the most visited child.
    """
    from az_jax import search as search_lib

    cap = int(max_plies or default_max_plies(env))
    c_puct = float(pb_c_init if pb_c_init is not None else env.num_actions)

    def uniform_logits(mask):
        return jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)

    def values(states, key):
        batch = states.current_player.shape[0]
        keys = jax.random.split(key, batch)
        v = jax.vmap(lambda s, k: random_rollout_value(env, s, k, cap))(states, keys)
        return jnp.where(states.done, 0.0, v)

    def recurrent_fn(params, key, action, state):
        del params
        batch = action.shape[0]
        k_step, k_roll = jax.random.split(key)
        nxt = jax.vmap(env.step)(state, action, jax.random.split(k_step, batch))
        reward = nxt.rewards[jnp.arange(batch), state.current_player]
        out = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(nxt.done, 0.0, -1.0),
            prior_logits=uniform_logits(nxt.legal_action_mask),
            value=values(nxt, k_roll),
        )
        return out, nxt

    def act(params, states, key):
        del params
        # The root's own value only seeds its running mean: 0 (no playout) is enough, and
        # tracing one playout fewer saves compile time.
        root = mctx.RootFnOutput(prior_logits=uniform_logits(states.legal_action_mask),
                                 value=jnp.zeros(states.current_player.shape, jnp.float32),
                                 embedding=states)
        out = mctx.muzero_policy(
            None, key, root, recurrent_fn,
            num_simulations=num_simulations,
            invalid_actions=~states.legal_action_mask,
            qtransform=search_lib.qtransform_parent_fpu,
            dirichlet_fraction=0.0,
            pb_c_init=c_puct,
            temperature=0.0,
        )
        return out.action.astype(jnp.int32)

    return act


# =========================================================================== opponents
_FORMS = ("random", "onestep", "greedy", "mcts:N", "mcts-rollout:N", "checkpoint:latest",
          "checkpoint:latest-K", "checkpoint:<iteration>",
          "checkpoint:<workdir>[@latest|@<iteration>]")


@dataclasses.dataclass(frozen=True)
class Opponent:
    """A parsed opponent name (see the module docstring)."""

    name: str  # canonical name, e.g. "mcts-rollout:800"
    kind: str  # random | onestep | greedy | mcts | mcts-rollout | checkpoint
    simulations: int | None = None
    ref: str | None = None  # checkpoint: "latest", "latest-5", "120"
    workdir: str | None = None  # checkpoint of another run

    @property
    def needs_network(self) -> bool:
        return self.kind in ("greedy", "mcts", "checkpoint")

    @property
    def metric(self) -> str:
        """A name usable in metric keys and TensorBoard tags (`:` -> `_`)."""
        return re.sub(r"[^A-Za-z0-9._\-]", "_", self.name)


def accepted_forms() -> str:
    return "accepted forms: " + ", ".join(_FORMS)


def parse_opponent(name: str) -> Opponent:
    """Parses an opponent name.

    Raises:
      ValueError: unknown name, listing the accepted forms.
    """
    if not isinstance(name, str):
        raise ValueError(f"opponent name must be a string, got {name!r}; {accepted_forms()}")
    text = name.strip()
    if text in ("random", "onestep", "greedy"):
        return Opponent(text, text)
    m = re.fullmatch(r"(mcts|mcts-rollout):(\d+)", text)
    if m:
        sims = int(m.group(2))
        if sims < 1:
            raise ValueError(f"opponent {name!r}: the number of simulations must be >= 1")
        return Opponent(text, m.group(1), simulations=sims)
    if text.startswith("checkpoint:"):
        ref = text[len("checkpoint:"):]
        if re.fullmatch(r"latest|latest-\d+|\d+", ref):
            return Opponent(text, "checkpoint", ref=ref)
        if ref:
            where, _, at = ref.rpartition("@") if "@" in ref else (ref, "", "latest")
            if where and re.fullmatch(r"latest|\d+", at):
                return Opponent(text, "checkpoint", ref=at, workdir=where)
            raise ValueError(f"cannot read {name!r}: after '@' give 'latest' or an "
                             f"iteration number; {accepted_forms()}")
    raise ValueError(f"unknown opponent {name!r}; {accepted_forms()}")


def parse_opponents(names: str | list[str]) -> list[Opponent]:
    """A comma-separated list (or a list) of opponent names; empty items are skipped."""
    items = names.split(",") if isinstance(names, str) else list(names)
    return [parse_opponent(n) for n in items if n.strip()]


def checkpoint_steps(workdir) -> list[int]:
    """The iterations saved in `<workdir>/checkpoints`, oldest first ([] if none)."""
    directory = Path(workdir) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def resolve_checkpoint(workdir, ref: str) -> int:
    """`latest`, `latest-K` or `<iteration>` -> an iteration saved in `workdir`.

    Raises:
      FileNotFoundError: no such checkpoint (lists the saved iterations).
    """
    steps = checkpoint_steps(workdir)
    if not steps:
        raise FileNotFoundError(f"no checkpoints in {Path(workdir) / 'checkpoints'}")
    if ref == "latest":
        return steps[-1]
    if ref.startswith("latest-"):
        back = int(ref[len("latest-"):])
        older = [s for s in steps if s <= steps[-1] - back]
        if not older:
            raise FileNotFoundError(f"checkpoint:{ref}: no checkpoint at least {back} "
                                    f"iterations older than {steps[-1]} in {workdir} "
                                    f"(saved: {steps})")
        return older[-1]
    step = int(ref)
    if step not in steps:
        raise FileNotFoundError(f"checkpoint:{ref}: no checkpoint {step} in {workdir} "
                                f"(saved: {steps})")
    return step


@dataclasses.dataclass(frozen=True)
class Agent:
    """A player: `act(params, states, key) -> actions`; `kind` keys the compile cache."""

    name: str  # name on the Elo ladder
    kind: str  # agents with the same kind share the same `act`
    act: Act = dataclasses.field(repr=False)
    params: Any = dataclasses.field(default=None, repr=False)


class AgentFactory:
    """Builds agents for one env (and one network), reusing one `act` per kind."""

    def __init__(self, env, net=None, search=None, workdir=None):
        """Args: env; net, search: the network under test and its `make_search` (needed for
        greedy / mcts / checkpoint opponents); workdir: where `checkpoint:` names resolve."""
        self.env, self.net, self.search = env, net, search
        self.workdir = workdir
        self._acts: dict[str, Act] = {}
        self._restored: dict[tuple[str, int], Any] = {}

    def act(self, kind: str, make: Callable[[], Act]) -> Act:
        if kind not in self._acts:
            self._acts[kind] = make()
        return self._acts[kind]

    def random(self) -> Agent:
        return Agent("random", "random", self.act("random", lambda: random_act(self.env)))

    def onestep(self) -> Agent:
        return Agent("onestep", "onestep", self.act("onestep", lambda: onestep_act(self.env)))

    def rollout(self, sims: int) -> Agent:
        kind = f"mcts-rollout:{sims}"
        return Agent(kind, kind, self.act(kind, lambda: rollout_mcts_act(self.env, sims)))

    def _need_net(self, what: str) -> None:
        if self.net is None or self.search is None:
            raise ValueError(f"opponent {what!r} needs a network; none was given")

    def greedy(self, variables, label: str) -> Agent:
        self._need_net("greedy")
        apply_fn = lambda v, o, m: self.net.apply(v, o, m, train=False)
        return Agent(f"{label}/greedy", "greedy",
                     self.act("greedy", lambda: greedy_act(apply_fn)), variables)

    def network(self, variables, label: str, sims: int) -> Agent:
        """The network under test (or one of its checkpoints) with `sims` simulations."""
        self._need_net(f"mcts:{sims}")
        kind = f"mcts:{sims}"
        return Agent(f"{label}/{kind}", kind,
                     self.act(kind, lambda: search_act(self.search, sims)), variables)

    def checkpoint(self, opp: Opponent, sims: int) -> Agent:
        """A saved network (this run's or another run's) searching with `sims` simulations.

        Raises:
          FileNotFoundError: no such checkpoint; ValueError: a checkpoint of another game.
        """
        from az_jax import checkpoint as ckpt
        from az_jax import search as search_lib

        workdir = opp.workdir or self.workdir
        if workdir is None:
            raise ValueError(f"opponent {opp.name!r} needs a workdir")
        if not Path(workdir).is_dir():
            raise FileNotFoundError(f"opponent {opp.name!r}: no directory {workdir}")
        step = resolve_checkpoint(workdir, opp.ref)
        key = (str(Path(workdir).resolve()), step)
        if key not in self._restored:
            while len(self._restored) >= 4:  # keep the cache small
                self._restored.pop(next(iter(self._restored)))
            self._restored[key] = ckpt.restore(workdir, step=step, env=self.env)
        restored = self._restored[key]
        if opp.workdir is None:  # this run: same network, same compiled search
            return self.network(restored.variables, f"iter-{step}", sims)
        label = f"{Path(workdir).resolve().name}/iter-{step}"
        kind = f"{Path(workdir).resolve()}:mcts:{sims}"
        make = lambda: search_act(search_lib.make_search(restored.env, restored.net,
                                                         restored.config.search), sims)
        return Agent(f"{label}/mcts:{sims}", kind, self.act(kind, make), restored.variables)

    def build(self, opp: Opponent, *, variables=None, label: str = "current",
              sims: int | None = None) -> Agent:
        """The agent for a parsed opponent.

        Args:
          opp: from `parse_opponent`.
          variables: the network under test (for greedy / mcts:N).
          label: the network's ladder name prefix (e.g. "iter-20").
          sims: simulations for checkpoint opponents.
        """
        if opp.kind == "random":
            return self.random()
        if opp.kind == "onestep":
            return self.onestep()
        if opp.kind == "mcts-rollout":
            return self.rollout(opp.simulations)
        if opp.kind == "greedy":
            return self.greedy(variables, label)
        if opp.kind == "mcts":
            return self.network(variables, label, opp.simulations)
        if opp.kind == "checkpoint":
            self._need_net(opp.name)
            return self.checkpoint(opp, int(sims or 1))
        raise ValueError(f"unknown opponent kind {opp.kind!r}")  # pragma: no cover


# =========================================================================== matches
def take(tree, idx):
    """Rows `idx` of every leaf of a batched pytree."""
    return jax.tree.map(lambda x: x[idx], tree)


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
    if num_games < 2 or num_games % 2:
        raise ValueError(f"num_games={num_games}: use an even number >= 2 (half the games "
                         "with each colour)")
    half = num_games // 2
    cap = int(max_plies or default_max_plies(env))
    a_color = jnp.repeat(jnp.array([0, 1], jnp.int32), half)  # A's player id per game
    pair = jnp.arange(num_games, dtype=jnp.int32) % half
    per_game = jax.vmap(jax.random.fold_in, in_axes=(None, 0))

    def match(params_a, params_b, key):
        k_init, k_open, k_act, k_step = jax.random.split(key, 4)
        states = jax.vmap(env.init)(per_game(k_init, pair))

        def opening(states, t):
            keys = per_game(jax.random.fold_in(k_open, t), pair)
            actions = jax.vmap(lambda k, m: random_legal(k, m[None])[0])(
                keys, states.legal_action_mask)
            return actions, ~states.done

        def agents(states, t):
            k_a, k_b = jax.random.split(jax.random.fold_in(k_act, t))
            a_moves = ~states.done & (states.current_player == a_color)
            b_moves = ~states.done & (states.current_player != a_color)
            # Stable sort: the games where the agent is to move come first. With players
            # alternating, at most N/2 games need each agent at any ply (one per pair).
            idx_a = jnp.argsort(~a_moves, stable=True)[:half]
            idx_b = jnp.argsort(~b_moves, stable=True)[:half]
            act_a_ = act_a(params_a, take(states, idx_a), k_a)
            act_b_ = act_b(params_b, take(states, idx_b), k_b)
            actions = jnp.zeros(num_games, jnp.int32)
            actions = actions.at[idx_a].set(jnp.where(a_moves[idx_a], act_a_, actions[idx_a]))
            actions = actions.at[idx_b].set(jnp.where(b_moves[idx_b], act_b_, actions[idx_b]))
            moved = jnp.zeros(num_games, jnp.bool_).at[idx_a].set(a_moves[idx_a])
            moved = moved.at[idx_b].set(moved[idx_b] | b_moves[idx_b])
            return actions, moved

        def cond(carry):
            t, states, _ = carry
            return (t < cap) & ~jnp.all(states.done)

        def body(carry):
            t, states, total = carry
            if opening_plies > 0:
                actions, moved = jax.lax.cond(t < opening_plies, opening, agents, states, t)
            else:
                actions, moved = agents(states, t)
            step_keys = per_game(jax.random.fold_in(k_step, t), pair)
            nxt = jax.vmap(env.step)(states, actions, step_keys)
            states = jax.tree.map(
                lambda n, s: jnp.where(moved.reshape((-1,) + (1,) * (s.ndim - 1)), n, s),
                nxt, states)
            total = total + jnp.where(moved[:, None], nxt.rewards, 0.0)
            return t + 1, states, total

        init = (jnp.int32(0), states, jnp.zeros((num_games, 2), jnp.float32))
        _, states, total = jax.lax.while_loop(cond, body, init)
        mine = total[jnp.arange(num_games), a_color]
        return {"outcome": jnp.sign(mine), "a_first": a_color == 0,
                "finished": states.done, "plies": states.step_count}

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
      num_games: games per match (rounded up to an even number, then to a multiple of
        `batch_size` when larger); a match runs as `num_games / batch` jitted calls.
      batch_size: the most games in one jitted call.
      max_plies: ply cap (default: `default_max_plies(env)`).
      opening_plies: random plies at the start of each pair of games.
    """

    def __init__(self, env, num_games: int, *, batch_size: int = 512,
                 max_plies: int | None = None, opening_plies: int = 0):
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
        self._compiled: dict[tuple, Callable] = {}

    def match_fn(self, agent_a: Agent, agent_b: Agent) -> Callable:
        """The jitted `match(params_a, params_b, key)` for these two kinds (cached)."""
        key = (agent_a.kind, agent_b.kind, self.batch)
        if key not in self._compiled:
            self._compiled[key] = jax.jit(make_match(
                self.env, agent_a.act, agent_b.act, self.batch, max_plies=self.max_plies,
                opening_plies=self.opening_plies))
        return self._compiled[key]

    @property
    def num_compiled(self) -> int:
        return len(self._compiled)

    def play(self, agent_a: Agent, agent_b: Agent, key, progress=None) -> MatchResult:
        """Plays `num_games` games of A against B. The key is consumed.

        Args:
          progress: optional callable, called with the number of games after each call.
        """
        fn = self.match_fn(agent_a, agent_b)
        # One placement for every parameter set (replicated training state, restored
        # checkpoints, ...): jit specialises on input shardings, so mixing them recompiles.
        params_a, params_b = jax.device_put(
            parallel.local_replica((agent_a.params, agent_b.params)), self.device)
        result = None
        for i in range(self.calls):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(params_a, params_b, jax.random.fold_in(key, i)))
            part = summarize(out, agent_a.name, agent_b.name, time.perf_counter() - t0)
            result = part if result is None else result + part
            if progress is not None:
                progress(self.batch)
        return result


# =========================================================================== training
class TrainingEvaluator:
    """The trainer's periodic evaluation: the current network against the baselines in
    `config.eval.opponents` and against the best network so far; gating; Elo ladder.

    `evaluator(train_state, best, iteration, key) -> (metrics, best)`, where `best` is the
    best network's `{"params": ..., "batch_stats": ...}` (batch_stats `{}` without batch
    norm).

    Metrics: `eval/<opponent>/score|win|draw|loss` per opponent (names with `:` -> `_`),
    `eval/best/score`, `eval/best/promoted` (1 when the current network became the best),
    `eval/elo` (the current network's rating on the ladder), `eval/seconds`, and `score`:
    the mean score against `config.eval.opponents` (the number that ranks checkpoints; the
    score against the best when there are no other opponents).

    Gating (`config.eval.gating`): the best is replaced by the current parameters only if
    `passes_gate(result vs best, config.eval.gating_threshold)`; without gating the best
    is simply the current parameters. Names on the ladder: `iter-<k>/mcts:<sims>`.

    `config.eval.opening_plies` (optional; default DEFAULT_OPENING_PLIES) sets the random
    opening. Unavailable `checkpoint:` opponents (none saved yet) are skipped.

    External engines (`az_jax.external`, e.g. `baghchal-minimax:D`) may be listed too: they
    are built here (an engine of another game or a missing package raises now, not
    mid-run) and play the same number of games in a host-side loop
    (`external.ExternalMatchRunner`); their metrics and Elo records are like the others'.
    """

    def __init__(self, setup, workdir):
        from az_jax import external  # external imports this module

        c = setup.config.eval
        self.env, self.net, self.workdir = setup.env, setup.net, str(workdir)
        self.sims = int(c.num_simulations)
        self.opponents = external.parse_opponents(c.opponents)
        self.gating = bool(c.gating)
        self.threshold = float(c.gating_threshold)
        opening = c.get("opening_plies", DEFAULT_OPENING_PLIES)
        self.runner = MatchRunner(setup.env, int(c.num_games), opening_plies=int(opening))
        self.engines = {o.name: external.make_engine(o, setup.env) for o in self.opponents
                        if isinstance(o, external.ExternalOpponent)}
        self.host_runner = (external.ExternalMatchRunner(setup.env, self.runner.num_games,
                                                         opening_plies=int(opening))
                            if self.engines else None)
        self.factory = AgentFactory(setup.env, setup.net, setup.search, self.workdir)
        for opp in self.opponents:  # another run's checkpoint: check it now, not mid-run
            if opp.kind == "checkpoint" and opp.workdir is not None:
                self.factory.build(opp, sims=self.sims)
        self._best_name: str | None = None
        # A fresh run starts with the initial network as the best ("iter-0"); a resumed
        # run's best comes from a checkpoint and is named after elo.json's record.
        self._resumed = bool(checkpoint_steps(self.workdir))

    def __call__(self, train_state, best, iteration: int, key):
        from az_jax import elo

        t0 = time.perf_counter()
        variables = train_state.variables
        label = f"iter-{iteration}"
        me = self.factory.network(variables, label, self.sims)
        if self._best_name is None:
            stored = elo.load(self.workdir).get("best")
            found = elo.player_iteration(stored) if stored else None
            if found is not None and found[0] < iteration:
                self._best_name = stored
            elif self._resumed:  # no record of which network it is
                self._best_name = f"best-before-{iteration}/mcts:{self.sims}"
            else:
                self._best_name = f"iter-0/mcts:{self.sims}"
        metrics, records, scores = {}, [], []
        for i, opp in enumerate(self.opponents):
            if opp.name in self.engines:  # an external engine: host-side loop
                res = self.host_runner.play(me, self.engines[opp.name],
                                            jax.random.fold_in(key, i))
            else:
                try:
                    other = self.factory.build(opp, variables=variables, label=label,
                                               sims=self.sims)
                except FileNotFoundError:
                    continue  # e.g. checkpoint:latest-5 before enough checkpoints exist
                res = self.runner.play(me, other, jax.random.fold_in(key, i))
            t = res.total
            metrics.update({f"eval/{opp.metric}/score": res.score,
                            f"eval/{opp.metric}/win": t.wins / t.games,
                            f"eval/{opp.metric}/draw": t.draws / t.games,
                            f"eval/{opp.metric}/loss": t.losses / t.games})
            scores.append(res.score)
            records.append(res.as_record())

        best_agent = Agent(self._best_name, me.kind, me.act,
                           learner.variables(best["params"], best["batch_stats"]))
        promoted = True
        if best_agent.name != me.name:
            res = self.runner.play(me, best_agent, jax.random.fold_in(key, 10_000))
            metrics["eval/best/score"] = res.score
            records.append(res.as_record())
            if self.gating:
                promoted = passes_gate(res, self.threshold)
            if not scores:
                scores.append(res.score)
        if promoted:
            best = {"params": train_state.params, "batch_stats": train_state.batch_stats}
            self._best_name = me.name
        metrics["eval/best/promoted"] = float(promoted)
        if jax.process_index() == 0:
            ratings = elo.record(self.workdir, records, iteration=iteration, source="train",
                                 best=self._best_name)
            if me.name in ratings:
                metrics["eval/elo"] = ratings[me.name].elo
        if scores:  # absent (not NaN) when nothing was played, so no checkpoint ranks on it
            metrics["score"] = float(np.mean(scores))
        metrics["eval/seconds"] = time.perf_counter() - t0
        return metrics, best
