"""A live job's hang (``dsdoctor hang``): which rank is stuck, where, and why.

Split by concern: ``rules`` (the HANG9xx declarations), ``procs`` (the job's ranks on this node from their
environment, the launcher, the ranks that are gone), ``stacks`` (py-spy's dump of a rank and where its main thread
is) and ``verdict`` (the ranks grouped by where they are, the odd ones named). Nothing here stops, signals or changes
a rank: py-spy reads a process's memory while pausing it for milliseconds.
"""

from __future__ import annotations

from .rules import (HANG900, HANG901, HANG902, HANG903, HANG904, HANG905, HANG906, HANG907, HANG908,  # noqa: F401
                    HANG909)
