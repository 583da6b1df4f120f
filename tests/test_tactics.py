"""The Gomoku tactics suite (az_jax/eval/tactics.py): the shipped files, file errors, the generator,
and `evaluate --tactics` on a tiny untrained checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from az_jax import checkpoint as ckpt
from az_jax import evaluate, trainer
from az_jax.eval import tactics
from envs import gomoku_tactics as gt
from tests.tiny import tiny_training

ROOT = Path(__file__).resolve().parents[1]
SUITES = {9: ROOT / "tests" / "data" / "gomoku_tactics_9x9.jsonl",
          15: ROOT / "tests" / "data" / "gomoku_tactics_15x15.jsonl"}


@pytest.mark.parametrize("size", [9, 15])
def test_shipped_suite(size):
    """At least 200 positions per category, no two the same under the 8 symmetries, small,
    with its recipe, from several sources; a sample re-labelled by the solver (itself checked
    against the env in test_gomoku_tactics.py) gives the same category and answers."""
    path = SUITES[size]
    assert path.stat().st_size < 600_000
    suite = tactics.load(path)
    assert (suite.size, suite.rule) == (size, "freestyle")
    assert suite.header["recipe"]["sources"] and "make" in suite.header["command"]
    counts = {c: sum(p.category == c for p in suite.positions) for c in gt.CATEGORIES}
    # 250 picked per category; block_open_three lost its lost positions at stop 69's
    # relabelling (221 and 177 left)
    assert min(counts.values()) >= 200 or min(counts, key=counts.get) == "block_open_three" \
        and counts["block_open_three"] >= 150 and sorted(counts.values())[1] >= 200, counts
    keys = {gt.canonical_key(*gt.board_from_moves(p.moves, size)) for p in suite.positions}
    assert len(keys) == len(suite.positions)
    assert len({p.source for p in suite.positions}) >= 4
    rng = np.random.default_rng(size)
    for cat in gt.CATEGORIES:
        group = [p for p in suite.positions if p.category == cat]
        for i in rng.choice(len(group), 4, replace=False):
            p = group[i]
            board, player = gt.board_from_moves(p.moves, size)
            t = gt.classify(board, player, suite.rule)
            assert t is not None and t.category == cat, p
            assert tuple(np.flatnonzero(t.answers)) == p.answers, p


def _suite_file(tmp_path, lines, header=None):
    header = header or {"format": tactics.FORMAT, "version": 1, "env": "gomoku", "size": 9,
                        "rule": "freestyle"}
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([json.dumps(header), *lines]) + "\n")
    return path


GOOD = '{"moves":[40,0],"to_move":"black","category":"win_in_one","answers":[41]}'
BAD_LINES = {
    "not json": ("{moves", "s.jsonl:3: not JSON"),
    "missing": ('{"moves":[]}', "s.jsonl:3: missing to_move, category, answers"),
    "off board": ('{"moves":[81],"to_move":"white","category":"vcf3","answers":[1]}',
                  "action 81, off the board"),
    "occupied": ('{"moves":[4,4],"to_move":"black","category":"vcf3","answers":[1]}',
                 "s.jsonl:3: move 2: action 4 is on an occupied point"),
    "side": ('{"moves":[4],"to_move":"black","category":"vcf3","answers":[1]}',
             "to_move 'black' but 1 moves were played: white is to move"),
    "category": ('{"moves":[],"to_move":"black","category":"fork","answers":[1]}',
                 "unknown category 'fork'"),
    "answer": ('{"moves":[4],"to_move":"white","category":"vcf3","answers":[4]}',
               "answer 4 is an occupied point"),
    "no answers": ('{"moves":[4],"to_move":"white","category":"vcf3","answers":[]}',
                   "s.jsonl:3: no answers"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_lines_name_file_and_line(tmp_path, case):
    text, message = BAD_LINES[case]
    with pytest.raises(ValueError, match="s.jsonl:3: ") as e:
        tactics.load(_suite_file(tmp_path, [GOOD, text]))
    assert message in str(e.value)


def test_bad_header_and_mismatched_env(tmp_path):
    with pytest.raises(ValueError, match="s.jsonl:1: not a tactics suite"):
        tactics.load(_suite_file(tmp_path, [GOOD], header={"format": "other"}))
    with pytest.raises(ValueError, match="header needs env gomoku and an int size"):
        tactics.load(_suite_file(tmp_path, [GOOD], header={
            "format": tactics.FORMAT, "version": 1, "env": "gomoku", "size": 30,
            "rule": "freestyle"}))
    suite = tactics.load(_suite_file(tmp_path, [GOOD]))
    import envs

    with pytest.raises(ValueError, match="is for gomoku 9x9"):
        tactics.check_env(suite, envs.make("gomoku", size=15))
    with pytest.raises(ValueError, match="is for gomoku 9x9"):
        tactics.check_env(suite, envs.make("connect4"))
    with pytest.raises(ValueError, match="labelled for the freestyle rule"):
        tactics.check_env(suite, envs.make("gomoku", size=9, rule="standard"))


def test_solve_rates_count_answers():
    ps = [tactics.Position((40,), "vcf3", (1, 2)), tactics.Position((), "vcf3", (5,)),
          tactics.Position((), "win_in_one", (7,))]
    rates = tactics.solve_rates(ps, [2, 6, 7])
    assert rates == {"win_in_one": (1, 1), "vcf3": (1, 2), "all": (2, 3)}
    rnd = tactics.random_rates(ps, 9)
    assert rnd["win_in_one"] == pytest.approx(1 / 81)
    assert rnd["vcf3"] == pytest.approx((2 / 80 + 1 / 81) / 2)
    assert rnd["all"] == pytest.approx((2 / 80 + 1 / 81 + 1 / 81) / 3)  # per position


def test_format_rows_hand_worked():
    """One column per agent (the network alone is "network"), solved / total per category,
    the positions column from the counts, and the random baseline last."""
    rows = [{"agent": "iter-3/greedy", "seconds": 2.0,
             "rates": {"vcf3": (1, 4), "all": (1, 4)}},
            {"agent": "iter-3/mcts:64", "seconds": 31.0,
             "rates": {"vcf3": (3, 4), "all": (3, 4)}}]
    lines = tactics.format_rows(rows, {"vcf3": 0.02, "all": 0.02}).splitlines()
    assert [line.split() for line in lines] == [
        ["category", "positions", "network", "mcts:64", "random"],
        ["vcf3", "4", "0.250", "0.750", "0.020"],
        ["all", "4", "0.250", "0.750", "0.020"],
        ["seconds", "2", "31"]]


def test_make_writes_a_loadable_suite(tmp_path, capsys):
    out = tmp_path / "g7.jsonl"
    code = tactics.main(["make", "--size", "7", "--out", str(out), "--games", "6",
                         "--per-category", "3", "--sources", "random,solver:0.5"])
    assert code == 0, capsys.readouterr()
    suite = tactics.load(out)
    assert suite.size == 7 and suite.header["recipe"]["seed"] == 0
    assert suite.positions and all(p.source in ("random", "solver:0.5")
                                   for p in suite.positions)
    for p in suite.positions:  # labels agree with the solver
        board, player = gt.board_from_moves(p.moves, 7)
        t = gt.classify(board, player)
        assert t.category == p.category and tuple(np.flatnonzero(t.answers)) == p.answers
    assert tactics.main(["make", "--size", "7", "--out", str(out), "--sources", "alpha"]) == 2
    assert "unknown source 'alpha'" in capsys.readouterr().err


def test_relabel_gives_new_answers_and_drops_a_changed_category(tmp_path, capsys):
    """`relabel` after a change to `classify`: two positions once labelled block_open_three
    with stops that leave the opponent a VCF (test_gomoku_tactics.py works them through
    the env): one keeps its one good answer, the lost one is dropped; a right label is
    untouched; the header says what changed, and a second run changes nothing."""
    stale = ['{"moves":[40,47,55,30,29,18,19,2,13,67,68,69,76,4,1,74,28],"to_move":"white",'
             '"category":"block_open_three","answers":[10,37,46],"source":"random"}',
             '{"moves":[40,59,41,22,23,11,47,32,13,14,61,66,42],"to_move":"white",'
             '"category":"block_open_three","answers":[39,43],"source":"policy"}',
             '{"moves":[68,31,6,69,53,2,64,28,42,74,41,29,70,78,13,39,58,34,22,61,1,30,46],'
             '"to_move":"white","category":"win_in_one","answers":[27,32],"source":"onestep"}']
    path = _suite_file(tmp_path, stale)
    assert tactics.main(["relabel", str(path), "--note", "why"]) == 0
    assert "2 positions kept, 1 with new answers, dropped {'block_open_three': 1}" \
        in capsys.readouterr().out
    suite = tactics.load(path)
    assert [(p.category, p.answers, p.source) for p in suite.positions] == [
        ("block_open_three", (37,), "random"), ("win_in_one", (27, 32), "onestep")]
    assert suite.header["note"] == ("why; relabelled: 1 positions' answers changed, "
                                    "dropped 1 block_open_three")
    before = path.read_bytes()
    assert tactics.relabel(path) == {"positions": 2, "answers_changed": 0, "dropped": {}}
    assert path.read_bytes() == before
    assert tactics.main(["relabel", str(tmp_path / "none.jsonl")]) == 2


def test_select_takes_the_first_n_positions_of_each_category():
    cats = ["vcf3", "win_in_one", "vcf3", "vcf3", "win_in_one", "win_in_one"]
    ps = [tactics.Position((i,), c, (80,)) for i, c in enumerate(cats)]
    assert tactics.select(ps, 2) == [ps[0], ps[1], ps[2], ps[4]]
    assert tactics.select(ps, 1) == ps[:2]
    assert tactics.select(ps, None) == ps


def test_header_sizes_5_to_19_are_read(tmp_path):
    head = {"format": tactics.FORMAT, "version": 1, "env": "gomoku", "rule": "freestyle"}
    line = '{"moves":[6,0],"to_move":"black","category":"win_in_one","answers":[7]}'
    for size in (5, 19):
        assert tactics.load(_suite_file(tmp_path, [line], header=head | {"size": size})
                            ).size == size
    for size in (4, 20):
        with pytest.raises(ValueError, match="int size in 5..19"):
            tactics.load(_suite_file(tmp_path, [GOOD], header=head | {"size": size}))


def test_make_refuses_a_solver_noise_outside_0_to_1(tmp_path, capsys):
    out = tmp_path / "never.jsonl"
    for source in ("solver:1.5", "solver:-0.1", "solver:x", "mcts:0", "random:3"):
        assert tactics.main(["make", "--size", "7", "--out", str(out), "--sources",
                             source]) == 2
        assert f"unknown source {source!r}" in capsys.readouterr().err
    assert not out.exists()


def test_a_repeated_answer_counts_once(tmp_path):
    """An answer listed twice is one point: after 2 stones on 9x9 the one winning point is
    1 of the 79 empty ones for a random move (the duplicate made it 2/79)."""
    line = '{"moves":[40,0],"to_move":"black","category":"win_in_one","answers":[41,41]}'
    suite = tactics.load(_suite_file(tmp_path, [line]))
    assert suite.positions[0].answers == (41,)
    assert tactics.random_rates(suite.positions, 9)["win_in_one"] == pytest.approx(1 / 79)


def test_make_refuses_a_max_plies_below_1(tmp_path, capsys):
    """0 meant the default silently, and a negative count wrote a suite of no positions
    (which `load` refuses)."""
    out = tmp_path / "never.jsonl"
    for n in ("0", "-3"):
        assert tactics.main(["make", "--size", "7", "--out", str(out), "--sources", "random",
                             "--games", "1", "--max-plies", n]) == 2
        assert f"--max-plies={n} must be >= 1" in capsys.readouterr().err
    assert not out.exists()


def test_make_names_the_default_model_whose_rule_differs(tmp_path, capsys):
    """The shipped 9x9 model plays freestyle: a standard-rule suite from its policy names
    it (the message said "model None")."""
    out = tmp_path / "never.jsonl"
    assert tactics.main(["make", "--size", "9", "--rule", "standard", "--out", str(out),
                         "--sources", "policy"]) == 2
    assert "model gomoku_9x9 plays" in capsys.readouterr().err
    assert not out.exists()


@pytest.fixture(scope="module")
def gomoku9(tmp_path_factory):
    """An untrained 9x9 Gomoku checkpoint with a tiny network."""
    sys.path.insert(0, str(ROOT))  # configs/
    from configs import gomoku_9x9

    config = tiny_training(gomoku_9x9.get_config(), selfplay__num_plies=4)
    work = tmp_path_factory.mktemp("g9")
    setup = trainer.Setup(config)
    train_state, games, _ = setup.initial(jax.random.PRNGKey(0))
    meta = {"config": ckpt.config_json(config), **ckpt.env_meta(setup.env), "iteration": 1}
    ckpt.save(ckpt.manager(work), 1, {"train_state": train_state, "games": games,
                                      "best_params": train_state.params}, meta)
    return work


@pytest.mark.slow
def test_evaluate_tactics(gomoku9, capsys):
    code = evaluate.main(["--workdir", str(gomoku9), "--tactics", str(SUITES[9]),
                          "--tactics-limit", "3", "--sims", "2,3", "--quiet", "--no-plots",
                          "--batch-size", "8"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("category"))
    assert lines[head].split() == ["category", "positions", "network", "mcts:2", "mcts:3",
                                   "random"]
    rows = {line.split()[0]: line.split() for line in lines[head + 1:head + 7]}
    assert list(rows) == [*gt.CATEGORIES, "all"]
    assert all(r[1] == "3" for c, r in rows.items() if c != "all") and rows["all"][1] == "15"
    assert all(0.0 <= float(x) <= 1.0 for r in rows.values() for x in r[2:])
    assert "opponent" not in out  # --tactics alone plays no match


def test_evaluate_tactics_errors(gomoku9, capsys):
    assert evaluate.main(["--workdir", str(gomoku9), "--tactics", str(SUITES[15]),
                          "--quiet", "--no-plots"]) == 2
    assert "is for gomoku 15x15" in capsys.readouterr().err
    assert evaluate.main(["--workdir", str(gomoku9), "--against", "random",
                          "--sims", "2,3", "--no-plots"]) == 2
    assert "matches take one count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--workdir", str(gomoku9), "--sims", "2,x"])
