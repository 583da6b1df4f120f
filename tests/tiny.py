"""A game's training config shrunk to a run of seconds on 2 CPU cores (tests only)."""


def tiny_training(c, *, plies: int, iterations: int, eval_every: int, eval_games: int):
    """Shrinks config `c` in place and returns it: a 4-channel one-block net, 2 simulations
    (self-play and evaluation), 8 games, a 256-position replay used from 8, one update of 8
    per iteration, no replay in checkpoints, no progress bar."""
    c.network.channels, c.network.num_blocks = 4, 1
    c.search.num_simulations = 2
    c.selfplay.fast_simulations = 0  # no playout cap below 2 simulations
    c.selfplay.batch_size, c.selfplay.num_plies = 8, plies
    c.replay.capacity, c.replay.min_size = 256, 8
    c.train.num_iterations, c.train.updates_per_iteration, c.train.batch_size = iterations, 1, 8
    c.train.warmup_steps = 1
    c.eval.every, c.eval.num_games, c.eval.num_simulations = eval_every, eval_games, 2
    c.checkpoint.save_replay = False
    c.log.progress = False
    return c


def make_run(workdir, env_id: str, policy: str = "gumbel", head: str = "dense",
             **env_kwargs):
    """A workdir with one checkpoint of a tiny untrained network (8 channels, one block,
    `head` "dense" or "conv") for `env_id`, searched with `policy` (gumbel or muzero =
    PUCT) and 4 simulations. Returns `workdir`."""
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
    env = envs.make(env_id, **env_kwargs)
    net = network.make_network(config.network, env)
    variables = network.init_variables(net, env, jax.random.PRNGKey(0))
    state = learner.init_train_state(variables, learner.make_optimizer(config.train, 1))
    meta = {"config": ckpt.config_json(config), **ckpt.env_meta(env), "iteration": 1}
    ckpt.save(ckpt.manager(workdir), 1, {"train_state": state}, meta)
    return workdir
