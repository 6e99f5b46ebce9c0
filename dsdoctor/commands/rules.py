"""``dsdoctor rules [ID]``: the rule catalogue (ID, default severity, title), or one rule's documentation."""

from __future__ import annotations

from dataclasses import asdict

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report
from dsdoctor.rules import catalogue


def rules_report(rule_id: str | None = None) -> Report:
    """The catalogue as a Report with no findings (a catalogue diagnoses nothing, so it always exits 0): a table of
    every rule's ID, default severity and title, and the full documentation in ``result["rules"]``. With
    ``rule_id``, that rule's documentation (what, why, example, fix, source) as a block.

    Raises:
        DsdoctorError: an unknown ID (with the closest IDs).
    """
    rules = catalogue()
    if rule_id is not None:
        key = rule_id.strip().upper()
        if key not in rules:
            import difflib

            import re

            # a letter typed for a digit (TRN6O1, DS1l0) first, then what difflib finds close
            family, number = re.match(r"([A-Z]*)(.*)", key).groups()
            typo = family + number.translate(str.maketrans("OILS", "0115"))
            close = ([typo] if typo in rules else []) + [
                k for k in difflib.get_close_matches(key, list(rules), n=3, cutoff=0.6) if k != typo]
            close = close[:3]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise DsdoctorError(f"unknown rule {rule_id[:40]!r}{hint} (`dsdoctor rules` lists {len(rules)} rules)")
        rules = {key: rules[key]}
    report = Report("rules", result={"rules": [asdict(r) for r in rules.values()]})
    if rule_id is None:
        report.tables.append((f"{len(rules)} rules", ["id", "default severity", "title"],
                              [[r.id, r.severity, r.title] for r in rules.values()]))
    else:
        (r,) = rules.values()
        report.block_title = f"{r.id} ({r.severity} by default): {r.title}"
        report.block = [f"- {name}: {value}" for name, value in
                        (("what", r.what), ("why", r.why), ("example", r.example), ("fix", r.fix),
                         ("source", r.source)) if value]
    return report


@click.command("rules")
@click.argument("rule_id", required=False, metavar="[ID]")
@report_command
def rules(rule_id: str | None) -> Report:
    """List every rule (ID, default severity, title), or document one (what, why, example, fix, source)."""
    return rules_report(rule_id)
