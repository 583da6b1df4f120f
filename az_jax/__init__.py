"""az_jax: a JAX-functional, vectorized AlphaZero.

The public API, imported lazily so that `python -m az_jax.<front end> --help` stays fast:

    from az_jax import make_network, make_search, value_targets, ReplayBuffer
    from az_jax import train_and_evaluate, load, restore

(`az_jax.selfplay.selfplay` is the self-play function; its module shares the name.)
Everything else is an implementation detail of its module.
"""

import importlib

__version__ = "0.1.0"
# The most simulations one search may run, in a config, an opponent's name and on every
# command line: a search tree holds one node per simulation (int32 indices; at 100,000 a
# 15x15 tree is already ~0.5 GB). Here, not in search.py: the JAX-free modules (the config's
# checks, the command lines) read it too.
MAX_SIMULATIONS = 100_000
MAX_SEED = 2**32 - 1  # jax.random.PRNGKey keeps 32 bits (without x64): 2**32 is seed 0 again
# The longest wall-clock budget (`train.minutes`, `bench learn --minutes`), about two years:
# far more overflowed the fit of the run's length to it (a crash mid-run).
MAX_MINUTES = 1e6

_PUBLIC = {
    "ResNet": "az_jax.network",
    "make_network": "az_jax.network",
    "init_variables": "az_jax.network",
    "make_search": "az_jax.search",
    "value_targets": "az_jax.selfplay",
    "Trajectory": "az_jax.selfplay",
    "ReplayBuffer": "az_jax.replay",
    "Sample": "az_jax.replay",
    "TrainState": "az_jax.learner",
    "train_and_evaluate": "az_jax.trainer",
    "load": "az_jax.checkpoint",
    "restore": "az_jax.checkpoint",
    "shipped_models": "az_jax.checkpoint",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'az_jax' has no attribute {name!r}")
