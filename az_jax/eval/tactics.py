"""The Gomoku tactics suite: solve rates per category, and the generator of the suite files.

    python -m az_jax.evaluate --model gomoku_15x15 \\
        --tactics tests/data/gomoku_tactics_15x15.jsonl --sims 64,400
    python -m az_jax.eval.tactics make --size 9 --out tests/data/gomoku_tactics_9x9.jsonl
    python -m az_jax.eval.tactics relabel tests/data/gomoku_tactics_9x9.jsonl  # labels changed

A suite file is JSON lines. Line 1 is the header: {"format": "az_jax-gomoku-tactics",
"version": 1, "env": "gomoku", "size": N, "rule": "freestyle", "categories": [...],
"recipe": {...}, "command": "..."}. Every other line is one position:

    {"moves": [40, 41, ...], "to_move": "black", "category": "vcf3", "answers": [22, 58],
     "source": "solver:0.25"}

`moves` are env actions (row * N + col, row 0 at the top) from the empty board, black
first; `to_move` is the side to move (it must match the number of moves); `answers` are
the correct moves, labelled by the threat solver `envs/gomoku_tactics.py` (see `classify`
there for each category). A position is solved when the player's move is one of the
answers. `source` says which kind of game the position comes from.

The categories: win_in_one, block_four, open_four_win (a move that makes two winning
points: wins in two), vcf3 (victory by continuous fours in exactly three moves),
block_open_three (stop the opponent's three from becoming an open four, when nothing
better exists). Positions are deduplicated under the 8 symmetries of the board.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from az_jax import files
from envs import gomoku_tactics as gt

FORMAT = "az_jax-gomoku-tactics"
VERSION = 1
SIDES = ("black", "white")


@dataclasses.dataclass(frozen=True)
class Position:
    moves: tuple[int, ...]  # env actions from the empty board
    category: str  # one of gt.CATEGORIES
    answers: tuple[int, ...]  # the correct moves (env actions), sorted
    source: str = ""

    @property
    def to_move(self) -> int:
        return len(self.moves) % 2

    def to_json(self) -> str:
        return json.dumps({"moves": list(self.moves), "to_move": SIDES[self.to_move],
                           "category": self.category, "answers": list(self.answers),
                           "source": self.source}, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class Suite:
    header: dict
    positions: list[Position]

    @property
    def size(self) -> int:
        return int(self.header["size"])

    @property
    def rule(self) -> str:
        return str(self.header["rule"])


# ===================================================================== files
def _fail(where: str, what: str) -> ValueError:
    return ValueError(f"{where}: {what}")


def _parse_header(text: str, where: str) -> dict:
    try:
        header = json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(where, f"the header is not JSON ({e.msg}); a tactics suite starts with "
                           f'{{"format": "{FORMAT}", ...}}') from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _fail(where, f'not a tactics suite: the first line needs "format": "{FORMAT}" '
                           f"(write one with `python -m az_jax.eval.tactics make`)")
    if header.get("version") != VERSION:
        raise _fail(where, f"suite format version {header.get('version')!r}; this code reads "
                           f"version {VERSION}")
    size, rule = header.get("size"), header.get("rule")
    if header.get("env") != "gomoku" or not isinstance(size, int) or not 5 <= size <= 19:
        raise _fail(where, f"header needs env gomoku and an int size in 5..19, got "
                           f"env={header.get('env')!r} size={size!r}")
    if rule not in gt.RULES:
        raise _fail(where, f"header rule {rule!r}; accepted: {', '.join(gt.RULES)}")
    return header


def _int_list(value, name: str, where: str, n: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(a, int) and not isinstance(a, bool)
                                               for a in value):
        raise _fail(where, f"{name!r} must be a list of actions (ints)")
    bad = [a for a in value if not 0 <= a < n]
    if bad:
        raise _fail(where, f"{name!r} has action {bad[0]}, off the board (0..{n - 1})")
    return tuple(value)


def parse_position(text: str, size: int, where: str) -> Position:
    """One position line; raises ValueError naming `where` (file:line) and the problem."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(where, f"not JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise _fail(where, "a position is a JSON object with moves, to_move, category, answers")
    missing = [k for k in ("moves", "to_move", "category", "answers") if k not in row]
    if missing:
        raise _fail(where, f"missing {', '.join(missing)}")
    n = size * size
    moves = _int_list(row["moves"], "moves", where, n)
    answers = _int_list(row["answers"], "answers", where, n)
    if row["category"] not in gt.CATEGORIES:
        raise _fail(where, f"unknown category {row['category']!r}; accepted: "
                           f"{', '.join(gt.CATEGORIES)}")
    try:
        board, player = gt.board_from_moves(moves, size)
    except ValueError as e:
        raise _fail(where, str(e)) from None
    if row["to_move"] not in SIDES or SIDES.index(row["to_move"]) != player:
        raise _fail(where, f"to_move {row['to_move']!r} but {len(moves)} moves were played: "
                           f"{SIDES[player]} is to move")
    if not answers:
        raise _fail(where, "no answers")
    occupied = [a for a in answers if board.flat[a] != gt.EMPTY]
    if occupied:
        raise _fail(where, f"answer {occupied[0]} is an occupied point")
    return Position(moves, row["category"], tuple(sorted(set(answers))),
                    str(row.get("source", "")))


def load(path) -> Suite:
    """Reads a suite file. Raises ValueError (`file:line: problem`) or FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tactics suite {path}")
    lines = path.read_text().splitlines()
    if not lines:
        raise _fail(str(path), "empty file")
    header = _parse_header(lines[0], f"{path}:1")
    positions = []
    for i, text in enumerate(lines[1:], start=2):
        if text.strip():
            positions.append(parse_position(text, int(header["size"]), f"{path}:{i}"))
    if not positions:
        raise _fail(str(path), "no positions after the header")
    return Suite(header, positions)


def write(path, header: dict, positions: Sequence[Position]) -> None:
    lines = [json.dumps(header, separators=(",", ":"))] + [p.to_json() for p in positions]
    files.write_atomic(path, "\n".join(lines) + "\n")


def relabel(path, note: str = "") -> dict:
    """Labels a suite's positions again with `classify`, after a change to the labels,
    and rewrites the file in place: a position keeps its category with the new answers,
    or is dropped when `classify` now gives it another category or none. The header's
    "note" gains `note` and what changed. Its recipe is kept: `make` with it would now
    pick other positions.

    Returns:
      {"positions": kept, "answers_changed": n, "dropped": {category: n}}.
    """
    suite = load(path)
    kept, changed, dropped = [], 0, {}
    for p in suite.positions:
        t = gt.classify(*gt.board_from_moves(p.moves, suite.size), suite.rule)
        if t is None or t.category != p.category:
            dropped[p.category] = dropped.get(p.category, 0) + 1
            continue
        answers = tuple(int(a) for a in np.flatnonzero(t.answers.reshape(-1)))
        changed += answers != p.answers
        kept.append(dataclasses.replace(p, answers=answers))
    result = {"positions": len(kept), "answers_changed": changed, "dropped": dropped}
    if changed or dropped:
        what = (f"relabelled: {changed} positions' answers changed, dropped "
                + (", ".join(f"{n} {c}" for c, n in dropped.items()) or "none"))
        header = dict(suite.header)
        header["note"] = "; ".join(x for x in (header.get("note", ""), note, what) if x)
        write(path, header, kept)
    return result


def check_env(suite: Suite, env, where: str = "the suite") -> None:
    """Raises ValueError unless `env` plays the suite's game (gomoku, same size and rule)."""
    params = getattr(env, "params", {})
    if env.id != "gomoku" or params.get("size") != suite.size:
        raise ValueError(f"{where} is for gomoku {suite.size}x{suite.size}; the network plays "
                         f"{env!r}: use the suite of its board size")
    if params.get("rule") != suite.rule:
        raise ValueError(f"{where} is labelled for the {suite.rule} rule; the network plays "
                         f"{params.get('rule')}")


# ===================================================================== evaluation
def select(positions: Sequence[Position], limit: int | None) -> list[Position]:
    """The first `limit` positions of each category (all with None)."""
    if limit is None:
        return list(positions)
    seen: dict[str, int] = {}
    out = []
    for p in positions:
        if seen.get(p.category, 0) < limit:
            seen[p.category] = seen.get(p.category, 0) + 1
            out.append(p)
    return out


def states_of(env, positions: Sequence[Position]):
    """Batched env states of the positions (one jitted replay of padded move lists)."""
    from az_jax.eval import solver_bench

    return solver_bench.replay(env, [p.moves for p in positions])


def solve_rates(positions: Sequence[Position], actions) -> dict[str, tuple[int, int]]:
    """{category: (solved, total)} for one move per position (and "all")."""
    out: dict[str, list[int]] = {}
    for p, a in zip(positions, np.asarray(actions), strict=True):
        row = out.setdefault(p.category, [0, 0])
        row[0] += int(int(a) in p.answers)
        row[1] += 1
    ordered = {c: tuple(out[c]) for c in gt.CATEGORIES if c in out}
    ordered["all"] = (sum(s for s, _ in ordered.values()), sum(t for _, t in ordered.values()))
    return ordered


def random_rates(positions: Sequence[Position], size: int) -> dict[str, float]:
    """What a uniformly random legal move would score per category (expected)."""
    out: dict[str, list[float]] = {}
    for p in positions:
        legal = size * size - len(p.moves)
        row = out.setdefault(p.category, [0.0, 0])
        row[0] += len(p.answers) / legal
        row[1] += 1
    rates = {c: out[c][0] / out[c][1] for c in gt.CATEGORIES if c in out}
    rates["all"] = sum(out[c][0] for c in out) / sum(out[c][1] for c in out)
    return rates


def evaluate(restored, suite: Suite, sims: Sequence[int], key, batch_size: int = 256,
             limit: int | None = None, progress: bool = False) -> list[dict]:
    """Solve rates of a restored network alone and with search at each simulation count.

    Args:
      restored: `checkpoint.restore`/`load` output (its env must match the suite).
      sims: simulation counts (evaluation mode: no root noise).
      key: consumed.
      limit: the first `limit` positions per category (None: all).
    Returns:
      rows {"agent", "seconds", "rates": {category: (solved, total)}}; the network alone
      first.
    """
    import jax

    from az_jax import search as search_lib
    from az_jax.eval import players, solver_bench

    check_env(suite, restored.env)
    positions = select(suite.positions, limit)
    env = restored.env
    states = states_of(env, positions)
    search = search_lib.make_search(env, restored.net, restored.config.search)
    factory = players.PlayerFactory(env, restored.net, search)
    label = f"iter-{restored.iteration}"
    agents = [factory.greedy(restored.variables, label)]
    agents += [factory.network(restored.variables, label, int(s)) for s in sims]
    rows = []
    for i, agent in enumerate(agents):
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(positions), unit="pos", desc=agent.name, disable=None,
                       dynamic_ncols=True, leave=False)
        t0 = time.perf_counter()
        actions = solver_bench.agent_actions(agent, states, jax.random.fold_in(key, i),
                                             batch_size=batch_size,
                                             progress=None if bar is None else bar.update)
        if bar is not None:
            bar.close()
        rows.append({"agent": agent.name, "seconds": time.perf_counter() - t0,
                     "rates": solve_rates(positions, actions)})
    return rows


def format_rows(rows: list[dict], random: dict[str, float] | None = None) -> str:
    """A table: one row per category, one column per agent (solve rate, solved/total)."""
    cats = list(rows[0]["rates"])
    names = [r["agent"].split("/")[-1].replace("greedy", "network") for r in rows]
    width = max(9, *(len(n) for n in names))
    head = f"{'category':<17} {'positions':>9}" + "".join(f"  {n:>{width}}" for n in names)
    if random is not None:
        head += f"  {'random':>7}"
    lines = [head]
    for c in cats:
        line = f"{c:<17} {rows[0]['rates'][c][1]:>9}"
        for r in rows:
            solved, total = r["rates"][c]
            line += f"  {solved / total:>{width}.3f}"
        if random is not None:
            line += f"  {random[c]:>7.3f}"
        lines.append(line)
    lines.append(f"{'seconds':<17} {'':>9}" + "".join(f"  {r['seconds']:>{width}.0f}"
                                                     for r in rows))
    return "\n".join(lines)


def run_cli(suite: Suite, path, restored, sims: Sequence[int], key, batch_size: int = 256,
            limit: int | None = None, progress: bool = True) -> None:
    """What `evaluate --tactics FILE` prints (`suite` is `load(path)`)."""
    check_env(suite, restored.env, where=str(path))
    positions = select(suite.positions, limit)
    print(f"\ntactics suite {path}: gomoku {suite.size}x{suite.size} {suite.rule}, "
          f"{len(positions)} positions; network alone (argmax of the policy over legal "
          f"moves) and with search (evaluation mode), solve rate per category:", flush=True)
    rows = evaluate(restored, suite, sims, key, batch_size=batch_size, limit=limit,
                    progress=progress)
    print(format_rows(rows, random_rates(positions, suite.size)))


# ===================================================================== generation
SOURCES_HELP = """game sources (comma-separated), each plays --games games per batch:
  random        uniformly random legal moves
  onestep       a winning move when there is one, else random
  solver:EPS    the threat solver's move for its category (win, block, open four, VCF,
                defence of an open three), else a random move next to the stones; with
                probability EPS a random move next to the stones instead
  policy        the shipped network of this board size, moves sampled from its policy
  mcts:N        that network with N simulations, Gumbel noise on (self-play mode)
Two opening plies start every game of the network and solver sources: the centre, then
a random point at most two rows and columns from it."""


def _near_stones(board: np.ndarray, radius: int = 2) -> np.ndarray:
    """Empty points within `radius` (Chebyshev) of a stone; the centre on an empty board."""
    n = board.shape[0]
    stones = board != gt.EMPTY
    if not stones.any():
        out = np.zeros_like(stones)
        out[n // 2, n // 2] = True
        return out
    padded = np.pad(stones, radius)
    near = np.zeros_like(stones)
    for dr in range(-radius, radius + 1):
        for dc in range(-radius, radius + 1):
            near |= padded[radius + dr:radius + dr + n, radius + dc:radius + dc + n]
    return near & ~stones


def _pick(rng, mask: np.ndarray) -> int:
    return int(rng.choice(np.flatnonzero(mask)))


class _Games:
    """A batch of games played on the host with jitted env steps and network calls."""

    def __init__(self, env, restored=None):
        import jax

        self.env = env
        self.init = jax.jit(jax.vmap(env.init))
        self.step = jax.jit(jax.vmap(env.step))
        self.restored = restored
        self._policy = None
        self._search = None

    def policy_logits(self, states):
        import jax

        if self._policy is None:
            net = self.restored.net
            self._policy = jax.jit(
                lambda v, o, m: net.apply(v, o, m, train=False)[0])
        return np.asarray(self._policy(self.restored.variables, states.observation,
                                       states.legal_action_mask))

    def search_actions(self, states, sims: int, key):
        from az_jax import search as search_lib

        if self._search is None:
            self._search = search_lib.make_search(self.env, self.restored.net,
                                                  self.restored.config.search)
        out = search_lib.jit_search(self._search, self.restored.variables, states, key,
                                    evaluation=False, num_simulations=sims)
        return np.asarray(out.action)


def play_games(games: _Games, source: str, num_games: int, rule: str, seed: int,
               max_plies: int, opening: int = 2) -> list[tuple[list[int], list]]:
    """Plays `num_games` games of one source; returns per game its moves and its labelled
    plies [(ply, Tactic)]."""
    import jax

    env = games.env
    n = env.size
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    states = games.init(jax.random.split(key, num_games))
    moves = [[] for _ in range(num_games)]
    labels = [[] for _ in range(num_games)]
    kind, _, arg = source.partition(":")
    eps = float(arg) if kind == "solver" else 0.0
    for ply in range(max_plies):
        done = np.asarray(states.done)
        if done.all():
            break
        boards = np.asarray(states.game.board).reshape(num_games, n, n)
        tactics = [None if done[g] else gt.classify(boards[g], ply % 2, rule)
                   for g in range(num_games)]
        for g, t in enumerate(tactics):
            if t is not None:
                labels[g].append((ply, t))
        key, k_act = jax.random.split(key)
        if kind == "policy" and ply >= opening:
            logits = games.policy_logits(states)
            legal = np.asarray(states.legal_action_mask)
            acts = np.asarray(jax.random.categorical(k_act, np.where(legal, logits, -1e30)))
        elif kind == "mcts" and ply >= opening:
            acts = games.search_actions(states, int(arg), k_act)
        else:
            acts = np.zeros(num_games, np.int64)
            for g in range(num_games):
                if done[g]:
                    continue
                empty = boards[g] == gt.EMPTY
                if kind == "random" or (kind == "onestep" and tactics[g] is None):
                    acts[g] = _pick(rng, empty)
                elif kind == "onestep":
                    t = tactics[g]
                    acts[g] = _pick(rng, t.answers if t.category == "win_in_one" else empty)
                elif ply < opening or rng.random() < eps or tactics[g] is None:
                    acts[g] = _pick(rng, _near_stones(boards[g]))
                else:
                    acts[g] = _pick(rng, tactics[g].answers)
        for g in range(num_games):
            if not done[g]:
                moves[g].append(int(acts[g]))
        states = games.step(states, np.asarray(acts, np.int32))
    return list(zip(moves, labels, strict=True))


def harvest(games_out, source: str, per_game: int, rng) -> dict[str, list[Position]]:
    """At most `per_game` positions per category from each game (plies drawn at random)."""
    out: dict[str, list[Position]] = {c: [] for c in gt.CATEGORIES}
    for moves, labels in games_out:
        by_cat: dict[str, list] = {}
        for ply, t in labels:
            by_cat.setdefault(t.category, []).append((ply, t))
        for cat, items in by_cat.items():
            for j in rng.permutation(len(items))[:per_game]:
                ply, t = items[j]
                out[cat].append(Position(tuple(moves[:ply]), cat,
                                         tuple(np.flatnonzero(t.answers).tolist()), source))
    return out


def pick(pools: dict[str, dict[str, list[Position]]], per_category: int, size: int,
         rng) -> list[Position]:
    """Round-robin over the sources, per category, dropping symmetric duplicates."""
    chosen, seen = [], set()
    for cat in gt.CATEGORIES:
        queues = {s: [pool[cat][i] for i in rng.permutation(len(pool[cat]))]
                  for s, pool in pools.items()}
        got = 0
        while got < per_category and any(queues.values()):
            for s in pools:
                if got >= per_category or not queues[s]:
                    continue
                p = queues[s].pop()
                board, player = gt.board_from_moves(p.moves, size)
                k = gt.canonical_key(board, player)
                if k in seen:
                    continue
                seen.add(k)
                chosen.append(p)
                got += 1
    return chosen


def make(size: int, out, sources: Sequence[str], games_per_source: int, per_category: int,
         seed: int = 0, rule: str = "freestyle", model: str | None = None,
         per_game: int = 2, max_plies: int | None = None, command: str = "") -> dict:
    """Plays the games, labels every ply, picks the suite and writes it. Returns counts."""
    import envs

    env = envs.make("gomoku", size=size, rule=rule)
    restored = None
    if any(s.split(":")[0] in ("policy", "mcts") for s in sources):
        from az_jax import checkpoint as ckpt

        model = model or f"gomoku_{size}x{size}"
        restored = ckpt.load(model=model)
        if restored.env.params != env.params:
            raise ValueError(f"model {model} plays {restored.env!r}, not {env!r}")
    games = _Games(env, restored)
    max_plies = max_plies or min(size * size, 120)
    rng = np.random.default_rng(seed)
    pools, stats = {}, {}
    for i, source in enumerate(sources):
        t0 = time.perf_counter()
        played = play_games(games, source, games_per_source, rule, seed * 1000 + i, max_plies)
        pools[source] = harvest(played, source, per_game, rng)
        stats[source] = {c: len(v) for c, v in pools[source].items()}
        print(f"{source}: {games_per_source} games, {time.perf_counter() - t0:.0f}s, "
              f"candidates {stats[source]}", flush=True)
    chosen = pick(pools, per_category, size, rng)
    header = {"format": FORMAT, "version": VERSION, "env": "gomoku", "size": size,
              "rule": rule, "categories": list(gt.CATEGORIES),
              "recipe": {"sources": list(sources), "games_per_source": games_per_source,
                         "per_category": per_category, "per_game": per_game, "seed": seed,
                         "max_plies": max_plies, "model": model or f"gomoku_{size}x{size}",
                         "labels": "envs/gomoku_tactics.py classify",
                         "dedup": "8 board symmetries"},
              "command": command}
    write(out, header, chosen)
    counts = {c: sum(p.category == c for p in chosen) for c in gt.CATEGORIES}
    print(f"wrote {out}: {counts}")
    short = [c for c, k in counts.items() if k < per_category]
    if short:
        print(f"warning: fewer than {per_category} positions for {', '.join(short)}: play more "
              f"games (--games) or take more per game (--per-game)", flush=True)
    return counts


def _parse_sources(text: str) -> list[str]:
    out = []
    for s in (t.strip() for t in text.split(",") if t.strip()):
        kind, _, arg = s.partition(":")
        ok = (kind in ("random", "onestep", "policy") and not arg) or (
            kind == "mcts" and arg.isdigit() and int(arg) > 0)
        if kind == "solver":
            try:
                ok = 0.0 <= float(arg) <= 1.0
            except ValueError:
                ok = False
        if not ok:
            raise ValueError(f"unknown source {s!r}; see --help for the accepted forms")
        out.append(s)
    if not out:
        raise ValueError("--sources is empty")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m az_jax.eval.tactics", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Evaluate with `python -m az_jax.evaluate --model NAME --tactics FILE`.")
    sub = parser.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make", help="play games, label their positions, write a suite",
                        epilog=SOURCES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    mk.add_argument("--size", type=int, required=True, help="board size (5..19)")
    mk.add_argument("--rule", default="freestyle", choices=gt.RULES)
    mk.add_argument("--out", required=True, help="the .jsonl file to write")
    mk.add_argument("--sources", default="random,onestep,solver:0.3,solver:0.6,policy,mcts:8",
                    help="kinds of games (see below)")
    mk.add_argument("--games", type=int, default=64, help="games per source")
    mk.add_argument("--per-category", type=int, default=240, help="positions per category")
    mk.add_argument("--per-game", type=int, default=2,
                    help="at most this many positions per category from one game")
    mk.add_argument("--max-plies", type=int, default=None,
                    help="plies per game (default min(N*N, 120))")
    mk.add_argument("--model", default=None,
                    help="shipped model for policy/mcts sources (default gomoku_NxN)")
    mk.add_argument("--seed", type=int, default=0)
    rl = sub.add_parser("relabel", help="label a suite's positions again (after a change to "
                        "envs/gomoku_tactics.py classify) and rewrite it in place: new "
                        "answers; a position whose category changed is dropped")
    rl.add_argument("suite", help="the .jsonl suite file, rewritten in place")
    rl.add_argument("--note", default="", help="added to the header's note (say why)")
    args = parser.parse_args(argv)
    try:
        if args.command == "relabel":
            r = relabel(args.suite, args.note)
            print(f"{args.suite}: {r['positions']} positions kept, {r['answers_changed']} "
                  f"with new answers, dropped {r['dropped'] or 'none'}")
            return 0
        if not 5 <= args.size <= 19:
            raise ValueError(f"--size={args.size} must be in 5..19")
        if args.games < 1 or args.per_category < 1 or args.per_game < 1:
            raise ValueError("--games, --per-category and --per-game must be >= 1")
        if args.max_plies is not None and args.max_plies < 1:
            raise ValueError(f"--max-plies={args.max_plies} must be >= 1")
        sources = _parse_sources(args.sources)
        command = "python -m az_jax.eval.tactics " + " ".join(
            sys.argv[1:] if argv is None else list(argv))
        from az_jax.checkpoint import quiet_logs

        quiet_logs()
        make(args.size, args.out, sources, args.games, args.per_category, seed=args.seed,
             rule=args.rule, model=args.model, per_game=args.per_game,
             max_plies=args.max_plies, command=command)
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
