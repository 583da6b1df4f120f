"""The Connect4 solver benchmark: file format, mistake counting, agents, bitbully."""

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from az_jax.eval import connect4_positions, players, solver_bench
from az_jax.eval.solver_bench import Position

DATA = Path(__file__).parent / "data" / "connect4_solver_200.txt"
C4 = envs.make("connect4")


needs_bitbully = pytest.mark.skipif(importlib.util.find_spec("bitbully") is None,
                                    reason="bitbully is not installed")


@pytest.fixture(scope="module")
def positions():
    return solver_bench.read_positions(DATA)


@pytest.fixture(scope="module")
def states(positions):
    return solver_bench.states_from_moves(C4, positions)


# ------------------------------------------------------------------ the file format
def test_shipped_file(positions):
    assert len(positions) == 200
    assert all(8 <= len(p.moves) <= 20 for p in positions)
    assert all(p.column_scores is not None for p in positions)
    p = connect4_positions.parse_line("44 1 -2,-1,0,1,0,-1,-2")
    assert p == Position("44", 1, (-2, -1, 0, 1, 0, -1, -2))
    assert p.outcomes().tolist() == [-1, -1, 0, 1, 0, -1, -1]
    assert connect4_positions.parse_line(p.to_line()) == p
    assert connect4_positions.parse_line("  # a comment") is None
    assert connect4_positions.parse_line("") is None
    assert connect4_positions.parse_line("444444 0").column_scores is None  # Pons's 2 fields
    full = connect4_positions.parse_line("444444 -1 -3,-2,-1,x,-1,-2,-3")
    assert full.column_scores[3] is None and full.outcomes()[3] == -2


@pytest.mark.parametrize("line, why", [
    ("4455", "expected '<moves> <score>"),
    ("44 1 2 3", "expected '<moves> <score>"),
    ("4a55 1", "must be digits 1-7"),
    ("4805 1", "move 2 is '8'"),
    ("4444444 0", "move 7 plays column 4, which is full"),
    ("1212121 0", "already won at move 7"),
    ("44 one", "score 'one' is not an integer"),
    ("44 30", "outside [-22, 22]"),
    ("44 1 -2,-1,0,1,0,-1", "expected 7 comma-separated column scores, got 6"),
    ("44 1 -2,-1,0,1,0,-1,?", "column 7 score '?'"),
    ("44 1 -2,-1,0,x,0,-1,-2", "column 4 is marked full"),
    ("444444 -1 -3,-2,-1,0,-1,-2,-3", "column 4 is full; its score must be 'x'"),
    ("44 2 -2,-1,0,1,0,-1,-2", "score 2 is not the best column score 1"),
])
def test_malformed_lines_name_file_and_line(tmp_path, line, why):
    path = tmp_path / "bad.txt"
    path.write_text(f"# header\n44 1 -2,-1,0,1,0,-1,-2\n\n{line}\n")
    with pytest.raises(ValueError) as e:
        solver_bench.read_positions(path)
    assert f"{path}:4:" in str(e.value) and why in str(e.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        solver_bench.read_positions(tmp_path / "nope.txt")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no positions"):
        solver_bench.read_positions(tmp_path / "empty.txt")


def test_unlabelled_file_needs_bitbully(tmp_path, monkeypatch):
    (tmp_path / "pons.txt").write_text("4453 0\n")
    monkeypatch.setitem(sys.modules, "bitbully", None)  # as if not installed
    with pytest.raises(ValueError, match="pip install bitbully"):
        solver_bench.load_sets([str(tmp_path / "pons.txt")])


# ------------------------------------------------------------------ mistakes
def test_count_mistakes():
    p = Position("44", 1, (-2, -1, 0, 1, 0, -1, -2))
    q = Position("444444", 5, (5, 5, 5, None, 5, 5, 5))  # every move wins: not critical
    assert solver_bench.count_mistakes([p, q], [3, 0]) == (2, 1, 0)
    assert solver_bench.count_mistakes([p, q], [2, 3]) == (2, 1, 2)  # 3 is full in q
    s = solver_bench.count_mistakes([p], [-1])
    assert s.mistakes == 1 and s.rate == 1.0 and s.critical_rate == 1.0
    s = solver_bench.count_mistakes([p, q], [2, 0])  # a draw where p wins; q: a win
    assert (s.rate, s.critical_rate) == (0.5, 1.0)  # per position; per critical one
    assert solver_bench.random_mistake_rate([p]) == pytest.approx(6 / 7)


def test_random_mistake_rate_counts_only_the_open_columns():
    """E[rand] by hand, column 4 full: of the 6 legal moves 4 lose where 2 draw, so a
    uniform legal move errs with probability 4/6 (not 4/7, nor with the full column as a
    move); averaged per position with one where every open move wins (0)."""
    full = Position("444444", 0, (0, 0, -3, None, -1, -2, -3))
    wins = Position("444444", 5, (5, 5, 5, None, 5, 5, 5))
    assert solver_bench.random_mistake_rate([full]) == pytest.approx(4 / 6)
    assert solver_bench.random_mistake_rate([full, wins]) == pytest.approx(2 / 6)


@pytest.mark.parametrize("pad", [False, True])
def test_agent_actions_keep_each_position_s_own_move(positions, states, pad):
    """Batches of 64 over the 200 positions (the last one short, padded or not): each
    position gets the move its own state asks for. The player plays (stones on the board)
    mod 7, which the file says without the env: len(moves) % 7."""
    def act(params, s, key):
        del params, key
        return ((s.game.board >= 0).sum((-2, -1)) % 7).astype(jnp.int32)

    agent = players.Player("count", "count", act)
    got = solver_bench.agent_actions(agent, states, jax.random.PRNGKey(0), batch_size=64,
                                     pad=pad)
    np.testing.assert_array_equal(got, [len(p.moves) % 7 for p in positions])


def test_mistake_plies_by_hand():
    """Pons's scale by hand. Empty board (scores -2,-1,0,1,0,-1,-2): column 1 loses to the
    second player's 20th stone, ply 40 of the game; column 3 draws where column 4 wins with
    the first player's 21st stone, ply 41. After "4444" (2 stones each) a score of -18 is
    a loss to the opponent's 4th stone: two more of his moves, 4 plies."""
    empty = Position("", 1, (-2, -1, 0, 1, 0, -1, -2))
    assert solver_bench.mistake_plies(empty, 0) == 40
    assert solver_bench.mistake_plies(empty, 2) == 41
    assert solver_bench.mistake_plies(empty, 3) is None  # the best move
    assert solver_bench.mistake_plies(empty, 7) is None  # not a column
    p = Position("4444", 0, (-18, 0, 0, 0, 0, 0, -18))
    assert solver_bench.mistake_plies(p, 0) == 4 and solver_bench.mistake_plies(p, 1) is None
    counts = solver_bench.mistake_horizons([empty, empty, p, p, empty], [0, 2, 0, 3, -1])
    assert counts["3-4"] == 1 and counts["17+"] == 2 and counts["illegal"] == 1
    assert sum(counts.values()) == 4
    # beginning_easy: column 4 wins at once (18: the mover's 4th stone). Every mistake
    # misses that win, horizon 1, the losing ones too (column 2 was counted 32, "17+").
    won = Position("1573165", 3, (2, -2, 4, 18, 3, 0, -1))
    assert [solver_bench.mistake_plies(won, a) for a in range(7)] == [
        None, 1, None, None, None, 1, 1]
    assert solver_bench.mistake_horizons([won] * 3, [1, 5, 6])["1 (a win missed)"] == 3


def test_mistake_plies_against_the_rules():
    """bitbully's labels against the env's own rules, on every losing move of the 1783
    positions of the stratified sets: where the mover could win at once the horizon is 1
    (the loss is further away: it was counted there); else a horizon of 2 lets the
    opponent win at once, and a longer one does not."""
    sets = solver_bench.load_sets([str(Path(__file__).parent / "data" / "connect4")])
    pos = [(p, a) for ps in sets.values() for p in ps for a in range(7)
           if p.column_scores[a] is not None and p.column_scores[a] < 0
           and max(s for s in p.column_scores if s is not None) >= 0]
    plies = np.array([solver_bench.mistake_plies(p, a) for p, a in pos])
    states = solver_bench.states_from_moves(C4, [p for p, _ in pos])
    could_win = np.asarray(jax.jit(jax.vmap(C4.winning_moves))(
        states, states.current_player).any(-1))
    after = jax.jit(jax.vmap(C4.step))(states, jax.numpy.array([a for _, a in pos]))
    wins_at_once = np.asarray(jax.jit(jax.vmap(C4.winning_moves))(
        after, after.current_player).any(-1))
    # 964, counted by the loss before this rule: 744 under 2, 220 at 4 to 36 plies.
    assert could_win.sum() > 900
    np.testing.assert_array_equal(could_win, plies == 1)
    rest, answered = plies[~could_win], wins_at_once[~could_win]
    assert (rest == 2).sum() > 50 and (rest > 2).sum() > 500
    np.testing.assert_array_equal(answered, rest == 2)
    assert rest.min() >= 2 and rest.max() <= 42 and np.all(rest % 2 == 0)


def test_a_win_missed_at_once_is_horizon_1():
    """The other mistakes, draws where a win was there: horizon 1 exactly where the mover
    had a winning move at once (the env's own rules), odd horizons only."""
    sets = solver_bench.load_sets([str(Path(__file__).parent / "data" / "connect4")])
    pos = [(p, a) for ps in sets.values() for p in ps for a in range(7)
           if p.column_scores[a] == 0 and max(s for s in p.column_scores if s is not None) > 0]
    plies = np.array([solver_bench.mistake_plies(p, a) for p, a in pos])
    states = solver_bench.states_from_moves(C4, [p for p, _ in pos])
    could_win = np.asarray(jax.jit(jax.vmap(C4.winning_moves))(
        states, states.current_player).any(-1))
    assert (plies == 1).sum() > 20 and (plies > 1).sum() > 100 and np.all(plies % 2 == 1)
    np.testing.assert_array_equal(could_win, plies == 1)
    counts = solver_bench.mistake_horizons([p for p, _ in pos], [a for _, a in pos])
    assert counts["1 (a win missed)"] == (plies == 1).sum()
    assert counts["2 (answered at once)"] == 0


def test_perfect_player_from_labels(positions):
    best = [int(np.argmax([-99 if s is None else s for s in p.column_scores]))
            for p in positions]
    s = solver_bench.count_mistakes(positions, best)
    assert s.mistakes == 0 and s.critical > 50


def test_states_from_moves(positions, states):
    for i in (0, 7, 199):
        moves = positions[i].actions
        assert int(states.step_count[i]) == len(moves)
        assert int(states.current_player[i]) == len(moves) % 2
        assert not bool(states.done[i])
        board = np.asarray(states.game.board[i])
        assert (board >= 0).sum() == len(moves)
        for col in range(7):
            assert (board[:, col] >= 0).sum() == moves.count(col)
    with pytest.raises(ValueError, match="connect4"):
        solver_bench.states_from_moves(envs.make("tictactoe"), positions[:1])


def test_random_agent_mistake_rate(positions, states):
    agent = players.PlayerFactory(C4).random()
    expected = solver_bench.random_mistake_rate(positions)
    assert 0.2 < expected < 0.6
    rates = [solver_bench.count_mistakes(
        positions, solver_bench.agent_actions(agent, states, jax.random.PRNGKey(s),
                                              batch_size=128)).rate for s in range(3)]
    assert abs(np.mean(rates) - expected) < 0.06, (rates, expected)


def test_benchmark_rows(positions):
    agent = players.PlayerFactory(C4).onestep()
    rows = solver_bench.benchmark(C4, [agent], {"set": positions[:40]}, jax.random.PRNGKey(0))
    (row,) = rows
    assert row["agent"] == "onestep" and row["positions"] == 40
    assert 0 <= row["mistakes"] <= row["critical"] <= 40
    assert "onestep" in solver_bench.format_rows(rows)


def test_benchmark_compiles_once_for_sets_of_other_sizes(positions):
    one = players.PlayerFactory(C4).onestep()
    # A move function of its own: jit's cache is per function.
    fresh = players.Player("fresh", "fresh", lambda params, states, key: one.act(None, states, key))
    sets = {"a": positions[:40], "b": positions[40:73]}
    rows = solver_bench.benchmark(C4, [fresh], sets, jax.random.PRNGKey(0))
    assert [r["positions"] for r in rows] == [40, 33]
    assert jax.jit(fresh.act)._cache_size() == 1


# ------------------------------------------------------------------ with bitbully
@needs_bitbully
def test_labels_agree_with_bitbully(positions):
    for p in positions[:15]:
        assert connect4_positions.solve(p.moves) == p


@needs_bitbully
def test_perfect_player_bitbully(positions):
    import bitbully

    solver = connect4_positions._solver()
    some = positions[::4]
    actions = [solver.best_move(bitbully.Board.from_moves(p.actions)) for p in some]
    s = solver_bench.count_mistakes(some, actions)
    assert s.mistakes == 0 and s.rate == 0.0


@needs_bitbully
def test_make_and_label(tmp_path):
    out = tmp_path / "set.txt"
    assert solver_bench.main(["make", "--out", str(out), "--n", "6", "--min-moves", "3",
                              "--max-moves", "5", "--quiet"]) == 0
    made = solver_bench.read_positions(out)
    assert len(made) == 6 and len({p.moves for p in made}) == 6
    assert all(3 <= len(p.moves) <= 5 for p in made)
    pons = tmp_path / "pons.txt"
    pons.write_text("".join(f"{p.moves} {p.score}\n" for p in made))
    assert list(solver_bench.load_sets([str(pons)]).values())[0] == made
    pons.write_text(f"{made[0].moves} {made[0].score + 1}\n")
    with pytest.raises(ValueError, match="bitbully"):
        solver_bench.load_sets([str(pons)])


@pytest.mark.parametrize("where, why", [
    ("nodir/x.txt", "no folder .*nodir to write x.txt in"),
    (".", r"is a folder: give a file, e.g. .*positions.txt"),
])
def test_make_checks_its_out_before_solving(tmp_path, capsys, monkeypatch, where, why):
    """A bad --out was found by the write, after every position was generated and solved:
    now first, and nothing is generated."""
    import re

    def generate(*args, **kwargs):
        raise AssertionError("positions generated for an --out that cannot take them")

    monkeypatch.setattr(solver_bench, "generate", generate)
    assert solver_bench.main(["make", "--out", str(tmp_path / where), "--n", "3",
                              "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(why, err), err
