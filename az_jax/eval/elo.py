"""The Elo ladder: a Bradley-Terry fit over every match played, kept in `<workdir>/elo.json`.

    elo.record(workdir, [("iter-20/mcts:32", "random", 60, 2, 2)], iteration=20)
    ratings = elo.load(workdir)["ratings"]      # {"random": {"elo": 0.0, ...}, ...}

Model: P(a beats b) = 1 / (1 + 10 ** ((r_b - r_a) / 400)) (the Elo scale). A draw counts
as half a win for each side. The ratings maximise the likelihood of all results with
  * `random` fixed at 0 (the anchor; without a `random` player the mean rating is 0);
  * a prior of `PRIOR_DRAWS` virtual draws between every pair of players that met, so a
    player who won every game still gets a finite rating (like BayesElo's virtual draws);
  * a very weak Gaussian prior (sd `PRIOR_SD_ELO`) on every rating, so players with no
    path to the anchor stay defined (near 0, with a huge standard error).
The fit is Newton's method on this concave objective; the standard errors come from the
inverse Hessian (a Laplace approximation).

File format (JSON, written atomically and keeping the file's mode, updated under a file lock
so that training and `python -m az_jax.evaluate` can share a workdir):

    {"format": "az_jax-elo-1",
     "anchor": "random",
     "best": "iter-20/mcts:32",            # the current best network (gating), if any
     "matches": [{"a": "iter-20/mcts:32", "b": "random", "wins": 60, "draws": 2,
                  "losses": 2, "iteration": 20, "source": "train", "time": "..."}, ...],
     "ratings": {"random": {"elo": 0.0, "stderr": 0.0, "games": 64}, ...}}

W/D/L are from `a`'s point of view. Player names: `random`, `onestep`, `mcts-rollout:N`
for the fixed baselines; `iter-<k>/<how>` for the network of iteration k played as
`<how>` (`mcts:N` = with N simulations, `greedy` = network alone); `<run>/iter-<k>/mcts:N`
for another run's, `<run>` its folder relative to the one holding this run
(`players.run_label`: `c4_small`, `../old/c4`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from az_jax import files

FILENAME = "elo.json"
FORMAT = "az_jax-elo-1"
ANCHOR = "random"
PRIOR_DRAWS = 1.0  # virtual draws between every pair of players that met
PRIOR_SD_ELO = 2000.0  # weak Gaussian prior on every rating (Elo points)
_SCALE = 400.0 / math.log(10.0)  # Elo points per natural-log odds unit
_ITER = re.compile(r"^(?:.*/)?iter-(\d+)/(.+)$")


class Rating(NamedTuple):
    elo: float  # rating on the Elo scale, anchor = 0
    stderr: float  # standard error (Laplace approximation), Elo points
    games: int  # real games played (no virtual draws)


def expected_score(elo_a: float, elo_b: float) -> float:
    """P(a beats b) + P(draw)/2 under the Elo model."""
    return 1.0 / (1.0 + 10.0 ** ((elo_b - elo_a) / 400.0))


def player_iteration(name: str) -> tuple[int, str] | None:
    """`iter-20/mcts:32` -> (20, "mcts:32"); None for players that are not a network."""
    m = _ITER.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def fit(matches: Iterable[dict], *, anchor: str = ANCHOR, prior_draws: float = PRIOR_DRAWS,
        prior_sd: float = PRIOR_SD_ELO, iterations: int = 100) -> dict[str, Rating]:
    """Bradley-Terry maximum a posteriori ratings from match records.

    Args:
      matches: dicts with "a", "b", "wins", "draws", "losses" (from a's point of view).
        Matches of a player against itself are ignored.
      anchor: the player fixed at 0 (when present; otherwise the mean is 0).
      prior_draws: virtual draws added to every pair that met (keeps ratings finite).
      prior_sd: sd of a Gaussian prior on every rating, Elo points (keeps it well posed).
      iterations: Newton steps at most.
    Returns:
      {name: Rating}, sorted from the strongest.
    """
    pairs: dict[tuple[str, str], list[float]] = {}
    games: dict[str, int] = {}
    for m in matches:
        a, b = str(m["a"]), str(m["b"])
        w, d, losses = (int(m["wins"]), int(m["draws"]), int(m["losses"]))
        if min(w, d, losses) < 0:
            raise ValueError(f"negative result in match {m}")
        n = w + d + losses
        games[a] = games.get(a, 0) + n * (a != b)
        games[b] = games.get(b, 0) + n * (a != b)
        if a == b or n == 0:
            continue
        key, s = ((a, b), w + 0.5 * d) if a < b else ((b, a), losses + 0.5 * d)
        acc = pairs.setdefault(key, [0.0, 0.0])
        acc[0] += s
        acc[1] += n
    names = sorted(games)
    if not names:
        return {}
    index = {p: i for i, p in enumerate(names)}
    ia = np.array([index[a] for a, _ in pairs], np.int64)
    ib = np.array([index[b] for _, b in pairs], np.int64)
    score = np.array([v[0] for v in pairs.values()], np.float64) + prior_draws / 2
    total = np.array([v[1] for v in pairs.values()], np.float64) + prior_draws
    tau2 = (prior_sd / _SCALE) ** 2
    anchored = anchor in index
    free = np.array([i for i in range(len(names)) if not (anchored and names[i] == anchor)],
                    np.int64)

    def objective(q):
        diff = q[ia] - q[ib]
        # s log sigma(diff) + (n - s) log sigma(-diff), written stably
        ll = -(score * np.logaddexp(0.0, -diff) + (total - score) * np.logaddexp(0.0, diff))
        return ll.sum() - (q ** 2).sum() / (2 * tau2)

    def grad_hess(q):
        p = 1.0 / (1.0 + np.exp(-(q[ia] - q[ib])))
        r = score - total * p
        g = np.zeros(len(names))
        np.add.at(g, ia, r)
        np.add.at(g, ib, -r)
        g -= q / tau2
        w = total * p * (1 - p)
        h = np.zeros((len(names), len(names)))  # minus the Hessian (positive definite)
        np.add.at(h, (ia, ia), w)
        np.add.at(h, (ib, ib), w)
        np.add.at(h, (ia, ib), -w)
        np.add.at(h, (ib, ia), -w)
        h[np.diag_indices(len(names))] += 1.0 / tau2
        return g, h

    q = np.zeros(len(names))
    f = objective(q)
    for _ in range(iterations):
        g, h = grad_hess(q)
        gf, hf = g[free], h[np.ix_(free, free)]
        if len(free) == 0 or np.max(np.abs(gf)) < 1e-9:
            break
        step = np.linalg.solve(hf, gf)
        t = 1.0
        while True:  # backtracking: the objective is concave, Newton may overshoot early
            cand = q.copy()
            cand[free] += t * step
            fc = objective(cand)
            if fc >= f - 1e-12 or t < 1e-6:
                break
            t /= 2
        q, f = cand, fc
    _, h = grad_hess(q)
    stderr = np.zeros(len(names))
    if len(free):
        cov = np.linalg.inv(h[np.ix_(free, free)])
        if not anchored:  # the ratings are reported centred (mean 0): so are their errors;
            # uncentred, they would mostly be the prior's width on the common offset
            centre = np.eye(len(free)) - 1.0 / len(free)
            cov = centre @ cov @ centre
        stderr[free] = np.sqrt(np.maximum(np.diag(cov), 0.0))
    if not anchored:
        q = q - q.mean()
    elo = q * _SCALE
    out = {names[i]: Rating(float(elo[i]), float(stderr[i] * _SCALE), games[names[i]])
           for i in range(len(names))}
    return dict(sorted(out.items(), key=lambda kv: -kv[1].elo))


# --------------------------------------------------------------------------- the file
def path(workdir) -> Path:
    return Path(workdir) / FILENAME


def empty() -> dict:
    return {"format": FORMAT, "anchor": ANCHOR, "best": None, "matches": [], "ratings": {}}


def load(workdir) -> dict:
    """The ladder of a workdir (an empty one if there is no elo.json yet).

    Raises:
      ValueError: the file exists but is not an Elo ladder (says which file).
    """
    p = path(workdir)
    if not p.exists():
        return empty()
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{p} is not readable JSON ({e}); move it away to start a new "
                         "ladder") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{p} is not an az_jax Elo ladder (format {FORMAT!r} expected)")
    out = empty()
    out.update(data)
    why = _malformed(out)
    if why:  # found now, before any game, not by the fit after them
        raise ValueError(f"{p} is a damaged Elo ladder: {why}. Mend that entry, or move the "
                         "file away to start a new ladder")
    return out


def _malformed(data: dict) -> str | None:
    """What makes a ladder's content unusable (None: nothing)."""
    if not isinstance(data["anchor"], str):
        return f"its anchor is {_short(data['anchor'])}, not a player's name"
    if data["best"] is not None and not isinstance(data["best"], str):
        return f"its best is {_short(data['best'])}, not a player's name"
    if not isinstance(data["matches"], list):
        return f"its matches are {_short(data['matches'])}, not a list"
    for i, m in enumerate(data["matches"]):
        where = f"match {i + 1} of {len(data['matches'])}"
        if not isinstance(m, dict):
            return f"{where} is {_short(m)}, not an object"
        for k in ("a", "b"):
            if not isinstance(m.get(k), str):
                return f"{where} has {k}={_short(m.get(k))}, not a player's name"
        for k in ("wins", "draws", "losses"):
            v = m.get(k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                return f"{where} has {k}={_short(v)}, not a count of games"
        for k in ("iteration", "seed"):
            v = m.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                return f"{where} has {k}={_short(v)}, not an integer"
        if not isinstance(m.get("deal", ""), str):
            return f"{where} has deal={_short(m['deal'])}, not a text"
    return None


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


@contextlib.contextmanager
def _locked(workdir):
    """An exclusive lock on `<workdir>/elo.json.lock` (no-op where fcntl is missing)."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(Path(workdir) / (FILENAME + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write(workdir, data: dict) -> None:
    """Writes elo.json atomically (a temporary file, then a rename), with the mode of the
    file it replaces (a new one gets the umask's, as any file the run writes)."""
    files.write_atomic(path(workdir), json.dumps(data, indent=1))


def ratings_json(ratings: dict[str, Rating]) -> dict:
    return {k: {"elo": round(r.elo, 1), "stderr": round(r.stderr, 1), "games": r.games}
            for k, r in ratings.items()}


def record(workdir, results: Sequence[tuple[str, str, int, int, int]], *,
           iteration: int | None = None, source: str = "train",
           best: str | None = None, seed: int | None = None,
           deals: Sequence[str] | None = None) -> dict[str, Rating]:
    """Appends match results to the ladder, refits it and writes elo.json.

    Args:
      workdir: the run's directory.
      results: (a, b, wins, draws, losses) tuples, W/D/L from a's point of view.
      iteration: the training iteration these matches belong to (for the record).
      source: "train" (the trainer's evaluator) or "evaluate" (the CLI).
      best: if given, the name of the current best network.
      seed: the seed that decided the games (`evaluate --seed`): a match of the same two
        players, source, seed and deal replaces those of earlier calls (the same openings
        and keys, so largely the same games: counted twice they would shrink the errors
        for nothing). Results of one call all count, even of the same pair (`--against
        random,random` plays each with its own keys).
      deals: with `seed`, one text per result saying what else decided its games (the
        number of games, opening plies, batch, the opponent's place in the list): a match
        the same seed dealt otherwise is other games, and stays. An earlier match stored
        without a deal (before stop 67) is replaced as before.
    Returns:
      The new ratings.
    """
    with _locked(workdir):
        data = load(workdir)
        now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        if deals is not None and len(deals) != len(results):
            raise ValueError(f"{len(deals)} deals for {len(results)} results")
        deals = list(deals) if deals is not None else [None] * len(results)
        if seed is not None:  # earlier calls' matches only: one call's results all count
            again = {(a, b, deal) for (a, b, *_), deal in zip(results, deals, strict=True)}
            pairs = {(a, b) for a, b, _ in again}  # (an older match, without a deal)
            data["matches"] = [m for m in data["matches"]
                               if not (m.get("source") == source and m.get("seed") == int(seed)
                                       and ((m["a"], m["b"], m.get("deal")) in again
                                            or ("deal" not in m and (m["a"], m["b"]) in pairs)))]
        for (a, b, w, d, losses), deal in zip(results, deals, strict=True):
            match = {"a": a, "b": b, "wins": int(w), "draws": int(d), "losses": int(losses),
                     "iteration": iteration, "source": source, "time": now}
            if seed is not None:
                match["seed"] = int(seed)
                if deal is not None:
                    match["deal"] = str(deal)
            data["matches"].append(match)
        if best is not None:
            data["best"] = best
        ratings = fit(data["matches"], anchor=data.get("anchor", ANCHOR))
        data["ratings"] = ratings_json(ratings)
        _write(workdir, data)
    return ratings


def forget_after(workdir, iteration: int) -> None:
    """Drops the training evaluator's matches of iterations after `iteration` and refits
    the ladder: a run resumed from that iteration plays them again, exactly, and records
    them anew (they would count twice otherwise). Matches of the evaluate CLI stay."""
    if not path(workdir).exists():
        return
    with _locked(workdir):
        data = load(workdir)
        keep = [m for m in data["matches"] if m.get("source") != "train"
                or m.get("iteration") is None or m["iteration"] <= iteration]
        if len(keep) == len(data["matches"]):
            return
        data["matches"] = keep
        data["ratings"] = ratings_json(fit(keep, anchor=data.get("anchor", ANCHOR)))
        _write(workdir, data)


def format_table(ratings: dict[str, Rating], players: Iterable[str] | None = None) -> str:
    """A text table of ratings (all players, or only `players`), strongest first."""
    wanted = None if players is None else set(players)
    rows = [(n, r) for n, r in ratings.items() if wanted is None or n in wanted]
    if not rows:
        return "(no ratings)"
    width = max(len("player"), *(len(n) for n, _ in rows))
    lines = [f"{'player':<{width}}  {'elo':>7}  {'+/-':>5}  {'games':>6}"]
    for n, r in rows:
        lines.append(f"{n:<{width}}  {r.elo:7.0f}  {r.stderr:5.0f}  {r.games:6d}")
    return "\n".join(lines)
