"""Following a launched smoke run: the progress bar, the op builds and their locks, and the moment to stop it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Supervised:
    """How the launched run ended, as :func:`supervise` saw it."""

    returncode: int | None  # None: stopped by dsdoctor (timeout, a stale build lock)
    timed_out: bool
    wall_s: float
    #: a build lock that no live process held while the ranks waited on it (ENV329): the run was stopped
    stale_lock: dict | None = None
    #: build locks this run's ranks held when they were stopped, and that dsdoctor then removed
    removed_locks: list[str] = field(default_factory=list)
    #: the op builds seen while the ranks started: {"op", "path", "seconds", "by": "this run" | "PID n"}
    builds: list[dict] = field(default_factory=list)
    #: on a timeout, `dsdoctor hang`'s findings for the ranks still running (their stacks, the Flight Recorder)
    hang: list = field(default_factory=list)


def supervise(cmd: list[str], env: dict, out: Path, steps: int, timeout_s: float,
              extensions_root: Path | None) -> Supervised:
    """Run the launcher with its output in ``out/train.log``; show a live progress bar with rank 0's loss on
    stderr. Every process of the run is stopped however this ends (:func:`dsdoctor.launch.launched`): on timeout, on
    a rank's error record the launcher does not act on within 60 s, on Ctrl-C (re-raised), on any error here.

    Until the first step, it watches torch's build locks under ``extensions_root`` (the ranks'
    ``TORCH_EXTENSIONS_DIR``): a lock held by a rank of this run is a first build of that op (shown as such); one held
    by another process is a build the ranks wait for; one held by nobody, with no compiler at work, is stale (ENV329):
    the ranks would wait on it forever, so the run is stopped at once and the lock named. A lock this run's own ranks
    held when they were stopped (Ctrl-C during the first build) is removed once no process holds it."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from dsdoctor import extensions
    from dsdoctor.launch import descendants, hang_snapshot, launched, tagged

    metrics = out / "metrics" / "rank0.jsonl"
    start = time.monotonic()
    first_error_at = None
    held: dict[str, extensions.BuildLock] = {}  # locks this run's ranks hold (path -> lock)
    builds: dict[str, dict] = {}
    suspects: dict[tuple[str, int], float] = {}  # a lock seen with no holder: (path, inode) -> first seen
    outcome = Supervised(None, False, 0.0)

    def run_pids(proc) -> set[int]:
        return {proc.pid, *descendants(proc.pid), *tagged(proc.tag)}

    def watch_locks(proc, ours: set[int]) -> str | None:
        """The progress text for the build locks the ranks face now, or None; sets outcome.stale_lock."""
        now = time.monotonic()
        locks = extensions.build_locks([extensions_root]) if extensions_root is not None else []
        seen = set()
        for lock in locks:
            seen.add((lock.path, lock.inode))
            if set(lock.holders) & ours:
                held[lock.path] = lock
                builds.setdefault(lock.op, {"op": lock.op, "path": lock.path, "started": now, "by": "this run"})
                return f"building DeepSpeed op {lock.op} (first run: about a minute)"
            if lock.holders or lock.compilers:
                pid = (lock.holders or lock.compilers)[0]
                builds.setdefault(lock.op, {"op": lock.op, "path": lock.path, "started": now, "by": f"PID {pid}"})
                return f"waiting for PID {pid}'s build of DeepSpeed op {lock.op}"
            first = suspects.setdefault((lock.path, lock.inode), now)
            if now - first >= 1.0:  # seen unheld twice, a second apart (a builder releases by close, then unlink)
                outcome.stale_lock = lock.to_dict()
                return None
        for key in [k for k in suspects if k not in seen]:
            del suspects[key]
        for build in builds.values():
            if "seconds" not in build and not any(lock.path == build["path"] for lock in locks):
                build["seconds"] = round(now - build.pop("started"), 1)
        return None

    def record_held(pids: list[int]) -> None:  # just before the ranks are stopped
        if extensions_root is None:
            return
        for lock in extensions.build_locks([extensions_root]):
            if set(lock.holders) & set(pids):
                held[lock.path] = lock

    with open(out / "train.log", "wb") as log, Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
            TextColumn("{task.fields[loss]}"), TimeElapsedColumn(),
            console=Console(stderr=True), transient=False) as progress:
        task = progress.add_task("starting ranks", total=steps, loss="")
        try:
            with launched(cmd, env, log, before_stop=record_held) as proc:
                offset, last = 0, None
                while proc.poll() is None:
                    time.sleep(0.5)
                    if metrics.is_file():
                        with open(metrics, "rb") as f:
                            f.seek(offset)
                            chunk = f.read()
                        complete = chunk[: chunk.rfind(b"\n") + 1]
                        offset += len(complete)
                        for line in complete.decode("utf-8", "replace").splitlines():
                            try:
                                row = json.loads(line)
                            except json.JSONDecodeError:  # not one of the trainer's lines: judged later
                                continue
                            if isinstance(row, dict) and isinstance(row.get("step"), int) and \
                                    isinstance(row.get("loss"), (int, float)):
                                last = row
                        if last:
                            progress.update(task, description="training", completed=last["step"],
                                            loss=f"loss {last['loss']:.4f}")
                    if last is None:
                        text = watch_locks(proc, run_pids(proc))
                        if outcome.stale_lock is not None:
                            progress.update(task, description=f"stale build lock {outcome.stale_lock['path']}")
                            break
                        if text:
                            progress.update(task, description=text)
                    if first_error_at is None and any((out / "errors").glob("rank*.json")):
                        first_error_at = time.monotonic()
                        progress.update(task, description="a rank failed")
                    if time.monotonic() - start > timeout_s:
                        outcome.timed_out = True
                        if last is not None:  # past the start: where each rank waits, before they are stopped
                            outcome.hang = hang_snapshot(proc.pid)
                        break
                    if first_error_at is not None and time.monotonic() - first_error_at > 60:
                        break
                else:
                    outcome.returncode = proc.returncode
        except KeyboardInterrupt:
            progress.update(task, description="interrupted: every rank stopped")
            raise
        finally:
            outcome.wall_s = time.monotonic() - start
            for lock in held.values():  # the builds this run's ranks left when they were stopped
                if extensions.remove_if_stale(lock):
                    outcome.removed_locks.append(lock.path)
            outcome.builds = [{k: v for k, v in b.items() if k != "started"} for b in builds.values()]
    if outcome.returncode is None and not outcome.timed_out and outcome.stale_lock is None:
        outcome.returncode = proc.returncode  # stopped 60 s after a rank's error record
    return outcome
