"""What the bench subcommands share: the machine, peak memory, timing loops, the config."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax

from az_jax import cli, files
from az_jax import config as config_lib

# Our env id -> the pgx env id of the same game, timed side by side when pgx is installed.
PGX_MATCH = {"connect4": "connect_four", "tictactoe": "tic_tac_toe"}


def si(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.1f}"


def load_average() -> float:
    """The 1-minute load average (nan where the OS has none): other work slows timings."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def peak_memory() -> dict:
    """The peak memory of this process so far, on the device where JAX reports it.

    Returns:
      {"peak_memory_bytes": int, "peak_memory_kind": "device" | "host"}. "device" is the
      largest `memory_stats()["peak_bytes_in_use"]` over the devices (GPU/TPU); CPU devices
      have no `memory_stats()`, so there it is the process's peak resident set size
      (`resource.getrusage`), labelled "host". Both are peaks since the process started,
      not of one measurement.
    """
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.devices()]
    peaks = [p for p in peaks if p is not None]
    if peaks:
        return {"peak_memory_bytes": int(max(peaks)), "peak_memory_kind": "device"}
    return {"peak_memory_bytes": peak_rss(), "peak_memory_kind": "host"}


def peak_rss(children: bool = False) -> int:
    """The peak resident set size in bytes of this process, or (`children`) of the largest
    child process it has waited for (`resource.getrusage`)."""
    import resource

    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    rss = resource.getrusage(who).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return int(rss * scale)


def machine() -> dict:
    """What the timings were taken on (JSON-able)."""
    return {
        "jax": jax.__version__,
        "platform": jax.devices()[0].platform,
        "device": str(jax.devices()[0].device_kind),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "load_average": load_average(),
    }


def print_machine(m: dict) -> None:
    print(f"jax {m['jax']} on {m['device']} x{m['device_count']}, {m['cpu_count']} CPUs, "
          f"load average {m['load_average']:.1f} (other work slows the timings)")


def print_memory(r: dict) -> None:
    kind = {"device": "device memory (peak_bytes_in_use)",
            "host": "host memory (process peak RSS; the CPU backend has no memory_stats)"}
    print(f"  peak {kind[r['peak_memory_kind']]}: {r['peak_memory_bytes'] / 2**20:.0f} MiB")


def check_out(flag: str, out: str | None) -> None:
    """Exits unless `out` (a --json/--png path, or None) can be written: checked before the
    work, so that a typo never costs a finished benchmark its results."""
    if out is not None and (Path(out).is_dir() or not Path(out).parent.is_dir()):
        raise SystemExit(f"error: {flag} {out}: " + (
            "is a folder: give a file" if Path(out).is_dir() else
            f"no folder {Path(out).parent} to write it in"))


def write_json(path: str | None, result: dict) -> None:
    if path:
        files.write_atomic(path, json.dumps(result, indent=2))


def finish(result: dict, json_path: str | None) -> dict:
    """Every subcommand's end: adds and prints the peak memory, writes the JSON (when
    `json_path`), returns `result`."""
    result.update(peak_memory())
    print_memory(result)
    write_json(json_path, result)
    return result


def best_time(fn, args, repeats: int) -> tuple[float, float]:
    """(compile + first call seconds, best of `repeats` timed calls)."""
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return first, best


def time_interleaved(calls: list[tuple[Callable, tuple]], repeats: int,
                     keep_output: bool = False) -> list[dict]:
    """Times several programs in turns, so that a change of the machine's load hits all alike.

    Each `(fn, args)` is called once first (compile + one run), then all are called in
    round-robin for `repeats` rounds.
    Returns:
      per call {"compile_s": first call minus the best, "best_s": the best wall time,
      "cpu_s": the smallest process CPU time of a call (all threads), "times_s": the wall
      time of every round}, and with `keep_output` "output": what the first call returned
      (every call gets the same arguments).

    A progress bar on stderr counts the calls where stderr is a terminal.
    """
    from tqdm import tqdm

    out = []
    bar = tqdm(total=len(calls) * (1 + repeats), unit="call", desc="compiling",
               dynamic_ncols=True, disable=None, leave=False)
    for fn, args in calls:
        t = time.perf_counter()
        output = jax.block_until_ready(fn(*args))
        bar.update()
        out.append({"first_s": time.perf_counter() - t, "best_s": math.inf, "cpu_s": math.inf,
                    "times_s": []})
        if keep_output:
            out[-1]["output"] = output
        del output
    bar.set_description("timing")
    for _ in range(repeats):
        for (fn, args), r in zip(calls, out, strict=True):
            t, cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(*args))
            bar.update()
            r["times_s"].append(time.perf_counter() - t)
            r["best_s"] = min(r["best_s"], r["times_s"][-1])
            r["cpu_s"] = min(r["cpu_s"], time.process_time() - cpu)
    bar.close()
    for r in out:
        r["compile_s"] = r.pop("first_s") - r["best_s"]
    return out


def load_config(args: argparse.Namespace):
    """The --config file with the command line's --config.a.b=v overrides applied
    (`config.load`) and checked as train.py checks it (`config.validate`, for one device);
    a bad file, field or value exits with one paragraph."""
    try:
        c = config_lib.load(args.config, getattr(args, "config_overrides", []))
        config_lib.validate(c, 1)
        return c
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def config_args(p: argparse.ArgumentParser, *, plies: bool = True) -> None:
    """Options shared by the subcommands that take a training config."""
    p.add_argument("--config", default="configs/connect4.py",
                   help="training config file; override fields with --config.a.b=value")
    p.add_argument("--batch", type=cli.integer(1), default=None,
                   help="games side by side (default: the config's selfplay.batch_size)")
    p.add_argument("--sims", type=cli.integer(1, cli.MAX_SIMULATIONS), default=None,
                   help="simulations per move (default: the config's)")
    if plies:
        p.add_argument("--plies", type=cli.integer(1), default=8,
                       help="plies per timed self-play call")
    p.add_argument("--repeats", type=cli.integer(1), default=3,
                   help="timed calls (best is reported)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")


def device_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected device counts like 1,2,4, got {text!r}")
    return counts


def sized_config(args: argparse.Namespace):
    """(config with its overrides, --batch and --sims applied, batch, simulations)."""
    c = load_config(args)
    if args.batch:
        c.selfplay.batch_size = args.batch
    if args.sims:
        c.search.num_simulations = args.sims
    return c, c.selfplay.batch_size, c.search.num_simulations


def make_env(env_id: str, kwargs):
    """`envs.make(env_id, **kwargs)`, for a config's env: an id or parameter the env
    refuses (`--config.env.kwargs.size=3`) exits with one line, as in train.py."""
    import envs

    try:
        return envs.make(env_id, **kwargs)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def net_name(c) -> str:
    return f"{c.network.num_blocks}x{c.network.channels} {c.network.dtype}"
