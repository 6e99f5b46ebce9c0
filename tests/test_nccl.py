"""`dsdoctor nccl` on this machine with gloo: real torchrun ranks, results checked on every rank, a rank that never
joins named within the timeout, a busy MASTER_PORT found before any rank starts, nothing left behind."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from dsdoctor.nccl_worker import BUSBW_FACTOR, parse_size


def run(*args, env=None, timeout=120):
    full_env = {**os.environ, **(env or {})}
    for key in ("MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if key not in (env or {}):
            full_env.pop(key, None)
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "nccl", *args, "--json", "-"], capture_output=True,
                          text=True, env=full_env, timeout=timeout)
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else None), time.time() - start


def workers_left(records: str) -> int:
    """Worker processes of the run whose stage records are in ``records`` (other runs on the machine don't count)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum("nccl_worker.py" in line and records in line for line in out.splitlines())


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_stage_passes_with_correct_results(nproc):
    proc, data, _ = run("--nproc", str(nproc), "--backend", "gloo", "--timeout", "60", "--sizes", "1M,4M")
    assert proc.returncode == 0, proc.stderr
    assert [(f["id"], f["severity"]) for f in data["findings"]] == [("NET409", "ok"), ("NET413", "info")]
    assert data["findings"][1]["evidence"].startswith("backend gloo")  # no hardware table for gloo on the CPU
    assert all(ranks == list(range(nproc)) for ranks in data["result"]["stages"].values())
    sweep = data["result"]["sweep"]
    assert [(row["op"], row["bytes"]) for row in sweep] == [
        (op, size) for op in BUSBW_FACTOR for size in (2 ** 20, 4 * 2 ** 20)]
    for row in sweep:
        assert row["busbw"] == pytest.approx(row["algbw"] * BUSBW_FACTOR[row["op"]](nproc))
    assert set(data["result"]["plateau_busbw_bytes_per_s"]) == set(BUSBW_FACTOR)
    ranks = data["result"]["ranks"]
    assert [r["rank"] for r in ranks] == list(range(nproc))
    assert all(r["host"] == socket.gethostname() and r["route_to_master"] == "lo (127.0.0.1)" for r in ranks)
    assert all(r["all_reduce_seconds"] > 0 for r in ranks)


def test_a_rank_that_never_joins_is_named_within_the_timeout():
    proc, data, elapsed = run("--nproc", "2", "--backend", "gloo", "--timeout", "5",
                              env={"DSDOCTOR_NCCL_SIMULATE_MISSING": "1"})
    assert proc.returncode == 1
    finding = data["findings"][0]
    assert finding["id"] == "NET407"
    assert finding["evidence"].startswith("stage rendezvous after 5 s; did not finish it: rank 1")
    # dsdoctor hang's snapshot, taken before the ranks are stopped, places the missing rank where it still runs: rank 0
    # gives up on its own and torchrun then stops rank 1, so the snapshot may find both gone (HANG903) instead
    hang = [f for f in data["findings"] if f["id"] in ("HANG901", "HANG907")]
    assert all(re.search(r"rank 1 (?:is )?at main at dsdoctor/nccl_worker\.py:\d+", f["evidence"]) for f in hang)
    assert elapsed < 5 + 30 + 15  # the stage timeout (+ the start-up allowance at rendezvous)
    assert workers_left(data["result"]["records"]) == 0


def test_busy_master_port_is_found_before_any_rank_starts():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        proc, data, elapsed = run("--nproc", "2", "--backend", "gloo", env={"MASTER_PORT": str(port)})
    assert proc.returncode == 1
    assert [f["id"] for f in data["findings"]] == ["NET401"]
    assert data["result"]["stage"] == "before rendezvous"


def test_busbw_factors_are_nccl_tests():
    assert BUSBW_FACTOR["all_reduce"](8) == 2 * 7 / 8
    assert BUSBW_FACTOR["all_gather"](8) == BUSBW_FACTOR["reduce_scatter"](8) == 7 / 8
    assert BUSBW_FACTOR["broadcast"](8) == 1.0
    assert parse_size("1M") == 2 ** 20 and parse_size("1G") == 2 ** 30 and parse_size("512") == 512


@pytest.mark.parametrize("args,message", [
    (["--nproc", "0"], "Invalid value for '--nproc': 0 is not in the range 1<=x<=4096"),
    (["--timeout", "0"], "Invalid value for '--timeout': 0 is below 1"),
    (["--sizes", "lots"], "--sizes lots"),
    (["--sizes", "1T"], "--sizes 1T"),
    (["--iters", "0"], "Invalid value for '--iters': 0 is not in the range 1<=x<=1000000"),
    (["--backend", "nccl"], "--backend nccl needs NVIDIA GPUs"),
])
def test_bad_options(args, message):
    proc, _, _ = run(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1


def _torchrun(*args, env=None, timeout=120):
    from dsdoctor.checks.network import free_port

    full_env = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "RANK", "WORLD_SIZE")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(free_port()), "-m", "dsdoctor", "nccl", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def test_under_an_existing_launcher():
    """torchrun -m dsdoctor nccl: every rank runs the stages; rank 0 reports."""
    proc = _torchrun("--backend", "gloo", "--timeout", "30", "--sizes", "1M", "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    reports, decoder, text = [], json.JSONDecoder(), proc.stdout
    start = text.find("{")
    while start != -1:  # each rank prints one JSON report; torchrun's banner sits between them
        report, end = decoder.raw_decode(text, start)
        reports.append(report)
        start = text.find("{", end)
    assert len(reports) == 2
    rank0 = [r for r in reports if r["result"]["rank"] == 0][0]
    assert [f["id"] for f in rank0["findings"]] == ["NET409", "NET413"] and rank0["result"]["world_size"] == 2
    assert {row["op"] for row in rank0["result"]["sweep"]} == set(BUSBW_FACTOR)


def test_a_rank_that_never_arrives_under_a_launcher():
    """Rank 0 reports the rendezvous it waited at; torchrun then stops the job (nothing hangs)."""
    start = time.time()
    proc = _torchrun("--backend", "gloo", "--timeout", "3", "--sizes", "1M", "--format", "json",
                     env={"DSDOCTOR_NCCL_SIMULATE_MISSING": "1"}, timeout=90)
    assert proc.returncode != 0 and time.time() - start < 60
    assert '"id": "NET407"' in proc.stdout and "waited for ranks that never arrived (world size 2)" in proc.stdout


def test_ctrl_c_stops_every_rank_and_frees_the_port():
    import signal

    import psutil

    from dsdoctor.checks.network import free_port, port_in_use

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(MASTER_PORT=str(port), DSDOCTOR_NCCL_SIMULATE_MISSING="1")  # rank 1 hangs: the probe waits
    proc = subprocess.Popen([sys.executable, "-m", "dsdoctor", "nccl", "--nproc", "2", "--backend", "gloo",
                             "--timeout", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not port_in_use(port):  # the TCP store is up: ranks are running
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    time.sleep(1)
    children = psutil.Process(proc.pid).children(recursive=True)  # torchrun and its two ranks
    assert sum("nccl_worker.py" in " ".join(c.cmdline()) for c in children) == 3  # torchrun names it too
    worker = next(c.cmdline() for c in children if "nccl_worker.py" in " ".join(c.cmdline()))
    records = worker[worker.index("--out") + 1]
    assert os.path.isdir(records)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-1500:]
    _, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []
    assert not port_in_use(port)
    assert not os.path.exists(records)  # no report names it after an interrupt


def test_ranks_that_print_a_lot_do_not_look_hung(tmp_path):
    """The ranks' output goes to a file: through a pipe read at the end, 64 KiB of it blocked them (seen with
    TORCH_DISTRIBUTED_DEBUG=DETAIL, about 80 KB) and the probe reported a hang. Here each rank prints 1 MiB at start
    (a sitecustomize on its PYTHONPATH), far past any pipe buffer."""
    (tmp_path / "sitecustomize.py").write_text("import os\nif os.environ.get('RANK'):  # the ranks, not dsdoctor\n"
                                               "    for _ in range(1024):\n        print('x' * 1023, flush=True)\n")
    proc, data, _ = run("--nproc", "2", "--backend", "gloo", "--timeout", "30", "--sizes", "1K",
                        env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 0, data and data["findings"]
    assert data["findings"][0]["id"] == "NET409"
    assert data["result"]["records"] is None  # removed after a run that passed


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_termination_stops_every_rank(sig):
    import signal

    import psutil

    from dsdoctor.checks.network import free_port, port_in_use

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(MASTER_PORT=str(port), DSDOCTOR_NCCL_SIMULATE_MISSING="1")
    proc = subprocess.Popen([sys.executable, "-m", "dsdoctor", "nccl", "--nproc", "2", "--backend", "gloo",
                             "--timeout", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not port_in_use(port):
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    time.sleep(1)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 3
    proc.send_signal(getattr(signal, sig))
    _, stderr = proc.communicate(timeout=30)
    _, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []
    # issue 12: a message and 128 + the signal, at any moment of the command (it died with -15 and no word before)
    assert proc.returncode == 128 + getattr(signal, sig), (proc.returncode, stderr[-800:])
    assert stderr.strip().endswith(f"dsdoctor: stopped by {sig} (every process it started is stopped)")


def test_a_sweep_larger_than_host_ram_is_refused():
    # 4 ranks (16 can be refused first for their own RAM, on a host whose RAM another job holds)
    proc, _, _ = run("--nproc", "4", "--backend", "gloo", "--sizes", "16G")  # 4 x 3 x 16 GiB: 192 GiB
    assert proc.returncode == 2 and "of host RAM" in proc.stderr and "use smaller --sizes" in proc.stderr


def test_the_telling_line_of_the_launcher_output():
    from dsdoctor.commands.nccl import telling_line

    output = "x\ndsdoctor nccl: rank 5 (node0) stuck in stage rendezvous for 30 s\nmore\n" + "=" * 60 + "\n"
    assert telling_line(output) == "dsdoctor nccl: rank 5 (node0) stuck in stage rendezvous for 30 s"
    assert telling_line("a\nRuntimeError: boom\n----\n") == "RuntimeError: boom"
    assert telling_line("") == "(none)"


# ------------------------------------------------------------------------------------------- issue 12
def test_a_port_taken_between_the_check_and_the_launch_is_net401_not_a_collective_failure(monkeypatch):
    """The race: the port was free when dsdoctor picked it and bound by another process before the TCPStore."""
    from click.testing import CliRunner

    from dsdoctor.checks import network
    from dsdoctor.cli import cli

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(network, "free_port", lambda: port)
        for key in ("MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            monkeypatch.delenv(key, raising=False)
        result = CliRunner().invoke(cli, ["nccl", "--nproc", "2", "--backend", "gloo", "--timeout", "20",
                                          "--format", "json"])
    data = json.loads(result.stdout)
    assert result.exit_code == 1, result.output
    (finding,) = [f for f in data["findings"] if f["severity"] == "error"]
    assert finding["id"] == "NET401" and f"MASTER_PORT={port} was free when checked" in finding["evidence"]


@pytest.mark.parametrize("args, says", [
    (["--sizes", "infM"], "--sizes infM"), (["--sizes", "nanG"], "--sizes nanG"),
    (["--timeout", "nan"], "not a finite number"), (["--nproc", "512"], "more CPU ranks than this host can run"),
    (["--iters", "1" + "0" * 400], "--iters"),
])
def test_bad_flags_are_one_line_exit_2(args, says):
    proc, _, _ = run("--backend", "gloo", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


@pytest.mark.parametrize("var, value", [("RANK", "abc"), ("WORLD_SIZE", "abc"), ("RANK", "5")])
def test_a_broken_launcher_environment_is_one_line(var, value):
    env = {"RANK": "0", "WORLD_SIZE": "2", var: value}
    proc, _, _ = run("--backend", "gloo", env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "internal error" not in proc.stderr and ("in the launcher environment" in proc.stderr)
