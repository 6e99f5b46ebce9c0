"""``dsdoctor hang``: on a node where a job hangs, which rank is stuck, where, and why.

It finds the job's ranks (``checks/hang/procs.py``), reads every rank's Python stacks at once with py-spy, twice,
``--interval`` seconds apart (``checks/hang/stacks.py``), adds what /proc, NVML and the kernel's log say, and groups
the ranks by where they wait (``checks/hang/verdict.py``). It never stops or signals a rank unless ``--kill`` is
given, and then only after the snapshot. ``--json`` keeps the snapshot; ``--merge`` joins several nodes' snapshots
into one verdict.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import click

from dsdoctor.checks.hang.procs import tail
from dsdoctor.cli import FiniteFloat, report_command
from dsdoctor.report import DsdoctorError, Report

#: DataLoader workers read per rank when every rank waits for its data
MAX_WORKERS_READ = 4
#: seconds between the samples of each rank's stack during --interval
SAMPLE_EVERY = 0.2
#: a rank whose CPU time grew by this share of the time looked at is busy (computing or spinning): 4 ranks computing
#: on 2 cores get half a core each
BUSY_SHARE = 0.3


def _snapshot(pids: list[int], native: bool, timeout: float, nonblocking: bool = False) -> dict[int, tuple]:
    """Every pid's py-spy dump, all at once (one thread per rank, so that N ranks take one dump's time)."""
    from concurrent.futures import ThreadPoolExecutor

    from dsdoctor.checks.hang.stacks import dump

    with ThreadPoolExecutor(max_workers=max(1, min(64, len(pids)))) as pool:
        return dict(zip(pids, pool.map(lambda p: dump(p, native=native, timeout=timeout, nonblocking=nonblocking),
                                       pids)))


def _gpus() -> dict[int, dict]:
    """{pid: {"gpu": index, "used_gib", "utilization_percent"}} from NVML; {} without a GPU or NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU, nvidia-ml-py missing: the snapshot goes on without it
        return {}
    seen: dict[int, dict] = {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(proc, "usedGpuMemory", None)
                seen[proc.pid] = {"gpu": index, "used_gib": round(used / 2 ** 30, 2) if used else None,
                                  "utilization_percent": util}
    except Exception:
        pass
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return seen


def _gone(ranks, launcher) -> list[dict]:
    """The local ranks the launcher should have started and that have no process: from the ranks' LOCAL_WORLD_SIZE
    (or the deepspeed launcher's LOCAL_SIZE) and their local ranks; global rank = a present rank's RANK - LOCAL_RANK
    + the missing local rank (launchers number a node's ranks contiguously)."""
    from dsdoctor.checks.hang.procs import common_parent, gone_children

    local_world = max((r.local_world_size or 0 for r in ranks), default=0)
    present = {r.local_rank for r in ranks if r.local_rank is not None}
    base = next((r.rank - r.local_rank for r in ranks if r.rank is not None and r.local_rank is not None), None)
    if not local_world or base is None or local_world > 100_000:
        return []
    parent = launcher["pid"] if launcher else common_parent(ranks)  # a launcher of one's own: the ranks' parent
    zombies = gone_children(parent) if parent else []
    gone = []
    for local in range(local_world):
        if local in present:
            continue
        evidence = (f"no process of local rank {local} of {local_world}"
                    + (f" under the launcher (pid {launcher['pid']}: {tail(launcher['cmdline'], 80)})" if launcher
                       else ""))
        if zombies:
            evidence += "; the launcher's exited children: " + ", ".join(
                f"pid {z['pid']} " + (f"killed by signal {z['signal']}" if z["signal"] else f"exit code {z['exit_code']}")
                for z in zombies)
        gone.append({"rank": base + local, "local_rank": local, "evidence": evidence})
    return gone


def _record(rank, threads, error, proc, gpu, host, watched: dict | None = None) -> dict:
    """One rank's record from its last dump (``threads``, ``error``) and what the samples of the window saw
    (``watched``, from :func:`_watch`; None with --interval 0): it is advancing when it moved within the window's last
    --interval seconds (at least 1 s): its main thread's stack differed from the sample before, or its main thread
    woke while its process read or wrote (``checks/hang/procs.py`` :func:`moved`)."""
    from dsdoctor.checks.hang.stacks import main_thread, position

    main = main_thread(threads or [])
    watched = watched or {}
    return {"host": host, "pid": rank.pid, "rank": rank.rank, "local_rank": rank.local_rank,
            "world_size": rank.world_size, "local_world_size": rank.local_world_size, "cmdline": rank.cmdline,
            "job": list(rank.job), "proc": proc, "gpu": gpu, "error": error,
            "position": position(main["frames"]) if main else {"state": "unknown"},
            "samples": watched.get("samples", 1), "advancing": watched.get("advancing"),
            "stack_changed": watched.get("stack_changed"), "activity": watched.get("activity"),
            "threads": threads, "workers": []}


def _watch(pids: list[int], interval: float, wait: float, timeout: float) -> dict[int, dict]:
    """Sample every rank (its stack with py-spy, its /proc counters) every :data:`SAMPLE_EVERY` seconds for at least
    ``interval`` seconds, and on until every rank has moved within the last ``interval`` seconds or ``wait`` seconds
    have passed: a step longer than --interval (a large matmul, a rank that evaluates while the others wait) is seen
    to end, and a hang costs the whole ``wait``. The samples are read without pausing the ranks (py-spy
    --nonblocking, Python frames only): pausing one wakes its threads, which /proc's counters would count. Per pid: ``{"samples", "advancing", "stack_changed", "activity":
    {"wakeups", "syscalls", "seconds", "moving"}, "last_moved_s": seconds before the end, "window_s"}``."""
    from dsdoctor.checks.hang.procs import activity, moved
    from dsdoctor.checks.hang.stacks import main_thread, py_spy, signature

    readable = bool(py_spy())
    start = time.monotonic()
    recent = max(interval, 1.0)
    last_sig: dict[int, object] = {}
    first = {pid: activity(pid) for pid in pids}
    reading = dict(first)
    last_moved: dict[int, float | None] = {pid: None for pid in pids}
    by: dict[int, set] = {pid: set() for pid in pids}
    samples = {pid: 0 for pid in pids}
    while True:
        dumps = _snapshot(pids, False, timeout, nonblocking=True) if readable else {}
        now = time.monotonic()
        for pid in pids:
            if pid in dumps:
                main = main_thread(dumps[pid][0] or [])
                sig = signature(main["frames"]) if main else None
                if sig is not None:
                    samples[pid] += 1
                    if last_sig.get(pid) is not None and sig != last_sig[pid]:
                        last_moved[pid] = now
                        by[pid].add("stack")
                    last_sig[pid] = sig
            after = activity(pid)
            if moved(reading[pid], after):
                last_moved[pid] = now
                by[pid].add("io")
            reading[pid] = after if after is not None else reading[pid]
        elapsed = now - start
        if elapsed >= max(interval, wait) or (elapsed >= interval and all(
                t is not None and now - t <= recent for t in last_moved.values())):
            break
        time.sleep(min(SAMPLE_EVERY, max(0.0, start + max(interval, wait) - now)))
    end = time.monotonic()
    out = {}
    for pid in pids:
        a, b = first[pid], reading[pid]
        totals = None if not (isinstance(a, dict) and isinstance(b, dict)) else {
            "wakeups": b["wakeups"] - a["wakeups"], "syscalls": b["syscalls"] - a["syscalls"],
            "seconds": round(b["at"] - a["at"], 2), "moving": "io" in by[pid]}
        t = last_moved[pid]
        out[pid] = {"samples": samples[pid], "advancing": t is not None and end - t <= recent + SAMPLE_EVERY * 2,
                    "stack_changed": "stack" in by[pid], "activity": totals,
                    "last_moved_s": None if t is None else round(end - t, 2), "window_s": round(end - start, 2)}
    return out


def snapshot_node(pids: list[int] | None, interval: float, timeout: float, native: bool,
                  wait: float = 8.0) -> tuple[list, dict]:
    """This node's rank records and node record (``checks/hang/verdict.py`` describes both).

    Raises:
        DsdoctorError: not Linux, no rank found, a PID that is no rank, or ranks of several jobs without --pid.
    """
    from dsdoctor.checks.hang.procs import find_ranks, jobs, launcher_of, oom_kills, proc_state, running_children
    from dsdoctor.checks.hang.stacks import dump, main_thread, own_frame, where
    from dsdoctor.checks.hang.verdict import WAIT_CHILD, polling

    if not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        raise DsdoctorError("dsdoctor hang reads the ranks' processes through /proc: it runs on Linux only")
    try:
        ranks = find_ranks(list(pids) if pids else None)
    except LookupError as exc:
        raise DsdoctorError(str(exc)) from None
    if not ranks:
        raise DsdoctorError("no rank of a distributed job runs on this node (no Python process has RANK, "
                            "OMPI_COMM_WORLD_RANK or PMI_RANK in its environment); give --pid PID of a rank or of "
                            "its launcher")
    grouped = jobs(ranks)
    if len(grouped) > 1:
        def job_of(group) -> str:
            launcher = launcher_of(group)
            head = f"launcher pid {launcher['pid']} ({tail(launcher['cmdline'], 70)})" if launcher else \
                tail(group[0].cmdline, 70)
            return (f"{head}: ranks {', '.join(str(r.rank) for r in group[:8])}, pids "
                    f"{', '.join(str(r.pid) for r in group[:8])}, MASTER_PORT {group[0].job[1] or '?'}")

        described = "; ".join(job_of(group) for group in grouped.values())
        raise DsdoctorError(f"{len(grouped)} distributed jobs run on this node: {described}; give --pid of one "
                            "job's launcher or ranks")
    host = socket.gethostname()
    launcher = launcher_of(ranks)
    pids_now = [r.pid for r in ranks]
    cpu_before = {pid: proc_state(pid).get("cpu_seconds") for pid in pids_now}
    started_at = time.monotonic()
    watched = _watch(pids_now, interval, wait, timeout) if interval else {}
    second = _snapshot(pids_now, native, timeout)
    elapsed = time.monotonic() - started_at
    gpus = _gpus()
    records = []
    for rank in ranks:
        threads, error = second[rank.pid]
        proc = proc_state(rank.pid)
        record = _record(rank, threads, error, proc, gpus.get(rank.pid), host, watched.get(rank.pid))
        if watched:
            record["window_s"] = watched[rank.pid]["window_s"]
            record["last_moved_s"] = watched[rank.pid]["last_moved_s"]
        # busy: its CPU time grew by BUSY_SHARE of the time looked at or more (a long step at one line; a spinning
        # wait); ranks that share few cores get a share of one each
        before, after = cpu_before.get(rank.pid), proc.get("cpu_seconds")
        record["busy"] = None if before is None or after is None or elapsed < 0.5 else \
            (after - before) >= BUSY_SHARE * elapsed
        if record.get("advancing") and polling(record):
            record["advancing"] = False  # its stack flips between the lines of a loop that waits
            record["polling"] = True
        records.append(record)
    for record, rank in zip(records, ranks):
        record["subprocesses"] = running_children(rank.pid) \
            if (record.get("proc") or {}).get("wchan") in WAIT_CHILD else []
        if record["position"]["state"] == "dataloader":  # what its workers wait on is the cause
            for child in rank.children[:MAX_WORKERS_READ]:
                threads, error = dump(child, native=native, timeout=timeout)
                main = main_thread(threads or [])
                frames = main["frames"] if main else []
                user = own_frame(frames)  # a dataset's __getitem__, not torch's worker loop
                record["workers"].append({"pid": child, "at": where(user) if user else None, "error": error})
    from dsdoctor.checks.hang.flight import of_ranks

    # the Flight Recorder's view, where the job records it (every rank asked at once through its pipe, if any)
    recorded, analysis = of_ranks([(rank.flight_env, rank.rank, rank.started) for rank in ranks],
                                  wait_s=max(10.0, timeout))
    for record, flight in zip(records, recorded):
        record["flight_recorder"] = flight
    node = {"host": host, "launcher": launcher, "gone": _gone(ranks, launcher), "oom_kills": [],
            "dmesg_error": None, "flight_analysis": analysis}
    if node["gone"]:
        node["oom_kills"], node["dmesg_error"] = oom_kills()
    return records, node


def _load(paths: tuple[str, ...]) -> tuple[list, list, float]:
    """Rank and node records from ``dsdoctor hang --json`` files, and the longest interval between their snapshots.

    Raises:
        DsdoctorError: a file missing, not JSON, or not a dsdoctor hang snapshot."""
    ranks, nodes, interval = [], [], 0.0
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise DsdoctorError(f"--merge {path}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise DsdoctorError(f"--merge {path}: not JSON (give the files `dsdoctor hang --json FILE` wrote)") from None
        result = data.get("result") if isinstance(data, dict) else None
        if not (isinstance(data, dict) and data.get("command") == "hang" and isinstance(result, dict)
                and isinstance(result.get("ranks"), list) and isinstance(result.get("nodes"), list)):
            raise DsdoctorError(f"--merge {path}: not a snapshot of `dsdoctor hang --json`")
        for record in result["ranks"]:
            if not (isinstance(record, dict) and isinstance(record.get("position"), dict)
                    and isinstance(record.get("pid"), int)):
                raise DsdoctorError(f"--merge {path}: a rank record without pid and position")
            problem = _record_problem(record)
            if problem:
                raise DsdoctorError(f"--merge {path}: rank record of pid {record['pid']}: {problem} (a snapshot of "
                                    f"`dsdoctor hang --json`, unedited, of this dsdoctor version?)")
            if any((record.get("host"), record["pid"]) == (r.get("host"), r["pid"]) for r in ranks):
                continue  # the same node given twice
            ranks.append(record)
        for node in result["nodes"]:
            gone = node.get("gone") if isinstance(node, dict) else None
            if not isinstance(node, dict) or not isinstance(gone, list) or not all(
                    isinstance(g, dict) and _is_int(g.get("rank")) for g in gone):
                raise DsdoctorError(f"--merge {path}: a node record of an unexpected shape")
            if node not in nodes:
                nodes.append(node)
        if isinstance(result.get("interval_s"), (int, float)):
            interval = max(interval, float(result["interval_s"]))
    if not ranks:
        raise DsdoctorError(f"--merge: no rank record in {', '.join(paths)[:200]}: nothing to judge")
    jobs = {tuple(r.get("job") or ()) for r in ranks} - {()}
    if len(jobs) > 1:
        raise DsdoctorError(f"--merge: the snapshots are of {len(jobs)} different jobs (MASTER_ADDR, MASTER_PORT, "
                            f"run id differ): merge the snapshots of one job's nodes")
    numbers = [r.get("rank") for r in ranks if r.get("rank") is not None]
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    if twice:
        raise DsdoctorError(f"--merge: rank {', '.join(map(str, twice[:5]))} is in more than one snapshot as another "
                            f"process: snapshots of different runs?")
    return sorted(ranks, key=lambda r: (r.get("rank") if isinstance(r.get("rank"), int) else 1 << 30, r["pid"])), \
        nodes, interval


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _record_problem(record: dict) -> str | None:
    """What is wrong with a rank record read back from a snapshot, or None."""
    position = record["position"]
    if record.get("rank") is not None and not (_is_int(record["rank"]) and 0 <= record["rank"] < 1_000_000):
        return f"rank {str(record['rank'])[:20]!r} is not a rank number"
    if position.get("state") not in ("collective", "dataloader", "elsewhere", "unknown"):
        return f"position state {str(position.get('state'))[:20]!r}"
    if position["state"] == "collective" and not isinstance(position.get("op"), str):
        return "a collective without its op"
    for key in ("caller", "at"):
        frame = position.get(key)
        if frame is not None and not (isinstance(frame, dict) and isinstance(frame.get("name"), str)
                                      and isinstance(frame.get("line"), int)):
            return f"position {key} is not a frame"
    gpu = record.get("gpu")
    if gpu is not None and not (isinstance(gpu, dict) and {"utilization_percent", "used_gib"} <= set(gpu)):
        return "gpu is not NVML's record"
    for key in ("advancing", "busy", "stack_changed"):
        if record.get(key) is not None and not isinstance(record[key], bool):
            return f"{key} is not true, false or null"
    if record.get("job") is not None and not (isinstance(record["job"], list)
                                              and all(isinstance(x, str) for x in record["job"])):
        return "job is not a list of strings"
    workers = record.get("workers")
    if workers is not None and not (isinstance(workers, list) and all(
            isinstance(w, dict) and _is_int(w.get("pid")) and isinstance(w.get("at"), (str, type(None)))
            for w in workers)):
        return "workers is not a list of worker records"
    proc = record.get("proc")
    if proc is not None and not (isinstance(proc, dict) and isinstance(proc.get("status", ""), str)
                                 and isinstance(proc.get("wchan") or "", str)):
        return "proc is not /proc's record"
    subprocesses = record.get("subprocesses")
    if subprocesses is not None and not (isinstance(subprocesses, list) and all(
            isinstance(c, dict) and _is_int(c.get("pid")) and isinstance(c.get("cmdline"), str) for c in subprocesses)):
        return "subprocesses is not a list of child processes"
    if record.get("threads") is not None and not isinstance(record["threads"], list):
        return "threads is not py-spy's list of threads"
    activity = record.get("activity")
    if activity is not None and not (isinstance(activity, dict) and all(
            isinstance(activity.get(k), (int, float)) and not isinstance(activity.get(k), bool)
            for k in ("wakeups", "syscalls", "seconds")) and isinstance(activity.get("moving"), bool)):
        return "activity is not /proc's counters"
    flight = record.get("flight_recorder")
    if flight is not None:
        from dsdoctor.checks.hang.flight import valid_summary

        if not valid_summary(flight):
            return "flight_recorder is not a Flight Recorder summary"
    return None


def _kill(records: list[dict], launcher: dict | None, grace: float = 10.0) -> list[str]:
    """Stop the job: its launcher first (SIGTERM: torchrun's and deepspeed's stop their ranks and restart none), then
    every rank still alive (SIGTERM, SIGKILL for those alive after ``grace`` seconds); what was stopped, one line
    each."""
    import psutil

    procs = []
    if launcher is not None:
        try:
            procs.append(({"rank": None, "what": f"the launcher ({tail(launcher['cmdline'], 60)})"},
                          psutil.Process(launcher["pid"])))
        except psutil.Error:
            pass
    for r in records:
        try:
            procs.append((r, psutil.Process(r["pid"])))
        except psutil.Error:
            continue
    for _, p in procs:
        try:
            p.terminate()
            if p.status() == psutil.STATUS_STOPPED:  # a stopped process acts on SIGTERM only once continued
                p.resume()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs([p for _, p in procs], timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [f"{r.get('what') or 'rank ' + str(r.get('rank'))} (pid {p.pid}): "
            f"{'SIGKILL after ' + format(grace, 'g') + ' s' if p in alive else 'SIGTERM'}" for r, p in procs]


def _kill_refusal(records: list[dict], findings: list, interval: float | None) -> str | None:
    """Why --kill stops nothing, or None to stop the job: never on one snapshot, nor while a rank moved, is stopped
    (HANG909: ``kill -CONT``), waits for a subprocess that still runs, is in one long timed sleep, or burns CPU (a
    step longer than the window and a stuck one look alike), nor when no finding is an error."""
    from dsdoctor.checks.hang.verdict import asleep, spans

    def who(group: list[dict]) -> str:
        return spans([r.get("rank") for r in group]) or "a rank"

    moving = [r for r in records if r.get("advancing")]
    busy = [r for r in records if r.get("busy") and not r.get("advancing")]
    paused = [r for r in records if (r.get("proc") or {}).get("status") in ("stopped", "tracing-stop")]
    parents = [r for r in records if r.get("subprocesses")]
    sleeping = [r for r in records if asleep(r) and r.get("position", {}).get("state") != "collective"]
    unsure = "run again with a longer --wait, or stop the job yourself (`kill PID`) if you are sure"
    if not interval:
        return ("nothing stopped: one snapshot (--interval 0) cannot tell a stuck job from a slow step; run "
                "`dsdoctor hang --kill` without it")
    if moving and len(moving) == len(records):
        return (f"nothing stopped: {who(moving)} advanced during the snapshot (a stack changed, or a rank kept waking "
                "and reading or writing): the job is not stuck; stop it yourself if you mean to")
    if moving:
        return (f"nothing stopped: {who(moving)} {'is' if len(moving) == 1 else 'are'} still working (a stack that "
                f"changes, CPU burnt, or reads and writes) while the others wait: a long step and an endless loop look "
                f"alike; {unsure}")
    if paused:
        return (f"nothing stopped: {who(paused)} {'is' if len(paused) == 1 else 'are'} stopped (SIGSTOP, Ctrl-Z or a "
                f"debugger): the job is paused, not stuck; continue it (`kill -CONT {paused[0]['pid']}`), or stop it "
                "yourself")
    if parents:
        child = parents[0]["subprocesses"][0]
        return (f"nothing stopped: rank {parents[0].get('rank')} waits for its subprocess (pid {child['pid']}: "
                f"{child['cmdline']}), which still runs: a long evaluation or conversion and a stuck one look alike; "
                f"{unsure}")
    if sleeping:
        return (f"nothing stopped: {who(sleeping)} {'sleeps' if len(sleeping) == 1 else 'sleep'} on a timer "
                f"(time.sleep): a sleep longer than the snapshot and a retry loop that never ends look alike; {unsure}")
    if busy:
        return (f"nothing stopped: {who(busy)} kept computing (its CPU time grew) at one line: a step longer than "
                f"the snapshot and an endless loop look alike; {unsure}")
    if not any(f.severity == "error" for f in findings):
        return ("nothing stopped: no finding says the job is stuck (a slow collective or a long step is a warning); "
                "take another snapshot, or stop the job yourself if you mean to")
    return None


def _table(records: list[dict]) -> list[list[str]]:
    from dsdoctor.checks.hang.verdict import site

    rows = []
    for r in records:
        gpu = r.get("gpu") or {}
        rows.append([str(r.get("rank")) if r.get("rank") is not None else "-",
                     str(r.get("local_rank")) if r.get("local_rank") is not None else "-", str(r.get("host") or ""),
                     str(r["pid"]),
                     (r.get("proc") or {}).get("status") if (r.get("proc") or {}).get("status") in (
                         "stopped", "gone", "zombie") else r["position"]["state"] if not r.get("error") else
                     "unreadable",
                     site(r["position"]) if r["position"]["state"] != "unknown" else
                     "stopped: its stack cannot be read until it is continued" if (r.get("proc") or {}).get("status") in
                     ("stopped", "tracing-stop") else (r.get("error") or "")[:80],
                     {None: "-", True: "yes", False: "no"}[r.get("advancing")],
                     f"{gpu.get('utilization_percent')}% / {gpu.get('used_gib')} GiB" if gpu else "-"])
    return rows


def hang_report(pids: tuple[int, ...] = (), interval: float = 2.0, timeout: float = 10.0, native: bool = False,
                merge: tuple[str, ...] = (), kill: bool = False, wait: float = 8.0) -> Report:
    """The hang report: findings (HANG9xx), a table of the ranks, and ``result`` = ``{"nodes", "ranks", "interval_s",
    "seconds", "killed"}`` (``ranks`` and ``nodes`` as ``checks/hang/verdict.py`` describes them; ``--merge`` reads
    them back).

    Raises:
        DsdoctorError: see :func:`snapshot_node` and :func:`_load`; --merge with --pid or --kill.
    """
    from dsdoctor.checks.hang.verdict import diagnose

    start = time.perf_counter()
    if merge:
        if pids or kill:
            raise DsdoctorError("--merge joins snapshots already taken: give it without --pid and --kill")
        records, nodes, interval = _load(merge)
    else:
        records, node = snapshot_node(list(pids), interval, timeout, native, wait)
        nodes = [node]
    findings = diagnose(records, nodes, interval)
    killed = []
    if kill:
        refusal = _kill_refusal(records, findings, interval)
        killed = [refusal] if refusal else _kill(records, nodes[0].get("launcher") if nodes else None)
    report = Report("hang", findings=findings,
                    result={"nodes": nodes, "ranks": records, "interval_s": interval,
                            "seconds": round(time.perf_counter() - start, 2), "killed": killed})
    hosts = len({r.get("host") for r in records})
    report.tables.append((f"{len(records)} rank{'s' if len(records) != 1 else ''}"
                          + (f" on {hosts} node{'s' if hosts != 1 else ''}" if merge else "")
                          + ("; one snapshot (--interval 0): whether the ranks move was not measured"
                             if not interval else ""),
                          ["rank", "local", "host", "pid", "state", "where", "advancing", "GPU"], _table(records)))
    if killed:
        report.block_title = "stopped after the snapshot (--kill)"
        report.block = [f"- {line}" for line in killed]
    return report


@click.command("hang")
@click.option("--pid", "pids", multiple=True, type=click.IntRange(min=1, max=2 ** 31 - 1), metavar="PID",
              help="A rank's or its launcher's PID (repeatable). Default: every process with a rank in its "
                   "environment.")
@click.option("--interval", type=FiniteFloat(min=0, max=600), default=2.0, show_default=True,
              help="Seconds over which every rank's stack is sampled (every 0.2 s) to tell a stuck rank from an "
                   "advancing one (0: one snapshot).")
@click.option("--wait", type=FiniteFloat(min=0, max=3600), default=8.0, show_default=True,
              help="The longest the sampling goes on, in seconds from its start, while a rank has not moved (a step "
                   "longer than --interval ends within it; a hang costs all of it).")
@click.option("--timeout", type=FiniteFloat(min=0.1, max=600, min_open=False), default=10.0, show_default=True,
              help="Seconds py-spy may take to read one rank.")
@click.option("--native", is_flag=True, help="Add the C/C++ frames (NCCL, CUDA) to the stacks (py-spy --native).")
@click.option("--merge", is_flag=True,
              help="Join the snapshots given as arguments (`dsdoctor hang --json` of each node) into one verdict.")
@click.argument("snapshots", nargs=-1, metavar="[SNAPSHOT.json...]")
@click.option("--kill", is_flag=True, help="After the snapshot, stop the ranks (SIGTERM, then SIGKILL after 10 s) "
                                           "and print what was stopped.")
@report_command(inputs=("snapshots",))
def hang(pids, interval, wait, timeout, native, merge, kill, snapshots) -> Report:
    """Which rank of a hung job is stuck, where, and why (py-spy on every rank at once; never stops the job unless
    --kill). With --merge, the verdict of the snapshots given (`dsdoctor hang --merge a.json b.json`)."""
    if snapshots and not merge:
        raise DsdoctorError(f"{snapshots[0]}: snapshots are read with --merge (dsdoctor hang --merge a.json b.json)")
    if merge and not snapshots:
        raise DsdoctorError("--merge: give the snapshots to join (dsdoctor hang --merge a.json b.json)")
    return hang_report(tuple(pids), interval, timeout, native, tuple(snapshots), kill, wait)
