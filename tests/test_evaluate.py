"""`python -m az_jax.evaluate`: clean errors, and a run against a tiny trained checkpoint."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from az_jax import checkpoint as ckpt
from az_jax import evaluate, trainer
from tests.tiny import tiny_training

ROOT = Path(__file__).resolve().parents[1]
SOLVER_SET = ROOT / "tests" / "data" / "connect4_solver_200.txt"


def _tiny(config):
    return tiny_training(config, selfplay__num_plies=9, train__num_iterations=2,
                         eval__num_games=4, checkpoint__every=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tic-tac-toe run trained for 2 iterations, and an untrained Connect4 checkpoint."""
    sys.path.insert(0, str(ROOT))  # configs/
    from configs import connect4, tictactoe

    base = tmp_path_factory.mktemp("runs")
    ttt = base / "ttt"
    trainer.train_and_evaluate(_tiny(tictactoe.get_config()), str(ttt))

    c4 = base / "c4"  # a checkpoint without training: enough for errors and the solver set
    config = _tiny(connect4.get_config())
    setup = trainer.Setup(config)
    train_state, games, _ = setup.initial(jax.random.PRNGKey(0))
    meta = {"config": ckpt.config_json(config), **ckpt.env_meta(setup.env), "iteration": 1}
    ckpt.save(ckpt.manager(c4), 1, {"train_state": train_state, "games": games,
                                    "best_params": train_state.params}, meta)
    empty = base / "empty"
    empty.mkdir()
    bad = base / "bad.txt"
    bad.write_text("44 1 -2,-1,0,1,0,-1,-2\n4444444 0\n")
    bad_elo = base / "bad_elo"  # the ttt run with a damaged ladder
    shutil.copytree(ttt, bad_elo)
    (bad_elo / "elo.json").write_text('{"format": "az_jax-elo-1", "matches": [')
    bad_match = base / "bad_match"  # a ladder that reads as JSON, with a match missing "b"
    shutil.copytree(ttt, bad_match)
    (bad_match / "elo.json").write_text('{"format": "az_jax-elo-1", "matches": '
                                        '[{"a": "x", "wins": 1, "draws": 0, "losses": 0}]}')
    return {"ttt": ttt, "c4": c4, "empty": empty, "bad": bad, "bad_elo": bad_elo,
            "bad_match": bad_match}


ERRORS = {
    "missing workdir": (["--workdir", "{base}/nope"], "no workdir"),
    "no checkpoints": (["--workdir", "{empty}"], "no checkpoints"),
    "unknown opponent": (["--workdir", "{ttt}", "--against", "random,alphabeta"],
                         "unknown opponent 'alphabeta'; accepted forms: random"),
    "other game": (["--workdir", "{ttt}", "--against", "checkpoint:{c4}"],
                   "trained for Connect4(threats=True, parity=True, twos=True); it cannot play "
                   "TicTacToe()"),
    "solver set, other game": (["--workdir", "{ttt}", "--solver-set", str(SOLVER_SET)],
                               "the solver benchmark is for connect4"),
    "malformed solver file": (["--workdir", "{c4}", "--solver-set", "{bad}"],
                              "bad.txt:2: illegal position: move 7 plays column 4"),
    "no such checkpoint": (["--workdir", "{ttt}", "--checkpoint", "99"], "no checkpoint 99"),
    "odd arguments": (["--workdir", "{ttt}", "--games", "1"], "--games=1"),
    "empty workdir": (["--workdir", ""], "--workdir is empty"),
    # /proc/self: a folder no one may write in, even root; checked before any game is played
    "unwritable workdir": (["--workdir", "/proc/self"], "add --no-elo --no-plots"),
    "damaged elo.json": (["--workdir", "{bad_elo}", "--against", "random", "--games", "2",
                          "--sims", "2", "--no-plots"],
                         "elo.json is not readable JSON"),
    # It was played to the end, then a KeyError traceback, the games lost.
    "damaged elo.json match": (["--workdir", "{bad_match}", "--against", "random", "--games",
                                "2", "--sims", "2", "--no-plots"],
                               "elo.json is a damaged Elo ladder: match 1 of 1 has b=null"),
}


@pytest.fixture(scope="module")
def error_runs(runs):
    """Runs every error case as a subprocess, all at once (each one imports jax)."""
    fmt = {k: str(v) for k, v in runs.items()} | {"base": str(runs["ttt"].parent)}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "az_jax.evaluate", *[a.format(**fmt) for a in args]],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, (args, _) in ERRORS.items()}
    return {name: (p.wait(timeout=300), p.stdout.read(), p.stderr.read())
            for name, p in procs.items()}


@pytest.mark.parametrize("case", list(ERRORS))
def test_clean_errors(error_runs, case):
    code, out, err = error_runs[case]
    assert code == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    assert err.startswith("error: ") or "\nerror: " in err, err
    assert ERRORS[case][1] in err, err


@pytest.mark.parametrize("case", ["damaged elo.json", "damaged elo.json match"])
def test_a_damaged_ladder_stops_the_run_before_any_game(error_runs, case):
    code, out, err = error_runs[case]
    assert "network under test" not in out, out  # nothing restored, no match played
    assert code == 2 and "(or evaluate with --no-elo)" in err, err


def test_help():
    p = subprocess.run([sys.executable, "-m", "az_jax.evaluate", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    for text in ("--workdir", "--against", "--solver-set", "mcts-rollout:N",
                 "checkpoint:latest-K", "Wilson"):
        assert text in p.stdout


@pytest.mark.slow
def test_evaluate_run_prints_table_and_writes_plots(runs, capsys):
    ttt = runs["ttt"]
    code = evaluate.main(["--workdir", str(ttt), "--against", "random,checkpoint:latest-1",
                          "--games", "6", "--sims", "2", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "network under test: iter-2/mcts:2" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("opponent"))
    assert "as first" in lines[head] and "95% CI" in lines[head]
    assert lines[head + 1].split()[:2] == ["random", "6"]
    assert lines[head + 2].split()[:2] == ["iter-1/mcts:2", "6"]
    assert "Elo" in out and "random" in out
    data = json.loads((ttt / "elo.json").read_text())
    assert {m["b"] for m in data["matches"]} == {"random", "iter-1/mcts:2"}
    assert all(m["source"] == "evaluate" and m["iteration"] == 2 for m in data["matches"])
    for name in ("elo.png", "win_rates.png", "losses.png"):
        assert (ttt / name).stat().st_size > 1000, name


def test_solver_set_run(runs, capsys):
    code = evaluate.main(["--workdir", str(runs["c4"]), "--against", "", "--sims", "2",
                          "--solver-set", str(SOLVER_SET), "--quiet", "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split() for line in out.splitlines()
            if line.startswith("connect4_solver_200.txt")]
    assert [r[1] for r in rows] == ["random", "iter-1/greedy", "iter-1/mcts:2"]
    assert all(r[2] == "200" for r in rows)


def test_a_conv_network_of_another_size_is_an_opponent(tmp_path, capsys):
    """A curriculum's earlier stage (a conv head trained on 7x7) plays a 9x9 run; a dense
    head of another size is refused with a clear error."""
    from tests.tiny import make_run

    g9 = make_run(tmp_path / "g9", "gomoku", head="conv", size=9)
    g7 = make_run(tmp_path / "g7", "gomoku", head="conv", size=7)
    d7 = make_run(tmp_path / "d7", "gomoku", size=7)
    args = ["--workdir", str(g9), "--games", "2", "--sims", "2", "--quiet", "--no-plots",
            "--no-elo", "--search-tactics", "none"]
    assert evaluate.main([*args, "--against", f"checkpoint:{g7}"]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines()
               if line.startswith("g7/"))
    assert row[:2] == ["g7/iter-1/mcts:2", "2"]
    assert evaluate.main([*args, "--against", f"checkpoint:{d7}"]) == 2
    assert "has a dense head" in capsys.readouterr().err


def test_latest_k_opponents_find_the_checkpoint_k_iterations_back(tmp_path):
    """The training evaluator's `checkpoint:latest-K` is K iterations before the network
    under test, and the checkpoint manager keeps it: real orbax checkpoints, saved as
    Connect4's CPU config saves them (every 10, the newest 3 kept, evaluations every 50
    against latest-50, each evaluation before that iteration's save)."""
    from az_jax.eval import external
    from az_jax.eval.players import is_fixed, preserved_steps, resolve_checkpoint

    opponents = external.parse_opponents("onestep,mcts-rollout:200,checkpoint:latest-50,"
                                         "greedy,mcts:8,checkpoint:latest")
    assert preserved_steps(opponents, 50) == [(50, 2)]
    assert preserved_steps(external.parse_opponents("checkpoint:latest-20"), 10) == [(10, 3)]
    assert preserved_steps(external.parse_opponents("random,checkpoint:latest"), 10) == []
    assert [is_fixed(o) for o in opponents] == [True, True, False, False, False, False]
    assert is_fixed(external.parse_opponents(f"checkpoint:{tmp_path}@latest")[0])

    mngr = ckpt.manager(tmp_path, keep=3, every=preserved_steps(opponents, 50))
    z = {"w": np.zeros(2, np.float32)}
    for it in range(10, 301, 10):
        if it % 50 == 0 and it > 50:  # an evaluation: the checkpoint 50 iterations back
            assert resolve_checkpoint(tmp_path, "latest-50", iteration=it) == it - 50
        ckpt.save(mngr, it, z, {"iteration": it}, score=1.0 - it / 1000)  # falling scores
    assert ckpt.saved_steps(tmp_path) == [10, 250, 280, 290, 300]  # best, every 50, newest
    assert resolve_checkpoint(tmp_path, "latest-50") == 250  # from the newest saved
    mngr.close()


def test_latest_k_opponents_between_two_saves(tmp_path):
    """Evaluated every 25 against latest-50, saved every 10, only the newest kept: at 75 the
    opponent is 20 (25 was not saved), at 100 it is 50. The manager used to keep multiples
    of 25 alone, so 20 was gone and the opponent was skipped (real orbax checkpoints)."""
    from az_jax.eval import external
    from az_jax.eval.players import preserved_steps, resolve_checkpoint

    every = preserved_steps(external.parse_opponents("checkpoint:latest-50"), 25, 10)
    mngr = ckpt.manager(tmp_path, keep=1, every=every)
    z = {"w": np.zeros(2, np.float32)}
    found = {}
    for it in range(10, 151):
        if it % 25 == 0 and it > 50:  # an evaluation, before this iteration's save
            found[it] = resolve_checkpoint(tmp_path, "latest-50", iteration=it)
        if it % 10 == 0:
            ckpt.save(mngr, it, z, {"iteration": it})
    mngr.close()
    assert found == {75: 20, 100: 50, 125: 70, 150: 100}


def test_rollout_mcts_keeps_the_sign_when_the_mover_moves_again():
    """`mcts-rollout:N` on a game where player 0 moves twice (`TwiceGame`: it wins only by
    playing action 1 both times): it plays 1, as the network search does; flipping the
    value's sign between two moves of the same player made it prefer the losing 0."""
    from az_jax.eval.players import rollout_mcts_act
    from tests.tiny import TwiceGame

    env = TwiceGame()
    act = jax.jit(rollout_mcts_act(env, 32, max_plies=4))
    states = jax.tree.map(lambda x: jax.numpy.stack([x] * 8), env.init())
    np.testing.assert_array_equal(act(None, states, jax.random.PRNGKey(0)), [1] * 8)


@pytest.mark.parametrize("argv, why", [
    (["--opening-plies", "-1"], "--opening-plies=-1 must be >= 0"),
    (["--batch-size", "1"], "--batch-size=1 must be >= 2"),
    (["--tactics", str(ROOT / "tests" / "data" / "gomoku_tactics_9x9.jsonl"),
      "--tactics-limit", "0"], "--tactics-limit=0 must be >= 1"),
    (["--sims", "2,3"], "matches take one count"),  # the run's own opponents: matches
    (["--tactics-limit", "3"], "give --tactics FILE too"),  # else silently ignored
])
def test_bad_flags_fail_before_any_checkpoint_is_read(tmp_path, capsys, argv, why):
    """Checked before anything is restored: an empty folder (no checkpoint) gets the flag's
    own error, not "no checkpoints"."""
    assert evaluate.main(["--workdir", str(tmp_path), "--no-elo", "--no-plots", *argv]) == 2
    err = capsys.readouterr().err
    assert why in err and "no checkpoints" not in err, err


def test_sims_flag_reads_counts_from_1_to_the_maximum():
    import argparse

    assert evaluate._sims("64") == [64] and evaluate._sims("2, 3,") == [2, 3]
    assert evaluate._sims(str(evaluate.cli.MAX_SIMULATIONS)) == [evaluate.cli.MAX_SIMULATIONS]
    for bad in ("0", "4,0", "-2", str(evaluate.cli.MAX_SIMULATIONS + 1), "", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            evaluate._sims(bad)


def test_results_table_hand_worked():
    """A: 3-1-0 moving first, 1-0-2 moving second: total 4-1-2, score (4 + 1/2) / 7."""
    from az_jax.eval.match import WDL, MatchResult

    r = MatchResult("me", "random", WDL(3, 1, 0), WDL(1, 0, 2), unfinished=1)
    head, row = evaluate.format_results([r], "title").splitlines()[1:]
    assert head.split()[:4] == ["opponent", "games", "as", "first"]
    assert row.split()[:6] == ["random", "7", "3-1-0", "1-0-2", "4-1-2", "0.643"]
    assert row.endswith("(1 unfinished = draws)")


def test_opening_plies_zero_is_kept(runs, capsys):
    """--opening-plies 0 (no random opening) is a value, not "use the run's default" (2)."""
    code = evaluate.main(["--workdir", str(runs["ttt"]), "--against", "random", "--games", "2",
                          "--sims", "2", "--opening-plies", "0", "--quiet", "--no-elo",
                          "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "colours alternated, 0 random opening plies" in out, out


def test_latest_k_counts_back_from_the_checkpoint_under_test(runs, capsys):
    """`--checkpoint 1 --against checkpoint:latest-1` finds nothing one iteration before
    1 (it played the newer iteration 1 of "latest minus one" from checkpoint 2: the
    network under test against a newer one); from checkpoint 2 it is iteration 1."""
    base = ["--workdir", str(runs["ttt"]), "--against", "checkpoint:latest-1", "--games", "2",
            "--sims", "2", "--quiet", "--no-elo", "--no-plots"]
    assert evaluate.main([*base, "--checkpoint", "1"]) == 2
    assert "no checkpoint at least 1 iterations older than 1" in capsys.readouterr().err
    assert evaluate.main([*base, "--checkpoint", "2"]) == 0
    assert "iter-1/mcts:2" in capsys.readouterr().out


def test_search_flags_other_than_the_runs_are_in_the_ladder_names(tmp_path, runs, capsys):
    """A search other than the run's (here its root tactics) is another player: its
    matches go on the ladder under a name that says so, beside the run's own, not in
    their place (the same seed replaced them; another seed pooled the two)."""
    ttt = tmp_path / "ttt"
    shutil.copytree(runs["ttt"], ttt)
    base = ["--workdir", str(ttt), "--against", "random,checkpoint:latest-1", "--games", "2",
            "--sims", "2", "--quiet", "--no-plots"]
    assert evaluate.main(base) == 0
    assert evaluate.main([*base, "--search-tactics", "none", "--value-scale", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "network under test: iter-2/mcts:2[tactics=none]" in out, out
    names = {(m["a"], m["b"]) for m in json.loads((ttt / "elo.json").read_text())["matches"]
             if m["source"] == "evaluate"}
    assert names == {("iter-2/mcts:2", "random"), ("iter-2/mcts:2", "iter-1/mcts:2"),
                     ("iter-2/mcts:2[tactics=none]", "random"),
                     ("iter-2/mcts:2[tactics=none]", "iter-1/mcts:2[tactics=none]")}
