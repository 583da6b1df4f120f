"""The benchmark suite runs end to end at tiny sizes and reports positive, finite figures.

Timings here mean nothing (tiny network, unoptimised compiles); only the plumbing and the
JSON fields are checked.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from az_jax import bench
from tests.tiny import tiny_args

ROOT = Path(__file__).resolve().parent.parent
TINY = [*tiny_args(replay__capacity=64), "--repeats", "1"]
SIZED = TINY + ["--batch", "4", "--sims", "2", "--plies", "2"]


def _positive(result: dict, *keys: str) -> None:
    for key in keys:
        value = result[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, value)


def _run(tmp_path, *argv: str) -> dict:
    """bench.main in-process; checks that the JSON written equals the result returned."""
    path = tmp_path / f"{argv[0]}.json"
    result = bench.main([*argv, "--json", str(path)])
    written = json.loads(path.read_text())
    assert written == json.loads(json.dumps(result))
    _positive(written, "peak_memory_bytes", "device_count", "cpu_count")
    assert written["peak_memory_kind"] in ("host", "device")
    return written


def test_env(tmp_path):
    out = _run(tmp_path, "env", "--env", "connect4", "--batch", "8", "--steps", "4",
               "--repeats", "1", "--no-pgx")
    (row,) = out["results"]
    _positive(row, "steps_per_s", "compile_s", "run_s")


def test_train(tmp_path):
    out = _run(tmp_path, "train", *TINY, "--updates", "1")
    assert out["batch"] == 8 and out["updates"] == 1
    _positive(out, "train_updates_per_s", "train_positions_per_s", "train_compile_s",
              "train_scan_updates_per_s", "train_scan_compile_s", "scan_over_calls",
              "sample_batches_per_s", "sample_compile_s")


def test_backward(tmp_path):
    out = _run(tmp_path, "backward", *SIZED, "--noise")
    assert out["same_tree"] is True and out["evaluation"] is False
    _positive(out, "mctx_s", "ours_s", "ratio_mctx_over_ours")
    _positive(out["program_bytes"], "mctx", "ours")


def test_pgx_comparison(tmp_path):
    pytest.importorskip("pgx")
    out = _run(tmp_path, "pgx", *SIZED, "--quick")  # pgx-style and ours as trained
    assert len(out["rows"]) == 2 and out["rows"][0]["over_pgx"] == 1.0
    for row in out["rows"]:
        _positive(row, "moves_per_s", "simulations_per_s", "evaluations_per_s", "over_pgx",
                  "compile_s")
    _positive(out, "ours_over_pgx")
    # 2 plies x 2 simulations: pgx-style evaluates every root, ours once per window.
    assert [row["network_calls"] for row in out["rows"]] == [6, 5]


def test_pgx_comparison_null_network_over_our_env(tmp_path):
    """--null-network: the search's bookkeeping and the env alone; a game pgx lacks is
    compared with the pgx example's loop written over our env."""
    out = _run(tmp_path, "pgx", "--config", str(ROOT / "configs" / "gomoku_9x9.py"),
               "--config.env.kwargs.size=5", *SIZED, "--null-network")
    assert out["network"] == "null (constant)" and out["versus"] == "our env"
    assert [row["impl"] for row in out["rows"]] == [
        "pgx-style loop over our env", "ours gomoku, game_ids (as trained)",
        "ours gomoku, game_ids, fresh roots"]
    for row in out["rows"]:
        _positive(row, "moves_per_s", "simulations_per_s", "over_pgx")
    assert [row["network_calls"] for row in out["rows"]] == [6, 5, 6]
    with pytest.raises(SystemExit, match="--null-network"):
        bench.main(["pgx", "--config", str(ROOT / "configs" / "gomoku_9x9.py"), *SIZED])


@pytest.mark.slow
def test_selfplay_and_devices_subprocess(tmp_path):
    """`selfplay --devices 2,4` on two host devices, in a fresh process (XLA_FLAGS must be
    set before JAX starts): the one-device figures, a 2-device row, and 4 skipped."""
    path = tmp_path / "selfplay.json"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "az_jax.bench", "selfplay", *SIZED, "--devices", "2,4",
         "--json", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scaling over devices" in proc.stdout and "ratio self-play evaluations" in proc.stdout
    out = json.loads(path.read_text())
    _positive(out, "forward_positions_per_s", "selfplay_simulations_per_s",
              "selfplay_evaluations_per_s", "selfplay_moves_per_s",
              "ratio_selfplay_over_forward", "forward_compile_s", "selfplay_compile_s",
              "peak_memory_bytes")
    # Connect4 is deterministic: 2 plies x 2 simulations, plus the roots once per window.
    assert math.isclose(out["selfplay_evaluations_per_s"],
                        out["selfplay_simulations_per_s"] * 5 / 4)
    assert math.isclose(out["ratio_selfplay_over_forward"],
                        out["selfplay_evaluations_per_s"] / out["forward_positions_per_s"])
    two, four = out["scaling"]
    assert two["devices"] == 2 and two["games_per_device"] == 2 and "skipped" not in two
    _positive(two, "selfplay_simulations_per_s", "selfplay_moves_per_s", "iteration_s",
              "iteration_moves_per_s", "iteration_updates_per_s", "speedup_selfplay",
              "speedup_iteration", "compile_s")
    assert math.isfinite(two["update_phase_s"])  # may be ~0 or below at this size
    assert four["devices"] == 4 and "only 2 device(s)" in four["skipped"]


def test_threats(tmp_path):
    out = _run(tmp_path, "threats", "--size", "7", "--games", "40", "--depths", "2",
               "--min-fours", "3", "--max-fours", "3", "--repeats", "1")
    (row,) = out["rows"]
    assert row["depth"] == 2 and out["positions"]["3"] > 0
    # a VCF of three fours is beyond depth 2: pruned or not, never more than there are
    assert 0 <= row["pruned_open_three"]["3"] <= row["pruned"]["3"] <= out["positions"]["3"]
    assert out["open_three"]["3"] <= out["positions"]["3"]
    _positive(row, "root_ms", "compile_s")


@pytest.mark.parametrize("argv", [["env", "--batch", "0"], ["env", "--steps", "-1"],
                                  ["train", "--repeats", "0"], ["selfplay", "--sims", "0"],
                                  ["threats", "--games", "x"], ["learn", "--games", "0"],
                                  ["selfplay", "--sims", "100001"],
                                  ["pgx", "--sims", "1000000000"]])
def test_counts_below_one_stop_at_the_command_line(argv, capsys):
    """A batch, step, repeat or game count of 0 or less (or simulations beyond the front
    ends' 100,000) is argparse's one-line error (exit status 2), not a ZeroDivisionError or
    an XLA traceback after the imports."""
    with pytest.raises(SystemExit) as e:
        bench.build_parser().parse_args(argv)
    assert e.value.code == 2
    assert f"error: argument {argv[1]}: " in capsys.readouterr().err
