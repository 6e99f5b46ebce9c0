"""From the ranks' positions to findings: group the ranks by where they are and name the odd ones.

A rank record (``dsdoctor hang``'s JSON, ``result["ranks"]``, so that several nodes' snapshots merge) is a dict:
``host``, ``pid``, ``rank``, ``local_rank``, ``world_size``, ``position`` (:func:`checks.hang.stacks.position`),
``advancing`` (True/False between the two snapshots; None with one), ``error`` (why its stack could not be read),
``proc`` (/proc's view), ``workers`` (its DataLoader workers' positions). A node record: ``host``, ``launcher``,
``gone`` (the ranks that should run there and do not: ``{"rank", "local_rank", "evidence"}``), ``oom_kills``.
"""

from __future__ import annotations

from dsdoctor.report import Finding

from .rules import HANG900, HANG901, HANG902, HANG903, HANG904, HANG905, HANG906, HANG907, HANG909
from .stacks import where


def spans(ranks: list) -> str:
    """``rank 3`` / ``ranks 0-3, 5`` (None for a rank its environment does not give: ``pid N``)."""
    numbers = sorted(r for r in ranks if isinstance(r, int))
    parts, start = [], None
    for i, r in enumerate(numbers):
        if start is None:
            start = r
        if i + 1 == len(numbers) or numbers[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    label = ("ranks " if len(numbers) > 1 else "rank ") + ", ".join(parts) if parts else ""
    return label


def _who(records: list[dict]) -> str:
    named = spans([r["rank"] for r in records if r.get("rank") is not None])
    unnamed = [f"pid {r['pid']}" for r in records if r.get("rank") is None]
    return ", ".join(x for x in [named] + unnamed if x)


def site(position: dict) -> str:
    caller = position.get("caller")
    if position["state"] == "collective":
        return f"{position['op']}" + (f" called from {where(caller)}" if caller else "")
    if position["state"] == "dataloader":
        return "the DataLoader's next batch" + (f" (asked by {where(caller)})" if caller else "")
    at = position.get("at")
    text = where(at)
    if caller and caller is not at and caller != at:
        text += f" (in {where(caller)})"
    return text


def _motion(record: dict) -> str:
    advancing, busy = record.get("advancing"), record.get("busy")
    moved = record.get("activity") if isinstance(record.get("activity"), dict) else {}
    if advancing and record.get("stack_changed") is False and moved.get("moving"):
        return (f" (advancing: its main thread woke {moved.get('wakeups')} times and the process made "
                f"{moved.get('syscalls')} read/write calls in {moved.get('seconds')} s)")
    if advancing:
        return " (advancing: its stack changes)"
    if busy:
        return " (busy at one line: it burns CPU there)"
    return "" if advancing is None else " (standing still)"


#: the kernel functions a thread sleeps in for a timed sleep (Python's time.sleep: clock_nanosleep(2)), as
#: /proc/PID/wchan names them across kernels
NANOSLEEP = ("hrtimer_nanosleep", "do_nanosleep", "clock_nanosleep", "__x64_sys_clock_nanosleep",
             "__x64_sys_nanosleep", "common_nsleep")


def asleep(record: dict) -> bool:
    """Whether the rank is in one long timed sleep: its process sleeps on a timer now (``time.sleep``; /proc's wchan)
    and its main thread did not wake during the window (a loop that polls a lock file with short sleeps wakes many
    times: that is a wait that does not end, not a sleep). One long sleep may be a step longer than the snapshot or a
    stuck retry: no snapshot of seconds tells them apart."""
    proc = record.get("proc")
    activity = record.get("activity") if isinstance(record.get("activity"), dict) else {}
    return isinstance(proc, dict) and proc.get("wchan") in NANOSLEEP and (activity.get("wakeups") or 0) <= 1


#: the kernel functions a process sleeps in while it waits for a child to exit (wait4(2): ``subprocess.run``)
WAIT_CHILD = ("do_wait", "kernel_wait4", "__do_sys_wait4")


def polling(record: dict) -> bool:
    """A loop that waits by polling (``while not os.path.exists(f): time.sleep(0.05)``, a lock file's retry): its stack
    alternates between the loop's lines, but it sleeps on a timer now (wchan), neither reads nor writes (/proc's
    counters did not move) and burns no CPU: that is no progress."""
    activity = record.get("activity") if isinstance(record.get("activity"), dict) else {}
    return (record.get("proc") or {}).get("wchan") in NANOSLEEP and not activity.get("moving") \
        and not record.get("busy")


def _inconclusive(group: list[dict]) -> str:
    """What the ranks of ``group`` (not in the collective the others wait in) do that a few seconds cannot tell from
    being stuck, as the end of HANG901's title; "" when they stand still (the finding is then an error)."""
    if all(asleep(r) for r in group):
        return " and sleeping on a timer (inconclusive: a long sleep or a stuck retry)"
    if all(r.get("subprocesses") for r in group):
        child = group[0]["subprocesses"][0]
        return (f" and waiting for its subprocess (pid {child['pid']}: {child['cmdline']}), which still runs "
                "(inconclusive: a long evaluation or a stuck one)")
    if all(r.get("advancing") or r.get("busy") or asleep(r) or r.get("subprocesses") for r in group):
        return " and still working (inconclusive: a long step or an endless loop)"
    return ""


def _status(record: dict) -> str | None:
    proc = record.get("proc")
    return proc.get("status") if isinstance(proc, dict) else None


def _list(value) -> list:
    return value if isinstance(value, list) else []


def diagnose(ranks: list[dict], nodes: list[dict], interval: float | None) -> list[Finding]:
    """The findings for one job's ranks (one node's snapshot, or several merged). Ordered: the gone ranks first
    (the cause the others wait for), then the ranks that have not reached the collective, mismatched collectives,
    the DataLoader, the ranks outside any collective, unreadable stacks; HANG900 alone when every rank advances."""
    findings: list[Finding] = []
    stopped = [r for r in ranks if _status(r) in ("stopped", "tracing-stop")]
    exited = [r for r in ranks if _status(r) in ("gone", "zombie") and r not in stopped]
    readable = [r for r in ranks if r.get("position", {}).get("state") not in (None, "unknown")
                and r not in stopped and r not in exited]
    gone = [g for node in nodes for g in _list(node.get("gone")) if isinstance(g, dict)]
    for r in stopped:
        findings.append(HANG909.finding(f"{_who([r])} (pid {r['pid']}): {_status(r)}"
                                        + (f", in the kernel's {r['proc']['wchan']}" if (r.get("proc") or {}).get(
                                            "wchan") not in (None, "0") else ""),
                                        fix=f"kill -CONT {r['pid']} (or `fg` in the shell that started the job); "
                                            "detach the debugger"))
    for r in exited:
        findings.append(HANG903.finding(f"{_who([r])} (pid {r['pid']}) exited while dsdoctor looked",
                                        title=f"{_who([r])} exited during the snapshot"))
    if readable and not gone and not stopped and not exited and len(readable) == len(ranks) and interval \
            and all(r.get("advancing") for r in readable):
        by_stack = [r for r in readable if r.get("stack_changed") is not False]
        by_io = [r for r in readable if r not in by_stack]
        how = "; ".join(part for part in (
            f"{_who(by_stack)}: the main thread's stack changed" if by_stack else "",
            f"{_who(by_io)}: the main thread kept waking and the process kept reading and writing (/proc), at one line"
            if by_io else "") if part)
        return [HANG900.finding(f"within {interval:g} s, {how}; now "
                                + "; ".join(f"rank {r.get('rank')} at {site(r['position'])}" for r in readable[:8]))]
    collective = [r for r in readable if r["position"]["state"] == "collective"]
    waiting = "; ".join(f"{_who(group)} {_verb(group, 'waits', 'wait')} in {place}"
                        for place, group in _groups(collective).items())
    for node in nodes:
        for g in [g for g in _list(node.get("gone")) if isinstance(g, dict)]:
            kills = node.get("oom_kills") or []
            evidence = [g.get("evidence") or "no process"]
            if kills:
                evidence.append("the kernel's log: " + " | ".join(kills[-3:]))
            elif node.get("dmesg_error"):
                evidence.append(f"the kernel's log could not be read ({node['dmesg_error']})")
            if waiting:
                evidence.append(waiting)
            findings.append(HANG903.finding("; ".join(evidence),
                                            title=f"rank {g.get('rank')} is gone"
                                                  f"{' from ' + node['host'] if node.get('host') else ''}; the "
                                                  "others wait for it"))
    others = [r for r in readable if r["position"]["state"] != "collective"]
    if collective and others:
        ops = sorted({str(r["position"].get("op")) for r in collective})
        for place, group in _groups(others).items():
            motion = _motion(group[0]) if len(group) == 1 else ""
            loader = group[0]["position"]["state"] == "dataloader"
            # a rank that computes, sleeps once or waits for its subprocess may be a long step (a straggler) or stuck:
            # no snapshot of a few seconds tells them apart (inconclusive: a warning)
            unsure = _inconclusive(group) if interval else ""
            window = max((r.get("window_s") or 0 for r in ranks), default=0)
            findings.append(HANG901.finding(
                f"{waiting}; {_who(group)} {'is' if len(group) == 1 else 'are'} at {place}{motion}"
                + _workers(group),
                severity="warning" if unsure else None,
                fix=("The odd rank waits for its own DataLoader: " + HANG904.fix) if loader else
                ("If that work should take less than the snapshot's "
                 f"{window:g} s, it is stuck there: read its frames; otherwise it is a straggler (rank-0-only "
                 "evaluation, saving, uneven batches): run `dsdoctor hang --wait 60` to see whether it ends, and "
                 "give every rank the same work between collectives.") if unsure else None,
                title=f"{_who(group)} {_verb(group, 'has', 'have')} not reached {' / '.join(ops)}: "
                      f"{'it is' if len(group) == 1 else 'they are'} at {place}{unsure}"))
    if collective and len(_groups(collective)) > 1:
        findings.append(HANG902.finding(waiting))
    if readable and not collective:
        loader = [r for r in readable if r["position"]["state"] == "dataloader"]
        if len(loader) == len(readable):
            findings.append(HANG904.finding(
                f"{_who(loader)} {_verb(loader, 'waits', 'wait')} for {'; '.join(_groups(loader))}"
                + _workers(loader)))
        else:
            sites = "; ".join(f"{_who(group)} at {place}" + (_motion(group[0]) if len(group) == 1 else "")
                              for place, group in _groups(readable).items())
            sleeping = all(asleep(r) for r in readable)
            blocked = interval and not sleeping and all(r.get("advancing") is False and not r.get("busy")
                                                        for r in readable)
            busy = all(r.get("busy") for r in readable)
            findings.append(HANG907.finding(
                sites, severity="error" if blocked else None,
                title="no rank is in a collective, and no rank moves: each is blocked where the evidence says"
                if blocked else "no rank is in a collective; every rank sleeps (time.sleep) at the lines in the "
                "evidence: a sleep longer than the snapshot, or a retry loop (inconclusive)" if sleeping else
                "no rank is in a collective; every rank is busy at one line (a long step, or a wait that spins)"
                if busy else None,
                fix="Run `dsdoctor hang --wait S` with S longer than the sleep: a job that sleeps on purpose moves "
                    "after it; a retry loop (a download, a lock file, a server that does not answer) stays: fix what "
                    "it waits for." if sleeping else None))
    if collective and not others and len(_groups(collective)) == 1 and not gone and not stopped and not exited:
        world = max((r.get("world_size") for r in ranks if isinstance(r.get("world_size"), int)), default=0)
        present = {r.get("rank") for r in ranks}
        absent = [k for k in range(world) if k not in present] if world <= 100_000 else []
        if absent:
            findings.append(HANG905.finding(
                f"{waiting}; {spans(absent)} of world size {world} {'is' if len(absent) == 1 else 'are'} in no "
                f"snapshot (another node: snapshot it and --merge)",
                title="every rank seen waits in the same collective; the late rank is not here",
                fix="Run `dsdoctor hang --json NODE.json` on every node (pdsh or srun) and `dsdoctor hang --merge "
                    "*.json`: the late rank is in another node's snapshot."))
        else:
            moving = all(r.get("busy") or r.get("advancing") for r in collective)
            findings.append(HANG905.finding(
                f"{waiting}; every rank of the job is here" + ("; they burn CPU in it: the collective is working, "
                                                               "slowly" if moving else ""),
                title="every rank waits in the same collective, all arrived: " + (
                    "a slow collective, still working" if moving else "it is slow or stuck in its transport"),
                fix="Run `dsdoctor hang` again with a longer --interval (a slow collective advances); `dsdoctor nccl` "
                    "tests the transport; rerun with `NCCL_DEBUG=INFO`."))
    if interval == 0:  # --interval 0, one snapshot: where the ranks are, not whether they move
        findings = [f if f.severity != "error" or f.id in ("HANG903", "HANG909") else
                    type(f)(**{**f.to_dict(), "severity": "warning",
                               "title": f"{f.title} (one snapshot, --interval 0: whether the ranks move was not "
                                        "measured)"}) for f in findings]
    recorded = flight(ranks)
    if recorded is not None:
        behind, mismatched, text = recorded
        text += _torch_analysis(nodes)
        named = {f.id for f in findings}
        if behind and not named & {"HANG901", "HANG903"}:
            # with NCCL (or an async collective) the ranks' stacks show the wait at a line of their own (HANG907):
            # the recorder says which of them is late, and the stacks where it is
            findings = [f for f in findings if f.id != "HANG907"]
            where_late = "; ".join(f"{_who([r])} is at {site(r['position'])}" for r in behind
                                   if r.get("position", {}).get("state") not in (None, "unknown"))
            findings.insert(0, HANG901.finding(text + (f"; {where_late}" if where_late else ""),
                                               title=f"{_who(behind)} has not reached the collective the others "
                                                     "enqueued (Flight Recorder)"))
        elif mismatched and "HANG902" not in named:
            findings.insert(0, HANG902.finding(text, title="mismatched collectives (Flight Recorder)"))
        elif findings:
            first = findings[0]
            findings[0] = type(first)(**{**first.to_dict(), "evidence": f"{first.evidence}; Flight Recorder: {text}"})
    # a rank py-spy read without error but with no thread is exiting: nothing to say of its stack
    unreadable = [r for r in ranks if r not in readable and r not in stopped and r not in exited and r.get("error")]
    for error, group in _by_error(unreadable).items():
        states = "; ".join(f"pid {r['pid']}: {r.get('proc', {}).get('status', '?')}"
                           + (f", in the kernel's {r['proc']['wchan']}" if r.get("proc", {}).get("wchan") not in (None, "0")
                              else "")
                           for r in group[:8])
        findings.append(HANG906.finding(f"{_who(group)}: {error}; /proc: {states}"))
    return findings


def flight(ranks: list[dict]) -> tuple[list[dict], bool, str] | None:
    """What the ranks' Flight Recorder dumps say (``record["flight_recorder"]["groups"]``, ``checks/hang/flight.py``),
    per process group: the ranks whose last enqueued collective is behind the others' (``behind``), whether ranks at
    the same sequence number enqueued different ops (``mismatched``), and a line of evidence (with one rank's dump, what
    it enqueued last). None without a dump."""
    dumps = [(r, (r.get("flight_recorder") or {}).get("groups")) for r in ranks]
    dumps = [(r, g) for r, g in dumps if isinstance(g, dict) and g]
    if not dumps:
        return None
    behind, mismatched, parts = [], False, []
    for group in sorted({name for _, g in dumps for name in g}):
        last = [(r, g[group]["last_enqueued"]) for r, g in dumps if g.get(group) and g[group]["last_enqueued"]]
        if not last:
            continue
        top = max(op["seq"] for _, op in last)
        late = [r for r, op in last if op["seq"] < top]
        at_top = {op["op"] for _, op in last if op["seq"] == top}
        mismatched |= len(at_top) > 1
        for r in late:
            if r not in behind:
                behind.append(r)
        by_op: dict[str, list[dict]] = {}
        for r, op in last:
            by_op.setdefault(f"{op['op']} #{op['seq']}", []).append(r)
        parts.append(f"{group}: " + "; ".join(f"{_who(rs)} last enqueued {label}" for label, rs in by_op.items()))
    return behind, mismatched, " | ".join(parts)


def _torch_analysis(nodes: list[dict]) -> str:
    """PyTorch's own analysis of a node's dumps (``checks/hang/flight.py`` :func:`torch_analysis`, a node record's
    ``flight_analysis``), as a clause of evidence: the collectives it found ranks missing from or mismatched, where
    they were called; "" when it did not run."""
    analysis = next((n["flight_analysis"] for n in nodes
                     if isinstance(n, dict) and isinstance(n.get("flight_analysis"), dict)), None)
    if analysis is None or analysis.get("skipped"):  # none in this torch, or dumps that are not one job's
        return ""
    if analysis.get("error"):
        return f"; torch's own analysis could not run on these dumps ({str(analysis['error'])[:120]})"
    problems = [p for p in analysis.get("problems") or [] if isinstance(p, dict)]
    if not problems:
        return f"; torch's own analysis matched {analysis.get('collectives')} collectives with no rank missing"
    parts = []
    for p in problems[:3]:
        missing = p.get("missing_ranks") if isinstance(p.get("missing_ranks"), list) else []
        what = (f"{spans(missing)} missing" if missing else "") + (f"{', ' if missing else ''}mismatched "
                                                                 f"{p['mismatch']}" if p.get("mismatch") else "")
        parts.append(f"{p.get('op')} #{p.get('seq')} ({p.get('group')}): {what or 'did not pass its check'}"
                     + (f", called from {p['called_from']}" if p.get("called_from") else ""))
    return "; torch's own analysis (torch.distributed.flight_recorder): " + "; ".join(parts)


def _verb(records: list[dict], one: str, many: str) -> str:
    return one if len(records) == 1 else many


def _groups(records: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for r in records:
        grouped.setdefault(site(r["position"]), []).append(r)
    return grouped


def _by_error(records: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for r in records:
        grouped.setdefault(r.get("error") or "no frames", []).append(r)
    return grouped


def _workers(records: list[dict]) -> str:
    seen = []
    for r in records:
        for w in r.get("workers") or []:
            if w.get("at"):
                seen.append(f"its worker pid {w['pid']} (rank {r.get('rank')}) is at {w['at']}")
    return ("; " + "; ".join(seen[:4])) if seen else ""
