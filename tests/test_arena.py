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
