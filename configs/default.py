"""Default configuration; every per-game config starts from this one and overrides fields.

Usage: python train.py --config configs/connect4.py --config.search.num_simulations=64
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0  # 0 .. 2**32 - 1

    c.env = ml_collections.ConfigDict()
    c.env.id = "connect4"  # envs.make id (or "pgx:<id>" with pgx installed)
    c.env.kwargs = ml_collections.ConfigDict()  # game parameters, e.g. size/rule for gomoku

    c.network = ml_collections.ConfigDict()
    c.network.channels = 64  # conv width
    c.network.num_blocks = 6  # residual blocks
    # batch | layer (over each position's [H, W, C]) | none. Layer norm was worse than batch
    # norm on Connect4's CPU config, both seeds (docs/learning.md, "A twenty-first round").
    c.network.norm = "batch"
    c.network.dtype = "float32"  # float32 | bfloat16 (compute; parameters stay float32)
    # dense (AlphaZero's heads) | conv (fully convolutional: no parameter depends on the
    # board size, so one network plays several sizes; needs one action per board point)
    c.network.head = "dense"
    # tanh (AlphaZero's: one value, squared error) | wdl (win/draw/loss logits, cross-entropy)
    c.network.value_head = "tanh"
    c.network.value_channels = 1  # dense head: 1x1 conv channels before the value's dense layer
    c.network.global_pool = False  # KataGo's global pooling bias in every residual block

    c.search = ml_collections.ConfigDict()
    c.search.policy = "gumbel"  # gumbel (gumbel_muzero_policy) | muzero (PUCT + Dirichlet)
    c.search.num_simulations = 32
    c.search.max_num_considered_actions = 16  # gumbel: actions considered at the root
    c.search.gumbel_scale = 1.0  # gumbel: root noise scale (0 in evaluation)
    c.search.dirichlet_alpha = 0.3  # muzero: root noise (AlphaZero: 0.3 chess, 0.03 go)
    c.search.dirichlet_fraction = 0.25  # muzero: share of the noise in the root prior
    c.search.pb_c_init = 1.25  # muzero: c_puct
    c.search.pb_c_base = 19652.0
    # Per-ply value discount, in the search and the value targets. 1 = AlphaZero. Below 1 a
    # result n plies ahead counts gamma^n: quicker wins, slower losses (a signal for the side
    # that loses nearly every game early in training, e.g. Bagh-Chal's goats).
    c.search.discount = 1.0
    # What the rules decide a few moves ahead, known exactly at the root (games with
    # chance: none). "win": if a move wins at once, only winning moves are searched.
    # "win_and_block": also mask the moves that leave the opponent a win in one, when some
    # move does not. "threats" (games with `winning_moves`, else as win_and_block): also
    # play a forced win by continuous threats (a VCF) of up to threat_depth moves when
    # there is one, and mask the network's favourite moves that allow the opponent one
    # (an open three left open, a stop that leaves him a VCF). "none": the plain search.
    # README "Tactical safety of the search" has what each costs and gains.
    c.search.tactics = "none"  # self-play searches (README)
    c.search.eval_tactics = "threats"  # evaluation searches (arena, play, web, gomocup)
    # "threats": the moves in the longest forced win looked for, for the mover and (his
    # defence, Gomoku) for the opponent. 4, not 3, since stop 35: at 3 the defence check
    # pruned a VCF of four fours whenever the opponent had an open three (README
    # "Tactical safety"); each more costs ~2-3x.
    c.search.threat_depth = 4
    c.search.threat_width = 16  # "threats": forcing moves tried at the root (search.py)
    # Games with `winning_moves`, where the root has tactics (not "none"): every node of the
    # tree knows what one move ahead decides there too: a win at once is the only move
    # searched (value +1), a single winning point of the opponent the only block, two of
    # them a loss (value -1). Two board scans a node.
    c.search.node_tactics = True
    # gumbel, evaluation only: the considered set grows to num_simulations // this when that
    # exceeds max_num_considered_actions (800 simulations: 50 moves). 0 = no growth.
    c.search.eval_sims_per_considered = 16
    # gumbel: the weight of the search's values against the network's prior (mctx's
    # qtransform_completed_by_mix_value): in self-play the improved-policy target and the
    # move played; in evaluation the move chosen. mctx's default is 0.1.
    c.search.value_scale = 0.1
    c.search.eval_value_scale = 0.1

    c.selfplay = ml_collections.ConfigDict()
    c.selfplay.batch_size = 256  # games played side by side (divisible by the device count)
    c.selfplay.num_plies = 32  # plies per game per iteration (games carry over)
    c.selfplay.temperature_plies = 8  # plies from each game's start played by sampling
    # Plies from each game's start played uniformly at random (among the moves the search
    # visited: with gumbel, only the considered set, a prior-biased top-k; their positions
    # keep the search's policy target): opening diversity.
    c.selfplay.random_plies = 0
    # Plies of games still running when the window of num_plies ends wait on the device
    # until their game ends, then enter the replay buffer with their exact outcome target
    # (AlphaZero: every ply trains). False (with bootstrap False) leaves them out instead:
    # games much longer than num_plies then lose most of their plies.
    c.selfplay.pending = True
    # Plies kept pending per running game (memory: batch_size x this many positions);
    # 0 = the env's longest game (env.max_game_length). Older plies of longer games are
    # dropped (metric plies_dropped).
    c.selfplay.max_game_length = 0
    # True: plies of running games get value targets bootstrapped from the search value at
    # the window's end (n-step, as MuZero) instead of waiting (takes precedence over pending).
    c.selfplay.bootstrap = False
    # Playout-cap randomization (KataGo): 0 = every ply gets the full search. n > 0: a ply
    # gets the full search (search.num_simulations, with a policy target) with probability
    # full_search_fraction, else a fast one of n simulations that only moves the game on
    # (its ply still gets a value target). One draw per ply for the whole batch.
    c.selfplay.fast_simulations = 0
    c.selfplay.full_search_fraction = 0.25
    # Restarts from positions self-play reached before (Go-Exploit, Trudeau & Bowling
    # 2023): a game that ends starts again, with this probability, from one of the
    # positions its shard's games stood at when recent windows ended (archive_size per
    # game), else from the game's start. 0 = always the start. On Connect4 (CPU config, two
    # seeds) 0.5 was level to worse, and worse on beginning-hard (docs/learning.md, "A
    # sixteenth round"). A restarted game keeps the archived step_count, so a restart past
    # temperature_plies and random_plies plays no sampled or random plies; the sixteenth
    # round measured restarts this way.
    c.selfplay.archive_starts = 0.0
    c.selfplay.archive_size = 4

    c.replay = ml_collections.ConfigDict()
    c.replay.capacity = 100_000  # positions kept on device
    c.replay.min_size = 1_000  # no update before this many positions

    c.train = ml_collections.ConfigDict()
    c.train.num_iterations = 200  # self-play + learning iterations
    # A wall-clock budget: > 0 fits the run's length (and its learning-rate schedule) to
    # this many minutes after its first iterations, train.num_iterations being the most;
    # kept when the run resumes. 0 = train.num_iterations, whatever the time. A
    # --config.train.num_iterations on the command line sets it to 0 unless it is given too.
    c.train.minutes = 0.0
    c.train.updates_per_iteration = 32  # gradient steps per iteration
    c.train.batch_size = 256  # positions per gradient step
    # adamw | sgd (Nesterov momentum 0.9, L2 decay). On Connect4's CPU config SGD at its best
    # learning rate, 0.5, was level with AdamW at 2e-2 (docs/learning.md, "A twentieth round").
    c.train.optimizer = "adamw"
    c.train.learning_rate = 1e-3
    c.train.schedule = "cosine"  # constant | cosine | onecycle
    c.train.warmup_steps = 100
    c.train.weight_decay = 1e-4
    c.train.max_grad_norm = 1.0
    c.train.value_weight = 1.0
    # Value target = (1 - w) * game outcome + w * the search's root value at the ply (w = 0:
    # AlphaZero's outcome alone; 0.5: the average of z and q some Connect4 studies prefer).
    c.train.q_target_weight = 0.0
    # Policy surprise weighting (KataGo): each position's loss weighted (1 - w) + w * its
    # KL(search policy || network policy) / the batch's mean; 0 = every position alike.
    c.train.surprise_weight = 0.0
    c.train.augment = True  # random board symmetry per sample
    # A new run's network starts from another run's: a workdir, a checkpoint directory or
    # model:NAME (shipped). Same network shapes; with network.head=conv the board size may
    # differ (a curriculum: Gomoku 9x9, then 15x15). "" = a fresh network. Resumes ignore it.
    c.train.init_from = ""

    c.parallel = ml_collections.ConfigDict()
    # Logical data shards: each owns B/S games, their search keys and B_train/S of every
    # gradient batch, so any device count dividing S gives the same run. 0 = automatic
    # (8 when the batch sizes allow and 8 is a multiple of the device count).
    c.parallel.shards = 0

    c.eval = ml_collections.ConfigDict()
    c.eval.every = 10  # iterations between evaluations (0 = never)
    c.eval.num_games = 64  # per opponent, colours alternated
    # A due evaluation runs only while evaluation so far has taken at most this share of
    # the run's wall clock (training + evaluation; the first always runs). 0 = no cap;
    # below 1.
    c.eval.max_share = 0.1
    c.eval.num_simulations = 32  # search strength of the agent under test
    # See az_jax.eval.players.parse_opponent; also host-side engines (az_jax.eval.external), e.g.
    # baghchal-minimax:D with configs/baghchal.py (needs pip install baghchal).
    c.eval.opponents = "random,onestep,greedy"
    c.eval.opening_plies = 2  # random plies opening each pair of games (colours swapped)
    c.eval.gating = False  # AlphaGo Zero gating: replace the best only above the threshold
    c.eval.gating_threshold = 0.55

    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every = 5  # iterations between checkpoints (and one at the end / Ctrl-C)
    c.checkpoint.keep = 3  # keep the last K (plus the best)
    c.checkpoint.save_replay = True  # save the replay buffer too (exact resume)
    # A workdir holds one run; a command whose config differs from it (or whose checkpoints
    # do not restore) stops before writing anything. True moves that run aside to
    # <workdir>.old-N (never deleted) and starts a new one; a matching run still resumes.
    c.checkpoint.restart = False

    c.log = ml_collections.ConfigDict()
    c.log.tensorboard = False  # also write TensorBoard events (needs tensorboardX)
    c.log.progress = True  # tqdm progress bar
    return c


# The accelerator-sized defaults shared by the per-game configs (one GPU/TPU).
ACCELERATOR = dict(channels=64, num_blocks=6, num_simulations=64, games=1024, plies=32,
                   updates=64, batch=1024, iterations=300, capacity=1_000_000,
                   dtype="bfloat16")


def size(c: ml_collections.ConfigDict, *, channels, num_blocks, num_simulations, games, plies,
         updates, batch, iterations, capacity, dtype="float32") -> None:
    """Sets the fields that scale with the machine (network, search, batches, replay)."""
    c.network.channels, c.network.num_blocks, c.network.dtype = channels, num_blocks, dtype
    c.search.num_simulations = num_simulations
    c.selfplay.batch_size, c.selfplay.num_plies = games, plies
    c.train.updates_per_iteration, c.train.batch_size = updates, batch
    c.train.num_iterations = iterations
    c.replay.capacity = capacity


def on_cpu() -> bool:
    """True when JAX finds no accelerator (read when get_config() runs, not at import)."""
    import jax

    return jax.default_backend() == "cpu"
