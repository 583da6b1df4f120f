"""Vectorized self-play: B games side by side, `lax.scan` over T plies, auto-reset.

    traj, states = selfplay(search, env, variables, states, key, num_plies=T,
                            temperature_plies=k)
    pending = init_pending(env, batch=B, max_length=L)     # once, before the first window
    timeline, targets, valid, pending, dropped = settle_pending(pending, traj)

Nothing here knows any particular game: it uses the Env protocol and the search only.
Games that do not finish inside the window keep going in the next call (the returned
`states`). Their plies have no outcome yet. `settle_pending` keeps them on the device
(`Pending`, up to L plies per game) until their game ends, then gives them their exact
outcome target: every ply trains, as in AlphaZero. The older alternatives:
`value_targets(traj)` alone leaves them out (`valid` False), and
`value_targets(..., bootstrap=True)` gives them the search's value at the window's end.

With a deterministic env (`env.deterministic`) and no restarts from the archive (see
`selfplay`'s `reuse_root`), the network is not called again at the root of each search: the
played child was already evaluated inside the previous search (its prior logits and raw
value are in the mctx tree), and a game that restarts takes the evaluation of the initial
position, made once per window. Each move then costs `num_simulations` network calls
instead of `num_simulations + 1`. For this the played move must be a visited child: plies
played by sampling draw among the visited actions only (all of them with visit-count
policies; with Gumbel, the considered actions that got simulations).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import mctx


class Trajectory(NamedTuple):
    """What one window of self-play records, time-major: leaves [T, B, ...] as commented.
    `Pending.traj` reuses the type batch-major, leaves [B, L, ...]: axes 0 and 1 swapped."""

    observation: jax.Array  # [T, B, *obs_shape] of env.observation_dtype (bool for most
    #                         games): before the move, the mover's view
    policy: jax.Array  # float32[T, B, A]     search policy (the policy target; zeros: none)
    legal_mask: jax.Array  # bool[T, B, A]
    player: jax.Array  # int32[T, B]          who moved
    reward: jax.Array  # float32[T, B]        the mover's reward for this move
    done: jax.Array  # bool[T, B]             the game ended with this move
    next_player: jax.Array  # int32[T, B]     who moves next (if not done)
    root_value: jax.Array  # float32[T, B]    the search's value estimate at the root


def select_action(key, search_action, weights, visited, step_count, temperature_plies,
                  greedy_from_search, random_plies=0):
    """Samples from the search policy for the first `temperature_plies` plies, then greedy;
    the first `random_plies` plies (if any) are uniform among the visited moves instead.

    One game (vmap for a batch).
    Args:
      search_action: int32[] the search's own choice; weights: float32[A] its policy.
      visited: bool[A] root children the search visited; only these are sampled.
      step_count: int32[] plies already played in the game.
      greedy_from_search: if True the late-game move is `policy_output.action` (Gumbel's
        choice, always visited); otherwise the argmax of `action_weights`.
    """
    k_sample, k_uniform = jax.random.split(key)
    never = jnp.finfo(jnp.float32).min
    logits = jnp.where(visited, jnp.log(jnp.maximum(weights, 1e-30)), never)
    sampled = jax.random.categorical(k_sample, logits)
    uniform = jax.random.categorical(k_uniform, jnp.where(visited, 0.0, never))
    greedy = search_action if greedy_from_search else jnp.argmax(jnp.where(visited, weights, -1.0))
    action = jnp.where(step_count < temperature_plies, sampled, greedy)
    return jnp.where(step_count < random_plies, uniform, action).astype(jnp.int32)


def per_game_keys(key, game_ids):
    """One key per game from one key and global game indices int32[B] -> [B, 2].

    A game's randomness then depends only on its index, not on how the batch is split
    over devices.
    """
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, game_ids)


def selfplay(search, env, variables: dict, states, key: jax.Array, *, num_plies: int,
             temperature_plies: int, greedy_from_search: bool | None = None,
             game_ids: jax.Array | None = None, reuse_root: bool | None = None,
             fast_simulations: int = 0,
             full_search_fraction: float = 1.0,
             random_plies: int = 0, archive=None,
             archive_starts: float = 0.0) -> tuple[Trajectory, Any]:
    """Plays `num_plies` plies in every game of the batch `states`.

    Args:
      search: from `search.make_search`.
      env: the `envs.Env`.
      variables: network variables.
      states: batched env states, leading dim B (finished games are reset first).
      key: consumed.
      num_plies: T.
      temperature_plies: plies (from each game's start) played by sampling.
      random_plies: plies (from each game's start) played uniformly at random among the
        root moves the search visited; their positions still get the search's policy
        target. Diversity against self-play collapsing onto one line. With PUCT that is
        every move that got a visit (all legal ones, given enough simulations). With Gumbel
        only the considered set is ever visited: `max_num_considered_actions` moves drawn
        by Gumbel top-k over the prior logits, so the draw is uniform within a
        prior-biased top-k, not over the legal moves (Gomoku 15x15: 16 of up to 225).
      greedy_from_search: late-game move = the search's own choice instead of the argmax
        of the policy target. Default: with Gumbel search (`search.config.policy`), whose
        choice is the best of the considered moves; PUCT's in self-play is sampled by the
        visits, so its late moves take the most visited one.
      game_ids: int32[B] global indices of these games (default arange(B)); see
        `per_game_keys`.
      reuse_root: take each root's evaluation from the previous search's tree (see the
        module docstring); default `env.deterministic and not restarts` (False with restarts
        from the archive, see below). It changes no result, only the cost.
      fast_simulations, full_search_fraction: playout-cap randomization (KataGo). With
        fast_simulations > 0, each ply draws (one draw for the whole batch, from `key`, so
        the same on every device) between the full search (probability
        full_search_fraction, the search's own num_simulations) and a fast search of
        fast_simulations. Fast plies move the games on and get value targets, but their
        policy target is all zeros: the learner's policy loss skips them.
      archive, archive_starts: restarts from positions self-play reached before (Go-Exploit,
        Trudeau & Bowling 2023). `archive`: env states with leaves [B, K, ...] (`archive_push`
        fills it); a game that ends restarts, with probability `archive_starts`, from one
        of its B * K positions drawn uniformly (from the game's start otherwise). The
        restarted games' plies get exact outcome targets like any other. A restarted game
        keeps the archived position's `step_count`, by which `temperature_plies` and
        `random_plies` are counted: a restart past them (the usual case) gets no sampled
        and no random plies, and plays the search's choice from the restart on.
    Returns:
      (Trajectory [T, B, ...], the states after the window).

    Raises:
      ValueError: `reuse_root=True` with an env that is not deterministic, or with restarts
        from the archive.
    """
    restarts = archive is not None and archive_starts > 0
    if reuse_root is None:
        # A game restarted from the archive has no evaluation at hand: its root needs the
        # network again (one more call a ply, as without reuse).
        reuse_root = env.deterministic and not restarts
    elif reuse_root and not env.deterministic:
        raise ValueError(f"reuse_root=True needs a deterministic env; {env!r} has chance")
    elif reuse_root and restarts:
        raise ValueError("reuse_root=True does not combine with restarts from the archive "
                         "(archive_starts > 0)")
    if greedy_from_search is None:
        greedy_from_search = search.config.policy == "gumbel"
    batch = states.current_player.shape[0]
    rows = jnp.arange(batch)
    if game_ids is None:
        game_ids = jnp.arange(batch, dtype=jnp.int32)
    chex.assert_shape([states.current_player, game_ids], [(batch,), (batch,)])
    chex.assert_shape([states.observation, states.legal_action_mask],
                      [(batch, *env.observation_shape), (batch, env.num_actions)])

    def reset_done(states, key):
        if restarts:
            key, k_archive = jax.random.split(key)
            fresh = restart_states(env, archive, archive_starts, k_archive, key, game_ids)
        else:
            fresh = jax.vmap(env.init)(per_game_keys(key, game_ids))
        return _per_game_where(states.done, fresh, states)

    k_reset, k_scan = jax.random.split(key)
    states = reset_done(states, k_reset)
    if reuse_root:  # the network at this window's roots, and at the initial position
        first = search.root(variables, states)
        start = jax.vmap(env.init)(jax.random.PRNGKey(0)[None])  # any key: deterministic
        initial = search.root(variables, start)  # [1, A], [1]
        evaluated = (first.prior_logits, first.value)  # float32[B, A], float32[B]
    else:
        evaluated = None

    def searched(num_simulations, policy_target):
        """One search and the move it picks: (action, policy target, root value, the
        played child's evaluation or None), for either branch of the playout cap."""
        def run(states, evaluated, k_search, k_act):
            root = None
            if evaluated is not None:
                root = mctx.RootFnOutput(prior_logits=evaluated[0], value=evaluated[1],
                                         embedding=states)
            # One search key per shard (its first game id): per-game keys would make the
            # noise independent of the device split, but a batch-of-one search per game
            # costs ~2x.
            out = search(variables, states, jax.random.fold_in(k_search, game_ids[0]),
                         root=root, num_simulations=num_simulations)
            tree = out.search_tree
            action = jax.vmap(select_action, in_axes=(0, 0, 0, 0, 0, None, None, None))(
                per_game_keys(k_act, game_ids), out.action, out.action_weights,
                tree.children_visits[:, 0] > 0, states.step_count, temperature_plies,
                greedy_from_search, random_plies)
            child = None
            if evaluated is not None:  # the played child's evaluation (visited: index >= 0)
                index = tree.children_index[rows, 0, action]  # int32[B]
                child = (tree.children_prior_logits[rows, index], tree.raw_values[rows, index])
            policy = out.action_weights if policy_target else jnp.zeros_like(out.action_weights)
            return action, policy, tree.node_values[:, 0], child
        return run

    full_search = searched(None, True)
    fast_search = searched(fast_simulations, False) if fast_simulations > 0 else None

    def body(carry, key):
        states, evaluated = carry
        if fast_search is None:
            k_search, k_act, k_step, k_reset = jax.random.split(key, 4)
            action, policy, root_value, child = full_search(states, evaluated, k_search, k_act)
        else:
            k_search, k_act, k_step, k_reset, k_cap = jax.random.split(key, 5)
            full = jax.random.bernoulli(k_cap, full_search_fraction)  # bool[], whole batch
            action, policy, root_value, child = jax.lax.cond(
                full, full_search, fast_search, states, evaluated, k_search, k_act)
        nxt = jax.vmap(env.step)(states, action, per_game_keys(k_step, game_ids))
        record = Trajectory(
            observation=states.observation,
            policy=policy,
            legal_mask=states.legal_action_mask,
            player=states.current_player,
            reward=nxt.rewards[rows, states.current_player],
            done=nxt.done,
            next_player=nxt.current_player,
            root_value=root_value,
        )
        if evaluated is not None:  # the played child's evaluation; restarts: the initial one
            restart = nxt.done  # bool[B]: reset_done puts the initial position there
            evaluated = (jnp.where(restart[:, None], initial.prior_logits, child[0]),
                         jnp.where(restart, initial.value, child[1]))
        return (reset_done(nxt, k_reset), evaluated), record

    (states, _), traj = jax.lax.scan(body, (states, evaluated),
                                     jax.random.split(k_scan, num_plies))
    chex.assert_tree_shape_prefix(traj, (num_plies, batch))
    chex.assert_shape(traj.policy, (num_plies, batch, env.num_actions))
    return traj, states


def restart_states(env, archive, archive_starts: float, key, init_key, game_ids):
    """The positions new games start from: per game, with probability `archive_starts` a
    position drawn uniformly from `archive` (leaves [B, K, ...]), else `env.init`. Each game
    draws from its own key (`per_game_keys`), from the archive of the games beside it.
    Keys consumed; `init_key` goes to `env.init` (per game). `selfplay` splits its reset key
    before passing it here, so it is not the key `env.init` gets without an archive: the
    fresh games differ from those only where `env.init` uses its key (games with chance)."""
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), archive)  # [B * K, ...]
    size = jax.tree.leaves(flat)[0].shape[0]

    def one(k):
        k_use, k_pick = jax.random.split(k)
        return jax.random.bernoulli(k_use, archive_starts), jax.random.randint(k_pick, (), 0, size)

    use, pick = jax.vmap(one)(per_game_keys(key, game_ids))  # bool[B], int32[B]
    fresh = jax.vmap(env.init)(per_game_keys(init_key, game_ids))
    return _per_game_where(use, jax.tree.map(lambda a: a[pick], flat), fresh)


def _per_game_where(cond, a, b):
    """Game b of `a` where cond[b], else of `b` (pytrees with leaves [B, ...])."""
    return jax.tree.map(
        lambda x, y: jnp.where(cond.reshape((-1,) + (1,) * (y.ndim - 1)), x, y), a, b)


def init_archive(states, size: int):
    """An archive of `size` positions per game slot, all of them `states` (leaves [B, ...])
    for a start: leaves [B, size, ...]."""
    return jax.tree.map(lambda x: jnp.repeat(x[:, None], size, axis=1), states)


def archive_push(archive, states):
    """The archive with `states` (leaves [B, ...], the positions at a window's end) as each
    slot's newest entry; the oldest goes."""
    return jax.tree.map(lambda a, s: jnp.concatenate([s[:, None], a[:, :-1]], axis=1),
                        archive, states)


def network_calls(num_plies: int, num_simulations: int, reuse_root: bool) -> int:
    """Network calls of batch B in one `selfplay` window (`reuse_root` adds one of batch 1)."""
    if reuse_root:
        return num_plies * num_simulations + 1
    return num_plies * (num_simulations + 1)


def value_targets(traj: Trajectory, discount: float = 1.0, bootstrap: bool = False
                  ) -> tuple[jax.Array, jax.Array]:
    """Game outcomes from each mover's point of view, by a reverse scan.

    v_t = r_t + (0 if done_t else s_t * discount * v_{t+1}), with s_t = -1 when the next
    mover is the opponent and +1 when the same player moves again. Draws give 0. With
    discount = gamma < 1 (as in the search) an outcome n plies ahead counts gamma^n.

    Plies of a game still running at the window's end have no outcome yet. They are left
    out (`valid` False), or with `bootstrap=True` their targets chain back from the search's
    root value at the window's last ply, v_{T-1} = root_value_{T-1} (an n-step target, as in
    MuZero): long games then train on all their plies, not only on the last window's.

    Returns:
      targets float32[T, B] and valid bool[T, B].
    """
    num_plies, batch = traj.reward.shape
    chex.assert_shape([traj.done, traj.player, traj.next_player, traj.root_value],
                      [(num_plies, batch)] * 4)

    def body(carry, x):
        v_next, ended_next = carry
        reward, done, player, next_player, root_value, last = x
        sign = jnp.where(next_player == player, 1.0, -1.0)
        v = reward + jnp.where(done, 0.0, sign * discount * v_next)
        running = last & ~done & bootstrap  # the window ends inside this game
        v = jnp.where(running, root_value, v)
        ended = done | ended_next | running
        return (v, ended), (v, ended)

    init = (jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.bool_))
    last = jnp.arange(num_plies) == num_plies - 1  # bool[T]
    xs = (traj.reward, traj.done, traj.player, traj.next_player,
          traj.root_value.astype(jnp.float32), last)
    _, (targets, valid) = jax.lax.scan(body, init, xs, reverse=True)
    return targets, valid


class Pending(NamedTuple):
    """Plies of games still running, waiting for their outcome; batch-major, right-aligned.

    `traj` is a `Trajectory` with the game axis first: leaves [B, L, ...], not the
    [T, B, ...] of `Trajectory`'s field comments (policy float32[B, L, A], player
    int32[B, L], ...); `settle_pending` swaps axes 0 and 1 to join it to a window.
    Game b's pending plies, oldest first, are `traj[b, L - length[b]:]`, and its game goes
    on in the next window; the slots before them hold stale data and are never read.
    """

    traj: Trajectory  # leaves [B, L, ...]: batch-major, unlike a window's [T, B, ...]
    length: jax.Array  # int32[B]  plies pending per game (0..L)


def init_pending(env, batch: int, max_length: int) -> Pending:
    """An empty `Pending` for `batch` games of `env`, up to `max_length` plies each."""
    def zeros(*shape, dtype=jnp.float32):
        return jnp.zeros((batch, max_length, *shape), dtype)

    traj = Trajectory(
        observation=zeros(*env.observation_shape, dtype=env.observation_dtype),
        policy=zeros(env.num_actions), legal_mask=zeros(env.num_actions, dtype=jnp.bool_),
        player=zeros(dtype=jnp.int32), reward=zeros(), done=zeros(dtype=jnp.bool_),
        next_player=zeros(dtype=jnp.int32), root_value=zeros())
    return Pending(traj, jnp.zeros(batch, jnp.int32))


def settle_pending(pending: Pending, traj: Trajectory, discount: float = 1.0
                   ) -> tuple[Trajectory, jax.Array, jax.Array, Pending, jax.Array]:
    """Joins one window to the plies pending before it; every ply whose game has ended
    gets its exact outcome target, the plies of games still running stay pending.

    Each game's pending plies go in front of its window plies, giving a timeline of
    L + T plies per game (`pending` holds the plies that directly precede the window, and
    `selfplay` continues the same games), and `value_targets` runs over it: a game may end,
    restart and end again inside the window. The running tail of each game after its last
    end becomes the new pending store. A tail longer than L (a game longer than
    `max_length`) keeps its newest L plies; the older ones are dropped and counted.

    Args:
      pending: leaves [B, L, ...], from `init_pending` or the previous call.
      traj: the window, leaves [T, B, ...] (`selfplay`'s output).
      discount: gamma per ply, as in `value_targets`.
    Returns:
      (timeline Trajectory [L + T, B, ...], targets float32[L + T, B],
       valid bool[L + T, B] (the plies that get their target now, each once),
       the new Pending, dropped int32[B] (plies that will never get a target)).
    """
    max_length = pending.traj.player.shape[1]
    num_plies = traj.player.shape[0]
    batch = pending.length.shape[0]
    chex.assert_tree_shape_prefix(pending.traj, (batch, max_length))
    chex.assert_tree_shape_prefix(traj, (num_plies, batch))
    timeline = jax.tree.map(
        lambda p, x: jnp.concatenate([jnp.swapaxes(p, 0, 1), x.astype(p.dtype)]),
        pending.traj, traj)  # [L + T, B, ...]
    first = max_length - pending.length  # int32[B]: each game's oldest pending slot
    present = jnp.arange(max_length + num_plies)[:, None] >= first[None, :]  # bool[L + T, B]
    # Slots before `first` are stale: they come before (in time) all of the game's real
    # plies, so the reverse scan never carries anything from them into a real one.
    targets, ended = value_targets(timeline, discount)
    valid = present & ended
    tail = (present & ~ended).sum(0, dtype=jnp.int32)  # int32[B]: the running game's plies
    length = jnp.minimum(tail, max_length)
    new = Pending(jax.tree.map(lambda x: jnp.swapaxes(x[num_plies:], 0, 1), timeline), length)
    return timeline, targets, valid, new, tail - length
