"""Connect Four: protocol, hand-worked positions, parser, properties, and OpenSpiel agreement."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs
from envs.testing import api_test
from tests.openspiel_ref import SpielRef

ENV = envs.make("connect4")
INIT = jax.jit(ENV.init)
STEP = jax.jit(ENV.step)
DRAW = [0, 2, 4, 6, 1, 3, 5] * 6  # fills the board in stripes of two: no four anywhere


def play(moves, state=None):
    """Plays columns 0..6 (ints) or notation "1".."7" (str), one jitted step each."""
    state = INIT(jax.random.PRNGKey(0)) if state is None else state
    for m in moves:
        state = STEP(state, ENV.parse_action(m) if isinstance(m, str) else m)
    return state


def test_api():
    api_test(ENV, num_games=8, max_plies=50)


@pytest.mark.parametrize(
    "moves, winner",
    [
        ([0, 1, 0, 1, 0, 1, 0], 0),  # vertical, left edge
        ([6, 0, 6, 6, 0, 6, 1, 6, 1, 6], 1),  # vertical for O, right edge, up to the top row
        ([0, 0, 1, 1, 3, 3, 2], 0),  # horizontal, bottom row, the last stone inside the line
        ([3, 3, 4, 4, 5, 5, 6], 0),  # horizontal into the bottom-right corner
        ([0, 1, 1, 2, 3, 2, 2, 3, 4, 3, 3], 0),  # diagonal / from the bottom-left corner
        ([6, 5, 5, 4, 3, 4, 4, 3, 2, 3, 3], 0),  # anti-diagonal \ into the bottom-right corner
    ],
)
def test_wins(moves, winner):
    before = play(moves[:-1])
    assert not before.done
    state = STEP(before, moves[-1])
    assert state.terminated and not state.truncated
    expected = [1.0, -1.0] if winner == 0 else [-1.0, 1.0]
    np.testing.assert_array_equal(state.rewards, expected)
    assert state.legal_action_mask.all()


def test_draw_on_full_board():
    before = play(DRAW[:-1])
    assert not before.done and before.legal_action_mask.sum() == 1
    state = STEP(before, DRAW[-1])
    assert state.terminated
    np.testing.assert_array_equal(state.rewards, [0.0, 0.0])
    assert (np.asarray(state.game.board) >= 0).all()


def test_stones_fall_and_observation():
    state = play([3])  # X in the bottom row; O to move
    board = np.asarray(state.game.board)
    assert board[5, 3] == 0 and (np.delete(board.reshape(-1), 5 * 7 + 3) == -1).all()
    obs = np.asarray(state.observation)
    assert obs.shape == (6, 7, 3) and obs.dtype == np.bool_
    assert obs[..., 0].sum() == 0  # O (the mover) has no stone yet
    assert obs[5, 3, 1] == 1 and obs[..., 1].sum() == 1  # X, the opponent
    assert not obs[..., 2].any()  # the mover is not X
    obs = np.asarray(STEP(state, 3).observation)  # X to move again
    assert obs[5, 3, 0] == 1 and obs[4, 3, 1] == 1 and obs[..., 2].all()


@pytest.mark.parametrize("bad", [0, -1, 7, 99])
def test_illegal_move_loses(bad):
    state = play([0] * 6)  # column 1 is full, no four; X to move
    assert not state.done and not state.legal_action_mask[0]
    state = STEP(state, bad)
    assert state.terminated
    np.testing.assert_array_equal(state.rewards, [-1.0, 1.0])


def test_finished_game_is_absorbing():
    done = play([0, 1, 0, 1, 0, 1, 0])
    again = STEP(done, 2)
    np.testing.assert_array_equal(again.rewards, [0.0, 0.0])
    for name in ("current_player", "terminated", "step_count", "observation"):
        np.testing.assert_array_equal(getattr(again, name), getattr(done, name))
    np.testing.assert_array_equal(again.game.board, done.game.board)


def test_parse_action():
    assert [ENV.parse_action(str(c)) for c in range(1, 8)] == list(range(7))
    assert ENV.parse_action(" 4 ") == 3
    assert [ENV.action_to_str(a) for a in range(7)] == list("1234567")
    for bad in ["0", "8", "12", "a", "", "-1", "1.0"]:
        with pytest.raises(ValueError, match="1-7"):
            ENV.parse_action(bad)
    state = play([0] * 6)
    with pytest.raises(ValueError, match="column 1 is full"):
        ENV.parse_action("1", state)
    assert ENV.parse_action("2", state) == 1
    with pytest.raises(ValueError, match="over"):
        ENV.parse_action("2", play([0, 1, 0, 1, 0, 1, 0]))


def test_render():
    text = ENV.render(play([3, 3]))
    lines = text.splitlines()
    assert len(lines) == 7 and lines[-1].split() == list("1234567")
    assert "(O)" in lines[4] and " X " in lines[5] and "(X)" not in text  # last move marked


def test_symmetries_mirror():
    obs = np.asarray(play([0, 1]).observation)
    policy = np.arange(7, dtype=np.float32)
    s_obs, s_pol = ENV.symmetries(obs, policy)
    assert s_obs.shape == (2, 6, 7, 3) and ENV.num_symmetries == 2
    np.testing.assert_array_equal(s_pol[1], policy[::-1])
    np.testing.assert_array_equal(s_obs[1], np.asarray(play([6, 5]).observation))


# -------------------------------------------------------------------- properties
def _with_noise(plies, noise):
    for t, a in noise:
        plies[t % len(plies)] = a
    return plies


SEQUENCES = st.builds(
    _with_noise,
    st.lists(st.integers(0, 6), min_size=45, max_size=45),
    st.lists(st.tuples(st.integers(0, 44), st.integers(-2, 8)), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(SEQUENCES)
def test_random_sequences(check_trajectory, actions):
    """Any action sequence, illegal ones included: zero-sum, absorbing, consistent mask."""
    check_trajectory(ENV, actions, legal_of=lambda board: board.reshape(6, 7)[0] < 0)


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(7)))
def test_draw_in_any_column_order(check_trajectory, order):
    """Long games: DRAW's move order with the columns relabelled (wins or a full board)."""
    check_trajectory(ENV, [order[c] for c in DRAW], legal_of=lambda b: b.reshape(6, 7)[0] < 0)


# ------------------------------------------------------------------ vs OpenSpiel
class _SpielConnectFour(SpielRef):
    """OpenSpiel connect_four. Actions are columns as ours; its observation planes
    (x, o, empty) have row 0 at the bottom, so the board is flipped to compare."""

    def board(self):
        x, o, _ = np.asarray(self.s.observation_tensor(0)).reshape(3, 6, 7)[:, ::-1]
        return np.where(x > 0, 0, np.where(o > 0, 1, -1)).reshape(-1)


def test_matches_openspiel(differential):
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("connect_four")
    assert game.get_parameters() == {
        "columns": 7,
        "egocentric_obs_tensor": False,
        "rows": 6,
        "x_in_row": 4,
    }
    stats = differential(ENV, lambda: _SpielConnectFour(game), num_games=2000, seed=2)
    assert stats["p0"] and stats["p1"], stats


def test_draw_matches_openspiel():
    pyspiel = pytest.importorskip("pyspiel")
    ref = pyspiel.load_game("connect_four").new_initial_state()
    for a in DRAW:
        ref.apply_action(a)
    assert ref.is_terminal() and ref.returns() == [0.0, 0.0]


# ------------------------------------------------------- threats=True: three more planes
THREATS = envs.make("connect4", threats=True)
T_STEP = jax.jit(THREATS.step)


def _makes_four(board, row, col, stone):
    """Independent of the env's line tables: every 4-cell window through (row, col)."""
    return _makes(board, row, col, stone, 4)


def _expected_planes(board, mover):
    """[6, 7, 3]: the mover's and the opponent's four-making empty cells, playable cells."""
    out = np.zeros((6, 7, 3), bool)
    for r in range(6):
        for c in range(7):
            if board[r, c] >= 0:
                continue
            out[r, c, 0] = _makes_four(board, r, c, mover)
            out[r, c, 1] = _makes_four(board, r, c, 1 - mover)
            out[r, c, 2] = r == 5 or board[r + 1, c] >= 0
    return out


def test_threat_planes_hand_worked():
    state = THREATS.init(jax.random.PRNGKey(0))
    for a in [0, 0, 1, 1, 2]:  # X on 1-3 of the bottom row, O on 1-2 above; O to move
        state = T_STEP(state, a)
    obs = np.asarray(state.observation)
    assert obs.shape == (6, 7, 6) and THREATS.observation_shape == (6, 7, 6)
    assert not obs[..., 3].any()  # O (to move) threatens nothing
    x_threats = np.zeros((6, 7), bool)
    x_threats[5, 3] = True  # X's open end; column 1 is blocked on the left by the edge
    np.testing.assert_array_equal(obs[..., 4], x_threats)
    playable = np.zeros((6, 7), bool)
    playable[3, [0, 1]] = playable[4, 2] = True
    playable[5, 3:] = True
    np.testing.assert_array_equal(obs[..., 5], playable)


def test_threat_planes_match_brute_force():
    """Random games, many threats on the board (no stopping at a win until the end): every
    position's extra planes against the window scan above, the first three planes as the
    plain env's."""
    rng = np.random.default_rng(0)
    plain_step = STEP
    checked = threats = 0
    for _ in range(12):
        s_t, s_p = THREATS.init(jax.random.PRNGKey(0)), INIT(jax.random.PRNGKey(0))
        while not bool(s_t.done):
            board = np.asarray(s_t.game.board)
            obs = np.asarray(s_t.observation)
            np.testing.assert_array_equal(obs[..., :3], np.asarray(s_p.observation))
            np.testing.assert_array_equal(
                obs[..., 3:], _expected_planes(board, int(s_t.current_player)))
            checked += 1
            threats += int(obs[..., 3:5].sum())
            a = int(rng.choice(np.flatnonzero(board[0] < 0)))
            s_t, s_p = T_STEP(s_t, a), plain_step(s_p, a)
    assert checked > 150 and threats > 50  # the planes were not mostly empty


def test_threats_api():
    api_test(THREATS, num_games=8, max_plies=50)  # symmetries included


def test_threats_flag_checked():
    with pytest.raises(ValueError, match="threats must be True or False"):
        envs.make("connect4", threats="yes")
    with pytest.raises(ValueError, match="parity must be True or False"):
        envs.make("connect4", parity=1)


# ------------------------------------------------------- parity=True: the odd-row plane
def test_parity_plane_marks_the_odd_rows_from_the_bottom():
    """Allis's rows: the bottom row is the 1st (odd), the top the 6th (even). The plane is
    the last one, after the threat planes when both are on, the same in every position and
    under the mirror; the other planes are those of the env without it."""
    odd = np.array([r % 2 == 1 for r in range(6)])  # rows from the top: 5 (bottom), 3, 1
    both = envs.make("connect4", threats=True, parity=True)
    alone = envs.make("connect4", parity=True)
    assert both.params == {"threats": True, "parity": True} and alone.params == {"parity": True}
    assert (both.observation_shape, alone.observation_shape) == ((6, 7, 7), (6, 7, 4))
    for env, base in ((both, THREATS), (alone, ENV)):
        s, b = env.init(jax.random.PRNGKey(0)), base.init(jax.random.PRNGKey(0))
        for a in [3, 3, 4, 0, 6, 6, 6]:
            s, b = env.step(s, a), base.step(b, a)
            obs = np.asarray(s.observation)
            np.testing.assert_array_equal(obs[..., :-1], np.asarray(b.observation))
            np.testing.assert_array_equal(obs[..., -1], np.broadcast_to(odd[:, None], (6, 7)))
        mirrored, _ = env.symmetries(s.observation, jnp.ones(7) / 7)
        np.testing.assert_array_equal(np.asarray(mirrored)[1, ..., -1], obs[..., -1])
    api_test(both, num_games=4, max_plies=30)


# ------------------------------------------------------- twos=True: the threat-making planes
def _makes(board, row, col, stone, after):
    """Independent of the env's window table: a stone at (row, col) leaves some 4-cell line
    through it with `after` of `stone` and the rest empty."""
    b = board.copy()
    b[row, col] = stone
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        for start in range(-3, 1):
            cells = [(row + (start + k) * dr, col + (start + k) * dc) for k in range(4)]
            if not all(0 <= r < 6 and 0 <= c < 7 for r, c in cells):
                continue
            values = [b[r, c] for r, c in cells]
            if values.count(stone) == after and values.count(-1) == 4 - after:
                return True
    return False


def test_twos_planes_hand_worked_and_against_brute_force():
    """X on 4-5 of the bottom row, O on 3 and on 4 above: X (to move) makes a threat on 6 or
    7 of the bottom row (4-7 is open; 2-5 holds an O), O on its diagonal's two empty cells.
    Then random games: the two planes against a line scan, every other plane as the
    env's without them, parity still last."""
    twos = envs.make("connect4", threats=True, parity=True, twos=True)
    base = envs.make("connect4", threats=True, parity=True)
    assert twos.params == {"threats": True, "parity": True, "twos": True}
    assert twos.observation_shape == (6, 7, 9)
    assert envs.make("connect4", twos=True).observation_shape == (6, 7, 5)
    step, base_step = jax.jit(twos.step), jax.jit(base.step)
    s = twos.init(jax.random.PRNGKey(0))
    for a in [3, 3, 4, 2]:
        s = step(s, a)
    obs = np.asarray(s.observation)
    mine, theirs = np.zeros((6, 7), bool), np.zeros((6, 7), bool)
    mine[5, [5, 6]] = True
    theirs[3, 4] = theirs[2, 5] = True
    np.testing.assert_array_equal(obs[..., 6], mine)
    np.testing.assert_array_equal(obs[..., 7], theirs)
    rng = np.random.default_rng(3)
    checked = marked = 0
    for _ in range(10):
        s, b = twos.init(jax.random.PRNGKey(0)), base.init(jax.random.PRNGKey(0))
        while not bool(s.done):
            board, obs = np.asarray(s.game.board), np.asarray(s.observation)
            mover = int(s.current_player)
            np.testing.assert_array_equal(obs[..., [0, 1, 2, 3, 4, 5, 8]],
                                          np.asarray(b.observation))
            for plane, stone in ((6, mover), (7, 1 - mover)):
                expected = [[board[r, c] < 0 and _makes(board, r, c, stone, 3)
                             for c in range(7)] for r in range(6)]
                np.testing.assert_array_equal(obs[..., plane], np.array(expected))
            checked += 1
            marked += int(obs[..., 6:8].sum())
            a = int(rng.choice(np.flatnonzero(board[0] < 0)))
            s, b = step(s, a), base_step(b, a)
    assert checked > 150 and marked > 300  # the planes were not mostly empty
    with pytest.raises(ValueError, match="twos must be True or False"):
        envs.make("connect4", twos="no")
    api_test(twos, num_games=4, max_plies=30)


# ------------------------------------------- ones=True and lowest=True: two more plane pairs
def test_ones_and_lowest_planes_hand_worked_and_against_brute_force():
    """X on 1-3 of the bottom row, O on 1-3 above: X's threat on 4 of the bottom row is the
    lowest of its column, O's on 4 of the row above is not. Then random games with every
    flag on: the ones planes (a stone makes a two in an open window) and the lowest planes
    (a threat with no threat of either player below it in its column) against a line scan
    and a column walk, the other planes as the env's without them, parity still last."""
    low = envs.make("connect4", threats=True, lowest=True)
    assert low.observation_shape == (6, 7, 8)
    s = low.init(jax.random.PRNGKey(0))
    for a in [0, 0, 1, 1, 2, 2]:
        s = low.step(s, a)
    obs = np.asarray(s.observation)
    assert obs[5, 3, 3] and obs[4, 3, 4]  # X's (the mover's) threat and O's, above it
    mine = np.zeros((6, 7), bool)
    mine[5, 3] = True
    np.testing.assert_array_equal(obs[..., 6], mine)
    assert not obs[..., 7].any()
    assert envs.make("connect4", lowest=True).observation_shape == (6, 7, 5)
    assert envs.make("connect4", ones=True).observation_shape == (6, 7, 5)

    every = envs.make("connect4", threats=True, parity=True, twos=True, ones=True, lowest=True)
    base = envs.make("connect4", threats=True, parity=True, twos=True)
    assert every.params == dict.fromkeys(("threats", "parity", "twos", "ones", "lowest"), True)
    assert every.observation_shape == (6, 7, 13)
    step, base_step = jax.jit(every.step), jax.jit(base.step)
    rng = np.random.default_rng(5)
    checked = marked_ones = marked_lowest = 0
    for _ in range(10):
        s, b = every.init(jax.random.PRNGKey(0)), base.init(jax.random.PRNGKey(0))
        while not bool(s.done):
            board, obs = np.asarray(s.game.board), np.asarray(s.observation)
            np.testing.assert_array_equal(obs[..., [0, 1, 2, 3, 4, 5, 6, 7, 12]],
                                          np.asarray(b.observation))
            stones = int(s.current_player), 1 - int(s.current_player)
            for plane, stone in zip((8, 9), stones, strict=True):
                expected = [[board[r, c] < 0 and _makes(board, r, c, stone, 2)
                             for c in range(7)] for r in range(6)]
                np.testing.assert_array_equal(obs[..., plane], np.array(expected))
            threat = {p: np.array([[board[r, c] < 0 and _makes_four(board, r, c, p)
                                    for c in range(7)] for r in range(6)]) for p in stones}
            for plane, stone in zip((10, 11), stones, strict=True):
                expected = np.zeros((6, 7), bool)
                for c in range(7):
                    for r in range(5, -1, -1):  # up the column from the bottom
                        if threat[0][r, c] or threat[1][r, c]:
                            expected[r, c] = threat[stone][r, c]
                            break
                np.testing.assert_array_equal(obs[..., plane], expected)
            checked += 1
            marked_ones += int(obs[..., 8:10].sum())
            marked_lowest += int(obs[..., 10:12].sum())
            a = int(rng.choice(np.flatnonzero(board[0] < 0)))
            s, b = step(s, a), base_step(b, a)
    assert checked > 150 and marked_ones > 1000 and marked_lowest > 50
    for name in ("ones", "lowest"):
        with pytest.raises(ValueError, match=f"{name} must be True or False"):
            envs.make("connect4", **{name: 1})
    api_test(every, num_games=4, max_plies=30)


def test_a_threats_run_restores_with_its_planes(tmp_path):
    """A run with threats=True saves its game's parameters: its checkpoint restores on the
    6-plane env (an Agent plays from it) and is refused for the plain game; it plays the
    plain game's networks, and they play it, each seeing its own planes."""
    from az_jax import agent, trainer
    from az_jax import checkpoint as ckpt
    from az_jax import search as search_lib
    from configs import connect4
    from tests.tiny import make_run, tiny_training

    c = tiny_training(connect4.get_config())
    c.env.kwargs.threats, c.env.kwargs.parity, c.env.kwargs.twos = True, False, False
    c.search.eval_tactics = "none"  # the planes are under test, not the tactics (compiles)
    trainer.train_and_evaluate(c, str(tmp_path))
    player = agent.Agent.load(workdir=str(tmp_path), num_simulations=2)
    assert player.env.params == {"threats": True}
    state = player.new_game()
    assert state.observation.shape == (6, 7, 6)
    assert 0 <= player.think(state).action < 7
    with pytest.raises(ValueError, match=r"is for connect4\(\{'threats': True\}\)"):
        ckpt.restore(str(tmp_path), env=ENV)
    # The planes change what a network sees, not the game: each network plays the other
    # env's states through its own observation (`Env.observe`), with the moves it makes on
    # its own env's states of the same positions.
    from az_jax.eval import players

    moves = [[3, 3, 2], [0, 6, 5, 4], [3, 4, 3, 4, 2]]  # three positions, built by each env
    plain = str(make_run(tmp_path / "plain", "connect4", eval_tactics="none"))  # plain game
    for arena, own, other in ((THREATS, ENV, plain), (ENV, THREATS, str(tmp_path))):
        theirs = jax.tree.map(lambda *x: np.stack(x), *[_played(arena, m) for m in moves])
        mine = jax.tree.map(lambda *x: np.stack(x), *[_played(own, m) for m in moves])
        assert theirs.observation.shape[-1] != mine.observation.shape[-1]
        p = players.PlayerFactory(arena, net=object(), search=object()).checkpoint(
            players.parse_opponent(f"checkpoint:{other}"), sims=4)
        restored = ckpt.restore(other, play_env=arena)
        assert restored.env.params == own.params  # the network keeps its planes
        direct = players.search_act(search_lib.make_search(
            own, restored.net, restored.config.search), 4)
        key = jax.random.PRNGKey(1)
        np.testing.assert_array_equal(jax.jit(p.act)(p.params, theirs, key),  # one compile
                                      jax.jit(direct)(restored.variables, mine, key))
    with pytest.raises(ValueError, match="only the board size and the observation planes"):
        ckpt.restore(plain, play_env=envs.make("tictactoe"))


def _played(env, moves):
    step = {ENV: STEP, THREATS: T_STEP}[env]
    state = env.init(jax.random.PRNGKey(0))
    for m in moves:
        state = step(state, m)
    return state
