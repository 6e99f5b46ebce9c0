"""Finding a job's ranks on this node: the processes whose environment says which rank they are, their launcher,
and the ranks that should be here but are not.

Launchers give every rank its identity in the environment: torchrun and ``accelerate launch`` (through torchrun's
elastic agent: ``torch/distributed/elastic/agent/server/api.py`` sets RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID), the deepspeed launcher
(``deepspeed/launcher/launch.py``: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE), mpirun (Open MPI's
OMPI_COMM_WORLD_RANK/LOCAL_RANK/SIZE), MPICH and srun (PMI_RANK; SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS inside an
``srun`` step). A rank's children (DataLoader workers, compile workers) inherit that environment: only the topmost
process of each rank is the rank. Read with psutil (``Process.environ()`` is the environment the process started
with, ``/proc/PID/environ``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

#: (rank, local rank, world size, local world size) keys, in the order launchers are tried
IDENTITY_KEYS = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"),
)
#: a launcher's command line: the process whose children are the ranks
LAUNCHER = re.compile(r"(?:^|[/\s])(?:torchrun|deepspeed|accelerate|srun|mpirun|mpiexec|orterun|prterun)(?:\s|$)|"
                      r"torch\.distributed\.(?:run|launch)|deepspeed\.launcher\.(?:launch|runner)|accelerate\.commands")
#: a rank of this job: these keys of its environment are equal on every rank of one job
JOB_KEYS = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


@dataclass
class RankProcess:
    """One rank's process: ``rank``/``local_rank`` from its environment (None when unset), ``world_size`` and
    ``local_world_size`` (None when the launcher does not say), ``job``: the values of :data:`JOB_KEYS`."""

    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    cmdline: str
    job: tuple = ()
    children: list[int] = field(default_factory=list)
    #: the Flight Recorder's settings in its environment (``checks/hang/flight.py``)
    flight_env: dict = field(default_factory=dict)
    #: when the process started, seconds since the epoch
    started: float | None = None


def _int(value: str | None) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if 0 <= number < 1_000_000 else None


def identity(env: dict[str, str]) -> tuple[int, int | None, int | None, int | None] | None:
    """(rank, local rank, world size, local world size) from a process's environment, or None when it is no rank.
    The deepspeed launcher's LOCAL_SIZE stands in for LOCAL_WORLD_SIZE."""
    for rank_key, local_key, world_key, local_world_key in IDENTITY_KEYS:
        rank = _int(env.get(rank_key))
        if rank is not None:
            local_world = _int(env.get(local_world_key)) if local_world_key in env else _int(env.get("LOCAL_SIZE"))
            return rank, _int(env.get(local_key)), _int(env.get(world_key)), local_world
    return None


def _cmdline(proc) -> str:
    """The command line, without the interpreter in front of a script (``python3.11 .../bin/torchrun ...`` is
    ``torchrun ...``)."""
    try:
        args = proc.cmdline()
    except Exception:  # psutil.Error, a process gone meanwhile
        return ""
    if len(args) > 1 and "python" in os.path.basename(args[0]) and not args[1].startswith("-"):
        args = [os.path.basename(args[1])] + args[2:]
    return " ".join(args)[:500]


def _python(proc) -> bool:
    """Whether the process runs a Python interpreter (its executable's or its first argument's name), whatever
    script it runs (``python train.py``, ``python -u train.py``, ``torchrun``'s ``python3.11 .../torchrun``)."""
    try:
        names = [os.path.basename(proc.exe() or ""), proc.name(), os.path.basename((proc.cmdline() or [""])[0])]
    except Exception:  # psutil.Error: gone, or another user's (its exe unreadable): the name is enough
        try:
            names = [proc.name()]
        except Exception:
            return False
    return any(n.startswith("python") or n in ("torchrun", "deepspeed", "accelerate") for n in names)


#: libraries in a process's memory map that make it a distributed rank (PyTorch's, or an MPI library's)
RANK_LIBRARIES = re.compile(r"libtorch|libc10|/torch/_C|libmpi|libnccl")


def _distributed(pid: int) -> bool:
    """Whether the process has loaded PyTorch or MPI (its ``/proc/PID/maps``): a Python process with RANK in its
    environment that never imported torch (a helper script the launcher's environment reached) is no rank. True when
    the map cannot be read (another user's process: the environment said rank)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any(RANK_LIBRARIES.search(line) for line in f)
    except OSError:
        return True


def describe(proc) -> RankProcess | None:
    """The rank a psutil Process is, or None (not a Python process with a rank in its environment and PyTorch or MPI
    loaded, or gone)."""
    import psutil

    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return None
    found = identity(env)
    if found is None or not _python(proc) or not _distributed(proc.pid):
        return None
    cmdline = _cmdline(proc)
    from .flight import BUFFER_KEYS, DUMP_KEYS, PIPE_KEY

    rank, local_rank, world, local_world = found
    try:
        started = proc.create_time()
    except (psutil.Error, OSError):
        started = None
    return RankProcess(proc.pid, rank, local_rank, world, local_world, cmdline,
                       tuple(env.get(k, "") for k in JOB_KEYS),
                       flight_env={k: env[k] for k in (*BUFFER_KEYS, *DUMP_KEYS, PIPE_KEY, "TORCH_NCCL_DUMP_ON_TIMEOUT")
                                   if k in env}, started=started)


def find_ranks(pids: list[int] | None = None) -> list[RankProcess]:
    """The ranks on this node: the given PIDs (a rank, or a launcher whose descendants are ranks) or, with none
    given, every process with a rank in its environment. A process whose parent is a rank of the same job is that
    rank's child (a DataLoader worker), kept in the rank's ``children``. Sorted by rank.

    Raises:
        LookupError: a given PID is no process, or neither a rank nor the ancestor of one (message: one line).
    """
    import psutil

    candidates: dict[int, RankProcess] = {}
    if pids:
        for pid in pids:
            if pid == 1:
                raise LookupError("--pid 1 is init, not a job's launcher: give the launcher's PID (torchrun, deepspeed, "
                                  "accelerate launch, srun, mpirun) or a rank's")
            try:
                proc = psutil.Process(pid)
            except (psutil.Error, ValueError, OverflowError):
                raise LookupError(f"--pid {pid}: no such process") from None
            try:
                proc.environ()
            except psutil.AccessDenied:
                raise LookupError(f"--pid {pid}: its environment cannot be read (another user's process): run dsdoctor "
                                  "hang as that user or as root") from None
            except psutil.Error:
                pass
            found = describe(proc)
            if found is not None:
                candidates[pid] = found
                # a rank given alone: its job's other ranks are its launcher's too (never taken for gone ones)
                launcher = launcher_of([found])
                if launcher is not None:
                    try:
                        below = psutil.Process(launcher["pid"]).children(recursive=True)
                    except psutil.Error:
                        below = []
                    for other in (describe(p) for p in below):
                        if other is not None and other.job == found.job:
                            candidates.setdefault(other.pid, other)
                continue
            try:
                below = proc.children(recursive=True)
            except psutil.Error:
                below = []
            ranks = [r for r in (describe(p) for p in below) if r is not None]
            if not ranks:
                raise LookupError(f"--pid {pid} ({tail(_cmdline(proc), 80) or 'no command line'}): neither a rank "
                                  "(RANK in its environment and PyTorch loaded) nor a launcher of ranks"
                                  + _spawned_hint(proc, below))
            candidates.update((r.pid, r) for r in ranks)
    else:
        me = os.getpid()
        for proc in psutil.process_iter():
            if proc.pid == me:
                continue
            found = describe(proc)
            if found is not None:
                candidates[proc.pid] = found
    ranks = []
    for pid, rank in candidates.items():
        try:
            parent = psutil.Process(pid).ppid()
        except psutil.Error:
            continue
        above = candidates.get(parent)
        if above is not None and above.job == rank.job and above.rank == rank.rank:
            above.children.append(pid)
        else:
            ranks.append(rank)
    for rank in ranks:  # grandchildren too (a worker's own subprocess)
        try:
            rank.children = [p.pid for p in psutil.Process(rank.pid).children(recursive=True)]
        except psutil.Error:
            pass
    return sorted(ranks, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))


def tail(text: str, most: int) -> str:
    """A command line shown in ``most`` characters: its start and its end (the script and its arguments tell two jobs
    apart), an ellipsis between."""
    if len(text) <= most:
        return text
    return text[:most // 2 - 1] + "\u2026" + text[-(most - most // 2):]


def _spawned_hint(proc, below: list) -> str:
    """A hint for ``torch.multiprocessing.spawn`` (and ``mp.Process``) jobs, whose ranks get their rank as an argument,
    not in their environment: their command lines are multiprocessing's own (``-c from multiprocessing.spawn import
    spawn_main``)."""
    spawned = [p for p in [proc, *below] if "multiprocessing.spawn" in _cmdline(p) or
               "multiprocessing.forkserver" in _cmdline(p)]
    if not spawned:
        return ""
    return (f"; {len(spawned)} process{'es' if len(spawned) != 1 else ''} here "
            f"{'were' if len(spawned) != 1 else 'was'} started by torch.multiprocessing.spawn (its ranks have no RANK "
            f"in their environment): read each with `py-spy dump --pid PID`, or start the job with torchrun, whose ranks "
            f"dsdoctor hang finds")


def jobs(ranks: list[RankProcess]) -> dict[tuple, list[RankProcess]]:
    """The ranks grouped by job (:data:`JOB_KEYS`' values)."""
    grouped: dict[tuple, list[RankProcess]] = {}
    for rank in ranks:
        grouped.setdefault(rank.job, []).append(rank)
    return grouped


def launcher_of(ranks: list[RankProcess]) -> dict | None:
    """The nearest ancestor of the ranks whose command line is a launcher's (:data:`LAUNCHER`): ``{"pid",
    "cmdline"}``, or None."""
    import psutil

    for rank in ranks:
        try:
            for parent in psutil.Process(rank.pid).parents():
                cmdline = _cmdline(parent)
                if LAUNCHER.search(cmdline):
                    return {"pid": parent.pid, "cmdline": cmdline}
        except psutil.Error:
            continue
    return None


def gone_children(launcher_pid: int) -> list[dict]:
    """The launcher's children that are zombies (exited, not yet reaped), with their exit status from
    ``/proc/PID/stat``'s field 52 (``exit_code``, in waitpid's form, Linux 3.5+): ``{"pid", "exit_code", "signal"}``."""
    import psutil

    gone = []
    try:
        children = psutil.Process(launcher_pid).children()
    except psutil.Error:
        return gone
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        status = _zombie_status(child.pid)
        gone.append({"pid": child.pid, "exit_code": None if status is None else (status >> 8) & 0xFF,
                     "signal": None if status is None else status & 0x7F or None})
    return gone


def running_children(pid: int, most: int = 4) -> list[dict]:
    """The live (not zombie) child processes of a process: ``[{"pid", "cmdline"}]`` (a rank that waits in wait4 for a
    ``subprocess.run`` of an evaluation, a conversion, a shell command)."""
    import psutil

    out = []
    try:
        for child in psutil.Process(pid).children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    out.append({"pid": child.pid, "cmdline": tail(_cmdline(child), 80)})
            except psutil.Error:
                continue
    except psutil.Error:
        return []
    return out[:most]


def common_parent(ranks: list[RankProcess]) -> int | None:
    """The parent PID every rank shares (a launcher dsdoctor does not know by name), or None (init's, or several)."""
    import psutil

    parents = set()
    for rank in ranks:
        try:
            parents.add(psutil.Process(rank.pid).ppid())
        except psutil.Error:
            return None
    return parents.pop() if len(parents) == 1 and 1 not in parents else None


def _zombie_status(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[49])  # field 52 of the whole line: 3 fields precede the ones after the name
    except (OSError, ValueError, IndexError):
        return None


def oom_kills(limit: int = 5) -> tuple[list[str], str | None]:
    """The kernel log's latest OOM-killer lines (``Killed process PID (python...)``), newest last, and why they could
    not be read (``dmesg`` refused: kernel.dmesg_restrict) or None."""
    import subprocess

    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5, errors="replace")
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"dmesg could not run ({exc.__class__.__name__})"
    if out.returncode != 0:
        return [], f"dmesg refused: {(out.stderr or '').strip()[:120] or 'exit ' + str(out.returncode)}"
    lines = [ln.strip() for ln in out.stdout.splitlines() if "Killed process" in ln or "oom-kill" in ln]
    return lines[-limit:], None


def activity(pid: int) -> dict | None:
    """Counters that grow while a process works and stand still while it is blocked, read from /proc without
    attaching: ``{"wakeups": the main thread's voluntary context switches (it blocked and was woken: each completed
    gloo collective, each short sleep of a training loop; none while it waits in a collective or spins in NCCL's
    wait), "syscalls": read and write calls of the whole process (/proc/PID/io syscr + syscw: gloo's socket traffic,
    a DataLoader's pipes, logging), "at": monotonic seconds}``; None when unreadable (gone, or another user's)."""
    import time

    try:
        with open(f"/proc/{pid}/task/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/io") as f:
            io = f.read()
        wakeups = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
        calls = sum(int(re.search(rf"^{key}:\s+(\d+)", io, re.M).group(1)) for key in ("syscr", "syscw"))
    except (OSError, AttributeError, ValueError):
        return None
    return {"wakeups": wakeups, "syscalls": calls, "at": time.monotonic()}


#: a rank whose main thread woke at least this often, while its process made at least this many read/write calls,
#: between two readings, moved (measured over 2 s on gloo ranks here: a rank waiting in all_reduce 0 and 0 a second, a
#: rank polling for a file in a sleep loop 20 and 0, a training loop 15 and 65; ``tests/test_hang.py``)
WAKEUPS_PER_S = 2.0
SYSCALLS_PER_S = 5.0


def moved(before: dict | None, after: dict | None) -> bool:
    """Whether a rank worked between two :func:`activity` readings: its main thread woke (at least once, and
    :data:`WAKEUPS_PER_S` over the time between them) and its process read or wrote (at least twice, and
    :data:`SYSCALLS_PER_S`). A rank blocked in a collective does neither; a loop that polls a file with sleeps wakes
    but reads and writes nothing."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return False
    seconds = max(after["at"] - before["at"], 0.0)
    return after["wakeups"] - before["wakeups"] >= max(1, WAKEUPS_PER_S * seconds) and \
        after["syscalls"] - before["syscalls"] >= max(2, SYSCALLS_PER_S * seconds)


def proc_state(pid: int) -> dict:
    """What /proc says of a process without attaching to it: ``{"status", "wchan" (the kernel function it sleeps
    in), "cpu_seconds"}``; ``{"status": "gone"}`` once it has exited."""
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            times = proc.cpu_times()
            state = {"status": proc.status(), "cpu_seconds": round(times.user + times.system, 2)}
    except psutil.Error:
        return {"status": "gone"}
    try:
        with open(f"/proc/{pid}/wchan") as f:
            state["wchan"] = f.read().strip() or None
    except OSError:
        state["wchan"] = None
    return state
