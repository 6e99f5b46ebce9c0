"""Reading what a user points dsdoctor at, and writing what it produces, safely.

Every input is read through :func:`read_input`: only a regular file (or stdin), opened non-blocking (a FIFO or
``/proc/kmsg`` never blocks the command), and never more than the caller's cap (``/dev/zero`` cannot exhaust memory).
Every output file is written through :func:`write_output`: to a temporary file in the same directory, then renamed,
so that a full disk or an interrupt never leaves a truncated or 0-byte file where the user expects a report.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from pathlib import Path

from dsdoctor.report import DsdoctorError

#: the longest path shown in an error line; a longer one is cut in the middle
SHOWN_PATH_CHARS = 120
#: where the kernel's pseudo-files live: never an input
KERNEL_FILES = ("/proc/", "/sys/")


def shown(path: str) -> str:
    """``path`` for a one-line message: control characters escaped, a very long path cut in the middle."""
    from dsdoctor.cli import one_line

    text = one_line(str(path))
    if len(text) > SHOWN_PATH_CHARS:
        half = SHOWN_PATH_CHARS // 2 - 2
        text = f"{text[:half]}...{text[-half:]}"
    return text


def _describe_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_input(path: str, option: str, max_bytes: int, *, stdin_ok: bool = False,
               what: str = "file") -> bytes:
    """The bytes of the input file ``path`` (``-`` for stdin when ``stdin_ok``), at most ``max_bytes``.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor (no race with a rename), so a FIFO,
    a device or a socket is refused at once, and a ``/proc`` file that would block (``/proc/kmsg``) fails with
    EAGAIN instead of hanging.

    Raises:
        DsdoctorError: one line naming ``option`` and the path: no such file, not a regular file, unreadable,
            a path too long, or larger than ``max_bytes`` (``what`` names the kind of file in that message).
    """
    name = shown(path)
    if path == "-":
        if not stdin_ok:
            raise DsdoctorError(f"{option} -: stdin is not accepted here; give a file")
        try:
            mode = os.fstat(sys.stdin.fileno()).st_mode
        except (OSError, ValueError, AttributeError):
            mode = None
        data = _read_capped(sys.stdin.buffer, max_bytes)
        if data is None:
            raise DsdoctorError(f"{option} -: more than {max_bytes / 2 ** 20:.0f} MiB on stdin; a {what} is "
                                f"smaller than that" + (" (is it /dev/zero?)" if mode and stat.S_ISCHR(mode) else ""))
        return data
    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise DsdoctorError(f"{option} {name}: {_why(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            hint = ""
            if what == "log" and stat.S_ISDIR(mode):
                hint = "; give the log file (e.g. train.log)"
            elif what == "log" and stat.S_ISFIFO(mode):
                hint = "; pipe it in instead: ... | dsdoctor explain -"
            raise DsdoctorError(f"{option} {name}: {_describe_kind(mode)}, not a regular file{hint}")
        real = os.path.realpath(os.path.expanduser(path))
        if real.startswith(KERNEL_FILES):
            # procfs and sysfs files look regular (size 0) but are the kernel's: /proc/kmsg blocks, and as root
            # reading it drains the kernel log from its real readers
            raise DsdoctorError(f"{option} {name}: a kernel file ({real.split(os.sep)[1]}), not a {what}")
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            data = _read_capped(f, max_bytes)
    except OSError as exc:
        raise DsdoctorError(f"{option} {name}: cannot read it ({_why(exc)})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if data is None:
        raise DsdoctorError(f"{option} {name}: larger than {_size(max_bytes)}; a {what} is much smaller than that")
    return data


def _read_capped(f, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` from ``f``; None when there is more."""
    chunks, total = [], 0
    while True:
        chunk = f.read(min(1 << 20, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            return None


def _size(n: int) -> str:
    return f"{n / 2 ** 20:.0f} MiB" if n >= 2 ** 20 else f"{n / 1024:.0f} KiB"


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ENAMETOOLONG:
        return "the path is too long"
    if exc.errno == errno.EAGAIN:
        return "it would block (a device or kernel file, not a file to read)"
    return exc.strerror or str(exc)


def write_output(path: str, text: str, option: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same directory, fsynced, then renamed
    over ``path``. On any failure the temporary file is removed and ``path`` is left as it was. A path that exists and
    is not a regular file (``/dev/stdout``, a pipe) is written in place.

    Raises:
        DsdoctorError: the directory is missing or not writable, the disk is full, the path is too long.
    """
    target = Path(path).expanduser()
    name = shown(path)
    try:
        existing = os.stat(target)
    except OSError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        # /dev/stdout, /dev/null, a pipe (``--json >(jq .)``): written in place. A rename would replace the device
        # node itself with a regular file (as root, /dev/full became one in a test before this check).
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            raise DsdoctorError(f"cannot write {option} {name}: {_why(exc)}") from None
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=target.parent or ".")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():  # keep the mode of the file being replaced
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise DsdoctorError(f"cannot write {option} {name}: {_why(exc)}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when ``a`` and ``b`` name one existing file: the same path, a symlink to it, or a hard link."""
    try:
        return os.path.samefile(os.path.expanduser(a), os.path.expanduser(b))
    except (OSError, ValueError):
        return False


def installed_package_dir(package: str) -> Path | None:
    """The directory of the installed top-level ``package`` (``site-packages/deepspeed``), found the way ``import``
    would find it but without importing it (``importlib.util.find_spec`` of a top-level name runs none of its code);
    None when it is not installed, or is a single module."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def files_of(path: str) -> list[Path]:
    """``path`` itself when it is a file; the files directly inside it when it is a directory (a model directory's
    config.json and tokenizer files); nothing when it does not exist."""
    p = Path(path).expanduser()
    try:
        if p.is_dir():
            return [c for c in p.iterdir() if c.is_file()][:10000]
        if p.exists():
            return [p]
    except OSError:
        pass
    return []
