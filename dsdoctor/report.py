"""The report model every command shares: findings with rule IDs, and a result dict.

A command builds a :class:`Report`; only the CLI entry point renders it and chooses the exit code
(``dsdoctor/cli.py``), as accelerate's ``env_command`` returns its dict and ruff's rules return diagnostics.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dsdoctor import __version__

#: Severities from least to most severe. ``ok`` is a check that ran and passed.
SEVERITIES = ("ok", "info", "warning", "error")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


class DsdoctorError(Exception):
    """Bad usage or input: the CLI prints ``str(self)`` as one line and exits 2, never a traceback."""


@dataclass(frozen=True)
class Finding:
    """One diagnosis.

    Attributes:
        id: stable rule ID (``TRN601``); never reused, documented by ``dsdoctor rules ID``.
        severity: one of :data:`SEVERITIES`.
        title: one line saying what was found.
        evidence: the values seen that prove it (numbers with units, the exception text, a file:line).
        fix: what to change, concretely. Empty only for ``ok`` findings.
        source: where the behaviour comes from (a file in DeepSpeed/transformers, a paper, a report).
    """

    id: str
    severity: str
    title: str
    evidence: str = ""
    fix: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r}; expected one of {SEVERITIES}")

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass
class Report:
    """What a command returns: its findings and a JSON-serialisable ``result``."""

    command: str
    findings: list[Finding] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    #: extra tables for the table and Markdown renderers only: (title, column names, rows of strings); the
    #: same data is in ``result`` for JSON
    tables: list[tuple[str, list[str], list[list[str]]]] = field(default_factory=list)
    #: a paste-ready text block (``- key: value`` lines): printed plain in the table view, fenced in Markdown
    block: list[str] = field(default_factory=list)
    block_title: str = ""

    def add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    def ids(self, at_least: str = "ok") -> list[str]:
        """Rule IDs of the findings at or above ``at_least``, in report order."""
        floor = SEVERITY_RANK[at_least]
        return [f.id for f in self.findings if SEVERITY_RANK[f.severity] >= floor]

    def worst(self) -> str:
        """The most severe severity present (``ok`` for an empty report)."""
        return max((f.severity for f in self.findings), key=SEVERITY_RANK.__getitem__, default="ok")

    def exit_code(self, fail_on: str = "error") -> int:
        """0 when no finding is at or above ``fail_on``, else 1 (ruff's and ty's convention)."""
        return 1 if SEVERITY_RANK[self.worst()] >= SEVERITY_RANK[fail_on] else 0

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON interface: command, dsdoctor_version, findings, result."""
        return {
            "command": self.command,
            "dsdoctor_version": __version__,
            "findings": [f.to_dict() for f in self.findings],
            "result": self.result,
        }
