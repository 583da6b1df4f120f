"""PNG plots of a training run, read from `<workdir>/metrics.jsonl` (host side)."""

from __future__ import annotations

import json
import math
from pathlib import Path


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


def write_training_plots(workdir) -> list[Path]:
    """Writes losses.png (and win_rates.png when evaluations exist). Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(workdir)
    if not rows:
        return []
    out = []
    it = [r["iteration"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in ("loss", "policy_loss", "value_loss"):
        ys = [r.get(key, math.nan) for r in rows]
        ax.plot(it, ys, label=key)
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(workdir) / "losses.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    out.append(path)

    keys = sorted({k for r in rows for k in r if k.startswith("eval/") and k.endswith("/score")})
    if keys:
        fig, ax = plt.subplots(figsize=(7, 4))
        for key in keys:
            pts = [(r["iteration"], r[key]) for r in rows if key in r]
            ax.plot(*zip(*pts), marker="o", label=key[5:-6])
        ax.set_xlabel("iteration")
        ax.set_ylabel("score (win + draw/2)")
        ax.set_ylim(0, 1)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = Path(workdir) / "win_rates.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(path)
    return out
