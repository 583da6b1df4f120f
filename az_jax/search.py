"""Batched MCTS over the real game dynamics with mctx.

    search = make_search(env, net, config.search)
    out = search(variables, states, key)                 # self-play (root noise)
    out = search(variables, states, key, evaluation=True, num_simulations=800)
    out.action          int32[B]
    out.action_weights  float32[B, A]   the policy target (visit counts / improved policy)

Conventions (DESIGN.md): the embedding is the env `State` itself; `recurrent_fn` steps the
env and evaluates the network; reward is that of the player who just moved; discount is -1
while the game goes on and the turn passes (the next node belongs to the opponent; -gamma
with `config.discount = gamma < 1`), +1 (+gamma) when the same player moves again (pgx's
backgammon), and 0 at the end, where the value is 0 too. mctx masks invalid actions only at
the root, so interior logits are masked here with the env's legal mask.

Tactical safety (`config.tactics` in self-play, `config.eval_tactics` in evaluation; DESIGN.md
"Gumbel's considered set is a blind spot"): before the search, every legal move of each root
is played with a vmapped `env.step`, and what is decided one move ahead is known exactly:

  "win":           if some move wins at once, only the winning moves stay valid at the root.
  "win_and_block": also, if some move leaves the opponent no winning reply, the moves that
                   do leave one are masked (one `env.winning_moves` scan per child where the
                   game has the hook, else an A x A batch of env steps per root).
  "threats":       also (games with `winning_moves`), the first moves of the fastest forced
                   win by continuous threats within `threat_depth` moves, if any; else the
                   moves after which the opponent has a forced win within `threat_depth`
                   (Connect4: in two) are masked, among the network's favourites and the
                   opponent's key points; in games without zugzwang (`env.zugzwang_free`:
                   Gomoku), a four that only delays his win in two (it is still there
                   after his forced block) does not count as a defence (`tactical_mask`,
                   `_forced_win_moves`, `_wins_despite`). The threat search reads each
                   node's forcing moves from `env.threat_counts`.

Inside the tree (`config.node_tactics`, on by default, in the searches whose root has
tactics, for games with `winning_moves`): every new node gets `node_tactics`: a mover who
can win at once has value +1 and only his winning moves as prior; facing one winning point
of the opponent, only the block has prior; facing two or more, value -gamma. So a line the
rules decide is seen as decided one move earlier than the terminal state, at every depth.

The prunings are exact (a win is the best outcome, rewards are in [-1, 1]; a move the
opponent answers with a win is the worst; a forced win is proved over every reply), and
they go through mctx's `invalid_actions`, so they hold for Gumbel (whose considered set is
then drawn among the kept moves) and PUCT, with and without root noise. The one exception
is "threats" facing a forced win: it keeps only the checked moves that hold, when some do,
though an unchecked move might hold too. When nothing is decided, or every move loses, the
mask is the legal mask and the search is exactly the plain one.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import mctx

from az_jax.mctx_backward import batched_backward

POLICIES = ("gumbel", "muzero")
TACTICS = ("none", "win", "win_and_block", "threats")
# Read when a config has no such field (configs saved before it existed): the search rule
# changes nothing the network learned, so older models play with the current defaults.
DEFAULT_TACTICS = "none"  # self-play: "win" learned worse in tic-tac-toe (README)
DEFAULT_EVAL_TACTICS = "threats"  # front ends, arena: tens of ms at a batch of one
DEFAULT_EVAL_SIMS_PER_CONSIDERED = 16
# Gumbel: the weight of the search's Q-values against the prior logits, in the improved
# policy (the self-play target) and the final choice (mctx's `qtransform_completed_by_mix_
# value`, sigma(q) = (50 + max visits) * value_scale * q, q rescaled to [0, 1]): mctx's
# 0.1, in both modes (configs saved before the fields existed searched with it). Larger
# helped Connect4 at 64 simulations and hurt at 400 (docs/learning.md, "A twelfth round").
DEFAULT_VALUE_SCALE = 0.1
# Games with `winning_moves`: every node of a search whose root has tactics also knows what
# one move ahead decides there (`node_tactics`).
DEFAULT_NODE_TACTICS = True
# "threats": the longest forced win looked for (the mover's moves, the winning one
# included: 4 finds a VCF of four fours) and the forcing moves tried per turn.
DEFAULT_THREAT_DEPTH = 4
DEFAULT_THREAT_WIDTH = 16
# "threats": forcing moves tried at the attacker's later turns (there a win in two needs a
# double threat, which the ordering by threat count puts first), and the root moves whose
# defence is checked (the network's favourites).
_INNER_WIDTH = 4
_DEFENCES_CHECKED = 8
# Child states stepped at once (per search batch) when looking for the opponent's winning replies;
# bounds the memory of the A x A one-ply-ahead batch.
_REPLY_STATES_PER_CHUNK = 1 << 15


def qtransform_parent_fpu(tree, node_index):
    """Q in [-1, 1] rescaled to [0, 1]; unvisited children get the parent's value, or the
    lowest (-1, a loss) where their prior is exactly 0.

    The default PUCT transform scores unvisited children at the minimum, which makes
    search with flat priors on many actions degenerate into a single deep chain. Using the
    parent's value as "first play urgency" keeps the search wide. mctx masks invalid
    actions only at the root: inside the tree an illegal child (logit `finfo.min`, prior 0
    in mctx's softmax) would get the parent's value too and, when every legal child scores
    less, win the argmax and play an illegal move (a loss for the mover; an over-optimistic
    value and a small `pb_c_init` made it happen in tic-tac-toe): it is scored as the loss
    it is.
    """
    q = tree.qvalues(node_index)
    visits = tree.children_visits[node_index]
    parent = tree.node_values[node_index]
    prior = jax.nn.softmax(tree.children_prior_logits[node_index])  # as mctx's PUCT sees it
    q = jnp.where(visits > 0, q, jnp.where(prior > 0, parent, -1.0))
    return (jnp.clip(q, -1.0, 1.0) + 1.0) / 2.0


def _step_all(env, state):
    """The children of one state: every action played. State [A, ...]."""
    return jax.vmap(env.step, in_axes=(None, 0))(
        state, jnp.arange(env.num_actions, dtype=jnp.int32))


def _wins_now(state, children):
    """bool[A]: the moves that end the game with the mover scoring > 0."""
    mover_reward = children.rewards[:, state.current_player]
    return state.legal_action_mask & children.terminated & (mover_reward > 0) & ~state.done


def _can_win(env, states, player):
    """bool[S]: `player` is to move in each of the states [S, ...] and wins at once there
    (`env.winning_moves`: one cheap scan per state, no steps)."""
    to_move = (states.current_player == player) & ~states.done
    return to_move & jax.vmap(env.winning_moves, in_axes=(0, None))(states, player).any(-1)


def _forced_win_moves(env, state, depth: int, width: int):
    """bool[depth - 1, A]: row j, the moves that win by force within j + 2 of the mover's
    moves (rows grow: a win within 2 is a win within 3).

    A threat search over the real rules: the mover (attacker) plays only forcing moves
    (`env.threat_counts`), the `width` with the most threats at each of its turns. After
    each, the defender must stop every winning move the attacker now holds: two or more
    and he cannot (each stays winning until played: the `winning_moves` contract), none
    left after the one block and he has lost, else the search goes on from the block. So
    a True is a proof over every reply, a False only means "not found within depth and
    width" (sound, not complete).
    """
    threats = env.threat_counts(state)  # int32[A]: 0 where not forcing
    k = min(width, env.num_actions)
    count, top = jax.lax.top_k(threats, k)  # the k most threatening moves
    candidates = jax.vmap(env.step, in_axes=(None, 0))(state, top)
    won = jax.lax.map(lambda c: _defender_loses(env, c, depth - 1), candidates)  # [k, depth - 1]
    won = won & (count > 0)[:, None]
    return jnp.zeros((depth - 1, env.num_actions), jnp.bool_).at[:, top].set(won.T)


def forced_wins(env, state, depth: int = DEFAULT_THREAT_DEPTH,
                width: int = DEFAULT_THREAT_WIDTH):
    """bool[A]: the first moves of a forced win by threats in at most `depth` (>= 2) of the
    mover's moves, among the `width` most threatening (see `_forced_win_moves`). One game
    (vmap for a batch); the game must have `env.winning_moves`. A win at once is not
    included (`tactical_mask` looks for it first)."""
    return _forced_win_moves(env, state, depth, width)[-1]


def _defender_loses(env, state, depth: int):
    """bool[depth]: element i, the defender (to move in `state`) loses to a forced win
    within i + 1 more moves of the attacker (see `_forced_win_moves`)."""
    attacker = 1 - state.current_player
    threats = env.winning_moves(state, attacker)  # bool[A]: what he must stop now
    count = threats.sum()
    after = env.step(state, jnp.argmax(threats))  # the one block, when count == 1
    holds = (count == 1) & ~_can_win(env, jax.tree.map(lambda x: x[None], after),
                                     attacker)[0]
    lost = (count >= 2) | ((count == 1) & ~holds)
    if env.max_steps is not None:  # a reply might end the game by the move limit: a draw
        lost = lost & (state.step_count + 1 < env.max_steps)
    if depth == 1:
        return lost[None]
    then = _forced_win_moves(env, after, depth, _INNER_WIDTH).any(-1)
    return jnp.concatenate([lost[None], lost | (holds & ~after.done & then)])


def _wins_despite(env, child, me, depth: int = 2, early=None):
    """bool[A]: the opponent's (to move in `child`, after a move of `me`) first moves of a
    forced win within `depth` of his moves.

    In a game without zugzwang (`env.zugzwang_free`), if `me`'s move made a four (one
    winning point: his only reply that does not lose is to block it, as `safe` leaves him
    no win at once), it only delays: the position examined is the one after his block and
    a null move of `me` (the same stones, his move again; the rules read the mover from
    `current_player`, as `winning_moves`' check in `envs.testing` does). His win in two
    must be gone there, not merely postponed; a block that makes him a winning point
    counts against the four too. With `early` (bool[A]: his first moves of a win in two
    before `me`'s move, `tactical_mask`'s null move at the root), only those count there:
    a win in two that his block stone made is one `me`, who moves after the block, can
    still stop (the four stopped his three, and gained the tempo to meet the next). After
    a four only wins in two are looked for, whatever `depth`: a longer one found after a
    null move is one `me`, moving first, may break (the first moves of longer wins at the
    root and there overlap by chance, so they would condemn right fours). This is a
    judgement, not a proof. Where a stone can hurt its owner (Connect4: his block opens
    the cell above it to both sides), the four is checked as any other move: a True is
    then a proof that the move loses (bitbully agrees on the shipped solver sets,
    tests/test_threats.py).
    """
    return _beaten(*_his_wins(env, child, me, depth), early)


def _his_wins(env, child, me, depth: int):
    """For `_wins_despite`: (rows bool[depth - 1, A], his forced wins within j + 2 moves
    in the position examined; delay bool[], `me`'s move was a four and the position
    examined is the one after his block and a null move; fives bool[A], his winning
    points there)."""
    if not env.zugzwang_free:  # a static property: no block or null move is traced
        rows = _forced_win_moves(env, child, depth, _INNER_WIDTH)
        return rows, jnp.bool_(False), jnp.zeros_like(rows[0])
    opponent = 1 - me
    ours = env.winning_moves(child, me)  # bool[A]
    blocked = env.step(child, jnp.argmax(ours))
    passed = blocked.replace(current_player=jnp.asarray(opponent, blocked.current_player.dtype))
    delay = (ours.sum() == 1) & ~blocked.done
    examined = jax.tree.map(lambda a, b: jnp.where(delay, a, b), passed, child)
    rows = _forced_win_moves(env, examined, depth, _INNER_WIDTH)
    return rows, delay, env.winning_moves(passed, opponent)  # his block made him a four


def _beaten(rows, delay, fives, early=None):
    """bool[A]: what counts against the move of `_his_wins` (see `_wins_despite`)."""
    in_two = rows[0] if early is None else rows[0] & early
    return jnp.where(delay, fives | in_two, rows[-1])


def tactical_mask(env, state, tactics: str, chunk: int | None = None, prior=None,
                  depth: int = DEFAULT_THREAT_DEPTH, width: int = DEFAULT_THREAT_WIDTH):
    """The root moves that stay valid once what the rules decide a few moves ahead is
    known. One game.

    Args:
      env: an `envs.Env` (deterministic: its steps ignore their keys).
      state: one env state (unbatched); vmap for a batch.
      tactics: one of `TACTICS`.
      chunk: children whose replies are stepped at once ("win_and_block" without the
        `winning_moves` hook); None = all A.
      prior: float[A] the network's logits at the root ("threats": the defence checks the
        `_DEFENCES_CHECKED` moves it likes best); None = by action order.
      depth, width: "threats": the longest forced win searched (the mover's moves, the
        winning one included) and the forcing moves tried per turn.
    Returns:
      bool[A], the first of these that is non-empty: the winning moves; ("threats") the
      first moves of a forced win in the fewest moves up to `depth`; (from
      "win_and_block") the moves after which the opponent has no winning reply, less
      ("threats") those checked after which he has a forced win within `depth` (or, when
      he threatens one and some checked move holds against it, only those; a four holds
      only if his win in two is gone once he has blocked it, see `_wins_despite`); the
      legal moves.
    """
    legal = state.legal_action_mask  # bool[A]
    if tactics == "none":
        return legal
    children = _step_all(env, state)  # State [A, ...]
    win = _wins_now(state, children)  # bool[A]
    allowed = jnp.where(win.any(), win, legal)
    if tactics == "win":
        return allowed
    opponent = 1 - state.current_player
    if env.has_winning_moves:
        lost = _can_win(env, children, opponent)
    else:  # every reply of every child stepped: A x A steps
        lost = jax.lax.map(
            lambda c: (c.current_player == opponent) & _wins_now(c, _step_all(env, c)).any(),
            children, batch_size=chunk)
    safe = legal & ~lost
    if tactics == "win_and_block" or not env.has_winning_moves:
        return jnp.where(win.any(), win, jnp.where(safe.any(), safe, legal))
    # "threats": the fastest forced win, else no move that allows him one.
    found = _forced_win_moves(env, state, depth, width)  # [depth - 1, A]
    forced = jnp.zeros_like(legal)
    for row in found[::-1]:  # a shorter win found overrides a longer one
        forced = jnp.where(row.any(), row, forced)
    prior = jnp.zeros(legal.shape, jnp.float32) if prior is None else prior

    # Where fewer than K moves are safe, top_k fills the rest with the lowest-index other
    # actions (all tied at finfo.min): they are checked too, which is harmless (a result
    # counts only where the move is `safe`).
    # Is he threatening a forced win at all, and from where? In a game without zugzwang,
    # the root with a null move of the mover answers it (a stone of the mover never helps
    # him); it rides in the same map as the checked moves (one compiled body), as a last
    # candidate. Without it, a checked four whose forced block made him a four looked like
    # a threat of his, and a quiet root was cut to the checked moves; and a four that
    # stopped his three was judged by the new threats his block stone made, which the
    # mover, moving next, can meet (`_wins_despite`). Connect4 looks for his wins in two
    # only (all 7 moves are checked). His forced wins within 4 there instead changed the
    # solver sets' mistakes by at most a position or two a set (stop 71, README): its
    # models' mistakes are decided further ahead than threats reach.
    mover = state.current_player
    passed = state.replace(current_player=jnp.asarray(opponent, state.current_player.dtype))

    def refutations(order):  # float32[A] -> (checked int32[K], bool[K, A]: his wins,
        _, checked = jax.lax.top_k(order, min(_DEFENCES_CHECKED, env.num_actions))
        # (and bool[]: his win after a null move)
        candidates = jax.tree.map(lambda x: x[checked], children)
        if not env.zugzwang_free:
            rows, delay, fives = jax.lax.map(lambda c: _his_wins(env, c, mover, 2), candidates)
            return checked, jax.vmap(_beaten)(rows, delay, fives), jnp.bool_(False)
        candidates = jax.tree.map(lambda c, r: jnp.concatenate([c, r[None]]), candidates, passed)
        rows, delay, fives = jax.lax.map(  # [K + 1, depth - 1, A], [K + 1], [K + 1, A]
            lambda c: _his_wins(env, c, mover, depth), candidates)
        root = rows[-1]  # his wins at the root (no four there: no delay)
        beaten = jax.vmap(_beaten, in_axes=(0, 0, 0, None))(rows[:-1], delay[:-1], fives[:-1],
                                                           root[0])
        return checked, beaten, root[-1].any()

    # The network's favourites first; if one of them allows a win, the points where the
    # opponent would start it (his key points: an open three's ends, his fours) are checked
    # next, then the favourites not yet checked. Two rounds of one compiled body (a scan:
    # the threat program is what the Gomocup brain's memory pays for, by its size).
    n = env.num_actions
    favourite = n - jnp.argsort(jnp.argsort(-prior)).astype(jnp.float32)  # n: the first
    unchecked = jnp.finfo(jnp.float32).min  # safe moves only; ties: lowest index first

    def round_(order, _):
        checked, wins, threat = refutations(order)
        fresh = safe & ~jnp.zeros_like(safe).at[checked].set(True)
        order = jnp.where(fresh, jnp.where(wins.any(0), n + favourite, favourite), unchecked)
        return order, (checked, wins.any(-1), threat)

    _, (checked, beaten, threat) = jax.lax.scan(
        round_, jnp.where(safe, favourite, unchecked), None, length=2)
    checked, beaten = checked.reshape(-1), beaten.reshape(-1)  # int32[2K], bool[2K]
    held = jnp.zeros_like(legal).at[checked].max(~beaten) & safe  # checked, no win of his
    lost2 = jnp.zeros_like(legal).at[checked].max(beaten & safe[checked])
    # Where a stone can hurt its owner (Connect4), every move is checked (K >= A).
    facing = threat[0] if env.zugzwang_free else lost2.any()
    # Facing his win: the checked moves that hold it, if any; else drop those that don't.
    defended = jnp.where(facing & held.any(), held, safe & ~lost2)
    return jnp.where(win.any(), win, jnp.where(
        forced.any(), forced, jnp.where(defended.any(), defended,
                                        jnp.where(safe.any(), safe, legal))))


def node_tactics(env, state, logits, value, discount: float = 1.0):
    """What one move ahead decides at a node, from `env.winning_moves` (two board scans,
    no steps). One node (vmap for a batch); the node's network output is replaced:

      the mover can win at once:   value 1, only the winning moves get prior;
      the opponent has one winning point (and the mover none): only the block gets prior
        (every other move loses at once); two or more: value -gamma (he wins after any
        block: a winning move stays winning until played, the hook's contract), and the
        prior is limited to his winning points, as with one.

    With a move limit (`env.max_steps`), the loss counts only where the mover's reply does
    not reach it (that ends the game in a draw); a win on the last allowed ply is a win
    (`env.step`).

    Args:
      env: an env with `has_winning_moves`.
      state: one env state (unbatched).
      logits: float[A] the network's prior logits; value: float[] its value for the mover.
      discount: the search's per-ply gamma (the loss comes one ply after the mover's move).
    Returns:
      (logits float[A], value float[]).
    """
    mover = state.current_player
    mine = env.winning_moves(state, mover)  # bool[A]
    his = env.winning_moves(state, 1 - mover)  # bool[A]
    win, lost = mine.any(), ~mine.any() & (his.sum() >= 2)
    # A move limit (`env.step`) ends only the games the move did not end: a win on the last
    # allowed ply is a win, so the mover's needs no check; his comes a ply later, after the
    # mover's reply, which must not reach the limit (it would end the game in a draw).
    if env.max_steps is not None:
        lost = lost & (state.step_count + 1 < env.max_steps)
    keep = jnp.where(win, mine, jnp.where(his.any(), his, state.legal_action_mask))
    logits = jnp.where(keep, logits, jnp.finfo(logits.dtype).min)
    value = jnp.where(win, 1.0, jnp.where(lost, -discount, value)).astype(value.dtype)
    return logits, value


def backup_discount(state, next_state, gamma: float = 1.0) -> jax.Array:
    """mctx's discount for the steps `state` -> `next_state` (batched): a node's value
    belongs to its mover, so -gamma where the turn passes, +gamma where the same player
    moves again (pgx's backgammon), 0 where the game ended. float32[B]."""
    same_mover = next_state.current_player == state.current_player
    return jnp.where(next_state.done, 0.0, jnp.where(same_mover, gamma, -gamma))


def make_recurrent_fn(env, apply_fn, discount: float = 1.0, tactics: bool = False):
    """mctx `recurrent_fn` over the env.

    Args:
      env: an `envs.Env`.
      apply_fn: `(variables, obs [B, ...], legal_mask [B, A]) -> (logits [B, A], value [B])`.
      discount: per-ply value discount gamma (1 = AlphaZero). With gamma < 1 a win on the
        n-th ply from here (the winning move included) is worth gamma^(n-1), an immediate
        win 1, so the search prefers quicker wins and slower losses.
      tactics: every new node gets `node_tactics` (the env must have `winning_moves`).
    """

    def recurrent_fn(variables, key, action, state):
        batch = action.shape[0]
        next_state = jax.vmap(env.step)(state, action, jax.random.split(key, batch))
        logits, value = apply_fn(variables, next_state.observation, next_state.legal_action_mask)
        if tactics:
            logits, value = jax.vmap(functools.partial(node_tactics, env, discount=discount))(
                next_state, logits, value)
        logits = jnp.where(next_state.legal_action_mask, logits, jnp.finfo(logits.dtype).min)
        reward = next_state.rewards[jnp.arange(batch), state.current_player]
        out = mctx.RecurrentFnOutput(
            reward=reward,
            discount=backup_discount(state, next_state, discount),
            prior_logits=logits,
            value=jnp.where(next_state.done, 0.0, value),
        )
        return out, next_state

    return recurrent_fn


def make_search(env, net, config) -> Search:
    """The batched search over `env` with the Flax network `net` (eval mode).

    Args:
      env: an `envs.Env`.
      net: the Flax network (its `apply` takes `(variables, obs, legal_mask)`).
      config: `config.search` (policy, num_simulations, dirichlet_alpha, dirichlet_fraction,
        pb_c_init, pb_c_base, max_num_considered_actions, gumbel_scale, discount, tactics,
        eval_tactics, eval_sims_per_considered, value_scale, eval_value_scale,
        threat_depth, threat_width, node_tactics; the fields a config predates take their
        DEFAULT_*).
    Raises:
      ValueError: as `Search`.
    """
    return Search(env, lambda v, obs, mask: net.apply(v, obs, mask, train=False), config)


class Search:
    """A batched search over the real game dynamics (build it with `make_search`).

        out = search(variables, state, key)          # mctx.PolicyOutput, batch B
        root = search.root(variables, state)         # the network at the roots only

    `Search(env, apply_fn, config)` takes any `apply_fn(variables, obs, legal_mask) ->
    (logits, value)`. It holds only static configuration, so it can be a static argument of
    `jit`.

    Games with chance (`env.deterministic` False) get no tactics: one step ahead is not
    one result there.

    Raises:
      ValueError: unknown policy or tactics, a non-positive simulation count, a
        `threat_depth` below 2 or a `threat_width` below 1, a negative
        `eval_sims_per_considered`, or a `value_scale` or `eval_value_scale` that is not
        positive.
    """

    def __init__(self, env, apply_fn, config):
        if config.policy not in POLICIES:
            raise ValueError(f"search.policy={config.policy!r}; accepted: "
                             f"{', '.join(POLICIES)}")
        if config.num_simulations < 1:
            raise ValueError("search.num_simulations must be >= 1")
        self.tactics = {False: config.get("tactics", DEFAULT_TACTICS),
                        True: config.get("eval_tactics", DEFAULT_EVAL_TACTICS)}
        for evaluation, name in ((False, "tactics"), (True, "eval_tactics")):
            if self.tactics[evaluation] not in TACTICS:
                raise ValueError(f"search.{name}={self.tactics[evaluation]!r}; accepted: "
                                 f"{', '.join(TACTICS)}")
        self.threat_depth = int(config.get("threat_depth", DEFAULT_THREAT_DEPTH))
        self.threat_width = int(config.get("threat_width", DEFAULT_THREAT_WIDTH))
        if self.threat_depth < 2 or self.threat_width < 1:
            raise ValueError(f"search.threat_depth={self.threat_depth} must be >= 2 and "
                             f"search.threat_width={self.threat_width} >= 1")
        self.sims_per_considered = config.get("eval_sims_per_considered",
                                              DEFAULT_EVAL_SIMS_PER_CONSIDERED)
        if self.sims_per_considered < 0:
            raise ValueError("search.eval_sims_per_considered must be >= 0 (0: no growth)")
        # Per mode (evaluation or not), as `tactics`.
        self.value_scale = {
            False: float(config.get("value_scale", DEFAULT_VALUE_SCALE)),
            True: float(config.get("eval_value_scale", DEFAULT_VALUE_SCALE))}
        for evaluation, name in ((False, "value_scale"), (True, "eval_value_scale")):
            if not self.value_scale[evaluation] > 0:
                raise ValueError(f"search.{name}={self.value_scale[evaluation]} must be > 0")
        if not env.deterministic:
            self.tactics = {False: "none", True: "none"}
        self.env, self.apply_fn, self.config = env, apply_fn, config
        # Configs saved before `discount` existed have none: they searched undiscounted.
        self.discount = float(config.get("discount", 1.0))
        nodes = bool(config.get("node_tactics", DEFAULT_NODE_TACTICS)) and env.has_winning_moves
        # Per mode (evaluation or not): inside the tree too, where the root has tactics.
        self.node_tactics = {e: nodes and self.tactics[e] != "none" for e in (False, True)}
        self._recurrent = {e: make_recurrent_fn(env, apply_fn, self.discount,
                                                self.node_tactics[e]) for e in (False, True)}

    def num_considered(self, num_simulations: int, evaluation: bool) -> int:
        """Gumbel's root considered-set size (static).

        Self-play: `max_num_considered_actions`. Evaluation (no noise, so the set is the top
        of the prior): it grows with the budget to `num_simulations //
        eval_sims_per_considered` when that is larger, so that a big search looks at more
        than the prior's favourites. mctx caps it at each root's number of valid moves.
        """
        k = int(self.config.max_num_considered_actions)
        if evaluation and self.sims_per_considered > 0:
            k = max(k, num_simulations // self.sims_per_considered)
        return min(k, self.env.num_actions)

    def invalid_actions(self, state, evaluation: bool = False, prior=None,
                        tactics: str | None = None):
        """bool[B, A]: the root moves the search may not play (illegal, or pruned by tactics).

        `tactics` rules self-play searches, `eval_tactics` evaluation ones, unless the
        `tactics` argument names another of `TACTICS`. `prior`: the network's logits [B, A]
        at the roots ("threats" checks the defence of its favourites).
        """
        if tactics is not None and tactics not in TACTICS:
            raise ValueError(f"tactics={tactics!r}; accepted: {', '.join(TACTICS)}")
        if tactics is None or not self.env.deterministic:
            tactics = self.tactics[bool(evaluation)]
        if tactics == "none":
            return ~state.legal_action_mask
        batch, num_actions = state.legal_action_mask.shape
        chunk = max(1, min(num_actions, _REPLY_STATES_PER_CHUNK // (batch * num_actions)))
        mask = jax.vmap(functools.partial(
            tactical_mask, self.env, tactics=tactics, chunk=chunk, depth=self.threat_depth,
            width=self.threat_width))(state, prior=prior)
        return ~mask

    def root(self, variables, state, evaluation: bool = False) -> mctx.RootFnOutput:
        """The network's prior logits [B, A] and value [B] at a batch of env states, with
        `node_tactics` where the mode's searches use them (as the tree's nodes: self-play
        reuses a played child's output as the next root)."""
        logits, value = self.apply_fn(variables, state.observation, state.legal_action_mask)
        if self.node_tactics[bool(evaluation)]:
            logits, value = jax.vmap(functools.partial(
                node_tactics, self.env, discount=self.discount))(state, logits, value)
        return mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)

    def __call__(self, variables, state, key, *, evaluation: bool = False,
                 num_simulations: int | None = None,
                 root: mctx.RootFnOutput | None = None,
                 invalid=None) -> mctx.PolicyOutput:
        """Runs a batched search from `state` (batched env states, leading dim B).

        `key` is one key for the batch, or one key per game (shape [B, 2], or [B] of typed
        keys from `jax.random.key`): per-game keys
        make each game's noise independent of how the batch is split over devices. The
        key is consumed. `evaluation=True` turns the root noise off. `root`: the network's
        output at `state` when the caller already has it (self-play reuses the played
        child's evaluation from the previous search); None evaluates it here. `invalid`:
        bool[B, A] the root moves not to play, when the caller has them (a front end that
        searches one position in several chunks computes its tactics once); None computes
        them here (`invalid_actions`). `num_simulations`: None = the config's.

        Raises:
          ValueError: `num_simulations` below 1.
        """
        sims = int(self.config.num_simulations if num_simulations is None else num_simulations)
        if sims < 1:
            raise ValueError(f"num_simulations={sims} must be >= 1")
        if root is None:
            root = self.root(variables, state, evaluation)
        if invalid is None:
            invalid = self.invalid_actions(root.embedding, evaluation, root.prior_logits)
        typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)  # jax.random.key's
        if key.ndim == (0 if typed else 1):  # one key for the batch
            return self._search(variables, root, invalid, key, evaluation, sims)

        def one(root, invalid, key):  # a batch of one game: its noise depends on its key only
            root, invalid = jax.tree.map(lambda x: x[None], (root, invalid))
            out = self._search(variables, root, invalid, key, evaluation, sims)
            return jax.tree.map(lambda x: x[0], out)

        return jax.vmap(one)(root, invalid, key)

    def _search(self, variables, root, invalid, key, evaluation, sims) -> mctx.PolicyOutput:
        chex.assert_equal_shape([root.prior_logits, invalid])
        with batched_backward():  # mctx's own is slow on big batched trees (mctx_backward)
            return self._mctx(variables, root, invalid, key, evaluation, sims)

    def _mctx(self, variables, root, invalid, key, evaluation, sims) -> mctx.PolicyOutput:
        """The mctx policy call itself (with mctx's own backward pass outside
        `batched_backward`: `bench backward` compares the two)."""
        return run_policy(self.config, variables, key, root, self._recurrent[bool(evaluation)],
                          invalid, sims, considered=self.num_considered(sims, evaluation),
                          value_scale=self.value_scale[bool(evaluation)],
                          evaluation=evaluation)


def run_policy(config, variables, key, root, recurrent_fn, invalid, num_simulations: int, *,
               considered: int, value_scale: float,
               evaluation: bool = False) -> mctx.PolicyOutput:
    """One mctx search of `config.policy`: Gumbel (`considered` root moves, the Q transform
    with `value_scale`) or PUCT (parent first-play urgency). Self-play gets the config's root
    noise (Gumbel or Dirichlet) and PUCT samples its move by the visits; `evaluation` turns
    the noise off and PUCT plays its most visited move. `Search` calls it; so do the
    pgx-style loops of `bench pgx`, so that both sides run one search."""
    if config.policy == "gumbel":
        return mctx.gumbel_muzero_policy(
            variables, key, root, recurrent_fn,
            num_simulations=num_simulations,
            invalid_actions=invalid,
            max_num_considered_actions=considered,
            gumbel_scale=0.0 if evaluation else config.gumbel_scale,
            qtransform=functools.partial(mctx.qtransform_completed_by_mix_value,
                                         value_scale=value_scale),
        )
    return mctx.muzero_policy(
        variables, key, root, recurrent_fn,
        num_simulations=num_simulations,
        invalid_actions=invalid,
        qtransform=qtransform_parent_fpu,
        dirichlet_fraction=0.0 if evaluation else config.dirichlet_fraction,
        dirichlet_alpha=config.dirichlet_alpha,
        pb_c_init=config.pb_c_init,
        pb_c_base=config.pb_c_base,
        temperature=0.0 if evaluation else 1.0,
    )


@functools.partial(jax.jit, static_argnames=("search", "evaluation", "num_simulations"))
def jit_search(search, variables, state, key, evaluation=True, num_simulations=None):
    """A jitted call of `search` for host-side callers that search whole batches, one call
    at a time (the tactics suite, az_jax/eval/tactics.py). The front ends (az_jax/agent.py)
    jit their own search with their batch handling; matches jit the whole match."""
    return search(variables, state, key, evaluation=evaluation, num_simulations=num_simulations)
