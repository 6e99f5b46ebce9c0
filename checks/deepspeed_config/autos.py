"""``"auto"`` outside the HF Trainer: DS101 (DeepSpeed receives the string) and DS136/DS143 (a validated
section drops it: the default)."""

from __future__ import annotations

from typing import Any

from .keys import _field_index
from .result import CheckContext, CheckResult
from .rules import DS101, DS136, DS143
from .values import MISSING, auto_paths, show


def _section_of(path: str, schema: dict) -> str | None:
    """The schema section a dotted value path lives in (``zero_optimization.offload_param.device`` ->
    ``zero_optimization.offload_param``), or None for a top-level value."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in schema["sections"]:
            return candidate
    return None


def check_autos_engine(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS101 (crashes) and DS136/DS143 (silently the default) for "auto" values outside the Trainer."""
    crash, silent = [], []
    top = set(ctx.schema["top_level"]) - set(ctx.schema.get("removed_top_level", {}))
    for path in auto_paths(config):
        if path.split(".")[0].split("[")[0] not in top:
            continue  # under a key DeepSpeed ignores (DS130) or refuses (DS135): "auto" there does nothing
        section = _section_of(path, ctx.schema)
        if section and not ctx.schema["sections"][section].get("strict") and path.split(".")[-1] not in \
                _field_index(ctx.schema["sections"][section]) and section not in ("optimizer", "scheduler"):
            continue  # a key the section ignores (DS132)
        if section and ctx.schema["sections"][section].get("strict"):
            silent.append((path, section))
        else:
            crash.append(path)
    if crash:
        out.add(DS101.finding(f'{len(crash)} value(s) are "auto": ' + ", ".join(crash)))
        for path in crash:
            guess = _engine_value_for_auto(path, config)
            if guess is not MISSING:
                out.change(path, "auto", guess, "DS101", "nothing fills \"auto\" outside the HF Trainer")
            else:
                out.cannot_fix(path, _AUTO_NEEDS.get(path, "the value your loop uses"))
    precision = [p for p, _ in silent if p in ("fp16.enabled", "bf16.enabled")]
    if precision:
        gpu_bf16 = ctx.gpu is None or ctx.gpu.bf16
        chosen = "bf16" if gpu_bf16 and not (ctx.model and ctx.model.dtype == "float16" and ctx.gpu is None) \
            else "fp16"
        why = (f"one 16-bit type: {chosen}" + (f" ({ctx.gpu.name})" if ctx.gpu else "") +
               (f" ({ctx.model.name} weights are {ctx.model.dtype})" if ctx.model and ctx.model.dtype else ""))
        for path in precision:
            out.change(path, "auto", path.startswith(chosen), "DS136", why)
    for path, section in silent:
        name = path.split(".")[-1]
        index = _field_index(ctx.schema["sections"][section])
        default = ctx.schema["sections"][section]["fields"].get(index.get(name, name), {}).get("default")
        if name == "device" and "offload" in section:
            out.add(DS143.finding(f'"{path}" is "auto": DeepSpeed uses "none" (no offload)'))
        else:
            out.add(DS136.finding(f'"{path}" is "auto": DeepSpeed uses the default {show(default)}'))
        out.change(path, "auto", default, "DS136", 'what DeepSpeed makes of "auto" (the default); write the '
                                                   "value you want")


_AUTO_NEEDS = {
    "train_micro_batch_size_per_gpu": "the micro batch per GPU of your loop",
    "gradient_accumulation_steps": "the gradient accumulation steps of your loop",
    "train_batch_size": "micro batch x gradient accumulation x world size (or drop the key)",
    "optimizer.params.lr": "your learning rate", "scheduler.params.warmup_max_lr": "your peak learning rate",
    "scheduler.params.warmup_num_steps": "your warmup steps",
    "scheduler.params.total_num_steps": "the optimizer steps of the whole run",
}


def _engine_value_for_auto(path: str, config: dict) -> Any:
    """A concrete replacement for an "auto" under the engine where one is certain, else MISSING."""
    if path == "gradient_clipping":
        return 1.0
    if path == "scheduler.params.warmup_min_lr":
        return 0
    return MISSING
