"""The shared-memory segments DeepSpeed's CPU accelerator leaves in ``/dev/shm``, read without importing torch.

With the CPU accelerator and more than one rank, ``deepspeed.comm`` builds the ``shm_comm`` op and every rank creates
one segment for its all-reduce workspace (``deepspeed/ops/csrc/cpu/comm/shm.cpp``, ``shm_initialize``):
``shm_open("deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>")``, about 66 MB each (``struct
allreduce_workspace``: two 32 MiB buffers). ``shared_close``, the only call to ``shm_unlink``, is never called, so the
segments outlive the run: each CPU run of N ranks leaves N x 66 MB in RAM-backed ``/dev/shm`` until someone deletes
them or the machine reboots. Seen here: 272 of them, 18 GiB, filled the host's memory over a few days of CPU runs.

A segment no live process maps (``/proc/<pid>/maps`` names it) belongs to no run: deleting it frees its memory and
harms nothing, since the next run with the same address and port creates it again (``O_CREAT``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: ``SHM_BUFFER_NAME`` and the name's format in shm.cpp; DeepSpeed before 0.14.3 had no uid in it
PATTERN = re.compile(r"^deepspeed_allreduce_buffer_(?:(?P<uid>\d+)_)?(?P<addr>.+)_(?P<port>\d{1,5})_(?P<rank>\d+)$")


@dataclass(frozen=True)
class Segment:
    """One ``deepspeed_allreduce_buffer`` segment: ``size`` in bytes; ``mapped`` when a live process maps it (a run
    using it); ``owner`` the file's uid."""

    path: Path
    addr: str
    port: int
    rank: int
    size: int
    owner: int
    mapped: bool

    def to_dict(self) -> dict:
        return {"path": str(self.path), "addr": self.addr, "port": self.port, "rank": self.rank, "size": self.size,
                "owner": self.owner, "mapped": self.mapped}


def mapped_paths(proc: Path = Path("/proc")) -> set[str]:
    """Every ``/dev/shm/...`` file some process this user can read maps (the path column of ``/proc/<pid>/maps``).
    Processes of other users are unreadable (for a non-root user), so their segments count as mapped: never
    deleted, never called stale."""
    seen: set[str] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdecimal()]
    except OSError:
        return seen
    for pid in pids:
        try:
            with open(proc / pid / "maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    at = line.find("/dev/shm/")
                    if at >= 0:
                        seen.add(line[at:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            continue
    return seen


def deepspeed_segments(root: Path = Path("/dev/shm"), proc: Path = Path("/proc")) -> list[Segment]:
    """The DeepSpeed all-reduce segments under ``root``, sorted by (port, rank). A segment owned by another user
    counts as mapped unless this process runs as root (its maps cannot be read, so it is never called stale).
    An unreadable ``root`` gives []."""
    try:
        names = [n for n in os.listdir(root) if n.startswith("deepspeed_allreduce_buffer_")]
    except OSError:
        return []
    if not names:
        return []
    maps = mapped_paths(proc)
    euid = os.geteuid()
    out = []
    for name in names:
        match = PATTERN.match(name)
        if not match:
            continue
        path = root / name
        try:
            st = path.stat()
        except OSError:
            continue
        mine = euid == 0 or st.st_uid == euid
        out.append(Segment(path=path, addr=match["addr"], port=int(match["port"]), rank=int(match["rank"]),
                           size=st.st_size, owner=st.st_uid,
                           mapped=(not mine) or f"/dev/shm/{name}" in maps or str(path) in maps))
    return sorted(out, key=lambda s: (s.port, s.rank, s.addr))


def stale(segments: list[Segment]) -> list[Segment]:
    """The segments no live process maps."""
    return [s for s in segments if not s.mapped]


def remove_stale(addr: str | None = None, port: int | None = None, root: Path = Path("/dev/shm"),
                 proc: Path = Path("/proc")) -> list[Segment]:
    """Delete the stale segments (of one run when ``addr``/``port`` are given: the names hold them) and return those
    deleted. A segment that vanished meanwhile, or that this user may not delete, is skipped."""
    gone = []
    for segment in stale(deepspeed_segments(root, proc)):
        if (addr is not None and segment.addr != addr) or (port is not None and segment.port != port):
            continue
        try:
            segment.path.unlink()
        except OSError:
            continue
        gone.append(segment)
    return gone


def removal_command(segments: list[Segment]) -> str:
    """A shell line that deletes exactly ``segments`` (one brace list per address): ``rm -f /dev/shm/deepspeed_
    allreduce_buffer_0_127.0.0.1_{34373,41571}_*`` when every rank of those ports is in the list."""
    by_addr: dict[tuple[str, str], set[int]] = {}
    for s in segments:
        prefix = s.path.name[:s.path.name.rindex(f"_{s.addr}_")]
        by_addr.setdefault((str(s.path.parent), f"{prefix}_{s.addr}"), set()).add(s.port)
    parts = []
    for (parent, head), ports in sorted(by_addr.items()):
        listed = sorted(ports)
        brace = str(listed[0]) if len(listed) == 1 else "{" + ",".join(map(str, listed)) + "}"
        parts.append(f"{parent}/{head}_{brace}_*")
    return "rm -f " + " ".join(parts)
