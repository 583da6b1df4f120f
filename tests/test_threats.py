"""The "threats" root tactics (az_jax/search.py) against references that are not our code:
the numpy threat solver `envs/gomoku_tactics.py` (itself checked against the env's own win
check in test_gomoku_tactics.py) for Gomoku, and bitbully's labels of the shipped Connect4
solver sets. A forced win the search reports must be a real one (soundness); within its
width it must find what the solver finds (completeness); and a search of one simulation,
whatever its prior, plays it or the defence.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from az_jax import search
from envs import gomoku_tactics as gt

DATA = Path(__file__).parent / "data"


def _states(env, move_lists):
    """Batched states after each move list (one jitted scan; lists padded with -1)."""
    longest = max(1, max(len(m) for m in move_lists))
    padded = np.full((len(move_lists), longest), -1, np.int32)
    for i, m in enumerate(move_lists):
        padded[i, :len(m)] = m

    def one(actions):
        def body(s, a):
            return jax.tree.map(lambda x, y: jnp.where(a >= 0, x, y), env.step(s, a), s), None
        return jax.lax.scan(body, env.init(jax.random.PRNGKey(0)), actions)[0]

    return jax.jit(jax.vmap(one))(jnp.asarray(padded))


@pytest.mark.parametrize("rule", ["freestyle", "standard"])
def test_forced_wins_match_the_vcf_solver(rule):
    """Gomoku 9x9: every forced win found is a VCF of the numpy solver (sound), and the
    search finds nearly all of the solver's (it tries only the most threatening moves)."""
    env = envs.make("gomoku", size=9, rule=rule)
    games = gt.clustered_games(9, games=160, plies=40, seed=1 if rule == "freestyle" else 2)
    positions = []
    for moves in games:
        board, player = gt.board_from_moves(moves, 9)
        if (gt.winning_points(board, player, rule).any()
                or gt.winning_points(board, 1 - player, rule).sum() >= 2
                or any(gt.winning_points(*gt.board_from_moves(moves[:i], 9), rule).any()
                       for i in range(len(moves)))):
            continue  # the mover wins at once, is lost, or the game was already won
        positions.append(moves)
    states = _states(env, positions)
    depths = (2, 3, 4)
    found = {d: np.asarray(jax.jit(jax.vmap(lambda s, d=d: search.forced_wins(env, s, d)))(
        states)) for d in depths}
    total = dict.fromkeys(depths, 0)
    hits = dict.fromkeys(depths, 0)
    for i, moves in enumerate(positions):
        board, player = gt.board_from_moves(moves, 9)
        for d in depths:
            ref = gt.vcf_moves(board, player, d, rule).reshape(-1)
            ours = found[d][i]
            extra = np.flatnonzero(ours & ~ref)
            assert extra.size == 0, (rule, d, moves, [env.action_to_str(a) for a in extra])
            total[d] += int(ref.any())
            hits[d] += int((ours & ref).any())
    assert total[2] >= 20 and total[4] > total[3] > total[2], total  # it holds every kind
    for d in depths:
        assert hits[d] >= 0.95 * total[d], (d, hits, total)


def test_a_vcf_of_four_fours_is_played_even_against_an_open_three():
    """Gomoku 9x9, positions where the mover has a VCF of exactly four fours (none shorter):
    with `threat_depth` 4 the mask keeps the first moves of the mover's VCF and nothing
    else (the numpy solver's `vcf_moves` as reference), also where the opponent has an
    open three. There, at depth 3, the defence check judges each of those fours a mere
    delay of the open three and may prune them all: the sample must hold such a case."""
    env = envs.make("gomoku", size=9)
    positions, answers, open_three = [], [], []
    for moves in gt.clustered_games(9, games=120, plies=60, seed=5):
        for i in range(6, len(moves) + 1):
            board, player = gt.board_from_moves(moves[:i], 9)
            if (gt.winning_points(board, player).any()
                    or gt.winning_points(board, 1 - player).any()
                    or gt.vcf_moves(board, player, 3).any()):
                continue
            vcf = gt.vcf_moves(board, player, 4).reshape(-1)
            if vcf.any():
                positions.append(moves[:i])
                answers.append(vcf)
                open_three.append(gt.open_three_defences(board, player)[0].any())
    states = _states(env, positions)
    masks = {d: np.asarray(jax.jit(jax.vmap(
        lambda s, d=d: search.tactical_mask(env, s, "threats", depth=d)))(states))
        for d in (3, 4)}
    for moves, vcf, mask in zip(positions, answers, masks[4], strict=True):
        assert mask.any() and not (mask & ~vcf).any(), moves
    pruned = [not (m & v).any() for m, v in zip(masks[3], answers, strict=True)]
    assert len(positions) >= 20 and sum(open_three) >= 3, (len(positions), sum(open_three))
    assert any(p and o for p, o in zip(pruned, open_three, strict=True)), pruned


SUITE_TARGETS = ("win_in_one", "block_four", "open_four_win", "vcf3")


def test_tactics_suite_positions_are_decided_by_the_mask():
    """On the shipped 9x9 suite (labels: the numpy solver), the threats mask keeps only
    correct moves in the four categories the search must never miss, with a flat prior
    (20 positions each). Against an open three (100 positions) it keeps a defence, and
    nearly always only defences: its check sees his forced wins of up to `threat_depth`
    (4) moves, among his `_INNER_WIDTH` most threatening, where the labels see all his
    VCFs of up to 5 moves. Until stop 70 it saw his wins in two: 99 kept a defence, 93
    only defences; now 100 and 98 (over all 221: 219 and 209, now 221 and 219)."""
    from az_jax.eval import tactics as suite_lib

    env = envs.make("gomoku", size=9)
    suite = suite_lib.load(DATA / "gomoku_tactics_9x9.jsonl")
    per = {}
    for p in suite.positions:
        if len(per.setdefault(p.category, [])) < (100 if p.category == "block_open_three"
                                                   else 20):
            per[p.category].append(p)
    positions = [p for c in (*SUITE_TARGETS, "block_open_three") for p in per[c]]
    states = _states(env, [list(p.moves) for p in positions])
    masks = np.asarray(jax.jit(jax.vmap(
        lambda s: search.tactical_mask(env, s, "threats")))(states))
    kept, defended = 0, 0
    for p, mask in zip(positions, masks, strict=True):
        answers = np.zeros(env.num_actions, bool)
        answers[list(p.answers)] = True
        if p.category in SUITE_TARGETS:
            assert mask.any() and not (mask & ~answers).any(), (p.category, p.moves)
        else:  # an open three to stop
            kept += int((mask & answers).any())
            defended += int(not (mask & ~answers).any())
    n = len(per["block_open_three"])
    assert n == 100 and kept == n and defended >= 0.96 * n, (n, kept, defended)


@functools.cache
def _connect4_solver_sets():
    """(env, the shipped Connect4 solver sets' positions, their batched states)."""
    from az_jax.eval import connect4_positions as c4

    env = envs.make("connect4")
    positions = [p for f in sorted((DATA / "connect4").glob("*.txt"))
                 for p in c4.read_positions(f)]
    return env, positions, _states(env, [p.actions for p in positions])


def test_connect4_forced_wins_are_wins_for_bitbully():
    """Connect4 (no Gomoku code involved): on the shipped solver sets, labelled by
    bitbully, every forced win the threat search finds is a winning move."""
    env, positions, states = _connect4_solver_sets()
    found = np.asarray(jax.jit(jax.vmap(lambda s: search.forced_wins(env, s, 3)))(states))
    playing = 0
    for p, ours in zip(positions, found, strict=True):
        scores = p.outcomes()  # per column: +1 a win for the mover (bitbully), -2 full
        for a in np.flatnonzero(ours):
            assert scores[a] > 0, (p.to_line(), a)
        playing += int(ours.any())
    assert playing >= 20, playing  # the sets hold forced wins to check


def _forced_in_two_by_stepping(env, state):
    """The mover's moves (not winning at once) after which every reply leaves him a win at
    once: a brute force over `env.step`, written apart from the threat search."""
    step = jax.jit(env.step)
    me = int(state.current_player)

    def wins_at_once(s):
        return any(bool(c.terminated) and float(c.rewards[me]) > 0
                   for c in (step(s, a) for a in np.flatnonzero(s.legal_action_mask)))

    found = set()
    for m in np.flatnonzero(state.legal_action_mask):
        child = step(state, m)
        if child.done:
            continue  # a win at once (or a draw) is not a forced win
        replies = [step(child, r) for r in np.flatnonzero(child.legal_action_mask)]
        if all(not r.done and wins_at_once(r) for r in replies):
            found.add(int(m))
    return found


def test_connect4_forced_win_through_a_block_that_opens_the_cell_above():
    """Connect4, X to move after columns 1,0,0,2,2,0,1,1,4,4,5,5 (0-based): column 3 makes
    two winning cells, column 6 a four on the bottom row (cell 3) whose only block lifts
    column 3 to X's winning cell above it (the block "does not hold"). Depth 2 must find
    both, as a brute force over every reply does."""
    env = envs.make("connect4")
    state = _states(env, [[1, 0, 0, 2, 2, 0, 1, 1, 4, 4, 5, 5]])
    one = jax.tree.map(lambda x: x[0], state)
    assert _forced_in_two_by_stepping(env, one) == {3, 6}
    found = np.asarray(jax.jit(lambda s: search.forced_wins(env, s, 2))(one))
    assert set(np.flatnonzero(found).tolist()) == {3, 6}


@pytest.mark.parametrize("tactics", ["win_and_block", "threats"])
def test_connect4_root_tactics_never_prune_a_best_move(tactics):
    """On the shipped solver sets (bitbully's scores), the evaluation's root mask keeps a
    move of the best outcome, and it prunes one only where it keeps nothing else: what
    it takes away is proven (Connect4 has zugzwang: until stop 34 a four was judged
    against a null move, and every best move was pruned in 16 of the 1783 positions)."""
    env, positions, states = _connect4_solver_sets()
    assert not env.zugzwang_free
    masks = np.asarray(jax.jit(jax.vmap(
        lambda s: search.tactical_mask(env, s, tactics)))(states))
    pruned_any = 0
    for p, mask in zip(positions, masks, strict=True):
        outcomes = p.outcomes()  # +1 / 0 / -1 for the mover, -2 a full column
        best = outcomes == outcomes.max()
        assert (mask & best).any(), (p.to_line(), mask)
        assert not (best & ~mask).any() or not (mask & ~best).any(), (p.to_line(), mask)
        pruned_any += int((~mask & (outcomes > -2)).any())
    assert pruned_any >= 100, pruned_any  # the mask does prune here: the check is not idle


def test_connect4_node_tactics_agree_with_bitbully():
    """Every node's tactics (a win at once: value +1; one winning point of the opponent:
    only the block keeps prior) on the shipped solver sets: the value is bitbully's, and
    the moves kept hold a best one."""
    env, positions, states = _connect4_solver_sets()
    n = len(positions)
    logits, values = jax.jit(jax.vmap(lambda s, lg, v: search.node_tactics(env, s, lg, v)))(
        states, jnp.zeros((n, env.num_actions)), jnp.full((n,), 0.25))
    decided = restricted = 0
    for p, lg, v in zip(positions, np.asarray(logits), np.asarray(values), strict=True):
        outcomes = p.outcomes()
        if v != 0.25:  # the tactics decided the node's value
            decided += 1
            assert np.sign(v) == outcomes.max(), (p.to_line(), v)
        kept = lg > lg.max() - 1e3
        if kept.sum() < (outcomes > -2).sum():
            restricted += 1
            assert (kept & (outcomes == outcomes.max())).any(), (p.to_line(), lg)
    assert decided >= 100 and restricted >= 100, (decided, restricted)


# ---------------------------------------------------------- one simulation, a blind prior
def _blind_search(env, prefer, hide, policy):
    logits = jnp.zeros(env.num_actions).at[prefer].set(30.0).at[jnp.asarray(hide)].set(-30.0)

    def apply_fn(variables, obs, mask):
        del variables, mask
        return jnp.broadcast_to(logits, (obs.shape[0], env.num_actions)), jnp.zeros(obs.shape[0])

    c = search_config(policy)
    return search.Search(env, apply_fn, c)


def search_config(policy):
    import ml_collections

    return ml_collections.ConfigDict(dict(
        policy=policy, num_simulations=1, max_num_considered_actions=4, gumbel_scale=1.0,
        dirichlet_alpha=0.3, dirichlet_fraction=0.25, pb_c_init=1.25, pb_c_base=19652.0,
        tactics="threats", eval_tactics="threats"))


def _point(name: str, n: int = 9) -> int:
    """The action of a point named as on the board, "E5" (columns A.., row 1 at the bottom)."""
    return (n - int(name[1:])) * n + ord(name[0]) - 65


def _first_of(category, size=9, seed=3):
    """The first position of clustered random games that the numpy solver labels
    `category`: (moves, the solver's answers)."""
    for moves in gt.clustered_games(size, games=400, plies=50, seed=seed):
        for i in range(len(moves) + 1):
            board, player = gt.board_from_moves(moves[:i], size)
            tactic = gt.classify(board, player)
            if tactic is not None and tactic.category == category:
                return moves[:i], np.flatnonzero(tactic.answers.reshape(-1))
            if gt.winning_points(board, 1 - player).any() and i > 0 and tactic is None:
                break
    raise AssertionError(f"no {category} position found")


@pytest.mark.parametrize(("policy", "evaluation"), [("gumbel", True), ("gumbel", False),
                                                    ("muzero", True)])
def test_one_simulation_plays_a_hidden_vcf(policy, evaluation):
    """The mover has no five and no open four, only a VCF in three (the numpy solver
    says so and names its first moves): the prior hides them all, and one simulation
    still plays one."""
    env = envs.make("gomoku", size=9)
    moves, vcf = _first_of("vcf3")
    s = _blind_search(env, prefer=int(np.flatnonzero(
        np.asarray(_states(env, [moves]).legal_action_mask[0]) & ~np.isin(
            np.arange(81), vcf))[0]), hide=vcf, policy=policy)
    out = jax.jit(lambda st, k: s(None, st, k, evaluation=evaluation))(
        _states(env, [moves]), jax.random.PRNGKey(0))
    assert int(out.action[0]) in vcf, env.action_to_str(int(out.action[0]))


@pytest.mark.parametrize(("stones", "prefer"), [
    # White has an open three (C5 D5 E5) and black no threat.
    (("A1", "C5", "I1", "D5", "A9", "E5"), "I9"),
    # The same three; black's D1 makes a four (A1-D1) that white blocks at E1, after which
    # the open three is still there: a delay, not a defence.
    (("A1", "C5", "B1", "D5", "C1", "E5"), "D1"),
], ids=["open three", "a four that only delays"])
def test_one_simulation_stops_an_open_three(stones, prefer):
    """The prior hides every defence (per the numpy solver) and likes `prefer` best, which
    is not one; one simulation still plays a defence."""
    env = envs.make("gomoku", size=9)
    moves = [_point(m) for m in stones]  # black to move
    board, player = gt.board_from_moves(moves, 9)
    threats, defences = gt.open_three_defences(board, player)
    assert threats.any() and 0 < defences.sum() < 20 and not defences.flat[_point(prefer)]
    defences = np.flatnonzero(defences.reshape(-1))
    s = _blind_search(env, prefer=_point(prefer), hide=defences, policy="gumbel")
    out = jax.jit(lambda st, k: s(None, st, k, evaluation=True))(
        _states(env, [moves]), jax.random.PRNGKey(0))
    assert int(out.action[0]) in defences, env.action_to_str(int(out.action[0]))


@pytest.mark.parametrize(("white", "expected"), [
    # White's forced block at E1 makes E1-E4, a four whose one point is E5 (E0 is off the
    # board): the four only hands him the tempo, and the judgement counts it against.
    (("E2", "E3", "E4"), ("E5",)),
    # The same four of black, but white's block makes only a three: no win of his in two.
    (("E2", "E3", "I9"), ()),
], ids=["his block makes his four", "his block makes a three"])
def test_a_four_whose_block_makes_his_four_is_no_defence(white, expected):
    """`_wins_despite`'s rule for a four (module docstring): the position examined
    is the one after his forced block and a null move, and a block that makes him a
    winning point counts against the four as a win of his would. Hand-worked on 9x9:
    black A1 B1 C1 then D1, a four whose only point is E1."""
    env = envs.make("gomoku", size=9)
    black = ("A1", "B1", "C1", "D1")
    moves = [_point(m) for pair in zip(black[:3], white, strict=True) for m in pair]
    moves.append(_point("D1"))
    child = jax.tree.map(lambda x: x[0], _states(env, [moves]))  # white to move
    me = 1 - int(child.current_player)
    assert np.flatnonzero(np.asarray(env.winning_moves(child, me))).tolist() == [_point("E1")]
    beaten = jax.jit(lambda c: search._wins_despite(env, c, me))(child)
    assert sorted(env.action_to_str(int(a)) for a in np.flatnonzero(np.asarray(beaten))) \
        == [env.action_to_str(_point(m)) for m in expected]


def test_a_quiet_root_keeps_every_move_that_is_not_a_four():
    """Where neither side threatens anything (by the numpy solver: no winning point, no
    open-four move, no VCF of either side within the search's depth), the "threats" mask
    must keep every legal move that is not a four: a quiet move cannot hand him a forced
    win (a stone never helps its opponent in Gomoku),
    and the search must not cut the root to the few moves it checked. A four may go (a
    four whose forced block makes him a four is judged a mere delay). Random priors decide
    which moves are checked. First, hand-worked on 9x9: black A1 B1 C1, white F2 G3 H4;
    black's favourite D1 is a four whose block E1 makes white E1-H4, a four: once, that
    looked like a threat of white's and the root kept 8 of 75 moves."""
    env = envs.make("gomoku", size=9)
    positions = [[_point(m) for m in ("A1", "F2", "B1", "G3", "C1", "H4")]]
    for moves in gt.clustered_games(9, games=150, plies=40, seed=11):
        board, player = gt.board_from_moves(moves, 9)
        if len(moves) >= 4 and not any(
                f(board, p).any() for p in (player, 1 - player)
                for f in (gt.winning_points, gt.open_four_moves)) and not any(
                gt.vcf_moves(board, p, search.DEFAULT_THREAT_DEPTH).any()
                for p in (player, 1 - player)):
            positions.append(moves)
    prior = jax.random.normal(jax.random.PRNGKey(0), (len(positions), env.num_actions))
    prior = prior.at[0, _point("D1")].set(10.0)
    masks = np.asarray(jax.jit(jax.vmap(lambda s, p: search.tactical_mask(
        env, s, "threats", prior=p)))(_states(env, positions), prior))
    assert len(positions) >= 40, len(positions)
    for moves, mask in zip(positions, masks, strict=True):
        board, player = gt.board_from_moves(moves, 9)
        quiet = (board == gt.EMPTY).reshape(-1) & ~gt.four_moves(board, player).reshape(-1)
        pruned = [env.action_to_str(int(a)) for a in np.flatnonzero(quiet & ~mask)]
        assert not pruned, ([env.action_to_str(a) for a in moves], pruned)


def test_a_four_that_stops_his_three_is_a_defence():
    """Once in the shipped 9x9 suite (block_open_three, white to move): black threatens an
    open four; the numpy solver's one answer is E4, which stops it and makes white a four.
    Black's forced block then makes him a new three (after a null move, B5 or F5 would win
    in two), but white moves after the block and can meet it: only his threat from before
    white's four counts against it (`_wins_despite`'s `early`). Until stop 69 the
    new three did, and with a prior that likes E4 the root kept other stops, which leave
    black a VCF (the solver's labels)."""
    env = envs.make("gomoku", size=9)
    moves = [40, 59, 57, 74, 38, 77, 19, 48, 20, 54, 47, 29, 58, 3, 73, 69, 67]
    e4 = _point("E4")
    board, player = gt.board_from_moves(moves, 9)
    assert gt.classify(board, player).answers.reshape(-1).nonzero()[0].tolist() == [e4]
    prior = jax.random.normal(jax.random.PRNGKey(1), (env.num_actions,)).at[e4].set(10.0)
    state = jax.tree.map(lambda x: x[0], _states(env, [moves]))
    mask = np.asarray(jax.jit(lambda s, p: search.tactical_mask(
        env, s, "threats", prior=p))(state, prior))
    assert mask[e4] and 0 < mask.sum() < 10, [env.action_to_str(a) for a in np.flatnonzero(mask)]


def test_bad_threat_settings_are_rejected():
    c = search_config("gumbel")
    c.threat_depth = 1
    with pytest.raises(ValueError, match="threat_depth=1 must be >= 2"):
        search.make_search(envs.make("tictactoe"), None, c)
