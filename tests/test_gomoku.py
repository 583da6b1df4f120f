"""Gomoku: protocol, hand-worked positions under both rules, parser, properties, and agreement
with OpenSpiel's `gomoku` (freestyle) and PyPI `renju` (its STANDARD rule: exactly five)."""

from __future__ import annotations

import functools
import re

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs
from envs.gomoku import Gomoku
from envs.testing import api_test
from tests.openspiel_ref import SpielRef


@functools.cache
def env_and_step(size: int, rule: str):
    """One env object and its jitted (init, step) per configuration: compiled once."""
    env = Gomoku(size=size, rule=rule)
    return env, jax.jit(env.init), jax.jit(env.step)


def play(moves, size=15, rule="freestyle"):
    """Plays notation ("H8") or actions from the start; returns the env and every state."""
    env, init, step = env_and_step(size, rule)
    states = [init(jax.random.PRNGKey(0))]
    for m in moves:
        states.append(step(states[-1], env.parse_action(m) if isinstance(m, str) else m))
    return env, states


def alternate(black, white):
    """[b0, w0, b1, w1, ...]: black's and white's moves interleaved (black may have one more)."""
    assert len(white) in (len(black) - 1, len(black))
    moves = [m for pair in zip(black, white, strict=False) for m in pair]
    return moves + list(black[len(white) :])


BLACK_WINS = [1.0, -1.0]
WHITE_WINS = [-1.0, 1.0]
NO_REWARD = [0.0, 0.0]


# ------------------------------------------------------------------------- protocol
@pytest.mark.parametrize(
    "size, rule", [(9, "freestyle"), (9, "standard"), (15, "freestyle"), (15, "standard")]
)
def test_api(size, rule):
    api_test(env_and_step(size, rule)[0], num_games=6, max_plies=120 if size == 9 else 60)


def test_params_and_registry():
    env = envs.make("gomoku", size=9, rule="standard")
    assert env.params == {"size": 9, "rule": "standard"}
    assert env.num_actions == 81 and env.observation_shape == (9, 9, 4)
    assert envs.make("gomoku").params == {"size": 15, "rule": "freestyle"}
    assert env.num_symmetries == 8


@pytest.mark.parametrize("size", [4, 23, 0, -5, 15.0, "15", True])
def test_bad_size(size):
    with pytest.raises(ValueError, match="5..22"):
        Gomoku(size=size)


def test_documented_sizes_are_the_accepted_ones():
    """The docstring's size range is the one `__init__` accepts (it said 5..19 once 20..22
    were accepted too)."""
    low, high = map(int, re.search(r"any of (\d+)\.\.(\d+)", Gomoku.__init__.__doc__).groups())
    assert Gomoku(size=low).size == low and Gomoku(size=high).size == high
    for size in (low - 1, high + 1):
        with pytest.raises(ValueError):
            Gomoku(size=size)


@pytest.mark.parametrize("rule", ["renju", "Freestyle", "", None])
def test_bad_rule(rule):
    with pytest.raises(ValueError, match="freestyle, standard"):
        Gomoku(rule=rule)


# ---------------------------------------------------------------- hand-worked wins
# Black's five (the last stone decides), white's stones far away and harmless.
FIVES = {
    "horizontal, bottom edge, from the corner": ["A1", "B1", "C1", "D1", "E1"],
    "vertical, right edge, into the top corner": ["O11", "O12", "O13", "O14", "O15"],
    "diagonal from the corner": ["A1", "B2", "C3", "D4", "E5"],
    "anti-diagonal into the bottom-right corner": ["K5", "L4", "M3", "N2", "O1"],
    "anti-diagonal from the top-left": ["E11", "D12", "C13", "B14", "A15"],
    "horizontal, last stone in the middle": ["F8", "G8", "I8", "J8", "H8"],
    "vertical, last stone second": ["H3", "H5", "H6", "H7", "H4"],
    "diagonal, last stone in the middle": ["F6", "G7", "I9", "J10", "H8"],
}
FAR_WHITE = ["A8", "C8", "A10", "C10", "E13"]


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
@pytest.mark.parametrize("name", list(FIVES))
def test_black_five_wins(name, rule):
    _, states = play(alternate(FIVES[name], FAR_WHITE[:4]), rule=rule)
    assert not states[-2].done
    assert states[-1].terminated and not states[-1].truncated
    np.testing.assert_array_equal(states[-1].rewards, BLACK_WINS)
    assert all(not s.rewards.any() for s in states[:-1])


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
def test_white_five_wins(rule):
    white = ["O15", "N14", "M13", "L12", "K11"]  # diagonal into the top-right corner
    _, states = play(alternate(FAR_WHITE, white), rule=rule)  # black plays FAR_WHITE's points
    assert not states[-2].done and states[-1].terminated
    np.testing.assert_array_equal(states[-1].rewards, WHITE_WINS)


# Black's six: five stones with a gap filled last.
SIX = alternate(["A5", "B5", "C5", "E5", "F5", "D5"], FAR_WHITE)


def test_overline_wins_under_freestyle():
    _, states = play(SIX, rule="freestyle")
    assert states[-1].terminated
    np.testing.assert_array_equal(states[-1].rewards, BLACK_WINS)


def test_overline_does_not_win_under_standard():
    _, states = play(SIX, rule="standard")
    last = states[-1]
    assert not last.done and int(last.current_player) == 1
    np.testing.assert_array_equal(last.rewards, NO_REWARD)
    # The game goes on: black's seven (G5) is no win either; an exact five elsewhere is.
    more = ["M1", "G5", "M2", "J1", "M3", "J2", "M4", "J3", "M6", "J4", "A1", "J5"]
    _, states = play(SIX + more, rule="standard")
    assert not any(s.done for s in states[:-1])
    np.testing.assert_array_equal(states[-1].rewards, BLACK_WINS)


def test_standard_exact_five_by_filling_a_gap():
    _, states = play(alternate(["A5", "B5", "D5", "E5", "C5"], FAR_WHITE[:4]), rule="standard")
    np.testing.assert_array_equal(states[-1].rewards, BLACK_WINS)


def test_standard_five_is_not_spoiled_by_a_sixth_beyond_a_gap():
    # B5..F5 exact five with H5 black: the gap at G5 keeps it five.
    black = ["B5", "C5", "D5", "E5", "H5", "F5"]
    _, states = play(alternate(black, FAR_WHITE), rule="standard")
    np.testing.assert_array_equal(states[-1].rewards, BLACK_WINS)


def test_standard_overline_and_five_through_one_stone():
    # H8 makes a six in row 8 (D8-I8) and exactly five in column H (H4-H8): the five counts.
    black = ["D8", "E8", "F8", "G8", "I8", "H4", "H5", "H6", "H7", "H8"]
    white = ["A1", "A3", "A5", "A7", "A9", "A11", "A13", "C1", "C3"]
    _, states = play(alternate(black, white), rule="standard")
    assert not states[-2].done
    np.testing.assert_array_equal(states[-1].rewards, BLACK_WINS)


def test_four_is_not_a_win():
    _, states = play(alternate(["A1", "B1", "C1", "D1"], FAR_WHITE[:4]))
    assert not states[-1].done


# ------------------------------------------------------------------ winning_moves hook
@functools.cache
def wins_by_hook_and_by_step(size: int, rule: str):
    """Jitted state -> (hook, step) bool[2, A]: per player, `env.winning_moves` and the
    legal moves that `env.step` ends with that player winning when he is made the mover."""
    env = env_and_step(size, rule)[0]
    actions = jax.numpy.arange(env.num_actions, dtype=jax.numpy.int32)

    def by_step(state, player):
        as_player = state.replace(current_player=jax.numpy.asarray(player, jax.numpy.int32))
        nxt = jax.vmap(env.step, in_axes=(None, 0))(as_player, actions)
        return (state.legal_action_mask & nxt.terminated & (nxt.rewards[:, player] > 0)
                & ~state.done)

    def both(state):
        hook = jax.numpy.stack([env.winning_moves(state, p) for p in (0, 1)])
        return hook, jax.numpy.stack([by_step(state, p) for p in (0, 1)])

    return jax.jit(both)


def test_standard_winning_moves_skip_a_point_that_lengthens_an_overline():
    """9x9 standard: black's six A5-F5 (D5 filled last) is no win and the game goes on;
    G5 (point 42) would make seven, no win either, so the hook must not offer it (it must
    see past four stones on one side), in agreement with stepping every move."""
    moves = alternate([36, 37, 38, 40, 41, 39], [80, 78, 76, 74, 72, 62])
    assert moves == [36, 80, 37, 78, 38, 76, 40, 74, 41, 72, 39, 62]
    env, states = play(moves, size=9, rule="standard")
    last = states[-1]
    assert not last.done and int(last.current_player) == 0
    after = env_and_step(9, "standard")[2](last, 42)
    assert not after.done  # by the rules: seven in a row, no exact five
    hook, ref = map(np.asarray, wins_by_hook_and_by_step(9, "standard")(last))
    assert not hook[0, 42]
    np.testing.assert_array_equal(hook, ref)


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
def test_winning_moves_match_stepping_with_overlines_on_the_board(rule):
    """Random 9x9 positions built around a six of one side (gap filled last, so it is on
    the board unfinished under standard) plus random stones: for both players the hook's
    winning moves are exactly the moves that stepping ends with that player winning."""
    rng = np.random.default_rng(7 if rule == "freestyle" else 8)
    check = wins_by_hook_and_by_step(9, rule)
    dirs = ((0, 1), (1, 0), (1, 1), (1, -1))
    running = 0
    for _ in range(16):
        dr, dc = dirs[rng.integers(4)]
        while True:
            r, c = rng.integers(9), rng.integers(9)
            line = [(r + k * dr) * 9 + c + k * dc for k in range(6)]
            if all(0 <= r + k * dr < 9 and 0 <= c + k * dc < 9 for k in range(6)):
                break
        run = line[:3] + line[4:] + line[3:4]  # no five before the sixth stone
        others = [int(a) for a in rng.permutation(81) if a not in line]
        extra = int(rng.integers(0, 5))
        fill = others[:len(run) + 2 * extra]
        if rng.integers(2):  # black's six
            moves = alternate(run + fill[6:6 + extra], fill[:6] + fill[6 + extra:])
        else:  # white's six
            moves = alternate(fill[:6] + fill[6 + extra:], run + fill[6:6 + extra])
        _, states = play(moves, size=9, rule=rule)
        running += int(not states[-1].done)
        for s in states[-3:]:
            hook, ref = map(np.asarray, check(s))
            np.testing.assert_array_equal(hook, ref, err_msg=f"{rule} {moves}")
    if rule == "standard":
        assert running >= 12, running  # the overlines stayed on the board, unfinished


@pytest.mark.parametrize("size, rule", [(9, "standard"), (15, "freestyle")])
def test_threat_counts_match_the_numpy_counts(size, rule):
    """`Gomoku.threat_counts` (read from the board) on positions of clustered games, where
    fours and threes abound, cut at every fourth ply: equal to the numpy reference
    (`gomoku_tactics.count_after`: each point placed and the board scanned again), zeroed
    where the move is no threat (it makes five, fills the board, or leaves the other side
    a five-point), and to the stepping default (`core.Env.threat_counts`)."""
    from az_jax.eval.solver_bench import replay
    from envs import core
    from envs import gomoku_tactics as gt

    env = env_and_step(size, rule)[0]
    games = gt.clustered_games(size, 12, 48, seed=size)
    cuts = [g[:k] for g in games for k in range(6, len(g) + 1, 4)]
    states = replay(env, cuts)
    got, default = map(np.asarray, jax.jit(jax.vmap(lambda s: (
        env.threat_counts(s), core.Env.threat_counts(env, s))))(states))
    threats = 0
    for moves, row, ref_row in zip(cuts, got, default, strict=True):
        board, me = gt.board_from_moves(moves, size)
        mine, his = gt.winning_points(board, me, rule), gt.winning_points(board, 1 - me, rule)
        full = (board == gt.EMPTY).sum() == 1
        want = np.where((board == gt.EMPTY) & ~mine & (his.sum() - his == 0) & ~full,
                        gt.count_after(board, me, rule), 0).ravel()
        np.testing.assert_array_equal(row, want, err_msg=f"{rule} {moves}")
        np.testing.assert_array_equal(ref_row, want, err_msg=f"{rule} {moves}")
        threats += int((want > 0).sum())
    assert threats >= 50, threats  # the positions hold threats to count


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
def test_tactics_count_after_keeps_a_four_already_on_the_board(rule):
    """`gomoku_tactics.count_after` when black already has a four (A5-D5, E5 open; white
    in the corners): a far point such as E1 leaves black the one winning point E5 (count
    1, a four move, no open four), by hand; and at every point whose stone does not end
    the game, the count is the env's: black plays it, then `env.winning_moves` for black."""
    from envs import gomoku_tactics as gt

    moves = alternate([36, 37, 38, 39], [0, 8, 72, 80])
    env, states = play(moves, size=9, rule=rule)
    state = states[-1]
    board, player = gt.board_from_moves(moves, 9)
    assert player == 0 and int(state.current_player) == 0 and not state.done
    count = gt.count_after(board, 0, rule)
    far = env.parse_action("E1")
    assert far == 76 and count.flat[far] == 1
    assert gt.four_moves(board, 0, rule).flat[far]
    assert not gt.open_four_moves(board, 0, rule).flat[far]

    def env_count(s):
        children = jax.vmap(env.step, in_axes=(None, 0))(
            s, jax.numpy.arange(env.num_actions, dtype=jax.numpy.int32))
        wins = jax.vmap(env.winning_moves, in_axes=(0, None))(children, 0).sum(-1)
        return wins, children.done

    wins, done = map(np.asarray, jax.jit(env_count)(state))
    open_points = (board.reshape(-1) == gt.EMPTY) & ~done
    assert open_points.sum() == 81 - 8 - 1  # all but the stones and E5 (black's five)
    np.testing.assert_array_equal(count.reshape(-1)[open_points], wins[open_points])


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
def test_draw_on_full_5x5_board(rule):
    pattern = ["XXOOX", "OOXXO", "XXOOX", "OOXXO", "XXOOX"]  # no row, column or diagonal of 5
    x = [r * 5 + c for r in range(5) for c in range(5) if pattern[r][c] == "X"]
    o = [r * 5 + c for r in range(5) for c in range(5) if pattern[r][c] == "O"]
    _, states = play(alternate(x, o), size=5, rule=rule)
    assert len(states) == 26 and not states[-2].done
    assert states[-1].terminated and not states[-1].truncated
    np.testing.assert_array_equal(states[-1].rewards, NO_REWARD)


# ------------------------------------------------------------- illegal, absorbing
@pytest.mark.parametrize("bad", ["H8", -1, 225, 10_000])
def test_illegal_move_loses(bad):
    _, states = play(["H8", "J9", bad])  # black to move, H8 occupied
    assert states[-1].terminated
    np.testing.assert_array_equal(states[-1].rewards, WHITE_WINS)


def test_finished_game_is_absorbing():
    five = alternate(FIVES["diagonal from the corner"], FAR_WHITE[:4])
    _, states = play(five + ["O15", "N15"])
    done, after = states[len(five)], states[-1]
    assert done.terminated
    np.testing.assert_array_equal(after.rewards, NO_REWARD)
    same = after.replace(rewards=done.rewards)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(done), strict=True):
        np.testing.assert_array_equal(a, b)


def test_observation_planes():
    env, states = play(["H8", "J9"], size=15)
    obs = np.asarray(states[-1].observation)  # black to move
    h8, j9 = env.parse_action("H8"), env.parse_action("J9")
    planes = obs.reshape(225, 4)
    assert planes[h8, 0] == 1 and planes[:, 0].sum() == 1  # mover's (black) stones
    assert planes[j9, 1] == 1 and planes[:, 1].sum() == 1  # opponent's
    assert planes[j9, 2] == 1 and planes[:, 2].sum() == 1  # last move
    assert planes[:, 3].all()  # black to move
    obs = np.asarray(states[-2].observation).reshape(225, 4)  # white to move
    assert obs[h8, 1] == 1 and obs[h8, 2] == 1 and not obs[:, 0].any() and not obs[:, 3].any()
    assert not np.asarray(states[0].observation)[..., 2].any()  # no last move yet


# ------------------------------------------------------------------- host side
def test_parse_action_and_names():
    env = env_and_step(15, "freestyle")[0]
    assert env.parse_action("H8") == 7 * 15 + 7 and env.parse_action(" h8 ") == 112
    assert env.parse_action("A15") == 0 and env.parse_action("O1") == 224
    assert env.action_to_str(0) == "A15" and env.action_to_str(224) == "O1"
    assert all(env.parse_action(env.action_to_str(a)) == a for a in range(225))
    for bad in ["P1", "A16", "A0", "8H", "", "H", "HH8", "H-1"]:
        with pytest.raises(ValueError, match="A-O"):
            env.parse_action(bad)
    _, states = play(["E5"])
    with pytest.raises(ValueError, match="E5 is occupied"):
        env.parse_action("e5", states[-1])
    assert env.parse_action("E6", states[-1]) == env.parse_action("E6")
    big = Gomoku(size=19)
    assert big.parse_action("S19") == 18 and big.action_to_str(360) == "S1"
    with pytest.raises(ValueError, match="A-S"):
        big.parse_action("T1")


def test_render():
    env, states = play(["H8", "I9"], size=9)
    lines = env.render(states[-1]).splitlines()
    assert len(lines) == 10 and lines[-1].split() == list("ABCDEFGHI")  # I included
    assert lines[0].split()[0] == "9" and lines[8].split()[0] == "1"
    row8 = lines[9 - 8]
    assert " X " in row8 and "(" not in row8
    assert lines[9 - 9].endswith("(O)")  # I9, the last move, is marked


# -------------------------------------------------------------------- properties
def _with_noise(plies, noise):
    for t, a in noise:
        plies[t % len(plies)] = a
    return plies


SIZE = 7
SEQUENCES = st.builds(
    _with_noise,
    st.permutations(range(SIZE * SIZE)).map(lambda p: list(p) + list(p[:3])),
    st.lists(
        st.tuples(st.integers(0, SIZE * SIZE + 2), st.integers(-2, SIZE * SIZE + 1)), max_size=2
    ),
)


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
@settings(max_examples=40, deadline=None)
@given(actions=SEQUENCES)
def test_random_sequences(check_trajectory, rule, actions):
    """Any action sequence, illegal ones included: zero-sum, absorbing, consistent mask."""
    env = env_and_step(SIZE, rule)[0]
    check_trajectory(env, actions, legal_of=lambda board: board < 0)


# ------------------------------------------------------- vs OpenSpiel and renju
class _SpielGomoku(SpielRef):
    """OpenSpiel `gomoku`: five or more in a row wins (freestyle); actions row * N + col as
    ours; observation planes (black, white, empty) in the same order as our board."""

    def board(self):
        black, white, _ = np.asarray(self.s.observation_tensor(0)).reshape(3, -1)
        return np.where(black > 0, 0, np.where(white > 0, 1, -1))


def _longest_through(board, row, col):
    """Longest line of one colour through (row, col): an independent plain-Python count."""
    n, colour, best = board.shape[0], board[row, col], 0
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < n and 0 <= c < n and board[r, c] == colour:
                run, r, c = run + 1, r + sign * dr, c + sign * dc
        best = max(best, run)
    return best


class _Renju:
    """PyPI `renju` RenjuBoard with Rule.STANDARD (or FREESTYLE): no forbidden moves, exactly
    five wins under STANDARD. Its (x, y) is (column, row from the bottom). It has no legal
    move list (any empty point is legal; it raises on an occupied one), so this wrapper keeps
    the board and counts plies that made an overline, to show the rule was exercised."""

    def __init__(self, renju, size, rule):
        self.renju, self.size = renju, size
        self.b = renju.RenjuBoard(board_size=size, rule=rule)
        self.grid = np.full((size, size), -1)
        self.overlines = 0

    def legal(self):
        return np.flatnonzero(self.grid.reshape(-1) < 0).tolist()

    def to_move(self):
        return len(self.b.moves) % 2

    def play(self, action):
        row, col = divmod(action, self.size)
        self.grid[row, col] = self.to_move()
        self.b.play_move(col, self.size - 1 - row)
        self.overlines += _longest_through(self.grid, row, col) >= 6

    def outcome(self):
        status = self.renju.BoardStatus
        return {
            status.ONGOING: None,
            status.BLACK_WIN: (1.0, -1.0),
            status.WHITE_WIN: (-1.0, 1.0),
            status.DRAW: (0.0, 0.0),
        }[self.b.status]

    def board(self):
        return self.grid.reshape(-1)


def test_openspiel_gomoku_is_freestyle():
    pyspiel = pytest.importorskip("pyspiel")
    params = pyspiel.load_game("gomoku").get_parameters()
    assert params == {"anti": False, "connect": 5, "dims": 2, "size": 15, "wrap": False}
    game = pyspiel.load_game("gomoku", {"size": 9})
    ref = _SpielGomoku(game)
    for a in alternate([0, 1, 2, 4, 5, 3], [80, 71, 62, 53, 44]):  # black's six on row 0
        ref.play(a)
    assert ref.outcome() == (1.0, -1.0)


@pytest.mark.parametrize("size, num_games", [(9, 2000), (15, 2000)])
def test_freestyle_matches_openspiel(differential, size, num_games):
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("gomoku", {"size": size})
    env = env_and_step(size, "freestyle")[0]
    stats = differential(env, lambda: _SpielGomoku(game), num_games, seed=size)
    assert stats["p0"] and stats["p1"], stats


@pytest.mark.parametrize("size, num_games", [(9, 2000), (15, 500)])
def test_standard_matches_renju(differential, size, num_games):
    renju = pytest.importorskip("renju")
    env = env_and_step(size, "standard")[0]
    refs = []

    def make_ref():
        refs.append(_Renju(renju, size, renju.Rule.STANDARD))
        return refs[-1]

    stats = differential(env, make_ref, num_games, seed=100 + size)
    assert stats["p0"] and stats["p1"], stats
    overlines = sum(r.overlines for r in refs)
    assert overlines >= (50 if size == 9 else 5), f"only {overlines} overlines were played"


def test_freestyle_matches_renju_freestyle(differential):
    renju = pytest.importorskip("renju")
    env = env_and_step(9, "freestyle")[0]
    stats = differential(env, lambda: _Renju(renju, 9, renju.Rule.FREESTYLE), 500, seed=7)
    assert stats["p0"] and stats["p1"], stats
