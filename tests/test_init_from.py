"""`train.init_from`: a new run's network starts from another run's, another board size
allowed for fully convolutional networks (a Gomoku curriculum)."""

import jax
import numpy as np
import pytest

from az_jax import checkpoint, trainer
from configs import default
from tests import tiny

pytestmark = pytest.mark.slow  # every test here trains


def _config(size, source, head="conv", channels=8, rule="freestyle"):
    c = tiny.tiny_training(default.get_config(), selfplay__num_plies=2)
    c.env.id = "gomoku"
    c.env.kwargs.size, c.env.kwargs.rule = size, rule
    c.network.channels, c.network.head = channels, head
    c.replay.min_size = 200  # > the 16 plies played: no update, the network stays as it started
    c.checkpoint.every = 1
    c.train.init_from = str(source)
    return c


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A 5x5 conv-head Gomoku run (8 channels, one block) with one checkpoint."""
    return tiny.make_run(tmp_path_factory.mktemp("g5"), "gomoku", head="conv", size=5)


def test_a_larger_board_starts_from_a_smaller_boards_network(source, tmp_path):
    trainer.train_and_evaluate(_config(7, source), str(tmp_path / "g7"))
    got = checkpoint.restore(tmp_path / "g7")
    want = checkpoint.restore(source)
    assert got.env.params["size"] == 7 and want.env.params["size"] == 5
    for a, b in zip(jax.tree.leaves(want.variables), jax.tree.leaves(got.variables),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # A checkpoint directory names the same network.
    ckpt_dir = next((source / checkpoint.SUBDIR).iterdir())
    trainer.train_and_evaluate(_config(7, ckpt_dir), str(tmp_path / "g7b"))
    again = checkpoint.restore(tmp_path / "g7b")
    for a, b in zip(jax.tree.leaves(want.variables), jax.tree.leaves(again.variables),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_what_does_not_fit_is_refused_before_writing(source, tmp_path):
    with pytest.raises(ValueError, match=r"train.init_from=.*does not fit this run's"):
        trainer.train_and_evaluate(_config(5, source, channels=4), str(tmp_path / "a"))
    with pytest.raises(ValueError, match=r"train.init_from=.*dense head"):
        trainer.train_and_evaluate(_config(7, tiny.make_run(tmp_path / "d", "gomoku",
                                                            size=5), head="dense"),
                                   str(tmp_path / "b"))
    with pytest.raises(FileNotFoundError, match=r"train.init_from="):
        trainer.train_and_evaluate(_config(5, tmp_path / "nothing"), str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"train.init_from='model:nope'.*no shipped model"):
        trainer.train_and_evaluate(_config(5, "model:nope"), str(tmp_path / "e"))
    with pytest.raises(ValueError, match=r"train.init_from=.*TicTacToe.*same game"):
        trainer.train_and_evaluate(_config(5, tiny.make_run(tmp_path / "t", "tictactoe")),
                                   str(tmp_path / "f"))
    for name in "abcef":
        assert not (tmp_path / name / checkpoint.SUBDIR).exists()


def test_another_rule_starts_from_the_same_network(source, tmp_path):
    """Freestyle -> exactly five (`rule=standard`): the same shapes, so the same weights."""
    trainer.train_and_evaluate(_config(5, source, rule="standard"), str(tmp_path / "g5s"))
    got = checkpoint.restore(tmp_path / "g5s")
    assert got.env.params["rule"] == "standard"
    for a, b in zip(jax.tree.leaves(checkpoint.restore(source).variables),
                    jax.tree.leaves(got.variables), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_an_exported_model_is_not_resumed_but_started_from(source, tmp_path):
    """A shipped or exported model (the network alone) as --workdir: refused, with the
    init_from that starts a new run from it, and nothing written or moved, even with
    checkpoint.restart."""
    exported = tmp_path / "exported"
    checkpoint.export_model(source, exported)
    before = sorted(p.relative_to(exported) for p in exported.rglob("*"))
    for restart in (False, True):
        c = _config(5, "")
        c.checkpoint.restart = restart
        with pytest.raises(ValueError, match=r"exported model.*no optimizer.*another "
                                             r"--workdir.*train.init_from=.*exported"):
            trainer.train_and_evaluate(c, str(exported))
    assert sorted(p.relative_to(exported) for p in exported.rglob("*")) == before
    assert not (tmp_path / "exported.old-1").exists()
    trainer.train_and_evaluate(_config(5, exported), str(tmp_path / "new"))
    for a, b in zip(jax.tree.leaves(checkpoint.restore(source).variables),
                    jax.tree.leaves(checkpoint.restore(tmp_path / "new").variables),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_run_killed_before_its_first_checkpoint_still_starts_from_init_from(source,
                                                                              tmp_path):
    """The checkpoint folder exists from the start (orbax makes it), so a run killed during
    its first compile leaves it empty: the same command then starts from train.init_from,
    not from a random network."""
    (tmp_path / "g5k" / checkpoint.SUBDIR).mkdir(parents=True)
    trainer.train_and_evaluate(_config(5, source), str(tmp_path / "g5k"))
    for a, b in zip(jax.tree.leaves(checkpoint.restore(source).variables),
                    jax.tree.leaves(checkpoint.restore(tmp_path / "g5k").variables),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_other_observation_planes_of_the_same_shape_are_refused(tmp_path):
    """Connect4 with the threat planes (3 + 3) and without them but with the parity and
    lowest-threat planes (3 + 1 + 2): 6 planes both, so the shapes fit, but the network
    would read each plane as another. Refused, naming the env.kwargs; the same planes load."""
    src = tiny.make_run(tmp_path / "c4", "connect4", threats=True)
    c = tiny.tiny_training(default.get_config(), network__channels=8)
    c.env.id = "connect4"
    c.env.kwargs.threats, c.env.kwargs.parity, c.env.kwargs.lowest = False, True, True
    setup = trainer.Setup(c)
    assert setup.env.observation_shape == checkpoint.restore(src).env.observation_shape
    with pytest.raises(ValueError, match=r"train.init_from=.*other observation planes "
                                         r"\(env.kwargs.threats=True, env.kwargs.parity=False"):
        trainer.init_variables(str(src), setup)
    c.env.kwargs.threats, c.env.kwargs.parity, c.env.kwargs.lowest = True, False, False
    got = trainer.init_variables(str(src), trainer.Setup(c))
    for a, b in zip(jax.tree.leaves(checkpoint.restore(src).variables), jax.tree.leaves(got),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
