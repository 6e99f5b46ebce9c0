"""``"auto"`` outside the HF Trainer: DS101 (DeepSpeed receives the string) and DS136/DS143 (a validated
section drops it: the default)."""

from __future__ import annotations

from typing import Any

from .keys import _field_index
from .result import CheckContext, CheckResult
from .rules import DS101, DS136, DS143
from .precision import precision_of
from .values import MISSING, auto_paths, get_path, listing, show


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
        out.add(DS101.finding(f'{len(crash)} value(s) are "auto": ' + listing(crash)))
        for path in crash:
            guess = _engine_value_for_auto(path, config)
            if guess is not MISSING:
                out.change(path, "auto", guess, "DS101", "nothing fills \"auto\" outside the HF Trainer")
            else:
                out.cannot_fix(path, _AUTO_NEEDS.get(path, "the value your loop uses"))
    precision = [p for p, _ in silent if p in ("fp16.enabled", "bf16.enabled")]
    if precision:
        _fix_auto_precision(config, precision, ctx, out)
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


def sixteen_bit_type(ctx: CheckContext) -> tuple[str | None, str]:
    """The 16-bit type to train in on what is known of the run, and why: bf16 on a GPU that has it (compute
    capability 8.0+), fp16 on one that has only that (7.x), none below 7.0 (no tensor cores: DS112); without a GPU,
    the model's weight dtype decides; with neither, ``(None, why)``: nothing here tells bf16 from fp16.
    Source: deepspeed/runtime/engine.py ``_do_sanity_check`` (bf16 needs accelerator support); NVIDIA compute
    capabilities (bf16 from 8.0, tensor cores from 7.0)."""
    gpu, model = ctx.gpu, ctx.model
    weights = f"{model.name} weights are {model.dtype}" if model is not None and model.dtype else ""
    if gpu is not None:
        cc = f"compute capability {gpu.capability[0]}.{gpu.capability[1]}"
        if gpu.bf16:
            return "bf16", f"{gpu.name} has bf16 at {cc}" + (f"; {weights}" if weights else "")
        if gpu.capability >= (7, 0):
            return "fp16", f"{gpu.name} has no bf16 at {cc}" + (f"; {weights}" if weights else "")
        return None, f"{gpu.name} has neither bf16 nor tensor cores for fp16 at {cc}: fp32 trains there"
    if weights and model.dtype in ("bfloat16", "float16"):
        return ("bf16" if model.dtype == "bfloat16" else "fp16"), weights
    return None, "no --gpu and no --model with a weight dtype: bf16 or fp16 cannot be told here"


def _fix_auto_precision(config: dict, paths: list[str], ctx: CheckContext, out: CheckResult) -> None:
    """--fix for ``fp16.enabled`` / ``bf16.enabled`` that are "auto" under the engine. DeepSpeed drops "auto" (the
    default false), so the file trains in fp32 unless the other type is on: that reading is what the fix keeps,
    and any 16-bit type it turns on is said to be a change of precision (the training audit marks it too)."""
    fp16_on, bf16_on = precision_of(config)
    if fp16_on or bf16_on:
        on = "fp16" if fp16_on else "bf16"
        for path in paths:
            out.change(path, "auto", False, "DS136", f'DeepSpeed reads "auto" as false; {on} is enabled: one '
                                                     "16-bit type")
        return
    chosen, reason = sixteen_bit_type(ctx)
    if chosen is None:
        for path in paths:
            out.change(path, "auto", False, "DS136", 'what DeepSpeed makes of "auto": false, so the file trains '
                                                     "in fp32 (no 16-bit type on); " + reason)
        out.cannot_fix("fp16.enabled / bf16.enabled", "true for the 16-bit type you train in: bf16 on compute "
                       "capability 8.0+ (A100, H100, RTX 30xx/40xx), fp16 on V100/T4; false keeps fp32 (with --gpu "
                       "or --model, --fix chooses)")
        return
    target = f"{chosen}.enabled"
    out.change(target, get_path(config, target), True, "DS136",
               f'DeepSpeed reads "auto" as false (fp32); {chosen}, the 16-bit type "auto" stands for: {reason}')
    for path in paths:
        if path != target:
            out.change(path, "auto", False, "DS136", f"one 16-bit type: {chosen}; {reason}")


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
