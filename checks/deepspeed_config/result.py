"""What a check knows (:class:`CheckContext`) and what it returns (:class:`CheckResult`)."""

from __future__ import annotations

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
        if self.original and is_auto(get_path(self.original, path)) and not is_auto(new) and \
                self.launch == "trainer":
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
        """A corrected copy of ``config`` with every change applied (the input is not modified)."""
        return apply_changes(config, self.changes)
