"""A rank's Python stacks through py-spy, and where its main thread is: in a collective (which one, called from
where), waiting for its DataLoader, or elsewhere.

``py-spy dump --pid PID --json`` (py-spy 0.3+) prints each thread as ``{"thread_name", "os_thread_id", "frames":
[{"name", "filename", "short_filename", "line"}, ...]}``, innermost frame first. It pauses the process for the few
milliseconds the read takes and changes nothing in it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

#: Python's standard library (a queue's wait, threading's Event.wait): where a wait is, not why; the frame rule
#: explain's origins use
from dsdoctor.checks.logs.origin import STDLIB

#: a torch.distributed file whose frames are the collective itself (the API function, its logging wrapper, DeepSpeed's
#: and accelerate's thin wrappers), not the code that called it
COMM_FILES = re.compile(r"torch/distributed/(?:distributed_c10d|c10d_logger|rendezvous|utils)\.py$|"
                        r"torch/distributed/algorithms/|deepspeed/comm/|accelerate/utils/operations\.py$")
#: the collective API's own file: its outermost frame there names the collective the caller asked for
C10D = re.compile(r"torch/distributed/distributed_c10d\.py$")
DATALOADER = re.compile(r"torch/utils/data/")
#: torch's own files: a DataLoader worker's loop, not what it waits on
TORCH = re.compile(r"/torch/")
#: py-spy's words when the kernel refuses ptrace ("Permission Denied: Try running again with elevated permissions",
#: "Operation not permitted (os error 1)"), compared in lower case
PTRACE_HINTS = ("permission denied", "operation not permitted", "ptrace", "eperm")


def py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this interpreter (a venv not activated)."""
    found = shutil.which("py-spy")
    if found:
        return found
    # a venv not activated, or one made with --system-site-packages over a base that has py-spy (pdsh, cron)
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable),
                   os.path.dirname(os.path.realpath(sys.executable)), os.path.join(sys.base_prefix, "bin")):
        beside = os.path.join(folder or "", "py-spy")
        if folder and os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    try:  # where pip put the installed wheel's binary, wherever that is
        import importlib.metadata

        for file in importlib.metadata.distribution("py-spy").files or []:
            if file.name == "py-spy" and os.access(str(file.locate()), os.X_OK):
                return str(file.locate())
    except Exception:  # noqa: BLE001 - not installed, or metadata without a file list
        pass
    return None


def dump(pid: int, *, native: bool = False, timeout: float = 10.0,
         nonblocking: bool = False) -> tuple[list[dict] | None, str | None]:
    """Every thread's frames of process ``pid``: ``(threads, None)``, or ``(None, why not)``: py-spy missing,
    ptrace refused (``"ptrace refused: ..."``), the process gone, a timeout. Never raises. ``nonblocking``: read
    without pausing the process (``py-spy dump --nonblocking``; a frame may be torn now and then): the samples that
    only compare positions, so that reading them does not wake the rank's threads, which /proc's counters would
    count."""
    exe = py_spy()
    if exe is None:
        return None, "py-spy is not installed (pip install py-spy)"
    command = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else []) + \
        (["--nonblocking"] if nonblocking and not native else [])
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"py-spy dump timed out after {timeout:g} s"
    except OSError as exc:
        return None, f"py-spy could not run: {exc.strerror or exc}"
    if out.returncode != 0:
        text = (out.stderr or out.stdout or "").split("Stack backtrace:")[0]  # not py-spy's own Rust backtrace
        message = " ".join(text.split())[:300] or f"exit {out.returncode}"
        if any(hint in message.lower() for hint in PTRACE_HINTS):
            return None, f"ptrace refused: {message}"
        return None, message
    try:
        threads = json.loads(out.stdout)
    except ValueError:
        return None, "py-spy printed no JSON: " + " ".join(out.stdout.split())[:200]
    if not isinstance(threads, list):
        return None, "py-spy printed no thread list"
    return [{"thread_name": t.get("thread_name"), "os_thread_id": t.get("os_thread_id"),
             "frames": [{"name": f.get("name"), "file": f.get("filename") or "", "short": f.get("short_filename")
                         or "", "line": f.get("line")} for f in t.get("frames") or [] if isinstance(f, dict)]}
            for t in threads if isinstance(t, dict)], None


def main_thread(threads: list[dict]) -> dict | None:
    """The thread that runs the training loop: ``MainThread``, else the first thread py-spy lists."""
    for thread in threads:
        if thread.get("thread_name") == "MainThread":
            return thread
    return threads[0] if threads else None


def where(frame: dict | None) -> str:
    """``function at file:line`` of a frame (the file as py-spy shortens it: the path inside its package)."""
    if not frame:
        return "?"
    return f"{frame['name']} at {frame.get('short') or os.path.basename(frame['file'])}:{frame['line']}"


def _caller(frames: list[dict], start: int, skip: re.Pattern) -> dict | None:
    for frame in frames[start:]:
        if not skip.search(frame["file"]) and not STDLIB.search(frame["file"]):
            return frame
    return None


def own_frame(frames: list[dict]) -> dict | None:
    """The innermost frame of the process's own code, outside torch and Python's standard library (a DataLoader
    worker's dataset ``__getitem__``); the innermost frame when there is none."""
    return _caller(frames, 0, TORCH) or (frames[0] if frames else None)


def position(frames: list[dict]) -> dict:
    """Where a main thread is, from its frames (innermost first):

    - ``{"state": "collective", "op": the torch.distributed API function called (the outermost frame in
      distributed_c10d.py: all_gather_object, not the all_gather it calls), "caller": the first frame outside
      torch.distributed and the communication wrappers}``;
    - ``{"state": "dataloader", "caller": the frame that asked for the batch}``;
    - ``{"state": "elsewhere", "at": the innermost frame, "caller": the innermost frame outside Python's standard
      library}``;
    - ``{"state": "unknown"}`` with no frames.
    """
    if not frames:
        return {"state": "unknown"}
    python = [f for f in frames if f["file"].endswith(".py")]
    frames = python or frames  # --native's C frames (libc.so.6:0) say less than the Python line that called them
    c10d = [i for i, f in enumerate(frames) if C10D.search(f["file"])]
    if c10d:
        outer = c10d[-1]
        return {"state": "collective", "op": frames[outer]["name"],
                "caller": _caller(frames, outer + 1, COMM_FILES)}
    loader = [i for i, f in enumerate(frames) if DATALOADER.search(f["file"])]
    if loader:
        return {"state": "dataloader", "caller": _caller(frames, loader[-1] + 1, DATALOADER)}
    return {"state": "elsewhere", "at": frames[0],
            "caller": next((f for f in frames if not STDLIB.search(f["file"])), frames[0])}


def signature(frames: list[dict]) -> tuple:
    """What must stay the same for a thread to be standing still: its frames' (file, function, line)."""
    return tuple((f["file"], f["name"], f["line"]) for f in frames)


#: ``py-spy dump``'s text, as pasted into a log: ``Process 4011: python train.py --local_rank=0``, ``Thread 4011
#: (idle): "MainThread"``, then one frame a line, ``    all_reduce (torch/distributed/distributed_c10d.py:3252)``
PROCESS_LINE = re.compile(r"^Process (?P<pid>\d{1,10}): (?P<cmd>.{0,500})$")
THREAD_LINE = re.compile(r"^Thread (?P<tid>0x[0-9A-Fa-f]{1,16}|\d{1,10}) \((?P<state>[\w,+ -]{1,40})\)"
                         r"(?:: \"(?P<name>[^\"]{0,200})\")?")
FRAME_LINE = re.compile(r"^\s{2,12}(?P<name>[^\s(][^()]{0,200}?) \((?P<file>[^():]{1,400}):(?P<line>\d{1,7})\)\s*$")
LOCAL_RANK = re.compile(r"--local[_-]rank[= ](?P<rank>\d{1,6})")


def parse_dumps(lines) -> list[dict]:
    """The processes of ``py-spy dump`` texts pasted into a log (``lines``: objects with ``text`` and ``rank``, as
    :func:`dsdoctor.checks.logs.read_lines` makes them): ``[{"pid", "rank" (the line's rank prefix, else the
    command line's --local_rank, else None), "cmdline", "threads": [{"thread_name", "frames"}]}]``, in order."""
    processes: list[dict] = []
    thread = None
    for line in lines:
        text = line.text.rstrip()
        found = PROCESS_LINE.match(text)
        if found:
            rank = line.rank
            if rank is None:
                local = LOCAL_RANK.search(found.group("cmd"))
                rank = int(local.group("rank")) if local else None
            processes.append({"pid": int(found.group("pid")), "rank": rank, "cmdline": found.group("cmd"),
                              "threads": []})
            thread = None
            continue
        found = THREAD_LINE.match(text)
        if found:
            if not processes:  # a dump pasted without its Process line
                processes.append({"pid": 0, "rank": line.rank, "cmdline": "", "threads": []})
            thread = {"thread_name": found.group("name") or "", "frames": []}
            processes[-1]["threads"].append(thread)
            continue
        found = FRAME_LINE.match(text) if thread is not None else None
        if found:
            thread["frames"].append({"name": found.group("name"), "file": found.group("file"),
                                     "short": found.group("file"), "line": int(found.group("line"))})
        elif thread is not None and text and not text.startswith((" ", "\t")):
            thread = None  # the dump has ended
    return [p for p in processes if any(t["frames"] for t in p["threads"])]
