"""`python -m az_jax.web`: the JSON API against bad requests, many games at once, and a real
game clicked in headless Chromium (playwright) up to the win/lose message.

The server runs in a thread of this process on a free port of 127.0.0.1, serving a tiny
untrained Connect4 network (see tests/test_play.py for why untrained).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import envs
from az_jax import agent as agent_lib
from az_jax import web
from az_jax.web import geometry
from tests.test_play import make_run

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SIMS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("web") / "c4", "connect4")
    agent = agent_lib.Agent.load(workdir=run, num_simulations=SIMS)
    agent.warmup()
    srv = web.make_server(agent, "127.0.0.1", 0, sims=SIMS, max_sims=64, max_games=50)
    thread = web.serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


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
    for path, ctype in [("/", "text/html"), ("/static/app.js", "text/javascript"),
                        ("/static/style.css", "text/css")]:
        with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=30) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith(ctype)
            assert len(r.read()) > 500


def test_a_game_over_the_api(server):
    game = new_game(server, human="second", sims=SIMS)  # the AI (X) has moved already
    assert game["human"] == 1 and len(game["moves"]) == 1 and game["your_turn"]
    assert game["analysis"]["player"] == 0 and sum(game["analysis"]["visits"]) > 0
    assert game["last"]["player"] == 0 and game["last"]["to"] >= 35  # the bottom row
    gid = game["game_id"]
    status, after = call(server, "/api/move", {"game_id": gid, "move": "4"})
    assert status == 200 and after["moves"][1] == "4" and len(after["moves"]) == 3
    status, same = call(server, f"/api/game?id={gid}")
    assert status == 200 and same["moves"] == after["moves"]
    status, hinted = call(server, "/api/hint", {"game_id": gid})
    assert status == 200 and hinted["hint"]["player"] == 1
    status, undone = call(server, "/api/undo", {"game_id": gid})
    assert status == 200 and undone["moves"] == game["moves"] and undone["hint"] is None
    status, err = call(server, "/api/undo", {"game_id": gid})
    assert status == 409 and "nothing to undo" in err["error"]
    # Play the first legal column until the game ends: then moves are refused.
    state = undone
    while not state["over"]:
        status, state = call(server, "/api/move", {"game_id": gid, "action": state["legal"][0]})
        assert status == 200, state
    assert state["result"] in ("win", "loss", "draw") and state["message"]
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
    "unknown path": ("/api/nope", {}, None, 404, "no such page"),
    "path traversal": ("/static/../server.py", None, None, 404, "no such"),
    "unknown static": ("/static/secret.txt", None, None, 404, "no such file"),
    "game without id": ("/api/game", None, None, 400, "/api/game?id="),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_requests_get_4xx_json(server, name):
    path, body, raw, code, text = BAD[name]
    status, err = call(server, path, body, raw=raw)
    assert status == code and text in err["error"], (status, err)


def test_illegal_moves_say_why(server):
    gid = new_game(server)["game_id"]
    for body, text in [({"move": "9"}, "expected a column number 1-7"),
                       ({"action": 7}, "out of range"), ({"action": True}, "integer"),
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
    first = new_game(server)["game_id"]
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
            assert "model estimate: you" in page.inner_text("#value-text")
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
            assert banner in ("Draw.", "You win! (X wins)", "The AI wins. (O wins)")
            assert page.is_visible("#result") and banner in page.inner_text("#status")
            page.screenshot(path=str(tmp_path / "end.png"))
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
