"""ZeRO: the stage and offload devices DeepSpeed will use, and DS141, DS142, DS144, DS145."""

from __future__ import annotations

from .result import CheckContext, CheckResult
from .rules import DS141, DS142, DS144, DS145
from .values import MISSING, as_bool, digits_int, get_path, is_auto, is_number, show


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
    check_buffers(config, zero, stage, ctx, out)


def _zero_number(zero: dict, keys: tuple[str, ...], default: int, auto: int | None) -> tuple[int | None, bool]:
    """The value of the first of ``keys`` in ``zero`` (a field and its alias), as an int: ``default`` when absent,
    ``auto`` for "auto" (None: unknown), None when not a number (DS137 says so). Also whether it was given."""
    for key in keys:
        if key in zero:
            value = zero[key]
            if is_auto(value):
                return auto, True
            if is_number(value) and value >= 0:
                return int(value), True
            return None, True
    return default, False


def check_buffers(config: dict, zero: dict, stage: int, ctx: CheckContext, out: CheckResult) -> None:
    """DS144: DeepSpeed's communication buffers per GPU (:func:`dsdoctor.checks.memory.communication_buffer_bytes`,
    the formula ``dsdoctor estimate`` uses for its ``deepspeed_buffers``) against the GPU's memory: a warning above
    10% of it, info from 4 GiB when the GPU is not known. Records them in ``out.buffers`` (bytes by kind)."""
    from dsdoctor.checks.memory import GIB, communication_buffer_bytes

    from .precision import precision_of

    hidden = ctx.model.hidden_size if ctx.model and ctx.model.hidden_size else None
    square = hidden * hidden if hidden else None
    reduce, reduce_given = _zero_number(zero, ("reduce_bucket_size",), 500_000_000, square)
    prefetch, _ = _zero_number(zero, ("stage3_prefetch_bucket_size", "prefetch_bucket_size"), 50_000_000,
                               int(0.9 * square) if square else None)
    live, _ = _zero_number(zero, ("stage3_max_live_parameters", "max_live_parameters"), 1_000_000_000, None)
    overlap = zero.get("overlap_comm")
    # default None, then true for stage 3 only (deepspeed/runtime/zero/config.py overlap_comm_valid)
    overlap = as_bool(overlap) if overlap is not None and not is_auto(overlap) else stage == 3
    contiguous = zero.get("contiguous_gradients", True)
    contiguous = True if is_auto(contiguous) else as_bool(contiguous) is not False
    if reduce is None or prefetch is None or live is None or overlap is None:
        return
    fp16, bf16 = precision_of(config)
    element = 2 if fp16 or bf16 or ctx.launch == "trainer" and "auto" in (
        str(get_path(config, "fp16.enabled", "")), str(get_path(config, "bf16.enabled", ""))) else 4
    offload = offload_device(config, "offload_optimizer") != "none"
    layer, arch = 0, None
    if stage == 3 and ctx.model is not None:  # the layer being computed is gathered too (analytic count, no torch)
        try:
            from dsdoctor.models import resolve_arch

            arch = resolve_arch(ctx.model.name)
            layer = arch.layer_params
        except Exception:  # an architecture the registry cannot count: the prefetch alone
            layer, arch = 0, None
    reuse, _ = _zero_number(zero, ("stage3_max_reuse_distance", "max_reuse_distance"), 1_000_000_000, None)
    buffers = communication_buffer_bytes(stage, ctx.world_size, element, reduce, overlap, contiguous,
                                         prefetch_bucket_size=prefetch, max_live_parameters=live,
                                         layer_params=layer, offload_optimizer=offload,
                                         offload_param=offload_device(config, "offload_param") != "none",
                                         arch=arch, max_reuse_distance=reuse if reuse is not None else 1_000_000_000)
    total = sum(buffers.values())
    if total < 2 ** 63:  # a 1e308-element bucket is a finding, not a 300-digit number in the JSON result
        out.buffers = {**buffers, "total": total}
    if total == 0:
        return
    try:
        gib = total / GIB
    except OverflowError:
        gib = float("inf")
    reduce_text = f"reduce_bucket_size {_count(reduce)}{'' if reduce_given else ' (default)'} elements x {element} bytes"
    if stage in (1, 2):
        evidence = (f"ZeRO-{stage}: {reduce_text} x {2 if overlap else 1} buffer{'s' if overlap else ''}"
                    + (" (overlap_comm: double buffers)" if overlap else "") + f" = {_count(gib, 2)} GiB per GPU "
                    "during the backward pass (stage_1_and_2.py setup_buckets); allgather_bucket_size allocates "
                    "no buffer")
    else:
        evidence = (f"ZeRO-3: {reduce_text} (reduction bucket, kept) + gathered parameters "
                    f"{_count(buffers['gathered_parameters'] / element)} elements (stage3_prefetch_bucket_size "
                    f"{_count(prefetch)}, at most stage3_max_live_parameters {_count(live)}; "
                    + (f"with the layer being computed, {_count(layer)}" if layer else "plus the layer being computed")
                    + ")" + (f" + {_count(buffers['gathered_at_loss'] / element)} elements kept gathered from the end "
                             f"of the forward pass for reuse within stage3_max_reuse_distance"
                             if buffers["gathered_at_loss"] else "") + f" = {_count(gib, 2)} GiB per GPU")
    target = int(min(2e8, square if square else 2e8))
    if stage in (1, 2):
        fix = (f"Lower reduce_bucket_size to {target:,}"
               + (f" (hidden_size^2 of {ctx.model.name}, what the HF Trainer's \"auto\" uses)"
                  if square and target < 2e8 else "")
               + (', or set "overlap_comm": false (one buffer instead of two)' if overlap else "") + ".")
    else:
        fix = (f"Lower reduce_bucket_size to {target:,} and stage3_prefetch_bucket_size / "
               "stage3_max_live_parameters (fewer parameters gathered ahead).")
    if reduce <= target:
        fix = ('Set "overlap_comm": false, or use a GPU with more memory.' if overlap and stage < 3 else
               "Use a GPU with more memory, or a smaller stage3_max_live_parameters.")
    budget = ctx.gpu.memory_bytes if ctx.gpu is not None and ctx.gpu.memory_bytes else None
    if budget and total > 0.1 * budget:
        out.add(DS144.finding(f"{evidence}, {_count(100 * total / budget)}% of {ctx.gpu.name}'s "
                              f"{budget / GIB:.0f} GiB", fix=fix))
        if reduce > target:
            out.change("zero_optimization.reduce_bucket_size", zero.get("reduce_bucket_size", MISSING), target,
                       "DS144", f"{target:,} elements: smaller gradient reduction buffers")
    elif budget is None and gib >= 4:
        out.add(DS144.finding(f"{evidence} (give --gpu to compare with its memory)", severity="info", fix=fix))


def _count(value: float, decimals: int = 0) -> str:
    """A count for the evidence: ``1,234,567`` (``decimals`` places), or ``1.23e+308`` past 10^15 (a bucket of
    1e308 elements is not written out in 309 digits)."""
    return f"{value:.3g}" if abs(value) >= 1e15 else f"{value:,.{decimals}f}"

