"""Elo ladder: the Bradley-Terry fit and elo.json."""

import json
import math
import os
import re
import stat

import numpy as np
import pytest

from az_jax.eval import elo


def _simulate(true: dict, games: int, rng, draw_rate: float = 0.1) -> list[dict]:
    """Round robin between synthetic players with known Elo; draws take a share of the
    expected score so that E[W + D/2] / N is the Elo expectation."""
    names = list(true)
    matches = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            p = elo.expected_score(true[a], true[b])
            d = draw_rate * min(p, 1 - p) * 2
            w = p - d / 2
            counts = rng.multinomial(games, [w, d, 1 - w - d])
            matches.append({"a": a, "b": b, "wins": int(counts[0]), "draws": int(counts[1]),
                            "losses": int(counts[2])})
    return matches


def test_fit_recovers_order_and_gaps():
    rng = np.random.default_rng(0)
    true = {"random": 0.0, "p100": 100.0, "p300": 300.0, "p500": 500.0, "p800": 800.0}
    ratings = elo.fit(_simulate(true, 400, rng))
    assert list(ratings) == ["p800", "p500", "p300", "p100", "random"]  # strongest first
    assert ratings["random"].elo == 0.0 and ratings["random"].stderr == 0.0
    for name, value in true.items():
        r = ratings[name]
        assert abs(r.elo - value) < max(4 * r.stderr, 40), (name, r, value)
        assert r.games == 400 * (len(true) - 1)



def test_two_players_closed_form():
    """One pair has a closed form (no prior on the ratings, the one virtual draw): the gap
    is 400 log10 of the score ratio (W + D/2 + 1/2) / (L + D/2 + 1/2), and its standard
    error 400 / ln 10 / sqrt(n p (1 - p)) with n = games + 1 and p the smoothed score.
    Draws count half to each side, whichever name sorts first."""
    for a, b in (("x", "random"), ("random", "x")):
        if a == "x":
            m = {"a": a, "b": b, "wins": 7, "draws": 2, "losses": 1}
        else:
            m = {"a": a, "b": b, "wins": 1, "draws": 2, "losses": 7}
        r = elo.fit([m], prior_sd=1e9)["x"]
        assert r.elo == pytest.approx(400 * math.log10(8.5 / 2.5), abs=0.05)
        p = 8.5 / 11
        assert r.stderr == pytest.approx(400 / math.log(10) / math.sqrt(11 * p * (1 - p)),
                                         abs=0.05)
        assert elo.fit([dict(m, wins=0, draws=10, losses=0)])["x"].elo == pytest.approx(
            0.0, abs=1e-6)

def test_anchor_and_chain():
    """Players who never met random are rated through the players in between."""
    rng = np.random.default_rng(1)
    true = {"random": 0.0, "a": 200.0, "b": 400.0}
    chain = [m for m in _simulate(true, 600, rng) if {m["a"], m["b"]} != {"random", "b"}]
    ratings = elo.fit(chain)
    assert abs(ratings["a"].elo - 200) < 60 and abs(ratings["b"].elo - 400) < 90
    assert ratings["b"].stderr > ratings["a"].stderr > 0


def test_perfect_record_stays_finite():
    matches = [{"a": "champ", "b": "random", "wins": 64, "draws": 0, "losses": 0}]
    r = elo.fit(matches)
    assert math.isfinite(r["champ"].elo) and 300 < r["champ"].elo < 2000
    more = elo.fit([dict(matches[0], wins=640)])
    assert more["champ"].elo > r["champ"].elo  # more evidence, higher rating


def test_no_anchor_mean_zero_and_self_play_ignored():
    matches = [{"a": "x", "b": "y", "wins": 30, "draws": 0, "losses": 10},
               {"a": "x", "b": "x", "wins": 5, "draws": 0, "losses": 5}]
    r = elo.fit(matches)
    assert abs(r["x"].elo + r["y"].elo) < 1e-6 and r["x"].elo > 0
    assert elo.fit([]) == {}
    with pytest.raises(ValueError):
        elo.fit([{"a": "x", "b": "y", "wins": -1, "draws": 0, "losses": 0}])


def test_record_file(tmp_path):
    ratings = elo.record(tmp_path, [("iter-5/mcts:8", "random", 9, 1, 0)], iteration=5,
                         best="iter-5/mcts:8")
    ratings = elo.record(tmp_path, [("iter-10/mcts:8", "iter-5/mcts:8", 6, 2, 2)],
                         iteration=10, source="evaluate")
    data = json.loads((tmp_path / "elo.json").read_text())
    assert data["format"] == elo.FORMAT and data["best"] == "iter-5/mcts:8"
    assert [m["iteration"] for m in data["matches"]] == [5, 10]
    assert data["matches"][1]["source"] == "evaluate"
    assert set(data["ratings"]) == {"random", "iter-5/mcts:8", "iter-10/mcts:8"}
    assert ratings["iter-10/mcts:8"].elo > ratings["iter-5/mcts:8"].elo > 0
    assert elo.player_iteration("iter-10/mcts:8") == (10, "mcts:8")
    assert elo.player_iteration("random") is None
    assert "iter-10/mcts:8" in elo.format_table(ratings)
    (tmp_path / "elo.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not an az_jax Elo ladder"):
        elo.load(tmp_path)


def test_forget_after_drops_the_training_matches_a_resume_plays_again(tmp_path):
    """A run resumed from iteration 10 plays its iteration-20 evaluation again: the one a
    killed process recorded goes (and its player's rating), the evaluate CLI's stays."""
    elo.record(tmp_path, [("iter-10/mcts:8", "random", 6, 1, 1)], iteration=10)
    elo.record(tmp_path, [("iter-20/mcts:8", "random", 8, 0, 0)], iteration=20)
    elo.record(tmp_path, [("iter-20/mcts:8", "onestep", 3, 0, 1)], iteration=20,
               source="evaluate")
    elo.forget_after(tmp_path, 10)
    data = elo.load(tmp_path)
    assert [(m["a"], m["b"], m["source"]) for m in data["matches"]] == [
        ("iter-10/mcts:8", "random", "train"), ("iter-20/mcts:8", "onestep", "evaluate")]
    # the refit ladder: iter-20 now rests on its 4 games against onestep alone
    assert data["ratings"]["iter-20/mcts:8"]["games"] == 4
    before = (tmp_path / elo.FILENAME).read_text()
    elo.forget_after(tmp_path, 10)  # nothing more to drop: the file is left as it is
    assert (tmp_path / elo.FILENAME).read_text() == before


def test_no_anchor_errors_are_those_of_the_centred_ratings():
    """Without `random` the ratings are centred (mean 0), and their errors must be too: two
    players, 30-0-10. The gap has the error the anchored fit gives the one player rated
    against `random` (hand-worked: 1/sqrt(40 p (1 - p)) with p = 3/4 is 0.365 logistic
    units, 63 Elo); each centred rating is half the gap, so half that error, not the
    ~1000 Elo of the prior's width on their common offset."""
    two = [{"a": "x", "b": "y", "wins": 30, "draws": 0, "losses": 10}]
    centred = elo.fit(two)
    anchored = elo.fit([dict(two[0], b="random")])["x"].stderr
    assert 55 < anchored < 75
    for name in "xy":
        assert centred[name].stderr == pytest.approx(anchored / 2, rel=0.02)


def test_an_evaluation_repeated_with_its_seed_replaces_its_record(tmp_path):
    """`evaluate` run twice with the same --seed plays the same openings with the same keys:
    its matches replace the earlier ones instead of counting the games twice; another seed,
    other players or the trainer's records stay."""
    elo.record(tmp_path, [("iter-5/mcts:8", "random", 9, 1, 0)], iteration=5)
    first = elo.record(tmp_path, [("iter-5/mcts:8", "onestep", 6, 0, 4)], iteration=5,
                       source="evaluate", seed=0)
    again = elo.record(tmp_path, [("iter-5/mcts:8", "onestep", 6, 0, 4)], iteration=5,
                       source="evaluate", seed=0)
    assert again == first  # the same ladder, errors included
    elo.record(tmp_path, [("iter-5/mcts:8", "onestep", 7, 0, 3)], iteration=5,
               source="evaluate", seed=1)
    matches = json.loads((tmp_path / "elo.json").read_text())["matches"]
    assert [(m["b"], m["source"], m.get("seed")) for m in matches] == [
        ("random", "train", None), ("onestep", "evaluate", 0), ("onestep", "evaluate", 1)]


def test_the_same_seed_dealt_otherwise_is_other_games_and_stays(tmp_path):
    """The seed alone does not make the same games: with other --games, --opening-plies,
    --batch-size or another place in --against (each its own `deal`) a match stays beside
    the earlier one; the same deal replaces it, and so does a same-seed match recorded
    before deals were (the old rule)."""
    name, rec = "iter-5/mcts:8", lambda r, deal: elo.record(
        tmp_path, [(name, "onestep", *r)], iteration=5, source="evaluate", seed=0,
        deals=None if deal is None else [deal])
    rec((7, 1, 0), None)  # an older record: no deal
    rec((13, 0, 7), "20 games, 4 opening plies, batch 20, opponent 1")  # replaces it
    rec((5, 0, 3), "8 games, 2 opening plies, batch 8, opponent 1")  # stays beside it
    rec((6, 0, 2), "8 games, 2 opening plies, batch 8, opponent 1")  # replaces that one
    matches = json.loads((tmp_path / "elo.json").read_text())["matches"]
    assert [(m["wins"], m["losses"], m["deal"][:2]) for m in matches] == [
        (13, 7, "20"), (6, 2, "8 ")]
    with pytest.raises(ValueError, match="2 deals for 1 results"):
        elo.record(tmp_path, [(name, "onestep", 1, 0, 0)], seed=0, deals=["a", "b"])


@pytest.mark.parametrize("ladder, why", [
    ({"matches": [{"a": "x", "wins": 1, "draws": 0, "losses": 0}]},
     "match 1 of 1 has b=null, not a player's name"),
    ({"matches": None}, "its matches are null, not a list"),
    ({"anchor": [1]}, "its anchor is [1], not a player's name"),
    ({"best": 3}, "its best is 3, not a player's name"),
    ({"matches": [{"a": "x", "b": "y", "wins": "a", "draws": 0, "losses": 0}]},
     'match 1 of 1 has wins="a", not a count of games'),
    ({"matches": [{"a": "x", "b": "y", "wins": 1, "draws": -1, "losses": 0}]},
     "match 1 of 1 has draws=-1, not a count of games"),
    ({"matches": [{"a": "x", "b": "y", "wins": True, "draws": 0, "losses": 0}]},
     "match 1 of 1 has wins=true, not a count of games"),
    ({"matches": [{"a": "x", "b": "y", "wins": 1, "draws": 0, "losses": 0, "seed": "0"}]},
     'match 1 of 1 has seed="0", not an integer'),
    ({"matches": [{"a": "x", "b": "y", "wins": 1, "draws": 0, "losses": 0, "deal": [1]}]},
     "match 1 of 1 has deal=[1], not a text"),
    ({"matches": ["x" * 50]}, 'match 1 of 1 is "' + "x" * 36 + '..., not an object'),
])
def test_a_damaged_ladder_is_refused_when_read_not_after_the_games(tmp_path, ladder, why):
    """`load` (called before any game) checked the format alone, so a damaged entry
    passed, and the fit after the games raised a KeyError or TypeError: the games lost."""
    (tmp_path / "elo.json").write_text(json.dumps({"format": elo.FORMAT, **ladder}))
    with pytest.raises(ValueError, match=re.escape("elo.json is a damaged Elo ladder: " + why)):
        elo.load(tmp_path)
    with pytest.raises(ValueError, match="damaged Elo ladder"):
        elo.record(tmp_path, [("a", "b", 1, 0, 0)])
    assert json.loads((tmp_path / "elo.json").read_text()) == {"format": elo.FORMAT, **ladder}


def test_one_evaluation_keeps_every_match_it_played_even_of_one_pair(tmp_path):
    """`evaluate --against random,random` plays two matches of one pair, each with its own
    keys: both count (the second replaced the first, 8 games recorded as 4); the same
    call repeated with its seed replaces both."""
    results = [("iter-5/mcts:8", "random", 3, 1, 0), ("iter-5/mcts:8", "random", 4, 0, 0)]
    for _ in range(2):
        ratings = elo.record(tmp_path, results, iteration=5, source="evaluate", seed=0)
        matches = json.loads((tmp_path / "elo.json").read_text())["matches"]
        assert [(m["wins"], m["draws"]) for m in matches] == [(3, 1), (4, 0)]
        assert ratings["random"].games == 8


def test_elo_json_keeps_its_mode_and_no_temporary_file_is_left(tmp_path):
    """A new elo.json gets the umask's mode (not mkstemp's owner-only 0600), a rewrite
    keeps the mode the file had, and a write that fails leaves no temporary file."""
    p = tmp_path / elo.FILENAME
    old = os.umask(0o022)
    try:
        elo.record(tmp_path, [("iter-1/mcts:8", "random", 3, 0, 1)], iteration=1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    p.chmod(0o664)  # e.g. a group that shares the run
    elo.record(tmp_path, [("iter-2/mcts:8", "random", 3, 0, 1)], iteration=2)
    assert stat.S_IMODE(p.stat().st_mode) == 0o664
    before = p.read_text()
    with pytest.raises(TypeError):
        elo._write(tmp_path, {"matches": object()})  # not JSON
    assert p.read_text() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == [elo.FILENAME, elo.FILENAME + ".lock"]


def test_an_old_base_name_of_a_run_elsewhere_stays_a_player_of_its_own(tmp_path):
    """Before `players.run_label`, another run was named by its folder's base name
    wherever it lay, so runs_a/c4 and runs_b/c4 shared one player `c4/...`. Such a name is
    left as written (README, "Elo ladder"): matches keep no path, so an old `c4/...` may
    hold games of any folder named c4, and renaming it to one of them would pin on that
    run games it may never have played. A sibling's name did not change: its old matches
    and its new ones are one player; a run elsewhere gets its new name beside the old
    entry, which keeps its games and gets no new ones."""
    home, sibling, other = (tmp_path / "runs_a" / "big", tmp_path / "runs_a" / "c4",
                            tmp_path / "runs_b" / "c4")
    for folder in (home, sibling, other):
        folder.mkdir(parents=True)
    from az_jax.eval import players

    assert players.run_label(sibling, home) == "c4"
    assert players.run_label(other, home) == "../runs_b/c4"
    old_name = "c4/iter-2/mcts:8"  # written by the old code, for runs_b/c4 or runs_a/c4
    written = {"format": elo.FORMAT, "anchor": "random", "best": None, "ratings": {},
               "matches": [
                   {"a": "iter-3/mcts:8", "b": old_name, "wins": 6, "draws": 0, "losses": 2,
                    "iteration": 3, "source": "evaluate", "time": "2025-01-01T00:00:00+00:00"},
                   {"a": old_name, "b": "random", "wins": 7, "draws": 0, "losses": 1,
                    "iteration": 3, "source": "evaluate", "time": "2025-01-01T00:00:00+00:00"}]}
    elo.path(home).write_text(json.dumps(written))
    assert elo.load(home)["matches"] == written["matches"]  # read as written
    elsewhere = f"{players.run_label(other, home)}/iter-2/mcts:8"
    ratings = elo.record(home, [("iter-3/mcts:8", elsewhere, 5, 0, 3)], source="evaluate")
    assert ratings[old_name].games == 16 and ratings[elsewhere].games == 8
    ratings = elo.record(home, [("iter-3/mcts:8", f"{players.run_label(sibling, home)}"
                                 "/iter-2/mcts:8", 4, 0, 4)], source="evaluate")
    assert ratings[old_name].games == 24 and ratings[elsewhere].games == 8
    assert elo.load(home)["matches"][:2] == written["matches"]
