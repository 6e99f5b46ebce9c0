"""How a smoke run ends, for every way it can end (issue 12): a stale op-build lock found before launch and while the
ranks wait on it, a Ctrl-C during the first op build (its lock removed), the launcher or dsdoctor itself SIGKILLed
(no rank left training), an error inside the supervisor (every process stopped). Real launches of the reference
trainer on 2 CPU ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_smoke_real import ENV, by_id, processes_mentioning

pytestmark = pytest.mark.slow

OP = "deepspeed_shm_comm"  # the op DeepSpeed's CPU accelerator JIT-builds at its first collective


def start(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dsdoctor", "smoke", "--out", str(tmp_path / "out"), "--json",
                             str(tmp_path / "report.json"), *args], env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(condition, seconds: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc is None or proc.poll() is None, (what, proc.communicate())
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def gone_within(out: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while processes_mentioning(str(out)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            pass
    return found


def test_a_stale_build_lock_is_named_before_any_rank_starts(tmp_path):
    root = tmp_path / "ext"
    (root / OP).mkdir(parents=True)
    (root / OP / "lock").touch()
    t0 = time.monotonic()
    proc = start(tmp_path, "--steps", "5", env={**ENV, "TORCH_EXTENSIONS_DIR": str(root)})
    proc.communicate(timeout=120)
    report = json.loads((tmp_path / "report.json").read_text())
    (finding,) = [f for f in report["findings"] if f["severity"] == "error"]
    assert proc.returncode == 1 and finding["id"] == "ENV329"
    assert finding["fix"].startswith(f"rm {root / OP / 'lock'}")
    assert not (tmp_path / "out" / "train.log").exists() and time.monotonic() - t0 < 60
    assert (root / OP / "lock").exists()  # not ours: reported, never deleted


def test_ranks_waiting_on_a_lock_whose_builder_died_are_stopped_at_once(tmp_path):
    """The lock's holder is alive at launch (a build in progress elsewhere): the ranks wait. When it dies without
    removing the lock (what a Ctrl-C of that build leaves), smoke names the stale lock within seconds, not at
    --timeout."""
    root = tmp_path / "ext"
    (root / OP).mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time; "
                               f"fd = os.open({str(root / OP / 'lock')!r}, os.O_CREAT | os.O_EXCL); "
                               "print('held', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = start(tmp_path, "--steps", "5", "--timeout", "600", env={**ENV, "TORCH_EXTENSIONS_DIR": str(root)})
        out = tmp_path / "out"
        wait_for(lambda: len(processes_mentioning(str(out))) >= 3, 120, proc, "the ranks")
        time.sleep(8)  # the ranks reach the op build and wait on the held lock
        assert proc.poll() is None
    finally:
        holder.kill()  # dies holding it: the file stays, held by nobody
        holder.wait()
    t_dead = time.monotonic()
    proc.communicate(timeout=120)
    stopped_after = time.monotonic() - t_dead
    report = json.loads((tmp_path / "report.json").read_text())
    found = by_id(report)
    assert proc.returncode == 1 and found["ENV329"]["severity"] == "error", report["findings"]
    assert str(root / OP / "lock") in found["ENV329"]["evidence"] and "TRN608" not in found
    assert stopped_after < 30, stopped_after
    assert gone_within(out, 10)


def test_ctrl_c_during_the_first_op_build_removes_the_lock_it_left(tmp_path):
    root = tmp_path / "ext"  # empty: the op is built from scratch (about a minute on 2 cores)
    proc = start(tmp_path, "--steps", "5", env={**ENV, "TORCH_EXTENSIONS_DIR": str(root)})
    lock = root / OP / "lock"
    wait_for(lock.exists, 180, proc, "the build lock")
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert not lock.exists(), "the interrupted build's lock was left behind"
    assert gone_within(tmp_path / "out", 10)


def training(tmp_path: Path, launcher: str) -> tuple[subprocess.Popen, Path]:
    """A long smoke under ``launcher``, once both ranks have logged a step."""
    proc = start(tmp_path, "--steps", "100000", "--no-verify", "--launcher", launcher)
    out = tmp_path / "out"
    wait_for(lambda: (out / "metrics" / "rank1.jsonl").is_file() and (out / "metrics" / "rank1.jsonl").stat().st_size,
             300, proc, "the first steps")
    return proc, out


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_a_sigkilled_launcher_leaves_no_rank_training(tmp_path, launcher):
    proc, out = training(tmp_path, launcher)
    (launcher_pid,) = children(proc.pid)
    os.kill(launcher_pid, signal.SIGKILL)  # the OOM killer's choice
    t0 = time.monotonic()
    proc.communicate(timeout=120)
    assert gone_within(out, 10), f"ranks still running {time.monotonic() - t0:.0f} s after the launcher died"
    assert proc.returncode == 1


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_a_sigkilled_dsdoctor_leaves_no_rank_training(tmp_path, launcher):
    proc, out = training(tmp_path, launcher)
    proc.kill()
    proc.communicate(timeout=30)
    assert gone_within(out, 20), "ranks outlived a SIGKILLed dsdoctor"


def test_an_error_in_the_supervisor_stops_every_rank(tmp_path, monkeypatch):
    """Any exception in smoke's own loop, not only Ctrl-C, stops the launcher and its ranks (before, a metrics line
    that did not parse left torchrun, two ranks and their ports running)."""
    from click.testing import CliRunner

    from dsdoctor import extensions
    from dsdoctor.cli import cli

    calls = {"n": 0}
    real = extensions.build_locks

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 6:  # after launch, while the supervisor polls
            raise RuntimeError("an unexpected error in the supervisor")
        return real(*args, **kwargs)

    monkeypatch.setattr(extensions, "build_locks", failing)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MASTER_PORT", raising=False)  # an earlier in-process test may have left one
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["smoke", "--steps", "100000", "--out", str(out), "--no-verify"])
    assert result.exit_code == 2 and "internal error: RuntimeError: an unexpected error" in result.output
    assert calls["n"] > 6
    assert gone_within(out, 5)
