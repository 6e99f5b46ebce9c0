"""``dsdoctor hang`` on real jobs: torchrun ranks over gloo on the CPU (tests/hang_job.py) stalled as real runs stall,
snapshotted by the command with the real py-spy, and let go afterwards to show the job goes on unchanged."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsdoctor.cli import cli

JOB = Path(__file__).resolve().parent / "hang_job.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("py-spy") is None,
                                reason="dsdoctor hang reads /proc and needs py-spy")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """``torchrun --nproc-per-node N tests/hang_job.py MODE WORKDIR`` in its own session, started and waited for
    until every rank has logged ``step`` steps (the stall comes at step 3) and, in exit mode, the last rank is gone."""

    def __init__(self, mode: str, workdir: Path, nproc: int = 2, env: dict | None = None):
        self.mode, self.workdir, self.nproc = mode, workdir, nproc
        env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        env.pop("RANK", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
             str(_free_port()), str(JOB), mode, str(workdir)],
            stdout=(workdir / "out.txt").open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def steps(self, rank: int) -> int:
        path = self.workdir / f"loss-{rank}.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return int(lines[-1].split()[3]) if lines else 0

    def wait_steps(self, steps: int, timeout: float = 120) -> None:
        """Until every rank has logged ``steps`` steps (a job that does not stall: advance, steady, straggler...)."""
        deadline = time.monotonic() + timeout
        while not all(self.steps(r) >= steps for r in range(self.nproc)):
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                (self.workdir / "out.txt").read_text()[-2000:]
            time.sleep(0.2)

    def wait_stalled(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.workdir / "out.txt").read_text()[-2000:]
            if all(self.steps(r) >= 2 for r in range(self.nproc)):
                if self.mode != "exit" or not _alive(int((self.workdir / f"ready-{self.nproc - 1}").read_text())):
                    time.sleep(1.0)  # into step 3's stall
                    return
            time.sleep(0.2)
        raise AssertionError(f"job did not reach its stall: {(self.workdir / 'out.txt').read_text()[-2000:]}")

    def release(self, timeout: float = 60) -> int:
        (self.workdir / "release").write_text("")
        try:
            return self.proc.wait(timeout)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]


@pytest.fixture
def job(tmp_path):
    started = []

    def start(mode: str, nproc: int = 2, env: dict | None = None) -> Job:
        j = Job(mode, tmp_path, nproc, env)
        started.append(j)
        j.wait_stalled()
        return j

    yield start
    for j in started:
        j.stop()


def hang(*args):
    """`dsdoctor hang ARGS --json -`: (exit code, JSON, result); --wait 4 unless given (a hang costs all of it)."""
    wait = [] if "--wait" in args or "--merge" in args else ["--wait", "4"]
    result = CliRunner().invoke(cli, ["hang", *args, *wait, "--json", "-"])
    data = json.loads(result.output) if result.output.strip().startswith("{") else None
    return result.exit_code, data, result


@pytest.mark.slow
def test_a_rank_that_sleeps_before_the_collective_is_named_with_its_frame_and_the_job_goes_on(job):
    j = job("sleep")
    code, data, result = hang("--pid", str(j.proc.pid), "--interval", "1")
    assert code == 1, result.output
    first = data["findings"][0]
    assert first["id"] == "HANG901"
    line = next(i for i, text in enumerate(JOB.read_text().splitlines(), 1) if "time.sleep(0.05)" in text
                and "def wait_for_release" in JOB.read_text().splitlines()[i - 3])
    assert first["title"] == f"rank 1 has not reached all_reduce: it is at wait_for_release at hang_job.py:{line}"
    assert "rank 0 waits in all_reduce called from main at hang_job.py:" in first["evidence"]
    assert "(standing still)" in first["evidence"] or "(advancing: busy, not blocked)" in first["evidence"]
    ranks = {r["rank"]: r for r in data["result"]["ranks"]}
    assert ranks[0]["position"]["state"] == "collective" and ranks[1]["position"]["state"] == "elsewhere"
    assert ranks[0]["advancing"] is False  # rank 1 polls its file: its samples may show the loop's two lines
    # found without --pid too, from the ranks' environment (other jobs on the machine may be found beside them)
    from dsdoctor.checks.hang.procs import find_ranks

    found = {r.pid: r for r in find_ranks()}
    assert all(found[ranks[r]["pid"]].rank == r for r in range(2))
    before = [j.steps(r) for r in range(2)]
    assert before == [2, 2]
    assert j.release() == 0  # unchanged by the snapshot: the loss log goes on to the end
    assert [j.steps(r) for r in range(2)] == [6, 6]


@pytest.mark.slow
def test_two_ranks_in_different_collectives_are_mismatched(job):
    j = job("mismatch")
    code, data, _ = hang("--pid", str(j.proc.pid), "--interval", "0.5")
    assert code == 1
    (finding,) = data["findings"]
    assert finding["id"] == "HANG902"
    assert "rank 0 waits in all_reduce called from main at hang_job.py:" in finding["evidence"]
    assert "rank 1 waits in broadcast called from main at hang_job.py:" in finding["evidence"]


@pytest.mark.slow
def test_a_rank_that_exited_is_gone_and_the_others_wait_for_it(job):
    j = job("exit")
    code, data, result = hang("--pid", str(j.proc.pid), "--interval", "0.5")
    assert code == 1, result.output
    (finding,) = data["findings"]
    assert finding["id"] == "HANG903" and finding["title"].startswith("rank 1 is gone")
    assert "no process of local rank 1 of 2 under the launcher" in finding["evidence"]
    assert "rank 0 waits in all_reduce called from main" in finding["evidence"]
    assert [r["rank"] for r in data["result"]["ranks"]] == [0]


@pytest.mark.slow
def test_every_rank_waiting_for_its_dataloader_names_the_workers_frame(job):
    j = job("dataloader")
    ranks = [str(int((j.workdir / f"ready-{r}").read_text())) for r in range(2)]
    code, data, _ = hang("--pid", ranks[0], "--pid", ranks[1], "--interval", "0.5")  # the ranks' own PIDs
    assert code == 1
    (finding,) = data["findings"]
    assert finding["id"] == "HANG904"
    assert "ranks 0-1 wait for the DataLoader's next batch (asked by main at hang_job.py:" in finding["evidence"]
    assert "is at SlowData.__getitem__ at hang_job.py:" in finding["evidence"]
    assert j.release() == 0


@pytest.mark.slow
def test_four_ranks_one_late_and_an_advancing_job(job, tmp_path):
    j = job("sleep", nproc=4)
    code, data, _ = hang("--pid", str(j.proc.pid), "--interval", "0.5", "--json", str(tmp_path / "node.json"))
    assert code == 1
    assert data["findings"][0]["title"].startswith("rank 3 has not reached all_reduce")
    assert "ranks 0-2 wait in all_reduce" in data["findings"][0]["evidence"]
    assert j.release() == 0


@pytest.mark.slow
def test_an_advancing_job_is_not_hung(tmp_path):
    j = Job("advance", tmp_path)
    try:
        j.wait_steps(2)
        code, data, result = hang("--pid", str(j.proc.pid), "--interval", "2")
        assert code == 0, result.output
        (finding,) = data["findings"]
        assert finding["id"] == "HANG900"
        assert all(r["advancing"] for r in data["result"]["ranks"])
        assert j.release() == 0
    finally:
        j.stop()


@pytest.mark.slow
def test_the_flight_recorder_names_the_late_rank_when_the_stacks_cannot(job, tmp_path):
    """Ranks 0-1 enqueue step 3's all_reduce asynchronously and wait on the work at a line of their own (as NCCL ranks
    wait at the next synchronising call): their stacks show no collective. Their Flight Recorder dumps (torch's own
    records, written where NCCL's watchdog writes them on a timeout) show rank 2 one collective behind."""
    j = job("sleep", nproc=3, env={"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_")})
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"fr_{r}").exists() for r in range(3)) and time.monotonic() < deadline:
        time.sleep(0.2)
    code, data, result = hang("--pid", str(j.proc.pid), "--interval", "0.5")
    assert code == 1, result.output
    first = data["findings"][0]
    assert first["id"] == "HANG901", data["findings"]
    assert first["title"] == "rank 2 has not reached the collective the others enqueued (Flight Recorder)"
    assert first["evidence"].startswith("default_pg: ranks 0-1 last enqueued all_reduce #3; rank 2 last enqueued "
                                        "all_reduce #2; torch's own analysis (torch.distributed.flight_recorder): "
                                        "all_reduce #3 (0:default_pg): rank 2 missing, called from main at hang_job.py:")
    assert "; rank 2 is at wait_for_release at hang_job.py:" in first["evidence"]
    assert fr_analysis_of(data)["problems"][0]["missing_ranks"] == [2]
    assert "HANG907" not in [f["id"] for f in data["findings"]]
    fr = data["result"]["ranks"][0]["flight_recorder"]
    # #2 completed on every rank; gloo marks a record retired when its work object is released, which a dump taken
    # right after #3's enqueue may precede (1 full-suite run in several): then #1 is the last marked completed
    assert fr["on"] and fr["groups"]["default_pg"]["last_completed"]["seq"] in (1, 2)
    j.release()  # its exit status is not asserted: with the recorder on, gloo's teardown aborts now and then
    # ("terminate called without an active exception", 1 run in 3 with no snapshot taken either)
    assert [j.steps(r) for r in range(3)] == [6, 6, 6]


def fr_analysis_of(data: dict) -> dict:
    """torch's own Flight Recorder analysis as a snapshot's node record carries it."""
    return data["result"]["nodes"][0]["flight_analysis"]


def test_a_flight_recorder_dump_with_a_class_in_it_is_refused_not_run(tmp_path):
    """Dumps are read from /tmp, where another user may write: a pickle naming any class is refused."""
    import pickle

    from dsdoctor.checks.hang.flight import read_dump

    path = tmp_path / "fr_0"
    path.write_bytes(pickle.dumps({"entries": [], "evil": Path("/")}))
    with pytest.raises(ValueError, match="not a Flight Recorder dump"):
        read_dump(str(path))
    path.write_bytes(pickle.dumps({"entries": [{"collective_seq_id": 1}], "version": "2.10"}))
    assert read_dump(str(path))["entries"] == [{"collective_seq_id": 1}]


def _record(rank, state, host="node-a", op="all_reduce", line=75, advancing=False, world=4):
    frame = {"name": "main", "file": "/w/train.py", "short": "train.py", "line": line}
    position = {"state": state, "op": op, "caller": frame} if state == "collective" else \
        {"state": state, "at": frame, "caller": frame}
    return {"host": host, "pid": 1000 + rank, "rank": rank, "local_rank": rank % 2, "world_size": world,
            "position": position, "advancing": advancing, "error": None, "proc": {}, "workers": []}


def _snapshot_file(path: Path, records: list[dict], nodes: list[dict]) -> str:
    path.write_text(json.dumps({"command": "hang", "dsdoctor_version": "x", "findings": [],
                                "result": {"ranks": records, "nodes": nodes, "interval_s": 1.0}}))
    return str(path)


def test_merge_joins_two_nodes_snapshots_into_one_verdict(tmp_path):
    """Node a's ranks 0-1 wait in all_reduce: alone, HANG905 (the late rank is not here); merged with node b, where
    rank 3 is in its own code, rank 3 is named (HANG901)."""
    a = _snapshot_file(tmp_path / "a.json", [_record(0, "collective"), _record(1, "collective")],
                       [{"host": "node-a", "gone": []}])
    b = _snapshot_file(tmp_path / "b.json", [_record(2, "collective", "node-b"),
                                             _record(3, "elsewhere", "node-b", line=88)],
                       [{"host": "node-b", "gone": []}])
    code, data, _ = hang("--merge", a)
    assert code == 0 and data["findings"][0]["id"] == "HANG905"
    assert "ranks 2-3 of world size 4 are in no snapshot" in data["findings"][0]["evidence"]
    code, data, _ = hang("--merge", a, "--merge", b)
    assert code == 1
    (finding,) = data["findings"]
    assert finding["id"] == "HANG901"
    assert finding["title"] == "rank 3 has not reached all_reduce: it is at main at train.py:88"
    assert "ranks 0-2 wait in all_reduce called from main at train.py:75" in finding["evidence"]


@pytest.mark.parametrize("content, message", [
    (None, "--merge {}: No such file or directory"),
    ("{not json", "--merge {}: not JSON (give the files `dsdoctor hang --json FILE` wrote)"),
    ('{"command": "check", "result": {}}', "--merge {}: not a snapshot of `dsdoctor hang --json`"),
    ('{"command": "hang", "result": {"ranks": [{"pid": "x"}], "nodes": []}}', "--merge {}: a rank record without pid and position"),
])
def test_merge_refuses_what_is_not_a_snapshot_in_one_line(tmp_path, content, message):
    path = tmp_path / "s.json"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(cli, ["hang", "--merge", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == f"dsdoctor: error: {message.format(path)}"
    assert "Traceback" not in result.output


def test_a_pid_that_is_no_rank_and_no_process_is_one_line(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = CliRunner().invoke(cli, ["hang", "--pid", str(sleeper.pid)])
        assert result.exit_code == 2
        assert "neither a rank (RANK in its environment and PyTorch loaded) nor a launcher of ranks" in result.output
    finally:
        sleeper.kill()
        sleeper.wait()
    gone = sleeper.pid
    result = CliRunner().invoke(cli, ["hang", "--pid", str(gone)])
    assert result.exit_code == 2 and f"--pid {gone}: no such process" in result.output


def _py_spy_binary() -> str:
    import importlib.metadata

    try:
        files = importlib.metadata.distribution("py-spy").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = [str(f.locate()) for f in files if f.name == "py-spy"]
    return found[0] if found and os.path.isfile(found[0]) else shutil.which("py-spy")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the target and the reader as two other users")
def test_ptrace_refused_is_reported_with_its_fix():
    """A process of another user, read by a user without CAP_SYS_PTRACE: py-spy's real refusal, HANG906 with the
    fix, and /proc's view still given."""
    from dsdoctor.checks.hang.verdict import diagnose

    import tempfile

    home = Path(tempfile.mkdtemp(prefix="dsdoctor-ptrace-", dir="/tmp"))  # a path the other users can reach
    exe = home / "bin" / "py-spy"
    exe.parent.mkdir()
    shutil.copy(_py_spy_binary(), exe)  # the binary itself: a pyenv shim on PATH is a bash script
    for p in (home, exe.parent, exe):
        p.chmod(0o755)
    target = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setuid(65534))
    try:
        code = ("import os, sys, json\nfrom dsdoctor.checks.hang.stacks import dump\n"
                f"os.environ['PATH'] = {str(exe.parent)!r}\nos.setgid(65533); os.setuid(65533)\n"
                f"print(json.dumps(dump({target.pid})))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        threads, error = json.loads(out.stdout)
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(home, ignore_errors=True)
    assert threads is None and error.startswith("ptrace refused: Permission Denied")
    record = {"host": "h", "pid": target.pid, "rank": 0, "position": {"state": "unknown"}, "error": error,
              "proc": {"status": "sleeping", "wchan": "hrtimer_nanosleep"}, "advancing": None}
    (finding,) = diagnose([record], [{"host": "h", "gone": []}], 1.0)
    assert finding.id == "HANG906" and "SYS_PTRACE" in finding.fix
    assert "in the kernel's hrtimer_nanosleep" in finding.evidence


def test_py_spy_missing_is_a_finding_not_a_traceback(tmp_path, monkeypatch):
    from dsdoctor.checks.hang import stacks

    monkeypatch.setattr(stacks, "py_spy", lambda: None)
    threads, error = stacks.dump(os.getpid())
    assert threads is None and error == "py-spy is not installed (pip install py-spy)"


PY_SPY_PASTE = """\
Process 4011: /usr/bin/python3 train.py --local_rank=0
Python v3.11.7 (/usr/bin/python3.11)

Thread 4011 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    main (train.py:75)
    <module> (train.py:90)
Thread 4100 (idle): "Thread-1 (_pin_memory_loop)"
    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:55)
Process 4012: /usr/bin/python3 train.py --local_rank=1
Python v3.11.7 (/usr/bin/python3.11)

Thread 4012 (active+gil): "MainThread"
    save_checkpoint (train.py:47)
    main (train.py:70)
"""


def test_explain_reads_py_spy_dumps_pasted_into_a_log():
    """Two ranks' `py-spy dump` texts, as users paste them into an issue: rank 1 has not reached the all_reduce."""
    result = CliRunner().invoke(cli, ["explain", "-", "--json", "-"], input=PY_SPY_PASTE)
    data = json.loads(result.output)
    assert result.exit_code == 1
    first = data["findings"][0]
    assert first["id"] == "HANG901"
    assert first["title"] == "rank 1 has not reached all_reduce: it is at save_checkpoint at train.py:47"
    assert first["evidence"].startswith("rank 0 waits in all_reduce called from main at train.py:75")


def _real_dump(path: Path, collectives: int) -> None:
    """A Flight Recorder dump written by torch itself: a one-rank gloo group that ran ``collectives`` all_reduces."""
    code = ("import os, torch, torch.distributed as dist, torch._C._distributed_c10d as c\n"
            "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d', rank=0, world_size=1)\n"
            "x = torch.ones(2)\n"
            "for _ in range(%d): dist.all_reduce(x)\n"
            "open(%r, 'wb').write(c._dump_fr_trace())\n"
            "dist.destroy_process_group()\n" % (_free_port(), collectives, str(path)))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env=dict(os.environ, TORCH_FR_BUFFER_SIZE="100"), capture_output=True)


def test_explain_reads_flight_recorder_dump_files(tmp_path):
    """Dumps as torch writes them (``<prefix><rank>``): rank 1 enqueued one collective fewer than rank 0."""
    _real_dump(tmp_path / "nccl_trace_rank_0", 3)
    _real_dump(tmp_path / "nccl_trace_rank_1", 2)
    result = CliRunner().invoke(cli, ["explain", str(tmp_path / "nccl_trace_rank_0"),
                                      str(tmp_path / "nccl_trace_rank_1"), "--json", "-"])
    data = json.loads(result.output)
    assert result.exit_code == 1, result.output
    (finding,) = data["findings"]
    assert finding["id"] == "HANG901"
    assert finding["evidence"] == ("default_pg: rank 0 last enqueued all_reduce #3; rank 1 last enqueued "
                                   "all_reduce #2")


@pytest.mark.slow
def test_kill_stops_the_ranks_only_after_the_snapshot_and_says_what_it_stopped(job):
    j = job("sleep")
    pids = [int((j.workdir / f"ready-{r}").read_text()) for r in range(2)]
    code, data, result = hang("--pid", str(j.proc.pid), "--interval", "0", "--kill")
    assert data["result"]["killed"][0].startswith("nothing stopped: one snapshot (--interval 0)")
    assert j.proc.poll() is None
    code, data, result = hang("--pid", str(j.proc.pid), "--interval", "1", "--kill")
    assert code == 1, result.output
    assert data["findings"][0]["id"] == "HANG901"  # the snapshot first
    killed = data["result"]["killed"]
    assert killed[0].startswith("the launcher (") and killed[0].endswith(f"(pid {j.proc.pid}): SIGTERM")
    assert sorted(killed[1:]) == sorted(f"rank {r} (pid {p}): SIGTERM" for r, p in enumerate(pids))
    j.proc.wait(30)
    assert not any(_alive(p) for p in pids)


# what a new user's try found (helper, 2026-12-04), each now checked

@pytest.mark.slow
def test_a_rank_pid_alone_finds_its_job_and_a_stopped_rank_is_named(job):
    """--pid of one rank used to take the job's other local ranks for gone (false HANG903s); and a rank stopped with
    SIGSTOP was reported as on another node and as a ptrace problem."""
    j = job("sleep")
    pids = [int((j.workdir / f"ready-{r}").read_text()) for r in range(2)]
    code, data, _ = hang("--pid", str(pids[0]), "--interval", "0.5")
    assert [f["id"] for f in data["findings"]] == ["HANG901"]
    assert data["findings"][0]["title"].startswith("rank 1 has not reached all_reduce")
    os.kill(pids[1], signal.SIGSTOP)
    try:
        code, data, _ = hang("--pid", str(j.proc.pid), "--interval", "0.5")
        assert code == 1
        first = data["findings"][0]
        assert first["id"] == "HANG909" and f"kill -CONT {pids[1]}" in first["fix"]
        assert "HANG906" not in [f["id"] for f in data["findings"]]
    finally:
        os.kill(pids[1], signal.SIGCONT)
    assert j.release() == 0


def test_a_rank_started_as_python_script_is_found(tmp_path):
    """`RANK=0 ... python train.py` (no -u: mpirun, srun, a launcher of one's own) was not taken for a rank."""
    script = tmp_path / "plain.py"
    ready = tmp_path / "ready"
    script.write_text(f"import pathlib, time\nimport torch\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script)], env=dict(os.environ, RANK="0", LOCAL_RANK="0",
                                                                        WORLD_SIZE="1"))
    try:
        # until torch is imported and the script sleeps: libtorch mapped while the import still runs was snapshotted
        # busy (HANG904) on a fresh clone's run
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ready.exists():
            time.sleep(0.2)
        time.sleep(0.3)
        code, data, result = hang("--pid", str(proc.pid), "--interval", "0")
        assert code in (0, 1), result.output
        assert data["result"]["ranks"][0]["rank"] == 0
        assert data["findings"][0]["id"] == "HANG907"
    finally:
        proc.kill()
        proc.wait()


def test_every_rank_here_in_one_collective_is_not_called_a_missing_rank():
    """Both ranks of a world of 2 in the same all_reduce: no rank is missing, so the collective is slow or stuck in
    its transport (a 3.7 s all_reduce was called 'the late rank is not here'); with their CPU time rising, a slow
    collective still working."""
    from dsdoctor.checks.hang.verdict import diagnose

    records = [_record(0, "collective", world=2), _record(1, "collective", world=2)]
    (finding,) = diagnose(records, [{"host": "a", "gone": []}], 1.0)
    assert finding.id == "HANG905" and "every rank of the job is here" in finding.evidence
    assert finding.title.endswith("it is slow or stuck in its transport")
    for r in records:
        r["busy"] = True
    (finding,) = diagnose(records, [{"host": "a", "gone": []}], 1.0)
    assert finding.title.endswith("a slow collective, still working")


def test_ranks_blocked_outside_any_collective_are_an_error_and_busy_ones_a_warning():
    from dsdoctor.checks.hang.verdict import diagnose

    records = [_record(0, "elsewhere", world=2), _record(1, "elsewhere", world=2)]
    (finding,) = diagnose(records, [{"host": "a", "gone": []}], 1.0)
    assert (finding.id, finding.severity) == ("HANG907", "error")
    for r in records:
        r["busy"] = True
    (finding,) = diagnose(records, [{"host": "a", "gone": []}], 1.0)
    assert (finding.id, finding.severity) == ("HANG907", "warning") and "busy at one line" in finding.title


def test_native_frames_do_not_hide_the_python_line():
    from dsdoctor.checks.hang.stacks import position

    frames = [{"name": "clock_nanosleep", "file": "libc.so.6", "short": "libc.so.6", "line": 0},
              {"name": "wait_for_file", "file": "/w/four.py", "short": "four.py", "line": 5},
              {"name": "main", "file": "/w/four.py", "short": "four.py", "line": 20}]
    assert position(frames)["at"]["name"] == "wait_for_file"


def test_merge_refuses_two_jobs_and_edited_records(tmp_path):
    a = _record(0, "collective")
    a["job"] = ["10.0.0.1", "29500", "", "2", "", ""]
    b = _record(1, "collective")
    b["job"] = ["10.0.0.1", "29501", "", "2", "", ""]
    pa = _snapshot_file(tmp_path / "a.json", [a], [{"host": "a", "gone": []}])
    pb = _snapshot_file(tmp_path / "b.json", [b], [{"host": "b", "gone": []}])
    code, data, result = hang("--merge", pa, pb)
    assert code == 2 and "the snapshots are of 2 different jobs" in result.output
    for field, value, message in (("op", None, "a collective without its op"),
                                  ("rank", True, "is not a rank number"),
                                  ("gpu", {"util": "x"}, "gpu is not NVML's record")):
        bad = _record(0, "collective")
        if field == "op":
            bad["position"]["op"] = value
        else:
            bad[field] = value
        path = _snapshot_file(tmp_path / f"bad-{field}.json", [bad], [{"host": "a", "gone": []}])
        code, _, result = hang("--merge", path)
        assert code == 2 and message in result.output and "Traceback" not in result.output
    path = _snapshot_file(tmp_path / "gone.json", [_record(0, "collective")], [{"host": "a", "gone": "x"}])
    code, _, result = hang("--merge", path)
    assert code == 2 and "a node record of an unexpected shape" in result.output


@pytest.mark.slow
def test_a_steady_job_whose_steps_sit_at_one_line_is_advancing_and_kill_stops_nothing(tmp_path):
    """A new user's healthy job (each step an all_reduce then a sleep on one line) was called hung in most snapshots,
    and --kill stopped it: every sample of a rank could find it at the sleep. Its main thread keeps waking and its
    process keeps reading and writing (/proc), which a rank blocked in a collective does not."""
    j = Job("steady", tmp_path)
    try:
        j.wait_steps(3)
        for _ in range(2):
            code, data, result = hang("--pid", str(j.proc.pid), "--interval", "1.5", "--kill")
            assert code == 0, result.output
            assert [f["id"] for f in data["findings"]] == ["HANG900"]
            assert data["result"]["killed"][0].startswith("nothing stopped: ranks 0-1 advanced")
            assert all(r["activity"]["moving"] for r in data["result"]["ranks"]), data["result"]["ranks"]
        before = j.steps(0)
        time.sleep(1.0)
        assert j.proc.poll() is None and j.steps(0) > before  # still training
        assert j.release() == 0
    finally:
        j.stop()


def test_a_python_process_with_rank_in_its_environment_but_no_torch_is_no_rank(tmp_path):
    """RANK=0 on a process that never loaded PyTorch or MPI (a helper script under the launcher's environment) was
    taken for a rank and judged blocked."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env=dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1"))
    try:
        time.sleep(0.5)
        code, _, result = hang("--pid", str(proc.pid), "--interval", "0")
        assert code == 2 and "neither a rank" in result.output
    finally:
        proc.kill()
        proc.wait()


def test_a_rank_moves_when_it_wakes_and_reads_or_writes_between_two_readings():
    """/proc's counters between two readings 0.25 s apart: a rank blocked in a collective does neither; a loop polling
    a file wakes but reads and writes nothing; a training step does both."""
    from dsdoctor.checks.hang.procs import moved

    def reading(wakeups, calls, at):
        return {"wakeups": wakeups, "syscalls": calls, "at": at}

    assert moved(reading(10, 100, 0.0), reading(14, 120, 0.25))
    assert not moved(reading(10, 100, 0.0), reading(10, 100, 0.25))  # blocked
    assert not moved(reading(10, 100, 0.0), reading(15, 100, 0.25))  # polling with sleeps
    assert not moved(reading(10, 100, 0.0), reading(10, 160, 0.25))  # another thread's traffic, the main one asleep
    assert not moved(reading(10, 100, 0.0), reading(11, 102, 2.0))  # once in 2 s: below 2 wakeups and 5 calls a second
    assert not moved(None, reading(1, 1, 0.0)) and not moved(reading(1, 1, 0.0), None)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.__setitem__("advancing", "yes"), "advancing is not true, false or null"),
    (lambda r: r.__setitem__("workers", [None]), "workers is not a list"),
    (lambda r: r.__setitem__("flight_recorder", [1]), "flight_recorder is not"),
    (lambda r: r.__setitem__("flight_recorder", {"on": True, "groups": {"0": [1, None]}}), "flight_recorder is not"),
    (lambda r: r.__setitem__("activity", {"wakeups": "x"}), "activity is not"),
])
def test_merge_refuses_records_edited_into_other_shapes(tmp_path, edit, message):
    """Hand-edited snapshots that ended in an internal error (a new user's 45 edits; these five did)."""
    record = _record(0, "collective")
    edit(record)
    path = _snapshot_file(tmp_path / "a.json", [record, _record(1, "elsewhere")], [{"host": "node-a", "gone": []}])
    result = CliRunner().invoke(cli, ["hang", "--merge", path])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_merge_of_no_rank_records_and_of_deep_json_is_one_line(tmp_path):
    empty = _snapshot_file(tmp_path / "e.json", [], [{"host": "node-a", "gone": []}])
    result = CliRunner().invoke(cli, ["hang", "--merge", empty])
    assert result.exit_code == 2 and "no rank record" in result.output
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = CliRunner().invoke(cli, ["hang", "--merge", str(deep)])
    assert result.exit_code == 2 and "not JSON" in result.output


def test_a_torch_multiprocessing_spawn_job_gets_a_hint_not_a_dead_end(tmp_path):
    """torch.multiprocessing.spawn gives each rank its rank as an argument, not in its environment: --pid of its
    parent named nothing a user could act on."""
    script = tmp_path / "spawned.py"
    script.write_text("import time\nimport torch.multiprocessing as mp\n\n\ndef work(i):\n    time.sleep(60)\n\n\n"
                      "if __name__ == '__main__':\n    mp.spawn(work, nprocs=2)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    proc = subprocess.Popen([sys.executable, str(script)], env=env)  # no rank of this process's own (an in-process
    try:  # DeepSpeed test may have set RANK here)
        import psutil

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(psutil.Process(proc.pid).children()) < 2:
            time.sleep(0.2)
        result = CliRunner().invoke(cli, ["hang", "--pid", str(proc.pid)])
        assert result.exit_code == 2, result.output
        assert "started by torch.multiprocessing.spawn" in result.output and "py-spy dump --pid" in result.output
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_straggler_whose_step_is_longer_than_the_interval_is_not_a_hang(tmp_path):
    """A new user's healthy job where one rank computes for seconds while the others wait in all_reduce was called
    hung (HANG901, an error) in 9 snapshots of 12, and --kill stopped it: the window now runs on (--wait) until every
    rank has moved, and a rank that burns CPU is never killed on a guess."""
    j = Job("straggler", tmp_path)
    try:
        j.wait_steps(2)
        for _ in range(2):
            code, data, result = hang("--pid", str(j.proc.pid), "--interval", "1", "--wait", "8", "--kill")
            assert code == 0, result.output
            assert [f["id"] for f in data["findings"]] == ["HANG900"], data["findings"]
            assert data["result"]["killed"][0].startswith("nothing stopped")
            assert 1 <= data["result"]["ranks"][0]["window_s"] <= 9
        assert j.proc.poll() is None
        assert j.release() == 0
    finally:
        j.stop()


@pytest.mark.slow
def test_ranks_in_one_long_sleep_are_inconclusive_and_not_killed_and_one_snapshot_is_a_warning(tmp_path):
    """A new user's healthy job whose every rank sleeps 12-30 s per step was HANG907 'each is blocked', an error, and
    --kill stopped it. A rank in one timed sleep (/proc's wchan, and its main thread never woke: a polling loop wakes)
    may be a long step or a stuck retry: a warning, never killed. One snapshot (--interval 0) measures no motion: its
    verdicts are warnings."""
    j = Job("nap", tmp_path)
    try:
        j.wait_steps(1)
        time.sleep(1.0)  # into the first 12 s nap
        code, data, result = hang("--pid", str(j.proc.pid), "--interval", "1", "--wait", "3", "--kill")
        assert code == 0, result.output
        (finding,) = data["findings"]
        assert finding["id"] == "HANG907" and finding["severity"] == "warning"
        assert "every rank sleeps (time.sleep)" in finding["title"]
        assert data["result"]["killed"][0].startswith("nothing stopped: ranks 0-1 sleep on a timer")
        assert j.proc.poll() is None
        code, data, _ = hang("--pid", str(j.proc.pid), "--interval", "0")
        assert code == 0 and all(f["severity"] != "error" for f in data["findings"])
        assert j.release(timeout=60) == 0
    finally:
        j.stop()


def test_one_snapshot_names_positions_as_warnings_and_a_window_as_errors():
    """--interval 0 says where the ranks are, not whether they move: a new user's healthy job was called hung (an
    error) by one snapshot in 1 of 3 calls. Over a window where no rank moved, the same positions are an error."""
    from dsdoctor.checks.hang.verdict import diagnose

    records = [_record(0, "collective"), _record(1, "elsewhere")]
    (one,) = diagnose(records, [{"host": "node-a", "gone": []}], 0)
    assert one.id == "HANG901" and one.severity == "warning" and "one snapshot, --interval 0" in one.title
    (window,) = diagnose(records, [{"host": "node-a", "gone": []}], 2.0)
    assert window.id == "HANG901" and window.severity == "error" and "one snapshot" not in window.title


@pytest.mark.slow
def test_a_rank_waiting_for_its_running_subprocess_is_inconclusive_and_a_stopped_rank_is_not_killed(tmp_path):
    """A new user's healthy job whose rank 0 ran a 10 s evaluation as a subprocess while the other waited was HANG901,
    an error, and --kill stopped it; and --kill stopped a job paused with SIGSTOP, whose fix is kill -CONT."""
    j = Job("evaluate", tmp_path)
    try:
        j.wait_steps(1)
        time.sleep(1.0)  # into the first 12 s evaluation
        code, data, result = hang("--pid", str(j.proc.pid), "--interval", "1", "--wait", "3", "--kill")
        assert code == 0, result.output
        (finding,) = data["findings"]
        assert finding["id"] == "HANG901" and finding["severity"] == "warning"
        assert "waiting for its subprocess (pid " in finding["title"]
        assert data["result"]["killed"][0].startswith("nothing stopped: rank 1 waits for its subprocess")
        assert j.proc.poll() is None
        pid = int((tmp_path / "ready-0").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            code, data, _ = hang("--pid", str(j.proc.pid), "--interval", "1", "--wait", "2", "--kill")
            assert data["result"]["killed"][0].startswith("nothing stopped: rank 0 is stopped")
            assert j.proc.poll() is None
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        j.stop()
