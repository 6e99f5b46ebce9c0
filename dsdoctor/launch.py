"""Launching ranks through the real launchers (torchrun, deepspeed) and cleaning up after them.

torchrun starts each worker in a session of its own (``start_new_session=True`` in
``torch/distributed/elastic/multiprocessing/subprocess_handler``), so killing the launcher's process group
does not reach them: :func:`terminate_tree` walks ``/proc`` for every descendant first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def launcher_command(launcher: str, nproc: int, master_port: int, script: Path, script_args: list[str]) -> list[str]:
    """The command line that launches ``nproc`` local ranks of ``script``.

    torchrun: ``python -m torch.distributed.run --nproc_per_node N --master_port P script ...``;
    deepspeed: ``python -m deepspeed.launcher.runner --num_gpus N --master_port P script ...`` (the
    ``deepspeed`` console script). Raises ValueError for another launcher name."""
    if launcher == "torchrun":
        head = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                "--master_addr", "127.0.0.1", "--master_port", str(master_port)]
    elif launcher == "deepspeed":
        head = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc),
                "--master_port", str(master_port)]
    else:
        raise ValueError(f"unknown launcher {launcher!r}")
    return head + [str(script)] + script_args


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (children first), from ``/proc/*/stat``; empty where /proc is absent."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def terminate_tree(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the launcher and every descendant, then SIGKILL whatever is left after ``grace_s``."""
    pids = [proc.pid] + descendants(proc.pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        if proc.poll() is None:
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        else:
            time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only unreaped
    except OSError:
        return False


@contextlib.contextmanager
def stop_on_termination():
    """While the block runs, SIGTERM and SIGHUP raise KeyboardInterrupt, so the caller's Ctrl-C cleanup
    (:func:`terminate_tree`) also runs when dsdoctor itself is killed or its terminal closes: the ranks run in their
    own session and would otherwise outlive it. Outside the main thread (where Python cannot set handlers) it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
