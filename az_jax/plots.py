"""PNG plots of a training run (host side), written into the workdir:

  losses.png     training losses per iteration           (from metrics.jsonl)
  win_rates.png  score of the network vs each opponent   (from elo.json, else metrics.jsonl)
  elo.png        Elo of the network over iterations      (from elo.json)

`write_training_plots(workdir)` writes whichever of them has data; the trainer calls it at
a checkpoint once a minute at most (`trainer.PLOT_EVERY_S`) and at its last one, and
`python -m az_jax.evaluate` after each evaluation.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

from az_jax import files


def read_metrics(workdir) -> list[dict]:
    """The rows of metrics.jsonl (a torn last line, from a kill mid-write, is ignored)."""
    path = Path(workdir) / "metrics.jsonl"
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _read_elo(workdir) -> dict | None:
    from az_jax.eval import elo

    try:
        data = elo.load(workdir)
    except ValueError:
        return None
    return data if data["matches"] else None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    # A kill mid-write leaves the old plot (or none), never a truncated PNG.
    try:
        return files.write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=100))
    finally:
        _pyplot().close(fig)


def _main_suffix(names) -> str | None:
    """The most common way the network is played on the ladder (e.g. "mcts:32")."""
    from az_jax.eval import elo

    counts = Counter(p[1] for n in names if n.startswith("iter-")
                     and (p := elo.player_iteration(n)) is not None and p[1] != "greedy")
    return counts.most_common(1)[0][0] if counts else None


def plot_losses(workdir, rows: list[dict]) -> Path | None:
    rows = [r for r in rows if "iteration" in r]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    it = [r["iteration"] for r in rows]
    for key in ("loss", "policy_loss", "value_loss"):
        ax.plot(it, [r.get(key, math.nan) for r in rows], label=key)
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, Path(workdir) / "losses.png")


def _win_rate_series(data: dict) -> dict[str, list[tuple[int, float]]]:
    """{opponent label: [(iteration, score)]} for the network played the main way."""
    from az_jax.eval import elo

    names = {m["a"] for m in data["matches"]} | {m["b"] for m in data["matches"]}
    main = _main_suffix(names)
    acc: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for m in data["matches"]:
        for me, other, w, losses in ((m["a"], m["b"], m["wins"], m["losses"]),
                                     (m["b"], m["a"], m["losses"], m["wins"])):
            p = elo.player_iteration(me) if me.startswith("iter-") else None
            if p is None or p[1] != main or me == other:
                continue
            q = elo.player_iteration(other) if other.startswith("iter-") else None
            if q is None:
                label = other
            elif q[0] == p[0]:
                label = q[1]  # the same network played another way (greedy, mcts:800)
            elif q[0] < p[0]:
                label = "older networks"  # previous best, checkpoint:latest-K, ...
            else:
                continue
            cell = acc[label][p[0]]
            cell[0] += w + 0.5 * m["draws"]
            cell[1] += w + m["draws"] + losses
    return {label: sorted((it, s / n) for it, (s, n) in its.items() if n)
            for label, its in acc.items()}


def plot_win_rates(workdir, rows: list[dict], data: dict | None) -> Path | None:
    series = _win_rate_series(data) if data else {}
    if not series:  # fall back to the trainer's metrics
        keys = sorted({k for r in rows for k in r if k.startswith("eval/")
                       and k.endswith("/score")})
        series = {k[5:-6]: [(r["iteration"], r[k]) for r in rows if k in r] for k in keys}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, pts in sorted(series.items()):
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"vs {label}")
    ax.axhline(0.5, color="gray", lw=0.8, ls=":")
    ax.set_xlabel("iteration")
    ax.set_ylabel("score (win + draw/2)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, Path(workdir) / "win_rates.png")


def plot_elo(workdir, data: dict | None) -> Path | None:
    from az_jax.eval import elo

    if not data or not data.get("ratings"):
        return None
    ratings = data["ratings"]
    groups: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    baselines = {}
    for name, r in ratings.items():
        p = elo.player_iteration(name) if name.startswith("iter-") else None
        if p is not None:
            groups[p[1]].append((p[0], r["elo"], r["stderr"]))
        elif "/" not in name:
            baselines[name] = r["elo"]
    if not groups:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for how, pts in sorted(groups.items()):
        pts.sort()
        it, e, se = zip(*pts, strict=True)
        ax.errorbar(it, e, yerr=se, marker="o", capsize=2, label=f"network ({how})")
    for i, (name, e) in enumerate(sorted(baselines.items(), key=lambda kv: kv[1])):
        ax.axhline(e, color=f"C{(i + len(groups)) % 10}", ls="--", lw=1, label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"Elo ({data.get('anchor', 'random')} = 0)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, Path(workdir) / "elo.png")


def write_training_plots(workdir) -> list[Path]:
    """Writes losses.png, win_rates.png and elo.png where there is data. Returns the paths."""
    rows = read_metrics(workdir)
    data = _read_elo(workdir)
    out = [plot_losses(workdir, rows), plot_win_rates(workdir, rows, data),
           plot_elo(workdir, data)]
    return [p for p in out if p is not None]
