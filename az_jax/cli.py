"""Command-line pieces shared by the front ends (no JAX import: `--help` stays fast)."""

import argparse
import contextlib
import ipaddress
import math
import signal
import sys
import threading
from pathlib import Path

from az_jax import MAX_SEED, MAX_SIMULATIONS  # noqa: F401 - the front ends' bounds
from az_jax.argtypes import counts, integer  # noqa: F401 - the front ends' number types

MODELS = Path(__file__).parent / "models"
MAX_SECONDS = 3600.0  # the longest pause `seconds` takes (time.sleep overflows past ~1e9 s)


def seconds(text: str, high: float = MAX_SECONDS) -> float:
    """An argparse type: a finite number of seconds from 0 to `high`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds, 0 or more")
    if value > high:
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds from 0 to "
                                         f"{high:g}")
    return value


def host(text: str) -> str:
    """An argparse type: an address or a host name to listen on ("": every interface). A
    name DNS cannot hold (a part between dots empty or over 63 characters, or the whole over
    253) is a one-line error saying what to give, before anything loads (it was an IDNA
    codec error, or a traceback for a long non-ASCII part)."""
    if not text:  # as socket has it: every interface
        return text
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(text)
        return text
    try:
        encoded = text.encode("idna")
    except UnicodeError:
        encoded = b""
    if not encoded or len(encoded.rstrip(b".")) > 253:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise argparse.ArgumentTypeError(
            f"{shown!r} is not a host name (at most 253 characters, each part between "
            "dots 1 to 63): give an address of this machine, 127.0.0.1 for it alone or "
            "0.0.0.0 for every interface, or its name")
    return text


def shipped_models() -> list[str]:
    """The names --model accepts: `checkpoint.shipped_models`, without importing JAX."""
    if not MODELS.is_dir():
        return []
    return sorted(p.name for p in MODELS.iterdir() if (p / "checkpoints").is_dir())


def add_source_args(parser, workdir_help: str = "a training run's directory (its newest "
                                                     "checkpoint)") -> None:
    """The model source flags every front end takes: exactly one of --workdir,
    --checkpoint or --model (see `checkpoint.load`)."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--workdir", help=workdir_help)
    src.add_argument("--checkpoint", metavar="PATH",
                     help="one checkpoint directory: <workdir>/checkpoints/<iteration>")
    src.add_argument("--model", metavar="NAME",
                     help="a model shipped with the package: " + (", ".join(shipped_models())
                                                                  or "none in az_jax/models/"))


def load_agent(args, num_simulations: int | None, then=None):
    """Loads the agent that the source flags name (`add_source_args`, and `args.seed`).

    A missing or unreadable model, or a flag the model rejects, is the user's mistake, not
    a bug: it prints `error: <message>` on stderr, no traceback, and returns None, for the
    caller to exit with status 2.

    Args:
      args: the parsed flags: workdir, checkpoint, model, seed.
      num_simulations: the agent's simulations per move (None: the run's own).
      then: optional `then(agent)`, run under the same guard (e.g. parsing a side, binding
        a port), so that its ValueError/OSError reads the same way.
    Returns:
      (agent, then(agent) or None), or None after an error.
    """
    from az_jax import agent as agent_lib  # imports JAX: not at the top, for a fast --help

    try:
        agent = agent_lib.Agent.load(workdir=args.workdir, checkpoint=args.checkpoint,
                                     model=args.model, num_simulations=num_simulations,
                                     seed=args.seed)
        return agent, (None if then is None else then(agent))
    except (ValueError, FileNotFoundError, OSError, OverflowError) as e:
        print(f"error: {e}", file=sys.stderr)
        return None


class Terminated(KeyboardInterrupt):
    """SIGTERM under `sigterm_as_interrupt`: the command stops as on Ctrl-C, through its
    `finally` blocks (what it started ends with it), instead of dying at once."""


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM raises `Terminated` in the main thread (called from another
    thread, nothing changes: signal handlers belong to the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
