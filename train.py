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

import os
import sys
import time

from absl import app, flags, logging

from az_jax import config as config_lib
from az_jax import parallel_setup

STARTED = time.monotonic()  # train.minutes counts from here: start-up is part of the run


def define_flags(flag_values: flags.FlagValues, argv: list[str]) -> None:
    """Defines --config (and its --config.a.b=value overrides), --workdir and the multi-host
    flags on `flag_values` (see `config.define_config_flag`)."""
    config_lib.define_config_flag(
        flag_values, argv,
        "Training config file (configs/<game>.py). Override fields with --config.a.b=value; "
        "every field is commented in configs/default.py.")
    flags.declare_key_flag("config", flag_values=flag_values)  # listed by --help
    flags.DEFINE_string("workdir", None, "Where checkpoints, metrics.jsonl and plots go "
                        "(default: runs/<env id>).", flag_values=flag_values)
    _define_multihost_flags(flag_values)


def _define_multihost_flags(flag_values: flags.FlagValues) -> None:
    flags.DEFINE_string("coordinator", None, "Multi-host: coordinator address HOST:PORT.",
                        flag_values=flag_values)
    flags.DEFINE_integer("num_processes", None, "Multi-host: total number of processes.",
                         lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer("process_id", None, "Multi-host: this process's index, 0 to "
                         "num_processes - 1.", lower_bound=0, flag_values=flag_values)


def parse_flags(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Defines and parses the flags. Returns the arguments that are no flags.

    Raises:
      ValueError: one paragraph naming the flag at fault (`config.parse_flags`).
    """
    return config_lib.parse_flags(argv, flag_values, define_flags)


def start_distributed(argv: list[str]) -> None:
    """Starts the distributed runtime (`parallel_setup.initialize_distributed`) from the
    multi-host flags in `argv`, before the config file is read: configs/<game>.py asks JAX
    for its backend (`default.on_cpu`), and `jax.distributed.initialize` refuses to start
    once a backend is up. A malformed multi-host flag is left to `parse_flags` to report."""
    flag_values = flags.FlagValues()
    _define_multihost_flags(flag_values)
    try:
        flag_values(argv, known_only=True)
    except flags.Error:
        return
    parallel_setup.initialize_distributed(flag_values.coordinator, flag_values.num_processes,
                                          flag_values.process_id)


def _flags_parser(argv: list[str]) -> list[str]:
    """`parse_flags` for `app.run` (the distributed runtime started first): an error is one
    paragraph on stderr, exit status 2."""
    start_distributed(argv)
    try:
        return parse_flags(argv)
    except ValueError as e:
        if os.environ.get("AZ_JAX_DEBUG") and e.__cause__ is not None:
            raise e.__cause__ from None  # its own traceback, for bug reports
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {' '.join(argv[1:])}: train.py takes flags only "
              "(--config FILE, --workdir DIR, --config.a.b=value; python train.py --help)",
              file=sys.stderr)
        sys.exit(2)
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    FLAGS = flags.FLAGS  # jax.distributed is up already (`start_distributed`)
    parallel_setup.use_compilation_cache()  # $AZ_JAX_CACHE, default ~/.cache/az_jax/jax
    from az_jax import checkpoint, trainer  # after the distributed runtime is up

    checkpoint.plain_warnings()

    config = FLAGS.config
    default = os.path.join("runs", config.env.id.replace(":", "_"))
    if FLAGS.workdir is not None and not FLAGS.workdir.strip():
        print(f"error: --workdir is empty: name the run's folder, or leave the flag out for "
              f"{default}", file=sys.stderr)
        sys.exit(2)
    workdir = FLAGS.workdir or default
    try:
        trainer.train_and_evaluate(config, workdir, started=STARTED)
    except (ValueError, OSError) as e:
        if os.environ.get("AZ_JAX_DEBUG"):  # the full traceback, for bug reports
            raise
        e = checkpoint.disk_full_error(e, workdir, "writing the run's files") or e
        print(f"error: {e}", file=sys.stderr, flush=True)
        from az_jax import workdir as runs

        # The late tracebacks of orbax's threads (failed writes, or restores that failed
        # before the run was refused) would bury the one line above.
        if isinstance(e, checkpoint.DiskFullError | runs.RunMismatch):
            checkpoint.quiet_exit(2)
        sys.exit(2)


if __name__ == "__main__":
    # Before anything initialises JAX (config files do); 1, 2, 4 or 8 devices, which the
    # configs' batch sizes divide by (a 6-core machine trains on 4).
    parallel_setup.use_all_cpu_cores(power_of_two=True)
    app.run(main, flags_parser=_flags_parser)
