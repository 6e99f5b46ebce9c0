"""Launching ranks through the real launchers (torchrun, deepspeed) and tying their lifetime to dsdoctor's.

torchrun starts each worker in a session of its own (``start_new_session=True`` in
``torch/distributed/elastic/multiprocessing/subprocess_handler``), so killing the launcher's process group
does not reach them: :func:`terminate_tree` walks ``/proc`` for every descendant first. :func:`launched` adds what a
process tree alone cannot give, for every way a run can end:

- an exception of any kind in the supervisor, or Ctrl-C, SIGTERM, SIGHUP: every rank is stopped (``finally``);
- a second Ctrl-C during that cleanup: SIGKILL at once;
- the launcher killed (``kill -9`` of torchrun, the OOM killer): dsdoctor is a child subreaper
  (``prctl(PR_SET_CHILD_SUBREAPER)``), so the orphaned ranks stay its descendants, and every process started with the
  run's tag (``DSDOCTOR_RUN_ID`` in its environment) is swept;
- dsdoctor itself SIGKILLed: the launcher gets SIGTERM from the kernel (``prctl(PR_SET_PDEATHSIG)`` set before it
  execs), and each rank of the reference trainer and the nccl worker dies with its own parent
  (:func:`die_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

#: the environment variable that tags every process of one dsdoctor run (read back from /proc/<pid>/environ)
RUN_TAG = "DSDOCTOR_RUN_ID"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _load_libc():
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


#: libc, resolved once here in the parent: the child between fork and exec (Popen's preexec_fn) must not dlopen
_LIBC = _load_libc()


def _prctl(option: int, value: int) -> bool:
    """Linux ``prctl(option, value)``; False where it is unavailable (not Linux, no libc)."""
    if _LIBC is None:
        return False
    try:
        return _LIBC.prctl(option, value, 0, 0, 0) == 0
    except AttributeError:
        return False


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (``PR_SET_PDEATHSIG``); if the parent is
    already gone (it died before the call), exit now. Called first thing by every rank dsdoctor launches, so that a
    SIGKILLed launcher never leaves ranks training as orphans. Returns False where prctl is unavailable."""
    parent = os.getppid()
    ok = _prctl(_PR_SET_PDEATHSIG, int(sig))
    if ok and os.getppid() != parent:  # the parent died between getppid and prctl
        os._exit(128 + int(sig))
    return ok


#: ``PID:start time`` of the dsdoctor process supervising a run, in every rank's environment
SUPERVISOR = "DSDOCTOR_SUPERVISOR"


def _start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22): with the PID, it names one
    process even after the PID is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def supervisor_tag() -> str:
    return f"{os.getpid()}:{_start_time(os.getpid())}"


def tie_to_supervisor(poll_s: float = 1.0) -> None:
    """In a rank: die with the launcher (:func:`die_with_parent`) and, when dsdoctor launched the run
    (``DSDOCTOR_SUPERVISOR`` in the environment), with dsdoctor too: a daemon thread checks every ``poll_s`` that the
    supervisor still lives and ends this rank when it does not. The deepspeed launcher puts two processes between
    dsdoctor and a rank, and the middle one (``deepspeed.launcher.launch``) outlives a SIGKILLed runner, so the death
    signal of the parent alone cannot reach the rank."""
    die_with_parent()
    tag = os.environ.get(SUPERVISOR, "")
    pid, _, started = tag.partition(":")
    if not pid.isdecimal():
        return

    def watch() -> None:
        while _start_time(int(pid)) == started:
            time.sleep(poll_s)
        os._exit(143)  # 128 + SIGTERM: the run's supervisor is gone, nobody will read this rank's results

    threading.Thread(target=watch, name="dsdoctor-supervisor-watch", daemon=True).start()


def _preexec_die_with_parent() -> None:  # runs in the child between fork and exec: async-signal-safe calls only
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def flight_recorder_env(out_dir: Path) -> dict[str, str]:
    """The Flight Recorder on for dsdoctor's own ranks, dumping into ``out_dir`` (``fr_rank_<rank>``; NCCL ranks
    also make ``fr_pipe_<rank>.pipe``, through which ``dsdoctor hang`` asks for a dump): what `dsdoctor env`'s HANG908
    proposes. The caller puts the user's own settings over these."""
    from dsdoctor.checks.hang.flight import RECOMMENDED

    return {**RECOMMENDED, "TORCH_FR_DUMP_TEMP_FILE": str(out_dir / "fr_rank_"),
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(out_dir / "fr_pipe_")}


def hang_snapshot(launcher_pid: int) -> list:
    """``dsdoctor hang``'s findings for the ranks under ``launcher_pid`` (one snapshot, no sampling), for a probe that
    timed out; [] when no rank can be found or read (the timeout's own finding stands alone then)."""
    try:
        from dsdoctor.checks.hang.verdict import diagnose
        from dsdoctor.commands.hang import snapshot_node
        from dsdoctor.report import DsdoctorError

        records, node = snapshot_node([launcher_pid], 0, 5.0, False)
    except (DsdoctorError, OSError, ImportError):
        return []
    return diagnose(records, [node], None)  # a timeout said it hung: no motion to measure


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


def tagged(tag: str) -> list[int]:
    """PIDs of live processes whose environment carries ``DSDOCTOR_RUN_ID=tag`` (this user's, or all as root)."""
    needle = f"{RUN_TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def terminate_tree(proc: subprocess.Popen, grace_s: float = 10.0, tag: str | None = None) -> None:
    """SIGTERM the launcher, every descendant and every process tagged ``tag``, then SIGKILL whatever is left after
    ``grace_s``. A Ctrl-C while waiting sends SIGKILL to all of them at once, then re-raises KeyboardInterrupt."""
    pids = list(dict.fromkeys([proc.pid] + descendants(proc.pid) + (tagged(tag) if tag else [])))
    _signal_all(pids, signal.SIGTERM)
    try:
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            if proc.poll() is None:
                try:
                    proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(0.2)
    except KeyboardInterrupt:  # a second Ctrl-C: no more grace
        _signal_all(pids + descendants(proc.pid) + (tagged(tag) if tag else []), signal.SIGKILL)
        _reap(proc)
        raise
    # ranks started late (torchrun restarting a worker) or orphaned while we waited
    _signal_all([p for p in pids + descendants(proc.pid) + (tagged(tag) if tag else []) if _alive(p)], signal.SIGKILL)
    _reap(proc)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in dict.fromkeys(pids):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    _reap_orphans()


def _reap_orphans() -> None:
    """Collect the exit status of orphans reparented to us as subreaper (else they stay zombies until we exit)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (``PR_SET_CHILD_SUBREAPER``), so that ranks orphaned
    by a killed launcher are reparented to dsdoctor, not to PID 1. False where unavailable."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


@contextlib.contextmanager
def launched(cmd: list[str], env: dict, log, grace_s: float = 10.0,
             before_stop: Callable[[list[int]], None] | None = None) -> Iterator[subprocess.Popen]:
    """Start ``cmd`` (a launcher) with its output in the open file ``log``, tied to this process, and stop every
    process of the run when the block ends, however it ends (see the module docstring). ``before_stop(pids)`` runs
    with the run's live PIDs just before they are stopped (smoke records the build locks its ranks hold then).
    The yielded Popen has ``tag``, the run's ``DSDOCTOR_RUN_ID``."""
    tag = uuid.uuid4().hex
    become_subreaper()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**env, RUN_TAG: tag, SUPERVISOR: supervisor_tag()}, start_new_session=True,
                            preexec_fn=_preexec_die_with_parent if sys.platform.startswith("linux") else None)
    proc.tag = tag
    with stop_on_termination():  # SIGTERM/SIGHUP stop the ranks as Ctrl-C does, also during the cleanup
        try:
            yield proc
        finally:
            live = [p for p in [proc.pid] + descendants(proc.pid) + tagged(tag) if _alive(p)]
            if before_stop is not None and live:
                try:
                    before_stop(live)
                except Exception:  # noqa: BLE001 - the ranks are stopped whatever this hook does
                    pass
            terminate_tree(proc, grace_s=grace_s if proc.poll() is None else min(grace_s, 2.0), tag=tag)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only unreaped
    except OSError:
        return False


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that the same cleanup runs; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_termination():
    """While the block runs, SIGTERM and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt), so the caller's Ctrl-C
    cleanup (:func:`terminate_tree`) also runs when dsdoctor itself is killed or its terminal closes: the ranks run in
    their own session and would otherwise outlive it. Outside the main thread (where Python cannot set handlers) it
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: resident memory of one CPU rank of the reference trainer on the bundled model (0.47 to 0.70 GiB seen in smoke runs
#: on this machine: torch, DeepSpeed, gloo, the tiny model and its optimizer) and of one nccl sweep worker before its
#: buffers (torch and gloo)
CPU_RANK_BYTES = {"smoke": int(0.75 * 2 ** 30), "nccl": int(0.35 * 2 ** 30)}
#: CPU ranks per core beyond which more ranks only time-slice (every gloo collective waits for the slowest)
RANKS_PER_CORE = 8


def available_ram_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (what can be allocated without swapping), bytes; None if unreadable."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_rank_problem(nproc: int, per_rank_bytes: int, cores: int | None = None,
                     available: int | None = None) -> str | None:
    """Why ``nproc`` CPU ranks cannot run on this host, or None: more than :data:`RANKS_PER_CORE` per core, or more
    resident memory (``nproc`` x ``per_rank_bytes``) than 90% of the RAM available now. Each limit is named with its
    value (``smoke --nproc 999`` started 117 processes and set off 102 OOM kills on a 24 GiB host before this)."""
    cores = cores or os.cpu_count() or 1
    available = available_ram_bytes() if available is None else available
    by_cores = RANKS_PER_CORE * cores
    by_ram = int(0.9 * available // per_rank_bytes) if available else None
    limit = min(by_cores, by_ram) if by_ram is not None else by_cores
    if nproc <= limit:
        return None
    if by_ram == 0 and available:
        return (f"one CPU rank of this model needs about {per_rank_bytes / 2 ** 30:.1f} GiB of RAM (the model in "
                f"fp32 and the trainer) and {available / 2 ** 30:.1f} GiB is available here: run smoke on the GPU "
                f"machine, or on a smaller shape of the model")
    ram = (f"{nproc} ranks need about {nproc * per_rank_bytes / 2 ** 30:.1f} GiB of RAM "
           f"({per_rank_bytes / 2 ** 30:.2f} GiB each) and {available / 2 ** 30:.1f} GiB is available"
           if available else "the available RAM is unknown")
    return (f"--nproc {nproc} is more CPU ranks than this host can run: {cores} core(s) allow {by_cores} "
            f"({RANKS_PER_CORE} per core), and {ram}; at most {max(limit, 1)} here")
