"""The front ends' command lines: help texts that name what exists, one-line errors (exit
status 2) for a bad port or a missing config file, SIGTERM as Ctrl-C."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags

from az_jax import checkpoint, cli, evaluate, gomocup, play
from az_jax.web import server

ROOT = Path(__file__).resolve().parents[1]


def _help(parser) -> str:
    return parser.format_help()


def test_help_texts_name_models_that_exist():
    shipped = checkpoint.shipped_models()
    assert cli.shipped_models() == shipped and "gomoku_15x15" in shipped
    for parser in (play.build_parser(), server.build_parser(), gomocup.build_parser()):
        text = _help(parser)
        for name in re.findall(r"--model ([a-z]\w*)", text):
            assert name in shipped, (parser.prog, name)
        assert "gomoku15" not in text and "runs/g15" not in text
        games = [m for m in shipped if parser.prog != "python -m az_jax.gomocup"
                 or m.startswith("gomoku")]  # the brain plays Gomoku only
        assert ", ".join(games) in " ".join(text.split())  # --model lists them
        assert len(games) >= 4 and ("connect4" in text) == ("connect4" in games)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Play against a model"):]
    section = section[:section.index("\n## ", 3)]
    for name in re.findall(r"--model ([a-z]\w*)", section):
        assert name in shipped, name


def test_readme_set_up_is_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Set up"):]
    section = section[:section.index("\n## ", 3)]
    commands = [line.strip() for line in section.splitlines() if line.startswith("    ")]
    assert len(commands) == 2, commands  # install and train; install and test
    train, test = commands
    for command in commands:  # a fresh machine's Python may refuse a system-wide install
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && "), command
    assert train.endswith("pip install -e . && python train.py"), train
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == test, (ci[-1], test)
    assert "pytest" in test and '".[test,solver]"' in test


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_web_bad_port_is_one_line(port, capsys):
    assert server.main(["--model", "connect4", "--port", port]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --port must be in 0..65535 (0 = any free port), got {port}\n"


def test_web_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert server.main(["--model", "tictactoe", "--port", str(port), "--no-warmup"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert "choose another --port, or --port 0" in err


@pytest.mark.parametrize("host", ["999.1.1.1", "10.255.255.1"])  # no name; not this machine's
def test_web_bad_host_is_one_line_about_the_host(host, capsys):
    assert server.main(["--model", "tictactoe", "--host", host, "--no-warmup"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: cannot listen on {host}:8000: ")
    assert "--host names no address of this machine" in err and "--port" not in err


@pytest.mark.parametrize("host", ["a" * 64, "\u00e9" * 64])
def test_web_host_name_with_a_part_over_63_characters_is_one_line(host):
    """A part between dots over 63 characters: an argparse error that says what to give,
    before the model loads (it was a long resolver message with the name twice, or a
    TypeError traceback, 'encoding of hostname failed', for a non-ASCII one)."""
    proc = subprocess.run([sys.executable, "-m", "az_jax.web", "--model", "tictactoe",
                           "--host", host, "--port", "0", "--no-warmup"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env={"JAX_PLATFORMS": "cpu",
                                                                 "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"python -m az_jax.web: error: argument --host: '{host[:40]}...' "
                           "is not a host name (at most 253 characters, each part between "
                           "dots 1 to 63): give an address of this machine, 127.0.0.1"), last
    assert server.build_parser().parse_args(["--model", "m", "--host", "a" * 63]).host


def test_missing_config_file_names_it(tmp_path):
    sys.path.insert(0, str(ROOT))
    try:
        import train
    finally:
        sys.path.remove(str(ROOT))
    for argv, expected in [
            (["--config", "configs/nope.py"], "cannot read the config file configs/nope.py: "
                                              "there is no such file"),
            ([f"--config={tmp_path}"], f"cannot read the config file {tmp_path}: it is a "
                                       "directory")]:
        with pytest.raises(ValueError) as e:
            train.parse_flags(["train.py", *argv], flags.FlagValues())
        text = str(e.value)
        assert text.startswith(expected) and "config_config" not in text
        assert re.search(r"configs/\w+\.py", text)  # what to give instead


def test_train_help_lists_the_config_flag():
    proc = subprocess.run([sys.executable, "train.py", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120,
                          env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert proc.returncode in (0, 1)  # absl's --help exits with 1
    assert "--config: Training config file" in proc.stdout and "--workdir:" in proc.stdout


def test_train_cli_missing_config_exit_2():
    proc = subprocess.run([sys.executable, "train.py", "--config", "configs/nope.py"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cannot read the config file configs/nope.py: there "
                                  "is no such file")


@pytest.mark.parametrize("argv, error", [
    (["--sims", "99999999999"], "argument --sims: 99999999999 is out of range: give an "
                                "integer from 1 to 100000"),
    (["--sims", "0"], "argument --sims: 0 is out of range: give an integer from 1 to 100000"),
    (["--sims", "many"], "argument --sims: 'many' is not an integer"),
    (["--ai-vs-ai", "--delay", "-1"], "argument --delay: -1: give a number of seconds, 0 or "
                                      "more"),
    (["--delay", "inf"], "argument --delay: inf: give a number of seconds, 0 or more"),
    (["--top", "-1"], "argument --top: -1 is out of range: give an integer of at least 0"),
    (["--ai-vs-ai", "--delay", "1e300"], "argument --delay: 1e300: give a number of seconds "
                                         "from 0 to 3600"),
    (["--seed", "4294967296"], "argument --seed: 4294967296 is out of range: give an integer "
                               "from 0 to 4294967295"),
])
def test_play_arguments_out_of_range_are_one_line(argv, error, capsys):
    """Numbers a front end cannot use stop at the command line (argparse, exit status 2):
    not a crash in the middle of a game or an int32 overflow in the search."""
    with pytest.raises(SystemExit) as e:
        play.build_parser().parse_args(["--model", "connect4", *argv])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"python -m az_jax.play: error: {error}"


def test_one_integer_type_serves_every_command_line():
    """solver_bench (evaluation, a layer below `cli`) had its own copy of `cli.integer` for
    --seed; both now use `az_jax.argtypes.integer`, and `cli.integer` still names it
    (tests/test_solver_sets.py checks solver_bench's seeds)."""
    from az_jax import argtypes
    from az_jax.eval import solver_bench

    assert cli.integer is argtypes.integer and not hasattr(solver_bench, "_seed")
    assert solver_bench.integer is argtypes.integer
    # And one list-of-counts type for --sims (solver_bench had its own, with no upper bound).
    assert cli.counts is argtypes.counts and not hasattr(solver_bench, "_sims_list")


@pytest.mark.parametrize("argv", [["--sims", "100001"], ["--sims", "64,0"], ["--sims", "x"]])
def test_solver_bench_sims_are_bounded_like_every_front_end_s(argv, capsys):
    from az_jax.eval import solver_bench

    with pytest.raises(SystemExit) as e:
        solver_bench.main(["evaluate", "positions.txt", "--workdir", "w", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "--sims" in err and f"from 1 to {cli.MAX_SIMULATIONS}" in err, err


@pytest.mark.parametrize("parser, argv, flag", [
    (server.build_parser, ["--model", "tictactoe", "--max-games", "0"], "--max-games"),
    (server.build_parser, ["--model", "tictactoe", "--max-sims", "0"], "--max-sims"),
    (gomocup.build_parser, ["--turn-ms", "-5"], "--turn-ms"),
    (gomocup.build_parser, ["--chunk", "0"], "--chunk"),
    (gomocup.build_parser, ["--sims", "100001"], "--sims"),
    (gomocup.build_parser, ["--seed", "99999999999999999999"], "--seed"),
    (server.build_parser, ["--model", "tictactoe", "--seed", "4294967296"], "--seed"),
    (evaluate.build_parser, ["--workdir", "w", "--seed", "-1"], "--seed"),
])
def test_server_and_brain_limits_are_checked(parser, argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2
    assert f"error: argument {flag}: " in capsys.readouterr().err
    assert parser().parse_args(argv[:-1] + ["1"])  # the smallest that works


def test_shipped_models_are_the_folders_with_checkpoints(tmp_path, monkeypatch):
    """`--model NAME` lists only folders that hold a model (a `checkpoints/` folder): not an
    empty folder, a stray file, or a folder with other files."""
    (tmp_path / "real" / checkpoint.SUBDIR).mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "train.log").write_text("")
    (tmp_path / "README").write_text("")
    monkeypatch.setattr(checkpoint, "MODELS_DIR", tmp_path)
    monkeypatch.setattr(cli, "MODELS", tmp_path)  # the front ends' help, without JAX
    assert checkpoint.shipped_models() == cli.shipped_models() == ["real"]
    monkeypatch.setattr(checkpoint, "MODELS_DIR", tmp_path / "missing")
    monkeypatch.setattr(cli, "MODELS", tmp_path / "missing")
    assert checkpoint.shipped_models() == cli.shipped_models() == []


def test_the_bounds_themselves_are_accepted():
    """`integer(low, high)` and `seconds` take their bounds: --sims 100000, --delay 0."""
    assert play.build_parser().parse_args(["--model", "connect4", "--sims", "100000",
                                           "--delay", "0"]).sims == 100_000
    assert cli.integer(1, 5)("5") == 5 and cli.integer(1, 5)("1") == 1
    assert cli.integer(0)("0") == 0 and cli.seconds("0") == 0.0 and cli.seconds("2.5") == 2.5
    assert cli.seconds("3600") == 3600.0 and cli.seconds("1", high=1.0) == 1.0
    assert play.build_parser().parse_args(["--model", "connect4", "--seed", "4294967295"]).seed \
        == 2**32 - 1  # jax.random.PRNGKey's largest (32 bits without x64)


def test_a_checkpoint_named_by_other_digits_is_refused_as_such(tmp_path):
    """`--checkpoint .../checkpoints/²`: '²'.isdigit() is True, and int('²') failed with
    "invalid literal for int()"; it is now the usual "not a checkpoint directory"."""
    path = tmp_path / checkpoint.SUBDIR / "\u00b2"
    path.mkdir(parents=True)
    with pytest.raises(ValueError, match="is not a checkpoint directory: expected"):
        checkpoint.load(checkpoint=str(path))


def test_sigterm_stops_the_command_as_ctrl_c_and_the_handler_is_restored():
    import os
    import signal

    seen = []

    def handler(signum, frame):
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(cli.Terminated), cli.sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes of the main thread
                pass
        assert signal.getsignal(signal.SIGTERM) is handler  # the handler from before is back
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
        assert issubclass(cli.Terminated, KeyboardInterrupt)  # `finally` blocks run
    finally:
        signal.signal(signal.SIGTERM, previous)
