"""az_jax/eval: matches, colour alternation, baselines, rollout MCTS, opponents, the evaluator."""

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from az_jax import learner, network, search
from az_jax.eval import evaluator, match, players, solver_bench
from az_jax.eval.match import MatchRunner
from az_jax.eval.players import Player
from tests.tiny import tiny_training

TTT = envs.make("tictactoe")
C4 = envs.make("connect4")
C4_AGENTS = players.PlayerFactory(C4)


def _first_legal(params, states, key):
    del params, key
    return jnp.argmax(states.legal_action_mask, axis=-1).astype(jnp.int32)


def _last_legal(params, states, key):
    del params, key
    n = states.legal_action_mask.shape[-1]
    return (n - 1 - jnp.argmax(states.legal_action_mask[:, ::-1], axis=-1)).astype(jnp.int32)


FIRST = Player("first-legal", "first-legal", _first_legal)
LAST = Player("last-legal", "last-legal", _last_legal)


# ------------------------------------------------------------------ opponent names
@pytest.mark.parametrize("name, kind, sims, ref, workdir", [
    ("random", "random", None, None, None),
    (" onestep ", "onestep", None, None, None),
    ("greedy", "greedy", None, None, None),
    ("mcts:64", "mcts", 64, None, None),
    ("mcts-rollout:800", "mcts-rollout", 800, None, None),
    ("checkpoint:latest", "checkpoint", None, "latest", None),
    ("checkpoint:latest-5", "checkpoint", None, "latest-5", None),
    ("checkpoint:120", "checkpoint", None, "120", None),
    ("checkpoint:runs/c4", "checkpoint", None, "latest", "runs/c4"),
    ("checkpoint:runs/c4@40", "checkpoint", None, "40", "runs/c4"),
])
def test_parse_opponent(name, kind, sims, ref, workdir):
    opp = players.parse_opponent(name)
    assert (opp.kind, opp.simulations, opp.ref, opp.workdir) == (kind, sims, ref, workdir)
    assert ":" not in opp.metric


@pytest.mark.parametrize("name", ["", "alphabeta", "mcts", "mcts:", "mcts:x", "mcts:-1",
                                  "mcts-rollout", "checkpoint:", "checkpoint:runs/c4@last",
                                  "Random"])
def test_parse_opponent_rejects(name):
    with pytest.raises(ValueError, match="accepted forms: random, onestep, greedy, mcts:N"):
        players.parse_opponent(name)
    with pytest.raises(ValueError, match="simulations must be >= 1"):
        players.parse_opponent("mcts-rollout:0")


def test_opponent_names_with_leading_zeros_are_canonical():
    """The opponent "mcts-rollout:0800" is the player that the factory and the ladder call
    "mcts-rollout:800" (its metrics were "mcts-rollout_0800"); digits other than 0-9 are
    no count."""
    opp = players.parse_opponent(" mcts-rollout:0800 ")
    assert (opp.name, opp.metric, opp.simulations) == ("mcts-rollout:800", "mcts-rollout_800",
                                                       800)
    assert players.parse_opponent("mcts:064").name == "mcts:64"
    assert players.PlayerFactory(TTT).build(players.parse_opponent("mcts-rollout:08")).name \
        == "mcts-rollout:8"
    with pytest.raises(ValueError, match="unknown opponent"):
        players.parse_opponent("mcts:\uff16\uff14")  # fullwidth 64


def test_parse_opponents_list():
    names = [o.name for o in players.parse_opponents("random, greedy,,mcts-rollout:8")]
    assert names == ["random", "greedy", "mcts-rollout:8"]


def test_resolve_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        players.resolve_checkpoint(tmp_path, "latest")
    for s in (5, 10, 15, 20):
        (tmp_path / "checkpoints" / str(s)).mkdir(parents=True)
    assert players.resolve_checkpoint(tmp_path, "latest") == 20
    assert players.resolve_checkpoint(tmp_path, "latest-5") == 15
    assert players.resolve_checkpoint(tmp_path, "latest-7") == 10
    assert players.resolve_checkpoint(tmp_path, "10") == 10
    with pytest.raises(FileNotFoundError, match=r"saved: \[5, 10, 15, 20\]"):
        players.resolve_checkpoint(tmp_path, "latest-16")
    with pytest.raises(FileNotFoundError, match="no checkpoint 7"):
        players.resolve_checkpoint(tmp_path, "7")


# ------------------------------------------------------------------ results
def test_wilson_and_gate():
    lo, hi = match.wilson_interval(0.5, 100)
    assert lo < 0.5 < hi and abs((hi - lo) - 0.19) < 0.01
    assert match.wilson_interval(1.0, 20)[1] == 1.0 and match.wilson_interval(1.0, 20)[0] > 0.8

    def res(w, d, losses):
        return match.MatchResult("a", "b", match.WDL(w, d, losses), match.WDL(0, 0, 0))

    assert not match.passes_gate(res(0, 40, 0), 0.55)  # all draws never pass
    assert not match.passes_gate(res(0, 40, 0), 0.4)  # ... whatever the threshold
    assert not match.passes_gate(res(21, 0, 19), 0.55)
    assert match.passes_gate(res(23, 0, 17), 0.55)
    assert match.passes_gate(res(3, 36, 1), 0.5)
    assert not match.passes_gate(res(0, 0, 0), 0.0)


def test_wdl_score_counts_a_draw_as_half_a_win():
    """(W + D/2) / N by hand: 3 wins, 4 draws, 1 loss score (3 + 2) / 8."""
    assert match.WDL(3, 4, 1).score == pytest.approx(0.625)
    assert match.WDL(0, 2, 0).score == pytest.approx(0.5)


def test_gate_is_strict_at_the_threshold():
    """AlphaGo Zero's gate is "more than 55%": 22-0-18 scores exactly 22/40 = 0.55 and
    stays out; 23-0-17 (0.575) gets in."""
    def res(w, d, losses):
        return match.MatchResult("a", "b", match.WDL(w, d, losses), match.WDL(0, 0, 0))

    assert res(22, 0, 18).score == 0.55
    assert not match.passes_gate(res(22, 0, 18), 0.55)
    assert match.passes_gate(res(23, 0, 17), 0.55)


@pytest.mark.parametrize("successes, n, lo, hi", [
    (0, 10, 0.0, 0.2775), (50, 100, 0.4038, 0.5962), (8, 10, 0.4902, 0.9433)])
def test_wilson_interval_matches_the_textbook(successes, n, lo, hi):
    """The Wilson score interval with z = 1.96, as tabulated by Newcombe (1998, Stat. Med.
    17:857, method 3): centre (p + z^2/2n) / (1 + z^2/n)."""
    got = match.wilson_interval(successes / n, n)
    assert got == pytest.approx((lo, hi), abs=1e-4)


# ------------------------------------------------------------------ matches
def test_colours_alternate_exactly():
    """first-legal beats last-legal as X in tic-tac-toe and loses as O: the per-side
    counts prove who moved first in which game."""
    runner = MatchRunner(TTT, 10)
    out = jax.device_get(runner.match_fn(FIRST, LAST)(None, None, jax.random.PRNGKey(0)))
    assert out["a_first"].tolist() == [True] * 5 + [False] * 5
    res = runner.play(FIRST, LAST, jax.random.PRNGKey(0))
    assert res.first == match.WDL(5, 0, 0) and res.second == match.WDL(0, 0, 5)
    assert res.total.games == 10 and res.unfinished == 0 and res.mean_plies == 5
    assert res.as_record() == ("first-legal", "last-legal", 5, 0, 5)


def test_random_opening_is_paired():
    runner = MatchRunner(TTT, 40, opening_plies=2)
    out = jax.device_get(runner.match_fn(FIRST, LAST)(None, None, jax.random.PRNGKey(1)))
    plies = np.asarray(out["plies"])
    assert len(set(plies.tolist())) > 1  # the openings differ between pairs
    res = runner.play(FIRST, LAST, jax.random.PRNGKey(1))
    assert res.first.games == res.second.games == 20

def test_fully_random_games_are_paired_with_colours_swapped():
    """Every ply random (9 opening plies: the players never move): game i and game i + N/2
    are the same game with A's colour swapped, so the same length and opposite outcomes
    for A; and the pairs differ from one another."""
    runner = MatchRunner(TTT, 40, opening_plies=9)
    out = jax.device_get(runner.match_fn(FIRST, LAST)(None, None, jax.random.PRNGKey(2)))
    outcome, plies = np.asarray(out["outcome"]), np.asarray(out["plies"])
    np.testing.assert_array_equal(outcome[:20], -outcome[20:])
    np.testing.assert_array_equal(plies[:20], plies[20:])
    assert set(outcome[:20].tolist()) == {-1.0, 0.0, 1.0}  # X wins, draws and O wins
    assert np.asarray(out["finished"]).all()


def test_match_batches_are_played_with_their_own_keys():
    """40 random-vs-random tic-tac-toe games in 20 calls of 2: each call's key differs
    (fold_in(key, i)), so each colour sees at least two of win/draw/loss (one key for every
    call would repeat one pair of games 20 times: 20-0-0 and its mirror)."""
    rnd = players.PlayerFactory(TTT).random()
    res = MatchRunner(TTT, 40, batch_size=2).play(rnd, rnd, jax.random.PRNGKey(0))
    assert res.first.games == res.second.games == 20
    for side in (res.first, res.second):
        assert sum(x > 0 for x in side) >= 2, res


def test_random_vs_random_is_even():
    runner = MatchRunner(C4, 200)
    res = runner.play(C4_AGENTS.random(), C4_AGENTS.random(), jax.random.PRNGKey(0))
    assert res.first.games == res.second.games == 100
    lo, hi = res.interval()
    assert lo < 0.5 < hi, res
    assert res.first.score > res.second.score - 0.15  # no sign flip between the sides


def test_onestep_beats_random():
    runner = MatchRunner(C4, 200)
    res = runner.play(C4_AGENTS.onestep(), C4_AGENTS.random(), jax.random.PRNGKey(1))
    assert res.score > 0.7 and res.interval()[0] > 0.6, res


@pytest.mark.parametrize("env, a, b, opening", [
    (TTT, FIRST, LAST, 2),
    (C4, C4_AGENTS.onestep(), C4_AGENTS.random(), 3),
    (C4, C4_AGENTS.random(), C4_AGENTS.random(), 0),
])
def test_host_match_plays_the_same_games(env, a, b, opening):
    """The CPU's ply loop over jitted parts and the one-program match: the same keys give
    the same games, game for game."""
    outs = [jax.device_get(MatchRunner(env, 24, opening_plies=opening, host=host)
                           .match_fn(a, b)(None, None, jax.random.PRNGKey(3)))
            for host in (True, False)]
    for k in ("outcome", "a_first", "finished", "plies"):
        np.testing.assert_array_equal(outs[0][k], outs[1][k], err_msg=k)
    assert len(set(np.asarray(outs[0]["plies"]).tolist())) > 1  # not one game repeated


def test_host_match_compiles_each_player_once():
    runner = MatchRunner(C4, 8)
    assert runner.host  # the default on a CPU
    rnd, one = C4_AGENTS.random(), C4_AGENTS.onestep()
    runner.play(one, rnd, jax.random.PRNGKey(0))
    compiled = [f._cache_size() for f in runner._acts.values()]  # (jit's cache is shared
    for a, b in [(one, one), (rnd, one)]:                         # by other tests' runners)
        runner.play(a, b, jax.random.PRNGKey(0))
    assert runner.num_compiled == 3 and sorted(runner._acts) == ["onestep", "random"]
    assert [f._cache_size() for f in runner._acts.values()] == compiled  # nothing new


def test_host_match_compiles_each_part_once_in_its_first_match():
    # A network's search (its parameters placed on the device, and so its moves) against a
    # rule-based player, each move function of its own (jit's cache is its own), and the
    # runner's own parts. The first ply's arrays must be placed as the later plies' are,
    # or each part compiles twice (every search did, until the key and totals were placed).
    s = _setup(False)
    net = players.PlayerFactory(TTT, s.net, s.search)
    me = net.network(network.init_variables(s.net, TTT, jax.random.PRNGKey(0)), "me", 4)
    rnd = players.PlayerFactory(TTT).random()
    plain = Player("plain", "plain", lambda params, states, key: rnd.act(None, states, key))
    runner = MatchRunner(TTT, 8, opening_plies=2)
    runner.play(me, plain, jax.random.PRNGKey(0))
    # and a caller of the match itself, whose key is not placed on the device
    runner.match_fn(me, plain)(jax.device_put(me.params, runner.device), None,
                               jax.random.PRNGKey(1))
    assert {k: f._cache_size() for k, f in runner._acts.items()} == {"mcts:4": 1, "plain": 1}
    parts = ("start", "opening", "select", "merge", "advance", "finish")
    assert {f: getattr(runner._pieces, f)._cache_size() for f in parts} == dict.fromkeys(parts, 1)


def test_a_host_match_stops_at_the_next_ply_when_cancelled():
    import threading

    from az_jax import parallel

    rnd = players.PlayerFactory(TTT).random()
    runner = MatchRunner(TTT, 8, opening_plies=2, host=True)
    cancel = threading.Event()
    plies = []
    runner.play(rnd, rnd, jax.random.PRNGKey(0), cancel=cancel,
                progress=lambda n: plies.append(n))  # not set: the whole match
    assert plies == [8]
    cancel.set()
    with pytest.raises(parallel.Cancelled, match="ply 0"):
        runner.play(rnd, rnd, jax.random.PRNGKey(0), cancel=cancel)


def test_odd_or_tiny_game_counts():
    assert MatchRunner(TTT, 7).num_games == 8
    assert MatchRunner(TTT, 1000, batch_size=300).num_games == 1200
    with pytest.raises(ValueError, match="even"):
        match.make_match(TTT, _first_legal, _last_legal, 5)
    with pytest.raises(ValueError):
        MatchRunner(TTT, 0)


def test_default_ply_cap_is_twice_the_longest_game():
    """Twice the game's own bound: tic-tac-toe's 9 plies, Bagh-Chal's 200-ply move limit,
    and pgx's animal shogi, which pgx ends at 256 plies (its 4x3 board gave a cap of 24,
    and most games of a match ended unfinished, as draws)."""
    assert players.default_max_plies(TTT) == 18
    assert players.default_max_plies(envs.make("baghchal")) == 400
    # A run's selfplay.max_game_length, where it sets one, is the bound its matches take.
    assert players.default_max_plies(envs.make("baghchal"), 150) == 300
    assert players.default_max_plies(TTT, 0) == 18
    pytest.importorskip("pgx")
    assert players.default_max_plies(envs.make("pgx:animal_shogi")) == 512
    # No bound and no board (a flat observation): a generous cap, not a crash (it unpacked
    # the (34,) observation shape into height and width, and every match raised).
    backgammon = envs.make("pgx:backgammon")
    assert backgammon.max_game_length is None and len(backgammon.observation_shape) == 1
    assert players.default_max_plies(backgammon) == players.UNBOUNDED_MAX_PLIES


def test_random_legal_never_plays_an_illegal_action_and_is_uniform():
    """2000 actions of which two are legal, 4000 draws: never an illegal one (a merely low
    logit for them, say -10, would give them 4% of the draws), and each legal one about
    half of the time (binomial: 2000 +- 32 per standard deviation)."""
    mask = jnp.zeros((4000, 2000), bool).at[:, 5].set(True).at[:, 1234].set(True)
    a = np.asarray(jax.jit(players.random_legal)(jax.random.PRNGKey(0), mask))
    assert set(a.tolist()) <= {5, 1234}
    assert abs(int((a == 5).sum()) - 2000) < 130


def test_greedy_plays_the_legal_argmax_of_the_policy():
    """Hand-worked: the highest logit among the legal actions, whatever the illegal ones
    say (a network function that leaves its logits unmasked)."""
    logits = jnp.array([[5.0, 1.0, 3.0, 2.0], [0.0, 4.0, -1.0, 9.0]])
    states = types.SimpleNamespace(
        observation=jnp.zeros((2, 1)),
        legal_action_mask=jnp.array([[False, True, True, True], [True, True, True, False]]))
    act = players.greedy_act(lambda variables, obs, mask: (logits, jnp.zeros(2)))
    assert np.asarray(act(None, states, None)).tolist() == [2, 1]


def test_simulation_counts_up_to_the_maximum_are_accepted():
    from az_jax import MAX_SIMULATIONS

    for kind in ("mcts", "mcts-rollout"):
        assert players.parse_opponent(f"{kind}:{MAX_SIMULATIONS}").simulations == MAX_SIMULATIONS
        with pytest.raises(ValueError, match=f"must be at most {MAX_SIMULATIONS}"):
            players.parse_opponent(f"{kind}:{MAX_SIMULATIONS + 1}")


def test_gauntlet_plays_opponent_i_with_its_own_key(tmp_path):
    """`play_all`: opponent i's match is the runner's match with fold_in(key, i) (as its
    docstring says), a skipped opponent (None) gives None; an unavailable checkpoint is
    None with skip_missing, an error without."""
    from az_jax.eval.gauntlet import Gauntlet

    g = Gauntlet(TTT, 16)
    rnd = players.PlayerFactory(TTT).random()
    key = jax.random.PRNGKey(7)
    got = g.play_all(rnd, [rnd, None, rnd], key)
    assert got[1] is None
    for i in (0, 2):
        want = g.runner.play(rnd, rnd, jax.random.fold_in(key, i))
        assert (got[i].first, got[i].second, got[i].mean_plies) == (
            want.first, want.second, want.mean_plies), i
    assert (got[0].first, got[0].second) != (got[2].first, got[2].second)

    s = _setup(False)
    factory = players.PlayerFactory(TTT, s.net, s.search, str(tmp_path))
    latest = players.parse_opponents("random,checkpoint:latest")
    assert g.resolve(factory, latest, skip_missing=True)[1] is None
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        g.resolve(factory, latest)


def test_other_runs_of_one_folder_name_are_distinct_players(tmp_path, monkeypatch):
    """Another run's network is named by its folder relative to the folder holding this
    run (`players.run_label`): a sibling keeps its folder's name, and runs of the same
    folder name elsewhere (another parent, another depth) are other players, not one Elo
    entry; a relative `checkpoint:` path names the same run as its absolute path."""
    import shutil

    from tests.tiny import make_run

    home = tmp_path / "runs_a" / "main"  # the ladder's run
    home.mkdir(parents=True)
    make_run(tmp_path / "runs_a" / "c4", "tictactoe")
    for other in ("runs_b/c4", "runs_a/old/c4"):  # the same checkpoint, copied
        shutil.copytree(tmp_path / "runs_a" / "c4", tmp_path / other)
    factory = players.PlayerFactory(TTT, net=object(), search=object(), workdir=str(home))

    def name(where):
        return factory.checkpoint(players.parse_opponent(f"checkpoint:{where}@1"), 2).name

    assert [name(tmp_path / d) for d in ("runs_a/c4", "runs_b/c4", "runs_a/old/c4")] == [
        "c4/iter-1/mcts:2", "../runs_b/c4/iter-1/mcts:2", "old/c4/iter-1/mcts:2"]
    monkeypatch.chdir(tmp_path)
    assert name("runs_b/c4") == "../runs_b/c4/iter-1/mcts:2"


def test_network_players_search_in_evaluation_mode():
    """mcts:N searches in evaluation mode: no root noise and no sampled move, so the moves
    of an untrained network do not depend on the key (self-play's noise makes them)."""
    s = _setup(False)
    variables = network.init_variables(s.net, TTT, jax.random.PRNGKey(0))
    act = jax.jit(players.search_act(s.search, 4))
    states = _ttt_states([(), (4,), (0, 4), (0, 4, 8)])
    moves = {tuple(np.asarray(act(variables, states, jax.random.PRNGKey(k))).tolist())
             for k in range(8)}
    assert len(moves) == 1, moves


# ------------------------------------------------------------------ rollout MCTS
def _c4_states(move_lists):
    return solver_bench.states_from_moves(
        C4, [solver_bench.Position(m, 0) for m in move_lists])


# X to move wins at column 5 (1-based) by a vertical four although O threatens one too;
# X to move wins at column 1 or 5 on the bottom row; O to move wins at column 6.
WIN_IN_ONE = [("515151", {4}), ("223344", {0, 4}), ("1626167", {5})]


def test_rollout_mcts_finds_a_win_in_one():
    states = _c4_states([m for m, _ in WIN_IN_ONE])
    assert np.asarray(states.current_player).tolist() == [0, 0, 1]
    key = jax.random.PRNGKey(0)
    actions = np.asarray(jax.jit(players.rollout_mcts_act(C4, 32))(None, states, key))
    for a, (_, wins) in zip(actions, WIN_IN_ONE, strict=True):
        assert int(a) in wins, (actions, WIN_IN_ONE)


def _ttt_states(move_lists):
    states = []
    for moves in move_lists:
        s = TTT.init(jax.random.PRNGKey(0))
        for a in moves:
            s = TTT.step(s, jnp.int32(a))
        states.append(s)
    return jax.tree.map(lambda *x: jnp.stack(x), *states)


# Tic-tac-toe cells 0..8 in reading order. X 0, O 4, X 1: O to move has no win and must
# block at 2. X 0, O 4, X 8, O 1: X has no win (O holds the centre) and must block at 7.
# Every other move loses at once.
MUST_BLOCK = [((0, 4, 1), 2), ((0, 4, 8, 1), 7)]


def test_rollout_mcts_blocks_a_win_in_one():
    """A playout's result must be counted for the player to move at the leaf: with the
    sign the other way round, the moves that let the opponent win look good (measured:
    128 simulations block in 32 of 32 searches, 16 seeds; with the sign flipped 9 of 32;
    at 256 the tree alone finds the block even with the flipped sign)."""
    states = _ttt_states([m for m, _ in MUST_BLOCK])
    assert np.asarray(states.current_player).tolist() == [1, 0]
    act = jax.jit(players.rollout_mcts_act(TTT, 128))
    for seed in range(4):
        actions = np.asarray(act(None, states, jax.random.PRNGKey(seed))).tolist()
        assert actions == [b for _, b in MUST_BLOCK], (seed, actions)


@pytest.mark.slow
def test_rollout_mcts_more_simulations_win():
    runner = MatchRunner(C4, 20)
    res = runner.play(C4_AGENTS.rollout(200), C4_AGENTS.rollout(10), jax.random.PRNGKey(2))
    assert res.score > 0.8 and res.interval()[0] > 0.5, res


# ------------------------------------------------------------------ training evaluator
def _setup(gating: bool):
    from configs import tictactoe

    c = tiny_training(tictactoe.get_config(), eval__num_games=4,
                      eval__opponents="random,checkpoint:latest", eval__gating=gating,
                      eval__gating_threshold=0.55)
    net = network.make_network(c.network, TTT)
    return types.SimpleNamespace(config=c, env=TTT, net=net,
                                 search=search.make_search(TTT, net, c.search))


def _train_state(net, seed):
    variables = network.init_variables(net, TTT, jax.random.PRNGKey(seed))
    return learner.TrainState(step=jnp.int32(0), params=variables["params"],
                              batch_stats=variables.get("batch_stats", {}), opt_state=())


@pytest.mark.slow
def test_training_evaluator(tmp_path):
    setup = _setup(gating=True)
    ev = evaluator.TrainingEvaluator(setup, tmp_path)
    first = _train_state(setup.net, 0)
    best = {"params": first.params, "batch_stats": first.batch_stats}
    seen = []
    for it in (1, 2, 3):
        ts = _train_state(setup.net, it)
        metrics, new_best = ev(ts, best, it, jax.random.PRNGKey(it))
        promoted = bool(metrics["eval/best/promoted"])
        if promoted:  # the best carries its own batch statistics
            assert new_best["params"] is ts.params
            assert new_best["batch_stats"] is ts.batch_stats
        else:
            assert new_best is best
        best = new_best
        seen.append(ev.runner.num_compiled)
        assert {"eval/random/score", "eval/random/win", "eval/best/score", "eval/elo",
                "score"} <= set(metrics)
        assert "eval/checkpoint_latest/score" not in metrics  # nothing saved: skipped
        assert metrics["score"] == metrics["eval/random/score"]
        assert 0 <= metrics["score"] <= 1
    assert seen == [2, 2, 2]  # vs random, vs best: compiled once, reused
    data = json.loads((tmp_path / "elo.json").read_text())
    assert len(data["matches"]) == 6 and data["matches"][0]["b"] == "random"
    assert data["matches"][1]["b"] == "iter-0/mcts:2"
    assert data["best"].startswith("iter-")

    ev.gating = False  # without gating the best is simply the current network
    ts = _train_state(setup.net, 7)
    metrics, new_best = ev(ts, best, 4, jax.random.PRNGKey(4))
    assert new_best["params"] is ts.params and metrics["eval/best/promoted"] == 1.0
    assert ev.runner.num_compiled == 2


def _stubbed_evaluator(tmp_path, monkeypatch, opponents, challenger_wdl, gating=False):
    """A TrainingEvaluator whose matches are not played: the network under test (named
    iter-*) scores `challenger_wdl[opponent name]` as first player, whichever side of the
    match it is given (the other side sees the mirror)."""
    setup = _setup(gating)
    setup.config.eval.opponents = opponents
    ev = evaluator.TrainingEvaluator(setup, tmp_path)
    zero = match.WDL(0, 0, 0)

    def play_many(matches, progress=None, status=None):
        out = []
        for m in matches:
            if m is None:
                out.append(None)
                continue
            a, b, _ = m
            if a.name in challenger_wdl:  # the network under test is B: the mirror
                w = challenger_wdl[a.name]
                out.append(match.MatchResult(a.name, b.name, match.WDL(*w[::-1]), zero))
            else:
                out.append(match.MatchResult(a.name, b.name, match.WDL(*challenger_wdl[b.name]),
                                             zero))
        return out

    monkeypatch.setattr(ev.gauntlet, "play_many", play_many)
    return ev


def _dummy_state(seed):
    """A train state the stubbed matches never read: only its identity matters."""
    return learner.TrainState(step=jnp.int32(0), params={"w": np.full(1, seed)},
                              batch_stats={}, opt_state=())


def _dummy_best():
    return {"params": {"w": np.zeros(1)}, "batch_stats": {}}


def test_evaluator_score_averages_the_fixed_opponents_only(tmp_path, monkeypatch):
    """random (4-0-0: 1.0) and onestep (2-0-2: 0.5) are fixed, greedy (0-0-4: 0.0) is this
    run's own network: score = (1.0 + 0.5) / 2 = 0.75, not the 0.5 of all three (nor with
    the best's 2-0-2 in it)."""
    wdl = {"random": (4, 0, 0), "onestep": (2, 0, 2), "iter-1/greedy": (0, 0, 4),
           "iter-0/mcts:2": (2, 0, 2)}
    ev = _stubbed_evaluator(tmp_path, monkeypatch, "random,onestep,greedy", wdl)
    metrics, _ = ev(_dummy_state(1), _dummy_best(), 1, jax.random.PRNGKey(0))
    assert metrics["eval/random/score"] == 1.0 and metrics["eval/onestep/score"] == 0.5
    assert metrics["eval/greedy/score"] == 0.0
    assert metrics["score"] == pytest.approx(0.75)


def test_evaluator_gates_the_challenger_against_the_best(tmp_path, monkeypatch):
    """The challenger (this iteration's network) plays the best as A: winning 3-0-1 (0.75 >
    0.55) promotes it and the ladder records its win; losing 1-0-3 keeps the best."""
    wdl = {"random": (1, 0, 1), "iter-0/mcts:2": (3, 0, 1)}
    ev = _stubbed_evaluator(tmp_path, monkeypatch, "random", wdl, gating=True)
    ts = _dummy_state(1)
    metrics, new_best = ev(ts, _dummy_best(), 1, jax.random.PRNGKey(0))
    assert metrics["eval/best/promoted"] == 1.0 and metrics["eval/best/score"] == 0.75
    assert new_best["params"] is ts.params
    data = json.loads((tmp_path / "elo.json").read_text())
    last = data["matches"][-1]
    assert (last["a"], last["b"], last["wins"], last["draws"], last["losses"]) == (
        "iter-1/mcts:2", "iter-0/mcts:2", 3, 0, 1)
    assert data["best"] == "iter-1/mcts:2"

    wdl["iter-1/mcts:2"] = (1, 0, 3)  # iteration 2 loses to the new best
    ts2 = _dummy_state(2)
    metrics, kept = ev(ts2, new_best, 2, jax.random.PRNGKey(1))
    assert metrics["eval/best/promoted"] == 0.0 and kept is new_best
    assert json.loads((tmp_path / "elo.json").read_text())["best"] == "iter-1/mcts:2"


def test_evaluator_win_draw_loss_metrics(tmp_path, monkeypatch):
    """1-2-1 against random: win 1/4, draw 2/4, loss 1/4, summing to 1."""
    wdl = {"random": (1, 2, 1), "iter-0/mcts:2": (1, 0, 1)}
    ev = _stubbed_evaluator(tmp_path, monkeypatch, "random", wdl)
    metrics, _ = ev(_dummy_state(1), _dummy_best(), 1, jax.random.PRNGKey(0))
    got = [metrics[f"eval/random/{k}"] for k in ("win", "draw", "loss")]
    assert got == pytest.approx([0.25, 0.5, 0.25]) and sum(got) == pytest.approx(1.0)
    assert metrics["eval/random/score"] == 0.5


def test_unknown_opponent_in_config_fails_early(tmp_path):
    setup = _setup(gating=False)
    setup.config.eval.opponents = "random,minimax"
    with pytest.raises(ValueError, match="unknown opponent 'minimax'"):
        evaluator.TrainingEvaluator(setup, tmp_path)


def test_a_resumed_runs_best_is_named_with_todays_simulations(tmp_path):
    """After a resume the best network plays with the current eval.num_simulations, so its
    ladder name says so (it kept the old count, two strengths under one name)."""
    from az_jax.eval import elo

    setup = _setup(gating=False)
    elo.record(tmp_path, [("iter-5/mcts:64", "random", 9, 1, 0)], iteration=5,
               best="iter-5/mcts:64")
    ev = evaluator.TrainingEvaluator(setup, tmp_path)
    assert ev._first_best_name(10) == f"iter-5/mcts:{setup.config.eval.num_simulations}"
    assert ev._first_best_name(5) == f"iter-0/mcts:{setup.config.eval.num_simulations}"


@pytest.mark.slow
def test_the_best_networks_name_survives_a_kill_between_evaluation_and_save(tmp_path):
    """Evaluations at iterations 1 and 2 (no gating: each network becomes the best), then
    a kill after the second evaluation wrote elo.json and before checkpoint 2: the resumed
    run plays iteration 2 again against the best of checkpoint 1, named `iter-1` as in the
    run never killed (elo.json's best, iter-2, is newer than the checkpoint; the name came
    from there and was `best-before-2`)."""
    import shutil

    from az_jax import trainer
    from configs import tictactoe
    from tests.tiny import tiny_training

    c = tiny_training(tictactoe.get_config(), train__num_iterations=2, eval__every=1,
                      checkpoint__every=1)
    c.eval.opponents, c.eval.max_share = "random", 0.0  # every evaluation runs
    c.search.eval_tactics = "none"
    trainer.train_and_evaluate(c, str(tmp_path))
    sims = c.eval.num_simulations
    against_best = lambda: [(m["iteration"], m["b"]) for m in json.loads(
        (tmp_path / "elo.json").read_text())["matches"] if m["a"].startswith("iter-")
        and m["b"].startswith("iter-")]
    never_killed = against_best()
    assert never_killed == [(1, f"iter-0/mcts:{sims}"), (2, f"iter-1/mcts:{sims}")]
    shutil.rmtree(tmp_path / "checkpoints" / "2")  # killed before this save
    trainer.train_and_evaluate(c, str(tmp_path))
    assert against_best() == never_killed
