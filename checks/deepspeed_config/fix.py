"""What ``--fix`` writes: each edit (:class:`Change`), the corrected copy they make, and the audit that no edit
changes what trains (precision, ZeRO stage, offload, optimizer, learning rate, scheduler, clipping) without saying
so on the edit that does it (:func:`mark_training_changes`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .values import MISSING, as_bool, get_path, is_auto, show


@dataclass
class Change:
    """One edit of ``--fix``: set ``path`` to ``new`` (``new is MISSING``: delete it), and why."""

    path: str
    old: Any
    new: Any
    rule: str
    why: str
    #: what this edit changes in the training, as DeepSpeed reads the file ("precision fp32 -> bf16"), or ""
    training: str = ""

    def to_dict(self) -> dict:
        return {"path": self.path, "old": None if self.old is MISSING else self.old,
                "new": None if self.new is MISSING else self.new, "action": "delete" if self.new is MISSING
                else ("add" if self.old is MISSING else "set"), "rule": self.rule, "why": self.why,
                "changes_training": self.training or None}



def apply_changes(config: dict, changes: list[Change]) -> dict:
    """``config`` with ``changes`` applied in order; the input is not modified. A change whose ``new`` is MISSING
    deletes its path (a top-level key with dots in its name first, else the nested path); a set makes the objects on
    its path (replacing a non-object there), as ``set_path`` does.

    Copy on write: only the objects on a changed path are copied, everything else is shared with ``config`` (a
    1 MiB file of nested arrays is not deep-copied for one edit). Read or dump the result; deep-copy it to edit it.
    """
    fixed = dict(config)
    owned = {id(fixed)}

    def own(parent: dict, key: str, make: bool) -> dict | None:
        child = parent.get(key)
        if not isinstance(child, dict):
            if not make:
                return None
            child = {}
        elif id(child) in owned:
            return child
        else:
            child = dict(child)
        parent[key] = child
        owned.add(id(child))
        return child

    for c in changes:
        parts = c.path.split(".")
        if c.new is MISSING and c.path in fixed:  # a top-level key, even one with dots in its name
            del fixed[c.path]
            continue
        node: dict | None = fixed
        for part in parts[:-1]:
            node = own(node, part, make=c.new is not MISSING)
            if node is None:
                break
        if node is None:
            continue
        if c.new is MISSING:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = copy.deepcopy(c.new)
    return fixed


#: what trains, each with the dotted values that decide it; an edit of one of them, or of a section above one
#: (a whole "zero_optimization" moved from a misspelled key), is what changes it
TRAINING_ASPECTS: dict[str, tuple[str, ...]] = {
    "precision": ("fp16.enabled", "bf16.enabled", "bfloat16.enabled"),
    "ZeRO stage": ("zero_optimization.stage",),
    "optimizer offload": ("zero_optimization.offload_optimizer.device", "zero_optimization.cpu_offload"),
    "parameter offload": ("zero_optimization.offload_param.device", "zero_optimization.cpu_offload_param"),
    "optimizer": ("optimizer.type",),
    "learning rate": ("optimizer.params.lr",),
    "scheduler": ("scheduler.type", "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr"),
    "gradient clipping": ("gradient_clipping",),
}
#: the top-level keys the aspects read
_TRAINING_KEYS = ("fp16", "bf16", "bfloat16", "zero_optimization", "optimizer", "scheduler", "gradient_clipping")


def _flag(section: Any, launch: str) -> str:
    if section is None and launch == "trainer":
        return "auto"  # accelerate's set_mixed_precision adds the block TrainingArguments fp16/bf16 ask for
    if not isinstance(section, dict):
        return "off"
    value = section.get("enabled", False)
    if is_auto(value):
        return "auto" if launch == "trainer" else "off"  # DeepSpeedConfigModel drops "auto": the default false
    return "on" if as_bool(value) else "off"


def _value(config: dict, path: str) -> str:
    value = get_path(config, path)
    return "unset" if value is MISSING else show(value)


def training_of(config: dict, launch: str = "engine") -> dict[str, str]:
    """What trains with ``config``, per :data:`TRAINING_ASPECTS`, as DeepSpeed reads it (under the engine "auto"
    in fp16/bf16 is false; under the Trainer it stays "auto", and so does a missing fp16/bf16 block, which
    accelerate's ``DeepSpeedPlugin.set_mixed_precision`` adds for TrainingArguments fp16/bf16: TrainingArguments
    decide). Values are display text:
    ``{"precision": "bf16", "ZeRO stage": "2", "optimizer": '"AdamW"', ...}``.
    Source: deepspeed/runtime/config.py (precision, gradient_clipping), zero/config.py (stage, offload), engine.py
    ``_configure_optimizer`` and ``_scheduler_from_config``."""
    from .zero import offload_device, zero_stage

    fp16 = _flag(config.get("fp16"), launch)
    bf16 = _flag(config.get("bf16") if config.get("bf16") is not None else config.get("bfloat16"), launch)
    on = [name for name, state in (("fp16", fp16), ("bf16", bf16)) if state == "on"]
    if len(on) == 2:
        precision = "fp16 and bf16 (DeepSpeed refuses both)"
    elif on:
        precision = on[0]
    elif "auto" in (fp16, bf16):
        precision = 'as TrainingArguments fp16/bf16 say ("auto")'
    else:
        precision = "fp32"
    stage = zero_stage(config)
    scheduler = ", ".join(_value(config, p) for p in TRAINING_ASPECTS["scheduler"])
    return {"precision": precision, "ZeRO stage": "invalid" if stage is None else str(stage),
            "optimizer offload": offload_device(config, "offload_optimizer"),
            "parameter offload": offload_device(config, "offload_param"),
            "optimizer": _value(config, "optimizer.type"), "learning rate": _value(config, "optimizer.params.lr"),
            "scheduler": "none" if scheduler == "unset, unset, unset" else scheduler,
            "gradient clipping": _value(config, "gradient_clipping")}


def _touches(change_path: str, value_path: str) -> bool:
    return change_path == value_path or value_path.startswith(change_path + ".")


#: every path whose edit can alter an aspect: the values themselves and every section above them
_DECIDING = frozenset(".".join(p.split(".")[:i]) for paths in TRAINING_ASPECTS.values() for p in paths
                      for i in range(1, p.count(".") + 2))


def mark_training_changes(config: dict, changes: list[Change], launch: str = "engine") -> list[str]:
    """Set ``training`` on every change that alters what trains (:func:`training_of` of ``config`` against the
    config after the changes), so that --fix says so on the edit itself ("precision fp32 -> bf16").

    Only edits of a deciding value or a section above one (:data:`_DECIDING`) can alter an aspect, so only those
    are applied, to a copy of the sections they touch (a file of 80,000 stray keys costs a set lookup per edit).
    Returns the aspects that changed with no such edit to name (none by construction; when one does, every
    deciding edit is marked with it rather than leaving it unsaid).
    """
    relevant = [c for c in changes if c.path in _DECIDING]
    if not relevant:
        return []
    paths = {c.path.split(".")[0] for c in relevant} | {c.path for c in relevant}
    needed = {k: v for k, v in config.items() if k in _TRAINING_KEYS or k in paths}
    before, after = training_of(config, launch), training_of(apply_changes(needed, relevant), launch)
    unnamed = []
    for aspect, deciding in TRAINING_ASPECTS.items():
        if before[aspect] == after[aspect]:
            continue
        text = f"{aspect} {before[aspect]} -> {after[aspect]}"
        responsible = [c for c in relevant if any(_touches(c.path, p) for p in deciding)]
        if not responsible:
            unnamed.append(aspect)
            responsible = relevant
        for c in responsible:
            c.training = f"{c.training}; {text}" if c.training else text
    return unnamed
