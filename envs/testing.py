"""`api_test(env)`: the conformance check every environment must pass.

It plays random games (legal and illegal moves) under `jit(vmap(...))` and checks the
protocol in `envs/core.py`. Raises AssertionError with what went wrong.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from envs.core import Env


def _random_legal(key, mask):
    """A uniformly random legal action per game. mask: bool[B, A] -> int32[B]."""
    logits = jnp.where(mask, 0.0, -1e9)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def api_test(env: Env, num_games: int = 8, max_plies: int = 400, seed: int = 0) -> None:
    """Checks `env` against the protocol.

    Args:
      env: the environment.
      num_games: games played side by side (vmapped).
      max_plies: plies per game before the check stops (games auto-end earlier).
      seed: random seed.
    """
    key = jax.random.PRNGKey(seed)
    init = jax.jit(jax.vmap(env.init))
    step = jax.jit(jax.vmap(env.step))
    A = env.num_actions

    # --- static description
    assert isinstance(env.id, str) and env.id, "env.id must be a non-empty string"
    assert isinstance(env.num_actions, int) and env.num_actions > 0
    assert env.num_players == 2
    longest = env.max_game_length
    assert longest is None or (isinstance(longest, int) and longest > 0), longest

    # --- init under jit and vmap, dtypes and shapes
    key, sub = jax.random.split(key)
    state = init(jax.random.split(sub, num_games))
    B = num_games
    assert state.current_player.shape == (B,) and state.current_player.dtype == jnp.int32
    assert state.observation.shape == (B, *env.observation_shape), (
        f"observation shape {state.observation.shape} != {(B, *env.observation_shape)}"
    )
    assert state.observation.dtype in (jnp.float32, jnp.bool_), state.observation.dtype
    assert state.observation.dtype == env.observation_dtype
    assert state.legal_action_mask.shape == (B, A) and state.legal_action_mask.dtype == jnp.bool_
    assert state.rewards.shape == (B, 2) and state.rewards.dtype == jnp.float32
    assert state.terminated.dtype == jnp.bool_ and state.truncated.dtype == jnp.bool_
    assert state.step_count.dtype == jnp.int32
    assert not np.any(state.done), "a fresh game is already over"
    assert np.all(state.current_player == 0), "player 0 moves first"
    assert np.all(state.legal_action_mask.any(-1)), "no legal move at the start"
    single = jax.jit(env.init)(sub)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b[0]), single,
                 jax.tree.map(lambda x: x[:1], init(sub[None])))

    # --- random play with occasional illegal moves
    check_wins = _winning_moves_check(env) if env.has_winning_moves else None
    saw_done = False
    for _ in range(max_plies):
        key, k_act, k_ill, k_pick, k_step = jax.random.split(key, 5)
        legal = _random_legal(k_act, state.legal_action_mask)
        illegal_candidates = ~state.legal_action_mask
        has_illegal = illegal_candidates.any(-1)
        illegal = _random_legal(k_ill, illegal_candidates)
        use_illegal = has_illegal & (jax.random.uniform(k_pick, (B,)) < 0.03)
        action = jnp.where(use_illegal, illegal, legal)
        prev = state
        keys = jax.random.split(k_step, B)
        state = step(state, action, keys)
        _check_transition(env, prev, action, state, use_illegal)
        # The next state is built from the game alone, never from the observation passed in
        # (so XLA keeps no observation of a search tree's nodes: the children rebuild it).
        blind = step(prev.replace(observation=jnp.zeros_like(prev.observation)), action, keys)
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(
            a, b, err_msg="env.step's result depends on the observation passed in"),
            blind, state)
        if check_wins is not None:
            check_wins(state)
        if env.max_game_length is not None:
            assert np.all(state.done | (state.step_count < env.max_game_length)), (
                f"a game reached env.max_game_length={env.max_game_length} plies unfinished")
        saw_done |= bool(np.any(state.done))
        if np.all(state.done):
            break
    assert saw_done or max_plies < 10, "no game ended; is termination implemented?"

    # --- out-of-range actions are illegal too
    state0 = init(jax.random.split(jax.random.PRNGKey(seed + 1), 2))
    bad = step(state0, jnp.array([-1, A], jnp.int32), jax.random.split(key, 2))
    assert np.all(bad.terminated), "an out-of-range action must end the game"
    np.testing.assert_array_equal(bad.rewards[:, 0], -1.0)

    if env.deterministic:
        _check_deterministic(init, step, num_games, seed)
    _check_point_of_view(env, seed)
    _check_symmetries(env, seed)


def _winning_moves_check(env):
    """A check of `env.winning_moves` against `env.step`, for a batch of states.

    For each player p, the hook's moves must be exactly the legal moves that `step` ends
    with p winning when p is made the mover (`current_player` replaced: the rules read the
    mover from it); a finished state has none.
    """
    actions = jnp.arange(env.num_actions, dtype=jnp.int32)

    def by_step(state, player):  # bool[A]
        as_player = state.replace(current_player=jnp.asarray(player, jnp.int32))
        nxt = jax.vmap(env.step, in_axes=(None, 0))(as_player, actions)
        return (state.legal_action_mask & nxt.terminated & (nxt.rewards[:, player] > 0)
                & ~state.done)

    def both(state):  # bool[2, A] each
        hook = jnp.stack([env.winning_moves(state, jnp.int32(p)) for p in (0, 1)])
        return hook, jnp.stack([by_step(state, p) for p in (0, 1)])

    def persist(state):  # bool[A]: the other side's wins that some reply of the mover undid
        other = 1 - state.current_player
        wins = env.winning_moves(state, other)
        after = jax.vmap(env.step, in_axes=(None, 0))(state, actions)
        still = jax.vmap(env.winning_moves, in_axes=(0, None))(after, other)  # [A, A]
        undone = wins[None, :] & ~still & (actions[:, None] != actions[None, :])
        replies = state.legal_action_mask & ~after.done
        return (undone & replies[:, None]).any(0)

    compare = jax.jit(jax.vmap(both))
    undone = jax.jit(jax.vmap(persist))
    # A game's own threat_counts (read from its board) must equal the stepping default.
    own_counts = type(env).threat_counts is not Env.threat_counts
    counts = jax.jit(jax.vmap(lambda s: jnp.stack(
        [env.threat_counts(s), Env.threat_counts(env, s)])))

    def check(states):
        hook, ref = compare(states)
        assert hook.dtype == jnp.bool_ and hook.shape[-1] == env.num_actions
        np.testing.assert_array_equal(
            np.asarray(hook), np.asarray(ref),
            err_msg="winning_moves disagrees with step (game, player, action)")
        assert not np.asarray(undone(states)).any(), (
            "a winning move of the side that just moved stopped winning after another move "
            "of the mover (winning_moves' contract: only playing on it stops it)")
        if own_counts:
            got, ref = np.asarray(counts(states)).swapaxes(0, 1)
            np.testing.assert_array_equal(
                got, ref, err_msg="threat_counts disagrees with the stepping default "
                                  "(core.Env.threat_counts)")

    return check


def _check_deterministic(init, step, num_games, seed, plies: int = 60):
    """An env that says `deterministic` plays the same games whatever keys it is given:
    the same random moves from `init` with other keys, stepped with other keys, give the
    same observations, masks, rewards, movers and ends (self-play relies on it)."""
    k_init_a, k_init_b, k_step_a, k_step_b, k_act = jax.random.split(
        jax.random.PRNGKey(seed + 11), 5)
    a = init(jax.random.split(k_init_a, num_games))
    b = init(jax.random.split(k_init_b, num_games))
    for ply in range(plies):
        for name in ("observation", "legal_action_mask", "rewards", "current_player",
                     "terminated", "truncated", "step_count"):
            np.testing.assert_array_equal(
                np.asarray(getattr(a, name)), np.asarray(getattr(b, name)),
                err_msg=f"env.deterministic is True but {name} depends on the keys "
                        f"(ply {ply})")
        if np.all(a.done):
            break
        action = _random_legal(jax.random.fold_in(k_act, ply), a.legal_action_mask)
        a = step(a, action, jax.random.split(jax.random.fold_in(k_step_a, ply), num_games))
        b = step(b, action, jax.random.split(jax.random.fold_in(k_step_b, ply), num_games))


def _check_transition(env, prev, action, state, use_illegal):
    prev_done = np.asarray(prev.done)
    rewards = np.asarray(state.rewards)
    assert np.all(np.isfinite(rewards)), "non-finite rewards"
    np.testing.assert_allclose(rewards.sum(-1), 0.0, atol=1e-6, err_msg="rewards not zero-sum")
    assert np.all(np.isfinite(np.asarray(state.observation))), "non-finite observation"
    # Finished games are absorbing: nothing changes, rewards are zero.
    if prev_done.any():
        np.testing.assert_array_equal(rewards[prev_done], 0.0)
        for name in ("current_player", "terminated", "truncated", "step_count"):
            np.testing.assert_array_equal(
                np.asarray(getattr(state, name))[prev_done],
                np.asarray(getattr(prev, name))[prev_done],
                err_msg=f"{name} changed after the game ended",
            )
        np.testing.assert_array_equal(
            np.asarray(state.observation)[prev_done], np.asarray(prev.observation)[prev_done]
        )
    # An illegal move: the game ends and the mover loses.
    ill = np.asarray(use_illegal) & ~prev_done
    if ill.any():
        assert np.all(np.asarray(state.terminated)[ill]), "an illegal move must end the game"
        mover = np.asarray(prev.current_player)[ill]
        r = rewards[ill]
        np.testing.assert_array_equal(r[np.arange(len(mover)), mover], -1.0)
        np.testing.assert_array_equal(r[np.arange(len(mover)), 1 - mover], 1.0)
    running = ~np.asarray(state.done)
    mask = np.asarray(state.legal_action_mask)
    assert np.all(mask[running].any(-1)), "a running game has no legal move"
    assert np.all(mask[~running]), "the legal mask of a finished game must be all True"
    steps = np.asarray(state.step_count)
    np.testing.assert_array_equal(steps[~prev_done], np.asarray(prev.step_count)[~prev_done] + 1)
    del action


def _check_point_of_view(env, seed):
    """The observation depends on who moves: the same position seen by the other player differs."""
    state = jax.jit(env.init)(jax.random.PRNGKey(seed))
    key = jax.random.PRNGKey(seed + 7)
    step = jax.jit(env.step)
    for _ in range(3):
        key, k1, k2 = jax.random.split(key, 3)
        a = _random_legal(k1, state.legal_action_mask[None])[0]
        nxt = step(state, a, k2)
        if bool(nxt.done):
            break
        state = nxt
    observe = jax.jit(env._observe)
    np.testing.assert_array_equal(observe(state), state.observation)
    flipped = state.replace(current_player=1 - state.current_player)
    assert not np.array_equal(observe(flipped), state.observation), (
        "the observation must be from the mover's point of view"
    )


def _check_symmetries(env, seed, plies: int = 12):
    """Each symmetry is a true symmetry of the game: replaying the transformed actions from
    the start gives the transformed observation and the transformed legal mask."""
    A = env.num_actions
    sym = jax.jit(env.symmetries)
    obs0 = jnp.zeros(env.observation_shape, env.observation_dtype)
    s_obs, s_pol = sym(obs0, jnp.zeros(A))
    S = s_pol.shape[0]
    assert s_obs.shape == (S, *env.observation_shape) and s_pol.shape == (S, A)
    # Action permutation of each symmetry, read off one-hot policies.
    onehots = jnp.eye(A, dtype=jnp.float32)
    perm = np.asarray(jax.vmap(lambda p: sym(obs0, p)[1])(onehots))  # [A, S, A]
    assert np.all(perm.sum(-1) == 1), "a symmetry must permute actions"
    perm = perm.argmax(-1)  # [A, S]: action a -> action under symmetry s

    step = jax.jit(env.step)
    key = jax.random.PRNGKey(seed + 3)
    state = jax.jit(env.init)(key)
    actions = []
    for _ in range(plies):
        key, k1 = jax.random.split(key)
        a = int(_random_legal(k1, state.legal_action_mask[None])[0])
        nxt = step(state, a)
        if bool(nxt.done):
            break
        state, actions = nxt, actions + [a]
    t_obs, t_mask = sym(state.observation, state.legal_action_mask.astype(jnp.float32))
    for s in range(S):
        other = jax.jit(env.init)(jax.random.PRNGKey(seed + 3))
        for a in actions:
            other = step(other, int(perm[a, s]))
        np.testing.assert_array_equal(
            np.asarray(t_obs[s]), np.asarray(other.observation),
            err_msg=f"symmetry {s} does not map the observation onto the replayed game",
        )
        np.testing.assert_array_equal(
            np.asarray(t_mask[s]) > 0.5, np.asarray(other.legal_action_mask),
            err_msg=f"symmetry {s} does not map the legal mask onto the replayed game",
        )
