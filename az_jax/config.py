"""The run's configuration: loading, `--config.a.b=v` overrides, validation, memory checks.

    config = config_lib.load("configs/connect4.py", ["search.num_simulations=64"])
    config_lib.validate(config, num_devices=2)     # ValueError listing every problem

Configs are ml_collections `get_config()` files (configs/<game>.py override
configs/default.py), locked so that a mistyped key fails. Overrides have one syntax,
ml_collections' own: `--config.a.b=value` on the command line of train.py and of
`python -m az_jax.bench` alike (`split_overrides` takes them out of an argv, `load`
applies them as "a.b=value"). A bad flag, file or value is one paragraph of text
(`flag_error`).

Validation: every field checked on its own has one entry in `FIELDS` (its kind, range
and whether configs saved before it existed may lack it); `validate` then checks what
spans fields (opponents, divisibility over devices and data shards). `check_memory`
refuses a replay buffer that cannot fit.

No JAX import at module level: train.py parses its flags before JAX starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import ml_collections
from absl import flags
from ml_collections import config_dict, config_flags

from az_jax import MAX_MINUTES, MAX_SIMULATIONS

ROOT = Path(__file__).resolve().parents[1]  # the repository: configs/ lives there
CONFIGS = ROOT / "configs"
DEFAULT_CONFIG = str(CONFIGS / "connect4.py")
INT32_MAX = 2**31 - 1  # counters, sizes and steps are int32 on the device
_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]*)")  # --config.a.b=v -> "a.b"


# =========================================================================== fields
@dataclasses.dataclass(frozen=True)
class Int:
    """An integer from `low` to `high` (INT32_MAX by default)."""

    low: int
    optional: bool = False  # configs saved before the field existed may lack it
    high: int = INT32_MAX

    def problem(self, name, v) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{name}={v!r} must be an integer"
        if not self.low <= v <= self.high:
            return f"{name}={v} must be from {self.low} to {self.high}"
        return None


@dataclasses.dataclass(frozen=True)
class Float:
    """A finite number above `low` (or equal to it when `low_ok`) and below `high` (or
    equal to it when `high_ok`)."""

    low: float
    high: float = math.inf
    low_ok: bool = True
    optional: bool = False
    high_ok: bool = True

    def problem(self, name, v) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return f"{name}={v!r} must be a number"
        low, high = self.low, self.high
        if not (math.isfinite(v) and (low < v or (self.low_ok and v == low))
                and (v < high or (self.high_ok and v == high))):
            bounds = f"{'>=' if self.low_ok else '>'} {low:g}" + (
                f" and {'<=' if self.high_ok else '<'} {high:g}" if high < math.inf else "")
            return f"{name}={v!r} must be a finite number {bounds}"
        return None


@dataclasses.dataclass(frozen=True)
class Bool:
    """True or False (not 0 or 1)."""

    optional: bool = False

    def problem(self, name, v) -> str | None:
        return None if isinstance(v, bool) else f"{name}={v!r} must be True or False"


@dataclasses.dataclass(frozen=True)
class Str:
    """A string; `what` says what it names."""

    what: str
    optional: bool = False

    def problem(self, name, v) -> str | None:
        return None if isinstance(v, str) else f"{name}={v!r} must be {self.what}"


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of the names in `module.attr` (read when validating: no import of JAX here)."""

    module: str
    attr: str
    optional: bool = False

    def problem(self, name, v) -> str | None:
        accepted = getattr(importlib.import_module(self.module), self.attr)
        return None if v in accepted else f"{name}={v!r}; accepted: {', '.join(accepted)}"


# One entry per field that is checked on its own. A new config field: add its line here
# (optional=True when configs saved before it existed lack it).
FIELDS: dict[str, Int | Float | Bool | Str | Choice] = {
    "selfplay.batch_size": Int(1),
    "selfplay.num_plies": Int(1),
    "selfplay.temperature_plies": Int(0),
    "selfplay.random_plies": Int(0),
    "selfplay.max_game_length": Int(0, optional=True),
    "selfplay.bootstrap": Bool(),
    "selfplay.pending": Bool(optional=True),
    "selfplay.fast_simulations": Int(0, optional=True),
    "selfplay.full_search_fraction": Float(0.0, 1.0, low_ok=False, optional=True),
    "selfplay.archive_starts": Float(0.0, 1.0, optional=True),
    "selfplay.archive_size": Int(1, optional=True),
    "train.batch_size": Int(1),
    "train.updates_per_iteration": Int(1),
    "train.num_iterations": Int(1),
    "train.minutes": Float(0.0, high=MAX_MINUTES, optional=True),
    "train.warmup_steps": Int(0),
    "train.learning_rate": Float(0.0, low_ok=False),
    "train.weight_decay": Float(0.0),
    "train.max_grad_norm": Float(0.0, low_ok=False),
    "train.value_weight": Float(0.0),
    "train.q_target_weight": Float(0.0, 1.0, optional=True),
    "train.surprise_weight": Float(0.0, 1.0, optional=True),
    "train.init_from": Str("a workdir, a checkpoint directory or model:NAME ('' for a fresh "
                           "network)", optional=True),
    "train.augment": Bool(),
    "train.optimizer": Choice("az_jax.learner", "OPTIMIZERS"),
    "train.schedule": Choice("az_jax.learner", "SCHEDULES"),
    "replay.capacity": Int(1),
    "replay.min_size": Int(0),
    "search.policy": Choice("az_jax.search", "POLICIES"),
    "search.num_simulations": Int(1, high=MAX_SIMULATIONS),
    "search.max_num_considered_actions": Int(1),
    "search.eval_sims_per_considered": Int(0, optional=True),
    "search.gumbel_scale": Float(0.0),
    "search.value_scale": Float(0.0, low_ok=False, optional=True),
    "search.eval_value_scale": Float(0.0, low_ok=False, optional=True),
    "search.discount": Float(0.0, 1.0, low_ok=False),
    "search.dirichlet_alpha": Float(0.0, low_ok=False),
    "search.dirichlet_fraction": Float(0.0, 1.0),
    "search.pb_c_init": Float(0.0),
    "search.pb_c_base": Float(0.0, low_ok=False),
    "search.tactics": Choice("az_jax.search", "TACTICS", optional=True),
    "search.eval_tactics": Choice("az_jax.search", "TACTICS", optional=True),
    "search.threat_depth": Int(2, optional=True),
    "search.threat_width": Int(1, optional=True),
    "search.node_tactics": Bool(optional=True),
    "network.channels": Int(1),
    "network.num_blocks": Int(0),
    "network.head": Choice("az_jax.network", "HEADS", optional=True),
    "network.value_head": Choice("az_jax.network", "VALUE_HEADS", optional=True),
    "network.value_channels": Int(1, optional=True),
    "network.global_pool": Bool(optional=True),
    "eval.every": Int(0),
    "eval.num_games": Int(1),
    "eval.num_simulations": Int(1, high=MAX_SIMULATIONS),
    "eval.opening_plies": Int(0, optional=True),
    "eval.gating": Bool(),
    "eval.gating_threshold": Float(0.0, 1.0),
    # 1 would leave training no time: a fitted run of a few iterations
    "eval.max_share": Float(0.0, 1.0, optional=True, high_ok=False),
    "checkpoint.every": Int(1),
    "checkpoint.keep": Int(1),
    "checkpoint.save_replay": Bool(),
    "checkpoint.restart": Bool(optional=True),
    "log.tensorboard": Bool(),
    "log.progress": Bool(),
}


def validate(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Checks a config before anything is compiled. Raises ValueError saying what to change.

    Every problem found is listed: the fields of `FIELDS` (numbers out of range, or not
    numbers: a config built in Python may hold any type; switches that are not True or
    False; unknown choices), the seed, unreadable opponents (and external engines of
    another game or without their package), batch sizes that do not divide over the
    devices or the data shards. `network.norm/dtype` and the env are checked when built.
    """
    from az_jax.eval import external  # imports JAX

    problems = []
    integers = True  # the arithmetic further down needs them
    for name, kind in FIELDS.items():
        group, field = name.split(".")
        node = config.get(group)
        is_group = isinstance(node, ml_collections.ConfigDict)
        if kind.optional and is_group and field not in node:
            continue  # a config saved before the field existed
        v = node.get(field) if is_group else None
        problem = kind.problem(name, v)
        if problem:
            problems.append(problem)
        if isinstance(kind, Int) and (isinstance(v, bool) or not isinstance(v, int)):
            integers = False
    seed = config.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        # jax.random.PRNGKey keeps 32 bits (without x64): 2**32 would be seed 0 again
        problems.append(f"seed={seed!r} must be an integer from 0 to {2**32 - 1}")
    try:
        env = config.get("env")
        external.check_opponents(config.eval.opponents,
                                 env.get("id") if isinstance(env, config_dict.ConfigDict)
                                 else None)
    except (ValueError, TypeError, AttributeError) as e:
        problems.append(f"eval.opponents: {e}")
    if not integers:
        raise ValueError("invalid config:\n  " + "\n  ".join(problems))
    if config.train.num_iterations * config.train.updates_per_iteration > INT32_MAX:
        problems.append("train.num_iterations * train.updates_per_iteration must be at most "
                        f"{INT32_MAX} (the step counter is int32)")
    fast = config.selfplay.get("fast_simulations", 0)
    if fast and fast >= config.search.num_simulations:
        problems.append(f"selfplay.fast_simulations={fast} must be below "
                        f"search.num_simulations={config.search.num_simulations} (0: every "
                        "ply gets the full search)")
    undivided = False
    for name in ("selfplay.batch_size", "train.batch_size", "replay.capacity"):
        group, field = name.split(".")
        if config[group][field] % num_devices:
            undivided = True
            problems.append(f"{name}={config[group][field]} must be divisible by the number "
                            f"of devices ({num_devices})")
    if undivided:
        problems.append("or train on fewer devices: XLA_FLAGS=--xla_force_host_platform_"
                        "device_count=N on a CPU, CUDA_VISIBLE_DEVICES on GPUs")
    if config.replay.min_size > config.replay.capacity:
        problems.append("replay.min_size must not exceed replay.capacity")
    if not problems:
        problems += validate_sharding(config, num_devices)
    if problems:
        raise ValueError("invalid config:\n  " + "\n  ".join(problems))


def num_shards(config: ml_collections.ConfigDict, num_devices: int) -> int:
    """The number of logical data shards S (see `trainer.make_steps`).

    `parallel.shards` when set; otherwise 8 when 8 is a multiple of the device count and
    divides the batch sizes and the replay capacity (so 1, 2, 4 and 8 devices give the
    same run), else one shard per device.
    """
    if config.parallel.shards:
        return int(config.parallel.shards)
    sizes = (config.selfplay.batch_size, config.train.batch_size, config.replay.capacity)
    if 8 % num_devices == 0 and all(x % 8 == 0 for x in sizes):
        return 8
    return num_devices


def validate_sharding(config: ml_collections.ConfigDict, num_devices: int) -> list[str]:
    """Problems with the logical shard count (empty when fine)."""
    if config.parallel.shards < 0:
        return ["parallel.shards must be >= 0 (0 = automatic)"]
    shards = num_shards(config, num_devices)
    problems = []
    if shards % num_devices:
        problems.append(f"parallel.shards={shards} must be a multiple of the number of "
                        f"devices ({num_devices}); set --config.parallel.shards={num_devices} "
                        "or 0 (automatic)")
    for name in ("selfplay.batch_size", "train.batch_size", "replay.capacity"):
        group, field = name.split(".")
        if config[group][field] % shards:
            problems.append(f"{name}={config[group][field]} must be divisible by the number "
                            f"of data shards ({shards}; set parallel.shards to change it)")
    return problems


def check_memory(config: ml_collections.ConfigDict, env, pending_length: int,
                 devices) -> None:
    """Refuses a replay buffer that cannot fit, before anything is allocated or compiled.

    The buffer is the one allocation that grows with the config alone (capacity x position
    size), next to the pending plies (batch_size x L positions, L = `pending_length`) and
    the restart positions (batch_size x archive_size, with selfplay.archive_starts). They
    must fit in 80% of one device's memory (`bytes_limit` on GPU/TPU), or on a CPU, where
    the devices share the host's memory, all of them in 80% of the RAM.

    Raises:
      ValueError: "invalid config: ..." naming `replay.capacity` and the largest that fits.
    """
    import jax
    import numpy as np

    from az_jax import replay

    capacity = int(config.replay.capacity)
    pending = int(config.selfplay.batch_size) * pending_length  # positions
    kept = ["selfplay.batch_size x max_game_length pending plies"] if pending else []
    if config.selfplay.get("archive_starts", 0.0):  # restart positions, about one each
        pending += int(config.selfplay.batch_size) * int(config.selfplay.get("archive_size", 4))
        kept.append("selfplay.batch_size x archive_size restart positions")
    per_position = sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize
                       for x in jax.tree.leaves(replay.example_sample(env)))
    device = next((d for d in devices if d.process_index == jax.process_index()), devices[0])
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a backend without memory statistics: the host check
        stats = {}
    if "bytes_limit" in stats:
        limit, where = int(stats["bytes_limit"]), f"one {device.device_kind}"
        need = (capacity + pending) // len(devices) * per_position
        largest = int(0.8 * limit) // per_position * len(devices) - pending
    else:
        try:
            limit, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host"
        except (ValueError, OSError, AttributeError):  # not a POSIX host: no check
            return
        need = (capacity + pending) * per_position // jax.process_count()  # this process's
        largest = int(0.8 * limit) // per_position * jax.process_count() - pending
    if need > 0.8 * limit:
        gib = 2**30
        raise ValueError(
            f"invalid config:\n  replay.capacity={capacity} needs {need / gib:.1f} GiB for the "
            f"replay buffer ({per_position} bytes per position) but {where} has "
            f"{limit / gib:.1f} GiB; lower replay.capacity to at most {max(largest, 0)}"
            + (f" (the {pending} positions of {' and '.join(kept)} take their share)"
               if pending else ""))


# =========================================================================== loading
def define_config_flag(flag_values: flags.FlagValues, argv: list[str],
                       help_text: str = "Config file (configs/<game>.py). Override fields "
                                        "with --config.a.b=value.") -> None:
    """Defines --config (and its --config.a.b=value overrides) on `flag_values`, locked.
    Without --config in `argv`, ml_collections reads DEFAULT_CONFIG and `argv`'s overrides
    here already."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # `from configs import ...` in the config files
    config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, help_text,
                                    flag_values=flag_values, lock_config=True, sys_argv=argv)


def parse_flags(argv: list[str], flag_values: flags.FlagValues,
                define: Callable[[flags.FlagValues, list[str]], None] = define_config_flag
                ) -> list[str]:
    """Defines the flags with `define(flag_values, argv)` (it must define --config) and
    parses `argv`. Returns the arguments that are no flags (absl's convention: argv[0]
    first); the config is `flag_values.config`.

    Raises:
      ValueError: one paragraph naming the flag at fault (the original exception is its
        `__cause__`).
    """
    try:
        define(flag_values, argv)
        rest = flag_values(argv)
        config = flag_values["config"].value
        # A config file that cannot be read gives an object that raises only when used.
        config.get("env")
    except Exception as e:  # noqa: BLE001 - ml_collections and absl raise many kinds
        raise ValueError(flag_error(e, argv)) from e
    if not isinstance(config, config_dict.ConfigDict):
        raise ValueError(f"get_config() in {_config_path(argv)} returned "
                         f"{type(config).__name__}, not an ml_collections.ConfigDict")
    # A length given on the command line is meant: it turns off the config's time budget
    # (train.minutes), unless the command gives that too.
    # (absl's single-dash form, -config.a.b=v, sets fields too)
    given = {m.group(1) for a in argv if (m := _OVERRIDE.match(a))}
    if ("train.num_iterations" in given and "train.minutes" not in given
            and config.get("train", {}).get("minutes")):
        config.train.minutes = 0.0
    return rest


def load(path: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """The locked config of the file `path` with `overrides` ("a.b=value", as after
    `--config.` on a command line) applied by ml_collections, as train.py does.

    Raises:
      ValueError: one paragraph (no such file, no such field, a value of the wrong type).
    """
    argv = ["az_jax", f"--config={path}", *(f"--config.{o}" for o in overrides)]
    flag_values = flags.FlagValues()
    parse_flags(argv, flag_values)
    return flag_values.config


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without the `--config.a.b=v` items, those items as "a.b=v").

    Raises:
      SystemExit: an item without "=value".
    """
    rest, overrides = [], []
    for a in argv:
        if a.startswith("--config."):
            key, sep, _ = a[len("--config."):].partition("=")
            if not sep or not key:
                raise SystemExit(f"error: {a!r}: expected --config.KEY=VALUE, e.g. "
                                 "--config.network.channels=8")
            overrides.append(a[len("--config."):])
        else:
            rest.append(a)
    return rest, overrides


# =========================================================================== flag errors
def _config_path(argv: list[str]) -> str:
    """The value of the last --config in `argv` (the default file when there is none)."""
    path = DEFAULT_CONFIG
    for i, arg in enumerate(argv[1:], 1):
        if arg in ("--config", "-config") and i + 1 < len(argv):
            path = argv[i + 1]
        elif m := re.match(r"^--?config=(.*)$", arg, re.DOTALL):
            path = m.group(1)
    return path


def _unknown_field(argv: list[str]) -> str | None:
    """Describes the first --config.a.b override that names no field of the config (None
    when every path exists, or when the config file itself cannot be read)."""
    base = [argv[0] if argv else "train.py", f"--config={_config_path(argv)}"]  # no overrides
    try:
        fv = flags.FlagValues()
        config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=base)
        fv(base)
        config = fv.config
        config.get("env")
    except Exception:  # noqa: BLE001 - reported by the caller as it is
        return None
    for arg in argv[1:]:
        m = _OVERRIDE.match(arg)
        if not m:
            continue
        node, parts = config, m.group(1).split(".")
        for i, part in enumerate(parts):
            where = "config." + ".".join(parts[:i]) if i else "the config"
            if not isinstance(node, config_dict.ConfigDict):
                return (f"{arg[:80]}: {where} is a value ({type(node).__name__}), not a group "
                        "of fields")
            if part not in node:
                fields = sorted(node.keys())
                close = difflib.get_close_matches(part, fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return (f"{arg[:80]}: {where} has no field {part[:40]!r}{hint}; its fields: "
                        f"{', '.join(fields) or 'none'} (see configs/default.py)")
            node = node[part]
    return None


def _unreadable_config(path: str, cause: BaseException) -> str:
    """Why --config `path` cannot be read, and what to give instead (ml_collections' own
    message names its flag holder, "config_config", not the file)."""
    folder = os.path.relpath(CONFIGS)
    if folder.startswith(".."):
        folder = str(CONFIGS)
    shipped = ", ".join(sorted(os.path.join(folder, f) for f in os.listdir(CONFIGS)
                               if f.endswith(".py") and not f.startswith("_")))
    if not os.path.exists(path):
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
        return (f"cannot read the config file {path}: there is no such file{where}; give "
                f"--config one of {shipped}")
    if os.path.isdir(path):
        return f"cannot read the config file {path}: it is a directory; give --config a " \
               f"file such as {shipped.split(', ')[0]}"
    while isinstance(cause.__cause__, OSError):  # the innermost error names the problem
        cause = cause.__cause__
    why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
    return f"cannot read the config file {path}: {why}"


def flag_error(e: Exception, argv: list[str]) -> str:
    """One paragraph for an exception raised while defining or parsing the flags."""
    if not isinstance(e, flags.Error):
        unknown = _unknown_field(argv)
        if unknown:
            return unknown
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    if isinstance(e, OSError) and e.__cause__ is not None:  # the config file is unreadable
        text = _unreadable_config(_config_path(argv), e.__cause__)
    lines = [line for line in text.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        text = f"{lines[0]} {lines[-1]}"  # ml_collections puts a traceback in its message
    text = " ".join(text.split())
    if isinstance(e, flags.Error) or text.startswith("cannot read"):
        return text
    return f"--config {_config_path(argv)} and its overrides: {type(e).__name__}: {text}"
