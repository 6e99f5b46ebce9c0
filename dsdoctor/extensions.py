"""torch's JIT extension builds (the DeepSpeed ops: FusedAdam, CPUAdam, the CPU accelerator's shm comm op) and their
build locks, read without importing torch.

Where torch builds (``torch/utils/cpp_extension.py`` ``_get_build_directory``): ``$TORCH_EXTENSIONS_DIR/<op>`` when the
variable is set, else ``<user cache>/torch_extensions/py<MAJOR><MINOR>_<cpu|cuXYZ|rocmXY>/<op>``, the user cache being
``$XDG_CACHE_HOME`` or ``~/.cache`` (``torch/_appdirs.py`` ``user_cache_dir``).

How it locks (``_jit_compile`` with ``torch/utils/file_baton.py`` ``FileBaton``): the first process creates
``<build dir>/lock`` with ``O_CREAT | O_EXCL`` and keeps that descriptor open while it builds, then closes and deletes
it; every other process polls ``os.path.exists(lock)`` every 0.1 s, forever and silently. A builder killed by a signal
leaves the file: every later run waits on it. So a lock that no live process holds open, with no compiler working in
its directory, is stale.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: the compilers and build tools torch's JIT build runs in the build directory (ninja, then the C++/CUDA compilers)
BUILD_TOOLS = ("ninja", "c++", "g++", "gcc", "cc1plus", "cc", "clang++", "nvcc", "cicc", "ptxas", "ld", "collect2",
               "hipcc")


def default_root(env: dict | None = None) -> Path:
    """``<user cache>/torch_extensions`` as torch computes it when ``TORCH_EXTENSIONS_DIR`` is unset."""
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "torch_extensions"


def smoke_root(env: dict | None = None, prefix: str | None = None, torch_tag: str | None = None) -> Path | None:
    """The extensions directory dsdoctor's own ranks build in, one per Python environment: ``<user cache>/dsdoctor/
    torch_extensions/<env name>-<hash of sys.prefix and torch's version>``. None when the user set
    ``TORCH_EXTENSIONS_DIR`` (theirs is used as it is). Two virtual environments on one account then no longer
    rebuild one shared op after each other (each rebuild replaced the other's .so)."""
    env = os.environ if env is None else env
    if env.get("TORCH_EXTENSIONS_DIR"):
        return None
    prefix = os.path.realpath(prefix or sys.prefix)
    tag = torch_tag if torch_tag is not None else _torch_tag()
    digest = hashlib.sha1(f"{prefix}\0{tag}".encode()).hexdigest()[:10]
    cache = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(prefix).name)[:40] or "env"
    return Path(cache) / "dsdoctor" / "torch_extensions" / f"{name}-{digest}"


def _torch_tag() -> str:
    """torch's version and CUDA from ``torch/version.py`` read as a file (no import)."""
    from dsdoctor.files import installed_package_dir

    root = installed_package_dir("torch")
    if root is None:
        return "no-torch"
    try:
        return (root / "version.py").read_text(encoding="utf-8")[:2000]
    except OSError:
        return "torch"


def roots(env: dict | None = None) -> list[Path]:
    """Every extensions root a DeepSpeed run on this account may build in: ``TORCH_EXTENSIONS_DIR`` when set, else
    torch's default root and dsdoctor's per-environment roots."""
    env = os.environ if env is None else env
    if env.get("TORCH_EXTENSIONS_DIR"):
        return [Path(env["TORCH_EXTENSIONS_DIR"]).expanduser()]
    cache = Path(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"))
    return [default_root(env), cache / "dsdoctor" / "torch_extensions"]


@dataclass
class BuildLock:
    """One ``<build dir>/lock`` file and who is on it."""

    path: str
    op: str
    age_s: float
    inode: int
    #: PIDs that hold the lock file open (the builder)
    holders: list[int] = field(default_factory=list)
    #: PIDs of build tools (ninja, c++, nvcc) whose working directory is the build directory
    compilers: list[int] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        return not self.holders and not self.compilers

    def to_dict(self) -> dict:
        return {"path": self.path, "op": self.op, "age_s": round(self.age_s, 1), "holders": self.holders,
                "compilers": self.compilers, "stale": self.stale}


def lock_files(search: list[Path]) -> list[Path]:
    """The ``lock`` files under ``search`` roots, at the two depths torch uses (``<root>/<op>/lock`` and
    ``<root>/<py>_<device>/<op>/lock``)."""
    found = []
    for root in search:
        for pattern in ("*/lock", "*/*/lock"):
            try:
                found.extend(p for p in root.glob(pattern) if p.is_file())
            except OSError:
                continue
    return sorted(set(found))


def _pids() -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []


def open_by(paths: set[str], pids: list[int] | None = None) -> dict[str, list[int]]:
    """For each path in ``paths`` (resolved), the PIDs that hold it open, from ``/proc/<pid>/fd`` (the processes this
    user may inspect: their own, or all as root)."""
    holders: dict[str, list[int]] = {p: [] for p in paths}
    if not paths:
        return holders
    for pid in pids if pids is not None else _pids():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target in holders:
                holders[target].append(pid)
    return holders


def tools_in(directories: set[str], pids: list[int] | None = None) -> dict[str, list[int]]:
    """For each directory, the PIDs of build tools (:data:`BUILD_TOOLS`) whose working directory is inside it."""
    found: dict[str, list[int]] = {d: [] for d in directories}
    if not directories:
        return found
    for pid in pids if pids is not None else _pids():
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm not in BUILD_TOOLS:
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        for d in directories:
            if cwd == d or cwd.startswith(d + os.sep):
                found[d].append(pid)
    return found


def build_locks(search: list[Path] | None = None, now: float | None = None) -> list[BuildLock]:
    """Every build lock under ``search`` (default :func:`roots`), with its holders and the compilers working in its
    directory. Cost: one pass over ``/proc`` when a lock exists, nothing otherwise."""
    files = lock_files(roots() if search is None else search)
    if not files:
        return []
    now = time.time() if now is None else now
    resolved = {}
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        resolved[os.path.realpath(f)] = (f, st)
    pids = _pids()
    holders = open_by(set(resolved), pids)
    tools = tools_in({os.path.dirname(p) for p in resolved}, pids)
    return [BuildLock(path=str(f), op=f.parent.name, age_s=max(0.0, now - st.st_mtime), inode=st.st_ino,
                      holders=sorted(holders[real]), compilers=sorted(tools[os.path.dirname(real)]))
            for real, (f, st) in sorted(resolved.items())]


def remove_if_stale(lock: BuildLock) -> bool:
    """Delete ``lock``'s file when it is still the same file (inode) and still held by no process and no compiler.
    Returns True when it was removed. For the locks a run of dsdoctor's own ranks created and left when it was
    stopped; a lock of unknown origin is reported (ENV329), not removed."""
    try:
        if os.stat(lock.path).st_ino != lock.inode:
            return False
    except OSError:
        return False
    again = build_locks([Path(lock.path).parent.parent], )
    again = [b for b in again if b.path == lock.path and b.inode == lock.inode]
    if not again or not again[0].stale:
        return False
    try:
        os.unlink(lock.path)
    except OSError:
        return False
    return True
