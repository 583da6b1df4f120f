"""Command-line pieces shared by the front ends (no JAX import: `--help` stays fast)."""


def add_source_args(parser, workdir_help: str = "a training run's directory (its newest "
                                                     "checkpoint)") -> None:
    """The model source flags every front end takes: exactly one of --workdir,
    --checkpoint or --model (see `checkpoint.load`)."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--workdir", help=workdir_help)
    src.add_argument("--checkpoint", metavar="PATH",
                     help="one checkpoint directory: <workdir>/checkpoints/<iteration>")
    src.add_argument("--model", metavar="NAME",
                     help="a model shipped with the package (see az_jax/models/)")
