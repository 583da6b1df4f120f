"""Files written whole or not at all (no JAX; any layer may use it).

A run is killed at any moment: a half-written `config.json` or `elo.json` would stop every
later command on its workdir, and a truncated PNG or JSON would pass for a result. Every
file a person or a later command reads back is written here: to a temporary file in the
same folder (so the rename never crosses file systems), then renamed over the old one.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path


def write_atomic(path, data: str | bytes | Callable[[Path], None]) -> Path:
    """Writes `data` to `path` whole or not at all; returns `path` as a Path.

    data: the text, the bytes, or a function that writes the file at the path it is given
    (e.g. `lambda p: fig.savefig(p)`; keep the suffix in mind: the temporary file has
    `path`'s). The new file keeps the mode of the one it replaces (a new one gets the
    umask's, as any file a run writes; not mkstemp's owner-only 0600). On any error,
    KeyboardInterrupt included, the temporary file is removed and the old file stays.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{path.suffix}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if callable(data):
            os.close(fd)
            data(tmp)
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        if path.exists():
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
