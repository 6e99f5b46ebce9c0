"""Failed-run logs (``dsdoctor explain``, and ``smoke`` on its own failed runs): the first real failure in a log of
interleaved ranks, named with the rule ID of the preflight check that would have caught it (``LOG8xx`` where no
preflight check can).

A log is read line by line: ANSI colours are removed, and a rank prefix is recognised and set aside (torchrun's
``[rank3]:`` and ``[default3]:``, srun's ``3:``, pdsh's ``host:`` from the deepspeed multi-node launcher). Each
:class:`Signature` is a pattern of one failure, with a cheap substring test in front of its regular expression (a
10,000-line log is read in well under a second). The *first real failure* is the earliest line that matches a
signature which is not a consequence of another failure: a rank killed by a signal, a connection reset by a peer that
died, a launcher's "exits with return code" summary and torchrun's ``ChildFailedError`` come after the cause; they are
the cause only when nothing else was found. A run stopped from outside (a signal: Ctrl-C, a timeout, the scheduler)
says so, with what its ranks were doing when the signal came (an op build that never finished: ENV329).

Every pattern is bounded (no unbounded repetition that can backtrack over a long run of digits, dots or letters: a
lookbehind anchors a leading number, gaps are ``.{0,N}``), and each line is matched on at most :data:`LINE_CHARS`
characters, so that a hostile or broken log is read in linear time. Numbers from a log are never trusted with memory:
ranks have at most 6 digits, a world size is used only up to :data:`MAX_WORLD`, a longer number is shown as text.

The package is split by concern: ``rules`` (the LOG8xx declarations), ``lines`` (reading and normalising lines: rank
prefixes, colours, long lines, timestamps, progress; several files merged in time order), ``signatures`` (the table
of known failures and their describers, the generic Python error), ``imports`` (packages not installed, shadowed or
of another version), ``precision`` (the fp16 loss scale at its floor, the steps its scaler skipped), ``context``
(what the log says about its run: config file, world size, settings, remote code; the suggested commands made the
run's own) and ``findings`` (the scan, the first real failure and its cascade, the build a stopped run hung in, the
findings). Everything public is re-exported here; a limit
(:data:`LINE_CHARS`, :data:`MAX_MATCHES`, ...) is read in the module that defines it.
"""

from __future__ import annotations

from .ends import (BUILD_DONE, BUILD_ROOT, BUILD_SIGNATURE, BUILD_STEP, FINISHED, PYTHON_VERSION, TRACEBACK_HEADER,
                   build_in_flight, finished)
from .findings import (C10D_WARNING, CASCADE, CONTINUES, ERRORISH, MAX_MATCHES, MAX_PER_SIGNATURE, SURVIVAL_LINES,
                       explain, explained, failures, pitfall_findings, scan, survived)
from .lines import (ANSI, CLOCK, EXCEPTION_NAME, HOST_FOLLOWER, LINE_CHARS, PREFIX, PROGRESS, PYTHON_ERROR, Line, clock,
                    merge, read_lines)
from .context import DS_SETTING, RunContext, localize, run_context
from .rules import LOG800, LOG801, LOG802, LOG803, LOG804, LOG805, LOG806, LOG807, LOG808, LOG809, LOG810, LOG811, LOG812
from .toolchain import ARCH_LIST, COMPILER_ERROR
from .evidence import MAX_WORLD
from .network import NCCL_USING, STORE_RETRY, WORLD_SIZE
from .launch import LAUNCHER, SIGNAL_HOW, SIGNAL_NAMES
from .memory import GIB, OOM_ALLOCATED, OOM_FREE, OOM_GPU, OOM_RESERVED, OOM_TOTAL, OOM_TRIED, SIZE
from .signatures import NEEDLES, PYTHON_ERROR_SIGNATURE, SIGNATURES, Match, Signature

__all__ = [
    "LOG800", "LOG801", "LOG802", "LOG803", "LOG804", "LOG805", "LOG806", "LOG807", "LOG808", "LOG809", "LOG810", "LOG811", "LOG812",
    "RunContext", "localize", "run_context",
    "Line", "Match", "Signature", "SIGNATURES", "BUILD_SIGNATURE", "PYTHON_ERROR_SIGNATURE",
    "build_in_flight", "clock", "explain", "explained", "failures", "finished", "merge", "pitfall_findings",
    "read_lines", "scan", "survived",
    "LINE_CHARS", "MAX_MATCHES", "MAX_PER_SIGNATURE", "MAX_WORLD", "SURVIVAL_LINES", "TRACEBACK_HEADER",
    "SIGNAL_HOW", "SIGNAL_NAMES", "SIZE", "EXCEPTION_NAME",
    "ANSI", "ARCH_LIST", "BUILD_DONE", "BUILD_ROOT", "BUILD_STEP", "C10D_WARNING", "CASCADE", "CLOCK",
    "COMPILER_ERROR", "CONTINUES", "DS_SETTING", "ERRORISH", "FINISHED", "GIB", "HOST_FOLLOWER", "LAUNCHER",
    "NCCL_USING", "NEEDLES", "OOM_ALLOCATED", "OOM_FREE", "OOM_GPU", "OOM_RESERVED", "OOM_TOTAL",
    "OOM_TRIED", "PREFIX", "PROGRESS", "PYTHON_ERROR", "PYTHON_VERSION", "STORE_RETRY", "WORLD_SIZE",
]
