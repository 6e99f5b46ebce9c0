"""A log's lines: split at newlines (a ``\\r`` progress bar kept as its last state), capped at :data:`LINE_CHARS`,
colours removed, rank prefixes recognised and set aside; the timestamp at a line's start (:func:`clock`), training
progress (:data:`PROGRESS`), and several files' lines merged in time order (:func:`merge`).

Rank prefixes: torchrun's ``[rank3]:`` and ``[default3]:`` (``--tee``, accelerate), srun's ``3:`` (``--label``),
pdsh's ``host:`` from the deepspeed multi-node launcher (only where a timestamp or a tag follows it).
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

#: colours and cursor moves (CSI) and terminal titles (OSC, ended by BEL or ST); bounded, so an unterminated
#: sequence costs its own length only
ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]|\x1b\][^\x07\x1b\n]{0,256}(?:\x07|\x1b\\)")
#: rank prefixes: torchrun --tee / accelerate ("[rank3]:", "[default3]:"), srun --label ("3: "), pdsh ("host: ");
#: a rank has at most 6 digits (a longer number is text, not a rank)
PREFIX = re.compile(r"^(?:\[(?:rank|default)(?P<r1>\d{1,6})\]:\s?|(?P<r2>\d{1,4}):\s|"
                    r"(?P<host>[A-Za-z][\w.-]{0,62}):\s)")
#: the bare rank label of srun --label and mpirun: "3: "
LABEL = re.compile(r"\d{1,4}: ")
#: what a line is matched on: at most this many characters (the head and the tail of a longer line)
LINE_CHARS = 8192


@dataclass
class Line:
    """One log line: its number (1-based, in its file), the rank it came from (None when unknown), its text without
    the prefix and colours (at most :data:`LINE_CHARS` characters), and the file it came from when several files are
    read (``source``: the name shown in evidence; None for one log)."""

    __slots__ = ("number", "rank", "text", "source")  # a million of them for a huge log: no __dict__ each
    number: int
    rank: int | None
    text: str
    source: str | None

    @property
    def at(self) -> str:
        """'line N' or 'FILE line N': where the line is, for evidence."""
        return f"{self.source} line {self.number}" if self.source else f"line {self.number}"


def where(line: Line) -> str:
    """'rank R: ' for a line whose rank is known, else '' (the start of evidence)."""
    return f"rank {line.rank}: " if line.rank is not None else ""


#: full-width punctuation (U+FF01-FF5E) as the ASCII a log printed: pastes by users of CJK input methods retype it
FULL_WIDTH = {cp: cp - 0xFEE0 for cp in (0xFF1A, 0xFF1B, 0xFF08, 0xFF09, 0xFF0C, 0xFF01, 0xFF1F)}


#: a line of rich's traceback box (``rich.traceback``, which accelerate, LLaMA-Factory and typer install):
#: ``│ <inner> │``, the box's top (``╭── Traceback (most recent call last) ──╮``) and bottom (``╰──╯``)
RICH_BOX = re.compile(r"^\s{0,4}[\u2502\u2503] ?(?P<inner>.*?)\s{0,200}[\u2502\u2503]\s{0,4}$")
RICH_TOP = re.compile(r"^\s{0,4}\u256d\u2500{1,300} ?Traceback \(most recent call last\) ?\u2500{1,300}\u256e")
RICH_EDGE = re.compile(r"^\s{0,4}[\u256d\u2570]\u2500{3,400}[\u256e\u256f]\s{0,4}$")
#: rich's frame line, ``/path/to/file.py:2364 in from_pretrained`` (the name may wrap onto the next box line)
RICH_FRAME = re.compile(r"^(?P<path>\S{1,500}\.py):(?P<line>\d{1,7}) in(?: (?P<func>\S{1,120}))?$")
#: rich's source line: an optional ``❱`` (the failing line), the line number, ``│``, the code with ``│`` indent guides
RICH_SOURCE = re.compile(r"^(?P<current>\u2771 ?)?\s{0,8}\d{1,7} \u2502(?P<code>.*)$")


def unbox(raws: list[str]) -> list[str]:
    """``raws`` with rich's traceback boxes turned into the lines Python's own traceback prints, one for one (line
    numbers kept): the box's top is ``Traceback (most recent call last):``; a frame line is ``  File "PATH", line N,
    in NAME`` (a name wrapped onto the next box line joined to it, that line left empty); the failing source line
    (``❱``) and the lines after it of the same frame (the rest of the statement, where a raise's message is) are the
    code, indented; the other source lines and the box's edges are left empty. Lines outside a box are unchanged."""
    out = list(raws)
    current = False  # after a frame's ❱ line, until the next frame
    joined_name = -1  # the line whose frame name was joined to the line before
    for i, raw in enumerate(raws):
        if i == joined_name:
            continue
        if RICH_TOP.match(raw):
            out[i] = "Traceback (most recent call last):"
            continue
        if RICH_EDGE.match(raw):
            out[i] = ""
            continue
        box = RICH_BOX.match(raw)
        if not box:
            continue
        inner = box.group("inner").strip()
        frame = RICH_FRAME.match(inner)
        if frame:
            func = frame.group("func")
            if func is None and i + 1 < len(raws):  # the name wrapped onto the next box line
                following = RICH_BOX.match(raws[i + 1])
                name = following.group("inner").strip() if following else ""
                if re.fullmatch(r"[A-Za-z_<][\w.<>]{0,119}", name):
                    func = name
                    out[i + 1], joined_name = "", i + 1
            out[i] = f'  File "{frame.group("path")}", line {frame.group("line")}, in {func or "?"}'
            current = False
            continue
        source = RICH_SOURCE.match(inner)
        if source:
            current = current or bool(source.group("current"))
            code = re.sub(r"\u2502 {0,3}", "", source.group("code")).strip()
            out[i] = "    " + code if current and code else ""
            continue
        out[i] = inner  # another line in a box (rich's locals, a wrapped message): its text
    return out


#: a Markdown quote's marker at a line's start (a log quoted in an issue's or an e-mail's reply): "> " or ">"
QUOTE = re.compile(r"^ {0,3}>(?: |$)")


def unquote(raws: list[str]) -> list[str]:
    """``raws`` without a Markdown quote's "> " when at least 80% of its non-blank lines have one (a quoted log: the
    reply's quoting is no part of what the run printed); else unchanged."""
    shown = [raw for raw in raws[:20000] if raw.strip()]
    if not shown or sum(1 for raw in shown if QUOTE.match(raw)) < 0.8 * len(shown):
        return raws
    return [QUOTE.sub("", raw, count=1) for raw in raws]


#: a whole rich traceback box on one line, as GitHub shows a paste outside a code block (its newlines became spaces):
#: ``╭── Traceback (most recent call last) ──╮ │ /p/x.py:201 in │ │ ❱ 201 │ train() │ ... ╰──╯ AttributeError: ...``
FLAT_BOX = re.compile(r"\u256d\u2500{1,300} ?Traceback \(most recent call last\) ?\u2500{1,300}\u256e(?P<body>.*?)"
                      r"\u2570\u2500{1,400}\u256f ?(?P<after>.*)$")


#: a Python traceback pasted on one line (an issue's title, a paste whose newlines became spaces): ``Traceback (most
#: recent call last): File "a.py", line 3, in <module> main() File "b.py", line 9, in main raise X ValueError: ...``
FLAT_TRACEBACK = re.compile(r"Traceback \(most recent call last\):? {1,4}(?=File \")")
FLAT_FRAME = re.compile(r"File \"(?P<path>[^\"\n]{1,500})\", line (?P<line>\d{1,7}), in (?P<func>\S{1,120}) ?")
#: the exception after the last frame's code: a class name ending in Error, Exception, ... and a colon
FLAT_EXCEPTION = re.compile(r"(?:^|\s)(?P<exc>(?:[A-Za-z_]\w{0,60}\.){0,8}[A-Z]\w{0,80}(?:Error|Exception|Interrupt|"
                            r"Exit|Warning|Failure)(?::\s|$))")


def _split_traceback(text: str) -> list[str]:
    """One flattened traceback's text as Python prints it: the header, each frame and its code line, the exception."""
    frames = list(FLAT_FRAME.finditer(text))
    out = ["Traceback (most recent call last):"]
    for k, frame in enumerate(frames):
        out.append(f'  File "{frame.group("path")}", line {frame.group("line")}, in {frame.group("func")}')
        end = frames[k + 1].start() if k + 1 < len(frames) else len(text)
        code = text[frame.end():end].strip()
        if k + 1 == len(frames):
            exc = FLAT_EXCEPTION.search(code)
            if exc:
                code, rest = code[:exc.start()].strip(), code[exc.start():].strip()
                if code:
                    out.append("    " + code)
                out.append(rest)
                continue
        if code:
            out.append("    " + code)
    return out


def unflatten(raws: list[str]) -> tuple[list[int], list[str]]:
    """(line numbers, lines): each Python traceback pasted on one line (:data:`FLAT_TRACEBACK`) split back into the
    lines Python prints, and each rich traceback box pasted on one line (:data:`FLAT_BOX`) into its box
    lines (``│ X │`` rows were joined as ``│ X │ │ Y │``), then the text after the box (the exception) on a line
    of its own; every piece keeps the number of the line it came from. Other lines are unchanged."""
    numbers, out = [], []
    for number, raw in enumerate(raws, 1):
        flat = FLAT_BOX.search(raw) if "\u2570" in raw and "Traceback" in raw else None
        python = FLAT_TRACEBACK.search(raw) if flat is None and "Traceback (most" in raw else None
        if python is not None:
            head = raw[:python.start()].rstrip()
            pieces = _split_traceback(raw[python.end():])
            if head and len(head) <= 60 and head.endswith((":", "]")):  # a rank or host prefix: on every line
                pieces = [f"{head} {piece}" for piece in pieces]
            elif head:
                pieces = [head] + pieces
            numbers += [number] * len(pieces)
            out += pieces
            continue
        if not flat:
            numbers.append(number)
            out.append(raw)
            continue
        head = raw[:flat.start()].strip()
        pieces = ([head] if head else []) + ["\u256d\u2500\u2500 Traceback (most recent call last) \u2500\u2500\u256e"]
        body = flat.group("body").strip()
        body = body[1:] if body.startswith("\u2502") else body
        body = body[:-1] if body.endswith("\u2502") else body
        pieces += [f"\u2502 {unit.strip()} \u2502" for unit in body.split("\u2502 \u2502") if unit.strip()]
        after = flat.group("after").strip()
        pieces += ["\u2570\u2500\u2500\u2500\u256f"] + ([after] if after else [])
        numbers += [number] * len(pieces)
        out += pieces
    return numbers, out


def read_lines(text: str, skipped: tuple[int, int] | None = None, rank: int | None = None,
               source: str | None = None) -> list[Line]:
    """``text`` split into :class:`Line` objects at newlines only (as ``grep -n`` numbers them; a ``\\r`` progress
    bar is one line, kept as its last state), colours and rank prefixes removed (a host prefix before a rank prefix,
    ``node0: [rank3]:``, too). ``skipped`` = (after line, count): that many lines were left out after that line (the
    middle of a huge log), and the numbers after it count them. ``rank``: the rank of lines without a rank prefix
    (a per-rank file's rank, from its name); ``source``: set on every line (several files). A line longer than
    :data:`LINE_CHARS` keeps its head and tail."""
    lines = []
    after, count = skipped or (0, 0)
    hosts: set[str] = set()  # pdsh host prefixes seen on lines that proved them (a timestamp after them)
    half = LINE_CHARS // 2
    raws = unquote(text.split("\n"))
    numbers = list(range(1, len(raws) + 1))
    if ("\u2570" in text and "\u2502" in text) or "Traceback (most recent call last): File" in text or \
            "Traceback (most recent call last) File" in text:
        numbers, raws = unflatten(raws)
    if "\u2502" in text or "\u2503" in text:
        raws = unbox(raws)
    # a bare "N: " prefix (srun --label, mpirun) is a rank only in a log with several such lines: one line that
    # starts so is a wrapped "file.py:6: UserWarning" or a numbered list
    labelled = sum(1 for raw in raws[:20000] if LABEL.match(raw)) >= 3
    for number, raw in zip(numbers, raws):
        if "\r" in raw:
            raw = raw.rstrip("\r")
            raw = raw.rsplit("\r", 1)[-1] or raw.replace("\r", "")
        if len(raw) > LINE_CHARS:
            raw = raw[:half] + " \u2026 " + raw[-half:]
        if "\x1b" in raw:
            raw = ANSI.sub("", raw)
        if not raw.isascii():  # a CJK input method's full-width colon after an exception name: 'AttributeError：'
            raw = raw.translate(FULL_WIDTH)
        line_rank = rank
        for _ in range(2):
            found = PREFIX.match(raw)
            host = found.group("host") if found else None
            if host and (host in hosts or _host_prefix(found, raw)):
                hosts.add(host)
            elif not (found and (found.group("r1") or (found.group("r2") and labelled))):
                break
            if found.group("r1") or found.group("r2"):
                line_rank = int(found.group("r1") or found.group("r2"))
            raw = raw[found.end():]
        lines.append(Line(number + (count if skipped and number > after else 0), line_rank, raw, source))
    if lines and not lines[-1].text:
        lines.pop()  # the final newline
    return lines


def _host_prefix(found: re.Match, raw: str) -> bool:
    """A pdsh ``host: `` prefix, not a Python ``ValueError: ...`` line or a ``key: value`` log line: hosts have no
    upper-case letters at the start and are followed by a timestamp or a bracketed tag, as DeepSpeed's launcher
    prints them."""
    host = found.group("host") or ""
    rest = raw[found.end():]
    return bool(host) and host[0].islower() and not host.endswith(("Error", "Exception")) and \
        bool(HOST_FOLLOWER.match(rest))


#: what follows a pdsh host prefix: a timestamp, a rank prefix, a traceback or an exception line
HOST_FOLLOWER = re.compile(r"\[\d{4}-\d\d-\d\d|\[(?:rank|default)\d{1,6}\]|\d{4}-\d\d-\d\d|Traceback|"
                           r"\w{1,80}?(?:Error|Exception):")


#: Lines that show a rank still training after an error (a handled exception): progress bars, step logs, losses.
PROGRESS = re.compile(r"(?<!\d)\d{1,3}%\||'loss': \d|\bstep[= ]\d|(?<![\d.])\d{1,8}(?:\.\d{1,4})?(?:it/s|s/it)\]")
#: a timestamp: DeepSpeed's and Python logging's '2024-01-01 10:00:00,000', glog's (torch's C++ and torchrun's)
#: 'W1201 08:39:16.920000', whose month torch does not pad: 'E314 12:30:15.552107' is March 14
CLOCK = re.compile(r"(?<!\d)(?:\d{4}-(?P<mo>\d\d)-(?P<d>\d\d)[ T]|[IWEF](?P<gmo>1[0-2]|0?[1-9])(?P<gd>[0-3]\d) )"
                   r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?")


def clock(text: str) -> float | None:
    """Seconds since the start of the month of a timestamp at the start of ``text`` (its first 80 characters), or
    None: enough to order lines and to measure a silence (no year in glog's format)."""
    found = CLOCK.search(text[:80])
    if not found:
        return None
    g = found.groupdict()
    day = int(g["d"] or g["gd"]) + 31 * int(g["mo"] or g["gmo"])
    return day * 86400 + int(g["h"]) * 3600 + int(g["mi"]) * 60 + int(g["s"]) + float("0." + (g["f"] or "0"))


def merge(streams: list[list[Line]]) -> list[Line]:
    """The lines of several files in one list: in the order of their timestamps when every file has one (lines
    without one take the latest before them, or the first after them at a file's start; a file never goes back in
    time; equal times keep each file's lines together), else one file after the other in rank order."""
    if len(streams) == 1:
        return streams[0]
    keyed = []
    for lines in streams:
        times = []
        last = None
        for line in lines[:200000]:
            last = clock(line.text)
            if last is not None:
                break
        if last is None:
            keyed = None
            break
        for line in lines:
            now = clock(line.text)
            if now is not None and now > last:  # never back in time within a file (lines of other formats)
                last = now
            times.append(last)
        keyed.append(times)
    if keyed is None:
        order = sorted(range(len(streams)), key=lambda i: (streams[i][0].rank is None if streams[i] else True,
                                                          streams[i][0].rank or 0 if streams[i] else 0, i))
        return [line for i in order for line in streams[i]]
    def keys(i: int):  # (time, file, line number): never compares two lines
        return ((t, i, n, line) for n, (t, line) in enumerate(zip(keyed[i], streams[i])))

    return [item[3] for item in heapq.merge(*(keys(i) for i in range(len(streams))))]


#: A Python exception's (dotted) name, as a traceback's last line starts.
EXCEPTION_NAME = (r"(?:[A-Za-z_]\w{0,80}\.){0,12}"
                  r"(?P<exc>(?:[A-Z]\w{0,80}?)?(?:Error|Exception)|StopIteration|SystemExit)")
#: The last line of a Python traceback: an exception's (dotted) name and its message.
PYTHON_ERROR = re.compile(EXCEPTION_NAME + r"(?::\s*(?P<message>.*))?$")
#: a line shorter than this is no wrapped message's first part, nor a middle one (terminals and editors wrap at 80
#: columns or more; a rank prefix takes some of them)
WRAP_MIN = 30
#: continuation lines of one wrapped message joined at most
WRAP_LINES = 4
#: a log record's own start (a timestamp, glog's "E0512 10:45:12"): no continuation
CLOCK_START = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:|[IWEF]\d{4} \d\d:\d\d:")


def continued(lines: list[Line], index: int, most: int = WRAP_LINES) -> list[str]:
    """``lines[index]``'s text and those of the lines that continue it (at most ``most``): a message the terminal
    wrapped at its width, whose continuations carry no rank prefix of another rank, no indentation and are no new
    block (a traceback, a frame, a bracketed or timestamped log record, an exception line); each line before a
    continuation is at least :data:`WRAP_MIN` characters (a wrapped line is full). One part when nothing continues
    it."""
    line = lines[index]
    parts = [line.text]
    for after_line in lines[index + 1:index + 1 + most]:
        after = after_line.text
        if after_line.rank not in (line.rank, None) or not after or after[:2].isspace() or \
                after.lstrip().startswith(("Traceback", "File \"", "[")) or PYTHON_ERROR.match(after) or \
                CLOCK_START.match(after) or len(parts[-1]) < WRAP_MIN:
            break
        parts.append(after)
    return parts


def joined(parts: list[str]) -> list[str]:
    """The texts a wrapped message may have been: its first 2, 3, ... parts joined as a terminal wraps (no space
    added) and as an editor wraps at a space (one added)."""
    return [glue.join(parts[:n]) for n in range(2, len(parts) + 1) for glue in ("", " ")]

