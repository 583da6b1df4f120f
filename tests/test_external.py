"""External engines (az_jax/eval/external.py): the Bagh-Chal move conversion against the PyPI
`baghchal` package, a short host-side match against its minimax engine, the errors, the
side gomokubench plays, and the engine in a training run's eval.opponents."""

from __future__ import annotations

import json
import os
import sys

import jax
import numpy as np
import pytest

import envs
from az_jax import config as config_lib
from az_jax import evaluate, trainer
from az_jax.eval import external, match, players
from tests.tiny import tiny_training

_cwd = os.getcwd()
import baghchal.env as ref  # noqa: E402  (changes the working directory on import)

os.chdir(_cwd)

env = envs.make("baghchal")
step = jax.jit(env.step)
TO_REF, FROM_REF = external.baghchal_move_tables(env)


def _random_game(rng):
    """One game: random goats, tigers that mostly avoid captures (so that games reach the
    movement phase) and capture sometimes. Returns ([(state, action)], final state)."""
    state, plies = env.init(jax.random.PRNGKey(0)), []
    while not (bool(state.terminated) or bool(state.truncated)):
        legal = np.flatnonzero(np.asarray(state.legal_action_mask))
        quiet = legal[legal < 225]
        if int(state.current_player) == 1 and quiet.size and rng.random() < 0.85:
            legal = quiet
        action = int(rng.choice(legal))
        plies.append((state, action))
        state = step(state, action)
    return plies, state


def test_move_tables_cover_every_action_once():
    assert len(set(FROM_REF.values())) == sum(1 for a in range(env.num_actions)
                                             if "(" not in env.action_to_str(a))
    for (a, _), move in TO_REF.items():
        assert FROM_REF[move] == a
    # Hand-checked: A5 is the package's (1, 1), E1 its (5, 5); C3 is (3, 3).
    assert TO_REF[env.parse_action("C3"), 0] == "G33"
    assert TO_REF[env.parse_action("A5-B4"), 1] == "B1122"
    assert TO_REF[env.parse_action("A1-C3"), 1] == "Bx5133"


def test_legal_moves_match_the_package_on_random_games():
    """At every ply of a few random games, our legal actions converted to the package's
    strings are exactly the package's legal moves, and the results agree."""
    rng = np.random.default_rng(0)
    plies, movement_plies = 0, 0
    for _ in range(4):
        board = ref.Board()
        history, final = _random_game(rng)
        for state, action in history:
            player = int(state.current_player)
            legal = {TO_REF[a, player] for a in np.flatnonzero(state.legal_action_mask)}
            assert legal == board.possible_moves(), f"ply {plies}"
            assert not board.is_game_over()
            board.move(TO_REF[action, player])
            plies += 1
            movement_plies += int(state.game.placed) >= 20
        assert board.is_game_over() == bool(final.terminated)
        if board.is_game_over():
            winner = {"G": 0, "B": 1, 0: None}[board.winner()]
            rewards = np.asarray(final.rewards)
            assert winner == (None if rewards[0] == 0 else int(rewards[1] > 0))
    assert movement_plies > 50, movement_plies  # the goats' moves were covered too


def test_a_match_against_minimax_completes():
    """Random goats/tigers against depth-1 minimax: 2 games, one per side. The engine as
    tigers captures whatever random goats leave hanging, so it wins that game."""
    engine = external.make_engine(external.parse_opponent("baghchal-minimax:1"), env)
    runner = external.ExternalMatchRunner(env, 2, opening_plies=2)
    me = players.PlayerFactory(env).random()
    ended = []
    result = runner.play(me, engine, jax.random.PRNGKey(3), progress=ended.append)
    assert result.player == "random" and result.opponent == "baghchal-minimax:1"
    assert result.first.games == 1 and result.second.games == 1 and sum(ended) == 2
    assert result.first == match.WDL(0, 0, 1), result  # random goats lose
    assert result.unfinished == 0 and 2 < result.mean_plies <= env.max_steps
    # Deterministic: the same key gives the same games.
    again = runner.play(me, engine, jax.random.PRNGKey(3))
    assert (again.first, again.second, again.mean_plies) == (
        result.first, result.second, result.mean_plies)


def test_engine_rejects_a_move_it_cannot_mirror():
    game = external.baghchal_minimax(env, 1).new_game()
    game.push(env.parse_action("C3"))  # goats place
    with pytest.raises(ValueError, match="not a move of player 1"):
        game.push(env.parse_action("B2"))  # a placement for the tigers
    with pytest.raises(ValueError, match="the package rejects"):
        game.push(env.parse_action("A1-C3"))  # a jump over nothing


# Random goats against capturing tigers (found by a one-off search): the goats to move with
# four goats captured, and every goat move leaves one open to a fifth capture.
_LOST_FOR_GOATS = ["G13", "B1121", "G14", "B5141", "G25", "Bx1535", "G33", "B3525", "G31",
                   "B5554", "G12", "B5455", "G32", "B4151", "G44", "Bx2141", "G31", "Bx4121",
                   "G52", "Bx5153"]


def test_engine_plays_the_first_sorted_move_when_every_move_loses():
    board = ref.Board()
    for move in _LOST_FOR_GOATS:
        board.move(move)
    assert board.next_turn == "G" and board.goats_captured == 4
    goat_moves = sorted(board.possible_moves())
    for move in goat_moves:  # the package's own rules: each move allows a capture at once
        after = ref.Board()
        for m in _LOST_FOR_GOATS + [move]:
            after.move(m)
        assert any(m.startswith("Bx") for m in after.possible_moves()), move
    game = external.baghchal_minimax(env, 2).new_game()
    state = env.init(jax.random.PRNGKey(0))
    for move in _LOST_FOR_GOATS:
        game.push(FROM_REF[move])
        state = step(state, FROM_REF[move])
    action = game.best_action()  # the package keeps no move; the engine still moves
    assert action == FROM_REF[goat_moves[0]]
    assert bool(state.legal_action_mask[action]) and not bool(state.terminated)


def test_parse_and_errors(monkeypatch):
    assert external.is_external("baghchal-minimax:2") and not external.is_external("mcts:2")
    opps = external.parse_opponents("random, baghchal-minimax:02,mcts:4")
    assert [o.name for o in opps] == ["random", "baghchal-minimax:2", "mcts:4"]
    assert isinstance(opps[1], external.ExternalOpponent) and opps[1].arg == 2
    assert external.parse_opponent("baghchal-minimax:6").arg == external.BAGHCHAL_MAX_DEPTH
    assert external.parse_opponents("mcts-rollout:100000")[0].simulations == 100_000
    for bad, msg in [("baghchal-minimax:0", "must be >= 1"),
                     ("baghchal-minimax:500", "'baghchal-minimax:500': the depth .* must be at "
                                              "most 6"),
                     ("mcts:100001", "'mcts:100001': the number of simulations must be at "
                                     "most 100000"),
                     ("random,mcts-rollout:1000000", "must be at most 100000"),
                     ("baghchal-minimax:x", "expected baghchal-minimax:D"),
                     ("alphabeta", "accepted forms: random.*external engines: baghchal-minimax")]:
        with pytest.raises(ValueError, match=msg):
            external.parse_opponents(bad)
    with pytest.raises(ValueError, match="plays baghchal only, not tictactoe"):
        external.make_engine(opps[1], envs.make("tictactoe"))
    monkeypatch.setitem(sys.modules, "baghchal.engine", None)  # as if not installed
    with pytest.raises(ImportError, match="needs the PyPI package 'baghchal'"):
        external.make_engine(opps[1], env)


def test_parse_bitbully_depths_up_to_a_full_board():
    assert external.parse_opponent("bitbully:42").arg == 42  # 6 x 7 plies: the whole game
    assert external.parse_opponent("bitbully:1").arg == 1


def test_gomokubench_plays_for_the_side_to_move():
    """Black and white each have four in a row open at one end (9x9, freestyle): the side
    to move completes its own five, not the other's, and leaves numpy's global generator
    where it was (it seeds it from the position for the move)."""
    gomoku = envs.make("gomoku", size=9)
    engine = external.make_engine(external.parse_opponent("gomokubench:standard"), gomoku)
    at = lambda r, c: r * 9 + c  # noqa: E731 - row 0 at the top, as the env's actions
    moves = [m for c in range(4) for m in (at(0, c), at(8, c))]  # black row 0, white row 8
    game = engine.new_game()
    for m in moves:
        game.push(m)
    np.random.seed(7)
    want = np.random.random(2)
    np.random.seed(7)
    first = np.random.random()
    assert game.best_action() == at(0, 4)  # black to move: its five
    assert np.random.random() == want[1] and first == want[0]
    game.push(at(4, 4))  # black plays elsewhere
    assert game.best_action() == at(8, 4)  # white to move: its own five, not a block


class _FirstFree:
    """A tic-tac-toe engine game that plays the lowest free cell, or always `fixed`, and
    may never see the game end (`sees_end=False`)."""

    def __init__(self, fixed=None, sees_end=True):
        self.taken, self.fixed, self.sees_end = [], fixed, sees_end

    def push(self, action):
        self.taken.append(action)

    def best_action(self):
        return self.fixed if self.fixed is not None else min(set(range(9)) - set(self.taken))

    def is_over(self):
        return None if self.sees_end else False


def test_a_match_stops_on_an_engine_s_illegal_move_or_wrong_view_of_the_end():
    """An engine that plays an occupied cell is a bug (ValueError), and so is an engine
    that says a finished game goes on (RuntimeError): neither is played through."""
    ttt = envs.make("tictactoe")
    runner = external.ExternalMatchRunner(ttt, 1)  # rounded up: one game a colour
    assert runner.num_games == 2
    me = players.PlayerFactory(ttt).random()
    centre = external.Engine("centre", lambda: _FirstFree(fixed=4))
    with pytest.raises(ValueError, match="centre chose B2, illegal in game 1 at ply 2"):
        runner.play(me, centre, jax.random.PRNGKey(0))  # its second move as first player
    blind = external.Engine("blind", lambda: _FirstFree(sees_end=False))
    with pytest.raises(RuntimeError, match="blind says the game is not over, the env says "
                                           "over"):
        runner.play(me, blind, jax.random.PRNGKey(0))


def test_evaluate_rejects_an_engine_of_another_game(capsys):
    code = evaluate.main(["--model", "tictactoe", "--against", "baghchal-minimax:2",
                          "--games", "2", "--quiet"])
    assert code == 2
    assert "plays baghchal only, not tictactoe" in capsys.readouterr().err


# ------------------------------------------------------------------ during training
def _tiny_baghchal(opponents: str):
    """configs/baghchal.py shrunk: a 4-channel net, 2 simulations, one iteration, 2 games
    per opponent of at most 40 plies (max_steps=20)."""
    from configs import baghchal

    return tiny_training(baghchal.get_config(), selfplay__num_plies=4,
                         eval__every=1, eval__opponents=opponents, env__kwargs__max_steps=20,
                         search__max_num_considered_actions=4)


@pytest.mark.slow
def test_training_evaluates_against_minimax(tmp_path):
    """One real training iteration with `baghchal-minimax:1` in eval.opponents: its score is
    in the returned metrics, in metrics.jsonl and on the Elo ladder. (The in-jit opponents
    next to it are covered by test_arena; one more would add a compile.)"""
    config = _tiny_baghchal("baghchal-minimax:1")
    metrics = trainer.train_and_evaluate(config, str(tmp_path))
    name = "eval/baghchal-minimax_1"
    assert 0 <= metrics[f"{name}/score"] <= 1
    assert metrics[f"{name}/win"] + metrics[f"{name}/draw"] + metrics[f"{name}/loss"] == 1
    assert metrics["score"] == metrics[f"{name}/score"]  # the mean over eval.opponents
    logged = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert logged[f"{name}/score"] == metrics[f"{name}/score"]
    matches = json.loads((tmp_path / "elo.json").read_text())["matches"]
    vs = [m for m in matches if m["b"] == "baghchal-minimax:1"]
    assert len(vs) == 1 and vs[0]["a"] == "iter-1/mcts:2", matches
    assert vs[0]["wins"] + vs[0]["draws"] + vs[0]["losses"] == 2, vs


def test_training_config_rejects_an_unusable_engine(tmp_path, monkeypatch):
    """Before anything is built: an engine of another game, or without its package."""
    from configs import connect4

    config = connect4.get_config()
    config.eval.opponents = "random,baghchal-minimax:1"
    with pytest.raises(ValueError, match="eval.opponents: opponent 'baghchal-minimax:1' "
                                         "plays baghchal only, not connect4"):
        trainer.train_and_evaluate(config, str(tmp_path / "c4"))
    assert not (tmp_path / "c4").exists()  # stopped before the run started

    monkeypatch.setitem(sys.modules, "baghchal.engine", None)  # as if not installed
    with pytest.raises(ValueError, match="eval.opponents: opponent 'baghchal-minimax:1' "
                                         "needs the PyPI package 'baghchal'"):
        config_lib.validate(_tiny_baghchal("baghchal-minimax:1"), 1)


def test_a_match_seen_from_the_engine_s_side():
    """`evaluate --brain` plays the host's match with the engine as the other player, then
    turns it round: A won 3, drew 1 as first player and won 1, lost 2 as second, so B,
    first in the games where A was second, won 2 and lost 1 there, and as second drew 1
    and lost 3 (hand-worked)."""
    from az_jax.eval.gauntlet import _swapped
    from az_jax.eval.match import WDL, MatchResult

    r = _swapped(MatchResult("a", "b", WDL(3, 1, 0), WDL(1, 0, 2), notes="2 forfeits"))
    assert (r.player, r.opponent) == ("b", "a")
    assert (r.first, r.second) == (WDL(2, 0, 1), WDL(0, 1, 3))
    assert r.notes == "b: 2 forfeits"
