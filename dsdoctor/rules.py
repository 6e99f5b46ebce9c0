"""The rule catalogue: every rule's ID, default severity and documentation.

Rules are declared next to the checks that raise them (one module per family in ``checks/``, installed as
``dsdoctor.checks``) with :func:`rule`; :func:`catalogue` imports the families and returns them all.
IDs are a family prefix plus digits (``DS1xx`` config, ``HF2xx`` Trainer, ``ENV3xx`` environment,
``NET4xx`` network, ``MEM5xx`` memory, ``TRN6xx`` training smoke, ``DATA7xx`` data, ``LOG8xx`` failed-run logs with
no preflight rule, ``HANG9xx`` a live job's hang, ``PRE0xx`` a launch line) and are never reused.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from dsdoctor.report import SEVERITY_RANK, Finding

#: Modules that declare rules; importing them must stay cheap (no torch, no deepspeed).
FAMILIES = ("dsdoctor.checks.deepspeed_config", "dsdoctor.checks.hf_trainer", "dsdoctor.checks.training", "dsdoctor.checks.data",
            "dsdoctor.checks.network", "dsdoctor.checks.memory",
            "dsdoctor.checks.environment", "dsdoctor.checks.logs", "dsdoctor.checks.hang",
            "dsdoctor.checks.preflight")

_RULES: dict[str, Rule] = {}


@dataclass(frozen=True)
class Rule:
    """A documented diagnosis. ``finding()`` makes a :class:`Finding` carrying this rule's ID and source."""

    id: str
    severity: str
    title: str
    what: str
    why: str
    fix: str
    source: str
    example: str = ""

    def finding(self, evidence: str, *, severity: str | None = None, title: str | None = None,
                fix: str | None = None) -> Finding:
        """A finding of this rule; ``severity``/``title``/``fix`` override the defaults for this case."""
        return Finding(id=self.id, severity=severity or self.severity, title=title or self.title,
                       evidence=evidence, fix=self.fix if fix is None else fix, source=self.source)


def rule(id: str, severity: str, title: str, *, what: str, why: str, fix: str, source: str,
         example: str = "") -> Rule:
    """Declare and register a rule. Raises ValueError on a duplicate ID or an unknown severity."""
    if id in _RULES:
        raise ValueError(f"rule {id} declared twice")
    if severity not in SEVERITY_RANK:
        raise ValueError(f"rule {id}: unknown severity {severity!r}")
    declared = Rule(id, severity, title, what, why, fix, source, example)
    _RULES[id] = declared
    return declared


def catalogue() -> dict[str, Rule]:
    """All rules, by ID in sorted order, after importing every family module."""
    for module in FAMILIES:
        importlib.import_module(module)
    return dict(sorted(_RULES.items()))
