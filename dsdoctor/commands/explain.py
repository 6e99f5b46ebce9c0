"""``dsdoctor explain LOG``: from a failed run's log to the pitfall and its fix.

Reads the log of a ``deepspeed``, ``torchrun`` or ``accelerate launch`` run (or the HF Trainer's), with ranks
interleaved, rank prefixes and colours, from a file or stdin (``deepspeed train.py 2>&1 | dsdoctor explain -``);
finds the first real failure (:mod:`dsdoctor.checks.logs`) and names it with the rule ID of the preflight check that
would have caught it. Exit 1 when a failure is recognised, 0 when none is.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report

#: Logs larger than this are read from their end (the failure is near the end; start-up lines come from the head).
MAX_BYTES = 64 * 2 ** 20
HEAD_BYTES = 2 * 2 ** 20


def read_log(source: str) -> tuple[str, tuple[int, int] | None]:
    """The text of ``source`` (a path, or '-' for stdin) and the lines left out of it, if any.

    Decoded as UTF-8 with undecodable bytes replaced, or as UTF-16 when it starts with a byte-order mark (PowerShell's
    ``>``); NUL bytes at the start (a log cut while it was written) are dropped. Of a log over 64 MiB only the first
    2 MiB and the last 62 MiB (cut at line ends) are kept for scanning; the whole file is read once, to count the
    lines left out: the second value is then (the line after which lines were left out, how many), so that line
    numbers stay those of the file.

    Raises:
        DsdoctorError: no such file, a directory, unreadable, empty, or binary data (NUL bytes or mostly
            non-text in its first 8 KiB).
    """
    if source == "-":
        data = sys.stdin.buffer.read()
        name = "stdin"
    else:
        path = Path(source).expanduser()
        if not path.exists():
            raise DsdoctorError(f"{source}: no such file")
        if path.is_dir():
            raise DsdoctorError(f"{source}: is a directory; give the log file (e.g. train.log)")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DsdoctorError(f"{source}: cannot read it ({exc.strerror})") from None
        name = source
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        data = data.decode("utf-16", errors="replace").encode("utf-8")
    elif len(data) >= 64 and data[1:4096:2].count(0) > 0.9 * len(data[1:4096:2]) and not data[0:4096:2].count(0):
        data = data.decode("utf-16-le", errors="replace").encode("utf-8")  # UTF-16 without a byte-order mark
    data = data.lstrip(b"\x00")
    if not data.strip():
        raise DsdoctorError(f"{name} is empty: nothing to explain")
    sample = data[:8192]
    printable = sum(32 <= b < 127 or b in (9, 10, 13, 27) or b >= 128 for b in sample)
    if b"\x00" in sample or printable < 0.9 * len(sample):
        raise DsdoctorError(f"{name} is binary data, not a text log")
    skipped = None
    if len(data) > MAX_BYTES:
        head_end = data.rfind(b"\n", 0, HEAD_BYTES) + 1
        tail_start = data.find(b"\n", len(data) - (MAX_BYTES - HEAD_BYTES)) + 1
        skipped = (data.count(b"\n", 0, head_end), data.count(b"\n", head_end, tail_start))
        data = data[:head_end] + data[tail_start:]
    return data.decode("utf-8", errors="replace"), skipped


def run_explain(source: str) -> Report:
    """The body of ``dsdoctor explain``."""
    from dsdoctor.checks.logs import explain as explain_text

    text, skipped = read_log(source)
    findings, result = explain_text(text, skipped)
    if skipped:
        first = findings[0]
        findings[0] = replace(first, evidence=first.evidence + f" (lines {skipped[0] + 1:,}-{skipped[0] + skipped[1]:,}"
                                                                 f" of this log, its middle, were not read)")
    report = Report("explain", result={"log": source, **result})
    for finding in findings:
        report.add(finding)
    return report


@click.command("explain")
@click.argument("log", metavar="LOG|-")
@report_command(inputs=("log",))
def explain(log) -> Report:
    """Find the first real failure in a failed run's log (ranks interleaved, any launcher) and name the pitfall,
    its fix, and the check that would have caught it before launch. LOG is a file, or - for stdin."""
    return run_explain(log)
