"""ZeRO: the stage and offload devices DeepSpeed will use, and DS141, DS142, DS144, DS145."""

from __future__ import annotations

from .result import CheckContext, CheckResult
from .rules import DS141, DS142, DS144, DS145
from .values import MISSING, as_bool, digits_int, is_auto, is_number, show


def zero_stage(config: dict) -> int | None:
    """The ZeRO stage DeepSpeed will use (0 when unset; None when invalid)."""
    zero = config.get("zero_optimization", MISSING)
    if zero is MISSING or zero is None:
        return 0
    if isinstance(zero, bool):
        return 1 if zero else 0
    if not isinstance(zero, dict):
        return None
    stage = zero.get("stage", 0)
    if is_auto(stage):
        return 0
    if digits_int(stage) is not None:
        stage = digits_int(stage)
    if isinstance(stage, float) and stage.is_integer():
        stage = int(stage)
    return stage if isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage <= 3 else None


def offload_device(config: dict, block: str) -> str:
    """The device of ``zero_optimization.<block>`` ("none" when absent or "auto"), deprecated flags included."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return "none"
    section = zero.get(block)
    if isinstance(section, dict):
        device = section.get("device", "none")
        return device if isinstance(device, str) and not is_auto(device) else "none"
    legacy = "cpu_offload" if block == "offload_optimizer" else "cpu_offload_param"
    return "cpu" if as_bool(zero.get(legacy)) else "none"


def check_zero(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS141, DS142, DS144 (DS140 comes from the key pass)."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return
    stage = zero_stage(config)
    if stage is None:
        return
    reduce_scatter = zero.get("reduce_scatter", True)
    # the assertion sits under `if self.reduce_scatter and self.partition_gradients`: stages 2 and 3
    if stage >= 2 and (is_auto(reduce_scatter) or as_bool(reduce_scatter) is not False):
        prescale = config.get("prescale_gradients", False)
        factor = config.get("gradient_predivide_factor", 1.0)
        if prescale and not is_auto(prescale):
            out.add(DS145.finding(f'"prescale_gradients": {show(prescale)} with ZeRO stage {stage} and '
                                  "reduce_scatter: pre-scale gradients is not yet supported"
                                  + (" (a non-empty string is true)" if isinstance(prescale, str) else "")))
            out.change("prescale_gradients", prescale, False, "DS145", "not supported with ZeRO reduce scatter")
        if is_number(factor) and factor != 1.0:
            out.add(DS145.finding(f'"gradient_predivide_factor": {show(factor)} with ZeRO stage {stage} and '
                                  "reduce_scatter: gradient_predivide_factor != 1.0 is not yet supported"))
            out.change("gradient_predivide_factor", factor, MISSING, "DS145", "not supported with ZeRO reduce scatter")
    if stage < 3 and offload_device(config, "offload_param") in ("cpu", "nvme"):
        out.add(DS141.finding(f"offload_param device {offload_device(config, 'offload_param')} with ZeRO stage "
                              f"{stage}"))
    if stage == 3:
        gather = None
        for key in ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                    "stage3_gather_fp16_weights_on_model_save"):
            if key in zero:
                gather = zero[key]
        if gather is None or as_bool(gather) is False or (is_auto(gather) and ctx.launch == "engine"):
            trainer = ctx.launch == "trainer"
            out.add(DS142.finding(
                "ZeRO stage 3, stage3_gather_16bit_weights_on_model_save "
                + (show(gather) if gather is not None else "unset (default false)")
                + ("; the HF Trainer's save_model writes partitioned (empty) weights" if trainer else
                   "; your own save must gather on every rank first (the reference trainer does)"),
                severity="warning" if trainer else "info"))
            out.change("zero_optimization.stage3_gather_16bit_weights_on_model_save", MISSING if gather is None
                       else gather, True, "DS142", "save full 16-bit weights / a non-empty adapter")
    if stage in (1, 2):
        overlap = zero.get("overlap_comm")
        # default: None, then true for stage 3 only (deepspeed/runtime/zero/config.py overlap_comm_valid)
        overlap = as_bool(overlap) if overlap is not None and not is_auto(overlap) else False
        sizes, given = [], []
        for key in ("reduce_bucket_size", "allgather_bucket_size"):
            given.append(key in zero)
            value = zero.get(key, 5e8)
            if is_auto(value):
                value = (ctx.model.hidden_size ** 2) if ctx.model and ctx.model.hidden_size else None
            sizes.append(value if is_number(value) else None)
        if overlap and all(s is not None for s in sizes):
            # 4.5 x sum x 2 bytes, in integers: exact, and no OverflowError for 1e308 elements
            bucket_bytes = 9 * (int(sizes[0]) + int(sizes[1]))
            gib = bucket_bytes / 2 ** 30
            budget = ctx.gpu.memory_bytes if ctx.gpu is not None and ctx.gpu.memory_bytes else None
            evidence = (f"overlap_comm with reduce_bucket_size {_count(sizes[0])}{'' if given[0] else ' (default)'} "
                        f"+ allgather_bucket_size {_count(sizes[1])}{'' if given[1] else ' (default)'} elements: "
                        f"about {_count(gib, 1)} GiB per GPU (4.5 x sum x 2 bytes)")
            target = int(min(2e8, (ctx.model.hidden_size ** 2) if ctx.model and ctx.model.hidden_size else 2e8))
            fix = (f"Lower reduce_bucket_size and allgather_bucket_size to {target:,}"
                   + (f" (hidden_size^2 of {ctx.model.name}, what the HF Trainer's \"auto\" uses)"
                      if ctx.model and ctx.model.hidden_size and target < 2e8 else "")
                   + ', or set "overlap_comm": false.')
            if max(sizes) <= target:
                fix = 'Set "overlap_comm": false, or use a GPU with more memory.'
            if budget and bucket_bytes > 0.1 * budget:
                out.add(DS144.finding(f"{evidence}, {_count(100 * bucket_bytes / budget)}% of {ctx.gpu.name}'s "
                                      f"{budget / 2 ** 30:.0f} GiB", fix=fix))
                for key, value in zip(("reduce_bucket_size", "allgather_bucket_size"), sizes):
                    if value > target:
                        out.change(f"zero_optimization.{key}", zero.get(key, MISSING), target, "DS144",
                                   f"{target:,} elements: smaller communication buffers")
            elif budget is None and gib >= 4:
                out.add(DS144.finding(f"{evidence} (give --gpu to compare with its memory)", severity="info",
                                      fix=fix))


def _count(value: float, decimals: int = 0) -> str:
    """A count for the evidence: ``1,234,567`` (``decimals`` places), or ``1.23e+308`` past 10^15 (a bucket of
    1e308 elements is not written out in 309 digits)."""
    return f"{value:.3g}" if abs(value) >= 1e15 else f"{value:,.{decimals}f}"

