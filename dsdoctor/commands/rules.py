"""``dsdoctor rules [ID]``: the rule catalogue, or one rule's documentation."""

from __future__ import annotations

from dataclasses import asdict

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Finding, Report
from dsdoctor.rules import catalogue


def rules_report(rule_id: str | None = None) -> Report:
    """The catalogue as a Report: one ``info`` finding per rule (its title and fix), and the full
    documentation in ``result["rules"]``. Raises DsdoctorError for an unknown ID."""
    rules = catalogue()
    if rule_id is not None:
        key = rule_id.upper()
        if key not in rules:
            raise DsdoctorError(f"unknown rule {rule_id!r}; `dsdoctor rules` lists {len(rules)} rules")
        rules = {key: rules[key]}
    report = Report("rules", result={"rules": [asdict(r) for r in rules.values()]})
    for r in rules.values():
        evidence = f"default severity: {r.severity}"
        if rule_id is not None:
            evidence = f"{evidence}\nwhat: {r.what}\nwhy: {r.why}" + (f"\nexample: {r.example}" if r.example else "")
        report.add(Finding(r.id, "info", r.title, evidence, r.fix, r.source))
    return report


@click.command("rules")
@click.argument("rule_id", required=False, metavar="[ID]")
@report_command
def rules(rule_id: str | None) -> Report:
    """List every rule, or document one (what, why, example, fix, source)."""
    return rules_report(rule_id)
