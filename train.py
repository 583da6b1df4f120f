"""Train an AlphaZero agent: self-play, replay, learning, evaluation, checkpoints.

    python train.py                                    # Connect4, sized for this machine
    python train.py --config configs/tictactoe.py --workdir runs/ttt
    python train.py --config configs/connect4.py --config.search.num_simulations=64

Runs resume from the newest checkpoint in --workdir. Ctrl-C saves and stops.
Multi-host: --coordinator HOST:PORT --num_processes N --process_id I (or a TPU/SLURM
environment, detected by jax.distributed.initialize()).
A bad flag or config value stops the run before anything compiles, with one `error:`
paragraph and exit status 2 (AZ_JAX_DEBUG=1 shows the traceback instead).
"""

import difflib
import os
import re
import sys

from absl import app, flags, logging
from ml_collections import config_dict, config_flags

from az_jax import parallel_setup

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(ROOT, "configs", "connect4.py")
_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]*)")  # --config.a.b=v -> "a.b"


def define_flags(flag_values: flags.FlagValues, argv: list[str]) -> None:
    """Defines --config (and its --config.a.b=value overrides), --workdir and the multi-host
    flags on `flag_values`. Without --config in `argv`, ml_collections reads the default
    config file and `argv`'s overrides here already."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)  # `from configs import ...` in the config files
    config_flags.DEFINE_config_file(
        "config", DEFAULT_CONFIG,
        "Training config file (configs/<game>.py). Override fields with --config.a.b=value.",
        flag_values=flag_values, lock_config=True, sys_argv=argv)
    flags.DEFINE_string("workdir", None, "Where checkpoints, metrics.jsonl and plots go "
                        "(default: runs/<env id>).", flag_values=flag_values)
    flags.DEFINE_string("coordinator", None, "Multi-host: coordinator address HOST:PORT.",
                        flag_values=flag_values)
    flags.DEFINE_integer("num_processes", None, "Multi-host: total number of processes.",
                         flag_values=flag_values)
    flags.DEFINE_integer("process_id", None, "Multi-host: this process's index.",
                         flag_values=flag_values)


def parse_flags(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Defines and parses the flags (see `define_flags`). Returns the arguments that are no
    flags (absl's convention: argv[0] first).

    Raises:
      ValueError: one paragraph naming the flag at fault (the original exception is its
        `__cause__`).
    """
    try:
        define_flags(flag_values, argv)
        rest = flag_values(argv)
        config = flag_values["config"].value
        # A config file that cannot be read gives an object that raises only when used.
        config.get("env")
    except Exception as e:  # noqa: BLE001 - ml_collections and absl raise many kinds
        raise ValueError(_flag_error(e, argv)) from e
    if not isinstance(config, config_dict.ConfigDict):
        raise ValueError(f"get_config() in {_config_path(argv)} returned "
                         f"{type(config).__name__}, not an ml_collections.ConfigDict")
    return rest


def _config_path(argv: list[str]) -> str:
    """The value of the last --config in `argv` (the default file when there is none)."""
    path = DEFAULT_CONFIG
    for i, arg in enumerate(argv[1:], 1):
        if arg in ("--config", "-config") and i + 1 < len(argv):
            path = argv[i + 1]
        elif m := re.match(r"^--?config=(.*)$", arg, re.DOTALL):
            path = m.group(1)
    return path


def _unknown_field(argv: list[str]) -> str | None:
    """Describes the first --config.a.b override that names no field of the config (None
    when every path exists, or when the config file itself cannot be read)."""
    base = [argv[0] if argv else "train.py", f"--config={_config_path(argv)}"]  # no overrides
    try:
        fv = flags.FlagValues()
        config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=base)
        fv(base)
        config = fv.config
        config.get("env")
    except Exception:  # noqa: BLE001 - reported by the caller as it is
        return None
    for arg in argv[1:]:
        m = _OVERRIDE.match(arg)
        if not m:
            continue
        node, parts = config, m.group(1).split(".")
        for i, part in enumerate(parts):
            where = "config." + ".".join(parts[:i]) if i else "the config"
            if not isinstance(node, config_dict.ConfigDict):
                return (f"{arg[:80]}: {where} is a value ({type(node).__name__}), not a group "
                        "of fields")
            if part not in node:
                fields = sorted(node.keys())
                close = difflib.get_close_matches(part, fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return (f"{arg[:80]}: {where} has no field {part[:40]!r}{hint}; its fields: "
                        f"{', '.join(fields) or 'none'} (see configs/default.py)")
            node = node[part]
    return None


def _unreadable_config(path: str, cause: BaseException) -> str:
    """Why --config `path` cannot be read, and what to give instead (ml_collections' own
    message names its flag holder, "config_config", not the file)."""
    folder = os.path.relpath(os.path.join(ROOT, "configs"))
    if folder.startswith(".."):
        folder = os.path.join(ROOT, "configs")
    shipped = ", ".join(sorted(os.path.join(folder, f) for f in os.listdir(folder)
                               if f.endswith(".py") and not f.startswith("_")))
    if not os.path.exists(path):
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
        return (f"cannot read the config file {path}: there is no such file{where}; give "
                f"--config one of {shipped}")
    if os.path.isdir(path):
        return f"cannot read the config file {path}: it is a directory; give --config a " \
               f"file such as {shipped.split(', ')[0]}"
    while isinstance(cause.__cause__, OSError):  # the innermost error names the problem
        cause = cause.__cause__
    why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
    return f"cannot read the config file {path}: {why}"


def _flag_error(e: Exception, argv: list[str]) -> str:
    """One paragraph for an exception raised while defining or parsing the flags."""
    if not isinstance(e, flags.Error):
        unknown = _unknown_field(argv)
        if unknown:
            return unknown
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    if isinstance(e, OSError) and e.__cause__ is not None:  # the config file is unreadable
        text = _unreadable_config(_config_path(argv), e.__cause__)
    lines = [line for line in text.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        text = f"{lines[0]} {lines[-1]}"  # ml_collections puts a traceback in its message
    text = " ".join(text.split())
    if isinstance(e, flags.Error) or text.startswith("cannot read"):
        return text
    return f"--config {_config_path(argv)} and its overrides: {type(e).__name__}: {text}"


def _flags_parser(argv: list[str]) -> list[str]:
    """`parse_flags` for `app.run`: an error is one paragraph on stderr, exit status 2."""
    try:
        return parse_flags(argv)
    except ValueError as e:
        if os.environ.get("AZ_JAX_DEBUG") and e.__cause__ is not None:
            raise e.__cause__ from None  # its own traceback, for bug reports
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    FLAGS = flags.FLAGS
    parallel_setup.initialize_distributed(FLAGS.coordinator, FLAGS.num_processes,
                                          FLAGS.process_id)
    parallel_setup.use_compilation_cache()  # $AZ_JAX_CACHE, default ~/.cache/az_jax/jax
    from az_jax import trainer  # after the distributed runtime is up

    config = FLAGS.config
    workdir = FLAGS.workdir or os.path.join("runs", config.env.id.replace(":", "_"))
    try:
        trainer.train_and_evaluate(config, workdir)
    except (ValueError, OSError) as e:
        if os.environ.get("AZ_JAX_DEBUG"):  # the full traceback, for bug reports
            raise
        from az_jax import checkpoint  # a full disk on any write: say where to resume

        e = checkpoint.disk_full_error(e, workdir, "writing the run's files") or e
        print(f"error: {e}", file=sys.stderr, flush=True)
        from az_jax import workdir as runs

        # The late tracebacks of orbax's threads (failed writes, or restores that failed
        # before the run was refused) would bury the one line above.
        if isinstance(e, checkpoint.DiskFullError | runs.RunMismatch):
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        sys.exit(2)


if __name__ == "__main__":
    parallel_setup.use_all_cpu_cores()  # before anything initialises JAX (config files do)
    app.run(main, flags_parser=_flags_parser)
