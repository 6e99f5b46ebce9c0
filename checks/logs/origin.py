"""Where a failure comes from when no rule names it: the innermost frame of the traceback the log holds (the package,
its file and function, the line of code), and a library's own warning in a log that shows no failure (LOG811).

A pasted log is often only the tail of a traceback: ``File ".../site-packages/deepspeed/runtime/zero/stage3.py", line
525, in defragment`` and ``assert len(set(t.dtype for t in tensors)) == 1``, with no exception line. The frame still
says whose code stopped the run; the package is read from the path as Python's import system lays it out
(``site-packages/<package>/...``, or a source checkout's ``src/<package>/...`` of a package dsdoctor's message
catalogue knows).
"""

from __future__ import annotations

import re

from .lines import Line

#: a traceback's frame line (``traceback.format_list``: ``  File "PATH", line N, in NAME``)
FRAME = re.compile(r"File \"(?P<path>[^\"\n]{1,500})\", line (?P<line>\d{1,7}), in (?P<func>[^\s]{1,120})")
#: an installed package's file: ``.../site-packages/deepspeed/runtime/engine.py``
SITE = re.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z_]\w{0,60})/(?P<file>.{1,400})$")
#: how far back from a failure's line its traceback's frames are looked for
FRAME_LOOKBACK = 400


def _package(path: str) -> tuple[str | None, str]:
    """(package, file inside it) of a frame's path; (None, the path's last component) for a script of the user."""
    from dsdoctor.messages.catalogue import PACKAGES

    path = path.replace("\\", "/")
    found = SITE.search(path)
    if found:
        return found.group("pkg"), found.group("file")
    parts = path.split("/")
    for i in range(len(parts) - 2, -1, -1):  # a source checkout (pip install -e): the nearest known package folder
        if parts[i] in PACKAGES:
            return parts[i], "/".join(parts[i + 1:])
    return None, parts[-1]


def frame_origin(lines: list[Line], before: int | None = None, rank: int | None = None) -> dict | None:
    """The innermost frame of the traceback that ends just before ``lines[before]`` (its exception line; only the
    lines of ``rank`` and those without one count when it is given), or, with ``before`` None, of the first traceback
    in the log: ``{"package": name or None (the user's own script), "file":
    path inside the package, "function", "line": int, "code": the quoted source line or "", "from": "traceback"}``;
    None when there is no frame."""
    start = 0 if before is None else max(0, before - FRAME_LOOKBACK)
    stop = len(lines) if before is None else before
    last = None
    for index in range(start, stop):
        if rank is not None and lines[index].rank not in (rank, None):
            continue
        text = lines[index].text
        found = FRAME.search(text) if "File \"" in text else None
        if found:
            last = (index, found)
        elif last is not None and before is None and text.strip() and not text[:1].isspace() \
                and index > last[0] + 1:
            break  # the first traceback's block has ended
    if last is None:
        return None
    index, found = last
    code = lines[index + 1].text.strip() if index + 1 < len(lines) and not FRAME.search(lines[index + 1].text) \
        and lines[index + 1].text[:1].isspace() else ""
    package, file = _package(found.group("path"))
    return {"package": package, "file": file, "function": found.group("func"), "line": int(found.group("line")),
            "code": code[:200], "from": "traceback"}


def describe_frame(origin: dict) -> str:
    """'raised in DeepSpeed's runtime/zero/stage3.py (defragment), line 525: `assert ...`' for evidence."""
    from dsdoctor.messages.catalogue import NAMES

    who = f"{NAMES.get(origin['package'], origin['package'])}'s " if origin["package"] else "the script "
    code = f": `{origin['code']}`" if origin["code"] else ""
    return (f"stopped in {who}{origin['file']} ({origin['function']}), line {origin['line']}{code} (the traceback's "
            f"innermost frame)")


def catalogue_origin(entry) -> dict:
    """The structured origin of a catalogue template (:class:`dsdoctor.messages.catalogue.Entry`)."""
    return {"package": entry.package, "file": entry.file, "function": entry.function or None, "line": entry.line,
            "versions": entry.version_span(), "from": "catalogue"}


#: warnings that announce a change, not a fault of the run
DEPRECATION = ("DeprecationWarning", "FutureWarning", "PendingDeprecationWarning")
#: catalogue lookups for warnings per log
MAX_WARNING_LOOKUPS = 40


def library_warning(lines: list[Line]):
    """The first line of ``lines`` (of its last 200, and of those that say they warn) that is a library's own warning
    as a whole (a catalogue template logged, warned or printed; not a deprecation), as (line, Found), or None."""
    from dsdoctor.messages.catalogue import lookup

    tail = set(range(max(0, len(lines) - 200), len(lines)))
    chosen = [i for i in range(len(lines)) if i in tail or "warn" in lines[i].text.lower()]
    for index in chosen[:MAX_WARNING_LOOKUPS]:
        text = lines[index].text
        if len(text.strip()) < 12:
            continue
        found = lookup(text[:2000])
        if found is None or not found.whole or found.entry.kind not in ("log", "warn", "print", "nccl-warn"):
            continue
        if found.entry.exception in DEPRECATION or "deprecat" in found.entry.text.lower():
            continue
        return lines[index], found
    return None
