"""DS110-DS114: fp16 and bf16 against each other, the GPU and the model's weights; fp16 loss scaling."""

from __future__ import annotations

from typing import Any

from .result import CheckContext, CheckResult
from .rules import DS110, DS111, DS112, DS113, DS114
from .values import as_bool, get_path, is_auto, is_number, show


def precision_of(config: dict) -> tuple[bool, bool]:
    """``(fp16, bf16)`` as DeepSpeed reads them ("auto" counts as off: DeepSpeedConfigModel drops it)."""
    def enabled(section: Any) -> bool:
        if not isinstance(section, dict):
            return False
        value = section.get("enabled", False)
        return False if is_auto(value) else bool(as_bool(value))

    bf16_section = config.get("bf16") if config.get("bf16") is not None else config.get("bfloat16")
    return enabled(config.get("fp16")), enabled(bf16_section)


def check_precision(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS110-DS114."""
    fp16, bf16 = precision_of(config)
    if fp16 and bf16:
        out.add(DS110.finding("fp16.enabled and bf16.enabled are both true: bfloat16 and fp16 modes cannot be "
                              "simultaneously enabled"))
        keep_bf16 = (ctx.gpu is None or ctx.gpu.bf16) and not (ctx.model and ctx.model.dtype == "float16")
        drop = "fp16" if keep_bf16 else "bf16"
        out.change(f"{drop}.enabled", True, False, "DS110", f"keep {'bf16' if keep_bf16 else 'fp16'}"
                   + (f" ({ctx.model.name} weights are {ctx.model.dtype})" if ctx.model and ctx.model.dtype else ""))
    gpu = ctx.gpu
    if gpu is not None:
        cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
        if bf16 and not gpu.bf16:
            out.add(DS111.finding(f"bf16 enabled on {gpu.name} (compute capability {cc} < 8.0)",
                                  fix=DS111.fix if ctx.launch == "trainer" else
                                  'Use "fp16": {"enabled": true} (dynamic loss scaling) and "bf16": {"enabled": false}.'))
            out.change("bf16.enabled", True, False, "DS111", f"{gpu.name} has no bf16")
            if ctx.launch == "trainer" and is_auto(get_path(out.original, "bf16.enabled")):
                out.cannot_fix("TrainingArguments bf16 / fp16", 'bf16=False, fp16=True (the config\'s "auto" '
                                                               "follows them)")
            if not fp16:
                out.change("fp16.enabled", get_path(config, "fp16.enabled"), True, "DS111",
                           f"fp16 is the 16-bit type {gpu.name} has")
        if fp16 and gpu.capability < (7, 0):
            out.add(DS112.finding(f"fp16 enabled on {gpu.name} (compute capability {cc} < 7.0)"))
    model = ctx.model
    if model is not None and model.dtype:
        if fp16 and model.dtype == "bfloat16" and not bf16:
            out.add(DS113.finding(f"fp16 enabled; {model.name} weights are bfloat16 ({model.source})"))
            if ctx.launch == "trainer" and is_auto(get_path(out.original, "fp16.enabled")):
                out.cannot_fix("TrainingArguments fp16 / bf16", 'fp16=False, bf16=True (the config\'s "auto" '
                                                               "follows them)")
            if gpu is None or gpu.bf16:
                out.change("fp16.enabled", True, False, "DS113", f"{model.name} is a bf16 model")
                out.change("bf16.enabled", get_path(config, "bf16.enabled"), True, "DS113",
                           f"{model.name} is a bf16 model")
        elif bf16 and model.dtype == "float16" and not fp16:
            out.add(DS113.finding(f"bf16 enabled; {model.name} weights are float16 ({model.source})",
                                  severity="info"))
    fp16_cfg = config.get("fp16") if isinstance(config.get("fp16"), dict) else {}
    if fp16:
        risky = []
        scale = fp16_cfg.get("loss_scale", 0)
        if is_number(scale) and scale > 0:
            risky.append(f"static loss_scale {show(scale)} (never backs off)")
        power = fp16_cfg.get("initial_scale_power", 16)
        if is_number(power) and power > 16:
            risky.append(f"initial_scale_power {show(power)} (> 16)")
        window = fp16_cfg.get("loss_scale_window", 1000)
        if is_number(window) and window < 1000:
            risky.append(f"loss_scale_window {show(window)} (< 1000: the scale is raised again every "
                         f"{show(window)} clean steps)")
        minimum = fp16_cfg.get("min_loss_scale", 1)
        if is_number(minimum) and minimum > 1:
            risky.append(f"min_loss_scale {show(minimum)} (> 1: the run exits sooner)")
        if risky:
            out.add(DS114.finding("fp16 with " + "; ".join(risky)))
