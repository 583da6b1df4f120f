"""Players for matches: act functions, opponent names, checkpoints to play against.

    factory = PlayerFactory(env, net, search, workdir)
    me = factory.network(variables, "iter-20", 32)              # "iter-20/mcts:32"
    other = factory.build(parse_opponent("checkpoint:latest-5"), sims=32)

A player is a pure function `act(params, states, key) -> int32[B]` over a batch of env
states (only the games where it is to move matter; its other outputs are ignored), plus
its `params` pytree (network variables, or None). Players of the same `kind` share one
`act`, so a match between two kinds compiles once, whatever the parameters
(`match.MatchRunner`).

Opponent names (`parse_opponent`):
  random            uniformly random legal moves
  onestep           plays a winning move if one exists, else a random legal move
  greedy            the network alone: argmax of the masked policy, no search
  mcts:N            the network with N simulations of search (evaluation mode, no noise)
  mcts-rollout:N    pure MCTS without a network: uniform prior, the value of a leaf is the
                    result of one uniformly random playout to the end of the game
                    (N from 1 to az_jax.MAX_SIMULATIONS, 100,000, as --sims)
  checkpoint:latest, checkpoint:latest-K, checkpoint:<iteration>
                    a saved network of this run (searching with the player's simulations);
                    latest-K is the newest checkpoint at least K iterations older than the
                    network under test (`resolve_checkpoint`; without one, the latest).
  checkpoint:<workdir>[@latest|@<iteration>]
                    a network from another run of the same game, on the Elo ladder as
                    `<run>/iter-<k>/mcts:N` (`run_label`: `c4_small` for a sibling run).

External engines (`external.py`) have names of their own; `external.parse_opponents`
reads both kinds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mctx

from az_jax import MAX_SIMULATIONS
from az_jax import checkpoint as ckpt
from az_jax import search as search_lib

Act = Callable[[Any, Any, jax.Array], jax.Array]


# =========================================================================== act functions
def random_legal(key, mask):
    """A uniformly random legal action per game. mask: bool[B, A] -> int32[B]."""
    logits = jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)
    return jax.random.categorical(key, logits).astype(jnp.int32)


# The ply cap of a game that gives neither a bound nor a board (pgx's backgammon: a flat
# observation): generous, since a match stops as soon as its games end.
UNBOUNDED_MAX_PLIES = 2048


def default_max_plies(env, max_game_length: int = 0) -> int:
    """A ply cap for one game: twice the longest game the env can have (`max_game_length`
    if given, as a run's `selfplay.max_game_length`, else the env's own, by default its
    move limit `max_steps`), or twice its number of cells when it does not say, or
    `UNBOUNDED_MAX_PLIES` when its observation is no board. (A pgx game's bound is pgx's
    move limit: 256 plies of animal shogi, whose 4x3 board alone would cap it at 24.)"""
    limit = (max_game_length or getattr(env, "max_game_length", None)
             or getattr(env, "max_steps", None))
    if limit:
        return 2 * int(limit)
    if len(env.observation_shape) < 2:  # no board: (34,) is backgammon's
        return UNBOUNDED_MAX_PLIES
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
        logits = jnp.where(states.legal_action_mask, logits, jnp.finfo(logits.dtype).min)
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


def observed_act(env, act: Act) -> Act:
    """`act` given each state as `env` observes it: a network trained on other observation
    planes of the same game (`Env.observation_params`) reads its own."""

    def wrapped(variables, states, key):
        return act(variables, jax.vmap(env.observe)(states), key)

    return wrapped


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
            discount=search_lib.backup_discount(state, nxt),
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
    m = re.fullmatch(r"(mcts|mcts-rollout):([0-9]+)", text)
    if m:
        sims = int(m.group(2))
        if sims < 1:
            raise ValueError(f"opponent {name!r}: the number of simulations must be >= 1")
        if sims > MAX_SIMULATIONS:  # as --sims: a search tree holds a node per simulation
            raise ValueError(f"opponent {name!r}: the number of simulations must be at most "
                             f"{MAX_SIMULATIONS}")
        return Opponent(f"{m.group(1)}:{sims}", m.group(1), simulations=sims)
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


def preserved_steps(opponents, eval_every: int,
                    checkpoint_every: int = 1) -> list[tuple[int, int]]:
    """What the trainer's checkpoint manager keeps for the run's own `checkpoint:latest-K`
    opponents, evaluated every `eval_every` iterations and saved every `checkpoint_every`:
    (interval, count) pairs, keep the newest `count` checkpoints whose iteration is a
    multiple of `interval`. The newest checkpoint at least K before an evaluation (what
    `resolve_checkpoint` picks) is then among them.

    Evaluations fall on multiples of g = gcd(K, eval_every), so their iterations - K do too:
    where checkpoints are saved at every multiple of g, the newest K / g + 1 of those are
    kept. Else iteration - K may fall between two saves, and the newest ceil(K / every) + 1
    of the regular saves are kept: the save before it and every one since."""
    every = max(int(checkpoint_every), 1)
    out = []
    for opp in opponents:
        if opp.kind == "checkpoint" and opp.workdir is None and opp.ref.startswith("latest-"):
            back = int(opp.ref[len("latest-"):])
            interval = math.gcd(back, int(eval_every)) or 1
            if interval % every == 0:
                out.append((interval, back // interval + 1))
            else:
                out.append((every, -(-back // every) + 1))
    return sorted(set(out))


def is_fixed(opp) -> bool:
    """Whether an opponent plays the same at every evaluation (random, onestep, rollout
    MCTS, an external engine, another run's checkpoint), unlike this run's own networks
    (greedy, mcts:N, this run's checkpoints): scores against fixed ones compare across
    iterations."""
    return not (opp.kind in ("greedy", "mcts")
                or (opp.kind == "checkpoint" and opp.workdir is None))


def parse_opponents(names: str | list[str]) -> list[Opponent]:
    """A comma-separated list (or a list) of opponent names; empty items are skipped."""
    items = names.split(",") if isinstance(names, str) else list(names)
    return [parse_opponent(n) for n in items if n.strip()]


def resolve_checkpoint(workdir, ref: str, iteration: int | None = None) -> int:
    """`latest`, `latest-K` or `<iteration>` -> an iteration saved in `workdir`.

    `latest-K` is the newest checkpoint at least K iterations before `iteration` (the
    network under test; default: the newest saved one). The trainer keeps the checkpoints
    that its `latest-K` opponents need (`preserved_steps`).

    Raises:
      FileNotFoundError: no such checkpoint (lists the saved iterations).
    """
    steps = ckpt.saved_steps(workdir)
    if not steps:
        raise FileNotFoundError(f"no checkpoints in {Path(workdir) / 'checkpoints'}")
    if ref == "latest":
        return steps[-1]
    if ref.startswith("latest-"):
        back = int(ref[len("latest-"):])
        now = steps[-1] if iteration is None else iteration
        older = [s for s in steps if s <= now - back]
        if not older:
            raise FileNotFoundError(f"checkpoint:{ref}: no checkpoint at least {back} "
                                    f"iterations older than {now} in {workdir} "
                                    f"(saved: {steps})")
        return older[-1]
    step = int(ref)
    if step not in steps:
        raise FileNotFoundError(f"checkpoint:{ref}: no checkpoint {step} in {workdir} "
                                f"(saved: {steps})")
    return step


def run_label(workdir, home) -> str:
    """Another run's name on the Elo ladder: its folder relative to the folder that holds
    this run (`home`, the ladder's workdir; the current directory without one).

    A sibling run is its folder's name (`runs/c4` for `runs/big`: "c4"), a run elsewhere a
    path ("../old/c4", "old/c4"): distinct folders never share a name (their matches would
    merge into one rating), and the name does not depend on the other opponents, so it is
    the same at every evaluation that adds to this run's ladder.
    """
    start = Path(home).resolve().parent if home is not None else Path.cwd()
    return Path(os.path.relpath(Path(workdir).resolve(), start)).as_posix()


@dataclasses.dataclass(frozen=True)
class Player:
    """A player: `act(params, states, key) -> actions`; `kind` keys the compile cache."""

    name: str  # name on the Elo ladder
    kind: str  # players with the same kind share the same `act`
    act: Act = dataclasses.field(repr=False)
    params: Any = dataclasses.field(default=None, repr=False)


class PlayerFactory:
    """Builds players for one env (and one network), reusing one `act` per kind."""

    def __init__(self, env, net=None, search=None, workdir=None, variant: str = ""):
        """Args: env; net, search: the network under test and its `make_search` (needed for
        greedy / mcts / checkpoint opponents); workdir: where `checkpoint:` names resolve
        (the ladder's run: other runs are named relative to it, `run_label`);
        variant: appended to the names of the players that search with `search` (e.g.
        "[tactics=none]" where it differs from the run's), so that the Elo ladder keeps
        them apart from the run's own."""
        self.env, self.net, self.search = env, net, search
        self.workdir, self.variant = workdir, variant
        self._acts: dict[str, Act] = {}
        self._restored: dict[tuple[str, int], Any] = {}

    def act(self, kind: str, make: Callable[[], Act]) -> Act:
        if kind not in self._acts:
            self._acts[kind] = make()
        return self._acts[kind]

    def random(self) -> Player:
        return Player("random", "random", self.act("random", lambda: random_act(self.env)))

    def onestep(self) -> Player:
        return Player("onestep", "onestep", self.act("onestep", lambda: onestep_act(self.env)))

    def rollout(self, sims: int) -> Player:
        kind = f"mcts-rollout:{sims}"
        return Player(kind, kind, self.act(kind, lambda: rollout_mcts_act(self.env, sims)))

    def _need_net(self, what: str) -> None:
        if self.net is None or self.search is None:
            raise ValueError(f"opponent {what!r} needs a network; none was given")

    def greedy(self, variables, label: str) -> Player:
        self._need_net("greedy")
        apply_fn = lambda v, o, m: self.net.apply(v, o, m, train=False)
        return Player(f"{label}/greedy", "greedy",
                     self.act("greedy", lambda: greedy_act(apply_fn)), variables)

    def network(self, variables, label: str, sims: int) -> Player:
        """The network under test (or one of its checkpoints) with `sims` simulations."""
        self._need_net(f"mcts:{sims}")
        kind = f"mcts:{sims}"
        return Player(f"{label}/{kind}{self.variant}", kind,
                     self.act(kind, lambda: search_act(self.search, sims)), variables)

    def checkpoint(self, opp: Opponent, sims: int, iteration: int | None = None) -> Player:
        """A saved network (this run's or another run's) searching with `sims` simulations;
        `iteration` as in `resolve_checkpoint`.

        Raises:
          FileNotFoundError: no such checkpoint; ValueError: a checkpoint of another game,
            or of another board size with a dense head.
        """
        workdir = opp.workdir or self.workdir
        if workdir is None:
            raise ValueError(f"opponent {opp.name!r} needs a workdir")
        if not Path(workdir).is_dir():
            raise FileNotFoundError(f"opponent {opp.name!r}: no directory {workdir}")
        step = resolve_checkpoint(workdir, opp.ref, iteration if opp.workdir is None else None)
        key = (str(Path(workdir).resolve()), step)
        if key not in self._restored:
            while len(self._restored) >= 4:  # keep the cache small
                self._restored.pop(next(iter(self._restored)))
            # Another run may be a conv-head network of another board size (a curriculum's
            # earlier stage), or see other observation planes of this game: it plays this
            # one (`ckpt.play_env_for`).
            self._restored[key] = (ckpt.restore(workdir, step=step, env=self.env)
                                   if opp.workdir is None else
                                   ckpt.restore(workdir, step=step, play_env=self.env))
        restored = self._restored[key]
        if opp.workdir is None:  # this run: same network, same compiled search
            return self.network(restored.variables, f"iter-{step}", sims)
        label = f"{run_label(workdir, self.workdir)}/iter-{step}"
        kind = f"{Path(workdir).resolve()}:mcts:{sims}"
        own = restored.env  # this game, as that network sees it (`ckpt.play_env_for`)
        plain = lambda: search_act(search_lib.make_search(own, restored.net,
                                                          restored.config.search), sims)
        same = dict(own.params) == dict(self.env.params)
        make = plain if same else lambda: observed_act(own, plain())  # other planes
        return Player(f"{label}/mcts:{sims}", kind, self.act(kind, make), restored.variables)

    def build(self, opp: Opponent, *, variables=None, label: str = "current",
              sims: int | None = None, iteration: int | None = None) -> Player:
        """The player for a parsed opponent.

        Args:
          opp: from `parse_opponent`.
          variables: the network under test (for greedy / mcts:N).
          label: the network's ladder name prefix (e.g. "iter-20").
          sims: simulations for checkpoint opponents.
          iteration: the network under test's, for `checkpoint:latest-K` (`resolve_checkpoint`).
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
            return self.checkpoint(opp, int(sims or 1), iteration)
        raise ValueError(f"unknown opponent kind {opp.kind!r}")  # pragma: no cover

