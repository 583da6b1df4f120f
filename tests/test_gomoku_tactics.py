"""The Gomoku threat solver (envs/gomoku_tactics.py) against the env's own win check.

Every claim of the solver is replayed through `envs/gomoku.py` (`step` + `rewards`, jitted once
per board size and rule): winning points are exactly the moves that win through the env;
a block leaves the opponent no winning move and every other move leaves him one; an open
four wins against every reply; a VCF wins against every defender reply that does not lose
at once; a defence against an open three leaves the opponent no move that makes two winning
points. Positions: hand-made ones and positions met in random games (fixed seeds).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import gomoku_tactics as gt
from envs.gomoku import Gomoku


@functools.cache
def tools(size: int, rule: str):
    """Env, jitted step, and env-only win checks for one board size and rule."""
    env = Gomoku(size=size, rule=rule)
    actions = jnp.arange(env.num_actions, dtype=jnp.int32)

    def win1(state):  # bool[A]: the mover makes five (through the env) by playing a
        children = jax.vmap(env.step, in_axes=(None, 0))(state, actions)
        won = children.rewards[:, state.current_player] > 0
        return won & state.legal_action_mask & ~state.done

    def replies(state):  # for each move m: does m win, and can the opponent win after it
        children = jax.vmap(env.step, in_axes=(None, 0))(state, actions)
        return win1(state), jax.vmap(win1)(children)  # [A], [A, A]

    def open_fours(state):  # for each move f of the mover: his winning points after f [A]
        children = jax.vmap(env.step, in_axes=(None, 0))(state, actions)
        swapped = children.replace(current_player=state.current_player + 0 * actions)
        count = jax.vmap(win1)(swapped).sum(axis=1)
        won = children.rewards[:, state.current_player] > 0
        return jnp.where(state.legal_action_mask & ~won, count, jnp.where(won, 99, 0))

    return (env, jax.jit(env.step), jax.jit(env.init), jax.jit(win1), jax.jit(replies),
            jax.jit(open_fours))


def state_of(moves, size, rule):
    _, step, init, *_ = tools(size, rule)
    state = init(jax.random.PRNGKey(0))
    for a in moves:
        state = step(state, jnp.int32(a))
    assert not bool(state.done), "test positions must be unfinished"
    return state


def board_of(state, size):
    return np.asarray(state.game.board).reshape(size, size)


def flat(mask):
    return set(np.flatnonzero(mask).tolist())


def swap_side(state):
    """The same board with the other player to move (for the opponent's winning points)."""
    return state.replace(current_player=1 - state.current_player)


def random_positions(size, rule, seed, want, max_games=400, window=None):
    """Positions met in random games (uniform moves, optionally inside a central window so
    that lines form), with their solver category: {category: [moves, ...]}.

    A game stops as soon as a move makes five (checked with the solver's winning points,
    which test_winning_points_match_env checks against the env)."""
    rng = np.random.default_rng(seed)
    found: dict[str, list] = {c: [] for c in want}
    lo, hi = (0, size) if window is None else ((size - window) // 2, (size + window) // 2)
    cells = [r * size + c for r in range(lo, hi) for c in range(lo, hi)]
    for _ in range(max_games):
        if all(len(found[c]) >= k for c, k in want.items()):
            break
        order = rng.permutation(cells)
        board = np.full((size, size), gt.EMPTY, np.int8)
        moves = []
        for a in order:
            player = len(moves) % 2
            tactic = gt.classify(board, player, rule)
            if tactic is not None and tactic.category in want:
                if len(found[tactic.category]) < want[tactic.category] and rng.random() < 0.5:
                    found[tactic.category].append(list(moves))
            if gt.winning_points(board, player, rule).flat[a]:
                break
            board.flat[a] = player
            moves.append(int(a))
    return found


# ------------------------------------------------------------------ hand-made positions
def alternate(black, white):
    moves = [m for pair in zip(black, white, strict=False) for m in pair]
    return moves + list(black[len(white):])


def test_hand_made_fours_and_overlines():
    n = 15
    a = lambda r, c: r * n + c  # noqa: E731
    # Black X X X . X X on row 7 (cols 2-4, 6-7): col 5 makes six.
    black = [a(7, 2), a(7, 3), a(7, 4), a(7, 6), a(7, 7)]
    white = [a(0, 0), a(0, 2), a(0, 4), a(0, 6), a(14, 14)]
    moves = alternate(black, white)  # black to move
    free = state_of(moves, n, "freestyle")
    std = state_of(moves, n, "standard")
    board, player = gt.board_from_moves(moves, n)
    assert player == 0
    assert flat(gt.winning_points(board, 0, "freestyle")) == {a(7, 5)}
    assert flat(gt.winning_points(board, 0, "standard")) == set()
    assert flat(tools(n, "freestyle")[3](free)) == {a(7, 5)}
    assert flat(tools(n, "standard")[3](std)) == set()
    # Open three for black on row 7 (cols 5-7): open-four moves at cols 4 and 8, the same
    # two points are white's defences.
    black = [a(7, 5), a(7, 6), a(7, 7)]
    white = [a(0, 0), a(0, 2), a(14, 14)]
    board, player = gt.board_from_moves(alternate(black, white), n)
    t = gt.classify(board, player)
    assert t.category == "open_four_win" and flat(t.answers) == {a(7, 4), a(7, 8)}
    t = gt.classify(board, 1)
    assert t.category == "block_open_three" and flat(t.answers) == {a(7, 4), a(7, 8)}
    # A broken three X X . X has three defences: the gap and both ends.
    black = [a(7, 5), a(7, 6), a(7, 8)]
    board, _ = gt.board_from_moves(alternate(black, white), n)
    t = gt.classify(board, 1)
    assert t.category == "block_open_three"
    assert flat(t.answers) == {a(7, 4), a(7, 7), a(7, 9)}


def test_hand_made_vcf():
    """A four forcing the reply, then an open four: a VCF of 3 moves, and no faster win."""
    n = 15
    a = lambda r, c: r * n + c  # noqa: E731
    # Black: a closed three on row 7 (white at col 3) and two stones on column 7 below.
    # Playing row 7 col 7 makes a four (forced block at col 8), and that stone also gives
    # column 7 three in a row with room on both sides: an open four next.
    black = [a(7, 4), a(7, 5), a(7, 6), a(8, 7), a(9, 7)]
    white = [a(7, 3), a(0, 0), a(0, 14), a(14, 0), a(14, 14)]
    moves = alternate(black, white)
    board, player = gt.board_from_moves(moves, n)
    t = gt.classify(board, player)
    assert t.category == "vcf3"
    assert a(7, 7) in flat(t.answers)
    assert_vcf_wins(moves, n, "freestyle", t.answers, budget=3)


# ------------------------------------------------------------------ env agreement
@pytest.mark.parametrize("size, rule", [(9, "freestyle"), (9, "standard"), (15, "freestyle")])
def test_winning_points_match_env(size, rule):
    """For both players, the solver's winning points are exactly the env's winning moves."""
    _, _, _, win1, *_ = tools(size, rule)
    rng = np.random.default_rng(size)
    checked = with_wins = 0
    for _ in range(40):
        k = int(rng.integers(8, size * size // 2))
        order = rng.permutation(size * size)
        moves = []
        board = np.full((size, size), gt.EMPTY, np.int8)
        for a in order[:k]:  # stop before a five is made
            if gt.winning_points(board, len(moves) % 2, rule).flat[a]:
                break
            board.flat[a] = len(moves) % 2
            moves.append(int(a))
        state = state_of(moves, size, rule)
        board, player = gt.board_from_moves(moves, size)
        for side, st in ((player, state), (1 - player, swap_side(state))):
            ours = flat(gt.winning_points(board, side, rule))
            assert ours == flat(win1(st)), (moves, side)
            with_wins += bool(ours)
        checked += 1
    assert with_wins >= 5, "the random positions should contain some fours"


@functools.cache
def sample(size, rule):
    want = {c: 3 for c in gt.CATEGORIES}
    return random_positions(size, rule, seed=size + len(rule), want=want,
                            window=7 if size > 9 else None)


@pytest.mark.parametrize("size, rule", [(9, "freestyle"), (9, "standard"), (15, "freestyle")])
def test_block_four_is_the_only_move_that_stops_the_five(size, rule):
    _, _, _, _, replies, _ = tools(size, rule)
    positions = sample(size, rule)["block_four"]
    assert positions
    for moves in positions:
        board, player = gt.board_from_moves(moves, size)
        t = gt.classify(board, player, rule)
        assert t.category == "block_four"
        state = state_of(moves, size, rule)
        win_now, opp_wins_after = (np.asarray(x) for x in replies(state))
        assert not win_now.any()
        legal = np.asarray(state.legal_action_mask)
        safe = legal & ~opp_wins_after.any(axis=1)  # moves after which he cannot win
        assert flat(safe) == flat(t.answers), moves


def wins_in_two(state, move, size, rule) -> bool:
    """Through the env only: `move` wins at once, or every reply leaves the mover a win."""
    _, step, _, _, replies, _ = tools(size, rule)
    child = step(state, jnp.int32(move))
    if bool(child.terminated):
        return bool(child.rewards[state.current_player] > 0)
    opp_wins, my_wins_after = (np.asarray(x) for x in replies(child))
    legal = np.asarray(child.legal_action_mask)
    return bool(not (legal & opp_wins).any()
                and my_wins_after[legal & ~opp_wins].any(axis=1).all())


@pytest.mark.parametrize("size, rule", [(9, "freestyle"), (9, "standard"), (15, "freestyle")])
def test_open_four_win_is_exactly_the_win_in_two(size, rule):
    positions = sample(size, rule)["open_four_win"]
    assert positions
    rng = np.random.default_rng(1)
    for moves in positions[:2]:
        board, player = gt.board_from_moves(moves, size)
        t = gt.classify(board, player, rule)
        assert t.category == "open_four_win"
        state = state_of(moves, size, rule)
        for m in flat(t.answers):
            assert wins_in_two(state, m, size, rule), (moves, m)
        # Every other move: all on 9x9, the fours and a sample on 15x15.
        others = np.flatnonzero((board == gt.EMPTY) & ~t.answers)
        if size > 9:
            fours = np.flatnonzero(gt.four_moves(board, player, rule) & ~t.answers)
            others = np.union1d(fours, rng.choice(others, 12, replace=False))
        for m in others:
            assert not wins_in_two(state, int(m), size, rule), (moves, int(m))


def assert_vcf_wins(moves, size, rule, answers, budget):
    """Each claimed first move wins by fours within `budget` moves against every defender
    reply that does not lose at once (played through the env; the solver only picks the
    attacker's next four)."""
    _, step, _, _, replies, _ = tools(size, rule)

    def holds(state, move, k):
        attacker = int(state.current_player)
        child = step(state, jnp.int32(move))
        if bool(child.terminated):
            return bool(child.rewards[attacker] > 0)
        if k == 1:
            return False
        opp_wins, my_wins_after = (np.asarray(x) for x in replies(child))
        legal = np.asarray(child.legal_action_mask)
        if (legal & opp_wins).any():
            return False  # the defender makes five
        survivors = np.flatnonzero(legal & ~my_wins_after.any(axis=1))
        assert len(survivors) <= 1, "a four leaves the defender one reply"
        for r in survivors:  # replies that do not lose at once
            grand = step(child, jnp.int32(r))
            nxt = gt.vcf_moves(board_of(grand, size), attacker, k - 1, rule)
            if not nxt.any() or not holds(grand, int(np.flatnonzero(nxt)[0]), k - 1):
                return False
        return True

    state = state_of(moves, size, rule)
    assert flat(answers)
    for m in flat(answers):
        assert holds(state, m, budget), (moves, m)


@pytest.mark.parametrize("size, rule", [(9, "freestyle"), (9, "standard"), (15, "freestyle")])
def test_vcf3_wins_against_every_defence_and_is_not_faster(size, rule):
    positions = sample(size, rule)["vcf3"]
    assert positions, "no vcf3 position met in the random games"
    for moves in positions[:2]:
        board, player = gt.board_from_moves(moves, size)
        t = gt.classify(board, player, rule)
        assert t.category == "vcf3"
        assert_vcf_wins(moves, size, rule, t.answers, budget=3)
        state = state_of(moves, size, rule)
        # None shorter: no five now, and no four-making move wins in two (only a four can:
        # otherwise the opponent blocks freely).
        assert not np.asarray(tools(size, rule)[3](state)).any()
        for m in np.flatnonzero(gt.four_moves(board, player, rule)):
            assert not wins_in_two(state, int(m), size, rule), (moves, int(m))


@pytest.mark.parametrize("size, rule", [(9, "freestyle"), (15, "freestyle")])
def test_open_three_defences_leave_no_open_four(size, rule):
    """After a defence the opponent has no move that makes two env-winning moves; after
    any other move (checked: all on 9x9, a sample on 15x15) he has one."""
    _, step, _, _, _, open_fours = tools(size, rule)
    positions = sample(size, rule)["block_open_three"]
    assert positions
    rng = np.random.default_rng(2)

    def opponent_can_open_four(state, m):
        child = step(state, jnp.int32(m))
        assert not bool(child.terminated)
        return int(np.asarray(open_fours(child)).max()) >= 2

    for moves in positions[:1]:
        board, player = gt.board_from_moves(moves, size)
        t = gt.classify(board, player, rule)
        assert t.category == "block_open_three"
        state = state_of(moves, size, rule)
        for d in flat(t.answers):
            assert not opponent_can_open_four(state, d), (moves, d)
        others = np.flatnonzero((board == gt.EMPTY) & ~t.answers)
        for m in rng.choice(others, min(len(others), 6), replace=False):
            assert opponent_can_open_four(state, int(m)), (moves, int(m))


@pytest.mark.parametrize(("moves", "fours"), [
    # Once in the shipped 9x9 suite as block_open_three.
    ([32, 22, 62, 79, 19, 6, 47, 25, 77, 16, 10, 48, 14, 80, 26, 8, 7, 42, 40, 31, 43, 54,
      56, 17, 34, 57, 74, 68, 18, 44, 21, 66, 52, 60], 4),
    # From `clustered_games(9, 200, 50, seed=1)`: a VCF of exactly `DEFENCE_VCF_MOVES`.
    ([40, 60, 52, 53, 57, 30, 51, 59, 13, 65, 54, 73, 64, 32, 14, 71, 46, 63, 68, 44, 16,
      36, 76, 15, 79, 10, 50, 41], 5),
], ids=["four fours", "five fours"])
def test_a_longer_vcf_is_not_labelled_a_defence(moves, fours):
    """Positions where the opponent has an open three (with defences to label) and the
    mover a VCF of `fours` fours and none shorter: its first moves win through the env
    against every reply, so defending is not the answer and `classify` gives no
    category."""
    board, player = gt.board_from_moves(moves, 9)
    threats, defences = gt.open_three_defences(board, player)
    assert threats.any() and defences.any()
    assert not gt.vcf_moves(board, player, fours - 1).any()
    vcf = gt.vcf_moves(board, player, fours)
    assert_vcf_wins(moves, 9, "freestyle", vcf, budget=fours)
    assert gt.classify(board, player) is None


@pytest.mark.parametrize(("moves", "kept"), [
    # Once in the shipped 9x9 suite as block_open_three with answers 10, 37 and 46.
    ([40, 47, 55, 30, 29, 18, 19, 2, 13, 67, 68, 69, 76, 4, 1, 74, 28], [37]),
    # Once there with answers 39 and 43: a lost position, whatever stops the three.
    ([40, 59, 41, 22, 23, 11, 47, 32, 13, 14, 61, 66, 42], []),
], ids=["two of three stops lose", "every stop loses"])
def test_a_stop_of_an_open_three_that_leaves_him_a_vcf_is_no_answer(moves, kept):
    """The opponent has an open three; some moves stop it (no open-four move left to
    him) but leave him a VCF, which wins through the env against every reply: those are
    no answers, and where no stop is left the position gets no category."""
    board, player = gt.board_from_moves(moves, 9)
    threats, stops = gt.open_three_defences(board, player)
    assert threats.any() and set(kept) < flat(stops)
    for m in flat(stops) - set(kept):
        his = gt.vcf_moves(gt._with(board, m, player), 1 - player, gt.DEFENCE_VCF_MOVES)
        assert_vcf_wins([*moves, m], 9, "freestyle", his, budget=gt.DEFENCE_VCF_MOVES)
    t = gt.classify(board, player)
    if kept:
        assert t.category == "block_open_three" and flat(t.answers) == set(kept)
    else:
        assert t is None


def test_canonical_key_under_the_8_symmetries():
    rng = np.random.default_rng(3)
    board, player = gt.board_from_moves(rng.permutation(81)[:20], 9)
    keys = set()
    for k in range(4):
        for flip in (False, True):
            img = np.rot90(board, k)
            keys.add(gt.canonical_key(np.fliplr(img) if flip else img, player))
    assert len(keys) == 1
    other = board.copy()
    other.flat[np.flatnonzero(board == gt.EMPTY)[0]] = 0
    assert gt.canonical_key(other, player) not in keys
    assert gt.canonical_key(board, 1 - player) not in keys


def test_bad_input():
    with pytest.raises(ValueError, match="occupied"):
        gt.board_from_moves([3, 3], 9)
    with pytest.raises(ValueError, match="off the"):
        gt.board_from_moves([81], 9)
    with pytest.raises(ValueError, match="rule"):
        gt.winning_points(np.full((9, 9), -1, np.int8), 0, "renju")
