"""The Connect4 solver benchmark: how often does an agent pick a move that is worse than
the best one (win > draw > loss) on solved positions?

    python -m az_jax.eval.solver_bench make --out c4_positions.txt --n 1000 --min-moves 8 \\
        --max-moves 20                                  # needs bitbully (AGPL, optional)
    python -m az_jax.eval.solver_bench evaluate c4_positions.txt --workdir runs/c4 --sims 64
    python -m az_jax.eval.solver_bench make-sets --out tests/data/connect4  # the 9 stratified sets
    python -m az_jax.eval.solver_bench make-sets --out tests/data/connect4_heldout --seed 1 \
        --exclude tests/data/connect4                   # a second collection, disjoint
    python -m az_jax.eval.solver_bench evaluate tests/data/connect4 --model connect4 --sims 64

The stratified sets (game phase x difficulty, 200 positions each, from games between agents
of varied strength) are described in az_jax/eval/solver_sets.py.

The file format and the solver that labels positions: az_jax/eval/connect4_positions.py.

A move is a *mistake* when another legal move has a strictly better outcome (the sign of
its column score). The benchmark reports the mistake rate over all positions and over the
*critical* ones (where at least one legal move is worse than the best; elsewhere no
mistake is possible), and each agent's mistakes by how many plies ahead they are decided
(`mistake_plies`: what a search could see, against what only the network can know).
Files without column scores are labelled on the fly when `bitbully` is installed (a
perfect Connect4 solver on PyPI, AGPL; optional) and are rejected otherwise. `make`
writes files with column scores, so that the benchmark runs without bitbully afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from az_jax import MAX_SEED, MAX_SIMULATIONS
from az_jax.argtypes import counts, integer
from az_jax.eval import solver_sets
from az_jax.eval.connect4_positions import (
    _BITBULLY_HINT,
    COLS,
    MAX_SCORE,
    Position,
    _bar,
    format_positions,
    generate,
    label,
    read_positions,
    recover_swap,
    swap_leftovers,
    write_files,
    write_positions,
)


# =========================================================================== scoring
class MistakeStats(NamedTuple):
    positions: int
    critical: int  # positions where some legal move is worse than the best
    mistakes: int  # moves worse than the best (illegal moves count as mistakes)

    @property
    def rate(self) -> float:
        return self.mistakes / self.positions if self.positions else float("nan")

    @property
    def critical_rate(self) -> float:
        return self.mistakes / self.critical if self.critical else float("nan")


def count_mistakes(positions: Sequence[Position], actions) -> MistakeStats:
    """Mistakes of `actions` (0-based columns, one per position)."""
    actions = np.asarray(actions).reshape(-1)
    if len(actions) != len(positions):
        raise ValueError(f"{len(actions)} actions for {len(positions)} positions")
    critical = mistakes = 0
    for p, a in zip(positions, actions, strict=True):
        out = p.outcomes()
        legal = out > -2
        best, worst = out[legal].max(), out[legal].min()
        critical += int(worst < best)
        a = int(a)
        mistakes += int(not (0 <= a < COLS) or not legal[a] or out[a] < best)
    return MistakeStats(len(positions), critical, mistakes)


def mistake_plies(position: Position, action: int) -> int | None:
    """How far ahead a mistake is decided: the plies from `position` (the mistaken move
    included) to the end of the fastest perfect line that punishes it. None where `action`
    is no mistake, or not a legal column.

    A win at once missed: 1, whatever the move gives away (a search of one ply sees it).
    Else a move that loses: until the opponent's winning move (Pons's scale: he wins with
    his `MAX_SCORE - |score|`-th stone), and a draw where a win was there: until the
    fastest win given away would have been played. Short horizons are what a search can
    see (1: a win at once missed; 2: the reply wins at once); long ones take a network that
    knows the game.
    """
    out = position.outcomes()
    legal = out > -2
    if not (0 <= action < COLS) or not legal[action] or out[action] >= out[legal].max():
        return None
    n = len(position.moves)
    mine, theirs = n // 2, (n + 1) // 2  # stones on the board: the mover's, the opponent's
    best = max(s for s in position.column_scores if s is not None)
    # Where `best` wins: when that win comes (1: the mover's next stone wins).
    win_given_away = 2 * (MAX_SCORE - best - mine) - 1
    score = position.column_scores[action]
    if score < 0 and win_given_away > 1:
        return 2 * (MAX_SCORE + score - theirs)
    return win_given_away


# The buckets of `mistake_horizons` (plies, upper bounds) and their labels: 1, a mistake
# where the mover could win at once; 2, else a move the reply wins at once.
HORIZONS = ((1, "1 (a win missed)"), (2, "2 (answered at once)"), (4, "3-4"), (8, "5-8"),
            (16, "9-16"), (MAX_SCORE * 2, "17+"))


def mistake_horizons(positions: Sequence[Position], actions) -> dict[str, int]:
    """Mistakes of `actions` per horizon bucket (`HORIZONS`, see `mistake_plies`);
    "illegal" counts the moves that are not legal columns."""
    counts = dict.fromkeys([label for _, label in HORIZONS] + ["illegal"], 0)
    for p, a in zip(positions, np.asarray(actions).reshape(-1), strict=True):
        a = int(a)
        if not (0 <= a < COLS) or p.outcomes()[a] == -2:
            counts["illegal"] += 1
            continue
        plies = mistake_plies(p, a)
        if plies is not None:
            counts[next(label for bound, label in HORIZONS if plies <= bound)] += 1
    return counts


def format_horizons(rows: list[dict]) -> str:
    """Per agent, its mistakes over all of `rows`' files by how far ahead each is decided
    (`mistake_plies`): a search sees the short ones, the long ones need the network."""
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    labels = [label for _, label in HORIZONS]
    wa = max(len("agent"), *(len(a) for a in agents))
    lines = ["mistakes by how many plies ahead they are decided (the mistake included):",
             f"{'agent':<{wa}}  " + "  ".join(f"{label:>{max(5, len(label))}}"
                                               for label in labels)]
    for a in agents:
        total = {label: sum(r["horizons"][label] for r in rows if r["agent"] == a)
                 for label in labels}
        lines.append(f"{a:<{wa}}  " + "  ".join(f"{total[label]:>{max(5, len(label))}d}"
                                                for label in labels))
    return "\n".join(lines)


def random_mistake_rate(positions: Sequence[Position]) -> float:
    """The expected mistake rate of a uniformly random legal player."""
    rates = []
    for p in positions:
        out = p.outcomes()
        legal = out[out > -2]
        rates.append(np.mean(legal < legal.max()))
    return float(np.mean(rates))


def states_from_moves(env, positions: Sequence[Position]):
    """Batched env states of the positions (one jitted replay of padded move lists)."""
    if env.id != "connect4":
        raise ValueError(f"the solver benchmark is for connect4, not {env.id}")
    return replay(env, [p.actions for p in positions])


def replay(env, move_lists: Sequence[Sequence[int]]):
    """Batched env states after each list of env actions from the initial state (one
    jitted scan over the lists padded with -1, "no move"). Any deterministic game."""
    length = max(1, max(len(m) for m in move_lists))
    length = -(-length // 8) * 8  # a few padded lengths: one compile serves most calls
    moves = np.full((len(move_lists), length), -1, np.int32)
    for i, m in enumerate(move_lists):
        moves[i, :len(m)] = m
    return _replay_fn(env)(moves)


@functools.lru_cache(maxsize=8)
def _replay_fn(env):
    """The jitted replay for one env object (built once: jit caches by shape from then on)."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(moves):  # int32[B, T], -1 = no move
        states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), moves.shape[0]))

        def body(states, a):
            nxt = jax.vmap(env.step)(states, jnp.maximum(a, 0))
            keep = a >= 0
            return jax.tree.map(
                lambda n, s: jnp.where(keep.reshape((-1,) + (1,) * (s.ndim - 1)), n, s),
                nxt, states), None

        states, _ = jax.lax.scan(body, states, moves.T)
        return states

    return run


def agent_actions(agent, states, key, batch_size: int = 256, progress=None,
                  pad: bool = False, devices=None) -> np.ndarray:
    """The agent's moves in every position of `states` (in jitted batches of a fixed size).

    Args:
      agent: an `players.Player`.
      states: batched env states (e.g. from `states_from_moves`).
      key: consumed.
      batch_size: positions per jitted call (fewer positions make a smaller batch, unless
        `pad`: then every call has `batch_size`, so sets of other sizes reuse one compile).
      progress: optional callable, called with the number of positions done per batch.

    The batches run on `devices` at once (default `parallel.job_devices()`: on a CPU, its
    cores as devices, `parallel_setup.use_all_cpu_cores`); batch i uses the key
    `fold_in(key, i)` wherever it runs, so the moves are those of one device.
    """
    import jax
    import jax.numpy as jnp

    from az_jax import parallel

    n = int(states.current_player.shape[0])
    batch = batch_size if pad else min(batch_size, n)
    act = jax.jit(agent.act)
    starts = list(range(0, n, batch))
    place = devices is not None  # (else on the default device, uncommitted, as ever)
    devices = list(parallel.job_devices() if devices is None else devices)[:len(starts)]
    place = place or len(devices) > 1
    params = {None: agent.params} if not place else {
        d: jax.device_put(parallel.local_replica(agent.params), d) for d in devices}

    def one(i, start, device):
        idx = np.minimum(np.arange(start, start + batch), n - 1)  # pad with the last one
        part = jax.tree.map(lambda x: x[jnp.asarray(idx)], states)
        k = jax.random.fold_in(key, i)
        if device is not None:
            part, k = jax.device_put((part, k), device)
        a = np.asarray(act(params[device], part, k))[: min(batch, n - start)]
        if progress is not None:
            progress(len(a))
        return a

    jobs = [functools.partial(one, i, start) for i, start in enumerate(starts)]
    if not place:
        return np.concatenate([job(None) for job in jobs])
    return np.concatenate(parallel.run_on_devices(jobs, devices))


def benchmark(env, agents, files: dict[str, Sequence[Position]], key,
              progress: bool = False) -> list[dict]:
    """Mistake rates of each agent on each file.

    Returns:
      rows {"file", "agent", "positions", "critical", "mistakes", "rate", "critical_rate",
      "random_rate", "horizons"} (random_rate: what a uniformly random player would get;
      horizons: `mistake_horizons`).
    """
    import jax

    from az_jax import parallel

    rows = []
    # One batch size for every file (the last batch of each padded), so each agent's search
    # compiles once: a set of 183 positions after sets of 200 compiled it again (~17 s).
    batch = min(256, max((len(p) for p in files.values()), default=1))
    total = sum(len(p) for p in files.values()) * len(agents)
    bar = _bar(total, progress, "solver set")
    devices = parallel.job_devices()

    def actions_of(agent, states, k, device):
        return agent_actions(agent, states, k, batch_size=batch, pad=True,
                             progress=None if bar is None else bar.update,
                             devices=None if len(devices) < 2 else [device])

    runs, jobs = [], []  # one a (file, agent), with its own key: on a CPU, on every core
    for f_i, (name, positions) in enumerate(files.items()):
        states = states_from_moves(env, positions)
        for a_i, agent in enumerate(agents):
            k = jax.random.fold_in(jax.random.fold_in(key, f_i), a_i)
            runs.append((name, positions, agent))
            jobs.append(functools.partial(actions_of, agent, states, k))
    for (name, positions, agent), actions in zip(
            runs, parallel.run_on_devices(jobs, devices), strict=True):
        s = count_mistakes(positions, actions)
        rows.append({"file": name, "agent": agent.name, "positions": s.positions,
                     "critical": s.critical, "mistakes": s.mistakes, "rate": s.rate,
                     "critical_rate": s.critical_rate,
                     "random_rate": random_mistake_rate(positions),
                     "horizons": mistake_horizons(positions, actions)})
    if bar is not None:
        bar.close()
    return rows


def format_rows(rows: list[dict]) -> str:
    """A text table of `benchmark` rows; E[rand] is a random player's expected rate."""
    if not rows:
        return "(no results)"
    wf = max(len("file"), *(len(Path(r["file"]).name) for r in rows))
    wa = max(len("agent"), *(len(r["agent"]) for r in rows))
    lines = [f"{'file':<{wf}}  {'agent':<{wa}}  {'positions':>9}  {'critical':>8}  "
             f"{'mistakes':>8}  {'rate':>6}  {'crit.rate':>9}  {'E[rand]':>7}"]
    for r in rows:
        lines.append(f"{Path(r['file']).name:<{wf}}  {r['agent']:<{wa}}  {r['positions']:9d}  "
                     f"{r['critical']:8d}  {r['mistakes']:8d}  {r['rate']:6.1%}  "
                     f"{r['critical_rate']:9.1%}  {r['random_rate']:7.1%}")
    return "\n".join(lines)


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files as given; a directory stands for its `*.txt` files (the nine stratified sets
    in their order beginning_easy ... end_hard first, then any others by name).

    Raises:
      FileNotFoundError: a directory without .txt files.
    """
    order = {name: i for i, name in enumerate(solver_sets.set_names())}
    out = []
    for path in paths:
        p = Path(path)
        if not p.exists() and (left := swap_leftovers(p)):
            raise FileNotFoundError(
                f"no {p}: make-sets was stopped while it replaced that folder, and its "
                f"sets wait in {left[0]}. Run make-sets with --out {p} again (it puts "
                f"them back first), or: mv {left[0]} {p}")
        if not p.is_dir():
            out.append(str(path))
            continue
        files = sorted(p.glob("*.txt"), key=lambda f: (order.get(f.stem, len(order)), f.name))
        if not files:
            raise FileNotFoundError(f"no solver set files (*.txt) in the directory {p}")
        out += [str(f) for f in files]
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """One row per set (and per phase and over all sets when the files are stratified
    sets): {"set", "positions", "critical", "random_rate", "rates": {agent: rate}}.

    Rates over several files pool their positions (a mistake count over a position count).
    """
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    files = list(dict.fromkeys(r["file"] for r in rows))

    def pooled(name, chosen):
        sel = [r for r in rows if r["file"] in chosen]
        first = [r for r in sel if r["agent"] == agents[0]]
        n = sum(r["positions"] for r in first)
        rates = {}
        for a in agents:
            mine = [r for r in sel if r["agent"] == a]
            rates[a] = sum(r["mistakes"] for r in mine) / n if n else float("nan")
        return {"set": name, "positions": n, "critical": sum(r["critical"] for r in first),
                "random_rate": (sum(r["random_rate"] * r["positions"] for r in first) / n
                                if n else float("nan")), "rates": rates}

    out = [pooled(Path(f).stem, [f]) for f in files]
    if len(files) > 1:
        for ph in solver_sets.PHASES:
            chosen = [f for f in files if Path(f).stem.startswith(ph + "_")]
            if chosen and len(chosen) < len(files):
                out.append(pooled(f"{ph} (all)", chosen))
        out.append(pooled("all sets", files))
    return out


def format_table(rows: list[dict]) -> str:
    """One table: a row per set (then per phase and over all sets), a mistake-rate column
    per agent; E[rand] is a uniformly random player's expected rate."""
    if not rows:
        return "(no results)"
    summary = summarize(rows)
    agents = list(summary[0]["rates"])
    ws = max(len("set"), *(len(r["set"]) for r in summary))
    wa = [max(9, len(a)) for a in agents]
    lines = [f"{'set':<{ws}}  {'positions':>9}  {'critical':>8}  {'E[rand]':>7}  "
             + "  ".join(f"{a:>{w}}" for a, w in zip(agents, wa, strict=True))]
    for r in summary:
        lines.append(f"{r['set']:<{ws}}  {r['positions']:9d}  {r['critical']:8d}  "
                     f"{r['random_rate']:7.1%}  " + "  ".join(
                         f"{r['rates'][a]:>{w}.1%}" for a, w in zip(agents, wa, strict=True)))
    return "\n".join(lines)


def load_sets(paths: Sequence[str], progress: bool = False) -> dict[str, list[Position]]:
    """Reads solver set files (a directory: its *.txt files, see `expand_paths`) and labels
    those without column scores (needs bitbully).

    Raises:
      ValueError / FileNotFoundError: with the file (and line) at fault.
    """
    sets = {}
    for path in expand_paths(paths):
        positions = read_positions(path)
        if any(p.column_scores is None for p in positions):
            try:
                positions = label(positions, progress)
            except ImportError:
                raise ValueError(f"{path} has no column scores (third field); labelling it "
                                 f"{_BITBULLY_HINT}, or use a file written by "
                                 "`python -m az_jax.eval.solver_bench make`") from None
        sets[str(path)] = positions
    return sets


def _make(args) -> None:
    out = Path(args.out)  # checked before the positions are played and solved, not after
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder: give a file, e.g. {out / 'positions.txt'}")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"no folder {out.parent} to write {out.name} in: make it "
                                "first, or give another --out")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{out.parent} is not writable: give another --out")
    positions = generate(args.n, args.min_moves, args.max_moves, args.seed,
                         progress=not args.quiet)
    header = (f"az_jax Connect4 solver set: {args.n} positions from uniformly random play, "
              f"{args.min_moves}-{args.max_moves} moves, seed {args.seed}, labelled by "
              "bitbully.\nformat: <moves (columns 1-7)> <score for the side to move> "
              "<scores of columns 1..7, x = full> (see az_jax/eval/solver_bench.py)")
    write_positions(args.out, positions, header)
    print(f"wrote {len(positions)} positions to {args.out}")


def _make_sets(args) -> None:
    """make-sets: plays, solves and writes the nine sets, or writes nothing (an error
    before all nine are ready, a set without positions included, leaves --out as it was:
    a folder it created is removed again)."""
    import dataclasses as dc

    if args.per_set < 1:
        raise ValueError(f"--per-set={args.per_set} must be >= 1")
    if not 0 < args.games_scale < math.inf:  # (nan and inf too: they reached round())
        raise ValueError(f"--games-scale={args.games_scale} must be a finite number > 0")
    recipe = [dc.replace(s, games=max(2, round(s.games * args.games_scale)))
              for s in solver_sets.DEFAULT_RECIPE]
    exclude = [p.moves for path in expand_paths(args.exclude or ())
               for p in read_positions(path, allow_empty=True)]
    out = Path(args.out)
    # Made now, so that a folder we may not write is an error before the games; removed
    # again (the folders made here, each if empty) when nothing is written.
    recover_swap(out)  # a make-sets killed mid-swap: its sets back in place first
    made = [d for d in (out, *out.parents) if not d.exists()]
    out.mkdir(parents=True, exist_ok=True)
    try:
        _play_and_write_sets(args, recipe, exclude, out)
    except BaseException:
        for d in made:  # deepest first; rmdir removes only an empty folder
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def _play_and_write_sets(args, recipe, exclude: list[str], out: Path) -> None:
    log = (lambda text: None) if args.quiet else (lambda text: print(text, flush=True))
    log(f"playing {sum(s.games for s in recipe)} games from {len(recipe)} sources"
        + (f", leaving out {len(exclude)} positions" if exclude else ""))
    sets, origin, stats = solver_sets.make_sets(recipe, args.per_set, args.seed, args.model,
                                                exclude=exclude, log=log)
    # A set file without positions is one `load_sets` refuses: write no set rather than
    # a collection that does not load (or eight new sets beside an old ninth).
    empty = [name for name, positions in sets.items() if not positions]
    if empty:
        raise ValueError(
            f"the games reached no position for the set{'s' * (len(empty) > 1)} "
            f"{', '.join(empty)}{' outside --exclude' if exclude else ''}, and a set file "
            f"needs one: nothing was written to {out}; play more games (--games-scale "
            f"above {args.games_scale:g}{', or exclude fewer boards' if exclude else ''})")
    command = (f"python -m az_jax.eval.solver_bench make-sets --out {args.out} --per-set "
               f"{args.per_set} --seed {args.seed} --games-scale {args.games_scale:g} "
               f"--model {args.model}"
               + "".join(f" --exclude {e}" for e in args.exclude or ()))
    recipe_text = "; ".join(f"{s.name} x{s.games}" for s in recipe)
    texts = {}
    for name, positions in sets.items():
        ph, diff = name.split("_")
        lo = solver_sets.PHASE_STARTS[solver_sets.PHASES.index(ph)]
        hi = lo + 13
        short = (f" (short of the {args.per_set} asked for: the games reached no more)"
                 if len(positions) < args.per_set else "")
        sources = ", ".join(f"{k} {v}" for k, v in
                            sorted(origin[name].items(), key=lambda kv: -kv[1]))
        header = (
            f"az_jax Connect4 solver set {name}: {len(positions)} positions{short}.\n"
            f"phase {ph}: {lo}-{hi} stones on the board. difficulty {diff}: "
            f"{solver_sets.DIFFICULTY_RULES[diff]} (k = legal moves that keep the best "
            "outcome, n = legal moves).\n"
            f"made by: {command}\n"
            f"recipe (seed {args.seed}; source i plays with seed + i): {recipe_text}.\n"
            "every position before a move of those games, deduplicated as boards (move "
            "orders and mirror images count once), sources merged round-robin in a seeded "
            "order, solved by bitbully; positions where no mistake is possible are left "
            "out; the nine sets are disjoint"
            + (f" (and share no board with the {len(exclude)} positions of "
               f"{', '.join(args.exclude)})" if exclude else "") + ".\n"
            f"positions here by source: {sources}.\n"
            "format: <moves (columns 1-7)> <score for the side to move> <scores of columns "
            "1..7, x = full> (see az_jax/eval/solver_bench.py, az_jax/eval/solver_sets.py)")
        texts[out / f"{name}.txt"] = format_positions(positions, header)
        log(f"{name}: {len(positions)} positions{short}")
    write_files(texts)  # all nine or none
    log(f"{stats['games']} games, {stats['candidates']} distinct positions, "
        f"{stats['solved']} solved ({stats['no_mistake_possible']} with no mistake "
        f"possible), {stats['seconds']:.0f}s; wrote {out}")


def _evaluate(args) -> None:
    import jax

    from az_jax import checkpoint as ckpt
    from az_jax import search as search_lib
    from az_jax.eval import players

    sets = load_sets(args.files, progress=not args.quiet)
    ckpt.quiet_logs()
    restored = ckpt.load(workdir=args.workdir, model=args.model, step=args.checkpoint)
    where = args.workdir or f"the shipped model {args.model}"
    if restored.env.id != "connect4":
        raise ValueError(f"the solver benchmark is for connect4; the checkpoint in "
                         f"{where} is for {restored.env.id}")
    search = search_lib.make_search(restored.env, restored.net, restored.config.search)
    factory = players.PlayerFactory(restored.env, restored.net, search)
    sims = args.sims or [int(restored.config.eval.num_simulations)]
    label_ = f"iter-{restored.iteration}"
    agents = [factory.random(), factory.greedy(restored.variables, label_)]
    agents += [factory.network(restored.variables, label_, n) for n in sims]
    rows = benchmark(restored.env, agents, sets, jax.random.PRNGKey(args.seed),
                     progress=not args.quiet)
    print(format_rows(rows) if len(sets) == 1 else format_table(rows))
    print("\n" + format_horizons(rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m az_jax.eval.solver_bench",
        description=__doc__.split("\n\n")[0] + "\n\nSee the module docstring for the file "
        "format.", formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make", help="write labelled positions from random play (bitbully)")
    mk.add_argument("--out", required=True, help="output file")
    mk.add_argument("--n", type=int, default=1000, help="number of positions (1000)")
    mk.add_argument("--min-moves", type=int, default=8, help="fewest moves played (8)")
    mk.add_argument("--max-moves", type=int, default=20, help="most moves played (20)")
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--quiet", action="store_true", help="no progress bar")
    ms = sub.add_parser(
        "make-sets", help="write the nine stratified sets (phase x difficulty) from games "
        "between agents of varied strength (bitbully)",
        description="Plays the games of az_jax.eval.solver_sets.DEFAULT_RECIPE (random, onestep, "
        "rollout MCTS, the shipped connect4 network, bitbully with epsilon-random moves), "
        "solves the positions they reach with bitbully and writes <out>/<phase>_<difficulty>"
        ".txt: beginning/middle/end = 0-13/14-27/28-41 stones, easy/medium/hard = most / "
        "at most half but more than one / exactly one of the legal moves keep the best "
        "outcome. Positions where no mistake is possible are left out. A set the games "
        "reach no position for is an error, and nothing is written (play more games). "
        "Deterministic for a given seed (on the same jax version).")
    ms.add_argument("--out", required=True, help="output directory (created)")
    ms.add_argument("--per-set", type=int, default=200, help="positions per set (200)")
    ms.add_argument("--seed", type=integer(0, MAX_SEED), default=0)
    ms.add_argument("--games-scale", type=float, default=1.0,
                    help="multiply the recipe's games per source (1.0; e.g. 0.1 to try)")
    ms.add_argument("--model", default="connect4",
                    help="shipped model for the network players (connect4)")
    ms.add_argument("--exclude", action="append", metavar="PATH",
                    help="solver set files or directories whose boards (and mirror images) "
                         "the new sets leave out, for a held-out collection disjoint from "
                         "another (repeatable)")
    ms.add_argument("--quiet", action="store_true", help="no progress lines")
    ev = sub.add_parser("evaluate", help="mistake rates of a checkpoint (network alone, "
                        "with search, and a random player for reference)",
                        description="Mistake rates of a random player, the network alone "
                        "(argmax of its policy, no search) and the network with search, on "
                        "each solver set file. A directory stands for its *.txt files; with "
                        "several files one table has a row per set, per phase and over all.")
    ev.add_argument("files", nargs="+", help="solver set files or directories of them")
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument("--workdir", help="training workdir (a connect4 run)")
    src.add_argument("--model", help="a shipped model by name (e.g. connect4)")
    ev.add_argument("--checkpoint", type=int, default=None, help="iteration (default: latest)")
    ev.add_argument("--sims", type=counts(1, MAX_SIMULATIONS), default=None, metavar="N[,N...]",
                    help="search simulations, comma-separated for several (default: the "
                         "run's eval.num_simulations)")
    ev.add_argument("--seed", type=integer(0, MAX_SEED), default=0)
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        if args.command == "make":
            _make(args)
        elif args.command == "make-sets":
            _make_sets(args)
        else:
            _evaluate(args)
    except (ValueError, OSError, ImportError) as e:  # OSError: e.g. a file we may not read
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
