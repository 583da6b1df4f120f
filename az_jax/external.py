"""Matches against engines that run outside JAX (plain Python on the host).

    python -m az_jax.evaluate --model baghchal --against baghchal-minimax:2 --games 20

    opp = external.parse_opponent("baghchal-minimax:2")
    engine = external.make_engine(opp, env)           # checks the game and the package
    runner = external.ExternalMatchRunner(env, num_games=20, opening_plies=2)
    result = runner.play(agent, engine, key)           # an arena.MatchResult

    python train.py --config configs/baghchal.py --config.eval.opponents=random,baghchal-minimax:1

The arena (`arena.py`) compiles a whole match into one jitted program, so both players
must be JAX functions. An engine written in Python cannot run inside jit, so this module
plays the match with a Python loop over plies instead: all games advance together, the
agent under test (an `arena.Agent`, e.g. the network with N simulations) moves in every
game where it is to move with one jitted call on that batch (padded to a power of two, so
few shapes compile), and the engine then moves in each of its games in turn. Every move,
whoever made it, is mirrored into the engine's own copy of the game, and the engine's view
of the result is checked against the env's after each ply (a mismatch raises: the move
conversion or the rules disagree).

Colours and openings are as in `arena.make_match`: of N games (N even), games [0, N/2)
have the agent as the first player and [N/2, N) as the second, and game i and i + N/2 start
with the same `opening_plies` uniformly random plies (the same key derivation as
`make_match`, so the same openings as an arena match with this key and batch). The openings
matter here: the engines below are deterministic and so is the agent in evaluation mode (no
root noise, argmax move), so without random openings every game with the same colours would
be the same game, and N games would measure only two.

Results are `arena.MatchResult`s from the agent's point of view, so the tables, the Elo
ladder and the JSON records of `evaluate.py` treat them like any other match. Games still
running at `max_plies` count as draws (`unfinished`).

Training (`config.eval.opponents`): `trainer.validate_config` calls `check_opponents` with
the config's env id before anything is built (an engine of another game, or a missing
package, is a config error), and `arena.TrainingEvaluator` plays the engines with an
`ExternalMatchRunner` next to its jitted matches, in every process like those (with the
same parameters and key, every process plays the same games and gets the same score, which
ranks checkpoints).

Engines (`parse_opponent`; keyed by the name's prefix in `_ENGINES`):
  baghchal-minimax:D   the PyPI `baghchal` package's alpha-beta minimax `Engine(depth=D)`
                       (static evaluation 150 x trapped tigers - 120 x captured goats);
                       Bagh-Chal only; needs `pip install baghchal` (a test extra).

The package iterates Python sets of move strings, whose order changes from process to
process with PYTHONHASHSEED, and minimax keeps the first of equally scored moves; the
adapter hands it the moves in sorted order so that a match is reproducible. When every
move loses (the package then returns no move), the engine plays the first legal move.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from az_jax import arena, parallel


# =========================================================================== protocol
class EngineGame(Protocol):
    """One game as an external engine sees it (host side, mutable: the engine's own board)."""

    def push(self, action: int) -> None:
        """Mirrors one ply (either side's move) given as an env action."""

    def best_action(self) -> int:
        """The engine's move for the side to move, as an env action."""

    def is_over(self) -> bool:
        """Whether the engine considers the game finished."""


@dataclasses.dataclass(frozen=True)
class Engine:
    """An external opponent: `new_game()` starts an `EngineGame` at the initial position."""

    name: str  # name on the Elo ladder, e.g. "baghchal-minimax:2"
    new_game: Callable[[], EngineGame] = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class ExternalOpponent:
    """A parsed external opponent name: `kind` is the registry prefix, `arg` its number."""

    name: str  # canonical name, e.g. "baghchal-minimax:2"
    kind: str  # "baghchal-minimax"
    arg: int

    @property
    def metric(self) -> str:
        return re.sub(r"[^A-Za-z0-9._\-]", "_", self.name)


@dataclasses.dataclass(frozen=True)
class _Spec:
    form: str  # how to write it, for error messages
    env_id: str  # the only game it plays
    make: Callable[[Any, int], Engine]  # (env, arg) -> Engine
    check_arg: Callable[[int], str | None]  # None if fine, else why not
    load: Callable[[str], Any]  # (name) -> imports the package; raises ImportError


# =========================================================================== baghchal
def _import_baghchal(what: str):
    """The PyPI package's `env` and `engine` modules. Importing `baghchal.env` changes the
    working directory (to load its images); it is restored here."""
    cwd = os.getcwd()
    try:
        import baghchal.engine as ref_engine
        import baghchal.env as ref_env
    except ImportError as e:
        raise ImportError(f"opponent {what!r} needs the PyPI package 'baghchal' "
                          f"(pip install 'baghchal>=1.0.1,<1.1'): {e}") from None
    finally:
        os.chdir(cwd)
    return ref_env, ref_engine


def _ref_point(name: str) -> str:
    """Our point name (column letter, row from the bottom: 'B2') -> the package's 'xy'
    (row from the top, column; both 1-based: '42')."""
    col, row = ord(name[0].upper()) - ord("A"), int(name[1:])
    return f"{5 - row + 1}{col + 1}"


def baghchal_move_tables(env) -> tuple[dict[tuple[int, int], str], dict[str, int]]:
    """The conversion between env actions and the package's move strings.

    Built from `env.action_to_str` (placements 'C3', steps 'A1-B2', jumps 'A1xC3'); the
    package writes placements 'G33', steps 'G2122' / 'B2122' (goat / tiger) and jumps
    'Bx1133', with points 'xy' = row from the top, column (1-based).

    Returns:
      to_ref: (action, player) -> move string, for every action the player may ever play.
      from_ref: move string -> action.
    """
    to_ref: dict[tuple[int, int], str] = {}
    for a in range(env.num_actions):
        text = env.action_to_str(a)
        if "(" in text:  # along no line: never legal
            continue
        if "-" in text:
            src, dst = text.split("-")
            for player, piece in ((0, "G"), (1, "B")):
                to_ref[a, player] = f"{piece}{_ref_point(src)}{_ref_point(dst)}"
        elif "x" in text:
            src, dst = text.split("x")
            to_ref[a, 1] = f"Bx{_ref_point(src)}{_ref_point(dst)}"
        else:
            to_ref[a, 0] = f"G{_ref_point(text)}"
    from_ref = {move: a for (a, _), move in to_ref.items()}
    return to_ref, from_ref


def baghchal_minimax(env, depth: int) -> Engine:
    """The PyPI `baghchal` package's minimax engine at `depth` plies (see the module
    docstring for tie-breaking).

    Raises:
      ImportError: the package is not installed.
    """
    name = f"baghchal-minimax:{depth}"
    ref_env, ref_engine = _import_baghchal(name)
    to_ref, from_ref = baghchal_move_tables(env)
    engine = ref_engine.Engine(depth=depth)

    class SortedBoard(ref_env.Board):
        """The package's board with its moves in a fixed (sorted) order."""

        def possible_moves(self):
            moves = super().possible_moves()
            return sorted(moves) if moves else moves

    class Game:
        def __init__(self):
            self.board = SortedBoard()

        def push(self, action: int) -> None:
            player = 0 if self.board.next_turn == "G" else 1
            move = to_ref.get((int(action), player))
            if move is None:
                raise ValueError(f"{name}: action {action} ({env.action_to_str(action)}) "
                                 f"is not a move of player {player}")
            try:
                self.board.move(move)
            except Exception as e:  # the package raises bare Exceptions for illegal moves
                raise ValueError(f"{name}: the package rejects {move}: {e}") from None

        def best_action(self) -> int:
            move, _ = engine.get_best_move(self.board)
            if not move:  # every move loses: the package keeps none
                move = self.board.possible_moves()[0]
            return from_ref[move]

        def is_over(self) -> bool:
            return bool(self.board.is_game_over())

    return Engine(name, Game)


# =========================================================================== registry
_ENGINES: dict[str, _Spec] = {
    "baghchal-minimax": _Spec(
        "baghchal-minimax:D", "baghchal", baghchal_minimax,
        lambda d: None if d >= 1 else "the depth (plies searched) must be >= 1",
        _import_baghchal),
}


def forms() -> str:
    """The external opponent names, for help and error messages."""
    return ", ".join(s.form for s in _ENGINES.values())


def is_external(name: str) -> bool:
    """Whether `name` names an external engine (by its prefix before ':')."""
    return isinstance(name, str) and name.strip().split(":")[0] in _ENGINES


def parse_opponent(name: str) -> ExternalOpponent:
    """Parses 'PREFIX:N' for a registered prefix.

    Raises:
      ValueError: an unknown prefix or a bad number.
    """
    text = name.strip()
    prefix, _, arg = text.partition(":")
    spec = _ENGINES.get(prefix)
    if spec is None:
        raise ValueError(f"unknown external opponent {name!r}; accepted forms: {forms()}")
    if not re.fullmatch(r"\d+", arg):
        raise ValueError(f"cannot read {name!r}: expected {spec.form} with a number")
    why = spec.check_arg(int(arg))
    if why:
        raise ValueError(f"opponent {name!r}: {why}")
    return ExternalOpponent(f"{prefix}:{int(arg)}", prefix, int(arg))


def parse_opponents(names: str | list[str]) -> list:
    """Like `arena.parse_opponents`, with external engines too: a list of `arena.Opponent`
    and `ExternalOpponent`, in the given order.

    Raises:
      ValueError: an unknown name (listing the arena's and the external forms).
    """
    items = names.split(",") if isinstance(names, str) else list(names)
    out = []
    for n in items:
        if not str(n).strip():
            continue
        if is_external(n):
            out.append(parse_opponent(n))
            continue
        try:
            out.append(arena.parse_opponent(n))
        except ValueError as e:
            raise ValueError(f"{e}; external engines: {forms()}") from None
    return out


def _wrong_game(opp: ExternalOpponent, env_id: str) -> str | None:
    """Why `opp` cannot play `env_id` (None when it plays that game)."""
    spec = _ENGINES[opp.kind]
    if env_id != spec.env_id:
        return f"opponent {opp.name!r} plays {spec.env_id} only, not {env_id}"
    return None


def check_opponents(names: str | list[str], env_id: str) -> list:
    """`parse_opponents`, with each external engine checked for a run of `env_id`: that it
    plays this game and that its package imports. Builds no env and no engine, so that a
    training config can be checked before anything is compiled.

    Raises:
      ValueError: an unknown name, an engine of another game or one whose package is
        missing (all such engines, one sentence each).
    """
    opponents = parse_opponents(names)
    problems = []
    for opp in opponents:
        if not isinstance(opp, ExternalOpponent):
            continue
        why = _wrong_game(opp, env_id)
        if why is None:
            try:
                _ENGINES[opp.kind].load(opp.name)
            except ImportError as e:
                why = str(e)
        if why:
            problems.append(why)
    if problems:
        raise ValueError("; ".join(problems))
    return opponents


def make_engine(opp: ExternalOpponent, env) -> Engine:
    """The engine for a parsed name, for this env.

    Raises:
      ValueError: the engine does not play this game.
      ImportError: its package is not installed.
    """
    why = _wrong_game(opp, env.id)
    if why:
        raise ValueError(why)
    return _ENGINES[opp.kind].make(env, opp.arg)


# =========================================================================== matches
def _bucket(n: int) -> int:
    """The smallest power of two >= n."""
    return 1 << max(n - 1, 0).bit_length()


class ExternalMatchRunner:
    """Plays matches of an `arena.Agent` against an external `Engine` (see the module
    docstring). Keeps the jitted env functions and one jitted act per (agent kind, batch).

    Args:
      env: the `envs.Env`.
      num_games: games per match (rounded up to an even number).
      max_plies: ply cap (default: `arena.default_max_plies(env)`).
      opening_plies: random plies at the start of each pair of games.
    """

    def __init__(self, env, num_games: int, *, max_plies: int | None = None,
                 opening_plies: int = 0):
        if num_games < 1:
            raise ValueError(f"num_games={num_games} must be >= 1")
        if opening_plies < 0:
            raise ValueError(f"opening_plies={opening_plies} must be >= 0")
        self.env = env
        self.num_games = num_games + num_games % 2
        self.max_plies = int(max_plies or arena.default_max_plies(env))
        self.opening_plies = int(opening_plies)
        half = self.num_games // 2
        self._a_color = np.repeat(np.array([0, 1], np.int32), half)  # the agent's player id
        pair = jnp.arange(self.num_games, dtype=jnp.int32) % half
        per_game = jax.vmap(jax.random.fold_in, in_axes=(None, 0))

        def init(k_init):
            return jax.vmap(env.init)(per_game(k_init, pair))

        def opening(states, k_open, t):
            keys = per_game(jax.random.fold_in(k_open, t), pair)
            return jax.vmap(lambda k, m: arena.random_legal(k, m[None])[0])(
                keys, states.legal_action_mask)

        def step(states, actions, moved, k_step, t):
            keys = per_game(jax.random.fold_in(k_step, t), pair)
            nxt = jax.vmap(env.step)(states, actions, keys)
            states = jax.tree.map(
                lambda n, s: jnp.where(moved.reshape((-1,) + (1,) * (s.ndim - 1)), n, s),
                nxt, states)
            return states, jnp.where(moved[:, None], nxt.rewards, 0.0)

        self._init, self._opening, self._step = jax.jit(init), jax.jit(opening), jax.jit(step)
        self._acts: dict[str, Callable] = {}
        self.device = jax.local_devices()[0]

    def _act_fn(self, agent: arena.Agent) -> Callable:
        """`act(params, states, idx int32[K], key) -> int32[K]`: the agent on games idx."""
        if agent.kind not in self._acts:
            self._acts[agent.kind] = jax.jit(
                lambda params, states, idx, key: agent.act(params, arena.take(states, idx),
                                                           key))
        return self._acts[agent.kind]

    def play(self, agent: arena.Agent, engine: Engine, key, progress=None,
             on_ply=None) -> arena.MatchResult:
        """Plays `num_games` games of the agent against the engine. The key is consumed.

        Args:
          agent: the player under test (`arena.AgentFactory` builds them).
          engine: from `make_engine`.
          progress: optional callable, called with the number of games that just ended.
          on_ply: optional callable, called with the ply number before each ply.
        Returns:
          the MatchResult from the agent's point of view.
        Raises:
          RuntimeError: the engine's view of a game disagrees with the env's.
          ValueError: the engine chose an illegal move.
        """
        t0 = time.perf_counter()
        n = self.num_games
        k_init, k_open, k_act, k_step = jax.random.split(key, 4)
        act = self._act_fn(agent)
        # As in `arena.MatchRunner.play`: this process's copy of replicated (training)
        # parameters, on one device.
        params = jax.device_put(parallel.local_replica(agent.params), self.device)
        states = self._init(k_init)
        games = [engine.new_game() for _ in range(n)]
        total = np.zeros((n, 2), np.float32)
        done = np.asarray(states.done)
        t = 0
        while t < self.max_plies and not done.all():
            if on_ply is not None:
                on_ply(t)
            player = np.asarray(states.current_player)
            if t < self.opening_plies:
                actions = np.asarray(self._opening(states, k_open, t)).astype(np.int32)
                moved = ~done
            else:
                mine = ~done & (player == self._a_color)
                theirs = ~done & (player != self._a_color)
                actions = np.zeros(n, np.int32)
                idx = np.flatnonzero(mine)
                if idx.size:
                    padded = np.resize(idx, _bucket(idx.size)).astype(np.int32)
                    chosen = act(params, states, padded, jax.random.fold_in(k_act, t))
                    actions[idx] = np.asarray(chosen)[:idx.size]
                mask = np.asarray(states.legal_action_mask)
                for g in np.flatnonzero(theirs):
                    a = int(games[g].best_action())
                    if not mask[g, a]:
                        raise ValueError(f"{engine.name} chose {self.env.action_to_str(a)}, "
                                         f"illegal in game {g} at ply {t}")
                    actions[g] = a
                moved = mine | theirs
            states, rewards = self._step(states, jnp.asarray(actions), jnp.asarray(moved),
                                         k_step, t)
            total += np.asarray(rewards)
            terminated = np.asarray(states.terminated)
            for g in np.flatnonzero(moved):
                games[g].push(int(actions[g]))
                if games[g].is_over() != bool(terminated[g]):
                    raise RuntimeError(
                        f"game {g}, ply {t}: {engine.name} says the game is "
                        f"{'over' if games[g].is_over() else 'not over'}, the env says "
                        f"{'over' if terminated[g] else 'not over'}")
            now_done = np.asarray(states.done)
            if progress is not None and (now_done & ~done).any():
                progress(int((now_done & ~done).sum()))
            done = now_done
            t += 1
        mine = total[np.arange(n), self._a_color]
        out = {"outcome": np.sign(mine), "a_first": self._a_color == 0, "finished": done,
               "plies": np.asarray(states.step_count)}
        if progress is not None and (~done).any():
            progress(int((~done).sum()))
        return arena.summarize(out, agent.name, engine.name, time.perf_counter() - t0)

