"""DS117, DS120-DS123, DS128, DS129, DS137: the optimizer DeepSpeed builds (``deepspeed/runtime/engine.py``
``_configure_optimizer``, ``_configure_basic_optimizer``, ``_do_optimizer_sanity_check``)."""

from __future__ import annotations

from .keys import MAX_UNKNOWN_SHOWN, _report_more_unknown
from .result import CheckContext, CheckResult
from .rules import DS117, DS118, DS120, DS121, DS122, DS123, DS128, DS129, DS137
from .scheduler import _check_lr, check_scheduler
from .values import MISSING, as_bool, get_path, is_auto, is_number, show, suggest
from .zero import offload_device, zero_stage


def check_optimizer(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS117, DS120-DS129."""
    schema = ctx.schema
    stage = zero_stage(config)
    optimizer = config.get("optimizer")
    has_block = isinstance(optimizer, dict) and optimizer.get("type") is not None
    client = ctx.client_optimizer if ctx.launch == "engine" else not has_block
    if ctx.launch == "engine" and not has_block and not ctx.client_optimizer:
        if stage in (1, 2):
            msg = f"zero stage {stage} requires an optimizer (AssertionError at initialize)"
        elif stage == 3:
            msg = ("ZeRO 3 with no optimizer fails at the first step: 'DeepSpeedZeRoOffload' object has no "
                   "attribute 'set_gradient_accumulation_boundary'")
        else:
            msg = "no optimizer: engine.backward fails with 'must provide optimizer during init in order to use backward'"
        out.add(DS120.finding(f"no optimizer block, no client optimizer (--launch engine): {msg}"))
        peak = get_path(config, "scheduler.params.warmup_max_lr")
        lr = peak if is_number(peak) else 2e-5
        out.change("optimizer", MISSING, {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0}}, "DS120",
                   f"DeepSpeed builds the optimizer from this block (lr {show(lr)}"
                   + (" = the scheduler's warmup_max_lr)" if is_number(peak) else ": choose yours)"))
    if ctx.launch == "engine" and has_block and ctx.client_optimizer:
        out.add(DS117.finding(f'optimizer block {show(optimizer.get("type"))} with --client-optimizer: '
                              "the block is not used"))
    offloading = offload_device(config, "offload_optimizer") in ("cpu", "nvme")
    if offloading and client and as_bool(config.get("zero_force_ds_cpu_optimizer", True)) is not False:
        who = "the HF Trainer's optimizer (no optimizer block)" if ctx.launch == "trainer" else "--client-optimizer"
        fix = None
        if ctx.launch == "engine" and has_block:
            fix = ("Stop passing optimizer= to deepspeed.initialize (DeepSpeed then builds DeepSpeedCPUAdam from "
                   "your optimizer block), pass a deepspeed.ops.adam.DeepSpeedCPUAdam instead, or set "
                   '"zero_force_ds_cpu_optimizer": false (slow).')
        elif ctx.launch == "engine":
            fix = ("Pass a deepspeed.ops.adam.DeepSpeedCPUAdam as optimizer=, or drop optimizer= and add an "
                   '"optimizer" block (DeepSpeed builds DeepSpeedCPUAdam), or set "zero_force_ds_cpu_optimizer": '
                   "false (slow).")
        out.add(DS121.finding(f"offload_optimizer device {offload_device(config, 'offload_optimizer')} with "
                              f"{who}: You are using ZeRO-Offload with a client provided optimizer", fix=fix))
        if not has_block:
            out.change("optimizer", MISSING, {"type": "AdamW", "params": {"lr": "auto" if ctx.launch == "trainer"
                                                                      else 2e-5, "weight_decay": "auto"
                                                                      if ctx.launch == "trainer" else 0.0}},
                       "DS121", "DeepSpeed then builds DeepSpeedCPUAdam for the offloaded optimizer")
    if has_block and not (ctx.launch == "engine" and ctx.client_optimizer):
        name = optimizer.get("type")
        if not isinstance(name, str):
            out.add(DS137.finding(f'"optimizer.type" must be a string, got {show(name)}'))
        else:
            known_ds = schema["optimizers"]["deepspeed"]
            known_torch = schema["optimizers"]["torch"]
            if name.lower() not in known_ds and name not in known_torch:
                guess = "AdamW" if "adam" in name.lower() else suggest(name, known_ds + known_torch)
                out.add(DS122.finding(f'"optimizer.type": "{name}": {name} is not a supported DeepSpeed Optimizer'
                                      + (f'; did you mean "{guess}"?' if guess else ""),
                                      fix=(f'Use "type": "{guess}". ' if guess else "") + DS122.fix))
                if guess:
                    out.change("optimizer.type", name, guess, "DS122", f"{name} is not a DeepSpeed optimizer name")
            elif stage and stage > 0 and (name.lower() if name.lower() in known_ds else name) not in \
                    schema["optimizers"]["zero_tested"] and \
                    as_bool(config.get("zero_allow_untested_optimizer", False)) is not True:
                out.add(DS123.finding(f'"optimizer.type": "{name}" with ZeRO stage {stage}: You are using an '
                                      "untested ZeRO Optimizer"))
                out.change("zero_allow_untested_optimizer", config.get("zero_allow_untested_optimizer", MISSING),
                           True, "DS123", f"accept {name} under ZeRO (verify convergence)")
        params = optimizer.get("params", {})
        if params is not None and not isinstance(params, dict):
            out.add(DS137.finding(f'"optimizer.params" must be an object, got {show(params)}'))
        elif isinstance(params, dict):
            if "max_grad_norm" in params:
                out.add(DS129.finding(f'"optimizer.params.max_grad_norm": {show(params["max_grad_norm"])}'))
                out.change("optimizer.params.max_grad_norm", params["max_grad_norm"], MISSING, "DS129",
                           "DeepSpeed refuses it in the optimizer")
                if "gradient_clipping" not in config and is_number(params["max_grad_norm"]):
                    out.change("gradient_clipping", MISSING, params["max_grad_norm"], "DS129",
                               "DeepSpeed clips gradients with this key")
            lr = params.get("lr")
            if lr is not None and not is_auto(lr) and not is_number(lr):
                out.add(DS137.finding(f'"optimizer.params.lr" must be a number, got {show(lr)}'))
            elif is_number(lr) and lr < 0:
                out.add(DS137.finding(f'"optimizer.params.lr" is {show(lr)}: Invalid learning rate (torch.optim '
                                      "refuses a negative one)"))
            _check_lr(lr, "optimizer.params.lr", out)
            if isinstance(name, str):
                _check_optimizer_params(name, params, config, ctx, out)
            scheduler = config.get("scheduler")
            peak = get_path(config, "scheduler.params.warmup_max_lr") if isinstance(scheduler, dict) else MISSING
            if "lr" not in params and (peak is MISSING or peak is None) and isinstance(name, str) and \
                    name.lower() in ("adam", "adamw", "lion", "lamb", "adagrad"):
                out.add(DS128.finding(f'optimizer {name} without "lr": DeepSpeed builds it with the class '
                                      "default 1e-3 (FusedAdam) and no scheduler sets it",
                                      fix='Write "lr" in optimizer.params (1e-5 to 5e-5 for full fine-tuning).'))
    check_scheduler(config, ctx, out)


def optimizer_class(name: str, config: dict) -> str | None:
    """The class DeepSpeed builds for ``optimizer.type`` ``name`` (engine.py ``_configure_basic_optimizer``):
    ``FusedAdam``, ``DeepSpeedCPUAdam`` with offload, ``torch.optim.AdamW`` with ``torch_adam``, ...; None when
    it cannot be told (MuAdam, Muon)."""
    low = name.lower()
    offload = offload_device(config, "offload_optimizer") in ("cpu", "nvme")
    torch_adam = bool(as_bool(get_path(config, "optimizer.params.torch_adam", False)))
    if low in ("adam", "adamw"):
        if torch_adam:
            return "torch.optim.AdamW" if low == "adamw" else "torch.optim.Adam"
        return "DeepSpeedCPUAdam" if offload else "FusedAdam"
    if low == "lion":
        return "DeepSpeedCPULion" if offload else "FusedLion"
    if low == "adagrad":
        return "DeepSpeedCPUAdagrad" if offload else "torch.optim.Adagrad"
    if low == "lamb":
        return "FusedLamb"
    if low in ("muadam", "muadamw", "musgd", "muon"):
        return None
    return f"torch.optim.{name}"


def _check_optimizer_params(name: str, params: dict, config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS118: keys of optimizer.params the built class does not take."""
    cls = optimizer_class(name, config)
    accepted = ctx.schema["optimizers"].get("classes", {}).get(cls) if cls else None
    if accepted is None:
        return
    engine_keys = ctx.schema["optimizers"].get("engine_params", []) if name.lower() in ("adam", "adamw") else []
    unknown = 0
    for key in params:
        if key in accepted or key in engine_keys or key == "max_grad_norm" and cls != "FusedLamb":
            continue
        unknown += 1
        if unknown > MAX_UNKNOWN_SHOWN:
            out.change(f"optimizer.params.{key}", params[key], MISSING, "DS118", f"{cls} does not take it")
            continue
        guess = suggest(key, accepted + engine_keys)
        out.add(DS118.finding(f'"optimizer.params.{key}": {cls} does not take it'
                              + (f'; did you mean "{guess}"?' if guess else "")
                              + f" ({cls} takes {', '.join(accepted)})",
                              fix=f'Rename it to "{guess}".' if guess else DS118.fix))
        if guess and guess not in params:
            out.change(f"optimizer.params.{key}", params[key], MISSING, "DS118", f'misspelled; moves to "{guess}"')
            out.change(f"optimizer.params.{guess}", MISSING, params[key], "DS118", f'the value of "{key}"')
        else:
            out.change(f"optimizer.params.{key}", params[key], MISSING, "DS118", f"{cls} does not take it")
    _report_more_unknown('in "optimizer.params"', unknown, DS118, out)
