"""train.minutes: a run's length (and its learning-rate schedule) fitted once to a
wall-clock budget, after its first iterations, and kept when the run resumes."""

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags

from az_jax import checkpoint as ckpt
from az_jax import config as config_lib
from az_jax import learner, trainer
from configs import tictactoe
from tests.tiny import tiny_training


def test_fit_iterations_by_hand():
    fit = trainer.fit_iterations
    # 10 done in 30 s of a 600 s budget; after the first (compiling) iteration they take
    # 2 s (the median of 2, 2.5, 1.5), and the rebuilt program compiles in 12 - 2 = 10 s:
    # 560 s left, 90% of it training (eval.max_share 0.1): 252 more.
    assert fit(600, 30, 10, [12, 2, 2.5, 1.5], 1000, max_share=0.1) == 262
    assert fit(600, 30, 10, [12, 2, 2.5, 1.5], 1000) == 290
    # A checkpoint write of 4 s every 5 iterations: 2.8 s an iteration, 560 / 2.8 = 200 more.
    assert fit(600, 30, 10, [12, 2, 2.5, 1.5], 1000, save_s=4 / 5) == 210
    assert fit(600, 30, 10, [12, 2, 2.5, 1.5], 100, max_share=0.1) == 100  # the most
    assert fit(20, 30, 10, [12, 2, 2.5, 1.5], 1000, max_share=0.1) == 10  # spent
    # One slow iteration (an evaluation's neighbour, a busy machine) does not move the median.
    assert fit(600, 30, 10, [12, 2, 9.0, 2], 1000) == 290


def _config(**changes):
    c = tiny_training(tictactoe.get_config(), **changes)
    c.checkpoint.every = 1  # the fit waits for two checkpoint writes
    return c


def _iterations(workdir) -> list[int]:
    rows = (workdir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(r)["iteration"] for r in rows]


def _fitted(workdir):
    mngr = ckpt.manager(str(workdir))
    try:
        step = mngr.latest_step()
        return step, ckpt.read_meta(mngr, step).get("fitted_iterations")
    finally:
        mngr.close()


def test_with_iterations_gives_the_schedule_of_that_length():
    c = _config(train__num_iterations=10, train__updates_per_iteration=2, train__warmup_steps=0)
    setup = trainer.make_setup(c)
    short = setup.with_iterations(3)
    assert short.config.train.num_iterations == 3 and c.train.num_iterations == 10
    # With one constant gradient, Adam's step is the learning rate itself: read the
    # schedule off the updates, against optax's schedule for 3 x 2 steps.
    want = learner.make_schedule(c.train, 3 * 2)
    params = {"w": jnp.zeros(3)}
    state = short.tx.init(params)
    for step in range(6):
        updates, state = short.tx.update({"w": jnp.ones(3)}, state, params)
        np.testing.assert_allclose(-updates["w"], want(step), rtol=1e-4)
    assert float(want(5)) < 0.1 * float(learner.make_schedule(c.train, 10 * 2)(5))


def test_a_fitted_setup_shares_the_compiled_self_play():
    # Self-play does not depend on the schedule: the fit rebuilds only the gradient step
    # (a 2-core CPU took ~20 s to compile self-play again, on the 15-minute default).
    setup = trainer.make_setup(_config(train__num_iterations=10))
    play = setup.host_play()
    assert setup.host_play() is play
    fitted = setup.with_iterations(3)
    assert fitted.host_play() is play and fitted.tx is not setup.tx


@pytest.mark.slow
def test_minutes_that_are_up_end_the_run_saved_and_the_same_command_goes_on(tmp_path, capsys):
    # A budget of a few milliseconds, spent by the first compile: the run saves after its
    # first iteration and stops, before any fit; the same command trains one more.
    c = _config(train__num_iterations=8, train__minutes=1e-4)
    trainer.train_and_evaluate(c, str(tmp_path))
    assert _iterations(tmp_path) == [1] and _fitted(tmp_path) == (1, None)
    assert "train.minutes=0.0001 are up at iteration 1 of 8" in capsys.readouterr().out
    trainer.train_and_evaluate(c, str(tmp_path))
    assert _iterations(tmp_path) == [1, 2] and _fitted(tmp_path) == (2, None)


@pytest.mark.slow
def test_a_fitted_length_is_kept_on_resume(tmp_path, capsys):
    n = trainer.FIT_AFTER + 1
    # An ample budget: fitted after FIT_AFTER iterations to train.num_iterations, the most.
    trainer.train_and_evaluate(_config(train__num_iterations=n, train__minutes=60.0),
                               str(tmp_path))
    assert _iterations(tmp_path) == list(range(1, n + 1)) and _fitted(tmp_path) == (n, n)
    # The same budget with a larger most: the run has its length; nothing more is trained.
    trainer.train_and_evaluate(_config(train__num_iterations=n + 4, train__minutes=60.0),
                               str(tmp_path))
    assert _iterations(tmp_path) == list(range(1, n + 1))
    out = capsys.readouterr().out
    assert f"nothing to train: the run is at iteration {n} and its length is {n}" in out
    # The hint names what kept the length (it told a command that gave N to give N).
    assert "with no --config.train.minutes beside it: a budget keeps" in out, out
    # A fixed length instead trains on to it, and becomes the run's length.
    trainer.train_and_evaluate(_config(train__num_iterations=n + 2), str(tmp_path))
    out = capsys.readouterr().out
    assert "nothing to train" not in out
    # ... and says so: the schedule changes from here (a plain GPU command after a length
    # given by hand would take the config's instead, and nothing said it).
    assert (f"the run's length changes from {n} to {n + 2} iterations (this command's "
            f"train.num_iterations): its learning-rate schedule is rescaled to {n + 2} from "
            f"iteration {n} on. To keep {n}, stop and run again with "
            f"--config.train.num_iterations={n}") in out
    assert _iterations(tmp_path) == list(range(1, n + 3)) and _fitted(tmp_path) == (n + 2, n + 2)
    # The budget's command again keeps that length: no fit from the middle of the run,
    # which would give it another schedule there, and no cut to the command's own
    # train.num_iterations (as the config's default is below a length given by hand).
    trainer.train_and_evaluate(_config(train__num_iterations=n, train__minutes=60.0),
                               str(tmp_path))
    assert _iterations(tmp_path) == list(range(1, n + 3))
    assert f"nothing to train: the run is at iteration {n + 2} and its length is {n + 2}" in (
        capsys.readouterr().out)
    # Resumed before its end (the last save lost, as by a kill just before it), the same
    # command trains on to that length.
    shutil.rmtree(tmp_path / "checkpoints" / str(n + 2))
    trainer.train_and_evaluate(_config(train__num_iterations=n, train__minutes=60.0),
                               str(tmp_path))
    assert "length changes" not in capsys.readouterr().out
    assert _iterations(tmp_path) == list(range(1, n + 3)) and _fitted(tmp_path) == (n + 2, n + 2)


@pytest.mark.slow
def test_a_run_made_before_train_minutes_keeps_its_length(tmp_path, capsys):
    old = _config(train__num_iterations=2)
    with old.unlocked():
        del old.train["minutes"]  # the config of a run made before the field existed
    trainer.train_and_evaluate(old, str(tmp_path))
    assert "minutes" not in json.loads((tmp_path / "config.json").read_text())["train"]
    # Resumed by a command with a budget: not fitted (a fit from where it stands would cut
    # its schedule mid-run); it trains to its train.num_iterations, kept as its length.
    trainer.train_and_evaluate(_config(train__num_iterations=4, train__minutes=60.0),
                               str(tmp_path))
    assert _iterations(tmp_path) == [1, 2, 3, 4] and _fitted(tmp_path) == (4, 4)
    out = capsys.readouterr().out
    assert "this run was made before train.minutes existed" in out
    # The length is this command's, and the change from the run's own is said (it said
    # "keeps its 4 iterations", the command's 4, of a run made with 2).
    assert "length is this command's train.num_iterations, 4 iterations" in out, out
    assert "it was made with 2" in out and "num_iterations=2 keeps it" in out, out


def test_a_length_on_the_command_line_turns_the_budget_off():
    c4 = str(Path(__file__).parent.parent / "configs" / "connect4.py")
    assert config_lib.load(c4).train.minutes == 15.0  # the CPU variant (tests run on a CPU)
    assert config_lib.load(c4, ["train.num_iterations=50"]).train.minutes == 0.0
    both = config_lib.load(c4, ["train.num_iterations=50", "train.minutes=5"])
    assert (both.train.num_iterations, both.train.minutes) == (50, 5.0)
    assert config_lib.load(c4, ["train.minutes=5"]).train.num_iterations == 1100
    # absl's single-dash form sets the length too (it kept the 15 minutes)
    fv = flags.FlagValues()
    config_lib.parse_flags(["train.py", f"--config={c4}", "-config.train.num_iterations=50"],
                           fv)
    assert (fv.config.train.num_iterations, fv.config.train.minutes) == (50, 0.0)


def test_time_is_up_when_the_next_iteration_would_end_past_the_budget():
    import time

    # After the first (compiling) 5 s iteration they take 2 s: at 59 s the next ends at 61 s.
    assert trainer.time_is_up(time.monotonic() - 59, 1, [5, 2, 2]) is True
    assert trainer.time_is_up(time.monotonic() - 50, 1, [5, 2, 2]) is False
    # The first iteration is not a measure of the next (median of [2]: 52 s, not 66 s) ...
    assert trainer.time_is_up(time.monotonic() - 50, 1, [30, 2]) is False
    # ... and with only that one, the next is taken as free.
    assert trainer.time_is_up(time.monotonic() - 59, 1, [30]) is False
    assert trainer.time_is_up(time.monotonic() - 61, 1, [30]) is True


@pytest.mark.parametrize("every, saved, opponents, want", [
    # Evaluated at multiples of 5, latest-5 is the previous evaluation's checkpoint: keep
    # the newest 2 at multiples of gcd(5, 5) = 5 (the one under test and 5 back).
    (5, 5, "random,checkpoint:latest-5", [(5, 2)]),
    # latest-2 at 5, 10, ... with a checkpoint every iteration: iterations 3, 8, ...,
    # multiples of gcd(2, 5) = 1; 2 back from the newest is the 3rd newest.
    (5, 1, "checkpoint:latest-2", [(1, 3)]),
    # latest-10 every 4, saved every 2: at 4k, 4k - 10 is a multiple of gcd(10, 4) = 2,
    # 5 steps of 2 back.
    (4, 2, "checkpoint:latest-10,greedy", [(2, 6)]),
    # Saved every 10, evaluated every 25 against latest-50: at 75, 25 was not saved and the
    # opponent is 20; the newest 6 saves (20 to 70) hold it, 5 hold it no more.
    (25, 10, "checkpoint:latest-50", [(10, 6)]),
    # latest-2 every 5, saved every 5: at 10 the opponent is 5 (8 was not saved).
    (5, 5, "checkpoint:latest-2", [(5, 2)]),
    (5, 5, "random,greedy", []),  # no latest-K
    (0, 5, "checkpoint:latest-5", []),  # no evaluation
])
def test_preserved_checkpoints_for_latest_k_by_hand(every, saved, opponents, want):
    c = tictactoe.get_config()
    c.eval.every, c.checkpoint.every, c.eval.opponents = every, saved, opponents
    assert trainer._preserved(c) == want


def test_a_budget_beyond_two_years_is_refused_before_any_work():
    """1e308 minutes passed the checks, then the fit of the run's length overflowed
    (`math.floor(inf)`) after the first iterations, again on every resume."""
    c4 = str(Path(__file__).parent.parent / "configs" / "connect4.py")
    for minutes, ok in ((1e308, False), (1e6 + 1, False), (1e6, True), (0.0, True)):
        config = config_lib.load(c4, [f"train.minutes={minutes}"])
        if ok:
            config_lib.validate(config, 1)
            continue
        with pytest.raises(ValueError, match=r"train.minutes=.* must be a finite number >= 0 "
                                             r"and <= 1e\+06"):
            config_lib.validate(config, 1)
