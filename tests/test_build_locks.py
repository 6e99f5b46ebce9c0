"""torch's JIT build locks (dsdoctor/extensions.py) and ENV329 in `dsdoctor env` (issue 12: a Ctrl-C during the first
op build left a lock that made every later run wait silently until its timeout)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from dsdoctor import extensions
from dsdoctor.checks.environment import diagnose
from dsdoctor.cli import cli


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "ext"
    (r / "py311_cpu" / "fused_adam").mkdir(parents=True)
    return r


def hold(path) -> subprocess.Popen:
    """A process that holds ``path`` open, as torch's FileBaton does while it builds."""
    proc = subprocess.Popen([sys.executable, "-c", f"import os, time; fd = os.open({str(path)!r}, os.O_CREAT | os.O_EXCL);"
                             " print('held', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_nobody_holds_is_stale(root):
    lock = root / "py311_cpu" / "fused_adam" / "lock"
    lock.touch()
    (found,) = extensions.build_locks([root])
    assert (found.path, found.op, found.stale, found.holders) == (str(lock), "fused_adam", True, [])


def test_a_lock_held_open_by_a_live_builder_is_not_stale(root):
    lock = root / "py311_cpu" / "fused_adam" / "lock"
    builder = hold(lock)
    try:
        (found,) = extensions.build_locks([root])
        assert found.holders == [builder.pid] and not found.stale
    finally:
        builder.kill()
        builder.wait()
    (after,) = extensions.build_locks([root])  # the builder died holding it: the file stays, held by nobody
    assert after.stale


def test_a_compiler_working_in_the_build_directory_keeps_the_lock_live(root, tmp_path):
    build = root / "py311_cpu" / "fused_adam"
    (build / "lock").touch()
    ninja = tmp_path / "ninja"  # a process whose name is a build tool's, working in the build directory
    shutil.copy("/bin/sleep", ninja)
    proc = subprocess.Popen([str(ninja), "60"], cwd=build)
    try:
        time.sleep(0.2)
        (found,) = extensions.build_locks([root])
        assert found.compilers == [proc.pid] and not found.stale
    finally:
        proc.kill()
        proc.wait()


def test_locks_at_both_depths_torch_uses(tmp_path):
    (tmp_path / "a" / "op1").mkdir(parents=True)  # TORCH_EXTENSIONS_DIR/<op>/lock
    (tmp_path / "a" / "op1" / "lock").touch()
    (tmp_path / "b" / "py311_cu124" / "op2").mkdir(parents=True)  # <cache>/torch_extensions/<py>_<dev>/<op>/lock
    (tmp_path / "b" / "py311_cu124" / "op2" / "lock").touch()
    assert sorted(lock.op for lock in extensions.build_locks([tmp_path / "a", tmp_path / "b"])) == ["op1", "op2"]


def test_roots_follow_torch(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert extensions.roots() == [tmp_path / "cache" / "torch_extensions", tmp_path / "cache" / "dsdoctor" /
                                  "torch_extensions"]
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "mine"))
    assert extensions.roots() == [tmp_path / "mine"]
    assert extensions.smoke_root() is None  # the user's choice is used as it is


def test_each_python_environment_gets_its_own_smoke_extensions_dir(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    a = extensions.smoke_root(env, prefix="/opt/venvs/a", torch_tag="2.13.0+cpu")
    b = extensions.smoke_root(env, prefix="/opt/venvs/b", torch_tag="2.13.0+cpu")
    c = extensions.smoke_root(env, prefix="/opt/venvs/a", torch_tag="2.11.0+cu130")
    assert len({a, b, c}) == 3 and a.parent == tmp_path / "dsdoctor" / "torch_extensions" and a.name.startswith("a-")
    assert extensions.smoke_root(env, prefix="/opt/venvs/a", torch_tag="2.13.0+cpu") == a


def test_remove_if_stale_removes_only_the_same_unheld_file(root):
    lock = root / "py311_cpu" / "fused_adam" / "lock"
    lock.touch()
    (found,) = extensions.build_locks([root])
    lock.unlink()
    lock.touch()  # another build created a new lock meanwhile: a different file
    if os.stat(lock).st_ino != found.inode:
        assert not extensions.remove_if_stale(found) and lock.exists()
    (again,) = extensions.build_locks([root])
    builder = None
    try:
        lock.unlink()
        builder = hold(lock)
        (held,) = extensions.build_locks([root])
        assert not extensions.remove_if_stale(held) and lock.exists()  # held: left alone
    finally:
        if builder:
            builder.kill()
            builder.wait()
    (stale,) = extensions.build_locks([root])
    assert extensions.remove_if_stale(stale) and not lock.exists()


def test_env_names_a_stale_lock_with_the_path_to_delete(root, monkeypatch):
    lock = root / "py311_cpu" / "fused_adam" / "lock"
    lock.touch()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(root))
    result = CliRunner().invoke(cli, ["env", "--only", "toolchain", "--format", "json"])
    data = json.loads(result.stdout)
    (finding,) = [f for f in data["findings"] if f["id"] == "ENV329"]
    assert result.exit_code == 1 and finding["severity"] == "error"
    assert finding["fix"].startswith(f"rm {lock}") and str(lock) in finding["evidence"]
    assert data["result"]["facts"]["toolchain"]["build_locks"][0]["stale"] is True


def test_a_saved_report_with_a_stale_lock_is_diagnosed_too():
    facts = {"toolchain": {"gcc": "c++ 12", "ninja": "1.11", "libaio": True,
                           "build_locks": [{"path": "/home/u/.cache/torch_extensions/py310_cu121/fused_adam/lock",
                                            "op": "fused_adam", "age_s": 3600, "stale": True},
                                           {"path": "/x/op/lock", "op": "op", "age_s": 5, "stale": False}]}}
    found = [f for f in diagnose(facts, live=False) if f.id == "ENV329"]
    assert len(found) == 1 and "py310_cu121/fused_adam/lock" in found[0].fix
