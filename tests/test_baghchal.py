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
    api_test(env, num_games=16, max_plies=300)


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
    game_env = envs.make("baghchal", max_steps=500)
    batch = 400
    careful = jnp.arange(batch) % 4 != 0  # a quarter random, the rest careful
    recs = jax.tree.map(np.asarray, _rollout(game_env, jax.random.PRNGKey(1), careful, 500))
    outcomes = [_replay_against_reference(recs, g) for g in range(batch)]
    counts = {k: outcomes.count(k) for k in ("G", "B", "draw", "cut")}
    print("outcomes:", counts)
    assert counts["G"] > 0 and counts["B"] > 0 and counts["draw"] > 0, counts
