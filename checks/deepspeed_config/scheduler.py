"""DS124-DS128, DS116: the scheduler DeepSpeed builds (``engine.py`` ``_scheduler_from_config``,
``deepspeed/runtime/lr_schedules.py``)."""

from __future__ import annotations

from typing import Any

from .autos import _AUTO_NEEDS
from .result import CheckContext, CheckResult
from .rules import DS116, DS124, DS125, DS126, DS127, DS128, DS137
from .values import MISSING, is_auto, is_number, listing, show, suggest


def _check_lr(lr: Any, where: str, out: CheckResult) -> None:
    if is_number(lr) and lr >= 5e-4:
        out.add(DS128.finding(f'"{where}": {show(lr)}'))


def check_scheduler(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS124-DS127 (and DS128 on warmup_max_lr)."""
    scheduler = config.get("scheduler")
    if scheduler is None:
        return
    if not isinstance(scheduler, dict):
        out.add(DS137.finding(f'"scheduler" must be an object, got {show(scheduler)}'))
        return
    name = scheduler.get("type")
    if name is None:
        return
    if not isinstance(name, str):
        out.add(DS137.finding(f'"scheduler.type" must be a string, got {show(name)}'))
        return
    known = ctx.schema["schedulers"]
    params = scheduler.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        out.add(DS137.finding(f'"scheduler.params" must be an object, got {show(params)}'))
        return
    if name not in known:
        if name not in ctx.schema.get("torch_schedulers", []):
            guess = suggest(name, list(known) + ctx.schema.get("torch_schedulers", []))
            out.add(DS124.finding(f'"scheduler.type": "{name}": DeepSpeed does not recognize LR scheduler {name}'
                                  + (f'; did you mean "{guess}"?' if guess else "")))
            if guess:
                out.change("scheduler.type", name, guess, "DS124", "the scheduler's exact name")
        else:
            wrapper = _optimizer_wrapper(config)
            if wrapper:
                out.add(DS124.finding(
                    f'"scheduler.type": "{name}" is torch\'s: DeepSpeed builds it on the engine\'s optimizer, here '
                    f"{wrapper}, which is no torch.optim.Optimizer: torch refuses it at initialize ('TypeError: "
                    f"... is not an Optimizer')",
                    fix=f"Use one of DeepSpeed's schedulers ({', '.join(known)}; WarmupCosineLR for a cosine decay), "
                        f"or remove the scheduler block and build torch.optim.lr_scheduler.{name} in the script on "
                        f"the optimizer deepspeed.initialize returns, passing it as lr_scheduler="))
        return
    spec = known[name]
    missing = [p for p in spec["required"] if p not in params]
    if missing:
        out.add(DS125.finding(f'{name} without {", ".join(missing)}: __init__() missing required positional '
                              f"argument(s): {', '.join(repr(m) for m in missing)}"))
        if ctx.launch == "trainer" and missing == ["total_num_steps"]:
            out.change("scheduler.params.total_num_steps", MISSING, "auto", "DS125",
                       "the Trainer fills it with the run's optimizer steps")
        else:
            for param in missing:
                out.cannot_fix(f"scheduler.params.{param}", _AUTO_NEEDS.get(f"scheduler.params.{param}",
                                                                            "the value of your run"))
    unknown = [p for p in params if p not in spec["params"]]
    if unknown:
        out.add(DS126.finding(f'{name} does not take {listing(unknown)}; it takes '
                              f'{", ".join(p for p in spec["params"] if p != "last_batch_iteration")}'))
    warmup = params.get("warmup_num_steps", MISSING)
    if warmup is not MISSING and "warmup_num_steps" in spec["params"] and not is_auto(warmup):
        if not (isinstance(warmup, int) and not isinstance(warmup, bool)) or warmup <= 0:
            out.add(DS127.finding(f'"scheduler.params.warmup_num_steps" is {show(warmup)}: warmup_num_steps must '
                                  "be a positive integer"))
            if is_number(warmup) and warmup > 0:
                out.change("scheduler.params.warmup_num_steps", warmup, max(1, int(warmup)), "DS127",
                           "an integer")
        else:
            total = params.get("total_num_steps")
            if is_number(total) and warmup >= total:
                out.add(DS127.finding(f"warmup_num_steps {warmup} >= total_num_steps {show(total)}: the learning "
                                      "rate never decays", severity="warning"))
    low, high = params.get("warmup_min_lr"), params.get("warmup_max_lr")
    if is_number(low) and is_number(high) and low > high:
        out.add(DS116.finding(f"warmup_min_lr {show(low)} > warmup_max_lr {show(high)}"))
        out.change("scheduler.params.warmup_min_lr", low, high, "DS116", "swapped with warmup_max_lr")
        out.change("scheduler.params.warmup_max_lr", high, low, "DS116", "swapped with warmup_min_lr")
    _check_lr(params.get("warmup_max_lr"), "scheduler.params.warmup_max_lr", out)


def _optimizer_wrapper(config: dict) -> str:
    """The class DeepSpeed wraps the optimizer in (``engine.py`` ``_configure_optimizer``: ZeRO's optimizers, and
    the fp16 and bf16 ones without ZeRO), which ``_scheduler_from_config`` hands a scheduler of the config; "" for
    a plain torch optimizer (ZeRO off, fp32)."""
    zero = config.get("zero_optimization")
    stage = zero.get("stage", 0) if isinstance(zero, dict) else 0
    on = {k for k in ("fp16", "bf16") if isinstance(config.get(k), dict) and config[k].get("enabled") is True}
    if isinstance(stage, int) and stage >= 3:
        return "DeepSpeedZeroOptimizer_Stage3 (ZeRO-3)"
    if isinstance(stage, int) and stage >= 1:
        return f"DeepSpeedZeroOptimizer (ZeRO-{stage})"
    if on:  # FP16_Optimizer, FP16_UnfusedOptimizer or BF16_Optimizer, by version and device
        return f"DeepSpeed's {'/'.join(sorted(on))} optimizer wrapper"
    return ""
