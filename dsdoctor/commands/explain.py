"""``dsdoctor explain LOG...``: from a failed run's log to the pitfall and its fix.

Reads the log of a ``deepspeed``, ``torchrun`` or ``accelerate launch`` run (or the HF Trainer's), with ranks
interleaved, rank prefixes and colours, from a file or stdin (``deepspeed train.py 2>&1 | dsdoctor explain -``), or
one file per rank (``deepspeed --enable_each_rank_log DIR`` then ``dsdoctor explain DIR/*.log``: each file's rank from
its name, ``..._rank3.log``, ``node1-rank3.txt``, torchrun's ``--log-dir`` ``.../3/stdout.log``, or its lines'
prefixes); finds the first real failure (:mod:`dsdoctor.checks.logs`) and names it with the rule ID of the preflight
check that would have caught it. Exit 1 when a failure is recognised, 0 when none is.

Input is read safely: only regular files (FIFOs, devices, sockets and blocking kernel files refused at once, through
:mod:`dsdoctor.files`), stdin streamed; of a huge log only its head and tail are kept (the middle's lines are counted,
so line numbers stay the file's). A dsdoctor report (smoke's table piped in with ``2>&1``, any command's Markdown or
JSON) is recognised and answered with the path of the run's own log.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
import sys
from collections import deque
from dataclasses import replace
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report

#: Logs larger than this are read as their head and tail (the failure is near the end; start-up lines come from the
#: head); per file.
MAX_BYTES = 64 * 2 ** 20
HEAD_BYTES = 2 * 2 ** 20
#: several files share this much (each at most MAX_BYTES, at least MIN_FILE_BYTES), and at most MAX_FILES of them
MAX_TOTAL_BYTES = 256 * 2 ** 20
MIN_FILE_BYTES = 4 * 2 ** 20
MAX_FILES = 1024
#: what is streamed through to count a huge log's lines: a larger file is refused (its size is known before reading),
#: more on stdin stops the read
MAX_FILE_READ_BYTES = 16 * 2 ** 30
MAX_STDIN_READ_BYTES = 4 * 2 ** 30
#: lines kept of a log (its first HEAD_LINES and its last): 64 MiB of empty lines would otherwise be 64 million
#: line objects
MAX_LINES = 1_000_000
HEAD_LINES = 50_000
#: NUL bytes skipped at a log's start (a log cut while it was written); more is binary data (/dev/zero)
MAX_LEADING_NUL_BYTES = 64 * 2 ** 20
CHUNK = 1 << 20


def _size(n: int) -> str:
    return f"{n / 2 ** 30:.0f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MiB"


def _chunks_of(f, limit: int, name: str):
    """Chunks of the binary file ``f`` until EOF; DsdoctorError after ``limit`` bytes."""
    total = 0
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return
        total += len(chunk)
        if total > limit:
            raise DsdoctorError(f"{name}: more than {_size(limit)}; give the log's last part "
                                f"(`tail -c 64M LOG | dsdoctor explain -`)")
        yield chunk


def _text_chunks(raw, name: str):
    """UTF-8 chunks of the raw chunks ``raw``: leading NUL bytes dropped, UTF-16 (a byte-order mark, PowerShell's
    ``>``; or every other byte NUL) decoded. Raises DsdoctorError for empty input and binary data (NUL bytes or mostly
    non-text in its first 8 KiB)."""
    raw = iter(raw)
    first, skipped_nul = b"", 0
    for chunk in raw:  # the leading NULs, then at least 8 KiB to decide on the encoding
        if not first:
            stripped = chunk.lstrip(b"\x00")
            skipped_nul += len(chunk) - len(stripped)
            if skipped_nul > MAX_LEADING_NUL_BYTES:
                raise DsdoctorError(f"{name} is binary data (NUL bytes), not a text log")
            chunk = stripped
        first += chunk
        if len(first) >= 8192:
            break
    if first.startswith((b"\xff\xfe", b"\xfe\xff")):
        decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
    elif len(first) >= 64 and first[1:4096:2].count(0) > 0.9 * len(first[1:4096:2]) and not first[0:4096:2].count(0):
        decoder = codecs.getincrementaldecoder("utf-16-le")(errors="replace")  # UTF-16 without a byte-order mark
    else:
        decoder = None

    def converted():
        for chunk in [first] if first else []:
            yield chunk
        for chunk in raw:
            yield chunk

    stream = converted() if decoder is None else (decoder.decode(c).encode("utf-8") for c in converted())
    head = next(stream, b"")
    while len(head) < 8192:
        more = next(stream, None)
        if more is None:
            break
        head += more
    if decoder is not None:
        head = head.lstrip(b"\x00")
    if not head.strip():
        raise DsdoctorError(f"{name} is empty: nothing to explain")
    sample = head[:8192]
    text_sample = sample.replace(b"\x00", b"")
    printable = sum(32 <= b < 127 or b in (9, 10, 13, 27) or b >= 128 for b in text_sample)
    if sample.count(b"\x00") > max(16, len(sample) // 100) or printable < 0.9 * len(text_sample):
        raise DsdoctorError(f"{name} is binary data, not a text log")
    # a few NUL bytes in a text log (the padding a crash leaves where the file was being written) are dropped
    yield head.replace(b"\x00", b"")
    for chunk in stream:
        yield chunk.replace(b"\x00", b"")


def _head_and_tail(chunks, budget: int, head_bytes: int) -> tuple[bytes, tuple[int, int] | None]:
    """The bytes of ``chunks``, or of a longer stream its first ``head_bytes`` and last ``budget - head_bytes`` (cut
    at line ends) with (the line after which lines were left out, how many): memory stays within the budget, the
    middle is only counted."""
    head = bytearray()
    tail: deque[bytes] = deque()
    tail_len = total = dropped_newlines = 0
    tail_bytes = budget - head_bytes
    for chunk in chunks:
        total += len(chunk)
        if len(head) < head_bytes:
            take = head_bytes - len(head)
            head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            tail.append(chunk)
            tail_len += len(chunk)
            while tail and tail_len - len(tail[0]) >= tail_bytes:
                dropped = tail.popleft()
                tail_len -= len(dropped)
                dropped_newlines += dropped.count(b"\n")
    rest = b"".join(tail)
    if total <= budget:
        return _cap_lines(bytes(head) + rest, None, 0)
    excess = max(0, len(rest) - tail_bytes)
    dropped_newlines += rest.count(b"\n", 0, excess)
    rest = rest[excess:]
    head_end = head.rfind(b"\n") + 1
    tail_start = rest.find(b"\n") + 1  # 0: no line end in the tail, kept whole (one long line, capped when matched)
    dropped_newlines += head.count(b"\n", head_end) + rest.count(b"\n", 0, tail_start)
    return _cap_lines(bytes(head[:head_end]) + rest[tail_start:], (head.count(b"\n", 0, head_end), dropped_newlines),
                      head_end)


def _cap_lines(data: bytes, skipped: tuple[int, int] | None, boundary: int) -> tuple[bytes, tuple[int, int] | None]:
    """``data`` with at most :data:`MAX_LINES` lines: its first :data:`HEAD_LINES` (within the head part, which ends
    at ``boundary`` when lines were already left out) and its last, the lines between counted into ``skipped``
    (one gap: the cut lines are next to the one already left out)."""
    if data.count(b"\n") <= MAX_LINES:
        return data, skipped
    head_part = data[:boundary] if skipped else data
    keep_head = min(HEAD_LINES, head_part.count(b"\n"))
    cut = 0
    for _ in range(keep_head):  # the end of the first keep_head lines
        cut = data.index(b"\n", cut) + 1
    keep_tail = MAX_LINES - keep_head
    start = len(data)
    for _ in range(keep_tail + 1):  # the start of the last keep_tail lines (after the newline before them)
        start = data.rindex(b"\n", 0, start) if start > 0 else 0
        if start <= cut:
            break
    start = max(start + 1, cut, boundary if skipped else 0)  # never across the gap already left out
    removed = data.count(b"\n", cut, start)
    return data[:cut] + data[start:], (keep_head, removed + (skipped[1] if skipped else 0))


def read_log(source: str, budget: int | None = None, head_bytes: int | None = None) \
        -> tuple[str, tuple[int, int] | None]:
    """The text of ``source`` (a path, or '-' for stdin) and the lines left out of it, if any.

    Decoded as UTF-8 with undecodable bytes replaced, or as UTF-16 when it starts with a byte-order mark (PowerShell's
    ``>``) or has every other byte NUL; NUL bytes at the start (a log cut while it was written) are dropped. Of a log
    over ``budget`` bytes (:data:`MAX_BYTES`) only the first ``head_bytes`` (:data:`HEAD_BYTES`) and the last
    ``budget - head_bytes`` (cut at line ends) are kept; the rest is streamed through to count its lines: the second
    value is then (the line after which lines were left out, how many), so that line numbers stay those of the file.

    A path is opened through :func:`dsdoctor.files.read_input` (regular files only, non-blocking: a FIFO or a device
    refused at once, ``/proc/kmsg`` never blocks); a regular file over the budget is streamed (opened non-blocking, checked with
    fstat); files over :data:`MAX_FILE_READ_BYTES` are refused, stdin stops after :data:`MAX_STDIN_READ_BYTES`.

    Raises:
        DsdoctorError: no such file, not a regular file, unreadable, empty, too large, or binary data (NUL bytes or
            mostly non-text in its first 8 KiB).
    """
    from dsdoctor.files import read_input, shown

    budget = budget or MAX_BYTES
    head_bytes = min(head_bytes or HEAD_BYTES, budget // 2)
    if source == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:
            raise DsdoctorError("- : stdin is closed; give the log file, or pipe the log into `dsdoctor explain -`")
        try:
            return _decoded(_text_chunks(_chunks_of(stdin, MAX_STDIN_READ_BYTES, "stdin"), "stdin"), budget,
                            head_bytes)
        except OSError as exc:
            raise DsdoctorError(f"stdin: cannot read it ({exc.strerror or exc})") from None
    name = shown(source)
    path = os.path.expanduser(source)
    if os.path.isdir(path):
        raise DsdoctorError(f"LOG {name}: is a directory; give the log file (e.g. train.log), or the per-rank logs in "
                            f"it (dsdoctor explain DIR/*.log)")
    try:
        size = os.stat(path).st_size if stat.S_ISREG(os.stat(path).st_mode) else None
    except (OSError, ValueError):
        size = None  # read_input says why
    if size is None or size <= budget:
        try:
            data = read_input(source, "LOG", budget, what="log")
        except DsdoctorError:
            try:  # a log that grew past the budget since the stat (a run still writing it): streamed below
                grown = os.stat(path).st_size > budget and stat.S_ISREG(os.stat(path).st_mode)
            except OSError:
                grown = False
            if not grown:
                raise
        else:
            return _decoded(_text_chunks([data], name), budget, head_bytes)
    return _read_large(path, name, budget, head_bytes)


def _read_large(path: str, name: str, budget: int, head_bytes: int) -> tuple[str, tuple[int, int] | None]:
    """A regular file over the budget: opened as dsdoctor.files opens inputs (non-blocking, fstat on the open
    descriptor), then streamed as its head and tail."""
    from dsdoctor.files import read_input

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        read_input(path, "LOG", budget, what="log")  # raises the one-line reason
        raise DsdoctorError(f"LOG {name}: cannot open it") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            read_input(path, "LOG", budget, what="log")  # replaced since the stat: refused with its reason
            raise DsdoctorError(f"LOG {name}: not a regular file")
        if info.st_size > MAX_FILE_READ_BYTES:
            raise DsdoctorError(f"LOG {name}: {_size(info.st_size)}, more than explain reads "
                                f"({_size(MAX_FILE_READ_BYTES)}); give its last part (`tail -c 64M LOG | dsdoctor "
                                f"explain -`)")
        try:
            return _decoded(_text_chunks(_chunks_of(f, MAX_FILE_READ_BYTES, f"LOG {name}"), name), budget,
                            head_bytes)
        except OSError as exc:
            raise DsdoctorError(f"LOG {name}: cannot read it ({exc.strerror or exc})") from None


def _decoded(chunks, budget: int, head_bytes: int) -> tuple[str, tuple[int, int] | None]:
    data, skipped = _head_and_tail(chunks, budget, head_bytes)
    return data.decode("utf-8", errors="replace"), skipped


# --- which rank a file is ---------------------------------------------------------------------------------------------

#: a rank in a file name: DeepSpeed's --enable_each_rank_log (``20240101103000_rank3.log``, launch.py), ``rank3.log``,
#: ``node1-rank3.txt``
FILE_RANK = re.compile(r"(?:^|[^A-Za-z0-9])rank[_-]?(\d{1,6})(?!\d)", re.I)


def rank_of_file(path: str) -> int | None:
    """The rank of a per-rank log file from its name (``rank3.log``, ``node1-rank3.txt``, DeepSpeed's
    ``<time>_rank3.log``) or, for torchrun's ``--log-dir`` layout (``<dir>/<run>/attempt_0/3/stdout.log``,
    torch/distributed/elastic/multiprocessing/api.py), its folder; None when neither says."""
    p = Path(path)
    found = FILE_RANK.search(p.name)
    if found:
        return int(found.group(1))
    if p.name in ("stdout.log", "stderr.log") and p.parent.name.isdecimal() and len(p.parent.name) <= 6:
        return int(p.parent.name)
    return None


# --- a config instead of a log ----------------------------------------------------------------------------------------

#: keys of a DeepSpeed config's top level (deepspeed/runtime/config.py): a JSON document with one is that config
DS_CONFIG_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                  "zero_optimization", "optimizer", "scheduler", "fp16", "bf16", "gradient_clipping")


def not_a_log(text: str, name: str) -> None:
    """Raise DsdoctorError for a JSON document given as a log (a DeepSpeed config, ``explain ds_config.json`` for
    ``check``): it holds no run's output; a dsdoctor report's JSON is taken care of by :func:`report_in`."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")) or '"dsdoctor_version"' in stripped[:4096]:
        return
    import json

    try:
        document = json.loads(stripped)
    except ValueError:
        return  # a log that starts with a brace: a printed dict, a JSON-lines metric
    if isinstance(document, dict) and any(key in document for key in DS_CONFIG_KEYS):
        raise DsdoctorError(f"{name} is a DeepSpeed config, not a run's log: `dsdoctor check {name}` checks it")
    raise DsdoctorError(f"{name} is a JSON document, not a run's log (give the output the run printed)")


# --- a dsdoctor report instead of a log -------------------------------------------------------------------------------

COMMANDS = ("check", "env", "estimate", "explain", "nccl", "rules", "smoke")
#: a report with at most this many other lines around it (smoke's progress lines on stderr, a shell prompt) is the
#: input itself; with more, the input is a log that printed a report, explained without the report's lines
REPORT_OTHER_LINES = 20
#: the rich table's title line (render.render_table: ``Table(title=f"dsdoctor {command}")``), then its box
TABLE_TITLE = re.compile(rf"^\s{{0,1000}}dsdoctor ({'|'.join(COMMANDS)})\s{{0,1000}}$")
BOX = re.compile(r"^\s{0,8}[┏┌╭╔+]")
#: the table's last line: the counts (render_table), or "no findings"
COUNTS = re.compile(r"^\s{0,8}(?:\d{1,6} (?:PASS|INFO|WARN|FAIL)(?:, )?){1,4}\s*$|^\s{0,8}no findings\s*$")
#: render.render_markdown's heading
MARKDOWN_TITLE = re.compile(rf"^## dsdoctor ({'|'.join(COMMANDS)})\s*$")


def report_in(text: str) -> dict | None:
    """A dsdoctor report in ``text``: {'command', 'log' (the run's log it names, or None), 'out', 'regions' (line
    index ranges it covers, end exclusive)}; None when there is none. Recognised: any command's rich table (its
    "dsdoctor COMMAND" title over a box), its Markdown (``## dsdoctor COMMAND``), its JSON (``dsdoctor_version``)."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"dsdoctor_version"' in stripped[:4096]:
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict) and "dsdoctor_version" in data:
            result = data.get("result") if isinstance(data.get("result"), dict) else {}
            return {"command": str(data.get("command", "?"))[:20], "log": _str(result.get("log")),
                    "out": _str(result.get("out")), "regions": [(0, text.count("\n") + 1)]}
    lines = text.split("\n")
    found = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip() == "{" and any('"dsdoctor_version"' in ln for ln in lines[index + 1:index + 4]):
            end = next((i + 1 for i in range(index + 1, len(lines)) if lines[i].rstrip() == "}"), len(lines))
            try:  # render_json's indented JSON, after other output (a progress line of `2>&1`)
                data = json.loads("\n".join(lines[index:end]))
            except ValueError:
                data = None
            if isinstance(data, dict) and "dsdoctor_version" in data:
                result = data.get("result") if isinstance(data.get("result"), dict) else {}
                found = found or {"command": str(data.get("command", "?"))[:20], "log": None, "out": None,
                                  "regions": []}
                found["regions"].append((index, end))
                found["log"] = found["log"] or _str(result.get("log"))
                found["out"] = found["out"] or _str(result.get("out"))
                index = end
                continue
        if "dsdoctor " not in line[:400]:
            index += 1
            continue
        title = TABLE_TITLE.match(line)
        if title and any(BOX.match(ln) for ln in lines[index + 1:index + 3]):
            end = _table_end(lines, index)
            found = found or {"command": title.group(1), "log": None, "out": None, "regions": []}
            found["regions"].append((index, end))
            found["log"] = found["log"] or _table_value(lines[index:end], "log")
            found["out"] = found["out"] or _table_value(lines[index:end], "out")
            index = end
            continue
        title = MARKDOWN_TITLE.match(line)
        if title:
            end, fenced = index + 1, False
            while end < len(lines):
                ln = lines[end]
                if ln.startswith("```"):
                    fenced = not fenced
                elif not (fenced or not ln.strip() or ln.startswith(("|", "#"))):
                    break
                end += 1
            found = found or {"command": title.group(1), "log": None, "out": None, "regions": []}
            found["regions"].append((index, end))
            found["log"] = found["log"] or _markdown_value(lines[index:end], "log")
            found["out"] = found["out"] or _markdown_value(lines[index:end], "out")
            index = end
            continue
        index += 1
    return found


#: how the lines of render_table's output start: its boxes and the result rows (a space), or empty
TABLE_STARTS = tuple(" \t│┃┏┡┗└├╇┼━─╭╰╔║╚|+")


def _table_end(lines: list[str], title: int) -> int:
    """The index after a rich report that starts at ``lines[title]``: after its counts line, else at the first line
    that is no part of a table."""
    for index in range(title + 1, len(lines)):
        line = lines[index]
        if COUNTS.match(line):
            return index + 1
        if line and not line.startswith(TABLE_STARTS):
            return index
    return len(lines)


def _str(value) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _table_value(lines: list[str], key: str) -> str | None:
    """The value of ``key`` in the rich result table (a 'result  value' header; a value folded over several lines
    continues under the value column)."""
    header = next((i for i, ln in enumerate(lines) if re.match(r"^\s{0,8}result\s{1,200}value\s*$", ln)), None)
    if header is None:
        return None
    column = lines[header].index("value")
    value = None
    for line in lines[header + 1:]:
        name, rest = line[:column].strip(), line[column:].rstrip()
        if value is not None:
            if name or not rest:
                break
            value += rest.strip()
        elif name == key and rest:
            value = rest.strip()
    return value


def _markdown_value(lines: list[str], key: str) -> str | None:
    for line in lines:
        found = re.match(rf"^\| {key} \| (.{{1,4000}}) \|\s*$", line)
        if found:
            return found.group(1).replace("\\|", "|")
    return None


def _report_error(name: str, report: dict) -> DsdoctorError:
    """One line: ``name`` is a dsdoctor report, and what to explain instead."""
    from dsdoctor.files import shown

    command = report["command"]
    log = report.get("log")
    if command == "smoke":
        path = log or (f"{report['out'].rstrip('/')}/train.log" if report.get("out") else None)
        where = f"`dsdoctor explain {shown(path)}`" if path else \
            "`dsdoctor explain <--out>/train.log` (dsdoctor-smoke/train.log by default)"
        return DsdoctorError(f"{name} is a dsdoctor smoke report, not a training log: run {where} (the run's own "
                             f"output, kept in its --out directory)")
    if command == "explain" and log and log != "-":
        return DsdoctorError(f"{name} is a dsdoctor explain report, not a training log: it explained "
                             f"{shown(log)}; run `dsdoctor explain` on a training run's log")
    return DsdoctorError(f"{name} is a dsdoctor {command} report, not a training log: explain reads a training run's "
                         f"output (`deepspeed train.py 2>&1 | dsdoctor explain -`, or smoke's <--out>/train.log)")


# --- the command ------------------------------------------------------------------------------------------------------

def _flight_dump(source: str) -> tuple[int, dict] | None:
    """(rank, the dump read as plain data) of a PyTorch Flight Recorder dump file given to explain (a pickle: torch
    writes ``<prefix><rank>``, the rank its name's last digits), or None for anything else (a log)."""
    import re

    from dsdoctor.checks.hang.flight import read_dump

    path = os.path.expanduser(source)
    if source == "-" or not os.path.isfile(path):  # never open a FIFO or a device here: read_log says what it is
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return None
    found = re.search(r"(\d{1,6})$", os.path.basename(source))
    if head[:1] != b"\x80" or not found:  # pickle's protocol mark; a JSON dump is read as a log
        return None
    try:
        return int(found.group(1)), read_dump(path)
    except (OSError, ValueError):
        return None


def _hang_findings(lines, flight_dumps: dict[int, dict], result: dict) -> list:
    """``dsdoctor hang``'s verdict (``checks/hang/verdict.py``) on the py-spy dumps pasted into the log and the Flight
    Recorder dumps given; their ranks go to ``result["hang"]``. [] when there are neither."""
    from dsdoctor.checks.hang.flight import summary, torch_analysis
    from dsdoctor.checks.hang.stacks import main_thread, parse_dumps, position
    from dsdoctor.checks.hang.verdict import diagnose

    processes = parse_dumps(lines) if any("Thread " in ln.text for ln in lines[:200000]) else []
    if not processes and not flight_dumps:
        return []
    records = []
    for p in processes:
        main = main_thread(p["threads"])
        records.append({"host": None, "pid": p["pid"], "rank": p["rank"], "cmdline": p["cmdline"],
                        "position": position(main["frames"]) if main else {"state": "unknown"}, "advancing": None,
                        "error": None, "proc": {}, "workers": [], "flight_recorder": None})
    for rank, dump in sorted(flight_dumps.items()):
        groups = summary(dump)
        record = next((r for r in records if r["rank"] == rank), None)
        if record is None:
            record = {"host": None, "pid": 0, "rank": rank, "position": {"state": "unknown"}, "advancing": None,
                      "error": None, "proc": {}, "workers": [], "flight_recorder": None}
            records.append(record)
        record["flight_recorder"] = {"on": True, "groups": groups}
    result["hang"] = [{k: r[k] for k in ("pid", "rank", "position", "flight_recorder")} for r in records]
    node = {"host": None, "gone": [], "flight_analysis": torch_analysis(flight_dumps) if flight_dumps else None}
    return diagnose(records, [node], None)  # the log says it hung: no motion to measure


def run_explain(sources: str | list[str] | tuple[str, ...]) -> Report:
    """The body of ``dsdoctor explain``: ``sources`` are paths (or one '-' for stdin), each read within its share of
    :data:`MAX_TOTAL_BYTES`; one log, or one file per rank merged by their timestamps."""
    from dsdoctor.checks.logs import LOG800, explain as explain_text, merge, read_lines
    from dsdoctor.files import shown

    sources = [sources] if isinstance(sources, str) else list(sources)
    if not sources:
        raise DsdoctorError("give a log file (or - for stdin)")
    if len(sources) > MAX_FILES:
        raise DsdoctorError(f"{len(sources):,} logs given; explain reads at most {MAX_FILES:,} (one run's ranks)")
    if sources.count("-") > 1:
        raise DsdoctorError("- (stdin) is given more than once")
    if len(sources) > 1:  # the same file named twice (rank0.log and ./rank0.log) is read once
        unique = {}
        for source in sources:
            unique.setdefault(source if source == "-" else os.path.realpath(os.path.expanduser(source)), source)
        sources = list(unique.values())
    several = len(sources) > 1
    budget = MAX_BYTES if not several else min(MAX_BYTES, max(MIN_FILE_BYTES, MAX_TOTAL_BYTES // len(sources)))
    head_bytes = HEAD_BYTES * budget // MAX_BYTES
    streams, skipped_of, reports, empty = [], {}, [], []
    outside = 0  # non-empty lines outside the reports found
    first_skipped = None
    flight_dumps: dict[int, dict] = {}  # Flight Recorder dump files given beside (or instead of) the logs
    for number, source in enumerate(sources):
        dump = _flight_dump(source)
        if dump is not None:
            flight_dumps[dump[0]] = dump[1]
            continue
        try:
            text, skipped = read_log(source, budget, head_bytes)
        except DsdoctorError as exc:
            # torchrun's --log-dir holds an empty stdout.log beside each stderr.log: one empty file of several is
            # skipped (and said), never the end of the run's diagnosis
            if not several or not str(exc).endswith("is empty: nothing to explain"):
                raise
            empty.append(shown(source))
            continue
        name = "stdin" if source == "-" else shown(source)
        not_a_log(text, name)
        lines = read_lines(text, skipped, rank=None if source == "-" else rank_of_file(source),
                           source=name if several else None)
        report = report_in(text) if "dsdoctor" in text else None
        if report:  # the report's own lines are not the run's: table fragments would read as failures
            reports.append((name, report))
            gone = {i for start, end in report["regions"] for i in range(start, end)}
            lines = [ln for i, ln in enumerate(lines) if i not in gone]
        outside += sum(1 for ln in lines[:1000] if ln.text.strip())
        if skipped:
            skipped_of[name] = skipped
            first_skipped = skipped if number == 0 else first_skipped
        streams.append(lines)
    if not streams and not flight_dumps:
        raise DsdoctorError(f"{', '.join(empty[:5])}: every log given is empty: nothing to explain")
    merged = merge(streams) if streams else []
    findings, result = explain_text(merged, first_skipped if not several else None) if streams else ([], {})
    hung = _hang_findings(merged, flight_dumps, result)
    if hung:  # py-spy dumps or Flight Recorder records: which rank waits where; first unless a failure is named
        named = findings and findings[0].id not in (LOG800.id, "LOG810", "LOG811")
        findings = findings + hung if named else hung + [f for f in findings if f.id != LOG800.id]
    if empty:
        result["empty_files"] = empty
    if reports and findings[0].id == LOG800.id and outside <= REPORT_OTHER_LINES:  # a report, no log around it
        raise _report_error(*reports[0])
    if several:
        result["lines"] = sum(len(s) for s in streams) + sum(n for _, n in skipped_of.values())
        result["skipped_lines"] = {name: [a + 1, a + n] for name, (a, n) in skipped_of.items()} or None
    if skipped_of:
        notes = [f"lines {a + 1:,}-{a + n:,}{' of ' + name if several else ' of this log, its middle,'} were not read"
                 for name, (a, n) in list(skipped_of.items())[:3]]
        first = findings[0]
        findings[0] = replace(first, evidence=first.evidence + f" ({'; '.join(notes)})")
    report = Report("explain", result={"log": sources[0] if not several else sources, **result})
    for finding in findings:
        report.add(finding)
    return report


@click.command("explain")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...|-")
@report_command(inputs=("logs",))
def explain(logs) -> Report:
    """Find the first real failure in a failed run's log (ranks interleaved, any launcher) and name the pitfall,
    its fix, and the check that would have caught it before launch. LOG is a file, several files (one per rank:
    DIR/*.log, each file's rank from its name), or - for stdin."""
    return run_explain(list(logs))
