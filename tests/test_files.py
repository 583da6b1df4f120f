"""az_jax.files.write_atomic: whole or not at all, the old file's mode kept."""

import os
import signal
import stat
import subprocess
import sys

import pytest

from az_jax.files import write_atomic


def test_writes_text_bytes_and_through_a_function(tmp_path):
    assert write_atomic(tmp_path / "a.json", '{"x": 1}').read_text() == '{"x": 1}'
    assert (write_atomic(str(tmp_path / "b.bin"), b"\x00\xff").read_bytes() == b"\x00\xff")
    seen = []

    def write(p):
        seen.append(p)
        p.write_text("from a function")

    assert write_atomic(tmp_path / "c.png", write).read_text() == "from a function"
    assert seen[0].suffix == ".png" and seen[0].parent == tmp_path  # savefig reads the suffix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.bin", "c.png"]


def test_keeps_the_replaced_files_mode_and_gives_a_new_one_the_umasks(tmp_path):
    old = tmp_path / "elo.json"
    old.write_text("old")
    os.chmod(old, 0o640)
    write_atomic(old, "new")
    assert old.read_text() == "new" and stat.S_IMODE(old.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        new = write_atomic(tmp_path / "new.json", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o644  # not mkstemp's 0600


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_an_error_mid_write_leaves_the_old_file_and_no_leftover(tmp_path, error):
    path = tmp_path / "config.json"
    path.write_text("old")

    def fail(p):
        p.write_text("half")
        raise error

    with pytest.raises(type(error)):
        write_atomic(path, fail)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_a_kill_mid_write_leaves_the_old_file_whole(tmp_path):
    """A real SIGKILL after half the new text is on disk: the old file is untouched."""
    path = tmp_path / "learn.json"
    path.write_text("old and whole")
    code = (
        "import os, signal, sys\n"
        "from az_jax.files import write_atomic\n"
        "def half(p):\n"
        "    p.write_text('{\"half\": ')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "write_atomic(sys.argv[1], half)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True)
    assert done.returncode == -signal.SIGKILL
    assert path.read_text() == "old and whole"
