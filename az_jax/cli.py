"""Command-line pieces shared by the front ends (no JAX import: `--help` stays fast)."""

import sys
from pathlib import Path

MODELS = Path(__file__).parent / "models"


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
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return None
