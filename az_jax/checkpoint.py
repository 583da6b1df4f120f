"""Orbax checkpoints in `<workdir>/checkpoints`, and `restore(workdir)` for front ends.

Each checkpoint (one per saved iteration) holds:
  state   the TrainState (params, batch stats, optimizer state, step), the best network
          and the self-play games in progress (no RNG key: iteration `it` draws its keys
          from `fold_in(loop_key, it)`, the same after a resume);
  replay  the replay buffer (when `checkpoint.save_replay`), so a resumed run is the run
          that would have happened;
  meta    JSON: iteration, env id / params / version, the whole config, the score.

Orbax writes into a temporary directory and renames it when complete, so a run killed
during a save never leaves a checkpoint that `latest` would pick; a directory that fails to
restore anyway (disk trouble, a hand edit) is skipped with a warning in favour of the
previous one. A save that fails for lack of space (disk full, quota, file size limit)
deletes its partial directory and raises `DiskFullError`, naming the last good checkpoint.

With several processes (`jax.distributed`), every process calls `save` and `restore_latest`
on the same (shared) directory; orbax writes each process's shards and lets process 0
write the metadata and commit.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import ml_collections

import envs
from az_jax import network as network_lib

SUBDIR = "checkpoints"
WEIGHTS = "weights.msgpack"  # an exported model's network alone: `load_weights`, no orbax


class _LazyOrbax:
    """`orbax.checkpoint`, imported on first use: a brain that reads `WEIGHTS` never pays
    for orbax and tensorstore (tens of MB of memory, a second of start-up)."""

    def __getattr__(self, name):
        import orbax.checkpoint

        return getattr(orbax.checkpoint, name)


ocp = _LazyOrbax()


class _QuietReadOnly(logging.Filter):
    """Drops orbax's two warnings about read-only managers (restore opens one each time)."""

    def filter(self, record):
        msg = record.getMessage()
        return "read_only=True" not in msg and "directory is read only" not in msg


logging.getLogger("absl").addFilter(_QuietReadOnly())


def quiet_logs() -> None:
    """What a front end's user reads: no orbax/absl info and warnings (read-only checkpoint
    notices), and `plain_warnings`. Each front end's `main` calls this."""
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    plain_warnings()


def plain_warnings() -> None:
    """Python's warnings print as one line, `warning: <message>`, without the file, line
    number and source line (a damaged checkpoint skipped, say): for a command's user."""
    warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"


class Restored(NamedTuple):
    """What evaluation and play need, restored from a workdir without re-typing flags."""

    env: Any  # envs.Env
    config: ml_collections.ConfigDict
    net: Any  # network_lib.ResNet
    variables: dict  # what net.apply takes
    iteration: int
    meta: dict
    path: str  # the checkpoint directory


class DiskFullError(OSError):
    """A write failed for lack of space; the checkpoints already on disk are intact."""


# No space, quota exceeded, file larger than allowed (RLIMIT_FSIZE / filesystem limit).
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _no_space_errno(error: BaseException) -> int | None:
    """The errno if `error` or anything in its cause chain is a lack of space, else None.

    Python raises OSError; tensorstore (orbax's array writer) raises ValueError with
    "[os_error_code='28']" or the strerror text in its message.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return error.errno
        text = str(error)
        match = re.search(r"os_error_code='(\d+)'", text)
        if match and int(match.group(1)) in _NO_SPACE:
            return int(match.group(1))
        for code in _NO_SPACE:
            if os.strerror(code) in text:
                return code
        error = error.__cause__ or error.__context__
    return None


def disk_full_error(error: BaseException, workdir, doing: str = "") -> DiskFullError | None:
    """A `DiskFullError` explaining `error` if it is a lack of space, else None.

    The message says what failed (`doing`, e.g. "saving checkpoint 5"), which checkpoint
    in `workdir` is the last complete one, and how to resume. `save` and `manager` raise
    it; a front end can use it for any other write of a run (metrics, plots).
    """
    if isinstance(error, DiskFullError):
        return error
    code = _no_space_errno(error)
    if code is None:
        return None
    directory = Path(workdir).expanduser().absolute() / SUBDIR
    steps = saved_steps(workdir)
    if steps:
        last = (f"The last good checkpoint is iteration {steps[-1]} ({directory / str(steps[-1])}),"
                " intact")
        resume = f"resume from iteration {steps[-1]}"
    else:
        last, resume = "No checkpoint has been saved yet", "start the run"
    out = DiskFullError(
        f"the disk is full: {doing or 'writing'} under {Path(workdir).absolute()} failed "
        f"({os.strerror(code)}). "
        f"{last}. Free some space (or use a --workdir on a bigger disk, copying the "
        f"checkpoints there) and run the same command again to {resume}.")
    out.errno = code
    return out


def saved_steps(workdir) -> list[int]:
    """The iterations of the committed checkpoints in `<workdir>/checkpoints`, oldest first
    ([] if none): orbax renames a checkpoint's folder to `<step>` once it is complete."""
    directory = Path(workdir).expanduser() / SUBDIR
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def _options(keep: int, every: Sequence[tuple[int, int]] = ()) -> ocp.CheckpointManagerOptions:
    policies = [ocp.checkpoint_managers.LatestN(n=max(int(keep), 1)),
                ocp.checkpoint_managers.BestN(get_metric_fn=lambda m: m["score"], n=1,
                                              keep_checkpoints_without_metrics=False)]
    policies += [ocp.checkpoint_managers.EveryNSteps(interval_steps=int(n), max_to_keep=int(k))
                 for n, k in every]
    return ocp.CheckpointManagerOptions(
        preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
        enable_async_checkpointing=False,
        cleanup_tmp_directories=True,
        create=True,
    )


def manager(workdir: str | os.PathLike, keep: int = 3, read_only: bool = False,
            every: Sequence[tuple[int, int]] = ()):
    """The CheckpointManager of a workdir. Raises a clear error if it cannot be written.

    It keeps the newest `keep` checkpoints, the best-scored one, and for each `(n, k)` of
    `every` the newest `k` whose iteration is a multiple of `n` (what the training
    evaluator's `checkpoint:latest-K` opponents need: `players.preserved_steps`)."""
    directory = Path(workdir).expanduser().absolute() / SUBDIR
    if read_only:
        if not directory.is_dir():
            raise FileNotFoundError(
                f"no checkpoints in {directory}: train first (python train.py --workdir "
                f"{workdir}) or pass the workdir of a trained run")
        opts = ocp.CheckpointManagerOptions(read_only=True, create=False)
        return ocp.CheckpointManager(directory, options=opts, handler_registry=_registry())
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # One probe per process: on a shared filesystem every host runs this at once.
        probe = directory / f".write_test.{jax.process_index()}.{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        full = disk_full_error(e, workdir, "creating the checkpoint directory")
        if full is not None:
            raise full from e
        raise OSError(f"cannot write checkpoints to {directory}: {e.strerror}. "
                      "Choose another --workdir or fix its permissions.") from e
    return ocp.CheckpointManager(directory, options=_options(keep, every),
                                 handler_registry=_registry())


def _registry():
    """Each item's handlers, by the arguments a save or restore passes, for readers and
    writers alike.

    The state is written by the standard handler (`StandardSave`). `PyTreeRestore` reads it
    with the PyTree handler that the standard one wraps (the same files on disk), which can
    leave parts of it unread: the network alone (`restore`), or only the keys a resumed run
    keeps (`restore_latest`). The standard handler is registered last, so a checkpoint's
    metadata names it for the state, as it always has."""
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    registry.add("state", ocp.args.PyTreeRestore, ocp.PyTreeCheckpointHandler())
    for name, save, read, handler in (
            ("state", ocp.args.StandardSave, ocp.args.StandardRestore,
             ocp.StandardCheckpointHandler()),
            ("replay", ocp.args.StandardSave, ocp.args.StandardRestore,
             ocp.StandardCheckpointHandler()),
            ("meta", ocp.args.JsonSave, ocp.args.JsonRestore, ocp.JsonCheckpointHandler())):
        registry.add(name, save, handler)
        registry.add(name, read, handler)
    return registry


def env_meta(env) -> dict:
    return {"env_id": env.id, "env_params": dict(env.params), "env_version": env.version}


def save(mngr, iteration: int, state: dict, meta: dict, replay=None, score=None) -> None:
    """Saves one checkpoint synchronously (complete or not at all).

    With several processes, every process must call this (orbax coordinates them).

    Raises:
      DiskFullError: no space left (or a quota / file size limit); the partial checkpoint is
        removed and the earlier ones are untouched.
    """
    items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
    if replay is not None:
        items["replay"] = ocp.args.StandardSave(replay)
    metrics = None if score is None else {"score": float(score)}
    if int(iteration) in mngr.all_steps():  # a damaged one that restore skipped: replace it
        mngr.delete(int(iteration))
    with _held_stderr() as held:
        try:
            mngr.save(int(iteration), args=ocp.args.Composite(**items), metrics=metrics,
                      force=True)
            mngr.wait_until_finished()
        except Exception as e:
            if _no_space_errno(e) is None:
                raise
            directory = Path(mngr.directory)
            if jax.process_index() == 0:  # free the space the partial save took
                _remove_partial(directory, int(iteration))
            held.drop()  # orbax's threads' tracebacks, one per failed write: summarised below
            raise disk_full_error(e, directory.parent,
                                  f"saving checkpoint {int(iteration)}") from e


class _Held:
    def __init__(self):
        self.chunks: list[bytes] = []
        self.keep = True

    def drop(self):
        self.keep = False


@contextlib.contextmanager
def _held_stderr():
    """Holds what is written to file descriptor 2 (Python, C++ and other threads alike) and
    writes it out at the end, unless `drop()` was called.

    A save that fails for lack of space makes orbax and tensorstore print a traceback for
    every write in flight (dozens), burying the one clear error; the caller drops them.
    """
    held = _Held()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        read_end, write_end = os.pipe()
    except (OSError, ValueError):  # no usable fd 2 (an embedding host): hold nothing
        yield held
        return

    def drain():
        while chunk := os.read(read_end, 65536):
            held.chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield held
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the reader sees EOF
        os.close(saved)
        reader.join(timeout=5.0)
        os.close(read_end)
        if held.keep and held.chunks:
            os.write(2, b"".join(held.chunks))


@contextlib.contextmanager
def _quiet_failure(settle_s: float = 1.0):
    """Runs an orbax read; when it raises, drops what orbax and tensorstore print about it
    (a traceback per read still in flight; later, at garbage collection, one per read
    coroutine it abandoned, each with a page of TensorStore spec): the caller says why in
    one line. A read that succeeds prints as usual."""
    with _held_stderr() as held:
        try:
            yield
        except Exception:
            if not isinstance(sys.unraisablehook, _DropAbandonedReads):
                sys.unraisablehook = _DropAbandonedReads(sys.unraisablehook)
                logging.getLogger("asyncio").addFilter(_DropAbandonedReads(None))
            time.sleep(settle_s)  # the reads still in flight fail into the held stderr
            held.drop()
            raise


def quiet_exit(status: int) -> int:
    """For a command's `__main__`, as it ends: after an error (status 2, said in one line),
    what orbax's and tensorstore's threads still print (the reads of a failed restore or
    the writes of a failed save, cancelled as the process ends) goes to /dev/null instead of
    burying that line. Returns `status`."""
    if status == 2:
        sys.stderr.flush()
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    return status


class _DropAbandonedReads(logging.Filter):
    """Drops the errors of orbax's read coroutines that a failed restore abandoned (already
    reported in one line), as a `sys.unraisablehook` (passing everything else on to `then`)
    and as a filter of asyncio's log ("Task exception was never retrieved")."""

    def __init__(self, then):
        super().__init__()
        self.then = then

    def __call__(self, unraisable):
        code = getattr(unraisable.object, "cr_code", None)
        if code is None or "orbax" not in code.co_filename:
            self.then(unraisable)

    def filter(self, record):
        return "_read_array_index_and_device_put" not in record.getMessage()


def _remove_partial(directory: Path, step: int, quiet_s: float = 1.0, max_s: float = 10.0):
    """Deletes the temporary directory of a failed save of `step`.

    Orbax gives up on the first error while some of its writes are still in flight, and
    they can recreate the directory: delete until it stays gone for `quiet_s` (at most
    `max_s`). Orbax never lists a temporary directory as a checkpoint, and removes any
    remnant when the next run opens the workdir.
    """
    pattern = f"{step}{ocp.utils.TMP_DIR_SUFFIX}*"
    start = last_seen = time.monotonic()
    while time.monotonic() - last_seen < quiet_s and time.monotonic() - start < max_s:
        for partial in directory.glob(pattern):
            shutil.rmtree(partial, ignore_errors=True)
            last_seen = time.monotonic()
        time.sleep(0.05)


# What every checkpoint's metadata holds (`save`'s callers write them): the readers of
# `read_meta` index them.
META_KEYS = ("config", "iteration", "env_id")


def read_meta(mngr, step: int) -> dict:
    """The metadata of checkpoint `step`.

    Raises:
      ValueError: it is not a JSON object with `META_KEYS` (a damaged checkpoint, or one
        not written by a training run or `export`): callers skip it like any other.
    """
    meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    return _checked_meta(meta, Path(mngr.directory) / str(step))


def _checked_meta(meta, where, keys: Sequence[str] = META_KEYS) -> dict:
    """`meta` if it is a checkpoint's metadata: a JSON object with `keys`, among them a
    config object and a whole iteration; else ValueError."""
    if not isinstance(meta, dict):
        raise ValueError(f"the metadata of checkpoint {where} is not a JSON object")
    missing = [k for k in keys if k not in meta]
    if missing:
        raise ValueError(f"the metadata of checkpoint {where} lacks {', '.join(missing)}")
    if "config" in keys and not isinstance(meta["config"], dict):
        raise ValueError(f"the metadata of checkpoint {where} has no config object")
    if "iteration" in keys and (not isinstance(meta["iteration"], int)
                                or isinstance(meta["iteration"], bool)):
        raise ValueError(f"the metadata of checkpoint {where} has no whole iteration")
    return meta


def restore_latest(mngr, target_state: dict, replay_target=None, optional=(),
                   required: Sequence[str] = ("iteration",)):
    """Restores the newest checkpoint that restores cleanly.

    Args:
      required: keys its metadata must have (a whole `iteration` at least); one without
        them is skipped like a damaged one (the trainer asks for `META_KEYS`).
      optional: keys of `target_state` that checkpoints written before they existed lack;
        such a checkpoint restores without them (they are absent from the returned state).
        An optional item saved in other shapes than the target's (e.g. the pending plies
        of a run whose `selfplay.max_game_length` changed) is left out alone, with a
        warning; the optional items that fit still restore.

    Keys the checkpoint has and `target_state` lacks (e.g. pending plies, when the run no
    longer keeps them) are left unread: they cost no memory.

    Returns:
      (iteration, state, replay or None, meta), or None when there is no checkpoint, or
      when there are some but none restores (each skipped with a warning).
    """
    older = {k: v for k, v in target_state.items() if k not in optional}
    for step in sorted(mngr.all_steps(), reverse=True):
        # The optional keys the checkpoint lacks or holds in other shapes go first, alone;
        # then all of them (whatever else does not restore).
        fits = {k: v for k, v in target_state.items()
                if k not in optional or _fits(mngr, step, k, v)}
        layouts = [target_state]
        for x in (fits, older):
            if set(x) != set(layouts[-1]):
                layouts.append(x)
        out, errors = None, []
        for target in layouts:
            try:
                with _quiet_failure():
                    out = mngr.restore(step, args=ocp.args.Composite(
                        state=_restore_args(dict(target, **_unread(mngr, step, target))),
                        meta=ocp.args.JsonRestore()))
                out = {"state": {k: v for k, v in out["state"].items() if k in target},
                       "meta": out["meta"]}
                break
            except Exception as e:  # noqa: BLE001 - any damage: fall back to the previous one
                errors.append(e)
        if out is None:
            warnings.warn(f"skipping checkpoint {step} in {mngr.directory}: it does not "
                          f"restore ({_why(mngr, step, layouts[-1], errors[0])})",
                          stacklevel=2)
            continue
        try:  # (a hand edit, other code: a KeyError in the caller otherwise)
            _checked_meta(out["meta"], Path(mngr.directory) / str(step), required)
        except ValueError as e:
            warnings.warn(f"skipping checkpoint {step}: {e}", stacklevel=2)
            continue
        held = sorted(k for k in target_state if k not in out["state"]
                      and k in _saved_keys(mngr, step))
        if held:  # restored without optional keys it holds: say so, they start afresh
            warnings.warn(f"checkpoint {step}: its {', '.join(held)} do not fit this run "
                          f"(other shapes); they start afresh", stacklevel=2)
        buffer = None
        # The replay's read peaks at about twice its size in host memory (measured on CPU):
        # orbax writes each array as one zstd chunk, which tensorstore decodes into a buffer
        # of its own and then copies into orbax's staging array; jax.device_put then copies
        # that (on CPU, into host memory again). Smaller chunks (`SaveArgs.chunk_byte_size`)
        # would spare a GPU host the first copy, not a CPU run the second.
        if replay_target is not None and _has_item(mngr, step, "replay"):
            try:
                with _quiet_failure():
                    buffer = mngr.restore(step, args=ocp.args.Composite(
                        replay=ocp.args.StandardRestore(replay_target)))["replay"]
            except Exception as e:  # noqa: BLE001 - e.g. another device count
                warnings.warn(f"checkpoint {step}: the replay buffer does not restore "
                              f"({type(e).__name__}); it refills from self-play", stacklevel=2)
        return step, out["state"], buffer, out["meta"]
    return None


def _why(mngr, step: int, target: dict, error: Exception) -> str:
    """Why a checkpoint does not restore, in a line: the parts of the state it lacks (another
    version's checkpoint), else the error's first line (orbax's can list whole arrays)."""
    try:
        lacks = sorted(set(target) - set(mngr.item_metadata(step)["state"].keys()))
    except Exception:  # noqa: BLE001 - unreadable metadata: the error says more
        lacks = []
    if lacks:
        return (f"it has no {', '.join(lacks)}: written by another version of az_jax, or not "
                f"a training run")
    return _first_line(error)


def _first_line(error: Exception) -> str:
    first = (str(error).strip().splitlines() or [""])[0].rstrip(":")
    first = first.split(" See full TensorStore details")[0]  # then a page of its spec
    return f"{type(error).__name__}: {first[:200]}"


def _unread(mngr, step: int, target: dict) -> dict:
    """The saved state's keys not in `target`, each leaf an orbax placeholder: left unread
    (and returned as placeholders). The rest of the saved tree must match the target, as in
    a restore of the whole state: a key the checkpoint lacks still fails."""
    try:
        saved = mngr.item_metadata(step)["state"]
        extra = {k: v for k, v in saved.items() if k not in target}
    except Exception:  # noqa: BLE001 - unreadable metadata: the restore itself will say
        return {}
    return jax.tree.map(lambda _: ocp.PLACEHOLDER, extra)


def _restore_args(item: dict):
    """A state restore into `item`'s arrays (their shardings and shapes, strictly), reading
    nothing for its placeholders (`PyTreeRestore`: `StandardRestore` takes none)."""
    return ocp.args.PyTreeRestore(
        item, restore_args=ocp.checkpoint_utils.construct_restore_args(item))


def _on_one_device(saved):
    """Abstract arrays of a saved tree's metadata, on one local device: a restore target."""
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                        saved)


def _fits(mngr, step: int, key: str, target) -> bool:
    """Whether the checkpoint holds `key` with the shapes of `target` (leaves compared in
    sorted order: a NamedTuple may come back as a dict)."""
    try:
        saved = mngr.item_metadata(step)["state"][key]
        shapes = lambda tree: sorted(tuple(x.shape) for x in jax.tree.leaves(tree))
        return shapes(saved) == shapes(target)
    except Exception:  # noqa: BLE001 - absent, or unreadable metadata
        return False


def _saved_keys(mngr, step: int) -> set:
    """The keys of a checkpoint's saved state (empty if its metadata does not read)."""
    try:
        return set(mngr.item_metadata(step)["state"].keys())
    except Exception:  # noqa: BLE001 - unreadable metadata
        return set()


def _has_item(mngr, step: int, name: str) -> bool:
    return (Path(mngr.directory) / str(step) / name).exists()


def holds_replay(mngr) -> bool:
    """Whether any checkpoint of `mngr` holds a replay buffer."""
    return any(_has_item(mngr, step, "replay") for step in mngr.all_steps())


def _all_params(env_id: str, params) -> dict:
    """A game's parameters with the ones left out filled by `env_id`'s defaults."""
    return {**envs.defaults(env_id), **dict(params)}


def check_env(meta: dict, env, where: str) -> None:
    """Raises ValueError if a checkpoint's env is not `env`."""
    saved = f"{meta['env_id']}({meta.get('env_params', {})})"
    wanted = f"{env.id}({dict(env.params)})"
    # A parameter the metadata leaves out (saved before it existed) is the env's default.
    if meta["env_id"] != env.id or (_all_params(env.id, meta.get("env_params", {}))
                                    != _all_params(env.id, env.params)):
        raise ValueError(f"the checkpoint in {where} is for {saved}, not {wanted}; use a "
                         "workdir trained on this game or change the env")
    if meta.get("env_version") != env.version:
        raise ValueError(f"the checkpoint in {where} was made with {meta['env_id']} version "
                         f"{meta.get('env_version')}, this code has {env.version} (the game's "
                         "rules or observations changed since): use it with the version of "
                         "az_jax that made it, or train a new run in another workdir")


def play_env_for(meta: dict, play_env, where: str):
    """The env to play a checkpoint on: its own, or `play_env`'s game (the same game and
    rules) as the network sees it.

    Another board size needs a fully convolutional network (`network.head="conv"`). Where
    only `observation_params` differ (Connect4 with or without threat planes), the network
    plays on its own env: a caller holding `play_env`'s states gives them to it through
    `env.observe`.

    Raises:
      ValueError: another game or rule, or another board size for a dense-head network.
    """
    own = envs.make(meta["env_id"], **meta.get("env_params", {}))
    if play_env is None:
        check_env(meta, own, where)
        return own
    if dict(play_env.params) == dict(own.params) and play_env.id == own.id:
        check_env(meta, play_env, where)
        return play_env
    seen = set(own.observation_params)  # what the network sees: its own

    def rules(e):
        return {k: v for k, v in _all_params(e.id, e.params).items()
                if k != "size" and k not in seen}

    if play_env.id != own.id or rules(play_env) != rules(own):
        raise ValueError(f"the network in {where} was trained for {own!r}; it cannot play "
                         f"{play_env!r} (only the board size and the observation planes "
                         "may differ)")
    mine = {k: v for k, v in _all_params(own.id, play_env.params).items() if k not in seen}
    mine.update({k: v for k, v in _all_params(own.id, own.params).items() if k in seen})
    env = envs.make(own.id, **mine)
    if dict(env.params) == dict(own.params):  # the same board: only the planes differed
        check_env(meta, own, where)
        return own
    head = meta["config"].get("network", {}).get("head", "dense")
    if head != "conv":
        raise ValueError(f"the network in {where} has a {head} head, trained for {own!r}: "
                         f"it plays only that board, not {play_env!r} (a network trained "
                         "with --config.network.head=conv plays any size)")
    if meta.get("env_version") != env.version:
        check_env(meta, own, where)
    return env


def restore(workdir: str | os.PathLike, step: int | None = None, env=None,
            play_env=None) -> Restored:
    """Restores the network of a training run for evaluation or play.

    Args:
      workdir: the training workdir (the one given to train.py).
      step: an iteration to restore; the newest restorable one by default.
      env: if given, the checkpoint must be for this env (else ValueError).
      play_env: if given, play this env's game instead of the checkpoint's own: the same
        game and rules on another board size (conv-head networks only), or with other
        observation planes (`play_env_for`).
    Raises:
      FileNotFoundError: no checkpoint; ValueError: wrong game or network shape.
    """
    mngr = manager(workdir, read_only=True)
    steps = sorted(mngr.all_steps(), reverse=True)
    if not steps:
        raise FileNotFoundError(f"no complete checkpoint in {mngr.directory}")
    if step is not None:
        if step not in steps:
            raise FileNotFoundError(f"no checkpoint {step} in {mngr.directory}; have {steps}")
        steps = [step]
    last_error = None
    for s in steps:
        try:
            meta = read_meta(mngr, s)
        except Exception as e:  # noqa: BLE001
            last_error = e
            warnings.warn(f"skipping checkpoint {s}: unreadable metadata ({e})", stacklevel=2)
            continue
        config = ml_collections.ConfigDict(meta["config"])
        if env is not None:
            check_env(meta, env, str(workdir))
        ckpt_env = play_env_for(meta, play_env, str(workdir))
        net = network_lib.make_network(config.network, ckpt_env)
        abstract = jax.eval_shape(lambda: network_lib.init_variables(
            net, ckpt_env, jax.random.PRNGKey(0)))
        try:
            with _quiet_failure():
                variables = _read_network(mngr, s)
        except Exception as e:  # noqa: BLE001 - any damage: fall back to the previous one
            last_error = e
            warnings.warn(f"skipping checkpoint {s}: it does not restore ({_first_line(e)})",
                          stacklevel=2)
            continue
        _check_shapes(abstract, variables, str(workdir))
        variables = jax.tree.map(jax.numpy.asarray, variables)
        return Restored(ckpt_env, config, net, variables, int(meta["iteration"]), meta,
                        str(Path(mngr.directory) / str(s)))
    raise FileNotFoundError(f"no checkpoint in {mngr.directory} restores: "
                            f"{_first_line(last_error) if last_error else 'none is complete'}")


def _read_network(mngr, step: int) -> dict:
    """The network's variables (params, batch stats) of a checkpoint, read alone: not the
    optimizer, the games, their pending plies or the best network, which can be many times
    larger (`mngr` is a reader: `manager(read_only=True)`)."""
    saved = mngr.item_metadata(step)["state"]["train_state"]
    names = [k for k in ("params", "batch_stats") if k in saved.keys()]
    target = {"train_state": {k: _on_one_device(saved[k]) for k in names}}
    raw = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
        partial_restore=True)))["state"]["train_state"]
    return {k: raw[k] for k in names if k == "params" or raw[k]}


def _check_shapes(expected, got, where: str) -> None:
    exp = {jax.tree_util.keystr(k): v.shape
           for k, v in jax.tree_util.tree_leaves_with_path(expected)}
    have = {jax.tree_util.keystr(k): tuple(v.shape)
            for k, v in jax.tree_util.tree_leaves_with_path(got)}
    if exp != have:
        diff = sorted(set(exp.items()) ^ set(have.items()))[:4]
        raise ValueError(f"the network in {where} does not match its config "
                         f"(first differences: {diff}); the checkpoint is damaged or was "
                         "made by other code")


def config_json(config: ml_collections.ConfigDict) -> dict:
    """The config as plain JSON data."""
    return json.loads(config.to_json())


MODELS_DIR = Path(__file__).parent / "models"


def shipped_models() -> list[str]:
    """Names of the pretrained models that ship with the package (`--model NAME`)."""
    if not MODELS_DIR.is_dir():
        return []
    return sorted(p.name for p in MODELS_DIR.iterdir() if (p / SUBDIR).is_dir())


def load(workdir=None, checkpoint=None, model=None, step=None, env=None,
         play_env=None) -> Restored:
    """Restores from exactly one of: a training workdir, a checkpoint directory
    (`<workdir>/checkpoints/<iteration>`), or a shipped model name. `env` and `play_env`
    as in `restore`.

    Raises:
      ValueError: none or several sources, or an unknown model name (listing the names).
      FileNotFoundError: nothing restorable there.
    """
    given = [x is not None for x in (workdir, checkpoint, model)]
    if sum(given) != 1:
        raise ValueError("give exactly one of --workdir, --checkpoint or --model")
    if model is not None:
        names = shipped_models()
        if model not in names:
            raise ValueError(f"no shipped model {model!r}; available: "
                             f"{', '.join(names) or 'none yet'}")
        return restore(MODELS_DIR / model, step=step, env=env, play_env=play_env)
    if checkpoint is not None:
        path = Path(checkpoint).expanduser().absolute()
        if not (path.name.isascii() and path.name.isdigit()) or path.parent.name != SUBDIR:
            raise ValueError(f"{checkpoint} is not a checkpoint directory: expected "
                             f"<workdir>/{SUBDIR}/<iteration>")
        return restore(path.parent.parent, step=int(path.name), env=env,
                       play_env=play_env)
    path = Path(workdir).expanduser().absolute()
    if path.name.isascii() and path.name.isdigit() and path.parent.name == SUBDIR:
        raise ValueError(f"{workdir} is one checkpoint, not a workdir: pass it as --checkpoint "
                         f"{workdir}, or --workdir {path.parent.parent}")
    if path.name == SUBDIR and not (path / SUBDIR).is_dir():
        raise ValueError(f"{workdir} is a run's checkpoint folder, not its workdir: pass "
                         f"--workdir {path.parent}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--workdir {workdir} is a file: pass a training run's folder")
    return restore(workdir, step=step, env=env, play_env=play_env)


def export_model(workdir, out_dir, step: int | None = None, note: str = "",
                 replace: bool = False) -> Path:
    """Writes a slim, play-only copy of a run's network (no optimizer, no replay) as a
    one-checkpoint workdir that `restore` / `load(model=...)` read like any other.

    `out_dir` must be new or empty; with `replace`, it may hold an exported model, whose
    checkpoint and weights this export replaces (its other files, such as a train.log,
    stay). A training run or other files there are never touched. The export is written
    beside `out_dir` first and moved in when complete, so a failure leaves `out_dir` as it
    was; a kill while the old and new folders are swapped leaves the old ones aside, and
    the next export puts them back first (`_finish_replace`).

    Returns the new checkpoint directory.
    Raises:
      ValueError: `out_dir` is not a place to export to (the message says why and what to do).
    """
    _finish_replace(Path(out_dir))
    out_dir = _export_target(workdir, out_dir, replace)
    restored = restore(workdir, step=step)
    meta = dict(restored.meta, exported_from=str(Path(workdir).absolute()), note=note)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / f".{out_dir.name}.export-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        save(manager(staging, keep=1), restored.iteration,
             {"train_state": dict(restored.variables)}, meta)
        save_weights(staging / WEIGHTS, restored.variables, meta)
        out_dir.mkdir(exist_ok=True)
        for name in (SUBDIR, WEIGHTS):  # the old ones aside first, removed once all is in
            if (out_dir / name).exists():
                os.replace(out_dir / name, out_dir / f".{name}.replaced")
            os.replace(staging / name, out_dir / name)
        for name in (SUBDIR, WEIGHTS):
            old = out_dir / f".{name}.replaced"
            if old.is_dir():
                shutil.rmtree(old)
            else:
                old.unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir / SUBDIR / str(restored.iteration)


def _finish_replace(out: Path) -> None:
    """Settles a `--replace` export killed while it swapped folders in `out`: an old
    checkpoint folder or weights file set aside (`.<name>.replaced`) goes back where its
    new one never arrived, and is removed where the new one did."""
    for name in (SUBDIR, WEIGHTS):
        old = out / f".{name}.replaced"
        if not (old.exists() or old.is_symlink()):
            continue
        if not (out / name).exists():
            os.replace(old, out / name)
        elif old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()


def _export_target(workdir, out_dir, replace: bool) -> Path:
    """`export_model`'s checks of its destination, before anything is read or written."""
    if not str(out_dir).strip():
        raise ValueError("--out is empty: name the folder the model goes to (a new one, "
                         "e.g. az_jax/models/<name>)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file: name a new folder for the model")
    if out.resolve() == Path(workdir).resolve():
        raise ValueError(f"--out {out} is the run itself: exporting there would replace its "
                         "checkpoints with the network alone. Nothing was written. Name a "
                         "new folder.")
    if not out.is_dir() or not any(out.iterdir()):
        return out
    meta = None
    for step in reversed(saved_steps(out)):
        try:
            meta = read_meta(manager(out, read_only=True), step)
            break
        except Exception:  # noqa: BLE001 - damaged: look at the one before
            continue
    if meta is None or "exported_from" not in meta:
        what = ("a training run (exporting there would replace its checkpoints with the "
                "network alone)" if (out / SUBDIR).exists() else "other files")
        raise ValueError(f"--out {out} holds {what}. Nothing was written. Name a new or "
                         "empty folder.")
    if not replace:
        raise ValueError(f"--out {out} already holds an exported model (from "
                         f"{meta['exported_from']}). Nothing was written. Add --replace to "
                         "put this export in its place (other files there, such as "
                         "train.log, stay), or name a new folder.")
    return out


def save_weights(path, variables: dict, meta: dict) -> None:
    """Writes the network alone (and the metadata) as one flax msgpack file."""
    from flax import serialization

    data = {"meta": json.dumps(meta), "variables": jax.device_get(variables)}
    Path(path).write_bytes(serialization.msgpack_serialize(data))


def load_weights(path, play_env=None) -> Restored:
    """Restores a `save_weights` file (`<model>/weights.msgpack`, written by `export`)
    without orbax: a lighter, faster start for the front ends. `play_env` as in `restore`.

    Raises:
      FileNotFoundError: no file; ValueError: unreadable, or the network does not match.
    """
    from flax import serialization

    path = Path(path)
    try:
        data = serialization.msgpack_restore(path.read_bytes())
        meta = json.loads(data["meta"])
        missing = [k for k in META_KEYS if k not in meta]
        if missing or "variables" not in data:
            raise ValueError(f"it lacks {', '.join(missing or ['the variables'])}")
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged file
        raise ValueError(f"cannot read the weights in {path}: {e}; export the model "
                         "again (python -m az_jax.checkpoint export)") from None
    config = ml_collections.ConfigDict(meta["config"])
    env = play_env_for(meta, play_env, str(path))
    net = network_lib.make_network(config.network, env)
    abstract = jax.eval_shape(lambda: network_lib.init_variables(net, env,
                                                                 jax.random.PRNGKey(0)))
    variables = data["variables"]
    _check_shapes(abstract, variables, str(path))
    variables = jax.tree.map(jax.numpy.asarray, variables)
    return Restored(env, config, net, variables, int(meta["iteration"]), meta, str(path))


def _main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m az_jax.checkpoint",
        description="Checkpoint tools. `export` writes a slim play-only copy of a run's "
                    "network (e.g. into az_jax/models/<name> to ship it).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser(
        "export", help="export a run's network for play/evaluation",
        description="Writes a run's network alone (no optimizer, games or replay) into a new "
                    "folder that every front end loads with --workdir, or by name with "
                    "--model once it is under az_jax/models/. The run is only read.")
    ex.add_argument("--workdir", required=True, help="training workdir")
    ex.add_argument("--out", required=True,
                    help="output folder: new or empty (or an exported model, with --replace)")
    ex.add_argument("--step", type=int, default=None, help="iteration (default: newest)")
    ex.add_argument("--note", default="", help="free text stored in the metadata")
    ex.add_argument("--replace", action="store_true",
                    help="--out holds an exported model: replace its checkpoint and weights "
                         "(a training run or other files are never replaced)")
    args = parser.parse_args(argv)
    quiet_logs()
    try:
        path = export_model(args.workdir, args.out, args.step, args.note, args.replace)
    except (ValueError, OSError) as e:
        print(f"error: {e}")
        return 2
    print(f"exported to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(quiet_exit(_main()))
