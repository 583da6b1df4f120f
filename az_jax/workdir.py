"""Whether a command may continue the run already in a workdir, decided before anything
is written there.

    found = workdir.saved_config(path)    # (the run's config as JSON data, where), or None
    problems = workdir.differences(found[0], config) if found else []

A workdir holds one run. Running `train.py` again on it resumes that run, so the command
must describe the same run: every config field must match the run's, except the few in
`MAY_CHANGE` (how long to train, evaluation and its search rules, logging, checkpoint
cadence). A command that does not match stops with one line naming the fields that
differ; nothing is written.
`--config.checkpoint.restart=True` instead moves the old run aside (`<workdir>.old-N`,
never deleted) and starts a new one in the workdir.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
from pathlib import Path

import ml_collections

import envs
from az_jax import files

# Fields (or groups, ending in ".") a resumed run may take from the command instead of the
# run: they change no array in the checkpoint. `train.num_iterations` also rescales the
# learning-rate schedule from the current step on (a run fitted to `train.minutes` keeps
# its fitted length); `train.init_from` only seeds a new run.
MAY_CHANGE = ("train.num_iterations", "train.minutes", "train.init_from", "eval.", "log.",
              "checkpoint.every", "checkpoint.keep", "checkpoint.save_replay", "checkpoint.restart",
              "search.eval_tactics", "search.eval_sims_per_considered",
              "search.eval_value_scale",
              "search.threat_depth", "search.threat_width")
# Of those, the ones self-play reads too where `search.tactics` is "threats" (the threat
# search's depth and width rule the self-play root then): such a run may not change them.
SELFPLAY_THREATS = ("search.threat_depth", "search.threat_width")
# Fields added since runs were first saved that a run made before them had in one form only
# (its arrays: Connect4's value head; how it played: no random opening plies): such a run
# is compared as if it had this value, so that a command whose default has changed since
# does not pass for the old run. Other fields a run predates take the command's value.
BEFORE_FIELD = {"network.value_head": "tanh", "selfplay.random_plies": 0,
                "selfplay.archive_starts": 0.0,
                "network.value_channels": 1, "network.global_pool": False}


class RunMismatch(ValueError):
    """The workdir holds a run this command cannot continue (`reason`: why, briefly)."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


class Lock:
    """Exclusive locks (`flock`) on run folders, held by the process that trains them
    until `release()` (or its exit, a SIGKILL included: the system drops them).

    A second `train.py` on a folder another process is training (the same command started
    twice, a requeued job) stops with one line before it writes anything: two writers of
    one run would delete each other's saves under way and log every iteration twice. The
    lock is on the folder itself, so nothing is written for it, and it moves with the
    folder (`move_aside`): take it again on the new run's folder once that exists. Where
    the filesystem has no locks, the run goes on unguarded.
    """

    def __init__(self):
        self._fds: list[int] = []

    def take(self, workdir) -> None:
        """Locks `workdir` if it exists; ValueError if another process holds it."""
        try:
            import fcntl
        except ImportError:  # (not a POSIX system)
            return
        try:
            fd = os.open(workdir, os.O_RDONLY)
        except OSError:  # none yet (a new run's folder is locked once made), or unreadable
            return
        held = {_identity(f) for f in self._fds}
        if _identity(fd) in held:  # this process holds it already (a second flock on a
            os.close(fd)           # descriptor of its own would find it taken)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ValueError(
                    f"another process is training the run in {workdir} right now (it holds "
                    f"the folder's lock). Nothing was written. Wait for it to end or stop "
                    f"it, then run this command again to resume; or pass another "
                    f"--workdir.") from None
            return  # a filesystem without locks (ENOLCK, EINVAL): unguarded
        self._fds.append(fd)

    def release(self) -> None:
        while self._fds:
            os.close(self._fds.pop())  # closing the last descriptor drops the lock


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _flatten(tree, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _with_env_defaults(flat: dict) -> dict:
    """`flat` with the game parameters it leaves out set to the env's defaults (a run saved
    with `env.kwargs={}` made the same game as one that names each default, and one saved
    before a parameter existed made the game of its default: Connect4's `threats=False`)."""
    params = envs.defaults(flat.get("env.id"))
    given = {k: v for k, v in flat.items() if not (k == "env.kwargs" and v == {})}
    return {**{f"env.kwargs.{k}": v for k, v in params.items()}, **given}


def may_change(field: str) -> bool:
    return any(field == m or (m.endswith(".") and field.startswith(m)) for m in MAY_CHANGE)


_MISSING = object()  # a field the command does not have


def _differing(saved: dict, config: ml_collections.ConfigDict) -> list[tuple[str, object, object]]:
    """(name, run's value, command's value or `_MISSING`) of every field that differs; see
    `differences`."""
    command, run = _flatten(json.loads(config.to_json())), _flatten(saved)
    if command.get("env.id") == run.get("env.id"):  # (another game differs anyway)
        command, run = _with_env_defaults(command), _with_env_defaults(run)
    run = {**{k: v for k, v in BEFORE_FIELD.items() if k in command and k not in run}, **run}
    out = []
    for name in list(command) + [n for n in run if n not in command]:
        if name not in run:
            continue
        read_by_selfplay = name in SELFPLAY_THREATS and "threats" in (
            run.get("search.tactics"), command.get("search.tactics"))
        if may_change(name) and not read_by_selfplay:
            continue
        if command.get(name, _MISSING) != run[name]:
            out.append((name, run[name], command.get(name, _MISSING)))
    return out


def differences(saved: dict, config: ml_collections.ConfigDict) -> list[str]:
    """The fields where `config` differs from the run's `saved` config (JSON data), as
    "name (run: X, command: Y)", in the config's order. Fields in `MAY_CHANGE` are
    ignored, and so are fields the run does not have (added to the code after it was made:
    the command's value applies), except those of `BEFORE_FIELD`, which the run had in the
    form given there."""
    return _describe(_differing(saved, config))


def _describe(diff: list[tuple[str, object, object]]) -> list[str]:
    return [f"{name} (run: {run!r}, command: "
            f"{'no such field' if cmd is _MISSING else repr(cmd)})" for name, run, cmd in diff]


def _newest_meta(workdir: Path) -> tuple[dict, int] | None:
    """The metadata of the newest checkpoint in `workdir` whose metadata reads, and its
    iteration; None when none does."""
    from az_jax import checkpoint

    steps = checkpoint.saved_steps(workdir)[::-1]  # newest first
    if not steps:
        return None
    mngr = checkpoint.manager(workdir, read_only=True)
    for step in steps:
        try:
            return checkpoint.read_meta(mngr, step), step
        except Exception:  # noqa: BLE001 - damaged: the trainer skips it too
            continue
    return None


def saved_config(workdir) -> tuple[dict, str] | None:
    """The config of the run in `workdir` and where it was read: the metadata of the newest
    checkpoint whose metadata reads, else `config.json` (a run stopped before its first
    checkpoint). None when there is neither.

    Raises:
      RunMismatch: `config.json` decides and does not read or is not a JSON object: no
        command can tell whether it continues that run, and none may overwrite the file.
    """
    workdir = Path(workdir)
    newest = _newest_meta(workdir)
    if newest is not None:
        return newest[0]["config"], f"checkpoint {newest[1]}"
    path = workdir / "config.json"
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        why, detail = "does not read", f"{type(e).__name__}: {e}"
    else:
        if isinstance(saved, dict):
            return saved, "config.json"
        why, detail = "is not a JSON object", f"it holds a {type(saved).__name__}"
    raise RunMismatch(
        f"{path} {why} ({detail}), and {workdir} has no checkpoint whose metadata reads: "
        f"this command cannot tell whether it continues the run there. Nothing was written. "
        f"To start a new run, pass another --workdir, or add "
        f"--config.checkpoint.restart=True to move the folder aside to {aside_path(workdir)} "
        f"(nothing is deleted).",
        reason=f"its config.json {why}")


def write_config(workdir, config: ml_collections.ConfigDict) -> None:
    """Writes `config` to `<workdir>/config.json` atomically (a temporary file in the same
    folder, then renamed over it): a crash never leaves a half-written file, which would
    stop every later command on this workdir."""
    files.write_atomic(Path(workdir) / "config.json", config.to_json(indent=2))


def exported_from(workdir) -> str | None:
    """Where the model in `workdir` was exported from (its newest readable checkpoint's
    metadata), or None: a training run, or no readable checkpoint."""
    newest = _newest_meta(Path(workdir))
    return None if newest is None else newest[0].get("exported_from")


def check(config: ml_collections.ConfigDict, workdir) -> None:
    """Raises RunMismatch (one line) when `workdir` holds a run whose config differs from
    `config` in a field that may not change on resume, and ValueError when it holds an
    exported model (`checkpoint.export_model`), which no command resumes, or lies in
    another run's checkpoint folder."""
    from az_jax.checkpoint import SUBDIR

    path = Path(workdir).absolute()
    for folder in (path, *path.parents):
        if folder.name == SUBDIR and (folder.parent / "config.json").is_file():
            raise ValueError(
                f"{workdir} is inside the checkpoint folder of the run in {folder.parent}. "
                f"Nothing was written. To continue that run, pass --workdir {folder.parent}; "
                f"to start a new one, pass a folder outside it.")
    found = saved_config(workdir)
    if found is None:
        return
    source = exported_from(workdir)
    if source is not None:
        raise ValueError(
            f"{workdir} holds an exported model (the network alone, exported from {source}), "
            f"not a training run: it has no optimizer, games or replay to resume. Nothing was "
            f"written. To train on from its network, start a new run: pass another --workdir "
            f"and add --config.train.init_from={shlex.quote(str(workdir))}.")
    saved, where = found
    diff = _differing(saved, config)
    game = [d for d in diff if d[0] == "env.id"]
    if game:  # another game: every other field may differ, and no flags make it this one
        diff = game
    if diff:
        # The command's fields set back to the run's values: what continues the run.
        flags = [] if game else [shlex.quote(f"--config.{name}={run}")
                                 for name, run, cmd in diff if cmd is not _MISSING]
        raise RunMismatch(
            f"{workdir} holds another run: this command's config differs from the run's "
            f"({where}) in {'; '.join(_describe(diff))}. Nothing was written. "
            + choices(workdir, flags),
            reason="its config differs in " + ", ".join(name for name, _, _ in diff))


def choices(workdir, flags: list[str] | None = None) -> str:
    """What a user can do about a run this command cannot continue (`flags`: the command's
    fields set back to the run's values, when known)."""
    back = f", or add {' '.join(flags)}" if flags else ""
    return (f"To continue that run, repeat its command{back} (its config is in "
            f"{Path(workdir) / 'config.json'}); to start a new run, pass another --workdir, "
            f"or add --config.checkpoint.restart=True to move the old run aside to "
            f"{aside_path(workdir)} (nothing is deleted).")


def named(workdir) -> Path:
    """`workdir` as a path that ends in the folder's own name: resolved for `.`, `..` and
    the like (`Path(".").with_name` raises, and renaming "." fails)."""
    workdir = Path(workdir)
    return workdir.resolve() if workdir.name in ("", ".", "..") else workdir


def aside_path(workdir) -> Path:
    """The first free `<workdir>.old-N` (beside the folder itself for `.` or `..`)."""
    workdir = named(workdir)
    n = 1
    while (candidate := workdir.with_name(f"{workdir.name}.old-{n}")).exists():
        n += 1
    return candidate


def move_aside(workdir) -> Path:
    """Renames `workdir` to `aside_path(workdir)` (same filesystem: atomic) and returns
    the new path. For `.` (or `..`) the folder is renamed by its resolved path, and the
    process's working directory moves with it: a caller that goes on to write a new run
    must use `named(workdir)`, not the relative path."""
    workdir = named(workdir)
    target = aside_path(workdir)
    try:
        os.rename(workdir, target)
    except OSError as e:  # a mount point, a folder in use, no permission: never copied
        raise ValueError(  # (a copy of the whole run, replays included, could fill a disk)
            f"cannot move the run in {workdir} aside to {target} ({e.strerror}; a mount "
            f"point cannot be renamed). Nothing was moved or written. Move its contents "
            f"yourself, or pass another --workdir.") from None
    return target
