"""``--out``: where a smoke run writes, made safe to reuse.

- A directory that holds anything and no smoke marker is refused: it may be a real training output.
- The marker (``.dsdoctor-smoke``, JSON) lists the outputs smoke wrote there; a later run deletes only those, so a
  user's own ``checkpoint/`` under a name smoke uses is never deleted (the run refuses to write over it instead).
- The directory is locked for the run (``flock`` on the marker's lock file, released by the kernel however the process
  ends): a second smoke on the same ``--out`` is refused instead of mixing its files into the first's report.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

from dsdoctor.files import shown
from dsdoctor.report import DsdoctorError

# Written into --out by the first smoke run: a later run may clear its outputs only where it finds this.
MARKER = ".dsdoctor-smoke"
LOCK = ".dsdoctor-smoke.lock"
# What the trainer writes under --out; cleared before a run so that old results are never read back.
RUN_OUTPUTS = ("metrics", "errors", "adapter", "checkpoint", "base_model", "eval.jsonl", "summary.json",
               "run_env.json", "train.log", "smoke.png", "report.json")

#: --out directories this process holds locked: resolved path -> open lock file
_LOCKS: dict[str, int] = {}


def _written_before(out: Path) -> set[str]:
    """The outputs a previous run recorded in the marker; all of RUN_OUTPUTS for a marker of the old plain-text kind
    (written before the marker listed them)."""
    try:
        text = (out / MARKER).read_text(encoding="utf-8")
    except OSError:
        return set()
    try:
        listed = json.loads(text).get("outputs", [])
        return {name for name in listed if name in RUN_OUTPUTS}
    except (ValueError, AttributeError):
        return set(RUN_OUTPUTS)


def write_marker(out: Path, outputs) -> None:
    (out / MARKER).write_text(json.dumps({"written_by": "dsdoctor smoke: a later run clears these outputs here",
                                          "outputs": sorted(outputs)}) + "\n", encoding="utf-8")


def lock_out(out: Path) -> None:
    """Hold ``out``'s lock for the rest of this process. Raises DsdoctorError when another process holds it."""
    key = str(out)
    if key in _LOCKS:
        return
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
        except OSError:
            holder = "another process"
        os.close(fd)
        raise DsdoctorError(f"--out {shown(str(out))}: another dsdoctor smoke is running in it ({holder}); wait for "
                            f"it or choose another --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"PID {os.getpid()}".encode())
    _LOCKS[key] = fd


def release_out(out: Path) -> None:
    fd = _LOCKS.pop(str(out), None)
    if fd is not None:
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # closing the descriptor releases the flock


def prepare_out(out: Path) -> Path:
    """Create --out, lock it, and clear the outputs a previous smoke run wrote there. Returns the resolved path.

    Raises DsdoctorError: --out is a file; it holds anything and no smoke marker (a real training output, maybe); it
    holds one of smoke's output names that smoke did not write (the user's own ``checkpoint/``); another smoke runs
    in it."""
    out = Path(out).expanduser().resolve()
    try:
        if out.exists() and not out.is_dir():
            raise DsdoctorError(f"--out {shown(str(out))}: is a file, not a directory")
        if out.is_dir() and any(p.name != LOCK for p in out.iterdir()) and not (out / MARKER).exists():
            raise DsdoctorError(f"--out {shown(str(out))}: not empty and not made by dsdoctor smoke; choose a new "
                                f"directory (nothing in it was touched)")
        out.mkdir(parents=True, exist_ok=True)
        lock_out(out)
        ours = _written_before(out)
        foreign = [name for name in RUN_OUTPUTS if name not in ours and (out / name).exists()]
        if foreign:
            release_out(out)
            raise DsdoctorError(f"--out {shown(str(out))}: {', '.join(foreign)} there was not written by dsdoctor "
                                f"smoke; move it or choose another --out (nothing was touched)")
        write_marker(out, RUN_OUTPUTS)  # until the run ends, anything of these names is the run's
        for name in sorted(ours):  # only what a previous smoke run wrote
            target = out / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
        (out / "metrics").mkdir()
        (out / "errors").mkdir()
    except OSError as exc:
        raise DsdoctorError(f"--out {shown(str(out))}: {exc.strerror or exc}") from None
    return out


def finish_out(out: Path) -> None:
    """Record in the marker the outputs this run left, and release the directory."""
    try:
        write_marker(out, [name for name in RUN_OUTPUTS if (out / name).exists()])
    except OSError:
        pass
    release_out(out)
