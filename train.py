"""Train an AlphaZero agent: self-play, replay, learning, evaluation, checkpoints.

    python train.py                                    # Connect4, sized for this machine
    python train.py --config configs/tictactoe.py --workdir runs/ttt
    python train.py --config configs/connect4.py --config.search.num_simulations=64

Runs resume from the newest checkpoint in --workdir. Ctrl-C saves and stops.
Multi-host: --coordinator HOST:PORT --num_processes N --process_id I (or a TPU/SLURM
environment, detected by jax.distributed.initialize()).
"""

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from az_jax import parallel_setup

# Before anything initialises JAX (the default config file below is loaded at definition).
parallel_setup.use_all_cpu_cores()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # `from configs import ...`

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "connect4.py"),
    "Training config file (configs/<game>.py). Override fields with --config.a.b=value.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "Where checkpoints, metrics.jsonl and plots go "
                               "(default: runs/<env id>).")
_COORD = flags.DEFINE_string("coordinator", None, "Multi-host: coordinator address HOST:PORT.")
_NPROC = flags.DEFINE_integer("num_processes", None, "Multi-host: total number of processes.")
_PID = flags.DEFINE_integer("process_id", None, "Multi-host: this process's index.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    parallel_setup.initialize_distributed(_COORD.value, _NPROC.value, _PID.value)
    from az_jax import trainer  # after the distributed runtime is up

    config = _CONFIG.value
    workdir = _WORKDIR.value or os.path.join("runs", config.env.id.replace(":", "_"))
    try:
        trainer.train_and_evaluate(config, workdir)
    except (ValueError, OSError) as e:
        if os.environ.get("AZ_JAX_DEBUG"):  # the full traceback, for bug reports
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    app.run(main)
