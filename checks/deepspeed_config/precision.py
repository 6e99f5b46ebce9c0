"""DS110-DS114: fp16 and bf16 against each other, the GPU and the model's weights; fp16 loss scaling."""

from __future__ import annotations

from typing import Any

from .result import CheckContext, CheckResult
from .rules import DS110, DS111, DS112, DS113, DS114
from .values import MISSING, as_bool, get_path, is_auto, is_number, show


def precision_of(config: dict) -> tuple[bool, bool]:
    """``(fp16, bf16)`` as DeepSpeed reads them ("auto" counts as off: DeepSpeedConfigModel drops it)."""
    def enabled(section: Any) -> bool:
        if not isinstance(section, dict):
            return False
        value = section.get("enabled", False)
        return False if is_auto(value) else bool(as_bool(value))

    bf16_section = config.get("bf16") if config.get("bf16") is not None else config.get("bfloat16")
    return enabled(config.get("fp16")), enabled(bf16_section)


def _trainer_flags(out: CheckResult) -> dict[str, bool]:
    """The precision flags of TrainingArguments (``out.training_args``, filled by the Trainer checks) that are true."""
    args = out.training_args or {}
    return {k: True for k in ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval", "tf32") if args.get(k) is True}


def _bf16_origin(ctx: CheckContext, out: CheckResult) -> str:
    """Where the config's bf16.enabled came from, for the evidence."""
    written = get_path(out.original, "bf16.enabled")
    if is_auto(written):
        return 'the ds_config\'s bf16.enabled "auto" takes it (trainer_config_process)'
    if written is MISSING and ctx.launch == "trainer":
        return "accelerate adds a bf16 block for it (set_mixed_precision)"
    return "the ds_config's bf16.enabled is true"


def check_precision(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS110-DS114 on ``config`` (after the Trainer's fills) and, under the Trainer, on the TrainingArguments flags
    (``out.training_args``): ``TrainingArguments.__post_init__`` (transformers/training_args.py) refuses fp16 with
    bf16 ("At most one of fp16 and bf16 can be True, but not both"), tf32 below compute capability 8.0 ("--tf32
    requires Ampere or a newer GPU arch", ``is_torch_tf32_available``: major < 8) and bf16 where
    ``torch.cuda.is_bf16_supported()`` is false. Under the Trainer --fix writes "auto" (the config follows
    TrainingArguments) and names the TrainingArguments values to change."""
    fp16, bf16 = precision_of(config)
    trainer = ctx.launch == "trainer"
    flags = _trainer_flags(out) if trainer else {}
    for a, b, what in (("fp16", "bf16", ""), ("fp16_full_eval", "bf16_full_eval", " for full eval")):
        if flags.get(a) and flags.get(b):
            out.add(DS110.finding(f"TrainingArguments {a}=True and {b}=True: TrainingArguments raises ValueError "
                                  f'"At most one of fp16 and bf16 can be True{what}, but not both"',
                                  fix=f"Keep one in TrainingArguments: {b} on compute capability 8.0 or newer, {a} "
                                      "on V100/T4."))
            out.cannot_fix(f"TrainingArguments {a} / {b}", "one of them true, not both")
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
        trainer_bf16 = [k for k in ("bf16", "bf16_full_eval") if flags.get(k)]
        if (bf16 or trainer_bf16) and not gpu.bf16:
            where = []
            if trainer_bf16:
                where.append("TrainingArguments " + " and ".join(f"{k}=True" for k in trainer_bf16))
            if bf16:
                where.append(_bf16_origin(ctx, out) if trainer_bf16 else "the ds_config's bf16.enabled is true")
            out.add(DS111.finding(
                f"bf16 on {gpu.name} (compute capability {cc} < 8.0): " + "; ".join(where) + ". The GPU has no "
                "bf16 arithmetic: where torch.cuda.is_bf16_supported() is false TrainingArguments raises ValueError "
                "\"Your setup doesn't support bf16/gpu\" and DeepSpeed \"Type bf16 is not supported on your "
                "device\"; where torch emulates it (its default, including_emulation=True) bf16 runs without tensor "
                "cores, several times slower than fp16, and kernels built for 8.0+ refuse it",
                fix=(DS111.fix if trainer else
                     'Use "fp16": {"enabled": true} (dynamic loss scaling) and "bf16": {"enabled": false}.')))
            if trainer:
                # under the Trainer the precision is TrainingArguments'; the config follows it with "auto"
                for key in ("bf16.enabled", "fp16.enabled"):
                    written = get_path(out.original, key)
                    if not is_auto(written) and (written is not MISSING or key == "fp16.enabled"):
                        out.change(key, written, "auto", "DS111", "the Trainer fills it from TrainingArguments "
                                   + key.split(".")[0] + (f" ({gpu.name} has fp16, not bf16)"
                                                          if key == "fp16.enabled" else ""))
                if trainer_bf16 or is_auto(get_path(out.original, "bf16.enabled")) or \
                        get_path(out.original, "bf16.enabled") is MISSING:
                    out.cannot_fix("TrainingArguments bf16 / fp16", "bf16: false" + (
                        ", bf16_full_eval: false" if flags.get("bf16_full_eval") else "") + ", fp16: true (the "
                        "config's \"auto\" follows them; fp16 is the 16-bit type "
                        f"{gpu.name} has)")
            else:
                out.change("bf16.enabled", True, False, "DS111", f"{gpu.name} has no bf16")
                if not fp16:
                    out.change("fp16.enabled", get_path(config, "fp16.enabled"), True, "DS111",
                               f"fp16 is the 16-bit type {gpu.name} has")
        if flags.get("tf32") and gpu.capability < (8, 0):
            out.add(DS111.finding(f"TrainingArguments tf32=True on {gpu.name} (compute capability {cc} < 8.0): "
                                  "TrainingArguments raises ValueError \"--tf32 requires Ampere or a newer GPU arch, "
                                  "cuda>=11 and torch>=1.7\" (is_torch_tf32_available: major < 8)",
                                  title="tf32 on a GPU without TF32",
                                  fix="Remove tf32 from TrainingArguments (or tf32: false): TF32 needs compute "
                                      "capability 8.0 or newer."))
            out.cannot_fix("TrainingArguments tf32", f"tf32: false ({gpu.name} has no TF32)")
        trainer_fp16 = [k for k in ("fp16", "fp16_full_eval") if flags.get(k)]
        if (fp16 or trainer_fp16) and gpu.capability < (7, 0):
            out.add(DS112.finding(f"fp16 enabled on {gpu.name} (compute capability {cc} < 7.0)"
                                  + (" by TrainingArguments " + " and ".join(f"{k}=True" for k in trainer_fp16)
                                     if trainer_fp16 else "")))
    model = ctx.model
    if model is not None and model.dtype:
        if fp16 and model.dtype == "bfloat16" and not bf16:
            out.add(DS113.finding(f"fp16 enabled; {model.name} weights are bfloat16 ({model.source})"
                                  + (" (TrainingArguments fp16=True)" if flags.get("fp16") else "")))
            written = get_path(out.original, "fp16.enabled")
            if trainer and (is_auto(written) or written is MISSING or flags.get("fp16")):
                # the Trainer's precision is TrainingArguments': the config follows it with "auto"
                out.cannot_fix("TrainingArguments fp16 / bf16", 'fp16=False, bf16=True (the config\'s "auto" '
                                                               "follows them)")
                if gpu is None or gpu.bf16:
                    for key in ("fp16.enabled", "bf16.enabled"):
                        if not is_auto(get_path(out.original, key)):
                            out.change(key, get_path(out.original, key), "auto", "DS113",
                                       f"the Trainer fills it from TrainingArguments ({model.name} is a bf16 model)")
            elif gpu is None or gpu.bf16:
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
