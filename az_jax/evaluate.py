"""Evaluate a trained network: matches against baselines and older checkpoints, the Elo
ladder, the Connect4 solver benchmark and PNG plots.

    python -m az_jax.evaluate --workdir runs/c4
    python -m az_jax.evaluate --workdir runs/c4 --games 200 --sims 64 \\
        --against random,mcts-rollout:800,checkpoint:latest-5 --solver-set c4_positions.txt
    python -m az_jax.evaluate --model connect4 --against '' --sims 64 \\
        --solver-set tests/data/connect4        # the nine stratified sets, one table
    python -m az_jax.evaluate --model gomoku_15x15 \\
        --tactics tests/data/gomoku_tactics_15x15.jsonl --sims 64,400
    python -m az_jax.evaluate --model gomoku_9x9 --brain 1s --against gomokubench:hard

The network, its game and its config are restored from the workdir (the newest checkpoint,
or --checkpoint). Results are added to <workdir>/elo.json (shared with the trainer) and the
plots (elo.png, win_rates.png, losses.png) are rewritten.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from az_jax import cli

_OPPONENT_HELP = """opponents (comma-separated):
  random                 uniformly random legal moves
  onestep                a winning move when there is one, else random
  greedy                 this network alone (argmax of its policy, no search)
  mcts:N                 this network with N simulations
  mcts-rollout:N         pure MCTS, no network: N simulations, random-playout values
  checkpoint:latest      the newest checkpoint of this workdir (searching with --sims)
  checkpoint:latest-K    the newest checkpoint at least K iterations older than the one
                         under test (--checkpoint; default the latest)
  checkpoint:ITER        the checkpoint of iteration ITER
  checkpoint:DIR[@ITER]  a checkpoint of another run of the same game (latest by default);
                         a conv-head network (network.head=conv) of another board size too
  baghchal-minimax:D     the PyPI baghchal package's minimax engine at depth D (Bagh-Chal
                         only; a host-side Python loop, see az_jax/eval/external.py)
  gomokubench:LEVEL      the PyPI gomokubench alpha-beta, LEVEL easy|standard|hard
                         (freestyle Gomoku only)
  bitbully:D|perfect     the optional PyPI Connect4 solver bitbully (AGPL; pip install
                         bitbully): D plies of search, or perfect play (Connect4 only)
  gomocup[OPTS]:COMMAND  a Gomocup/piskvork brain run as COMMAND (Gomoku only), e.g.
                         'gomocup[200ms]:python -m az_jax.gomocup --model gomoku_9x9';
                         OPTS, ';'-separated: time per move (200ms, 1s; default 1s),
                         grace=TIME (default max(1s, half the move time)), start=TIME
                         (default 180s); a comma inside COMMAND is written \\,. Crashes,
                         timeouts, garbage, ERROR answers and illegal moves lose the game
                         and are counted next to the result

Each match plays --games games, half with each colour; the score is (W + D/2) / games with
a 95% Wilson interval. Elo: Bradley-Terry fit over all matches in elo.json, random = 0.
Exit status 2 with a one-line error for bad input (unknown opponent, missing workdir,
checkpoint of another game, malformed solver file, a tactics suite of another board
size or with a bad line, a damaged elo.json: before any game). Ctrl-C (status 130) and
SIGTERM (143) end the Gomocup brains too (END, then killed after 1 s)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m az_jax.evaluate", description=__doc__.split("\n\n")[0],
        epilog=_OPPONENT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workdir", help="the training run's directory")
    src.add_argument("--model", help="a shipped model by name (az_jax/models/<name>); "
                                     "results are printed, not stored")
    p.add_argument("--against", default=None,
                   help="opponents, comma-separated (default: the run's eval.opponents); "
                        "'' plays no match (e.g. for the solver benchmark alone)")
    p.add_argument("--games", type=int, default=None,
                   help="games per opponent, even (default: the run's eval.num_games)")
    p.add_argument("--sims", type=_sims, default=None,
                   help="search simulations of the network under test and of checkpoint "
                        "opponents (default: the run's eval.num_simulations); with "
                        "--tactics a comma-separated list, e.g. 64,400")
    p.add_argument("--checkpoint", type=int, default=None, metavar="STEP",
                   help="the iteration to evaluate (default: the newest checkpoint)")
    p.add_argument("--solver-set", action="append", default=[], metavar="FILE",
                   help="Connect4 solver benchmark file, or a directory of them such as "
                        "the stratified sets tests/data/connect4 (repeatable); see "
                        "az_jax/eval/connect4_positions.py for the format")
    p.add_argument("--tactics", default=None, metavar="FILE",
                   help="Gomoku tactics suite (.jsonl, see az_jax/eval/tactics.py): solve rate "
                        "per category, network alone and with search at each --sims; plays no "
                        "match unless --against is given")
    p.add_argument("--tactics-limit", type=int, default=None, metavar="N",
                   help="with --tactics: only the first N positions of each category")
    p.add_argument("--opening-plies", type=int, default=None,
                   help="random plies at the start of each pair of games (default 2)")
    p.add_argument("--search-tactics", default=None, metavar="RULE",
                   help="the evaluation search's root tactics for the network under test "
                        "and this run's mcts / checkpoint opponents, which share its search "
                        "(none, win, win_and_block, threats; default: the run's "
                        "search.eval_tactics, else threats; README 'Tactical safety'). "
                        "A value other than the run's goes into their names on the Elo "
                        "ladder, e.g. iter-40/mcts:64[tactics=none]; likewise the three "
                        "flags below")
    p.add_argument("--node-tactics", choices=("on", "off"), default=None,
                   help="what one move ahead decides, at every node of the evaluation "
                        "search's tree (default: the run's search.node_tactics, else on; "
                        "README 'Tactical safety')")
    p.add_argument("--threat-depth", type=int, default=None, metavar="D",
                   help="\"threats\": the longest forced win by continuous threats looked for, "
                        "in the mover's moves (default: the run's search.threat_depth, else 4; "
                        "each more costs ~3x; README 'Tactical safety')")
    p.add_argument("--value-scale", type=float, default=None, metavar="S",
                   help="Gumbel: the weight of the evaluation search's values against the "
                        "network's prior (search.eval_value_scale; default: the run's, else "
                        "mctx's 0.1; README 'Tactical safety')")
    p.add_argument("--brain", default=None, metavar="TIME",
                   help="Gomoku: the network under test plays through its own Gomocup "
                        "brain (python -m az_jax.gomocup, a subprocess) at TIME a move "
                        "(e.g. 1s, 200ms), as in a tournament: its deep search, threat "
                        "search and clock, one game at a time. The brain is warmed up "
                        "(its searches compiled) before the first game; --sims then "
                        "applies to this run's checkpoint opponents only (mcts:N plays N); "
                        "no Elo is recorded")
    p.add_argument("--batch-size", type=int, default=256,
                   help="games per jitted call; --games is rounded up to a multiple")
    p.add_argument("--seed", type=cli.integer(0, cli.MAX_SEED), default=0,
                   help="seed of the games' keys, 0 to 4294967295 (default 0)")
    p.add_argument("--no-elo", action="store_true", help="do not update elo.json")
    p.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _variant(args, search_config) -> str:
    """The search flags that differ from the run's evaluation search, as a suffix for the
    names of the players that search with them ("" when none does): "[tactics=none]"."""
    from az_jax import search as search_lib

    run = {"tactics": search_config.get("eval_tactics", search_lib.DEFAULT_EVAL_TACTICS),
           "node_tactics": "on" if search_config.get("node_tactics", True) else "off",
           "threat_depth": search_config.get("threat_depth", search_lib.DEFAULT_THREAT_DEPTH),
           "value_scale": search_config.get("eval_value_scale",
                                            search_lib.DEFAULT_VALUE_SCALE)}
    given = {"tactics": args.search_tactics, "node_tactics": args.node_tactics,
             "threat_depth": args.threat_depth, "value_scale": args.value_scale}
    changed = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
               for k, v in given.items() if v is not None and v != run[k]]
    return f"[{','.join(changed)}]" if changed else ""


_sims = cli.counts(1, cli.MAX_SIMULATIONS)  # '64' or '64,400' -> [64, 400]


def format_results(results, header: str = "") -> str:
    """A table of MatchResults (W-D-L from the network's point of view)."""
    w = max([len("opponent")] + [len(r.opponent) for r in results])
    lines = [header] if header else []
    lines.append(f"{'opponent':<{w}}  {'games':>5}  {'as first':>10}  {'as second':>10}  "
                 f"{'total':>11}  {'score':>5}  {'95% CI':>13}")
    for r in results:
        lo, hi = r.interval()
        note = f"  ({r.unfinished} unfinished = draws)" if r.unfinished else ""
        note += f"  ({r.notes})" if r.notes else ""
        lines.append(f"{r.opponent:<{w}}  {r.total.games:5d}  {str(r.first):>10}  "
                     f"{str(r.second):>10}  {str(r.total):>11}  {r.score:5.3f}  "
                     f"[{lo:.3f}, {hi:.3f}]{note}")
    return "\n".join(lines)


def run(args) -> None:
    """The evaluation; raises ValueError / FileNotFoundError / ImportError on bad input.
    Every engine it starts (a Gomocup brain) is closed however it ends: END, then killed."""
    engines: list = []
    try:
        _run(args, engines)
    finally:
        for engine in engines:
            engine.close()


def _run(args, engines: list) -> None:
    """The evaluation of `run`; appends each engine it starts to `engines` (for `run` to
    close)."""
    from az_jax.checkpoint import quiet_logs

    quiet_logs()
    if args.workdir is not None and not args.workdir.strip():
        raise ValueError("--workdir is empty: name a training run's folder (or --model NAME)")
    if args.model is not None:
        from az_jax.checkpoint import MODELS_DIR, shipped_models

        if args.model not in shipped_models():
            raise ValueError(f"no shipped model {args.model!r}; available: "
                             f"{', '.join(shipped_models()) or 'none'}")
        args.workdir, args.no_elo, args.no_plots = str(MODELS_DIR / args.model), True, True
    workdir = Path(args.workdir).expanduser()
    if not workdir.is_dir():
        raise FileNotFoundError(f"no workdir {workdir}: pass the --workdir of a training run")
    if not (args.no_elo and args.no_plots) and not os.access(workdir, os.W_OK):
        raise ValueError(f"{workdir} is not writable, and the Elo ladder (elo.json) and its "
                         "plots are written there: add --no-elo --no-plots to evaluate "
                         "without writing")
    from az_jax.eval import elo, external, gauntlet, match, players

    opponents = external.parse_opponents(args.against) if args.against is not None else None
    suite = None
    if args.tactics is not None:
        from az_jax.eval import tactics

        suite = tactics.load(args.tactics)  # a bad file fails before anything is restored
        if opponents is None:
            opponents = []
    if args.tactics_limit is not None and args.tactics is None:
        raise ValueError("--tactics-limit limits the --tactics suite: give --tactics FILE too")
    if args.tactics_limit is not None and args.tactics_limit < 1:
        raise ValueError(f"--tactics-limit={args.tactics_limit} must be >= 1")
    sims_list = args.sims or []
    if len(sims_list) > 1 and (opponents is None or opponents):
        raise ValueError(f"--sims={','.join(map(str, sims_list))}: matches take one count; "
                         f"a list is for --tactics (pass --against '' to play no match)")
    if args.games is not None and args.games < 2:
        raise ValueError(f"--games={args.games}: play at least 2 games")
    if args.opening_plies is not None and args.opening_plies < 0:
        raise ValueError(f"--opening-plies={args.opening_plies} must be >= 0")
    if args.threat_depth is not None and args.threat_depth < 2:
        raise ValueError(f"--threat-depth={args.threat_depth} must be >= 2 (a forced win "
                         "of two moves: a threat and the win)")
    if args.value_scale is not None and not (0 < args.value_scale < float("inf")):
        raise ValueError(f"--value-scale={args.value_scale} must be a finite number > 0")
    if args.batch_size < 2:
        raise ValueError(f"--batch-size={args.batch_size} must be >= 2")
    brain_ms = None
    if args.brain is not None:
        brain_ms = external.duration_ms(args.brain, "--brain")
        if brain_ms < 1:
            raise ValueError(f"--brain={args.brain}: the time per move must be > 0")
        if (args.search_tactics is not None or args.node_tactics is not None
                or args.threat_depth is not None or args.value_scale is not None):
            raise ValueError("--brain plays with the brain's own search settings: leave out "
                             "--search-tactics, --node-tactics, --threat-depth and "
                             "--value-scale")
        args.no_elo = True
    if not args.no_elo:  # a damaged ladder is an error now, not after every match
        try:
            elo.load(workdir)
        except ValueError as e:
            raise ValueError(f"{e} (or evaluate with --no-elo)") from None
    from az_jax.eval import solver_bench

    sets = solver_bench.load_sets(args.solver_set) if args.solver_set else {}

    import jax
    from absl import logging

    logging.set_verbosity(logging.ERROR)  # orbax logs (read-only manager...) are noise here
    from az_jax import checkpoint as ckpt
    from az_jax import plots
    from az_jax import search as search_lib

    if args.search_tactics is not None and args.search_tactics not in search_lib.TACTICS:
        raise ValueError(f"--search-tactics={args.search_tactics!r}; accepted: "
                         f"{', '.join(search_lib.TACTICS)}")
    restored = ckpt.restore(workdir, step=args.checkpoint)
    env, config = restored.env, restored.config
    variant = _variant(args, config.search)
    with config.unlocked():
        if args.search_tactics is not None:
            config.search.eval_tactics = args.search_tactics
        if args.node_tactics is not None:
            config.search.node_tactics = args.node_tactics == "on"
        if args.threat_depth is not None:
            config.search.threat_depth = args.threat_depth
        if args.value_scale is not None:
            config.search.eval_value_scale = args.value_scale
    if sets and env.id != "connect4":
        raise ValueError(f"the solver benchmark is for connect4; the checkpoint in {workdir} "
                         f"is for {env.id}")
    if suite is not None:
        tactics.check_env(suite, env, where=args.tactics)
    if opponents is None:
        opponents = external.parse_opponents(config.eval.opponents)
    sims = int(sims_list[0] if sims_list else config.eval.num_simulations)
    games = int(args.games or config.eval.num_games)
    opening = (args.opening_plies if args.opening_plies is not None
               else config.eval.get("opening_plies", match.DEFAULT_OPENING_PLIES))
    search = search_lib.make_search(env, restored.net, config.search)
    factory = players.PlayerFactory(env, restored.net, search, str(workdir), variant)
    label = f"iter-{restored.iteration}"
    me = factory.network(restored.variables, label, sims)
    brain = None
    if brain_ms is not None:
        if env.id != "gomoku":
            raise ValueError(f"--brain: the Gomocup brain plays gomoku only, not {env.id}")
        brain = BrainStats()
        me = start_brain(env, restored.path, brain_ms, brain, f"{label}-brain[{args.brain}]")
        engines.append(me)
    # External engines play the same number of games, in a host-side loop.
    max_plies = players.default_max_plies(env, config.selfplay.get("max_game_length", 0))
    games_vs = gauntlet.Gauntlet(env, games, batch_size=args.batch_size,
                                 opening_plies=int(opening), max_plies=max_plies)
    runner = games_vs.runner
    # Starts the engines here rather than in `resolve`, so that `run` closes each one
    # (also when the next fails to start); resolves checkpoints: errors before any game.
    started = {}
    for opp in opponents:
        if isinstance(opp, external.ExternalOpponent) and opp.name not in started:
            started[opp.name] = external.make_engine(opp, env)
            engines.append(started[opp.name])
    others = games_vs.resolve(factory, opponents, variables=restored.variables, label=label,
                              sims=sims, engines=started, iteration=restored.iteration)
    print(f"{workdir}: {env!r} {env.version}, checkpoint {restored.iteration}; "
          f"network under test: {me.name}", flush=True)
    if runner.num_games != games:
        print(f"playing {runner.num_games} games per opponent (--games rounded up to an even "
              f"multiple of the batch)", flush=True)

    bar = None
    if not args.quiet and others:
        from tqdm import tqdm

        bar = tqdm(total=runner.num_games * len(others), unit="game", dynamic_ncols=True,
                   desc="matches", disable=None)  # None: no bar without a terminal
    key = jax.random.PRNGKey(args.seed)
    t0 = time.perf_counter()
    results = games_vs.play_all(me, others, key, progress=None if bar is None else bar.update,
                                status=None if bar is None else bar.set_postfix_str)
    if bar is not None:
        bar.close()
    for engine in engines:  # done: no brain idles through the benchmarks and plots
        engine.close()
    if results:
        header = (f"\n{me.name}: {runner.num_games} games per opponent, colours alternated, "
                  f"{runner.opening_plies} random opening plies ({time.perf_counter() - t0:.0f}s)")
        print(format_results(results, header))
    if brain is not None:
        print(brain.summary())

    if results and not args.no_elo:
        # What besides the seed decided each match's games: another deal is other games.
        deals = [f"{runner.num_games} games, {runner.opening_plies} opening plies, batch "
                 f"{runner.batch}, opponent {i + 1}, cap {max_plies} plies"
                 for i in range(len(results))]
        ratings = elo.record(workdir, [r.as_record() for r in results],
                             iteration=restored.iteration, source="evaluate", seed=args.seed,
                             deals=deals)
        shown = {me.name, *(o.name for o in others)}
        zero = f"{elo.ANCHOR} = 0" if elo.ANCHOR in ratings else "mean 0: no random played"
        print(f"\nElo (Bradley-Terry over all {elo.FILENAME} matches, {zero}):")
        print(elo.format_table(ratings, shown))

    if sets:
        agents = [factory.random(), factory.greedy(restored.variables, label), me]
        rows = solver_bench.benchmark(env, agents, sets, jax.random.fold_in(key, 999_999),
                                      progress=not args.quiet)
        print("\nConnect4 solver benchmark (mistake = a move with a worse win/draw/loss "
              "outcome than the best):")
        print(solver_bench.format_rows(rows) if len(sets) == 1
              else solver_bench.format_table(rows))
        print("\n" + solver_bench.format_horizons(rows))

    if suite is not None:
        tactics.run_cli(suite, args.tactics, restored, sims_list or [sims],
                        jax.random.fold_in(key, 888_888), batch_size=args.batch_size,
                        limit=args.tactics_limit, progress=not args.quiet)

    if not args.no_plots:
        paths = plots.write_training_plots(workdir)
        if paths:
            print("\nplots: " + ", ".join(str(p) for p in paths))


class BrainStats:
    """What the brain's MESSAGE lines say about its moves (`--brain`)."""

    _SIMS = re.compile(r"\bsims (\d+)(?: \(one search of (\d+)\))?.* time (\d+) ms")

    def __init__(self):
        self.sims: list[int] = []
        self.deep: list[int] = []
        self.ms: list[int] = []
        self.tactical = 0
        self.last = ""

    def __call__(self, line: str) -> None:
        self.last = line
        m = self._SIMS.search(line)
        if m:
            self.sims.append(int(m.group(1)))
            self.deep.append(int(m.group(2) or 0))
            self.ms.append(int(m.group(3)))
        elif "tactical move" in line:
            self.tactical += 1

    def reset(self) -> None:
        self.__init__()

    def summary(self) -> str:
        import numpy as np

        if not self.sims:
            return f"brain: no searched move ({self.tactical} one-ply tactical moves)"
        deep = sum(d > 0 for d in self.deep)
        return (f"brain: {len(self.sims)} searched moves, simulations per move median "
                f"{int(np.median(self.sims))} (min {min(self.sims)}), {deep} starting with "
                f"one deep search (median {int(np.median([d for d in self.deep if d] or [0]))}),"
                f" search time median {int(np.median(self.ms))} ms, max {max(self.ms)} ms; "
                f"{self.tactical} one-ply tactical moves (a win at once, or no search)")


def start_brain(env, checkpoint: str, turn_ms: int, stats: BrainStats, name: str,
                warm_s: float = 600.0):
    """The network's own Gomocup brain (`python -m az_jax.gomocup --checkpoint ...`) as an
    `external.Engine` named `name`, warmed up: it is asked moves in one position until
    one is searched (and, on turns long enough for one, starts with a deep search), so
    that no game pays for its compiles.

    Raises:
      ValueError: the brain cannot start, or is not warm within `warm_s`.
    """
    import dataclasses

    from az_jax import gomocup
    from az_jax.eval import external

    spec = external.BrainSpec((sys.executable, "-m", "az_jax.gomocup", "--checkpoint",
                               str(checkpoint)), turn_ms=turn_ms)
    engine = dataclasses.replace(external.gomocup(env, spec, log=stats), name=name)
    deep = gomocup.searches_deep(turn_ms)
    center = (env.size // 2) * env.size + env.size // 2
    deadline = time.monotonic() + warm_s
    print(f"warming up the brain ({turn_ms} ms a move"
          + (", until its deep search is compiled" if deep else "") + ")", flush=True)
    try:
        while True:
            try:
                engine.brain.move([center])
            except external.EngineForfeit as e:
                raise ValueError(f"--brain: the brain failed while warming up: {e}") from None
            ready = stats.sims and (not deep or stats.deep[-1] > 0)
            if ready:
                break
            if time.monotonic() > deadline:
                raise ValueError(f"--brain: the brain was not ready after {warm_s:g} s of "
                                 f"warming up (last: {stats.last[:200]!r})")
            time.sleep(0.2)
    except BaseException:  # also Ctrl-C / SIGTERM: the caller never gets the engine
        engine.close()
        raise
    stats.reset()
    return engine


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with cli.sigterm_as_interrupt():  # SIGTERM too ends the brains `run` started
            run(args)
    except (ValueError, FileNotFoundError, ImportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        terminated = isinstance(e, cli.Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    return 0


if __name__ == "__main__":
    from az_jax import parallel_setup

    parallel_setup.use_all_cpu_cores()  # matches against several opponents play at once
    parallel_setup.use_compilation_cache()  # as train.py: a second evaluation starts at once
    status = main()
    from az_jax.checkpoint import quiet_exit  # loaded by then (not before: a fast --help)

    sys.exit(quiet_exit(status))
