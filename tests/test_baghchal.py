"""Bagh-Chal: protocol conformance, a differential test against the PyPI `baghchal`
package, hand-worked positions, symmetries and the move parser."""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs import baghchal as bc
from envs.testing import api_test

_cwd = os.getcwd()
import baghchal.env as ref  # noqa: E402  (changes the working directory on import)

os.chdir(_cwd)

env = envs.make("baghchal")
step = jax.jit(env.step)
init = jax.jit(env.init)
symmetries = jax.jit(env.symmetries)
KEY = jax.random.PRNGKey(0)


def play(state, *moves):
    """Plays moves given as text; each must be legal."""
    for text in moves:
        state = step(state, env.parse_action(text, state))
    return state


def position(board, player=0, placed=20, captured=0):
    return env.state_from_board(board, player=player, placed=placed, captured=captured)


# ------------------------------------------------------------------ protocol
def test_api():
    api_test(env)


def test_params_and_make():
    assert env.params == {"max_steps": 200}
    assert envs.make("baghchal", max_steps=90).max_steps == 90
    assert repr(envs.make("baghchal", max_steps=90)) == "BaghChal(max_steps=90)"
    with pytest.raises(ValueError, match="max_steps"):
        envs.make("baghchal", max_steps=0)
    assert env.num_actions == 425 and env.observation_shape == (5, 5, 7)


def test_lines_match_reference_tables():
    """Our step and jump lines are the package's `connected_points_dict` / `bagh_moves_dict`."""
    from baghchal.lookup_table import bagh_moves_dict, connected_points_dict

    for p in range(25):
        x, y = p // 5 + 1, p % 5 + 1
        steps = {_ref_point(int(bc._DST[a])) for a in range(25 + p, 225, 25) if bc._VALID[a]}
        jumps = {_ref_point(int(bc._DST[a])) for a in range(225 + p, 425, 25) if bc._VALID[a]}
        assert steps == connected_points_dict[x, y]
        assert jumps == bagh_moves_dict[x, y]


def test_initial_state():
    s = init(KEY)
    assert int(s.current_player) == 0
    np.testing.assert_array_equal(np.flatnonzero(s.legal_action_mask), [
        p for p in range(25) if p not in (0, 4, 20, 24)])
    obs = np.asarray(s.observation)
    np.testing.assert_array_equal(np.flatnonzero(obs[..., 0]), [0, 4, 20, 24])
    assert obs[..., 1].sum() == 0 and obs[..., 2].sum() == 0
    np.testing.assert_array_equal(obs[..., 3], 1.0)
    np.testing.assert_array_equal(obs[..., 4], 1.0)
    np.testing.assert_array_equal(obs[..., 5:], 0.0)


# ------------------------------------------------------------------ differential test
def _ref_point(p):
    return (p // 5 + 1, p % 5 + 1)


def _ref_move(action, player):
    """Our action -> the package's move string."""
    plane, p = divmod(int(action), 25)
    x1, y1 = _ref_point(p)
    if plane == 0:
        return f"G{x1}{y1}"
    x2, y2 = _ref_point(int(bc._DST[action]))
    return f"{'B' if player else 'G'}{'x' if plane >= 9 else ''}{x1}{y1}{x2}{y2}"


def _goat_scores(game):
    """For one game: float32[425] preference of each goat action (safe first, then fewer
    tiger moves); non-goat actions get 0."""

    def after(a):
        goats, tigers, placed, _ = bc._apply(game.goats, game.tigers, a, jnp.asarray(False))
        words = bc._move_words(goats, tigers, game.placed + placed, jnp.asarray(True))
        unsafe = jnp.any(words[9:] != 0)
        mobility = jnp.sum(jax.lax.population_count(words))
        return jnp.where(unsafe, -10.0, 0.0) - 0.3 * mobility.astype(jnp.float32)

    scores = jax.vmap(after)(jnp.arange(225))
    return jnp.concatenate([scores, jnp.zeros(200)])


def _choose(state, key, careful):
    """A batched policy: uniform random, or for `careful` games goats that avoid captures
    and hem tigers in, and tigers that take a capture half of the time."""
    k_noise, k_greedy = jax.random.split(key)
    mask = state.legal_action_mask
    noise = jax.random.gumbel(k_noise, mask.shape)
    goat = jax.vmap(_goat_scores)(state.game) + 0.7 * noise
    jumps = jnp.arange(425) >= 225
    greedy = jax.random.uniform(k_greedy, mask.shape[:1]) < 0.5
    tiger = noise + jnp.where(greedy[:, None] & jumps, 100.0, 0.0)
    smart = jnp.where((state.current_player == 0)[:, None], goat, tiger)
    logits = jnp.where(careful[:, None], smart, noise)
    return jnp.argmax(jnp.where(mask, logits, -jnp.inf), axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _rollout(game_env, key, careful, plies):
    """Plays a batch of games; returns per-ply records (leading axis = ply)."""
    batch = careful.shape[0]
    k_init, k_play = jax.random.split(key)
    state = jax.vmap(game_env.init)(jax.random.split(k_init, batch))

    def body(state, key):
        action = _choose(state, key, careful)
        nxt = jax.vmap(game_env.step)(state, action)
        rec = dict(
            action=action, mask=state.legal_action_mask, player=state.current_player,
            was_done=state.done, rewards=nxt.rewards, terminated=nxt.terminated,
            truncated=nxt.truncated, goats=nxt.game.goats, tigers=nxt.game.tigers,
            captured=nxt.game.captured,
        )
        return nxt, rec

    return jax.lax.scan(body, state, jax.random.split(k_play, plies))[1]


def _replay_against_reference(recs, g):
    """Replays game g in the package, checking every ply. Returns 'G', 'B', 'draw' or 'cut'."""
    board = ref.Board()
    for t in range(recs["action"].shape[0]):
        if recs["was_done"][t, g]:
            break
        player = int(recs["player"][t, g])
        assert board.next_turn == "GB"[player]
        legal = {_ref_move(a, player) for a in np.flatnonzero(recs["mask"][t, g])}
        assert legal == board.possible_moves(), f"game {g} ply {t}: legal moves differ"
        board.move(_ref_move(recs["action"][t, g], player))
        goats, tigers = int(recs["goats"][t, g]), int(recs["tigers"][t, g])
        assert board.goat_points == {_ref_point(p) for p in range(25) if goats >> p & 1}
        assert board.bagh_points == {_ref_point(p) for p in range(25) if tigers >> p & 1}
        assert board.goats_captured == recs["captured"][t, g]
        over, rewards = board.is_game_over(), recs["rewards"][t, g]
        assert over == bool(recs["terminated"][t, g]), f"game {g} ply {t}: end differs"
        if over:
            winner = board.winner()
            expected = {"G": [1, -1], "B": [-1, 1], 0: [0, 0]}[winner]
            np.testing.assert_array_equal(rewards, expected)
            return winner or "draw"
        np.testing.assert_array_equal(rewards, 0.0)
        if recs["truncated"][t, g]:
            return "cut"
    raise AssertionError(f"game {g} did not finish in the recorded plies")


@pytest.mark.slow
def test_against_reference_package():
    """400 games (random and careful play): same legal moves, board, captures and result at
    every ply as the PyPI package. Goat wins, tiger wins and repetition draws all occur."""
    game_env = envs.make("baghchal", max_steps=300)
    batch = 400
    careful = jnp.arange(batch) % 4 != 0  # a quarter random, the rest careful
    recs = jax.tree.map(np.asarray, _rollout(game_env, jax.random.PRNGKey(1), careful, 300))
    outcomes = [_replay_against_reference(recs, g) for g in range(batch)]
    counts = {k: outcomes.count(k) for k in ("G", "B", "draw", "cut")}
    print("outcomes:", counts)
    assert counts["G"] > 0 and counts["B"] > 0 and counts["draw"] > 0, counts


# ------------------------------------------------------------------ hand-worked positions
def _result(state):
    return bool(state.terminated), bool(state.truncated), np.asarray(state.rewards).tolist()


def test_capture_along_a_diagonal():
    s = position("""
        T...T
        .....
        .....
        .G...
        T...T""", player=1, placed=1)
    a = env.parse_action("A1-C3", s)
    assert env.action_to_str(a) == "A1xC3" and a >= 225
    s = step(s, a)
    assert int(s.game.captured) == 1 and int(s.game.goats) == 0
    assert env._cells(s)[12] == "T" and env._cells(s)[20] == "."
    assert _result(s) == (False, False, [0.0, 0.0])
    np.testing.assert_allclose(s.observation[..., 5], 0.2)
    assert "captured: 1/5" in env.render(s)


def test_no_diagonal_capture_off_the_diagonals():
    # B1 has no diagonal line: the goat on C2 cannot be jumped from B1, the one on B2 can.
    s = position("""
        T...T
        .....
        .....
        .GG..
        .T..T""", player=1, placed=2)
    legal = {env.action_to_str(a) for a in np.flatnonzero(s.legal_action_mask)}
    assert "B1xB3" in legal
    assert not any(m.startswith("B1x") and m != "B1xB3" for m in legal)
    assert "B1-C2" not in legal and "B1-A2" not in legal and "B1-A1" in legal
    with pytest.raises(ValueError, match="not a jump away from B1 along a line"):
        env.parse_action("B1-D3", s)
    with pytest.raises(ValueError, match="not adjacent to B1 along a line"):
        env.parse_action("B1-C2", s)


TRAP = """
    TGGGT
    GGGGG
    GG.GG
    GGGGG
    TGGGT"""


def test_tigers_trapped_goats_win():
    s = position(TRAP, player=0)
    assert _result(play(s, "D2-C3")) == (False, False, [0.0, 0.0])  # frees D2 next to E1
    s = play(s, "C4-C3")  # frees C4, which no tiger reaches
    assert _result(s) == (True, False, [1.0, -1.0])
    assert "goats win" in env.render(s)


def test_fifth_capture_tigers_win():
    s = position("""
        TGGGT
        GG.GG
        GG.GG
        GGGG.
        T..GT""", player=1, placed=20, captured=4)
    s2 = play(s, "A1xC3")
    assert int(s2.game.captured) == 5
    assert _result(s2) == (True, False, [-1.0, 1.0])
    assert "tigers win" in env.render(s2)
    assert _result(play(s, "A1-B1")) == (False, False, [0.0, 0.0])


def test_goats_without_a_move_tigers_win():
    s = position("""
        TTGGG
        T.GGG
        GGGGG
        GGGGG
        GGGGT""", player=1)
    assert _result(play(s, "B5-B4")) == (False, False, [0.0, 0.0])  # C5 can step to B5
    s = play(s, "A5-B4")  # A5 is empty but only tigers touch it
    assert _result(s) == (True, False, [-1.0, 1.0])


REP = """
    T.GGG
    ..GGG
    TGGGG
    GGGGG
    TGGGT"""


def _plies_until_end(s, moves):
    """Plays moves; returns the 1-based ply at which the game ended (0 if it did not)."""
    for ply, text in enumerate(moves, 1):
        s = play(s, text)
        if bool(s.done):
            assert _result(s) == (True, False, [0.0, 0.0]), "expected a draw"
            return ply
    return 0


def test_threefold_repetition_is_a_draw():
    s = position(REP, player=1, captured=2)
    assert float(s.observation[0, 0, 6]) == 0.0
    cycle = ["A5-A4", "C5-B5", "A4-A5", "B5-C5"]
    s4 = play(s, *cycle)
    assert int(s4.game.seen_before) == 1 and float(s4.observation[0, 0, 6]) == 1.0
    assert _plies_until_end(s, cycle * 3) == 8


def test_repetition_ignores_who_moves():
    # Tigers to move at the start; after a tiger triangle the arrangement is back with the
    # goats to move, and that counts as its 2nd occurrence.
    s = position(REP, player=1, captured=2)
    odd = ["A5-A4", "C5-B5", "A4-B4", "B5-C5", "B4-A5"]
    assert _plies_until_end(s, odd + ["C5-B5", "A5-A4", "B5-C5", "A4-A5"] * 2) == 9


def test_repetition_counts_from_the_last_placement():
    s = position(REP.replace("GGGGG\n    TGGGT", "GGG.G\n    TGGGT"), player=0, placed=19,
                 captured=2)
    assert int(s.game.hist_len) == 0
    s = play(s, "D2")
    assert int(s.game.hist_len) == 1 and bool(s.game.placed == 20)
    cycle = ["A5-A4", "C5-B5", "A4-A5", "B5-C5"]
    assert _plies_until_end(s, cycle * 3) == 8


def test_a_position_from_a_board_stands_at_the_ply_a_game_reaches_it():
    """`state_from_board` puts the position at the first ply a game can reach it (goats
    place on even plies), so its repetition history, sized for a game from `init`, holds
    every arrangement until the move limit. (It used to start at ply 0: with a short limit
    the history overflowed and the threefold repetition of ply 8 went unseen.)"""
    assert [int(position(REP, player=p, captured=2).step_count) for p in (1, 0)] == [39, 40]
    cycle = ["A5-A4", "C5-B5", "A4-A5", "B5-C5"]
    # From ply 39: the limit at 41 and 46 stops the cycle first; at 47 the draw is at ply 8.
    for max_steps, end, truncated in ((41, 2, True), (46, 7, True), (47, 8, False)):
        short = envs.make("baghchal", max_steps=max_steps)
        s, step_short = short.state_from_board(REP, player=1, captured=2), jax.jit(short.step)
        plies = 0
        while not bool(s.done) and plies < 12:
            s = step_short(s, short.parse_action(cycle[plies % 4], s))
            plies += 1
        assert (plies, bool(s.truncated), bool(s.terminated)) == (end, truncated, not truncated)
        np.testing.assert_array_equal(s.rewards, 0.0)
    with pytest.raises(ValueError, match="at ply 39 at the earliest: not before the move limit"):
        envs.make("baghchal", max_steps=39).state_from_board(REP, player=1, captured=2)


def test_arrangement_key_is_exact():
    """Once all goats are placed (at most 9 points free of goats), the one-word key tells
    every tiger arrangement apart and keeps the goats' word."""
    import itertools

    key = jax.jit(jax.vmap(bc._arrangement_key))
    rng = np.random.default_rng(0)
    for free_count in (5, 6, 7, 8, 9, 9):
        free = rng.choice(25, size=free_count, replace=False)
        goats = sum(1 << p for p in range(25) if p not in free)
        tigers = [sum(1 << int(p) for p in c) for c in itertools.combinations(free, 4)]
        keys = np.asarray(key(jnp.full(len(tigers), goats, jnp.uint32),
                              jnp.array(tigers, jnp.uint32)))
        assert len(set(keys.tolist())) == len(tigers)
        np.testing.assert_array_equal(keys & ((1 << 25) - 1), goats)


def test_state_from_board_checks_its_input():
    with pytest.raises(ValueError, match="5 rows"):
        position("T...T")
    with pytest.raises(ValueError, match="placed - captured"):
        position(REP, captured=0)
    with pytest.raises(ValueError, match="already over"):
        position("TGGGT GG.GG GGGGG GGGGG TGGGT".replace(" ", "\n"), player=1)  # trapped
    # 5 captures is the tigers' win: a finished game, refused even with the 15 goats right
    fifteen = REP.replace("T.GGG", "T...G").replace("..GGG", "...GG")
    with pytest.raises(ValueError, match="captured 0..4"):
        position(fifteen, player=1, captured=5)
    assert int(position(fifteen, player=1, captured=4, placed=19).game.captured) == 4


def test_placements_are_not_counted():
    s, hist = init(KEY), []
    for _ in range(39):
        hist.append(int(s.game.hist_len))
        s = step(s, int(np.flatnonzero(s.legal_action_mask)[0]))
    assert hist == [0] * 39 and int(s.game.placed) == 20 and int(s.game.hist_len) == 1


def test_max_steps_truncation():
    short = envs.make("baghchal", max_steps=41)
    step41 = jax.jit(short.step)
    s = short.init(KEY)
    for ply in range(1, 42):
        s = step41(s, int(np.flatnonzero(s.legal_action_mask)[-1]))
        assert bool(s.truncated) == (ply == 41) and not bool(s.terminated)
    np.testing.assert_array_equal(s.rewards, 0.0)
    assert np.all(s.legal_action_mask) and "draw" in short.render(s)


# ------------------------------------------------------------------ illegal moves
def test_illegal_moves_lose_and_are_explained():
    s = play(init(KEY), "C3")  # tigers to move
    with pytest.raises(ValueError, match="tigers are never placed"):
        env.parse_action("B2", s)
    with pytest.raises(ValueError, match="no tiger on C3"):
        env.parse_action("C3-C4", s)
    with pytest.raises(ValueError, match="no goat to jump on B1"):
        env.parse_action("A1-C1", s)
    with pytest.raises(ValueError, match="D5 is occupied by a goat"):
        env.parse_action("E5-D5", play(s, "A5-B5", "D5"))
    s = play(s, "A1-B2")  # goats to move, still placing
    with pytest.raises(ValueError, match="C3 is occupied by a goat"):
        env.parse_action("C3", s)
    with pytest.raises(ValueError, match="goats are still being placed \\(19 left\\)"):
        env.parse_action("C3-C4", s)
    for text in ("C3", "C3-C4", "B2"):  # occupied, moving while placing, on a tiger
        lost = step(s, env._parse(text))
        assert _result(lost) == (True, False, [-1.0, 1.0])
    s = position(REP, player=0, captured=2)
    with pytest.raises(ValueError, match="all 20 goats are placed"):
        env.parse_action("B5", s)
    with pytest.raises(ValueError, match="goats cannot jump"):
        env.parse_action("C4-A4", s)
    with pytest.raises(ValueError, match="game is over"):
        env.parse_action("C4-B4", position(TRAP, player=0).replace(terminated=jnp.array(True)))


# ------------------------------------------------------------------ symmetries
def test_symmetries_are_game_symmetries_in_the_movement_phase():
    """Replaying the transformed actions of a long game (with captures) gives the
    transformed observation and legal mask, for all 8 symmetries."""
    perm = np.asarray(bc._SYMMETRY_SRC)  # new action -> old action
    inverse = np.argsort(perm, axis=1)  # old action -> new action
    assert all(sorted(row) == list(range(425)) for row in perm)
    s, actions, key = init(KEY), [], jax.random.PRNGKey(5)
    while len(actions) < 80:
        key, sub = jax.random.split(key)
        a = int(jax.random.choice(sub, 425, p=s.legal_action_mask / s.legal_action_mask.sum()))
        nxt = step(s, a)
        if bool(nxt.done):
            break
        s, actions = nxt, actions + [a]
    assert int(s.game.placed) == 20 and any(a >= 225 for a in actions), "want jumps in play"
    t_obs, t_mask = symmetries(s.observation, s.legal_action_mask.astype(jnp.float32))
    for k in range(8):
        other = init(KEY)
        for a in actions:
            other = step(other, int(inverse[k, a]))
        np.testing.assert_array_equal(t_obs[k], other.observation)
        np.testing.assert_array_equal(t_mask[k] > 0.5, other.legal_action_mask)


def test_symmetry_placements_match_core():
    obs = jax.random.uniform(KEY, (5, 5, 7))
    pol = jax.random.uniform(jax.random.PRNGKey(1), (425,))
    o8, p8 = symmetries(obs, pol)
    o_core, p_core = jax.jit(envs.core.dihedral_symmetries, static_argnums=(2, 3))(
        obs, pol[:25], 5, 5)
    np.testing.assert_array_equal(o8, o_core)
    np.testing.assert_array_equal(p8[:, :25], p_core)
    np.testing.assert_array_equal(p8[0], pol)
    np.testing.assert_allclose(p8.sum(-1), pol.sum(), rtol=1e-6)


# ------------------------------------------------------------------ text
def test_parse_good_text():
    assert env.parse_action("C3") == 12 == env.parse_action(" c3 ")
    step_a1b2 = env.parse_action("A1-B2")
    assert env.action_to_str(step_a1b2) == "A1-B2"
    assert {env.parse_action(t) for t in ("a1b2", "A1 B2", "A1 - B2")} == {step_a1b2}
    jump = env.parse_action("A1-C3")
    assert env.action_to_str(jump) == "A1xC3"
    assert {env.parse_action(t) for t in ("A1C3", "a1xc3", "A1 x C3")} == {jump}
    for a in np.flatnonzero(bc._VALID):
        assert env.parse_action(env.action_to_str(a)) == a


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "cannot read"),
        ("hello", "cannot read"),
        ("A1-", "cannot read"),
        ("A1-B2-C3", "cannot read"),
        ("A1--B2", "cannot read"),
        ("F1", "off the board"),
        ("A6", "off the board"),
        ("A0-A1", "off the board"),
        ("A1-A1", "two different points"),
        ("A1-D4", "not adjacent to A1 along a line, nor a jump away"),
        ("A1-B3", "not adjacent to A1 along a line, nor a jump away"),
        ("A2-B3", "B3 is not adjacent to A2 along a line"),
        ("A2-C4", "C4 is not a jump away from A2 along a line"),
    ],
)
def test_parse_bad_text(text, message):
    with pytest.raises(ValueError, match=message):
        env.parse_action(text)


def test_render_and_names():
    s = play(init(KEY), "C3", "A1-B2")
    text = env.render(s)
    assert text.splitlines()[0] == "5  T---.---.---.---T"
    assert text.splitlines()[1] == "   | \\ | / | \\ | / |"
    assert "3  .---.---G---.---." in text and "2  .---T---.---.---." in text
    assert "   A   B   C   D   E" in text
    assert "goats in hand: 19" in text and "to move: goats" in text
    assert env.action_to_str(424) == "E1xC3"  # the last jump plane (NW) from the last point
    assert env.action_to_str(25) == "A5:step-N(no line)"  # along no line: never legal
    assert "out of range" in env.action_to_str(425)


def test_observation_planes():
    s = play(init(KEY), "C3")
    obs = np.asarray(s.observation)
    assert obs[2, 2, 1] == 1.0 and obs[..., 1].sum() == 1.0 and obs[..., 0].sum() == 4.0
    np.testing.assert_array_equal(obs[..., 2], 1.0)  # tigers to move
    np.testing.assert_array_equal(obs[..., 3], 1.0)  # placing
    np.testing.assert_allclose(obs[..., 4], 19 / 20)
    end = position(REP, player=0, captured=2)
    obs = np.asarray(end.observation)
    np.testing.assert_array_equal(obs[..., 2:4], 0.0)
    np.testing.assert_allclose(obs[..., 4:6], np.broadcast_to([0.0, 0.4], (5, 5, 2)))


def test_a_move_that_draws_is_not_a_win_for_the_root_tactics():
    """The "win" tactics keep only moves that win at once. A move completing a threefold
    repetition ends the game as a draw (rewards 0): it must not count as a win, so the
    goats keep every legal move (hand-worked from `test_threefold_repetition_is_a_draw`:
    after 7 plies of the cycle, the goats' B5-C5 draws)."""
    from az_jax import search

    cycle = ["A5-A4", "C5-B5", "A4-A5", "B5-C5"]
    s = play(position(REP, player=1, captured=2), *cycle, *cycle[:3])
    drawing = env.parse_action("B5-C5", s)
    assert _result(play(s, "B5-C5")) == (True, False, [0.0, 0.0])  # the draw
    legal = np.asarray(s.legal_action_mask)
    assert legal[drawing] and legal.sum() > 1
    for tactics in ("win", "win_and_block"):
        mask = np.asarray(search.tactical_mask(env, s, tactics))
        assert mask[drawing] and mask.sum() > 1, tactics
