"""eval.max_share: a due evaluation runs only while evaluation has taken at most that share
of the run's time, across resumes; the run's first always runs."""

import json

import pytest

from az_jax import trainer
from configs import tictactoe
from tests.tiny import tiny_training


def test_within_budget():
    assert trainer.within_budget(0.0, 0.0, 0.1)  # the first evaluation always runs
    assert trainer.within_budget(10.0, 90.0, 0.1)  # exactly 10% of 100 s
    assert not trainer.within_budget(10.1, 89.9, 0.1)
    assert trainer.within_budget(1e9, 1.0, 0.0)  # 0: no cap
    assert trainer.within_budget(50.0, 50.0, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("max_share, evaluated", [(0.0, [1, 2]), (1e-9, [1])])
def test_training_skips_evaluations_over_the_share(tmp_path, max_share, evaluated):
    c = tiny_training(tictactoe.get_config(), train__num_iterations=1, eval__every=1)
    c.eval.opponents = "random"
    c.search.eval_tactics = "none"  # the schedule is under test: a smaller program to compile
    c.eval.max_share = max_share
    trainer.train_and_evaluate(c, str(tmp_path))
    # Resumed by another process (a second call): the share counts the whole run's time, so
    # the resumed process's first evaluation is not free (it was, before stop 65).
    c.train.num_iterations = 2
    trainer.train_and_evaluate(c, str(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "eval/seconds" in r] == evaluated
    shares = [r["eval_share"] for r in rows if "eval_share" in r]
    assert all(0.0 < s < 1.0 for s in shares) and len(shares) == len(evaluated)
