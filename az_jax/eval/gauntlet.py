"""One player against a list of opponents: the loop that evaluation and training share.

    gauntlet = Gauntlet(env, num_games=64, opening_plies=2)
    opponents = gauntlet.resolve(factory, external.parse_opponents("random,mcts:32"),
                                 variables=variables, label="iter-20", sims=32)
    results = gauntlet.play_all(me, opponents, key)     # one MatchResult per opponent

JAX players (`players.Player`) play jitted matches (`match.MatchRunner`); external engines
(`external.Engine`) play the same number of games in a host-side loop
(`external.ExternalMatchRunner`). The player itself may be an engine too (`evaluate
--brain`: the network through its Gomocup brain). Opponent i plays with the key
`fold_in(key, i)`.

With several local devices (a CPU presents its cores as devices: `parallel_setup`), the
jitted matches play at the same time, one a device: on 2 CPU cores the training
evaluation of the CPU Connect4 config took 13 s instead of 22 (README, Evaluation). A
match's games depend on its key alone, not on the device or the order.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable

import jax

from az_jax import parallel
from az_jax.eval import external
from az_jax.eval.match import WDL, MatchResult, MatchRunner
from az_jax.eval.players import Player, PlayerFactory


class Gauntlet:
    """Plays one player against opponents of both kinds, for one env.

    Args:
      env: the `envs.Env`.
      num_games: games per opponent (see `MatchRunner` for the rounding; external engines
        play the same rounded number).
      batch_size: the most games in one jitted call.
      opening_plies: random plies at the start of each pair of games.
      max_plies: the ply cap of a game (default: `players.default_max_plies(env)`; a run's
        evaluation passes the cap of its `selfplay.max_game_length`).
    """

    def __init__(self, env, num_games: int, *, batch_size: int = 512, opening_plies: int = 0,
                 max_plies: int | None = None):
        self.env = env
        self.runner = MatchRunner(env, num_games, batch_size=batch_size,
                                  opening_plies=int(opening_plies), max_plies=max_plies)
        self.opening_plies = int(opening_plies)
        self.max_plies = max_plies
        self._host_runner: external.ExternalMatchRunner | None = None

    @property
    def num_games(self) -> int:
        return self.runner.num_games

    @property
    def host_runner(self) -> external.ExternalMatchRunner:
        """The host-side runner for external engines (built on first use)."""
        if self._host_runner is None:
            self._host_runner = external.ExternalMatchRunner(
                self.env, self.runner.num_games, opening_plies=self.opening_plies,
                max_plies=self.max_plies)
        return self._host_runner

    def resolve(self, factory: PlayerFactory, opponents: list, *, variables=None,
                label: str = "current", sims: int | None = None,
                engines: dict[str, external.Engine] | None = None,
                skip_missing: bool = False, iteration: int | None = None) -> list:
        """Parsed opponents (`external.parse_opponents`) -> players and engines.

        Args:
          factory: builds the players (`PlayerFactory.build`; variables, label and sims as
            there).
          engines: engines already started, by name (made with `external.make_engine`
            otherwise).
          skip_missing: an unavailable checkpoint (none saved yet) gives None instead of
            raising FileNotFoundError.
          iteration: the network under test's, for `checkpoint:latest-K`.
        """
        out = []
        for opp in opponents:
            if isinstance(opp, external.ExternalOpponent):
                out.append((engines or {}).get(opp.name) or external.make_engine(opp, self.env))
                continue
            try:
                out.append(factory.build(opp, variables=variables, label=label, sims=sims,
                                         iteration=iteration))
            except FileNotFoundError:
                if not skip_missing:
                    raise
                out.append(None)  # e.g. checkpoint:latest-5 before enough checkpoints exist
        return out

    def play(self, me: Player | external.Engine, other: Player | external.Engine, key,
             progress: Callable[[int], None] | None = None,
             status: Callable[[str], None] | None = None,
             device: jax.Device | None = None,
             cancel: threading.Event | None = None) -> MatchResult:
        """One match of `me` against a player or an external engine. The key is consumed.

        Args:
          progress: called with the number of games after each batch (or finished game).
          status: called with a short line ("vs NAME", "vs NAME, ply T") as play goes on.
          device: where a match of two JAX players runs (default: the first local device).
          cancel: such a match on a CPU stops at the next ply once it is set.
        """
        if status is not None:
            status(f"vs {other.name}")
        on_ply = None if status is None else (
            lambda t, name=other.name: status(f"vs {name}, ply {t}"))
        if isinstance(other, external.Engine):
            return self.host_runner.play(me, other, key, progress=progress, on_ply=on_ply)
        if isinstance(me, external.Engine):  # the same games, seen from the other side
            return _swapped(self.host_runner.play(other, me, key, progress=progress,
                                                  on_ply=on_ply))
        return self.runner.play(me, other, key, progress=progress, device=device,
                                cancel=cancel)

    def play_all(self, me: Player | external.Engine, others: list, key, *,
                 progress: Callable[[int], None] | None = None,
                 status: Callable[[str], None] | None = None) -> list[MatchResult | None]:
        """`me` against each of `others`, opponent i with `fold_in(key, i)`; None entries
        (skipped opponents) give None. See `play_many`."""
        return self.play_many([None if other is None else (me, other, jax.random.fold_in(key, i))
                               for i, other in enumerate(others)], progress, status)

    def play_many(self, matches: list, progress: Callable[[int], None] | None = None,
                  status: Callable[[str], None] | None = None) -> list[MatchResult | None]:
        """Plays `(a, b, key)` matches (None entries give None), in order of the list.

        Matches of two JAX players run on the local devices at once, each device taking
        the next one as it is free; matches with an external engine then run one after
        the other, on the host. Results are in the order of `matches`."""
        results: list[MatchResult | None] = [None] * len(matches)
        if len(self.runner.devices) > 1:  # the matches of two JAX players, at once
            local = [i for i, m in enumerate(matches) if m is not None
                     and not any(isinstance(p, external.Engine) for p in m[:2])]
            cancel = threading.Event()  # set on an error or Ctrl-C: the others stop
            played = parallel.run_on_devices(
                [functools.partial(self._on, matches[i], progress, status, cancel)
                 for i in local], self.runner.devices, cancel)
            for i, r in zip(local, played, strict=True):
                results[i] = r
        for i, m in enumerate(matches):
            if m is not None and results[i] is None:
                results[i] = self.play(*m, progress, status)
        return results

    def _on(self, match: tuple, progress, status, cancel, device: jax.Device) -> MatchResult:
        return self.play(*match, progress, status, device=device, cancel=cancel)


def _swapped(r: MatchResult) -> MatchResult:
    """The match from the other player's point of view."""
    def flip(w: WDL) -> WDL:
        return WDL(w.losses, w.draws, w.wins)

    return dataclasses.replace(r, player=r.opponent, opponent=r.player, first=flip(r.second),
                               second=flip(r.first),
                               notes=f"{r.opponent}: {r.notes}" if r.notes else "")
