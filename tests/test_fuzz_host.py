"""Fuzzing the host-side parsers with random input: Gomocup protocol lines, the web game API
(JSON bodies, moves, queries, methods and paths), train.py config overrides and solver set files.

Every bad input must get a clear error (ERROR/UNKNOWN, a 4xx with a JSON message, one
`error:` paragraph, a ValueError naming the line), never a traceback, a 500 or a hang, and
the program must keep working afterwards. One tiny untrained 9x9 Gomoku model (see
tests/test_play.py) serves both the brain subprocess and the web server (real HTTP on
127.0.0.1). Budget: the hypothesis profile (`--hypothesis-profile=long` runs a long one);
the costly tests (HTTP, the subprocess) take a share of it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import string
import subprocess
import sys
import tempfile
import time
import types
import urllib.parse
from pathlib import Path

import jax
import ml_collections
import numpy as np
import pytest
from absl import flags
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import envs
import train
from az_jax import agent as agent_lib
from az_jax import config as config_lib
from az_jax import gomocup, trainer, web
from az_jax.eval import connect4_positions, solver_bench
from configs import default as default_config
from tests.test_gomocup import BrainProcess
from tests.tiny import make_run

ROOT = Path(__file__).resolve().parents[1]
N = 9  # the board of the tiny Gomoku model
# ml_collections reads config files with importlib's deprecated load_module().
pytestmark = pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")


def share(fraction: float) -> settings:
    """`fraction` of the active profile's examples (at least 4), for the costly tests."""
    return settings(max_examples=max(4, int(settings.default.max_examples * fraction)),
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("fuzz") / "g9", "gomoku", size=N)


@pytest.fixture(scope="module", autouse=True)
def brain(run):
    """The brain subprocess, started with the module so that its start overlaps the
    in-process tests. `--sims 1`: one small search compile at START."""
    b = BrainProcess(run, "--sims", "1")
    yield b
    if b.proc.poll() is None:
        b.proc.kill()
        b.proc.wait(timeout=30)


# =========================================================================== solver files
_MOVES = st.one_of(st.text("1234567", min_size=1, max_size=14), st.text("0123456789x", max_size=6),
                   st.text(max_size=6))
_SCORE = st.one_of(st.integers(-25, 25).map(str), st.text("+-0123456789x", max_size=4),
                   st.sampled_from(["1_0", "\u0663", "\uff11", "9" * 5000, "1.5", "nan"]))
_COLUMNS = st.lists(_SCORE, min_size=5, max_size=8).map(",".join)
_SOLVER_LINE = st.one_of(
    st.builds("{} {}".format, _MOVES, _SCORE),
    st.builds("{} {} {}".format, _MOVES, _SCORE, _COLUMNS),
    st.text(max_size=40), st.sampled_from(["", "  ", "# a comment", "4 0 x x x x x x x"]))


@given(line=_SOLVER_LINE)
def test_solver_lines(line):
    try:
        pos = connect4_positions.parse_line(line, "set.txt:7")
    except ValueError as e:
        msg = str(e)
        assert msg.startswith("set.txt:7: ") and len(msg) < 300 and "\n" not in msg, msg
        return
    if pos is None:
        assert not line.strip() or line.strip().startswith("#")
        return
    assert set(pos.moves) <= set("1234567") and abs(pos.score) <= connect4_positions.MAX_SCORE
    if pos.column_scores is not None:
        assert len(pos.column_scores) == 7 and pos.score == max(
            s for s in pos.column_scores if s is not None)
    assert connect4_positions.parse_line(pos.to_line()) == pos


@given(content=st.one_of(st.binary(max_size=200),
                         st.lists(_SOLVER_LINE, max_size=5).map(lambda ls: "\n".join(ls).encode())))
def test_solver_files(content):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "set.txt"
        path.write_bytes(content)
        try:
            positions = solver_bench.read_positions(path)
        except ValueError as e:
            msg = str(e)
            assert re.match(rf"{re.escape(str(path))}:(\d+:)? ", msg) and "\n" not in msg, msg
        else:
            assert positions


def test_solver_cli_names_the_line(tmp_path, capsys):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"# header\n44 1\n44 \xff\xfe\n")
    assert solver_bench.main(["evaluate", str(path), "--workdir", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:3: score ") and "Traceback" not in err


# =========================================================================== config
def _leaves(config, prefix=""):
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


PATHS = sorted(_leaves(default_config.get_config()))
_VALUE = st.one_of(
    st.text(max_size=10), st.integers().map(str), st.floats().map(repr),
    st.sampled_from(["", "None", "True", "nan", "-inf", "1e999", "[1]", "{}", "9" * 30, "-1",
                     "0", "3", "gumbel", "sgd", "random,nope", "mcts:0"]))
_PATH = st.one_of(st.sampled_from(PATHS), st.sampled_from(PATHS).map(lambda p: p + ".x"),
                  st.sampled_from(PATHS).map(lambda p: p[:-1]),
                  st.text("abcdefghijklmnopqrstuvwxyz._", max_size=16))
_ARG = st.one_of(
    st.builds(lambda p, v: [f"--config.{p}={v}"], _PATH, _VALUE),
    st.builds(lambda p, v: [f"--config.{p}", v], _PATH, _VALUE),
    st.builds(lambda p: [f"--config.{p}"], _PATH),
    st.builds(lambda p: [f"--noconfig.{p}"], _PATH),
    st.sampled_from([["--config=configs/nope.py"], ["--config=configs/tictactoe.py"],
                     ["--config", "README.md"], ["--config=configs/gomoku_9x9.py:x"],
                     ["--workdir="], ["--num_processes=two"], ["--nope=1"], ["stray"]]))


def _one_paragraph(msg: str) -> None:
    assert msg.strip() and "Traceback" not in msg and "\n\n" not in msg, msg


@given(args=st.lists(_ARG, min_size=1, max_size=3))
def test_config_flags_in_process(args):
    """train.py's flag parsing: a config, or a ValueError of one paragraph. A config then
    passes `validate_config` or is refused by it; one that passes builds (host side)."""
    argv = ["train.py", *[a for arg in args for a in arg]]
    fv = flags.FlagValues()
    try:
        train.parse_flags(argv, fv)
    except ValueError as e:
        _one_paragraph(str(e))
        return
    try:
        config_lib.validate(fv.config, 2)
    except ValueError as e:
        assert str(e).startswith("invalid config:\n  "), e
        _one_paragraph(str(e))
        return
    try:
        trainer.Setup(fv.config)  # env, network, search, optimizer: nothing compiles
    except ValueError as e:
        _one_paragraph(str(e))


def test_unknown_fields_are_named():
    cases = {"--config.train.batch_siz=4": "config.train has no field 'batch_siz' (did you "
                                           "mean 'batch_size'?)",
             "--config.nope=1": "the config has no field 'nope'",
             "--config.train.batch_size.x=1": "config.train.batch_size is a value (int)",
             "--config.env.kwargs.size=9": "config.env.kwargs has no field 'size'"}
    for arg, text in cases.items():
        with pytest.raises(ValueError, match=re.escape(text)):
            train.parse_flags(["train.py", arg], flags.FlagValues())


_BOOLS = ["selfplay.bootstrap", "selfplay.pending", "train.augment", "eval.gating",
          "checkpoint.save_replay", "log.tensorboard", "log.progress"]
# Fields validate_config checks, with the values they take on the command line and others
# (a config built in Python may hold any type).
_CHECKED = ["selfplay.batch_size", "selfplay.num_plies", "selfplay.temperature_plies",
            "selfplay.random_plies",
            "selfplay.max_game_length", "selfplay.fast_simulations",
            "selfplay.full_search_fraction", "selfplay.archive_starts",
            "selfplay.archive_size", "train.q_target_weight", "train.surprise_weight",
            "train.init_from",
            "train.batch_size", "train.updates_per_iteration", "train.num_iterations",
            "train.warmup_steps", "train.learning_rate", "train.weight_decay",
            "train.max_grad_norm", "train.value_weight", "train.optimizer", "train.schedule",
            "replay.capacity", "replay.min_size", "checkpoint.every", "checkpoint.keep",
            "search.policy", "search.num_simulations", "search.max_num_considered_actions",
            "search.gumbel_scale", "search.dirichlet_alpha", "search.dirichlet_fraction",
            "search.pb_c_init", "search.pb_c_base", "search.discount", "search.tactics",
            "search.eval_tactics", "search.eval_sims_per_considered", "search.value_scale",
            "search.eval_value_scale", "network.channels",
            "network.num_blocks", *_BOOLS,
            "eval.every", "eval.num_games", "eval.num_simulations", "eval.opening_plies",
            "eval.opponents", "eval.gating_threshold", "eval.max_share", "seed"]
_POSITIVE_INTS = {"selfplay.batch_size", "train.batch_size", "replay.capacity",
                  "train.num_iterations", "train.updates_per_iteration", "selfplay.num_plies",
                  "checkpoint.every", "search.num_simulations"}
_ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                 st.lists(st.integers(), max_size=2), st.integers(-3, 9))


@given(changes=st.dictionaries(st.sampled_from(_CHECKED), _ANY, min_size=1, max_size=4),
       num_devices=st.integers(1, 8))
def test_validate_config_with_any_values(changes, num_devices):
    d = default_config.get_config().to_dict()
    for path, value in changes.items():
        group, _, field = path.rpartition(".")
        (d[group] if group else d)[field] = value
    config = ml_collections.ConfigDict(d)  # a fresh ConfigDict takes any types
    bad = [p for p, v in changes.items() if p in _POSITIVE_INTS
           and (isinstance(v, bool) or not isinstance(v, int) or v < 1)]
    lr = config.train.learning_rate
    if not isinstance(lr, int | float) or isinstance(lr, bool) or not 0 < lr < float("inf"):
        bad.append("train.learning_rate")
    bad += [p for p in _BOOLS if p in changes and not isinstance(changes[p], bool)]
    g = config.search.discount
    if not isinstance(g, int | float) or isinstance(g, bool) or not 0 < g <= 1:
        bad.append("search.discount")
    try:
        config_lib.validate(config, num_devices)
    except ValueError as e:
        assert str(e).startswith("invalid config:\n  ") and "\n\n" not in str(e)
        for path in bad:
            assert path in str(e), (path, str(e))
    else:
        assert not bad, bad


def test_train_py_bad_flags_exit_with_one_paragraph(tmp_path):
    """Real `python train.py` runs, all at once: each stops before anything compiles."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    env.pop("AZ_JAX_DEBUG", None)
    cases = {
        "unknown field": (["--config.train.batch_siz=4"], ["did you mean 'batch_size'?"]),
        "wrong type": (["--config.train.batch_size=many"], ["--config.train.batch_size=many"]),
        "bad values": (["--config.train.batch_size=-4", "--config.selfplay.batch_size=3",
                        "--config.train.learning_rate=nan"],
                       ["train.batch_size=-4 must be", "selfplay.batch_size=3 must be divisible "
                        "by the number of devices (2)", "train.learning_rate=nan"]),
        "no config file": (["--config=configs/nope.py"], ["configs/nope.py"]),
        "replay too big": (["--config=configs/gomoku_15x15.py",
                            "--config.replay.capacity=2000000000"],
                           ["replay.capacity=2000000000 needs", "GiB for the replay buffer",
                            "lower replay.capacity to at most"]),
        "empty workdir": (["--workdir="], ["--workdir is empty", "runs/connect4"]),
        "stray argument": (["connect4"], ["unexpected arguments connect4", "--help"]),
        "debug": (["--config.nope=1"], ["Traceback", "'nope'"]),
    }
    procs = {}
    for name, (args, _) in cases.items():
        e = dict(env, AZ_JAX_DEBUG="1") if name == "debug" else env
        procs[name] = subprocess.Popen(
            [sys.executable, "train.py", "--workdir", str(tmp_path / name), *args], cwd=ROOT,
            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        for text in cases[name][1]:
            assert text in err, (name, err)
        if name == "debug":  # AZ_JAX_DEBUG=1: the traceback, by design
            assert proc.returncode != 0
            continue
        assert proc.returncode == 2, (name, err)
        paragraph = err[err.index("error: "):]
        assert "Traceback" not in err, (name, err)
        _one_paragraph(paragraph)
        assert not (tmp_path / name).exists(), f"{name}: the run started"


# =========================================================================== Gomocup
class FirstLegal:
    """What a Brain uses of an Agent, without a network: it plays the first legal point."""

    def __init__(self, env):
        self.env = env
        self._init, self._step = jax.jit(env.init), jax.jit(env.step)

    def new_game(self):
        return self._init(jax.random.PRNGKey(0))

    def play(self, state, action):
        return self._step(state, np.int32(action))

    is_over = staticmethod(agent_lib.Agent.is_over)

    def think(self, state, num_simulations=None):
        return types.SimpleNamespace(action=int(np.argmax(np.asarray(state.legal_action_mask))),
                                     value=0.0, win_rate=0.5, simulations=1)

    def think_for(self, state, seconds, chunk=None):
        return self.think(state)

    def warmup(self, *args, **kwargs):
        pass


_NUM = st.one_of(st.integers(-2, N + 2).map(str), st.integers(-2**70, 2**70).map(str),
                 st.text("0123456789-+ ,", max_size=6),
                 st.sampled_from(["", "9" * 5000, "\u0663", "\uff11", "+4", "4_4", "1e3", "0x4",
                                  "00004", "-0"]))
_COORD = st.builds("{},{}".format, _NUM, _NUM)
_BOARD = st.builds("{},{},{}".format, _NUM, _NUM, st.sampled_from(["1", "2", "3", "0", "-1"]))
_INFO = st.builds("{} {}".format, st.sampled_from(["timeout_turn", "timeout_match", "time_left",
                                                   "rule", "max_memory", "folder", "", "RULE"]),
                  _NUM)
COMMANDS = ["START", "RECTSTART", "RESTART", "BEGIN", "TURN", "BOARD", "DONE", "TAKEBACK",
            "PLAY", "INFO", "ABOUT", "END", "SWAP2BOARD", "PUT"]
_COMMAND = st.builds(lambda cmd, lower, sep, arg: (cmd.lower() if lower else cmd) + sep + arg,
                     st.sampled_from(COMMANDS), st.booleans(),
                     st.sampled_from([" ", "  ", "\t", "", " \x00"]),
                     st.one_of(_COORD, _NUM, _INFO, st.text(max_size=16)))
LINE = st.one_of(st.text(max_size=40), _COMMAND, _BOARD, _COORD)
ANSWER = re.compile(r'OK|(ERROR|UNKNOWN|MESSAGE) .+|[0-9]+,[0-9]+|name="az_jax", .+')


@pytest.fixture(scope="module")
def light_brain():
    out = []
    model = gomocup.Model("first-legal", Path("first-legal"), 1, N, "freestyle", "dense", None)
    loader = lambda model, size, rule: FirstLegal(envs.make("gomoku", size=size, rule=rule))
    return gomocup.Brain(out.append, [model], loader=loader, sims=1), out


def _still_plays(brain, out):
    if brain.board_lines is not None:
        brain.handle("DONE")  # ends a BOARD that the junk opened
    brain.handle("ABOUT")  # answered by a problem with an INFO of the junk, if one waits
    for line, expected in [("START 9", ["OK"]), ("PLAY 4,4", ["4,4"]), ("TURN 0,0", ["1,0"])]:
        out.clear()
        assert brain.handle(line), (line, out)
        assert [a for a in out if not a.startswith("MESSAGE")] == expected, (line, out)


@given(lines=st.lists(LINE, min_size=1, max_size=8))
def test_gomocup_lines_in_process(light_brain, lines):
    """Each line gets its one answer (INFO, BOARD and lines inside BOARD may get none), on
    one ASCII line; only END ends the brain; a game still works after the junk."""
    brain, out = light_brain
    for line in lines:
        text = line.strip()
        in_board = brain.board_lines is not None
        word = (text.split() or [""])[0]  # (any white space separates the words)
        out.clear()
        going = brain.handle(line)
        assert going == (word.upper() != "END"), (line, out)
        for answer in out:
            assert ANSWER.fullmatch(answer) and answer.isascii(), (line, answer)
            assert "internal error" not in answer, (line, answer)
        answers = [a for a in out if not a.startswith("MESSAGE")]
        if not text:
            assert not out
        elif word.upper() == "INFO" and not in_board:
            assert not out, (line, out)  # the protocol: a problem waits for the next command
        elif in_board or word.upper() in ("BOARD", "END"):
            assert len(answers) <= 1, (line, out)
        else:
            assert len(answers) == 1, (line, out)
    _still_plays(brain, out)


def test_gomocup_board_numbers_too_long(light_brain):
    """Found by the fuzz: a BOARD line with 5000 digits was a traceback that ended the brain
    (int() refuses > 4300 digits, outside the ERROR handler)."""
    brain, out = light_brain
    out.clear()
    for line in ["START 9", "BOARD", "9" * 5000 + ",1,1", "DONE"]:  # (answered at DONE)
        brain.handle(line)
    assert out[0] == "OK" and out[1].startswith("ERROR cannot read BOARD line '99999")
    assert len(out[1]) < 200
    _still_plays(brain, out)


_RAW_LINES = [b"\xff\xfe", b"TURN \xff,3", b"\x00\x00", b"A" * 100_000, b"TURN " + b"9" * 5000
              + b",1", b"START \xc3\x28", b"", b" \t ", b"INFO timeout_turn 999999999999999999999",
              b"INFO", b"TURN 4,4\rTURN 5,5", b"\xef\xbb\xbfABOUT", b"\xe2\x82", b"TAKEBACK -1,-1"]
_SKIP = {"END", "BOARD", "ABOUT", "START", "RECTSTART"}  # they would answer other than ERROR


def _exchange(brain, lines: list[bytes]) -> list[str]:
    """Sends raw lines, then ABOUT; returns the answers before ABOUT's."""
    brain.proc.stdin.flush()
    brain.proc.stdin.buffer.write(b"".join(line + b"\r\n" for line in lines) + b"ABOUT\r\n")
    brain.proc.stdin.buffer.flush()
    answers, info_error = [], False
    while True:
        try:  # a problem with an INFO just before ABOUT is ABOUT's answer: ask again
            answer = brain.answer(timeout=2 if info_error else 120)
        except AssertionError:
            if not info_error:
                raise
            brain.send("ABOUT")
            info_error = False
            continue
        if answer.startswith('name="az_jax"'):
            return answers
        answers.append(answer)
        info_error = answer.startswith("ERROR INFO ")


@share(0.4)
@given(lines=st.lists(st.binary(max_size=60).map(lambda b: re.sub(rb"[\r\n]", b" ", b)),
                      max_size=6))
def test_gomocup_subprocess_bytes(brain, lines):
    """Random bytes (not UTF-8 too) on the real brain's stdin, before START: each line is
    answered with ERROR or UNKNOWN (or nothing: empty, INFO), then ABOUT still answers."""
    for line in lines:
        text = line.decode("utf-8", "replace").strip()
        assume(text.partition(" ")[0].upper() not in _SKIP)
        assume((text.split() or [""])[0].upper() not in _SKIP)
    for answer in _exchange(brain, lines):
        assert re.fullmatch(r"(ERROR|UNKNOWN) .+", answer) and "internal" not in answer, answer
    assert brain.proc.poll() is None


def test_gomocup_subprocess_junk_then_a_game(brain):
    answers = _exchange(brain, _RAW_LINES)
    assert len(answers) >= len(_RAW_LINES) - 5  # "", " \t ", INFO lines: no answer; \r: two
    for answer in answers:
        assert re.fullmatch(r"(ERROR|UNKNOWN) .+", answer) and len(answer) < 300, answer
    assert brain.ask("START 9", timeout=600) == "OK"  # compiles the search (once)
    for line, start in [(b"TURN 9,0", "ERROR 9,0 is off the 9x9 board"),
                        (b"TURN " + b"1" * 5000 + b",1", "ERROR cannot read coordinates '1111"),
                        (b"INFO time_left soon", "ERROR INFO time_left needs an integer"),
                        ("TURN \u0663,\u0663".encode(), "ERROR cannot read coordinates"),
                        ("\u0663,\u0663".encode(), "UNKNOWN")]:
        assert _exchange(brain, [line])[0].startswith(start), line
    for line in ["BOARD", "9" * 5000 + ",1,1", "junk", "4,4,2"]:
        brain.send(line)
    # One answer, at DONE: the first problem, and the count of the others.
    answer = brain.ask("DONE")
    assert answer.startswith("ERROR cannot read BOARD line '9999"), answer
    assert "(and 1 more problems)" in answer and len(answer) < 300
    for line in ["BOARD", "4,4,2"]:
        brain.send(line)
    x, y = map(int, brain.ask("DONE").split(","))
    assert (x, y) != (4, 4) and 0 <= x < N and 0 <= y < N
    brain.send("END")
    assert brain.proc.wait(timeout=60) == 0
    assert "Traceback" not in "\n".join(brain.stderr)


# =========================================================================== web
# The game API over real HTTP. Parsing and framing belong to uvicorn/h11 (see
# az_jax/web/server.py); what is fuzzed here is ours: the API's answers to any JSON, move,
# query, method or path, the body size limit, and that the server never hangs or fails.
@pytest.fixture(scope="module")
def server(run):
    agent = agent_lib.Agent.load(workdir=run, num_simulations=1)
    agent.warmup(1)
    srv = web.make_server(agent, "127.0.0.1", 0, sims=1, max_sims=1, max_games=20)
    thread = web.serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def request(server, method: str, path: str, body=None, headers=None):
    """(status, JSON or None for a HEAD) of one request on a fresh connection."""
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    try:
        try:
            conn.request(method, path, body=body, headers=headers or {},
                         encode_chunked=body is not None and not isinstance(body, bytes))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (e.g. 413) and closed before the body was all sent
        r = conn.getresponse()
        data = r.read()
        if method == "HEAD":
            return r.status, None
        assert r.getheader("Content-Type", "").startswith("application/json"), (r.status, data)
        return r.status, json.loads(data)
    finally:
        conn.close()


def _clear(status: int, data) -> None:
    """200 with a JSON object, or a 4xx with a short JSON error message: never a 500."""
    assert isinstance(data, dict), (status, data)
    if status != 200:
        assert 400 <= status < 500, (status, data)
        assert isinstance(data.get("error"), str) and 0 < len(data["error"]) < 500, data


def raw(server, data: bytes, half_close: bool = False) -> tuple[int | None, bytes, bytes]:
    """Sends bytes as they are: (status or None if the server closed without an answer,
    headers, body)."""
    with socket.create_connection(server.server_address[:2], timeout=60) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before all was sent: read what came back
        if half_close:
            s.shutdown(socket.SHUT_WR)
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            buf += chunk
            head, sep, body = buf.partition(b"\r\n\r\n")
            m = re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head)
            if not chunk or (sep and m and len(body) >= int(m.group(1))):
                break
    if not buf:
        return None, b"", b""
    return int(head.split(b" ", 2)[1]), head, body


def _new_game(server) -> str:
    status, game = request(server, "POST", "/api/new", b'{"human": 0}')
    assert status == 200, game
    return game["game_id"]


def _web_still_plays(server) -> None:
    """A valid game after the junk: a new game, a move, the AI's reply."""
    gid = _new_game(server)
    status, state = request(server, "POST", "/api/move",
                            json.dumps({"game_id": gid, "move": "E5"}).encode())
    assert status == 200 and state["moves"][0] == "E5" and len(state["moves"]) == 2, state


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                               max_size=3), max_leaves=8)
_ACTION = st.integers(-3, N * N + 3) | st.integers() | _JSON
_MOVE = st.sampled_from(["E5", "A1", "J9", "e5", "Z0", "", "5E", "E 5"]) | st.text(max_size=40) \
    | _JSON
_FIELDS = st.fixed_dictionaries({}, optional={
    "game_id": st.sampled_from(["<GAME>", "nope", ""]) | _JSON,
    "action": _ACTION, "move": _MOVE, "sims": st.integers(-2, 3) | _JSON,
    "human": st.sampled_from([0, 1, 2, -1, "first", "second", "black", "white", "x" * 40]) | _JSON,
})
TRICKY = [b"[" * 50_000, b'{"sims": ' + b"9" * 5000 + b"}", b"NaN", b'{"sims": NaN}',
          b'{"action": 1e999}', b"\xef\xbb\xbf{}", b'{"human": 0, "human": "x"}',
          b'{"game_id": "<GAME>", "action": ' + b"4" * 4000 + b"}", b"\xff\xfe", b"  ", b""]
BODY = st.one_of(
    _FIELDS.map(lambda d: json.dumps(d).encode()), _JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=80), st.text(max_size=40).map(str.encode), st.sampled_from(TRICKY))
ENDPOINTS = ["/api/new", "/api/move", "/api/undo", "/api/hint"]


@share(0.6)
@given(path=st.sampled_from(ENDPOINTS), body=BODY, chunked=st.booleans())
def test_web_post_bodies(server, path, body, chunked):
    """Any body to any POST endpoint, with a Content-Length or chunked: 200, or a 4xx with a
    JSON error message; then a game still plays."""
    body = body.replace(b'"<GAME>"', json.dumps(_new_game(server)).encode())
    sent = iter([body[:7], body[7:]]) if chunked else body
    _clear(*request(server, "POST", path, sent, {"Content-Type": "application/json"}))
    _web_still_plays(server)


@pytest.mark.parametrize("body", TRICKY, ids=range(len(TRICKY)))
def test_web_tricky_bodies(server, body):
    """Each of the bodies above that broke a JSON reader once, to each POST endpoint."""
    body = body.replace(b'"<GAME>"', json.dumps(_new_game(server)).encode())
    for path in ENDPOINTS:
        _clear(*request(server, "POST", path, body))


# One game, driven by random calls: mostly its own id, with moves that are often legal.
_STEP = st.tuples(
    st.sampled_from([*ENDPOINTS[1:], "/api/game"]),
    st.fixed_dictionaries({"game_id": st.just("<GAME>")}, optional={
        "action": st.integers(0, N * N - 1) | _ACTION, "move": _MOVE, "sims": st.just(1)})
    | _FIELDS)


@share(0.6)
@given(human=st.sampled_from([0, 1, "first", "second"]), steps=st.lists(_STEP, max_size=8))
def test_web_game_api_sequences(server, human, steps):
    """A game under random calls (move, undo, hint, game; random or legal moves): each gets
    200 or a clear 4xx; each 200 is a consistent view of this game, the same one that
    /api/game then gives; after the calls, a game still plays."""
    status, view = request(server, "POST", "/api/new", json.dumps({"human": human}).encode())
    assert status == 200, view
    gid, human_side = view["game_id"], view["human"]
    for path, fields in steps:
        fields = {k: gid if v == "<GAME>" else v for k, v in fields.items()}
        if path == "/api/game":
            query = urllib.parse.urlencode({"id": fields.get("game_id", "")}, doseq=False)
            status, data = request(server, "GET", f"/api/game?{query}")
        else:
            status, data = request(server, "POST", path, json.dumps(fields).encode())
        _clear(status, data)
        if status == 200 and data["game_id"] == gid:
            view = data
            assert view["human"] == human_side and all(isinstance(m, str) for m in view["moves"])
            assert view["over"] or (view["legal"] and all(
                0 <= a < N * N for a in view["legal"])), view
            assert view["your_turn"] == (not view["over"] and view["to_move"] == view["human"])
    status, again = request(server, "GET", f"/api/game?id={gid}")
    assert status == 200 and again["moves"] == view["moves"], (again, view)
    _web_still_plays(server)


_QUERY = st.one_of(
    st.dictionaries(st.sampled_from(["id", "ID", "id[]", "x", ""]), st.text(max_size=20),
                    max_size=3).map(urllib.parse.urlencode),
    st.text(string.ascii_letters + string.digits + "=&%;+-_./?", max_size=60))
_PATH = st.sampled_from(["/", "/index.html", "/static/app.js", "/static/nope.js", "/static/",
                         "/static/../server.py", "/api/info", "/api/game", "/api/nope", "/api",
                         "/nope", "//api/info", *ENDPOINTS])
_METHOD = st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"]) \
    | st.text(string.ascii_uppercase, min_size=1, max_size=8)


@share(0.6)
@given(method=_METHOD, path=_PATH, query=_QUERY)
def test_web_any_method_path_and_query(server, method, path, query):
    """Every method, path and query string: a page, a JSON answer, or a clear JSON 4xx (405
    names the allowed methods in Allow)."""
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    try:
        conn.request(method, f"{path}?{query}" if query else path,
                     body=b"{}" if method not in ("GET", "HEAD") else None)
        r = conn.getresponse()
        data = r.read()
    finally:
        conn.close()
    assert r.status < 500, (method, path, query, r.status, data)
    if r.status == 405:
        assert method not in r.getheader("Allow").split(", "), r.getheader("Allow")
    if r.getheader("Content-Type").startswith("application/json"):
        if method != "HEAD":
            _clear(r.status, json.loads(data))
    else:  # the page and its files, by GET or HEAD
        assert r.status == 200 and method in ("GET", "HEAD"), (method, path, r.status, data)


def test_web_body_limits(server):
    """At most MAX_BODY bytes, however sent; a POST must say how long its body is."""
    limit = web.server.MAX_BODY
    gid = _new_game(server)
    move = json.dumps({"game_id": gid, "move": "E5"}).encode()
    # A body of exactly the limit is read (JSON may be padded with spaces), chunked too.
    status, state = request(server, "POST", "/api/move", iter([move, b" " * (limit - len(move))]))
    assert status == 200 and state["moves"][0] == "E5", state
    for body in [b" " * (limit + 1), iter([b"{", b" " * limit, b"}"])]:
        status, err = request(server, "POST", "/api/new", body)
        assert status == 413 and "too large" in err["error"], err
    status, head, body = raw(server, b"POST /api/new HTTP/1.1\r\nHost: x\r\nContent-Length: "
                                     b"999999999999\r\n\r\n{}")
    assert status == 413 and b"too large" in body
    status, head, body = raw(server, b"POST /api/new HTTP/1.1\r\nHost: x\r\n\r\n{}")
    assert status == 411 and b"Content-Length" in body
    _web_still_plays(server)


JUNK = [b"\x00\xff junk\r\n\r\n", b"GARBAGE\r\n\r\n", b"POST /api/new HTTP/1.1\r\n\r\n{}",
        b"POST /api/new HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
        b"POST /api/new HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{} ",
        b"POST /api/new HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n{}",
        b"POST /api/new HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n",
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"]


@share(0.4)
@given(data=st.sampled_from(JUNK) | st.binary(min_size=1, max_size=80).map(
    lambda b: b + b"\r\n\r\n"))
def test_web_junk_bytes(server, data):
    """Bytes that are no HTTP request: a 4xx or a closed connection, and a game still
    plays."""
    status, head, body = raw(server, data)
    assert status is None or 400 <= status < 500, (data[:80], status, body)
    _web_still_plays(server)


def test_web_short_bodies_and_silent_clients(server):
    # Shorter than its Content-Length, then the client stops sending: no answer needed, at once.
    t0 = time.monotonic()
    status, _, _ = raw(server, b"POST /api/new HTTP/1.1\r\nHost: x\r\nContent-Length: 100"
                               b"\r\n\r\n{}", half_close=True)
    assert status in (None, 400) and time.monotonic() - t0 < 30
    # A client that promises a body and sends nothing more holds only its own connection.
    with socket.create_connection(server.server_address[:2], timeout=60) as silent:
        silent.sendall(b"POST /api/move HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.monotonic()
        _web_still_plays(server)
        assert time.monotonic() - t0 < 30
    assert request(server, "GET", "/api/info")[0] == 200


@pytest.mark.parametrize("field, value, message", [
    ("eval.max_share", 1.0, "eval.max_share=1.0 must be a finite number >= 0 and < 1"),
    ("eval.max_share", 0.99, None),
    ("seed", 2**32, f"seed={2**32} must be an integer from 0 to {2**32 - 1}"),
    ("seed", -1, "seed=-1 must be an integer from 0 to"),
    ("seed", 2**32 - 1, None),
    ("search.num_simulations", 100_001,
     "search.num_simulations=100001 must be from 1 to 100000"),
    ("eval.num_simulations", 10**9, "eval.num_simulations=1000000000 must be from 1 to 100000"),
    ("search.num_simulations", 100_000, None),
    ("search.dirichlet_fraction", 1.5,
     "search.dirichlet_fraction=1.5 must be a finite number >= 0 and <= 1"),
    ("search.dirichlet_fraction", 1.0, None),
    # replay.min_size "must not exceed replay.capacity" (the default config's 100000).
    ("replay.min_size", 100_000, None),
    ("replay.min_size", 100_001, "replay.min_size must not exceed replay.capacity"),
])
def test_limits_where_a_value_would_silently_mean_another(field, value, message):
    """eval.max_share=1 fitted a run to a few iterations, and PRNGKey keeps 32 bits of the
    seed, so seed 2**32 was seed 0's run: both are refused at the start now. Simulations
    have the command lines' bound (a tree of 10**9 nodes overflowed or ran out of memory
    after compiling)."""
    from az_jax import config as config_lib
    from configs import default

    c = default.get_config()
    group, _, name = field.rpartition(".")
    (c[group] if group else c)[name] = value
    if message is None:
        config_lib.validate(c, 1)
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        config_lib.validate(c, 1)
