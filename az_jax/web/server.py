"""The browser front end: a JSON API and static files, on Starlette served by uvicorn.

    python -m az_jax.web --model gomoku_15x15             # then open http://127.0.0.1:8000/
    python -m az_jax.web --workdir runs/connect4 --port 8080    # a run of train.py

One model serves many games at once (game id -> moves and states, kept in memory; the
oldest games are dropped past --max-games). Searches run one at a time under a lock.

API (JSON in and out; errors are 4xx with {"error": message}):
  GET  /api/info                     game geometry, side names, simulation choices, model
  POST /api/new   {human, sims}      a new game; human = 0/1 (numbers), "first"/"second"
                                     or a side name ("1" in quotes is refused: ambiguous);
                                     if the AI moves first its move is already played
  GET  /api/game?id=ID               the position (board, legal actions, last move, result,
                                     why the game ended and the winning line, the estimate)
  POST /api/move  {game_id, action | move, sims?}
                                     your move (an action index or text such as "E5": one
                                     of the two), then the AI's reply with its statistics
  POST /api/undo  {game_id}          takes back your last move and the AI's reply
  POST /api/hint  {game_id}          a search for your side (its policy becomes the heatmap)

A search's statistics: `value` is the Q of the move chosen (the value of the position after
it, for the side that searched, in [-1, 1]) and `win_rate` the same as an expected score;
`root_value` is the search's average over all it visited; `weights` is the search's policy
per action (Gumbel search: the improved policy, whose visit counts follow a fixed schedule;
PUCT: the visit share), named by `weight_label`.

`sims` (1 to --max-sims) is rounded down to one of /api/info's `sims.choices` (the standard
counts up to --max-sims, the default and --max-sims itself; below the smallest, that one):
each count searched compiles a program kept for the server's life, so a client cannot make
one per value. A game's `sims` in every answer is the count its searches use.
"""

from __future__ import annotations

import argparse
import errno
import json
import secrets
import socket
import sys
import threading
from collections import OrderedDict
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from az_jax import cli

STATIC = Path(__file__).parent / "static"
MAX_BODY = 64 * 1024  # bytes of a request body
SIMS_CHOICES = (8, 32, 64, 128, 256, 512, 1024)
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                  ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
                  ".png": "image/png", ".ico": "image/x-icon"}


def _host(state):
    """A state as numpy arrays of its own (copies: on the CPU a view of a JAX array's data
    keeps the whole device buffer alive)."""
    import jax
    import numpy as np

    return jax.tree.map(np.array, state)


def _compact(analysis: dict) -> dict:
    """An analysis as kept: its per-action lists as numpy arrays (4 bytes a number, not 32)."""
    import numpy as np

    return {k: np.asarray(v, np.int32 if k == "visits" else np.float32)
            if k in ("visits", "weights") else v for k, v in analysis.items()}


def _jsonable(analysis: dict | None) -> dict | None:
    """The analysis as the API sends it (`Games._thought`'s lists and rounding)."""
    if analysis is None:
        return None
    out = dict(analysis)
    if "visits" in out:
        out["visits"] = [int(v) for v in out["visits"]]
    if "weights" in out:
        out["weights"] = [round(float(w), 4) for w in out["weights"]]
    return out


def _show(value, limit: int = 60) -> str:
    """`repr(value)`, cut to `limit` characters: error messages echo what the client sent."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class ApiError(Exception):
    """A client error: HTTP status and a message for the user."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = int(status)
        self.message = message


class Game:
    """One game in progress (host side). `states[i]` is the position before `actions[i]`,
    as numpy copies, and `analyses` hold numpy arrays too (`_compact`): a kept JAX array
    (or a view of one) keeps its device buffer alive, so a finished 15x15 game kept this
    way takes about a fifth of the memory (`max_games` of them are kept)."""

    def __init__(self, game_id: str, human: int, sims: int, first_state):
        self.id = game_id
        self.human = human
        self.sims = sims
        self.states = [_host(first_state)]
        self.actions: list[int] = []
        self.analyses: list[dict | None] = []  # the AI's search for each of its moves
        self.hint: dict | None = None
        self.lock = threading.Lock()


class Games:
    """The games served by one Agent, and the API's logic (no HTTP here)."""

    def __init__(self, agent, sims: int | None = None, max_sims: int = 4096,
                 max_games: int = 256):
        from az_jax.web import geometry

        geometry.shape(agent.env)  # raises for a game without a board drawing
        self.agent = agent
        self.env = agent.env
        self.max_sims = int(max_sims)
        if sims is None:  # the agent's default, capped: a game without `sims` must be valid
            sims = min(agent.num_simulations, self.max_sims)
        elif not 1 <= sims <= self.max_sims:
            raise ValueError(f"sims must be in 1..max_sims ({self.max_sims}), got {sims}")
        self.sims = int(sims)
        # The only counts searched: each compiles its own program (seconds, and memory kept
        # for the server's life), so requests snap to these, not one program per value.
        self.choices = sorted({s for s in SIMS_CHOICES if s <= self.max_sims}
                              | {self.sims, self.max_sims})
        self.max_games = int(max_games)
        self._games: OrderedDict[str, Game] = OrderedDict()
        self._lock = threading.Lock()
        self._side_names = self.env.side_names
        self._info = {
            "env": {"id": self.env.id, "params": dict(self.env.params), "name": repr(self.env)},
            "model": {"iteration": agent.restored.iteration, "path": agent.restored.path},
            "sides": list(self._side_names),
            "move_help": self.env.move_help,
            "side_move_help": [self.env.side_move_help(p) for p in (0, 1)],
            "sims": {"default": self.sims, "max": self.max_sims, "choices": self.choices},
            "geometry": geometry.describe(self.env),
        }

    # ------------------------------------------------------------------ helpers
    def info(self) -> dict:
        return self._info

    def _get(self, body: dict) -> Game:
        game_id = body.get("game_id")
        if not isinstance(game_id, str) or not game_id:
            raise ApiError(400, "game_id (a string from /api/new) is required")
        with self._lock:
            game = self._games.get(game_id)
            if game is None:
                raise ApiError(404, f"unknown game id {_show(game_id)} (finished games are "
                                    "dropped after a while, or the server restarted)")
            self._games.move_to_end(game_id)
        return game

    def _sims(self, body: dict, default: int) -> int:
        sims = body.get("sims", default)
        if sims is None:
            return default
        if isinstance(sims, bool) or not isinstance(sims, int) or not 1 <= sims <= self.max_sims:
            raise ApiError(400, f"sims must be an integer from 1 to {self.max_sims}, "
                                f"got {_show(sims)}")
        # Rounded down to a choice (no more search than asked, but for a count below the
        # smallest choice, which gets that one).
        return max((c for c in self.choices if c <= sims), default=self.choices[0])

    def _human(self, body: dict) -> int:
        from az_jax import agent as agent_lib

        human = body.get("human", 0)
        if isinstance(human, bool) or not isinstance(human, int | str) or (
                isinstance(human, str) and len(human) > 32):
            raise ApiError(400, "human must be 0, 1, 'first', 'second' or a side name")
        if isinstance(human, str) and human.strip().isascii() and human.strip().isdigit():
            # "1" is ambiguous: the player number 1 (second), or the CLI's first side.
            raise ApiError(400, f"human as text is 'first', 'second' or a side name, as a "
                                f"number 0 or 1 (not in quotes), got {_show(human)}")
        if isinstance(human, int):
            if human not in (0, 1):
                raise ApiError(400, f"human must be 0 or 1, got {_show(human)}")
            return human
        try:
            return agent_lib.parse_side(self.env, human)
        except ValueError as e:
            raise ApiError(400, str(e)) from None

    def _thought(self, thought, player: int) -> dict:
        return {
            "player": player,
            "action": thought.action,
            "move": thought.move,
            "value": round(thought.value, 4),
            "win_rate": round(thought.win_rate, 4),
            "root_value": round(thought.root_value, 4),
            "visits": [int(v) for v in thought.visits],
            "weights": [round(float(w), 4) for w in thought.policy()],
            "weight_label": thought.weight_label,
            "top": [{"action": c.action, "move": c.move, "visits": c.visits,
                     "weight": round(c.weight, 4),
                     "value": None if c.value is None else round(c.value, 4)}
                    for c in thought.top(8)],
            "simulations": thought.simulations,
            "seconds": round(thought.seconds, 3),
        }

    def _push(self, game: Game, action: int, analysis: dict | None) -> None:
        game.states.append(_host(self.agent.play(game.states[-1], action)))
        game.actions.append(int(action))
        game.analyses.append(None if analysis is None else _compact(analysis))
        game.hint = None

    def _ai_reply(self, game: Game) -> None:
        state = game.states[-1]
        while not self.agent.is_over(state) and int(state.current_player) != game.human:
            player = int(state.current_player)
            thought = self.agent.think(state, game.sims)
            self._push(game, thought.action, self._thought(thought, player))
            state = game.states[-1]

    def view(self, game: Game) -> dict:
        from az_jax import agent as agent_lib
        from az_jax.web import geometry

        env, state = self.env, game.states[-1]
        over = self.agent.is_over(state)
        to_move = int(state.current_player)
        view = {
            "game_id": game.id,
            "human": game.human,
            "sims": game.sims,
            "board": geometry.board(env, state),
            "to_move": to_move,
            "your_turn": not over and to_move == game.human,
            "legal": [] if over else [int(a) for a in self.agent.legal_actions(state)],
            "moves": [env.action_to_str(a) for a in game.actions],
            "last": None,
            "over": over,
            "winner": None,
            "result": None,
            "message": "",
            "analysis": _jsonable(next((a for a in reversed(game.analyses) if a), None)),
            "hint": game.hint,
            "can_undo": any(int(s.current_player) == game.human for s in game.states[:-1]),
            "extra": geometry.extra(env, state),
            "end": None,
            "estimate": None,
        }
        if game.actions:
            before, action = game.states[-2], game.actions[-1]
            src, dst = geometry.move_cells(env, before, action)
            view["last"] = {"action": action, "move": env.action_to_str(action),
                            "player": int(before.current_player), "from": src, "to": dst}
        names = self._side_names
        if over:
            end = geometry.outcome(env, state)
            winner = end["winner"]
            view["winner"], view["end"] = winner, end
            why = f" ({end['reason']})" if end["reason"] else ""
            if winner is None:
                view["result"] = "draw"
                view["message"] = f"Draw{why}."
            elif winner == game.human:
                view["result"] = "win"
                view["message"] = f"You win! {agent_lib.wins(names[winner]).capitalize()}{why}."
            else:
                view["result"] = "loss"
                view["message"] = (f"The AI wins. {agent_lib.wins(names[winner]).capitalize()}"
                                   f"{why}.")
        elif to_move == game.human:
            view["message"] = f"Your move ({names[game.human]})."
        view["estimate"] = self._estimate(view, game)
        return view

    @staticmethod
    def _estimate(view: dict, game: Game) -> dict | None:
        """The value bar: your expected score (a draw counts half) in [0, 1], and its words.

        At the end of a game it is the result; else the latest search shown (your hint, or
        the AI's last move): the Q of the move it chose, turned to your point of view.
        """
        if view["over"]:
            you = {"win": 1.0, "loss": 0.0}.get(view["result"], 0.5)
            words = {"win": "you won", "loss": "the AI won"}.get(view["result"], "a draw")
            return {"you": you, "final": True, "text": f"final result: {words}"}
        a = view["hint"] or view["analysis"]
        if a is None:
            return None
        you = a["win_rate"] if a["player"] == game.human else 1.0 - a["win_rate"]
        whose = f"if you play {a['move']}" if a is view["hint"] else f"after the AI's {a['move']}"
        return {"you": round(you, 4), "final": False,
                "text": f"model estimate {whose}: you {you:.0%}, AI {1 - you:.0%} "
                        f"(Q of the move, {a['simulations']} simulations)"}

    # ------------------------------------------------------------------ API
    def new(self, body: dict) -> dict:
        human = self._human(body)
        sims = self._sims(body, self.sims)
        game = Game(secrets.token_hex(8), human, sims, self.agent.new_game())
        with self._lock:
            self._games[game.id] = game
            while len(self._games) > self.max_games:
                self._games.popitem(last=False)
        with game.lock:
            self._ai_reply(game)
            return self.view(game)

    def state(self, query: dict) -> dict:
        if not query.get("id"):
            raise ApiError(400, "give the game as /api/game?id=<game_id from /api/new>")
        if not query["id"][0]:
            raise ApiError(400, "id is empty: give the game as /api/game?id=<game_id from "
                                "/api/new>")
        game = self._get({"game_id": query["id"][0]})
        with game.lock:
            return self.view(game)

    def move(self, body: dict) -> dict:
        game = self._get(body)
        with game.lock:
            sims = self._sims(body, game.sims)  # the game's only once the move is accepted
            state = game.states[-1]
            if self.agent.is_over(state):
                raise ApiError(409, "the game is over: start a new game or undo")
            if int(state.current_player) != game.human:
                raise ApiError(409, "it is not your turn")
            action = self._parse_move(body, state)
            game.sims = sims
            self._push(game, action, None)
            self._ai_reply(game)
            return self.view(game)

    def _parse_move(self, body: dict, state) -> int:
        env = self.env
        if "action" in body and "move" in body:
            raise ApiError(400, "give the move as action (an integer) or move (text), "
                                "not both")
        if "action" in body:
            action = body["action"]
            if isinstance(action, bool) or not isinstance(action, int):
                raise ApiError(400, f"action must be an integer, got {_show(action)}")
            if not 0 <= action < env.num_actions:
                raise ApiError(400, f"action {_show(action)} is out of range "
                                    f"0..{env.num_actions - 1}")
            text = env.action_to_str(action)
        elif "move" in body:
            text = body["move"]
            if not isinstance(text, str) or len(text) > 32:
                raise ApiError(400, "move must be a short string in the game's notation")
        else:
            raise ApiError(400, "give the move as action (an integer) or move (text)")
        try:
            return env.parse_action(text, state)
        except ValueError as e:
            raise ApiError(400, f"illegal move: {e}") from None

    def undo(self, body: dict) -> dict:
        game = self._get(body)
        with game.lock:
            for i in range(len(game.actions) - 1, -1, -1):
                if int(game.states[i].current_player) == game.human:
                    del game.states[i + 1:]
                    del game.actions[i:]
                    del game.analyses[i:]
                    game.hint = None
                    return self.view(game)
            raise ApiError(409, "nothing to undo: you have not moved yet")

    def hint(self, body: dict) -> dict:
        game = self._get(body)
        with game.lock:
            sims = self._sims(body, game.sims)
            state = game.states[-1]
            if self.agent.is_over(state) or int(state.current_player) != game.human:
                raise ApiError(409, "a hint is only for your turn in a running game")
            game.sims = sims
            game.hint = self._thought(self.agent.think(state, game.sims), game.human)
            return self.view(game)


# ---------------------------------------------------------------------- HTTP
# The HTTP layer is Starlette (routing, 404/405 with Allow, requests, responses, files) served
# by uvicorn on h11 (parsing and framing: Content-Length, chunked bodies, bad requests).
# What is ours: the routes, the size limit, JSON in and out, and every error as JSON.
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _json(status: int, data, headers: dict | None = None) -> Response:
    """A JSON answer. An error closes the connection: an unread body is then no worry."""
    close = {"Connection": "close"} if status >= 400 else {}
    return Response(json.dumps(data, separators=(",", ":")).encode(), status,
                    {**_HEADERS, **close, **(headers or {})}, "application/json; charset=utf-8")


async def _read_json(request: Request) -> dict:
    """The body of a POST as a JSON object of at most MAX_BODY bytes, else an ApiError."""
    length = request.headers.get("content-length")
    if length is None and "transfer-encoding" not in request.headers:
        raise ApiError(411, "a Content-Length header is required")
    if length is not None and int(length) > MAX_BODY:  # h11 has checked: 1-20 digits
        raise ApiError(413, f"the body is too large ({length} bytes; at most {MAX_BODY})")
    raw = bytearray()
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY:  # a chunked body: no length up front
                raise ApiError(413, f"the body is too large (over {MAX_BODY} bytes)")
    except ClientDisconnect:
        raise ApiError(400, "the client left before the end of the body") from None
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # bad UTF-8 or JSON, or an integer of > 4300 digits
        raise ApiError(400, f"the body is not valid JSON: {str(e)[:200]}") from None
    except RecursionError:
        raise ApiError(400, "the body is not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


def make_app(games: Games) -> Starlette:
    """The ASGI app: the JSON API over `games`, the page and its static files."""
    static_files = {p.name: p for p in STATIC.iterdir() if p.is_file()}

    def api(call, post: bool):
        async def endpoint(request: Request) -> Response:
            if post:
                arg = await _read_json(request)
            else:  # the query as parse_qs gives it: name -> list of values
                arg = {k: request.query_params.getlist(k) for k in request.query_params}
            # A search blocks: it runs in a worker thread, not on the event loop.
            return _json(200, await run_in_threadpool(call, arg))
        return endpoint

    async def static(request: Request) -> Response:
        file = static_files.get(request.path_params.get("name", "index.html"))
        if file is None:  # only files that exist at start, by exact name
            raise ApiError(404, f"no such file: {request.url.path}")
        return FileResponse(file, headers=_HEADERS,
                            media_type=_CONTENT_TYPES.get(file.suffix, "application/octet-stream"))

    async def api_error(request: Request, e: ApiError) -> Response:
        return _json(e.status, {"error": e.message})

    async def http_error(request: Request, e: HTTPException) -> Response:
        """Starlette's own errors (no route, a method a route does not take) as JSON."""
        path = request.url.path
        if e.status_code == 404:
            return _json(404, {"error": f"no such page or API: {path}"})
        if e.status_code == 405:
            allowed = ", ".join(sorted(e.headers["Allow"].split(", ")))
            return _json(405, {"error": f"{path} takes {allowed}, not {request.method}"},
                         {"Allow": allowed})
        return _json(e.status_code, {"error": e.detail}, e.headers)

    async def internal_error(request: Request, e: Exception) -> Response:
        # A bug: the answer says what; uvicorn then logs the traceback.
        return _json(500, {"error": f"internal error: {type(e).__name__}: {e}"})

    routes = [Route("/api/info", api(lambda query: games.info(), post=False)),
              Route("/api/game", api(games.state, post=False)),
              *[Route(f"/api/{name}", api(getattr(games, name), post=True), methods=["POST"])
                for name in ("new", "move", "undo", "hint")],
              Route("/", static), Route("/index.html", static), Route("/static/{name}", static)]
    return Starlette(routes=routes, exception_handlers={
        ApiError: api_error, HTTPException: http_error, Exception: internal_error})


class Server:
    """uvicorn serving `make_app(games)` on a socket bound at creation (so that a port in use
    is an error here, and port 0 is a free port known at once)."""

    def __init__(self, games: Games, host: str, port: int, quiet: bool = True):
        self.games = games
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family)
        self._uvicorn = uvicorn.Server(uvicorn.Config(
            make_app(games), http="h11", loop="asyncio", lifespan="off",
            log_level="error" if quiet else "info", access_log=not quiet,
            timeout_graceful_shutdown=5))
        self._serving = threading.Event()
        self._stopped = threading.Event()

    @property
    def server_address(self) -> tuple:
        return self.socket.getsockname()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    def serve_forever(self) -> None:
        """Serves until shutdown() (from another thread) or Ctrl-C (in the main thread:
        KeyboardInterrupt once the server has stopped)."""
        self._serving.set()
        try:
            self._uvicorn.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stops serve_forever and waits for it (open requests get a few seconds)."""
        self._uvicorn.should_exit = True
        if self._serving.is_set():
            self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()


# A --host that is no address of this machine: not one at all (a name that resolves to
# nothing), or another machine's.
_NO_SUCH_HOST = (errno.EADDRNOTAVAIL, socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None))


def make_server(agent, host: str = "127.0.0.1", port: int = 8000, sims: int | None = None,
                max_sims: int = 4096, max_games: int = 256, quiet: bool = True) -> Server:
    """An HTTP server for `agent` (not started: call serve_forever, or serve_in_thread).
    `sims` is a game's default (None: the agent's, capped at `max_sims`)."""
    games = Games(agent, sims=sims, max_sims=max_sims, max_games=max_games)
    try:
        return Server(games, host, port, quiet=quiet)
    except (OSError, OverflowError) as e:  # port in use, no such address, port > 65535
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if isinstance(e, socket.gaierror) or getattr(e, "errno", None) in _NO_SUCH_HOST:
            fix = ("--host names no address of this machine: 127.0.0.1 for this machine "
                   "only, 0.0.0.0 for every interface")
        else:
            fix = "choose another --port, or --port 0 for any free one"
        raise OSError(f"cannot listen on {host}:{port}: {why} ({fix})") from None


def serve_in_thread(server: Server) -> threading.Thread:
    """Serves in a daemon thread; stop with server.shutdown(); server.server_close()."""
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="az_jax.web")
    thread.start()
    return thread


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m az_jax.web", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_source_args(p)
    p.add_argument("--host", type=cli.host, default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; "
                        "0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=int, default=8000,
                   help="port, 0..65535 (default 8000; 0 = any free one)")
    p.add_argument("--sims", type=cli.integer(1, cli.MAX_SIMULATIONS), default=None,
                   metavar="N",
                   help="default simulations per AI move, up to --max-sims (default: "
                        "max(the run's search.num_simulations, 64), capped at --max-sims); "
                        "the page offers others")
    p.add_argument("--max-sims", type=cli.integer(1, cli.MAX_SIMULATIONS), default=4096,
                   metavar="N",
                   help="the most simulations a request may ask for (default 4096); a "
                        "request's count is rounded down to the page's choices")
    p.add_argument("--max-games", type=cli.integer(1), default=256, metavar="N",
                   help="games kept in memory; the least recently used go first "
                        "(default 256)")
    p.add_argument("--no-warmup", action="store_true",
                   help="do not compile the search before serving")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.add_argument("--seed", type=cli.integer(0, cli.MAX_SEED), default=0,
                   help="seed of the search keys, 0 to 4294967295 (default 0)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from az_jax.checkpoint import quiet_logs

    quiet_logs()
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be in 0..65535 (0 = any free port), got {args.port}",
              file=sys.stderr)
        return 2
    if args.sims is not None and not 1 <= args.sims <= args.max_sims:
        print(f"error: --sims must be in 1..--max-sims ({args.max_sims})", file=sys.stderr)
        return 2
    loaded = cli.load_agent(args, args.sims, lambda agent: make_server(
        agent, args.host, args.port, sims=args.sims, max_sims=args.max_sims,
        max_games=args.max_games, quiet=not args.verbose))
    if loaded is None:
        return 2
    agent, server = loaded
    print(f"model: {agent.description}", flush=True)
    if not args.no_warmup:
        print("compiling the search...", end=" ", flush=True)
        print(f"{agent.warmup(server.games.sims):.1f}s", flush=True)
    print(f"serving {agent.env!r} on {server.url}  (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped")
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
