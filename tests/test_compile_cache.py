"""train.py keeps compiled programs in a persistent cache ($AZ_JAX_CACHE, default
~/.cache/az_jax/jax; AZ_JAX_CACHE=off turns it off), so a second run starts at once."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from az_jax import parallel_setup
from tests.tiny import tiny_args

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--config", str(ROOT / "configs" / "tictactoe.py"),
        *tiny_args(replay__min_size=1, checkpoint__save_replay=True)]


def _train(tmp_path, name, **env):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
               HOME=str(tmp_path / "home"), **env)
    for var in ("JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "--workdir",
                           str(tmp_path / name), *TINY], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("AZ_JAX_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert parallel_setup.cache_dir() == str(tmp_path / "az_jax" / "jax")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert parallel_setup.cache_dir() == str(tmp_path / "h" / ".cache" / "az_jax" / "jax")
    monkeypatch.setenv("AZ_JAX_CACHE", "off")
    assert parallel_setup.cache_dir() is None


@pytest.mark.slow
def test_train_fills_the_cache_unless_off(tmp_path):
    _train(tmp_path, "off", AZ_JAX_CACHE="off")
    assert not (tmp_path / "home" / ".cache" / "az_jax").exists()
    _train(tmp_path, "on", AZ_JAX_CACHE="")  # empty: the default under $HOME
    cached = list((tmp_path / "home" / ".cache" / "az_jax" / "jax").iterdir())
    assert cached, "no compiled program was cached"
