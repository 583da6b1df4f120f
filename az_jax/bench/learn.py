"""`python -m az_jax.bench learn`: how fast does a config learn, per wall-clock minute?

    python -m az_jax.bench learn --config configs/connect4.py --minutes 10
    python -m az_jax.bench learn --config configs/connect4.py --minutes 10 \\
        --config.train.learning_rate=3e-3                      # the B of an A/B test

Trains from scratch with `train.py` in a subprocess for --minutes of wall clock (then
SIGTERM: the trainer finishes its iteration and saves a checkpoint), with checkpoints every
--checkpoint-every iterations, then evaluates the checkpoints:

  connect4   mistake rates on the stratified solver sets (tests/data/connect4, see
             az_jax/eval/solver_sets.py): overall and per phase, the network alone (argmax of
             its policy) and with --sims simulations;
  any other  the score against a fixed ladder (--ladder, default random, onestep and
             rollout MCTS), the network alone and with --sims simulations.

Each checkpoint is placed on the minutes axis by the sum of metrics.jsonl's per-iteration
`seconds` up to it (self-play + learning, compile included; checkpoint writes and start-up
are not); `wall_minutes` (since the launch, as seen by polling the checkpoint directory)
is recorded too. Writes <workdir>/learn.json (after each point: `complete` says whether all
are in) and <workdir>/learn.png.

A Ctrl-C (or SIGTERM) while training stops the trainer as --minutes does and still writes
train.json (stopped_by "interrupted (...)"): --stage evaluate then takes the run. Killed
outright (SIGKILL), bench learn leaves the trainer a SIGTERM from the kernel (Linux): it
saves after its iteration and stops.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from az_jax import MAX_MINUTES, cli, files
from az_jax import config as config_lib
from az_jax.bench import common

ROOT = config_lib.ROOT
TRAIN_PY = ROOT / "train.py"
DEFAULT_SETS = ROOT / "tests" / "data" / "connect4"
DEFAULT_LADDER = "random,onestep,mcts-rollout:64"
# What the bench sets on top of the config (the user's --config.* come after and win).
BENCH_OVERRIDES = ("checkpoint.keep=1000000", "checkpoint.save_replay=False", "eval.every=0",
                   "log.progress=False")

HELP = ("train for --minutes, then mistake rate (solver sets) or ladder score per "
        "checkpoint vs minutes: learn.json + learn.png")
DESCRIPTION = __doc__.split("\n\n", 1)[1] + """
The bench itself sets --config.eval.every=0 (no evaluation inside the timed run),
checkpoint.save_replay=False, a large checkpoint.keep, no progress bar and
train.minutes=--minutes: the run fits its length, and with it the learning-rate schedule,
to the minutes (train.num_iterations is the most; a run that finishes them earlier stops
there). For runs that repeat to the last digit, give a fixed length instead:
--config.train.minutes=0 --config.train.num_iterations=N. Config overrides: --config.a.b=v
(as train.py). The machine's load average is recorded: other work slows
training, so the same iteration comes at a later minute (the curve moves right)."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="configs/connect4.py", help="training config file")
    p.add_argument("--minutes", type=float, default=10.0,
                   help="wall-clock minutes of training (default 10)")
    p.add_argument("--workdir", default=None,
                   help="new directory for the run (default runs/learn-<game>-<time>)")
    p.add_argument("--checkpoint-every", type=cli.integer(1), default=5, metavar="N",
                   help="iterations between checkpoints (default 5)")
    p.add_argument("--max-points", type=cli.integer(1), default=12,
                   help="evaluate at most this many checkpoints, spread over the minutes "
                        "(always the last one; default 12)")
    p.add_argument("--sims", type=cli.integer(0, cli.MAX_SIMULATIONS), default=64,
                   help="simulations of the searching agent (0: the network alone only)")
    p.add_argument("--sets", default=str(DEFAULT_SETS),
                   help="connect4: a solver set file or a directory of them (default: "
                        "the stratified sets in tests/data/connect4)")
    p.add_argument("--ladder", default=DEFAULT_LADDER,
                   help=f"other games: opponents, comma-separated (default {DEFAULT_LADDER})")
    p.add_argument("--games", type=cli.integer(1), default=64,
                   help="other games: games per opponent and checkpoint (default 64; rounded "
                        "up to an even count that splits into batches of at most 256, e.g. "
                        "65 plays 66)")
    p.add_argument("--stage", choices=("all", "train", "evaluate"), default="all",
                   help="all (default); train: only train (writes train.json); evaluate: "
                        "(re-)evaluate the checkpoints of an earlier bench learn --workdir, "
                        "e.g. on other sets or with other --sims, or of any train.py "
                        "workdir (minutes from its metrics.jsonl), with the run's game and "
                        "config (--config is not used)")
    p.add_argument("--seed", type=cli.integer(0, cli.MAX_SEED), default=0,
                   help="evaluation seed")
    p.add_argument("--json", default=None, help="also write learn.json's content here")
    p.add_argument("--png", default=None, help="also write the plot here")


# =========================================================================== training
def _rows(workdir: Path) -> list[dict]:
    from az_jax.plots import read_metrics

    return read_metrics(workdir)


def _steps(workdir: Path) -> list[int]:
    from az_jax import checkpoint

    return checkpoint.saved_steps(workdir)


# How long an interrupted bench learn waits for the trainer to finish its iteration and save
# (a second Ctrl-C kills it at once; its last checkpoint stays).
STOP_WAIT_S = 120.0


def _stop(proc: subprocess.Popen, signalled: bool, log) -> None:
    """Stops the trainer as --minutes does: SIGTERM (once: a second one aborts it unsaved),
    then up to STOP_WAIT_S for it to save and exit; killed after that or on a Ctrl-C."""
    if proc.poll() is not None:
        return
    if not signalled:
        proc.send_signal(signal.SIGTERM)
    log(f"stopping train.py: it saves a checkpoint after its iteration (up to "
        f"{STOP_WAIT_S:.0f} s; Ctrl-C kills it now)")
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


# Started in train.py's place: asks the kernel to send it SIGTERM when the bench (the pid
# in argv[1]) dies (Linux's prctl PR_SET_PDEATHSIG, which an exec keeps), then becomes
# argv[2:] (exec: the same process). Not a preexec_fn: that runs Python in a fork of a
# process that may have threads (JAX's), which can deadlock before the exec.
_DIE_WITH_PARENT = """import ctypes, os, signal, sys
try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
except (OSError, AttributeError):  # no prctl to be had: train.py as before
    pass
if os.getppid() != int(sys.argv[1]):  # the bench died before the prctl: no signal comes
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def spawn_trainer(cmd: list[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen(cmd, **kwargs)` for train.py: in its own session, and on Linux
    sent SIGTERM when this process dies, however it dies.

    Its own session: a Ctrl-C at the terminal reaches this process alone, which stops the
    trainer with one SIGTERM (two would abort it unsaved). So no signal to our process
    group reaches the trainer, and a bench learn killed outright (SIGKILL, the OOM killer)
    had left it training on alone until its train.minutes were up. On Linux the kernel now
    sends it the SIGTERM we would have sent (it saves after its iteration and stops), when
    the thread that called this ends: call it from one that outlives the trainer (as
    `train_for`, which waits for it). Elsewhere the trainer starts as before.
    """
    if sys.platform.startswith("linux"):
        cmd = [sys.executable, "-I", "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd]
    return subprocess.Popen(cmd, start_new_session=True, **kwargs)


def train_for(config: str, workdir: Path, minutes: float, overrides: list[str],
              log=print, on_end=None, env_vars: dict[str, str | None] | None = None) -> dict:
    """Runs train.py for `minutes` of wall clock (at least one iteration), then SIGTERM.

    An exception here, Ctrl-C or SIGTERM included, stops the trainer the same way (`_stop`)
    and goes on once `on_end` has the record, so the run keeps its checkpoints and
    provenance (bench learn --stage evaluate takes it).

    Args:
      on_end: called with the record however the run ends (finished, stopped, failed or
        interrupted), before this returns or raises.
      env_vars: train.py's environment variables that differ from ours: set, or unset
        where None (`python -m az_jax.bench` gives it XLA_FLAGS as they were before it
        asked for a CPU device a core).
    Returns:
      {"seconds", "stopped_by" ("time" | "finished"; on_end also sees "failed (status N)"
       and "interrupted (<exception>)"), "returncode", "checkpoint_seen_s": {step: seconds
       since launch when first seen}, "peak_rss_bytes": train.py's peak host memory}.
    Raises:
      RuntimeError: train.py failed (with the tail of its log).
    """
    # Absolute paths: the trainer runs in ROOT, and these are relative to our directory.
    cmd = [sys.executable, str(TRAIN_PY), "--config", os.path.abspath(config), "--workdir",
           os.path.abspath(workdir), *(f"--config.{o}" for o in overrides)]
    log("$ " + " ".join(cmd))
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for name, value in (env_vars or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    t0 = time.monotonic()
    seen: dict[int, float] = {}
    stopped_by, signalled, interrupted = "finished", False, None
    # SIGTERM to bench learn stops the trainer as Ctrl-C does (the trainer runs in its own
    # session, so a signal to this process's group no longer reaches it).
    with cli.sigterm_as_interrupt():
        with open(workdir / "train.log", "w") as out:
            proc = spawn_trainer(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                 cwd=str(ROOT))
            try:
                while proc.poll() is None:
                    time.sleep(0.5)
                    now = time.monotonic() - t0
                    for s in _steps(workdir):
                        seen.setdefault(s, now)
                    # SIGTERM before the trainer's loop is running would kill it unsaved:
                    # wait for a first logged iteration.
                    if not signalled and now >= 60 * minutes and _rows(workdir):
                        proc.send_signal(signal.SIGTERM)
                        signalled, stopped_by = True, "time"
                        log(f"{now / 60:.1f} min: SIGTERM (the trainer saves and stops)")
                proc.wait()
            except BaseException as e:
                why = "SIGTERM" if isinstance(e, cli.Terminated) else type(e).__name__
                interrupted, stopped_by = e, f"interrupted ({why})"
                _stop(proc, signalled, log)
    seconds = time.monotonic() - t0
    for s in _steps(workdir):
        seen.setdefault(s, seconds)
    # Our SIGTERM can reach the trainer as it ends on its own, past its handler: it dies of
    # the signal, its checkpoints (committed ones only, `_steps`) complete all the same.
    ours = signalled and proc.returncode == -signal.SIGTERM
    failed = interrupted is None and ((proc.returncode != 0 and not ours)
                                      or not _steps(workdir))
    if failed:
        stopped_by = f"failed (status {proc.returncode})"
    trained = {"seconds": seconds, "stopped_by": stopped_by, "returncode": proc.returncode,
               "checkpoint_seen_s": {str(k): v for k, v in sorted(seen.items())},
               # Linux: the largest child waited for, train.py in a bench learn.
               "peak_rss_bytes": common.peak_rss(children=True)}
    if on_end is not None:
        on_end(trained)
    if interrupted is not None:
        raise interrupted
    if failed:
        tail = (workdir / "train.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"train.py exited with status {proc.returncode} "
                           f"{'and no checkpoint ' if not _steps(workdir) else ''}"
                           f"(log: {workdir / 'train.log'}):\n{tail}")
    return trained


def train_minutes(rows: list[dict]) -> dict[int, float]:
    """Iteration -> minutes of training up to its end (sum of `seconds`)."""
    out, total = {}, 0.0
    for r in sorted(rows, key=lambda r: r["iteration"]):
        total += float(r["seconds"])
        out[int(r["iteration"])] = total / 60.0
    return out


def from_train_run(workdir: Path) -> dict:
    """What train.json would hold, for a run that train.py made (not bench learn): the
    minutes are its iterations' times from metrics.jsonl, so the wall-clock axis is the
    training minutes too (the run's evaluations and restarts are not in it). Its config is
    the run's full config.json (the file and flags it was started with are not recorded)."""
    minutes = train_minutes(_rows(workdir))
    total = max(minutes.values(), default=0.0)
    config = workdir / "config.json"
    return {"trained": {"seconds": 60.0 * total,
                        "stopped_by": "train.py (no train.json: minutes from metrics.jsonl)",
                        "returncode": None,
                        "checkpoint_seen_s": {str(k): 60.0 * v for k, v in minutes.items()}},
            "machine": {"note": "unknown: trained by train.py, not bench learn"},
            "load": None, "minutes": total,
            "config": str(config) if config.is_file() else "unknown", "overrides": [],
            "bench_overrides": []}


def saved_run(workdir: Path) -> tuple[dict, str]:
    """(train.json of the run in `workdir`, or `from_train_run`; the run's env id, from its
    newest checkpoint). Exits when `workdir` holds no run with a checkpoint."""
    from az_jax import workdir as workdir_lib

    if not ((workdir / "train.json").is_file() or (workdir / "metrics.jsonl").is_file()):
        raise SystemExit(f"error: --stage evaluate needs the --workdir of an earlier "
                         f"bench learn or train.py run; {workdir} has neither "
                         "train.json nor metrics.jsonl")
    try:
        found = workdir_lib.saved_config(workdir) if _steps(workdir) else None
    except workdir_lib.RunMismatch:  # no checkpoint's metadata reads, nor its config.json
        found = None
    if found is None:
        raise SystemExit(f"error: {workdir} has no checkpoint to evaluate")
    saved = (json.loads((workdir / "train.json").read_text())
             if (workdir / "train.json").is_file() else from_train_run(workdir))
    return saved, found[0]["env"]["id"]


def pick_points(steps: list[int], minutes: dict[int, float], max_points: int) -> list[int]:
    """At most `max_points` steps spread evenly on the minutes axis, always the last."""
    if len(steps) <= max_points:
        return list(steps)
    span = minutes.get(steps[-1], 0.0)
    chosen = {steps[-1]}
    for j in range(1, max_points):
        target = span * j / max_points
        chosen.add(min(steps, key=lambda s: abs(minutes.get(s, 0.0) - target)))
    return sorted(chosen)


# =========================================================================== evaluation
class SolverEvaluator:
    """Mistake rates on solver sets (all sets as one batch: one compile per agent)."""

    def __init__(self, sets_paths: list[str], env):
        import numpy as np

        from az_jax.eval import solver_bench

        self.sets = solver_bench.load_sets(sets_paths)
        self.names = [Path(f).stem for f in self.sets]
        self.positions = [p for ps in self.sets.values() for p in ps]
        self.which = np.concatenate([np.full(len(ps), i) for i, ps in
                                     enumerate(self.sets.values())])
        self.states = solver_bench.states_from_moves(env, self.positions)
        self.random = {"all": solver_bench.random_mistake_rate(self.positions)}
        self.random.update(self._groups(lambda idx: solver_bench.random_mistake_rate(
            [self.positions[i] for i in idx])))

    def describe(self) -> dict:
        return {"sets": list(self.sets), "positions": len(self.positions)}

    def _groups(self, rate) -> dict:
        import numpy as np

        from az_jax.eval.solver_sets import PHASES

        out = {}
        for ph in PHASES:
            idx = np.flatnonzero(np.isin(self.which, [i for i, n in enumerate(self.names)
                                                      if n.startswith(ph + "_")]))
            if len(idx):
                out[ph] = rate(idx)
        out["sets"] = {n: rate(np.flatnonzero(self.which == i))
                       for i, n in enumerate(self.names)}
        return out

    def __call__(self, agent, key) -> dict:
        """{"all": rate, "<phase>": rate, ..., "sets": {name: rate}, "horizons": mistakes
        over all sets by how many plies ahead they are decided (solver_bench's buckets)}."""
        import numpy as np

        from az_jax.eval import solver_bench

        actions = solver_bench.agent_actions(agent, self.states, key)
        wrong = np.zeros(len(self.positions), bool)
        for i, (p, a) in enumerate(zip(self.positions, actions, strict=True)):
            wrong[i] = solver_bench.count_mistakes([p], [a]).mistakes > 0
        out = {"all": float(wrong.mean())}
        out.update(self._groups(lambda idx: float(wrong[idx].mean())))
        out["horizons"] = solver_bench.mistake_horizons(self.positions, actions)
        return out


def match_batch(games: int, most: int = 256) -> int:
    """A batch size for `match.MatchRunner` (at most `most` games a call, even: colours
    alternate) that plays `games` in as few calls as it can: exactly `games` when they are
    even and split into even batches over those calls (64, 300, 1000), else the fewest
    more (65 -> 66; 514 -> 3 x 172). The runner rounds the games up to whole batches."""
    games += games % 2
    calls = -(-games // most)
    batch = -(-games // calls)
    return batch + batch % 2


class LadderEvaluator:
    """Scores (W + D/2)/games against fixed opponents, colours alternated."""

    def __init__(self, env, ladder: str, games: int):
        from az_jax.eval import match, players

        self.env = env
        self.opponents = players.parse_opponents(ladder)
        bad = [o.name for o in self.opponents if o.needs_network]
        if bad:
            raise ValueError(f"--ladder: {', '.join(bad)} need a network; use fixed "
                             "opponents (random, onestep, mcts-rollout:N)")
        self.ladder = ladder
        self.runner = match.MatchRunner(env, games, batch_size=match_batch(games))

    def describe(self) -> dict:
        return {"ladder": self.ladder, "games": self.runner.num_games}

    def __call__(self, agent, factory, key) -> dict:
        import jax

        out = {}
        for i, opp in enumerate(self.opponents):
            r = self.runner.play(agent, factory.build(opp), jax.random.fold_in(key, i))
            out[opp.name] = float(r.score)
        out["mean"] = float(sum(out.values()) / len(out))
        return out


def evaluate_steps(workdir: Path, steps: list[int], args, log=print, on_point=None):
    """Evaluates the checkpoints `steps` of `workdir`; `on_point(points, evaluator)` after
    each. Returns (one dict per step, the evaluator)."""
    import jax

    from az_jax import checkpoint as ckpt
    from az_jax import search as search_lib
    from az_jax.eval import players

    points, evaluator, factory = [], None, None
    for n, step in enumerate(steps):
        t0 = time.perf_counter()
        r = ckpt.restore(workdir, step=step)
        if factory is None:  # the same network shape throughout: compile once
            search = search_lib.make_search(r.env, r.net, r.config.search)
            factory = players.PlayerFactory(r.env, r.net, search)
            if r.env.id == "connect4":
                evaluator = SolverEvaluator([args.sets], r.env)
            else:
                evaluator = LadderEvaluator(r.env, args.ladder, args.games)
                if evaluator.runner.num_games != args.games:
                    log(f"playing {evaluator.runner.num_games} games per opponent (--games "
                        f"{args.games} rounded up: an even number, in whole batches)")
        agents = [factory.greedy(r.variables, f"iter-{step}")]
        if args.sims:
            agents.append(factory.network(r.variables, f"iter-{step}", args.sims))
        key = jax.random.fold_in(jax.random.PRNGKey(args.seed), step)
        results = {}
        for j, agent in enumerate(agents):
            name = agent.name.split("/", 1)[1]  # "greedy", "mcts:64"
            k = jax.random.fold_in(key, j)
            results[name] = (evaluator(agent, k) if isinstance(evaluator, SolverEvaluator)
                             else evaluator(agent, factory, k))
        points.append({"iteration": step, "results": results,
                       "eval_seconds": time.perf_counter() - t0})
        log(f"  checkpoint {step} ({n + 1}/{len(steps)}): " + ", ".join(
            f"{a} {v.get('all', v.get('mean')):.3f}" for a, v in results.items())
            + f" ({time.perf_counter() - t0:.0f}s)")
        if on_point is not None:
            on_point(points, evaluator)
    return points, evaluator


# =========================================================================== output
def format_table(result: dict) -> str:
    """Checkpoints down, metrics across."""
    pts = result["points"]
    if not pts:
        return "(no checkpoints)"
    solver = result["kind"] == "solver"
    agents = list(pts[0]["results"])
    cols = (["all", "beginning", "middle", "end"] if solver
            else list(pts[0]["results"][agents[0]]))
    head = f"{'iter':>5}  {'min':>5}  " + "  ".join(
        f"{a + ' ' + c:>{max(10, len(a) + len(c) + 1)}}" for a in agents for c in cols)
    lines = [("mistake rate" if solver else "score") + " by checkpoint (min = training "
             "minutes, the sum of iteration times)", head]
    for p in pts:
        vals = [p["results"][a].get(c, math.nan) for a in agents for c in cols]
        widths = [max(10, len(a) + len(c) + 1) for a in agents for c in cols]
        lines.append(f"{p['iteration']:5d}  {p['train_minutes']:5.1f}  " + "  ".join(
            f"{v:>{w}.1%}" if solver else f"{v:>{w}.3f}"
            for v, w in zip(vals, widths, strict=True)))
    if solver:
        rnd = result["random"]
        lines.append(f"{'rand':>5}  {'':>5}  " + "  ".join(
            f"{rnd.get(c, math.nan):>{max(10, len(a) + len(c) + 1)}.1%}"
            for a in agents for c in cols) + "   (E[random player])")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Mistake rate (or ladder score) against training minutes, a panel per agent."""
    from az_jax.plots import _pyplot, _save

    plt = _pyplot()
    pts = result["points"]
    agents = list(pts[0]["results"]) if pts else []
    fig, axes = plt.subplots(1, max(1, len(agents)), figsize=(5.5 * max(1, len(agents)), 4),
                             squeeze=False, sharey=True)
    x = [p["train_minutes"] for p in pts]
    solver = result["kind"] == "solver"
    for ax, agent in zip(axes[0], agents, strict=False):
        keys = (["all", "beginning", "middle", "end"] if solver
                else list(pts[0]["results"][agent]))
        for k in keys:
            y = [p["results"][agent].get(k, math.nan) for p in pts]
            bold = k in ("all", "mean")
            ax.plot(x, y, marker="o", lw=2.2 if bold else 1.2, ms=4 if bold else 3,
                    color="black" if bold else None, label=k)
        if solver:
            ax.axhline(result["random"]["all"], color="grey", ls=":", lw=1,
                       label="random player")
            ax.set_ylabel("mistake rate")
        else:
            ax.set_ylabel("score (W + D/2) / games")
        ax.set_title(f"{result['env']}: {'network alone' if agent == 'greedy' else agent}")
        ax.set_xlabel("training minutes")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"bench learn: {Path(result['config']).name} "
                 f"{' '.join(result['overrides']) or ''}"[:110], fontsize=9)
    _save(fig, path)
    return path


# =========================================================================== command
def run(args: argparse.Namespace) -> dict:
    """The bench; prints a table and returns the learn.json content."""
    if not 0 < args.minutes <= MAX_MINUTES:  # (nan and inf too: train.py would refuse them)
        raise SystemExit(f"error: --minutes={args.minutes} must be a number > 0 and <= "
                         f"{MAX_MINUTES:g}")
    # (--games 1 plays 2, as --help says: an even count)
    if args.checkpoint_every < 1 or args.max_points < 1 or args.sims < 0 or args.games < 1:
        raise SystemExit("error: --checkpoint-every, --max-points and --games must be >= 1, "
                         "--sims >= 0")
    user = list(getattr(args, "config_overrides", []))
    log = lambda text: print(text, flush=True)
    if args.stage == "evaluate":  # the run's own config and game, not the command line's
        if args.workdir is None:
            raise SystemExit("error: --stage evaluate needs the --workdir of an earlier "
                             "bench learn or train.py run")
        workdir = Path(args.workdir)
        saved, env_id = saved_run(workdir)
        if user:
            log(f"note: --stage evaluate takes the run's config: {' '.join(user)} not used")
        trained, m0, load_after_training = saved["trained"], saved["machine"], saved["load"]
        user, overrides = saved["overrides"], saved["bench_overrides"] + saved["overrides"]
        args.minutes = saved.get("minutes", args.minutes)
        args.config = saved.get("config", args.config)
        load = m0.get("load_average")
        log(f"bench learn: evaluating the {env_id} run in {workdir}" + (
            "" if load is None else f"; trained at load average {load:.1f}"))
    else:
        env_id = common.load_config(args).env.id  # a bad key fails here, before training
        workdir = Path(args.workdir or ROOT / "runs" /
                       f"learn-{env_id.replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}")
        overrides = [*BENCH_OVERRIDES, f"checkpoint.every={args.checkpoint_every}",
                     f"train.minutes={args.minutes:g}", *user]
    if env_id == "connect4" and args.stage != "train":
        _check_sets(args.sets)
    elif args.stage != "train":
        _check_ladder(args.ladder)
    if workdir.exists() and not workdir.is_dir():
        raise SystemExit(f"error: --workdir {workdir} is a file: give a new folder")
    common.check_out("--json", args.json)
    common.check_out("--png", args.png)
    if args.stage == "evaluate" and (workdir / "learn.json").exists():
        kept = _keep_aside(workdir / "learn.json")  # re-evaluated: the earlier results stay
        log(f"the earlier results: {kept}")
    if args.stage != "evaluate":
        if _steps(workdir) or (workdir / "metrics.jsonl").exists():
            raise SystemExit(f"error: {workdir} already holds a run; bench learn trains from "
                             "scratch: give a new --workdir (or --stage evaluate)")
        m0 = common.machine()
        print(f"bench learn: {args.config} {' '.join(user)} for {args.minutes:g} min in "
              f"{workdir}; load average {m0['load_average']:.1f} (other work slows "
              "training)", flush=True)
        saved = {}

        def save(trained: dict) -> None:  # also when training fails or is interrupted
            saved.update(trained=trained, machine=m0, load=common.load_average(),
                         minutes=args.minutes, config=str(args.config), overrides=user,
                         bench_overrides=overrides[:len(overrides) - len(user)])
            files.write_atomic(workdir / "train.json", json.dumps(saved, indent=2))
            if trained["stopped_by"].startswith(("failed", "interrupted")):
                log(f"train.py {trained['stopped_by']}; {workdir / 'train.json'} written"
                    + (f": --stage evaluate --workdir {workdir} evaluates its checkpoints"
                       if trained["checkpoint_seen_s"] else " (no checkpoint was saved)"))

        try:
            trained = train_for(args.config, workdir, args.minutes, overrides, log, save,
                                getattr(args, "trainer_env", None))
        except RuntimeError as e:
            raise SystemExit(f"error: {e}") from None
        load_after_training = saved["load"]
    rows = _rows(workdir)
    minutes = train_minutes(rows)
    steps = _steps(workdir)
    log(f"trained {max(minutes, default=0)} iterations in {trained['seconds'] / 60:.1f} min "
        f"({trained['stopped_by']}); {len(steps)} checkpoints")
    if args.stage == "train":
        result = {"workdir": str(workdir), "trained": trained, "checkpoints": steps}
        result.update(_memory(trained))
        return result
    chosen = pick_points(steps, minutes, args.max_points)
    log(f"evaluating {len(chosen)} of {len(steps)} checkpoints")

    def result_of(points: list[dict], evaluator) -> dict:
        for p in points:
            p["train_minutes"] = minutes.get(p["iteration"], math.nan)
            p["wall_minutes"] = trained["checkpoint_seen_s"].get(str(p["iteration"]),
                                                                 math.nan) / 60.0
        solver = isinstance(evaluator, SolverEvaluator)
        result = {
            "bench": "learn", "config": str(args.config), "overrides": user,
            "bench_overrides": overrides[:len(overrides) - len(user)], "env": env_id,
            "minutes": args.minutes, "workdir": str(workdir),
            "kind": "solver" if solver else "ladder", "sims": args.sims,
            "evaluation": evaluator.describe(),
            "train": {"iterations": max(minutes, default=0),
                      "train_minutes": max(minutes.values(), default=0.0),
                      "wall_minutes": trained["seconds"] / 60.0,
                      "stopped_by": trained["stopped_by"], "checkpoints": steps},
            "machine": m0, "load_average_after_training": load_after_training,
            # False while evaluating: learn.json is written after each point.
            "complete": len(points) == len(chosen), "points": points,
        }
        if solver:
            result["random"] = evaluator.random
        return result

    def write(points: list[dict], evaluator) -> None:
        files.write_atomic(workdir / "learn.json",
                           json.dumps(result_of(points, evaluator), indent=2))

    points, evaluator = evaluate_steps(workdir, chosen, args, log, on_point=write)
    result = result_of(points, evaluator)
    print(format_table(result))
    result.update(_memory(trained))
    files.write_atomic(workdir / "learn.json", json.dumps(result, indent=2))
    png = plot(result, workdir / "learn.png")
    print(f"wrote {workdir / 'learn.json'} and {png}")
    if args.json:
        files.write_atomic(Path(args.json), json.dumps(result, indent=2))
    if args.png:
        plot(result, Path(args.png))
    return result


def _keep_aside(path: Path) -> Path:
    """Renames `path` to `<stem>.before-<its time>.json` (a free name) and returns it."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
    for n in range(1000):
        kept = path.with_name(f"{path.stem}.before-{stamp}{f'-{n}' if n else ''}"
                              f"{path.suffix}")
        if not kept.exists():
            os.rename(path, kept)
            return kept
    raise SystemExit(f"error: too many earlier results beside {path}; move some away")


def _check_ladder(ladder: str) -> None:
    """Exits unless --ladder names fixed opponents (before training, not after it)."""
    from az_jax.eval import players

    try:
        opponents = players.parse_opponents(ladder)
    except ValueError as e:
        raise SystemExit(f"error: --ladder: {e}") from None
    bad = [o.name for o in opponents if o.needs_network]
    if not opponents or bad:
        raise SystemExit("error: --ladder: " + (f"{', '.join(bad)} need a network; u" if bad
                                                else "no opponent; u")
                         + "se fixed opponents, e.g. random,onestep,mcts-rollout:64")


def _check_sets(sets: str) -> None:
    """Exits unless --sets reads (before training: a bad line would only show after it)."""
    from az_jax.eval import connect4_positions, solver_bench

    if not Path(sets).exists():
        raise SystemExit(f"error: --sets: no file or directory {sets}")
    try:
        for path in solver_bench.expand_paths([sets]):
            if any(p.column_scores is None for p in solver_bench.read_positions(path)):
                connect4_positions._bitbully(f"{path} has no column scores: labelling it")
    except (ValueError, OSError, ImportError) as e:
        raise SystemExit(f"error: --sets: {e}") from None


def _memory(trained: dict) -> dict:
    """Prints and returns the peak memory: this process's (`common.peak_memory`: the
    evaluation) and train.py's host peak RSS, a subprocess that the first leaves out (in
    train.json when bench learn trained it)."""
    out = common.peak_memory()
    out["train_peak_rss_bytes"] = trained.get("peak_rss_bytes")
    common.print_memory(out)
    train = out["train_peak_rss_bytes"]
    print("  train.py (a subprocess, not in the above): peak host memory (RSS) "
          + (f"{train / 2**20:.0f} MiB" if train else "not recorded"))
    return out
