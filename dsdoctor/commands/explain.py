"""``dsdoctor explain LOG``: from a failed run's log to the pitfall and its fix.

Reads the log of a ``deepspeed``, ``torchrun`` or ``accelerate launch`` run (or the HF Trainer's), with ranks
interleaved, rank prefixes and colours, from a file or stdin (``deepspeed train.py 2>&1 | dsdoctor explain -``);
finds the first real failure (:mod:`dsdoctor.checks.logs`) and names it with the rule ID of the preflight check that
would have caught it. Exit 1 when a failure is recognised, 0 when none is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report

#: Logs larger than this are read from their end (the failure is near the end; start-up lines come from the head).
MAX_BYTES = 64 * 2 ** 20
HEAD_BYTES = 2 * 2 ** 20


def read_log(source: str) -> str:
    """The text of ``source`` (a path, or '-' for stdin), decoded as UTF-8 with undecodable bytes replaced. A log
    over 64 MiB is read as its first 2 MiB and its last 62 MiB.

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
            size = path.stat().st_size
            with open(path, "rb") as f:
                if size > MAX_BYTES:
                    head = f.read(HEAD_BYTES)
                    f.seek(size - (MAX_BYTES - HEAD_BYTES))
                    data = head + b"\n" + f.read()
                else:
                    data = f.read()
        except OSError as exc:
            raise DsdoctorError(f"{source}: cannot read it ({exc.strerror})") from None
        name = source
    if not data.strip():
        raise DsdoctorError(f"{name} is empty: nothing to explain")
    sample = data[:8192]
    printable = sum(32 <= b < 127 or b in (9, 10, 13, 27) or b >= 128 for b in sample)
    if b"\x00" in sample or printable < 0.9 * len(sample):
        raise DsdoctorError(f"{name} is binary data, not a text log")
    return data.decode("utf-8", errors="replace")


def run_explain(source: str) -> Report:
    """The body of ``dsdoctor explain``."""
    from dsdoctor.checks.logs import explain as explain_text

    findings, result = explain_text(read_log(source))
    report = Report("explain", result={"log": source, **result})
    for finding in findings:
        report.add(finding)
    return report


@click.command("explain")
@click.argument("log", metavar="LOG|-")
@report_command
def explain(log) -> Report:
    """Find the first real failure in a failed run's log (ranks interleaved, any launcher) and name the pitfall,
    its fix, and the check that would have caught it before launch. LOG is a file, or - for stdin."""
    return run_explain(log)
