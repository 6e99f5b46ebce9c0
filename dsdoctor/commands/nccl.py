"""``dsdoctor nccl``: rendezvous, barrier, collectives with known values, and a bandwidth sweep, each stage bounded,
with the stage and the ranks named when something hangs.

Local ranks are started through torchrun (``dsdoctor.launch``); each runs :mod:`dsdoctor.nccl_worker`, which
reports every stage as it starts and ends. Before any rank starts, the distributed variables are checked with
``dsdoctor env``'s network rules (a busy or privileged ``MASTER_PORT``, an unresolvable ``MASTER_ADDR``, an
``NCCL_SOCKET_IFNAME`` naming no interface).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import click

from dsdoctor.cli import FiniteFloat, report_command
from dsdoctor.checks.network import NET401, NET407, NET408, NET409, plateau
from dsdoctor.report import DsdoctorError, Report

STAGES = ("rendezvous", "barrier", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "sweep", "done")

#: What usually stops a stage, for the NET407 fix.
CAUSES = {
    "rendezvous": "a rank that never started, or cannot reach MASTER_ADDR:MASTER_PORT (wrong address, firewall, "
                  "the port taken on the master)",
    "barrier": "the ranks reached the store but cannot connect to each other: NCCL_SOCKET_IFNAME on the wrong "
               "interface, a firewall between nodes, P2P broken between the GPUs (RTX 40xx: NCCL_P2P_DISABLE=1)",
    "sweep": "a link that breaks or crawls under load (P2P/IB problems; NCCL_DEBUG=INFO shows the transport), or a "
             "sweep too long for --timeout (each size runs --iters times for 4 collectives: lower --sizes/--iters "
             "or raise --timeout)",
}

def read_marks(out: Path) -> dict[int, list[dict]]:
    """Every rank's stage records (ranks with no file yet are absent)."""
    marks = {}
    for path in out.glob("rank*.jsonl"):
        try:
            rank = int(path.stem[4:])
            marks[rank] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (ValueError, OSError):
            continue
    return marks


def progress(marks: dict[int, list[dict]], world: int) -> tuple[str | None, list[int], list[tuple[int, dict]]]:
    """(the first stage not finished by every rank, the ranks that have not finished it, failures)."""
    failures = [(rank, m) for rank, records in marks.items() for m in records if m["status"] == "fail"]
    for stage in STAGES:
        behind = [r for r in range(world) if not any(m["stage"] == stage and m["status"] == "ok"
                                                       for m in marks.get(r, []))]
        if behind:
            return stage, behind, failures
    return None, [], failures


def run_nccl(nproc: int, backend: str, timeout_s: float, sizes: str, iters: int) -> Report:
    """The body of ``dsdoctor nccl``. Raises DsdoctorError for bad options or a backend that cannot run here."""
    from dsdoctor.checks.environment import collect, diagnose
    from dsdoctor.checks.network import free_port
    from dsdoctor.hardware import visible_gpus
    from dsdoctor.launch import (CPU_RANK_BYTES, cpu_rank_problem, flight_recorder_env, hang_snapshot, launched,
                                 launcher_command)

    if nproc < 1:
        raise DsdoctorError(f"--nproc must be at least 1, got {nproc}")
    gpus = visible_gpus()
    if backend == "nccl" and nproc > len(gpus):
        raise DsdoctorError(f"--nproc {nproc} but {len(gpus)} GPU(s) visible: one nccl rank per GPU")
    if backend == "gloo":
        problem = cpu_rank_problem(nproc, CPU_RANK_BYTES["nccl"])
        if problem:
            raise DsdoctorError(problem)
    if not 1 <= timeout_s <= 86400:
        raise DsdoctorError(f"--timeout must be between 1 and 86400 seconds, got {timeout_s}")
    from dsdoctor.nccl_worker import parse_size

    try:
        sweep_bytes = [parse_size(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise DsdoctorError(f"--sizes {sizes}: sizes like 1M,16M,1G") from None
    if not sweep_bytes or any(b < 4 or b > 16 * 2 ** 30 for b in sweep_bytes):
        raise DsdoctorError(f"--sizes {sizes}: each size between 4 bytes and 16G")
    memory_problem = sweep_memory_problem(max(sweep_bytes), nproc, backend)
    if memory_problem:
        raise DsdoctorError(memory_problem)
    report = Report("nccl")
    facts = collect(sections=("host", "network"))
    before = [f for f in diagnose(facts) if f.id.startswith("NET")]
    for finding in before:
        report.add(finding)
    if any(f.severity == "error" for f in before):
        report.result = {"stage": "before rendezvous", "world_size": nproc}
        return report
    port = int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT", "").strip() else free_port()
    out = Path(tempfile.mkdtemp(prefix="dsdoctor-nccl-"))
    worker = Path(__file__).resolve().parents[1] / "nccl_worker.py"
    cmd = launcher_command("torchrun", nproc, port, worker,
                           ["--out", str(out), "--backend", backend, "--timeout", str(timeout_s), "--sizes", sizes,
                            "--iters", str(iters)])
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env = {**flight_recorder_env(out), **env}  # the Flight Recorder on for the probe's ranks, unless set already
    start = time.time()
    snapshot = None
    # the ranks' output goes to a file: a pipe read only at the end fills up (64 KiB) under NCCL_DEBUG=INFO and
    # blocks the ranks, which then look hung
    launcher_log = open(out / "launcher.log", "w")
    stage_started = {"rendezvous": start}
    timed_out = None
    try:
        with launched(cmd, env, launcher_log, grace_s=2) as proc:  # every rank stopped however this block ends
            while True:
                marks = read_marks(out)
                stage, behind, failures = progress(marks, nproc)
                if stage is None or failures:
                    break
                stage_started.setdefault(stage, time.time())
                if proc.poll() is not None:
                    time.sleep(0.3)  # last records may still be in flight
                    marks = read_marks(out)
                    stage, behind, failures = progress(marks, nproc)
                    break
                limit = timeout_s + (30 if stage == "rendezvous" else 0)  # process start and imports
                if time.time() - stage_started[stage] > limit:
                    timed_out = (stage, behind)
                    break
                time.sleep(0.2)
            if (timed_out or failures) and proc.poll() is None:
                snapshot = hang_snapshot(proc.pid)  # where each rank still running waits, before they are stopped
    except KeyboardInterrupt:
        launcher_log.close()
        shutil.rmtree(out, ignore_errors=True)  # no report names it after an interrupt
        raise
    finally:
        launcher_log.close()
    output = (out / "launcher.log").read_bytes()[-20000:].decode("utf-8", "replace")
    marks = read_marks(out)
    stage, behind, failures = progress(marks, nproc)
    rank0 = marks.get(0, [])
    info = next((m for m in rank0 if m["stage"] == "rendezvous" and m["status"] == "ok"), {})
    sweep = next((m.get("sweep") for m in rank0 if m["stage"] == "sweep" and m["status"] == "ok"), None)
    report.result = {"world_size": nproc, "backend": backend, "master_port": port, "records": str(out),
                     "elapsed_s": round(time.time() - start, 1), "nccl": info.get("nccl"),
                     "NCCL_vars": info.get("NCCL_vars", {}),
                     "stages": {s: sorted(r for r, recs in marks.items() if any(m["stage"] == s and m["status"] == "ok"
                                                                                 for m in recs)) for s in STAGES[:-1]},
                     "ranks": rank_rows(marks)}
    if sweep:
        add_sweep(report, sweep, nproc, backend)
        report.tables.append(("Ranks (a slow link shows as the ranks whose time stands out)",
                              ["rank", "host", "interface", "route to master", "all-reduce ms at the largest size"],
                              [[str(r["rank"]), r["host"] or "", r["interface"] or "", r["route_to_master"] or "",
                                "" if r["all_reduce_seconds"] is None else f"{r['all_reduce_seconds'] * 1e3:.2f}"]
                               for r in report.result["ranks"]]))
    failed_ranks = {rank for rank, _ in failures}
    if failures and not timed_out:
        first_stage = min((m["stage"] for _, m in failures), key=STAGES.index)
        silent = [r for r in range(nproc) if r not in failed_ranks and not any(
            m["stage"] == first_stage and m["status"] == "ok" for m in marks.get(r, []))]
        if silent:  # the failures are other ranks giving up waiting for these
            timed_out = (first_stage, silent)
    if timed_out:
        stage_name, ranks = timed_out
        never = [r for r in ranks if r not in marks]
        started = [r for r in ranks if r in marks]
        detail = []
        if never:
            detail.append(f"never started: rank {', '.join(map(str, never))}")
        if started:
            detail.append(f"did not finish it: rank {', '.join(map(str, started))}")
        waited = sorted(failed_ranks)
        if waited:
            detail.append(f"rank {', '.join(map(str, waited))} gave up waiting")
        report.add(NET407.finding(
            f"stage {stage_name} after {timeout_s:g} s; {'; '.join(detail)}",
            fix=f"Likely causes at {stage_name}: {CAUSES.get(stage_name, CAUSES['barrier'])}."))
        for finding in snapshot or []:
            report.add(finding)
    elif port_taken(output, failures):
        report.add(NET401.finding(
            f"MASTER_PORT={port} was free when checked and taken when the ranks bound it (EADDRINUSE): another "
            f"process bound it in between; last output: {telling_line(output)}",
            fix="Run again (dsdoctor picks a new free port), or set MASTER_PORT to a port no other job uses."))
    elif failures:
        for rank, m in failures[:8]:
            report.add(NET408.finding(f"rank {rank}, stage {m['stage']}: {m.get('error', '')}"))
    elif stage is not None:
        report.add(NET408.finding(f"the ranks exited at stage {stage} (exit {proc.returncode}); last output: "
                                  f"{telling_line(output)}"))
    else:
        report.add(NET409.finding(f"{nproc} rank(s), {backend}{headline(sweep)}"))
        shutil.rmtree(out, ignore_errors=True)  # kept only when something failed, for its records and launcher.log
        report.result["records"] = None
        if sweep:
            from dsdoctor.checks.network import busbw_findings, local_link

            link = local_link(nproc) if backend == "nccl" else None
            report.result["link"] = link
            for finding in busbw_findings(sweep, nproc, backend, link):
                report.add(finding)
    return report


#: Bytes a rank holds per byte of the largest sweep size: the buffer, its 1/n part, and the backend's own copy.
SWEEP_BYTES_PER_BYTE = 3


def sweep_memory_problem(largest: int, nproc: int, backend: str) -> str | None:
    """Why the sweep's largest size would not fit (gloo: every rank's buffers in this host's RAM; nccl: each GPU's
    memory), or None."""
    from dsdoctor.hardware import host_ram_bytes, visible_gpus

    need = SWEEP_BYTES_PER_BYTE * largest
    if backend == "gloo":
        ram = host_ram_bytes()
        if ram and nproc * need > 0.8 * ram:
            return (f"--sizes up to {largest / 2 ** 30:.1f} GiB on {nproc} gloo ranks needs about "
                    f"{nproc * need / 2 ** 30:.0f} GiB of host RAM; this host has {ram / 2 ** 30:.0f} GiB: use smaller "
                    f"--sizes")
        return None
    gpus = visible_gpus()[:nproc]
    smallest = min((g.memory_bytes for g in gpus if g.memory_bytes), default=0)
    if smallest and need > 0.8 * smallest:
        return (f"--sizes up to {largest / 2 ** 30:.1f} GiB needs about {need / 2 ** 30:.0f} GiB per GPU; the "
                f"smallest visible GPU has {smallest / 2 ** 30:.0f} GiB: use smaller --sizes")
    return None


#: how torch's TCPStore and the OS say the rendezvous port is taken (c10d/socket.cpp: "address already in use",
#: "EADDRINUSE", errno 98)
PORT_TAKEN = ("EADDRINUSE", "address already in use", "Address already in use", "errno: 98")


def port_taken(output: str, failures: list) -> bool:
    """Whether the ranks failed because the rendezvous port was taken (the launcher's output, or a rank's error)."""
    texts = [output] + [str(m.get("error", "")) for _, m in failures]
    return any(marker in text for text in texts for marker in PORT_TAKEN)


def telling_line(output: str) -> str:
    """The line of the launcher's output that says most: a rank's 'stuck in stage' line, else the last error line,
    else the last line that is not a separator."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not set(ln.strip()) <= set("=-*_ ")]
    for pattern in ("stuck in stage", "Error", "error"):
        found = [ln for ln in lines if pattern in ln]
        if found:
            return found[-1][:300]
    return lines[-1][:300] if lines else "(none)"


def headline(sweep: list[dict] | None) -> str:
    """'; all-reduce busbw X GB/s at N bytes' for the largest all-reduce of the sweep ('' without one)."""
    top = plateau(sweep or []).get("all_reduce")
    return f"; all-reduce busbw {top['busbw'] / 1e9:.2f} GB/s at {top['bytes']:,} bytes" if top else ""


def add_sweep(report: Report, sweep: list[dict], world: int, backend: str) -> None:
    """The sweep into ``report``: the rows, the plateau (busbw at the largest size) of each collective, and a table."""
    report.result["sweep"] = sweep
    report.result["plateau_busbw_bytes_per_s"] = {op: round(row["busbw"]) for op, row in plateau(sweep).items()}
    report.result["busbw_bytes_per_s"] = report.result["plateau_busbw_bytes_per_s"].get("all_reduce")
    report.tables.append((f"Sweep, {world} ranks ({backend}; busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for "
                          f"all-gather and reduce-scatter, 1 for broadcast: nccl-tests doc/PERFORMANCE.md)",
                          ["collective", "bytes", "time ms", "algbw GB/s", "busbw GB/s"],
                          [[r["op"], f"{r['bytes']:,}", f"{r['seconds'] * 1e3:.2f}", f"{r['algbw'] / 1e9:.2f}",
                            f"{r['busbw'] / 1e9:.2f}"] for r in sweep]))


def rank_rows(marks: dict[int, list[dict]]) -> list[dict]:
    """Per rank: host, the interface its traffic uses, the route to the master, and its own time for the largest
    all-reduce of the sweep (seconds; None before the sweep)."""
    rows = []
    for rank in sorted(marks):
        joined = next((m for m in marks[rank] if m["stage"] == "rendezvous" and m["status"] == "ok"), {})
        started = next((m for m in marks[rank] if m["stage"] == "rendezvous"), {})
        sweep = next((m.get("sweep") for m in marks[rank] if m["stage"] == "sweep" and m["status"] == "ok"), None)
        top = plateau(sweep or []).get("all_reduce")
        route = joined.get("route_to_master")
        rows.append({"rank": rank, "host": started.get("host"), "interface": joined.get("interface"),
                     "route_to_master": f"{route[0]} ({route[1]})" if route else None,
                     "all_reduce_seconds": top["seconds"] if top else None})
    return rows


def launcher_int(name: str, fallback: str, default: int, least: int) -> int:
    """An integer the launcher put in the environment (``RANK``, else SLURM's name for it). Raises DsdoctorError for a
    value that is not a plain integer of at most 7 digits, or below ``least``: ``RANK=abc`` is a broken launch line,
    not an internal error."""
    import re

    for key in (name, fallback):
        value = os.environ.get(key)
        if value is None or not value.strip():
            continue
        if not re.fullmatch(r"\s*[0-9]{1,7}\s*", value) or int(value) < least:
            raise DsdoctorError(f"{key}={value[:20]!r} in the launcher environment is not an integer >= {least}")
        return int(value)
    return default


def run_under_launcher(backend: str, timeout_s: float, sizes: str, iters: int) -> Report:
    """``dsdoctor nccl`` started by torchrun, ``deepspeed --hostfile`` or ``srun`` (RANK and WORLD_SIZE, or SLURM_*,
    are set): this process is one rank. Every rank runs the stages with its own watchdog (a stuck rank prints its
    rank, host and stage to stderr and exits 3); rank 0 reports, since its collectives completing means every rank
    took part."""
    from dsdoctor import nccl_worker

    rank = launcher_int("RANK", "SLURM_PROCID", default=0, least=0)
    world = launcher_int("WORLD_SIZE", "SLURM_NTASKS", default=1, least=1)
    if rank >= world:
        raise DsdoctorError(f"RANK={rank} is not below WORLD_SIZE={world} in the launcher environment")
    # one directory per job on this node: torchrun's run id is "none" unless --rdzv-id is given, so the master port
    # (one job per port at a time) tells concurrent jobs apart
    job = "-".join(os.environ.get(k, "") for k in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "MASTER_PORT"))
    out = Path(tempfile.gettempdir()) / f"dsdoctor-nccl-{job}"
    code = nccl_worker.main(["--out", str(out), "--backend", backend, "--timeout", str(timeout_s), "--sizes", sizes,
                             "--iters", str(iters)])
    marks = read_marks(out).get(rank, [])
    report = Report("nccl", result={"world_size": world, "rank": rank, "backend": backend, "launcher": True,
                                    "stages_ok": [m["stage"] for m in marks if m["status"] == "ok"]})
    failed = [m for m in marks if m["status"] in ("fail", "timeout")]
    if failed and failed[-1]["stage"] == "rendezvous":
        m = failed[-1]
        report.add(NET407.finding(
            f"stage rendezvous after {timeout_s:g} s: rank {rank} ({m.get('error', m['status'])[:160]}) waited for "
            f"ranks that never arrived (world size {world})",
            fix=f"Likely causes at rendezvous: {CAUSES['rendezvous']}. A rank stuck elsewhere prints "
                f"'dsdoctor nccl: rank R (host) stuck in stage S' to stderr."))
    elif failed:
        m = failed[-1]
        stage_name = m["stage"]
        if m["status"] == "timeout":
            report.add(NET407.finding(f"rank {rank} stuck in stage {stage_name}",
                                      fix=f"Likely causes at {stage_name}: {CAUSES.get(stage_name, CAUSES['barrier'])}."))
        else:
            report.add(NET408.finding(f"rank {rank}, stage {stage_name}: {m.get('error', '')}"))
    elif code == 0 and rank == 0:
        sweep = next((m.get("sweep") for m in marks if m["stage"] == "sweep" and m["status"] == "ok"), None)
        joined = next((m for m in marks if m["stage"] == "rendezvous" and m["status"] == "ok"), {})
        report.result["interface"] = joined.get("interface")
        report.add(NET409.finding(f"{world} ranks, {backend}{headline(sweep)}"))
        if sweep:
            from dsdoctor.checks.network import busbw_findings, local_link

            add_sweep(report, sweep, world, backend)
            local = launcher_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", default=world, least=1)
            nodes = max(1, -(-world // max(local, 1)))
            link = local_link(local, nodes=nodes, interface=joined.get("interface")) if backend == "nccl" else None
            report.result["link"] = link
            for finding in busbw_findings(sweep, world, backend, link):
                report.add(finding)
    return report


@click.command("nccl")
@click.option("--nproc", type=click.IntRange(1, 4096), default=None,
              help="Local ranks (default: the visible GPUs, else 2).")
@click.option("--backend", type=click.Choice(["nccl", "gloo"]), default=None,
              help="nccl with GPUs, gloo on the CPU (default: by what is here).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1, max=86400), default=60.0, show_default=True,
              help="Seconds per stage.")
@click.option("--sizes", default="1M,16M,64M", show_default=True, help="All-reduce sizes of the sweep.")
@click.option("--iters", type=click.IntRange(1, 10 ** 6), default=5, show_default=True,
              help="Timed iterations per size.")
@report_command
def nccl(nproc, backend, timeout_s, sizes, iters) -> Report:
    """Rendezvous, barrier, collectives with known values and a bandwidth sweep across local ranks, each stage
    bounded by --timeout, naming the stage and the ranks when one hangs."""
    from dsdoctor.hardware import visible_gpus

    gpus = visible_gpus()
    if backend is None:
        backend = "nccl" if gpus else "gloo"
    if backend == "nccl" and not gpus:
        raise DsdoctorError("--backend nccl needs NVIDIA GPUs (NVML sees none here); use --backend gloo")
    if iters < 1:
        raise DsdoctorError(f"--iters must be at least 1, got {iters}")
    if (os.environ.get("RANK") and os.environ.get("WORLD_SIZE")) or os.environ.get("SLURM_PROCID"):
        return run_under_launcher(backend, timeout_s, sizes, iters)
    return run_nccl(nproc if nproc is not None else (len(gpus) if gpus else 2), backend, timeout_s, sizes, iters)
