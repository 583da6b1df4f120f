"""The one tiny training config of the tests: a game's config shrunk to a run of seconds on
2 CPU cores.

`tiny_training(c, **changes)` shrinks a ConfigDict in place; `tiny_args(**changes)` gives
the same fields as `--config.a.b=v` flags for train.py and bench. A change names a field
with `__` for the dot (`selfplay__num_plies=9`) and overrides the value in `TINY`.

`TwiceGame`: a hand-made game where one player moves twice in a row, for the searches' value
signs (tests/test_search.py, tests/test_evaluate.py).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

TINY = {
    "network.channels": 4, "network.num_blocks": 1,
    "search.num_simulations": 2,
    "selfplay.fast_simulations": 0,  # no playout cap below 2 simulations
    "selfplay.batch_size": 8, "selfplay.num_plies": 3,
    "replay.capacity": 256, "replay.min_size": 8,
    "train.num_iterations": 1, "train.updates_per_iteration": 1, "train.batch_size": 8,
    "train.warmup_steps": 1,
    "eval.every": 0, "eval.num_games": 2, "eval.num_simulations": 2,
    "checkpoint.save_replay": False,
    "log.progress": False,
}


def _fields(changes: dict) -> dict:
    fields = dict(TINY)
    for name, value in changes.items():
        fields[name.replace("__", ".")] = value
    return fields


def tiny_training(c, **changes):
    """Sets the `TINY` fields (with `changes`) on config `c` in place and returns it."""
    for key, value in _fields(changes).items():
        *groups, field = key.split(".")
        node = c
        for group in groups:
            node = node[group]
        node[field] = value
    return c


def tiny_args(**changes) -> list[str]:
    """The `TINY` fields (with `changes`) as `--config.a.b=v` flags."""
    return [f"--config.{key}={value}" for key, value in _fields(changes).items()]


def make_run(workdir, env_id: str, policy: str = "gumbel", head: str = "dense",
             eval_tactics: str | None = None, **env_kwargs):
    """A workdir with one checkpoint of a tiny untrained network (8 channels, one block,
    `head` "dense" or "conv") for `env_id`, searched with `policy` (gumbel or muzero =
    PUCT) and 4 simulations (`eval_tactics`: the config's unless given). Returns
    `workdir`."""
    import jax
    import ml_collections

    import envs
    from az_jax import checkpoint as ckpt
    from az_jax import learner, network
    from configs import default

    config = default.get_config()
    config.env.id = env_id
    config.search.policy = policy
    config.env.kwargs = ml_collections.ConfigDict(env_kwargs)
    config.network.channels, config.network.num_blocks, config.network.head = 8, 1, head
    config.search.num_simulations = 4
    if eval_tactics is not None:
        config.search.eval_tactics = eval_tactics
    env = envs.make(env_id, **env_kwargs)
    net = network.make_network(config.network, env)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    state = learner.init_train_state(variables, learner.make_optimizer(config.train, 1))
    meta = {"config": ckpt.config_json(config), **ckpt.env_meta(env), "iteration": 1}
    ckpt.save(ckpt.manager(workdir), 1, {"train_state": state}, meta)
    return workdir


class TwiceState(NamedTuple):
    current_player: jax.Array  # int32[]
    step_count: jax.Array  # int32[]
    picks: jax.Array  # int32[]: how many of player 0's two moves were action 1
    rewards: jax.Array  # float32[2]
    done: jax.Array  # bool[]
    observation: jax.Array  # float32[1]
    legal_action_mask: jax.Array  # bool[2]


class TwiceGame:
    """A hand-made game where one player moves twice in a row, as in backgammon: player 0
    plays two moves, then the game ends; player 0 wins if both were action 1, else loses."""

    num_actions = 2

    def init(self):
        return TwiceState(jnp.int32(0), jnp.int32(0), jnp.int32(0), jnp.zeros(2),
                           jnp.bool_(False), jnp.zeros(1), jnp.ones(2, bool))

    def step(self, state, action, key):
        del key
        step_count, picks = state.step_count + 1, state.picks + action
        done = step_count == 2
        won = jnp.where(picks == 2, 1.0, -1.0)
        return TwiceState(jnp.where(done, 1, 0).astype(jnp.int32), step_count, picks,
                           jnp.where(done, jnp.stack([won, -won]), 0.0), done,
                           jnp.zeros(1), jnp.ones(2, bool))
