"""The trainer's periodic evaluation (`TrainingEvaluator`): matches, gating, Elo ladder."""

from __future__ import annotations

import time

import jax
import numpy as np

from az_jax import checkpoint as ckpt
from az_jax import learner
from az_jax.eval import elo, external
from az_jax.eval.gauntlet import Gauntlet
from az_jax.eval.match import DEFAULT_OPENING_PLIES, passes_gate
from az_jax.eval.players import Player, PlayerFactory, default_max_plies, is_fixed


class TrainingEvaluator:
    """The trainer's periodic evaluation: the current network against the baselines in
    `config.eval.opponents` and against the best network so far; gating; Elo ladder.

    `evaluator(train_state, best, iteration, key) -> (metrics, best)`, where `best` is the
    best network's `{"params": ..., "batch_stats": ...}` (batch_stats `{}` without batch
    norm).

    Metrics: `eval/<opponent>/score|win|draw|loss` per opponent (names with `:` -> `_`),
    `eval/best/score`, `eval/best/promoted` (1 when the current network became the best),
    `eval/elo` (the current network's rating on the ladder), `eval/seconds`, and `score`:
    the mean score against the fixed opponents of `config.eval.opponents`
    (`players.is_fixed`: not this run's own networks), the number that ranks checkpoints
    (absent without fixed opponents: a score against a moving target ranks nothing).

    Gating (`config.eval.gating`): the best is replaced by the current parameters only if
    `passes_gate(result vs best, config.eval.gating_threshold)`; without gating the best
    is simply the current parameters. Names on the ladder: `iter-<k>/mcts:<sims>`.

    `config.eval.opening_plies` (optional; default DEFAULT_OPENING_PLIES) sets the random
    opening. Unavailable `checkpoint:` opponents (none saved yet) are skipped;
    `checkpoint:latest-K` is K iterations before the network under test.

    External engines (`external.py`, e.g. `baghchal-minimax:D`) may be listed too: they
    are built here (an engine of another game or a missing package raises now, not
    mid-run) and play the same number of games in a host-side loop
    (`external.ExternalMatchRunner`); their metrics and Elo records are like the others'.
    The loop over the opponents is `gauntlet.Gauntlet`'s, as in `python -m az_jax.evaluate`.

    The evaluator belongs to the driver: it keeps the best network's name on the ladder
    between calls (the best's parameters travel in `best`). The trainer saves the name in
    each checkpoint's metadata (`best_name`) and hands it back on resume (`resume`), so a
    resumed run names its best as the run never killed did; for a checkpoint written
    before the name was kept, it is found on the first call from `elo.json`.
    """

    def __init__(self, setup, workdir):
        c = setup.config.eval
        self.env, self.net, self.workdir = setup.env, setup.net, str(workdir)
        self.sims = int(c.num_simulations)
        self.opponents = external.parse_opponents(c.opponents)
        self.gating = bool(c.gating)
        self.threshold = float(c.gating_threshold)
        opening = c.get("opening_plies", DEFAULT_OPENING_PLIES)
        self.gauntlet = Gauntlet(setup.env, int(c.num_games), opening_plies=int(opening),
                                 max_plies=default_max_plies(
                                     setup.env, setup.config.selfplay.get("max_game_length", 0)))
        self.runner = self.gauntlet.runner
        self.engines = {o.name: external.make_engine(o, setup.env) for o in self.opponents
                        if isinstance(o, external.ExternalOpponent)}
        self.factory = PlayerFactory(setup.env, setup.net, setup.search, self.workdir)
        for opp in self.opponents:  # another run's checkpoint: check it now, not mid-run
            if opp.kind == "checkpoint" and opp.workdir is not None:
                self.factory.build(opp, sims=self.sims)
        # A fresh run starts with the initial network as the best ("iter-0"); a resumed
        # run's best comes from its checkpoint (`resume`), else from elo.json's record.
        self._resumed = bool(ckpt.saved_steps(self.workdir))
        self._best_name: str | None = None if self._resumed else f"iter-0/mcts:{self.sims}"

    @property
    def best_name(self) -> str | None:
        """The best network's name on the ladder (None: a resumed run's, not known yet)."""
        return self._best_name

    def resume(self, best_name: str | None) -> None:
        """Takes the best network's name a checkpoint kept (`best_name`; None: it predates
        it), renamed with today's simulations: it plays with them from now on."""
        found = elo.player_iteration(best_name) if best_name else None
        if found is not None:
            self._best_name = f"iter-{found[0]}/mcts:{self.sims}"

    def close(self) -> None:
        """Ends the engines it started (a Gomocup brain gets END, then is killed after 1 s);
        the trainer calls it however training ends."""
        for engine in self.engines.values():
            engine.close()

    def _first_best_name(self, iteration: int) -> str:
        stored = elo.load(self.workdir).get("best")
        found = elo.player_iteration(stored) if stored else None
        if found is not None and found[0] < iteration:  # it plays with today's simulations
            return f"iter-{found[0]}/mcts:{self.sims}"
        if self._resumed:  # no record of which network it is
            return f"best-before-{iteration}/mcts:{self.sims}"
        return f"iter-0/mcts:{self.sims}"

    def __call__(self, train_state, best, iteration: int, key):
        t0 = time.perf_counter()
        variables = train_state.variables
        label = f"iter-{iteration}"
        me = self.factory.network(variables, label, self.sims)
        if self._best_name is None:
            self._best_name = self._first_best_name(iteration)
        metrics, records, scores = {}, [], []
        others = self.gauntlet.resolve(self.factory, self.opponents, variables=variables,
                                       label=label, sims=self.sims, engines=self.engines,
                                       skip_missing=True, iteration=iteration)
        best_player = Player(self._best_name, me.kind, me.act,
                             learner.variables(best["params"], best["batch_stats"]))
        against_best = best_player.name != me.name
        # One batch with the match against the best: on several devices they play at once.
        results = self.gauntlet.play_many(
            [None if o is None else (me, o, jax.random.fold_in(key, i))
             for i, o in enumerate(others)]
            + [(me, best_player, jax.random.fold_in(key, 10_000)) if against_best else None])
        res_best = results.pop()
        for opp, res in zip(self.opponents, results, strict=True):
            if res is None:
                continue  # e.g. checkpoint:latest-5 before enough checkpoints exist
            t = res.total
            metrics.update({f"eval/{opp.metric}/score": res.score,
                            f"eval/{opp.metric}/win": t.wins / t.games,
                            f"eval/{opp.metric}/draw": t.draws / t.games,
                            f"eval/{opp.metric}/loss": t.losses / t.games})
            if is_fixed(opp):
                scores.append(res.score)
            records.append(res.as_record())

        promoted = True
        if against_best:
            metrics["eval/best/score"] = res_best.score
            records.append(res_best.as_record())
            if self.gating:
                promoted = passes_gate(res_best, self.threshold)
        if promoted:
            best = {"params": train_state.params, "batch_stats": train_state.batch_stats}
            self._best_name = me.name
        metrics["eval/best/promoted"] = float(promoted)
        if jax.process_index() == 0:
            ratings = elo.record(self.workdir, records, iteration=iteration, source="train",
                                 best=self._best_name)
            if me.name in ratings:
                metrics["eval/elo"] = ratings[me.name].elo
        if scores:  # absent (not NaN) without fixed opponents, so no checkpoint ranks on it
            metrics["score"] = float(np.mean(scores))
        metrics["eval/seconds"] = time.perf_counter() - t0
        return metrics, best
