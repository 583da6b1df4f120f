"""Pure, jittable two-player board games on one pgx-shaped protocol.

    env = envs.make("connect4")
    state = jax.jit(jax.vmap(env.init))(jax.random.split(key, 1024))
    state = jax.jit(jax.vmap(env.step))(state, actions)
"""

from __future__ import annotations

import importlib
import inspect

from envs.core import Env, State

# id -> "module:Class". Adding a game = one file + one line here.
_REGISTRY = {
    "tictactoe": "envs.tictactoe:TicTacToe",
    "connect4": "envs.connect4:Connect4",
    "gomoku": "envs.gomoku:Gomoku",
    "baghchal": "envs.baghchal:BaghChal",
}


def _load(env_id: str) -> type[Env]:
    module, cls = _REGISTRY[env_id].split(":")
    return getattr(importlib.import_module(module), cls)


def _params(cls: type[Env]) -> dict:
    """Keyword parameters of an env class and their defaults."""
    if cls.__init__ is object.__init__:
        return {}
    params = inspect.signature(cls.__init__).parameters
    return {n: p.default for n, p in params.items() if n != "self"}


def _signature(env_id: str) -> str:
    try:
        params = _params(_load(env_id))
    except (ImportError, AttributeError):
        return f"{env_id}(?)"
    return f"{env_id}({', '.join(f'{n}={d!r}' for n, d in params.items())})"


def registered() -> list[str]:
    """The env ids `make` accepts (besides `pgx:<id>` where pgx is installed)."""
    return sorted(_REGISTRY)


def defaults(env_id: str) -> dict:
    """The game parameters `make(env_id)` takes and their defaults ({} for an unknown id or
    a pgx game): what a config's empty `env.kwargs` means."""
    if not isinstance(env_id, str) or env_id not in _REGISTRY:
        return {}
    return _params(_load(env_id))


def make(env_id: str, **kwargs) -> Env:
    """Builds an environment by id.

    Args:
      env_id: one of `registered()`, or `pgx:<pgx env id>` for a pgx game (optional dep).
      **kwargs: game parameters, e.g. `make("gomoku", size=15, rule="standard")`.
    Raises:
      ValueError: unknown id or parameter, listing what is valid.
    """
    if isinstance(env_id, str) and env_id.startswith("pgx:"):
        if kwargs:  # PgxEnv takes none: a TypeError there would escape the callers' checks
            raise ValueError(f"{env_id} takes no parameters, got {', '.join(sorted(kwargs))}")
        from envs import pgx_adapter

        return pgx_adapter.PgxEnv(env_id[4:])
    if not isinstance(env_id, str) or env_id not in _REGISTRY:
        valid = "; ".join(_signature(e) for e in registered())
        raise ValueError(f"unknown env id {env_id!r}. Valid ids and parameters: {valid}")
    cls = _load(env_id)
    unknown = [k for k in kwargs if k not in _params(cls)]
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for {env_id!r}; accepted: {_signature(env_id)}"
        )
    return cls(**kwargs)


__all__ = ["Env", "State", "defaults", "make", "registered"]
