"""`python -m az_jax.web`: the JSON API against bad requests, many games at once, and a real
game clicked in headless Chromium (playwright) up to the win/lose message.

The server runs in a thread of this process on a free port of 127.0.0.1, serving a tiny
untrained Connect4 network (see tests/test_play.py for why untrained).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import types
import urllib.error
import urllib.request
from pathlib import Path

import jax
import numpy as np
import pytest

import envs
from az_jax import agent as agent_lib
from az_jax import web
from az_jax.web import geometry
from tests.tiny import make_run

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SIMS = 4


@contextlib.contextmanager
def serving(run, sims: int = SIMS):
    """A server for the model of `run` on a free port, in a thread of this process."""
    agent = agent_lib.Agent.load(workdir=run, num_simulations=sims)
    agent.warmup()
    srv = web.make_server(agent, "127.0.0.1", 0, sims=sims, max_sims=64, max_games=50)
    thread = web.serve_in_thread(srv)
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(make_run(tmp_path_factory.mktemp("web") / "c4", "connect4")) as srv:
        yield srv


def set_position(server, game_id: str, moves: list[str]) -> None:
    """Replays `moves` into a game (no search statistics for them)."""
    games = server.games
    game = games._games[game_id]
    game.states, game.actions, game.analyses, game.hint = [games.agent.new_game()], [], [], None
    for text in moves:
        games._push(game, games.env.parse_action(text, game.states[-1]), None)


def call(server, path: str, body=None, method: str | None = None, raw: bytes | None = None,
         headers: dict | None = None):
    """(status, JSON) of one request; errors are answers too."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(server.url.rstrip("/") + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def new_game(server, **body):
    status, game = call(server, "/api/new", body)
    assert status == 200, game
    return game


# ---------------------------------------------------------------------- geometry
def test_geometry_of_every_game():
    ttt = geometry.describe(envs.make("tictactoe"))
    assert (ttt["kind"], ttt["rows"], ttt["cols"]) == ("grid", 3, 3)
    assert ttt["action_to"] == list(range(9)) and set(ttt["action_from"]) == {-1}

    g15 = geometry.describe(envs.make("gomoku", size=15))
    assert g15["kind"] == "gomoku" and g15["num_actions"] == 225
    assert g15["star_points"] == sorted([3 * 15 + 3, 3 * 15 + 11, 7 * 15 + 7, 11 * 15 + 3,
                                         11 * 15 + 11])
    assert g15["col_labels"][:9] == list("ABCDEFGHI")  # I included, as the env's notation
    assert g15["row_labels"] == [str(15 - r) for r in range(15)]  # A15 is the top left
    # Go's star points: 4-4 on 13x13 (and the centre), 3-3 below that.
    assert geometry.star_points(13) == sorted([3 * 13 + 3, 3 * 13 + 9, 6 * 13 + 6,
                                               9 * 13 + 3, 9 * 13 + 9])
    assert geometry.star_points(9) == sorted([2 * 9 + 2, 2 * 9 + 6, 4 * 9 + 4, 6 * 9 + 2,
                                              6 * 9 + 6])

    c4 = geometry.describe(envs.make("connect4"))
    assert (c4["kind"], c4["rows"], c4["cols"]) == ("connect4", 6, 7)
    assert c4["col_labels"] == [str(c) for c in range(1, 8)]

    env = envs.make("baghchal")
    bc = geometry.describe(env)
    assert bc["kind"] == "baghchal" and len(bc["action_to"]) == 425
    lines = {tuple(sorted(seg)) for seg in bc["lines"]}
    assert (0, 6) in lines  # A5-B4: a diagonal through an even point
    assert (1, 7) not in lines  # B5-C4: no diagonal through an odd point
    assert len(lines) == 40 + 16  # 40 orthogonal + 16 diagonal segments
    for text, (src, dst) in {"C3": (-1, 12), "A1-B2": (20, 16), "A1-C3": (20, 12),
                             "E5-E4": (4, 9)}.items():
        a = env.parse_action(text)
        assert (bc["action_from"][a], bc["action_to"][a]) == (src, dst), text
    state = env.init(None)
    assert geometry.board(env, state) == [1, -1, -1, -1, 1] + [-1] * 15 + [1, -1, -1, -1, 1]
    assert geometry.extra(env, state) == {"goats_in_hand": 20, "captured": 0}


# ---------------------------------------------------------------------- API
def test_info_and_pages(server):
    status, info = call(server, "/api/info")
    assert status == 200
    assert info["env"]["id"] == "connect4" and info["sides"] == ["X", "O"]
    assert info["geometry"]["kind"] == "connect4" and info["sims"]["default"] == SIMS
    # The page's choices: the standard sizes up to --max-sims (64 here), and the default.
    assert info["sims"] == {"default": SIMS, "max": 64, "choices": [SIMS, 8, 32, 64]}
    for path, ctype in [("/", "text/html"), ("/static/app.js", "text/javascript"),
                        ("/static/style.css", "text/css")]:
        with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=30) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith(ctype)
            assert len(r.read()) > 500


def test_a_game_over_the_api(server):
    game = new_game(server, human="second", sims=SIMS)  # the AI (X) has moved already
    assert game["human"] == 1 and len(game["moves"]) == 1 and game["your_turn"]
    assert not game["can_undo"]  # you have not moved yet: Undo is off
    analysis = game["analysis"]
    assert analysis["player"] == 0 and sum(analysis["visits"]) > 0
    # The per-move numbers are the search's policy, named; the value is the chosen move's Q.
    assert analysis["weight_label"] == "improved policy"  # the default Gumbel search
    assert sum(analysis["weights"]) == pytest.approx(1.0, abs=1e-3)
    for c in analysis["top"]:
        assert c["weight"] == pytest.approx(analysis["weights"][c["action"]], abs=1e-4)
    chosen = [c for c in analysis["top"] if c["action"] == analysis["action"]]
    assert chosen and chosen[0]["value"] == pytest.approx(analysis["value"], abs=1e-4)
    assert game["estimate"]["you"] == pytest.approx(1 - analysis["win_rate"], abs=1e-4)
    # The first stone lands on the bottom row (cells 35-41, row 5 from the top).
    assert game["last"]["player"] == 0 and game["last"]["to"] == 35 + game["last"]["action"]
    gid = game["game_id"]
    status, after = call(server, "/api/move", {"game_id": gid, "move": "4"})
    assert status == 200 and after["moves"][1] == "4" and len(after["moves"]) == 3
    status, same = call(server, f"/api/game?id={gid}")
    assert status == 200 and same["moves"] == after["moves"]
    status, hinted = call(server, "/api/hint", {"game_id": gid})
    assert status == 200 and hinted["hint"]["player"] == 1
    assert after["can_undo"]
    status, undone = call(server, "/api/undo", {"game_id": gid})
    assert status == 200 and undone["moves"] == game["moves"] and undone["hint"] is None
    assert not undone["can_undo"]
    status, err = call(server, "/api/undo", {"game_id": gid})
    assert status == 409 and "nothing to undo" in err["error"]
    # Play the first legal column until the game ends: then moves are refused.
    state = undone
    while not state["over"]:
        status, state = call(server, "/api/move", {"game_id": gid, "action": state["legal"][0]})
        assert status == 200, state
    assert state["result"] in ("win", "loss", "draw") and state["message"]
    assert state["estimate"]["final"] and state["end"]["reason"] in state["message"]
    you = {"win": 1.0, "loss": 0.0, "draw": 0.5}[state["result"]]
    assert state["estimate"]["you"] == you  # the bar shows the result, not a stale estimate
    status, err = call(server, "/api/move", {"game_id": gid, "action": 0})
    assert status == 409 and "game is over" in err["error"]


BAD = {
    "bad json": ("/api/move", None, b"{not json", 400, "not valid JSON"),
    "not an object": ("/api/new", None, b"[1, 2]", 400, "JSON object"),
    "not utf-8": ("/api/new", None, b"\xff\xfe", 400, "not valid JSON"),
    "no game id": ("/api/move", {"action": 3}, None, 400, "game_id"),
    "unknown game": ("/api/move", {"game_id": "nope", "action": 3}, None, 404,
                     "unknown game id"),
    "bad side": ("/api/new", {"human": "purple"}, None, 400, "unknown side"),
    "side out of range": ("/api/new", {"human": 2}, None, 400, "0 or 1"),
    "too many sims": ("/api/new", {"sims": 10_000}, None, 400, "sims must be"),
    "sims not int": ("/api/new", {"sims": "many"}, None, 400, "sims must be"),
    "zero sims": ("/api/new", {"sims": 0}, None, 400, "sims must be"),
    "sims a bool": ("/api/new", {"sims": True}, None, 400, "sims must be"),
    "side a bool": ("/api/new", {"human": True}, None, 400, "human must be"),
    "unknown path": ("/api/nope", {}, None, 404, "no such page"),
    "path traversal": ("/static/../server.py", None, None, 404, "no such"),
    "unknown static": ("/static/secret.txt", None, None, 404, "no such file"),
    "game without id": ("/api/game", None, None, 400, "/api/game?id="),
    "game with an empty id": ("/api/game?id=", None, None, 400, "id is empty: give the game "
                                                                "as /api/game?id="),
    "side a number as text": ("/api/new", {"human": "2"}, None, 400, "not in quotes"),
}


def test_a_kept_game_holds_numpy_copies_not_device_buffers(server):
    """What a game keeps between requests (`max_games` of them): states and the AI's
    per-move numbers as numpy arrays that own their data (a JAX array, or a view of one,
    keeps its whole device buffer: about 28 KB a ply then, 5 KB now, on a 15x15 board);
    the API still sends them as JSON lists."""
    game = new_game(server, human="second", sims=SIMS)
    status, after = call(server, "/api/move", {"game_id": game["game_id"], "move": "4"})
    assert status == 200
    kept = server.games._games[game["game_id"]]
    leaves = jax.tree.leaves(kept.states)
    assert len(kept.states) == 4 and leaves
    assert all(type(x) is np.ndarray and x.flags.owndata for x in leaves), \
        {type(x).__name__ for x in leaves}
    analysis = kept.analyses[-1]
    assert analysis["visits"].dtype == np.int32 and analysis["weights"].dtype == np.float32
    sent = after["analysis"]
    assert sent["visits"] == analysis["visits"].tolist() and len(sent["weights"]) == 7
    assert all(type(w) is float for w in sent["weights"])
    assert json.loads(json.dumps(sent)) == sent


@pytest.mark.parametrize("name", list(BAD))
def test_bad_requests_get_4xx_json(server, name):
    path, body, raw, code, text = BAD[name]
    status, err = call(server, path, body, raw=raw)
    assert status == code and text in err["error"], (status, err)


def test_an_empty_body_takes_the_defaults(server):
    status, game = call(server, "/api/new", raw=b"")  # e.g. curl -X POST .../api/new
    assert status == 200 and game["human"] == 0 and game["moves"] == [], game
    assert game["sims"] == SIMS and game["your_turn"]


def test_human_as_a_number_in_quotes_is_refused(server):
    """{"human": "1"} was read as the CLI's "1" (the first side, 0) while {"human": 1} is
    the second side: a number in quotes is ambiguous, so it is refused, saying how to give
    it; the numbers and names work."""
    for human in (0, 1):
        assert new_game(server, human=human, sims=SIMS)["human"] == human
        status, err = call(server, "/api/new", {"human": str(human), "sims": SIMS})
        assert status == 400 and "not in quotes" in err["error"], err
    assert new_game(server, human="second", sims=SIMS)["human"] == 1


def test_a_refused_request_leaves_the_game_as_it_was(server):
    """sims is the game's only once the move or hint is accepted (a 400 for a bad move, or
    a 409 after the end, used to keep the new sims); `action` and `move` together are
    refused rather than playing `action`."""
    gid = new_game(server, human=0, sims=SIMS)["game_id"]
    for body, code, text in [({"move": "Z9", "sims": 8}, 400, "illegal move"),
                             ({"action": 3, "move": "5", "sims": 8}, 400, "not both"),
                             ({"move": "4", "sims": 0}, 400, "sims must be")]:
        status, err = call(server, "/api/move", {"game_id": gid, **body})
        assert status == code and text in err["error"], (body, err)
        status, game = call(server, f"/api/game?id={gid}")
        assert status == 200 and game["sims"] == SIMS and game["moves"] == [], (body, game)
    state = new_game(server, human=0, sims=SIMS)
    set_position(server, state["game_id"], ["1", "2", "1", "2", "1", "2", "1"])  # X won
    for path in ("/api/move", "/api/hint"):
        status, err = call(server, path, {"game_id": state["game_id"], "action": 3,
                                          "sims": 16})
        assert status == 409, err
        status, game = call(server, f"/api/game?id={state['game_id']}")
        assert game["over"] and game["sims"] == SIMS, (path, game)


def test_many_sims_values_compile_no_more_programs_than_the_choices(server):
    """Each distinct `sims` compiled (and kept) one more search program: a client could make
    a server compile without end. Requests now snap down to /api/info's choices (here 4, 8,
    32, 64), the answer says which count was used, and the compiled programs stay at most
    one per choice."""
    choices = call(server, "/api/info")[1]["sims"]["choices"]
    assert choices == [SIMS, 8, 32, 64]
    for asked in (5, 6, 7, 9, 10, 12, 15, 31):
        game = new_game(server, human="second", sims=asked)  # the AI searches at once
        used = max(c for c in choices if c <= asked)
        assert game["sims"] == used and game["analysis"]["simulations"] == used, (asked, game)
    game = new_game(server, human=0, sims=1)  # below the smallest choice: the smallest
    assert game["sims"] == SIMS
    status, hint = call(server, "/api/hint", {"game_id": game["game_id"], "sims": 63})
    assert status == 200 and hint["sims"] == 32 and hint["hint"]["simulations"] == 32, hint
    assert server.games.agent._think_jit._cache_size() <= len(choices)


def test_illegal_moves_say_why(server):
    gid = new_game(server)["game_id"]
    for body, text in [({"move": "9"}, "expected a column number 1-7"),
                       ({"action": 7}, "out of range"), ({"action": -1}, "out of range"),
                       ({"action": True}, "integer"),
                       ({"action": "3"}, "integer"), ({}, "give the move"),
                       ({"move": 5}, "short string")]:
        status, err = call(server, "/api/move", {"game_id": gid, **body})
        assert status == 400 and text in err["error"], (body, err)
    state = new_game(server, human=0)
    while 0 in state["legal"] and not state["over"]:  # fill column 1
        state = call(server, "/api/move", {"game_id": state["game_id"], "action": 0})[1]
    if not state["over"]:
        status, err = call(server, "/api/move", {"game_id": state["game_id"], "action": 0})
        assert status == 400 and "column 1 is full" in err["error"]


def test_wrong_methods_and_headers(server):
    for method, path in [("GET", "/api/move"), ("PUT", "/api/new"), ("DELETE", "/api/info"),
                         ("POST", "/api/info"), ("PATCH", "/")]:
        status, err = call(server, path, {} if method != "GET" else None, method=method)
        assert status == 405 and "error" in err, (method, path, err)
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.putrequest("BREW", "/api/new")  # an unknown method: 405 as JSON too
    conn.endheaders()
    r = conn.getresponse()
    assert r.status == 405 and "error" in json.loads(r.read())
    conn.close()
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", "/api/new", body=b"x" * (web.server.MAX_BODY + 1))
    r = conn.getresponse()
    assert r.status == 413 and "too large" in json.loads(r.read())["error"]
    conn.close()
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.putrequest("POST", "/api/new")  # no Content-Length
    conn.endheaders()
    r = conn.getresponse()
    assert r.status == 411 and "Content-Length" in json.loads(r.read())["error"]
    conn.close()


def test_many_games_at_once(server):
    """Concurrent games on one model: each one's moves stay its own."""
    errors, results = [], {}

    def player(i):
        try:
            state = new_game(server, human=i % 2)
            for _ in range(4):
                if state["over"]:
                    break
                column = state["legal"][(i + len(state["moves"])) % len(state["legal"])]
                status, state = call(server, "/api/move",
                                     {"game_id": state["game_id"], "action": column})
                assert status == 200, state
            results[state["game_id"]] = state["moves"]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=player, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(results) == 8
    for gid, moves in results.items():
        status, state = call(server, f"/api/game?id={gid}")
        assert status == 200 and state["moves"] == moves


def test_old_games_are_dropped(server):
    """--max-games are kept; past that the least recently used game goes first."""
    first, second = new_game(server)["game_id"], new_game(server)["game_id"]
    for _ in range(server.games.max_games - 2):  # max_games in all: every one is kept
        new_game(server)
    assert call(server, f"/api/game?id={first}")[0] == 200  # now the most recently used
    new_game(server)  # one too many: the least recently used (second) goes
    assert call(server, f"/api/game?id={first}")[0] == 200
    status, err = call(server, f"/api/game?id={second}")
    assert status == 404 and "unknown game id" in err["error"]
    for _ in range(server.games.max_games):
        new_game(server)
    status, err = call(server, f"/api/game?id={first}")
    assert status == 404 and "unknown game id" in err["error"]


def test_cli_errors_and_help():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "az_jax.web", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env=env)
    assert proc.returncode == 0
    for word in ("--workdir", "--model", "--checkpoint", "--port", "--host", "127.0.0.1",
                 "/api/move"):
        assert word in proc.stdout, word
    proc = subprocess.run([sys.executable, "-m", "az_jax.web", "--workdir", "/nonexistent/run"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert proc.returncode == 2 and "error: no checkpoints in" in proc.stderr


def test_the_default_sims_is_capped_at_max_sims(capsys):
    """`--max-sims 8` below the model's default (64): the default is 8, no choice exceeds it,
    and a game without `sims` plays (it was refused with a 400). An explicit `--sims` above
    `--max-sims` stays a one-line error before anything loads."""
    assert web.server.main(["--model", "tictactoe", "--sims", "16", "--max-sims", "8"]) == 2
    assert capsys.readouterr().err == "error: --sims must be in 1..--max-sims (8)\n"
    command = [sys.executable, "-m", "az_jax.web", "--model", "tictactoe", "--max-sims", "8",
               "--port", "0", "--no-warmup"]
    with subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        timer = threading.Timer(300, proc.kill)  # a hang fails the test, not the whole run
        timer.start()
        try:
            lines, found = [], None
            for line in proc.stdout:  # up to "serving TicTacToe() on http://...", or the exit
                lines.append(line)
                if found := re.search(r" on (http://\S+)", line):
                    break
            assert found, "".join(lines)
            srv = types.SimpleNamespace(url=found.group(1))
            status, info = call(srv, "/api/info")
            assert status == 200 and info["sims"] == {"default": 8, "max": 8, "choices": [8]}
            status, game = call(srv, "/api/new", {"human": 1})  # the AI moves first
            assert status == 200, game
            assert game["sims"] == 8 and game["analysis"]["simulations"] == 8
        finally:
            timer.cancel()
            proc.terminate()


# ---------------------------------------------------------------------- browser
def _browser():
    playwright = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM} (apt-get install -y chromium)")
    return playwright


def test_click_a_game_in_chromium(server, tmp_path):
    sync_api = _browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            problems = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.goto(server.url)
            idle = "window.az && window.az.state && !window.az.busy"
            page.wait_for_function(idle, timeout=60_000)
            assert page.inner_text("#game-name") == "Connect4()"
            assert "Your move (X)" in page.inner_text("#status")
            assert page.locator("#board .hit.legal").count() == 7

            page.click('#board .hit[data-col="3"]')  # column 4
            page.wait_for_function(f"{idle} && window.az.state.moves.length === 2")
            state = page.evaluate("window.az.state")
            assert state["moves"][0] == "4" and state["analysis"]["player"] == 1
            assert page.locator("#board .heat").count() > 0  # the AI's visit counts
            assert page.locator("#board .piece").count() == 2
            assert "model estimate after the AI's" in page.inner_text("#value-text")
            assert page.inner_text("#weight-head") == "improved policy"
            assert page.locator("#candidates tbody tr").count() > 0

            page.click("#undo")
            page.wait_for_function(f"{idle} && window.az.state.moves.length === 0")
            assert page.locator("#board .piece").count() == 0

            page.click("#hint")
            page.wait_for_function(f"{idle} && window.az.state.hint !== null")
            assert "(hint for you)" in page.inner_text("#search-who")

            for _ in range(25):  # the first legal column each time, to the end
                state = page.evaluate("window.az.state")
                if state["over"]:
                    break
                n = len(state["moves"])
                page.click(f'#board .hit[data-col="{state["legal"][0]}"]')
                page.wait_for_function(
                    f"{idle} && (window.az.state.moves.length > {n} || window.az.state.over)")
            state = page.evaluate("window.az.state")
            assert state["over"]
            banner = page.inner_text("#result")
            assert re.fullmatch(r"Draw \(the board is full\)\.|You win! X wins \(four in a row"
                                r": .*\)\.|The AI wins\. O wins \(four in a row: .*\)\.", banner)
            assert page.is_visible("#result") and banner in page.inner_text("#status")
            assert page.inner_text("#value-text").startswith("final result:")
            assert page.locator("#board .win-cell").count() == len(state["end"]["line"])
            page.screenshot(path=str(tmp_path / "end.png"))
            assert not problems, problems
        finally:
            browser.close()


def test_a_refused_first_game_shows_the_error_in_chromium(server):
    """The page's first /api/new refused (its sims raised past --max-sims on the way): the
    status shows the server's message, not "Loading…" for ever, and Undo and Hint, with no
    game to act on, are off."""
    sync_api = _browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            problems = []  # uncaught errors only: Chromium logs the 400 itself to the console
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.route("**/api/new", lambda route: route.continue_(post_data=json.dumps(
                {**route.request.post_data_json, "sims": 10_000})))
            page.goto(server.url)
            page.wait_for_function("window.az && window.az.error && !window.az.busy",
                                   timeout=60_000)
            assert page.evaluate("window.az.state") is None
            assert page.inner_text("#status") == (
                f"sims must be an integer from 1 to {server.games.max_sims}, got 10000")
            assert "error" in page.get_attribute("#status", "class").split()
            assert page.is_disabled("#undo") and page.is_disabled("#hint")
            assert page.is_enabled("#new")  # to try again
            assert not problems, problems
        finally:
            browser.close()


def test_the_side_cannot_change_while_a_move_is_pending_in_chromium(server):
    """Choosing a side starts a new game; while the AI was thinking it did so beside the
    pending move, whose answer, coming last, put the old game back on the page under the
    new side. The side menu is off while a request is pending, as New is."""
    sync_api = _browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, problems = _page(browser, server.url)
            held = []
            page.route("**/api/move", lambda route: held.append(route))  # held: released below
            page.click('#board .hit[data-col="3"]')
            page.wait_for_function("window.az.busy")
            page.wait_for_timeout(200)  # the route handler has run
            assert held and page.is_disabled("#new")
            assert page.is_disabled("#side")
            held[0].continue_()
            page.wait_for_function(f"{IDLE} && window.az.state.moves.length === 2")
            assert page.is_enabled("#side") and page.is_enabled("#new")
            assert not problems, problems
        finally:
            browser.close()


def test_page_has_no_external_resources():
    """Plain static files: nothing is fetched from outside the server."""
    static = Path(web.server.STATIC)
    for f in static.iterdir():
        text = f.read_text()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text


# ---------------------------------------------------------------------- the end of a game
def _finished(env_id: str, rows: list[str], last: int = -1, rewards=(1.0, -1.0),
              truncated=False):
    """A stand-in for a finished state: a board drawn as text (X/O/.), rewards, last."""
    marks = {".": -1, "X": 0, "O": 1}
    board = np.array([[marks[c] for c in r] for r in rows], np.int8).reshape(-1)
    game = types.SimpleNamespace(board=board, last=last)
    return types.SimpleNamespace(game=game, rewards=np.asarray(rewards), truncated=truncated,
                                 terminated=True)


def test_winning_lines_by_hand():
    c4 = envs.make("connect4")
    state = _finished("connect4", [".......", ".......", "..X....", "..XO...", "..XO...",
                                   "..XO..."], last=2 * 7 + 2)
    assert geometry.winning_line(c4, state) == [16, 23, 30, 37]  # column 3, rows 1-4
    end = geometry.outcome(c4, state)
    assert end["winner"] == 0 and end["reason"].startswith("four in a row: column 3 row 4")

    g9 = envs.make("gomoku", size=9)
    rows = ["X........", ".X.......", "..X......", "...X...O.", "XXXXX..O.", "......XO.",
            ".......O.", "........O", "........."]
    # The last stone E5 completes two fives (a row and a diagonal): both are shown.
    state = _finished("gomoku", rows, last=4 * 9 + 4)
    line = geometry.winning_line(g9, state)
    assert line == sorted({0, 10, 20, 30, 40} | {36, 37, 38, 39, 40})
    assert geometry.outcome(g9, state)["reason"].startswith("five in a row: A9, B8")
    # Under the standard rule six in a row is no five.
    std = envs.make("gomoku", size=9, rule="standard")
    six = ["XXXXXX...", *["........."] * 8]
    assert geometry.winning_line(std, _finished("gomoku", six, last=5)) == []
    assert geometry.winning_line(g9, _finished("gomoku", six, last=5)) == [0, 1, 2, 3, 4, 5]

    ttt = envs.make("tictactoe")
    state = _finished("tictactoe", ["OXO", ".X.", "OX."])  # no last stone recorded
    state.game = types.SimpleNamespace(board=state.game.board)
    assert geometry.winning_line(ttt, state) == [1, 4, 7]
    draw = _finished("tictactoe", ["XOX", "XOO", "OXX"], rewards=(0.0, 0.0))
    assert geometry.outcome(ttt, draw) == {"winner": None, "reason": "the board is full",
                                           "line": []}


def test_bagh_chal_endings_say_why():
    """Goats B1-C1-B1 and a tiger A5-B5-A5, twice: the third arrangement draws; the move
    limit; a fifth capture."""
    env = envs.make("baghchal")
    step = jax.jit(env.step)
    board = """
        T . . . T
        G G G G G
        G G G G G
        G G G G G
        T G . . T"""
    state = env.state_from_board(board, player=0, placed=20, captured=4)
    for move in ["B1-C1", "A5-B5", "C1-B1", "B5-A5"] * 2:
        assert not bool(state.terminated)
        state = step(state, env.parse_action(move, state))
    assert bool(state.terminated) and not bool(state.truncated)
    end = geometry.outcome(env, state)
    assert end["winner"] is None and end["reason"].startswith("repetition")
    limit = geometry.outcome(env, state.replace(truncated=np.asarray(True)))
    assert limit["reason"] == "move limit reached (200 plies)"
    # The tigers' fifth capture (A1 over B1 to C1) wins: the game is over, and says why.
    state = env.state_from_board(board, player=1, placed=20, captured=4)
    assert not agent_lib.Agent.is_over(state)
    # A game stopped at the move limit is over for the front ends too (not terminated).
    assert agent_lib.Agent.is_over(state.replace(truncated=np.asarray(True)))
    state = step(state, env.parse_action("A1xC1", state))
    assert agent_lib.Agent.is_over(state)
    assert geometry.outcome(env, state) == {"winner": 1, "line": [],
                                            "reason": "the tigers captured 5 goats"}


def test_a_human_win_ends_with_the_result_not_an_estimate(server):
    """X (you) has three on the bottom row; column 4 wins. Whatever the AI's search said
    before, the bar now shows the result, and the line is given."""
    game = new_game(server, human=0)
    set_position(server, game["game_id"], ["1", "1", "2", "2", "3", "3"])
    # The AI's last search, as if it had been sure to win (an untrained net says anything).
    server.games._games[game["game_id"]].analyses[-1] = {
        "player": 1, "action": 2, "move": "3", "value": 0.9, "win_rate": 0.95,
        "simulations": SIMS, "top": [], "weights": [0.0] * 7, "weight_label": "x"}
    status, before = call(server, f"/api/game?id={game['game_id']}")
    assert status == 200 and not before["over"]
    # O's 3 landed on X's: column 3, row 2 from the bottom (cell 4 * 7 + 2).
    assert before["last"] == {"action": 2, "move": "3", "player": 1, "from": -1, "to": 30}
    assert before["estimate"]["you"] == pytest.approx(0.05)
    assert before["estimate"]["text"] == ("model estimate after the AI's 3: you 5%, AI 95% "
                                          f"(Q of the move, {SIMS} simulations)")
    status, after = call(server, "/api/move", {"game_id": game["game_id"], "action": 3})
    assert status == 200 and after["result"] == "win"
    assert after["estimate"] == {"you": 1.0, "final": True, "text": "final result: you won"}
    assert after["end"]["line"] == [35, 36, 37, 38]  # the bottom row, columns 1-4
    assert after["message"] == ("You win! X wins (four in a row: column 1 row 1, column 2 row "
                                "1, column 3 row 1, column 4 row 1).")
    # The AI's X completes column 1 (its moves replayed here): the game is lost, and it is
    # nobody's turn although O, your side, would be next.
    game = new_game(server, human=1)
    set_position(server, game["game_id"], ["1", "2", "1", "2", "1", "2", "1"])
    status, lost = call(server, f"/api/game?id={game['game_id']}")
    assert status == 200 and lost["over"] and lost["result"] == "loss"
    assert not lost["your_turn"] and lost["legal"] == [] and lost["end"]["line"] == [14, 21, 28, 35]
    assert lost["message"] == ("The AI wins. X wins (four in a row: column 1 row 4, column 1 "
                               "row 3, column 1 row 2, column 1 row 1).")  # (top down)


# ---------------------------------------------------------------------- more boards
def _page(browser, url):
    page = browser.new_page(viewport={"width": 1100, "height": 820})
    problems = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_function(IDLE, timeout=60_000)
    return page, problems


IDLE = "window.az && window.az.state && !window.az.busy"


def _reload(page):
    page.evaluate("api('/api/game?id=' + az.state.game_id).then(s => { az.state = s; "
                  "render(); })")


def test_gomoku_15_labels_win_line_and_banner_in_chromium(tmp_path_factory, tmp_path):
    """Two-digit row labels inside the drawing, the winning five highlighted, the result
    above the board (not over it), the bar at the result."""
    sync_api = _browser()
    run = make_run(tmp_path_factory.mktemp("web") / "g15", "gomoku", size=15)
    with serving(run, sims=2) as srv, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, problems = _page(browser, srv.url)
            boxes = page.evaluate("""[...document.querySelectorAll('#board text.label')]
                .map(t => [t.textContent, t.getBBox().x])""")
            assert dict(boxes)["15"] >= 0 and len(boxes) == 30  # not cut at the left edge
            gid = page.evaluate("az.state.game_id")
            set_position(srv, gid, ["H8", "A1", "I8", "A2", "J8", "A3", "K8", "A4"])
            _reload(page)
            page.wait_for_function(f"{IDLE} && az.state.moves.length === 8")
            page.click("#hint")
            page.wait_for_function(f"{IDLE} && az.state.hint !== null", timeout=60_000)
            assert page.locator("#board .heat").count() > 0  # the search's policy, drawn
            page.evaluate(f"play({srv.games.env.parse_action('G8')})")
            page.wait_for_function(f"{IDLE} && az.state.over", timeout=60_000)
            assert page.locator("#board .win-cell").count() == 5
            assert page.locator("#board .win-line").count() == 1
            assert page.locator("#board .heat").count() == 0
            cells = page.evaluate("[...document.querySelectorAll('#board .win-cell')]"
                                  ".map(c => +c.dataset.cell)")
            assert sorted(cells) == [7 * 15 + c for c in range(6, 11)]  # G8..K8
            banner = page.locator("#result").bounding_box()
            board = page.locator("#board").bounding_box()
            assert banner["y"] + banner["height"] <= board["y"] + 1  # above, not over
            assert page.inner_text("#result").startswith("You win! Black wins (five in a row")
            assert page.inner_text("#value-text") == "final result: you won"
            page.wait_for_timeout(400)  # the bar's transition
            page.screenshot(path=str(tmp_path / "gomoku15.png"))
            assert not problems, problems
        finally:
            browser.close()


def test_bagh_chal_moves_per_tiger_in_chromium(tmp_path_factory, tmp_path):
    """Playing tigers with a hint: each movable tiger carries the total of its moves; a
    selected tiger shows its targets, each with its dot and its own number."""
    sync_api = _browser()
    run = make_run(tmp_path_factory.mktemp("web") / "bc", "baghchal")
    with serving(run, sims=2) as srv, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page, problems = _page(browser, srv.url)
            page.select_option("#side", "1")
            page.wait_for_function(f"{IDLE} && az.state.human === 1 && "
                                   "az.state.moves.length === 1", timeout=60_000)
            assert page.locator("#board .last").count() == 1  # the goat just placed
            assert "A1xC3" in page.inner_text("#help")  # how tigers move, not goats
            assert "place a goat" not in page.inner_text("#help")
            page.click("#hint")
            page.wait_for_function(f"{IDLE} && az.state.hint !== null", timeout=60_000)
            hint = page.evaluate("az.state.hint")
            geo = srv.games.info()["geometry"]
            totals = {}
            for a, w in enumerate(hint["weights"]):
                if w >= 0.005 or a == hint["action"]:  # the chosen move is always drawn
                    totals[geo["action_from"][a]] = totals.get(geo["action_from"][a], 0) + w
            badges = page.evaluate("[...document.querySelectorAll('#board .heat-badge')]"
                                   ".map(b => [+b.dataset.from, +b.textContent])")
            assert {f: n for f, n in badges} == {f: round(w * 100) for f, w in totals.items()}
            tiger = max(totals, key=totals.get)  # the tiger the search likes most
            page.click(f'#board .hit[data-cell="{tiger}"]')
            targets = page.evaluate("[...document.querySelectorAll('#board .target')]"
                                    ".map(t => +t.dataset.cell)")
            legal = [a for a in page.evaluate("az.state.legal") if geo["action_from"][a] == tiger]
            assert sorted(targets) == sorted(geo["action_to"][a] for a in legal)
            heat = page.evaluate("[...document.querySelectorAll('#board .heat')]"
                                 ".map(h => [+h.dataset.from, +h.dataset.cell, h.dataset.weight])")
            shown = {(tiger, geo["action_to"][a]): f"{hint['weights'][a]:.4f}" for a in legal
                     if hint["weights"][a] >= 0.005 or a == hint["action"]}
            assert shown and {(f, c): w for f, c, w in heat} == shown  # its moves only
            assert set(shown) <= {(tiger, c) for c in targets}  # each with its dot
            page.screenshot(path=str(tmp_path / "baghchal.png"))
            assert not problems, problems
        finally:
            browser.close()
