"""The `bitbully:D|perfect` Connect4 engine (az_jax/eval/external.py): names and errors
without the optional package; with it, its moves against hand-worked positions and the
shipped solver sets' unique best moves, and a whole match."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import envs
from az_jax.eval import connect4_positions, external, match, players

C4 = envs.make("connect4")
needs_bitbully = pytest.mark.skipif(importlib.util.find_spec("bitbully") is None,
                                    reason="bitbully is not installed")


def _play(engine, moves: str):
    """A new engine game after `moves` (1-based columns, as the solver files write them)."""
    game = engine.new_game()
    for c in moves:
        game.push(int(c) - 1)
    return game


def test_names_and_errors(monkeypatch):
    opps = external.parse_opponents("bitbully:perfect, bitbully:08,random")
    assert [o.name for o in opps] == ["bitbully:perfect", "bitbully:8", "random"]
    assert opps[0].arg is None and opps[1].arg == 8
    for bad in ("bitbully:0", "bitbully:43", "bitbully:x", "bitbully:"):
        with pytest.raises(ValueError, match="bitbully:perfect or bitbully:D"):
            external.parse_opponents(bad)
    with pytest.raises(ValueError, match="takes no"):
        external.parse_opponents("bitbully[1s]:8")
    with pytest.raises(ValueError, match="plays connect4 only, not tictactoe"):
        external.make_engine(opps[1], envs.make("tictactoe"))
    monkeypatch.setitem(sys.modules, "bitbully", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install bitbully"):
        external.make_engine(opps[0], C4)


@needs_bitbully
@pytest.mark.parametrize("name", ["bitbully:perfect", "bitbully:2"])
def test_takes_a_win_and_blocks_one(name):
    engine = external.make_engine(external.parse_opponent(name), C4)
    # X has three in column 4 and O three in column 1, X to move: X wins in column 4.
    assert _play(engine, "414141").best_action() == 3
    # X has three in column 4, O to move: only column 4 stops the four.
    assert _play(engine, "41414").best_action() == 3


@needs_bitbully
def test_perfect_plays_the_unique_best_move_of_the_solver_sets():
    """Hard sets have exactly one move that keeps the best outcome (their header): the
    perfect engine must play that column, through our move mirroring."""
    engine = external.make_engine(external.parse_opponent("bitbully:perfect"), C4)
    data = Path(__file__).parent / "data" / "connect4"
    checked = 0
    for name in ("beginning_hard.txt", "middle_hard.txt", "end_hard.txt"):
        for p in connect4_positions.read_positions(data / name)[:10]:
            scores = [s for s in p.column_scores if s is not None]
            best = [c for c, s in enumerate(p.column_scores) if s == max(scores)]
            assert len(best) == 1, p.moves
            assert _play(engine, p.moves).best_action() == best[0], p.moves
            checked += 1
    assert checked == 30


@needs_bitbully
def test_rejects_a_move_into_a_full_column():
    game = _play(external.make_engine(external.parse_opponent("bitbully:4"), C4), "444444")
    with pytest.raises(ValueError, match="not a legal move"):
        game.push(3)


@needs_bitbully
def test_a_match_against_the_perfect_engine():
    """A random player never beats the perfect engine, and the same key replays the same
    match."""
    engine = external.make_engine(external.parse_opponent("bitbully:perfect"), C4)
    runner = external.ExternalMatchRunner(C4, 4, opening_plies=0)
    me = players.PlayerFactory(C4).random()
    result = runner.play(me, engine, jax.random.PRNGKey(0))
    assert result.opponent == "bitbully:perfect" and result.unfinished == 0
    assert result.first.wins == 0 and result.second.wins == 0, result
    assert result.first.losses + result.second.losses >= 3, result
    again = runner.play(me, engine, jax.random.PRNGKey(0))
    assert (again.first, again.second, again.mean_plies) == (
        result.first, result.second, result.mean_plies)
    assert isinstance(result, match.MatchResult)
    # Connect4 from the empty board is a first-player win (Allis 1988): the random player
    # held that value in none of its games as first, and in all of its (lost) games as
    # second.
    assert result.notes == ("held the solved value of the opening in 2 of 4 games "
                            "(won 0/2, lost 2/2)"), result.notes


@needs_bitbully
def test_perfect_against_itself_holds_the_value_of_every_opening():
    """The perfect engine as the agent too, after one random ply: every game ends as the
    solver values its opening, so the agent held that value in all 8 games, and as the
    pairs share openings with colours swapped (first in games 0-3, second in 4-7), its
    results as second mirror those as first."""
    perfect = external.parse_opponent("bitbully:perfect")
    agent, engine = (external.make_engine(perfect, C4) for _ in range(2))
    runner = external.ExternalMatchRunner(C4, 8, opening_plies=1)
    result = runner.play(agent, engine, jax.random.PRNGKey(1))
    assert result.notes.startswith("held the solved value of the opening in 8 of 8 games")
    first, second = result.first, result.second
    assert (first.wins, first.draws, first.losses) == (second.losses, second.draws,
                                                       second.wins), result
    assert first.losses > 0 or first.draws > 0, result  # an opening off the centre


def test_held_note_counts_per_solved_value():
    theory = np.array([1, 1, 0, -1, np.nan, 0])
    outcome = np.array([1, -1, 0, -1, 1, 1])
    assert external.held_note(theory, outcome) == (
        "held the solved value of the opening in 3 of 5 games (won 1/2, drawn 1/2, lost 1/1)")


@needs_bitbully
def test_ties_are_broken_at_random_but_reproducibly():
    """From the empty board bitbully's 4-ply search scores columns 4 and 5 alike (2 and 2,
    the rest 0, from an empty table): the games of a match pick either, by their index, the
    same each time, whatever searches ran before."""
    engine = external.make_engine(external.parse_opponent("bitbully:4"), C4)
    picks = [engine.game(i).best_action() for i in range(12)]
    assert set(picks) == {3, 4}, picks
    _play(engine, "4434").best_action()  # another search fills the table
    assert [engine.game(i).best_action() for i in range(12)] == picks
