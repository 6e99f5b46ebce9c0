"""What a check knows (:class:`CheckContext`) and what it returns (:class:`CheckResult`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.report import Finding

from .fix import Change, apply_changes
from .values import MISSING, get_path, is_auto


@dataclass
class CheckContext:
    """What ``check`` knows about the run besides the config.

    Attributes:
        world_size: data-parallel ranks the run will have; ``world_size_source`` says where it came from.
        launch: ``"engine"`` (your loop calls deepspeed.initialize) or ``"trainer"`` (HF Trainer).
        client_optimizer: the script passes ``optimizer=`` to deepspeed.initialize (engine only).
        hf_args: TrainingArguments values (already read), or None.
        gpu: a :class:`dsdoctor.hardware.Gpu`, or None when unknown.
        model: a :class:`dsdoctor.models.ModelInfo`, or None.
        duplicates: keys repeated in one object of the file.
        json_error: ``(message, line, column)`` where ``json.load`` stops on the file when it is HJSON only
            (:func:`dsdoctor.configfile.read_ds_config_file`), else None; ``hjson_feature`` says what is there.
        world_size_assumed: nothing gave the world size (no --world-size, no launcher WORLD_SIZE, no visible GPU):
            ``world_size`` is a guess, so batch verdicts that depend on it are not certain and --fix leaves the
            batch triple alone.
        transformers_version: the transformers version the training run uses ("4.57.6"), or None when not given
            (``--transformers``); ``transformers_source`` says where it came from; ``transformers_installed`` is
            the one installed here (filled by the Trainer checks when empty).
    """

    world_size: int = 1
    world_size_source: str = "default"
    launch: str = "engine"
    client_optimizer: bool = False
    hf_args: dict | None = None
    gpu: Any = None
    model: Any = None
    duplicates: list[str] = field(default_factory=list)
    schema: dict | None = None
    schema_note: str = ""
    json_error: tuple[str, int, int] | None = None
    hjson_feature: str = ""
    world_size_assumed: bool = False
    transformers_version: str | None = None
    transformers_source: str = ""
    transformers_installed: str = ""


#: findings of one rule listed one by one; the rest are counted in one more (80,000 misspelled optimizer params
#: must not make 80,000 rows: rich takes minutes to lay them out, and nobody reads them)
MAX_FINDINGS_PER_RULE = 25
#: the longest title, evidence or fix kept: a 1 MiB key or value quoted in a finding is cut, its length said
MAX_TEXT_CHARS = 1000
_SEVERITY_ORDER = ("ok", "info", "warning", "error")


def clean_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` for a finding or a table cell: cut at ``limit`` characters (its length said), then every control
    character escaped (``\\n``, ``\\x1b``: a key with a newline or an escape sequence stays on its row and cannot
    move the cursor), with the CLI's own :func:`dsdoctor.cli.one_line`."""
    from dsdoctor.cli import one_line

    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text):,} characters)"
    return one_line(text)


def compact_findings(findings: list[Finding]) -> list[Finding]:
    """``findings`` with every text cleaned (:func:`clean_text`) and at most :data:`MAX_FINDINGS_PER_RULE` per rule
    ID; the rest of a rule are counted in one finding placed after its last one shown, at their worst severity."""
    counts: dict[str, int] = {}
    worst: dict[str, str] = {}
    last: dict[str, int] = {}
    kept: list[Finding] = []
    for f in findings:
        n = counts[f.id] = counts.get(f.id, 0) + 1
        if n <= MAX_FINDINGS_PER_RULE:
            kept.append(dataclasses.replace(f, title=clean_text(f.title), evidence=clean_text(f.evidence),
                                            fix=clean_text(f.fix)))
            last[f.id] = len(kept) - 1
        else:
            worst[f.id] = max(worst.get(f.id, f.severity), f.severity, key=_SEVERITY_ORDER.index)
    for rule_id in sorted(worst, key=lambda r: last[r], reverse=True):
        first = kept[last[rule_id]]
        more = counts[rule_id] - MAX_FINDINGS_PER_RULE
        kept.insert(last[rule_id] + 1, dataclasses.replace(
            first, severity=worst[rule_id], evidence=f"... and {more:,} more {rule_id} findings like the "
                                                     f"{MAX_FINDINGS_PER_RULE} above (--fix lists every change)"))
    return kept


@dataclass
class CheckResult:
    """Findings, the effective config (after the Trainer's fills and DeepSpeed's derivation), where each batch
    value came from, and the edits ``--fix`` makes."""

    findings: list[Finding] = field(default_factory=list)
    effective: dict = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    batch: dict = field(default_factory=dict)
    #: values --fix cannot choose (a micro batch, the run's total steps): (path, what to write there)
    unfixed: list[tuple[str, str]] = field(default_factory=list)
    #: the TrainingArguments values the Trainer checks used (defaults plus --hf-args), or {} when none were given
    training_args: dict = field(default_factory=dict)
    #: DeepSpeed's communication buffers per GPU, bytes by kind and "total" (DS144), or {} without ZeRO
    buffers: dict = field(default_factory=dict)
    #: the config as given, and after the Trainer's fills (``launch == "trainer"``; else the config as given)
    original: dict = field(default_factory=dict)
    filled: dict = field(default_factory=dict)
    launch: str = "engine"
    _changed: set = field(default_factory=set, repr=False)
    _unfixable: set = field(default_factory=set, repr=False)

    def add(self, finding: Finding | None) -> None:
        if finding is not None:
            self.findings.append(finding)

    def change(self, path: str, old: Any, new: Any, rule_id: str, why: str) -> None:
        """Record an edit for --fix (the first edit of a path wins). Under the Trainer a value that is "auto"
        in the file is left alone: the Trainer fills it from TrainingArguments, which is where to change it."""
        if self.launch == "trainer" and self.original and not is_auto(new) and \
                is_auto(get_path(self.original, path)):
            return
        key = (path, new is MISSING)  # a delete and a set of one path can both stand (a dotted key, nested)
        if key not in self._changed:
            self._changed.add(key)
            self.changes.append(Change(path, old, new, rule_id, why))

    def cannot_fix(self, path: str, what: str) -> None:
        if path not in self._unfixable:
            self._unfixable.add(path)
            self.unfixed.append((path, what))

    def fixed_config(self, config: dict) -> dict:
        """``config`` with every change applied (the input is not modified; untouched values are shared with it:
        :func:`apply_changes`)."""
        return apply_changes(config, self.changes)
