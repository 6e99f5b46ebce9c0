"""DS102-DS105: the batch triple, derived exactly as ``deepspeed/runtime/config.py``
``_set_batch_related_parameters`` and ``_batch_assertion`` do."""

from __future__ import annotations

from .result import CheckContext, CheckResult
from .rules import DS102, DS103, DS104, DS105
from .values import BATCH_KEYS, MISSING, is_auto, is_number, positive_int, show


def derive_batch(train: int | None, micro: int | None, grad_acc: int | None, world_size: int
                 ) -> tuple[int | None, int | None, int | None, dict[str, str], str | None]:
    """DeepSpeed's batch derivation, exactly (deepspeed/runtime/config.py ``_set_batch_related_parameters``).

    Args: the three values as given (None when absent) and the data-parallel world size.
    Returns ``(train, micro, grad_acc, how, error)``: the values DeepSpeed ends with, for each derived one how it
    was derived, and the assertion message DeepSpeed raises (``_batch_assertion``), or None.
    """
    how: dict[str, str] = {}
    if train is not None and micro is not None and grad_acc is not None:
        pass
    elif train is not None and micro is not None:
        grad_acc = train // micro // world_size
        how["gradient_accumulation_steps"] = f"{train} // {micro} // {world_size}"
    elif train is not None and grad_acc is not None:
        micro = train // world_size // grad_acc
        how["train_micro_batch_size_per_gpu"] = f"{train} // {world_size} // {grad_acc}"
    elif micro is not None and grad_acc is not None:
        train = micro * grad_acc * world_size
        how["train_batch_size"] = f"{micro} x {grad_acc} x {world_size}"
    elif train is not None:
        grad_acc, micro = 1, train // world_size
        how["gradient_accumulation_steps"] = "1 (default)"
        how["train_micro_batch_size_per_gpu"] = f"{train} // {world_size}"
    elif micro is not None:
        train, grad_acc = micro * world_size, 1
        how["train_batch_size"] = f"{micro} x {world_size}"
        how["gradient_accumulation_steps"] = "1 (default)"
    else:
        return None, None, grad_acc, how, "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
    for name, value in (("Train batch size", train), ("Micro batch size per gpu", micro),
                        ("Gradient accumulation steps", grad_acc)):
        if value <= 0:
            return train, micro, grad_acc, how, f"{name}: {value} has to be greater than 0"
    if train != micro * grad_acc * world_size:
        return train, micro, grad_acc, how, (
            "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
            f"gradient_acc_step * world_size {train} != {micro} * {grad_acc} * {world_size}")
    return train, micro, grad_acc, how, None


def valid_world_sizes(train, micro, grad_acc, limit: int = 64) -> list[int]:
    """World sizes 1..limit on which DeepSpeed accepts the given (possibly partial) triple."""
    return [ws for ws in range(1, limit + 1) if derive_batch(train, micro, grad_acc, ws)[4] is None]


def check_batch(config: dict, ctx: CheckContext, out: CheckResult, origin: dict[str, str]) -> None:
    """DS102-DS105 on the batch triple of ``config`` (after the Trainer's fills, if any)."""
    given: dict[str, int | None] = {}
    usable = True
    for key in BATCH_KEYS:
        value = config.get(key, MISSING)
        if value is MISSING or value is None:
            given[key] = None
            out.provenance[key] = "default" if key == "gradient_accumulation_steps" else "unset"
            continue
        if is_auto(value):
            usable = False
            out.provenance[key] = origin.get(key, 'auto (unfilled)')
            continue
        n = positive_int(value)
        if n is None:
            usable = False
            kind = ("a string" if isinstance(value, str) else "a boolean" if isinstance(value, bool)
                    else "fractional" if is_number(value) and value > 0 else "not greater than 0")
            out.add(DS103.finding(f'"{key}" is {show(value)} ({kind})'))
            if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
                out.change(key, value, int(value), "DS103", "an integer, not a string")
            continue
        if isinstance(value, float):
            out.add(DS103.finding(f'"{key}" is {show(value)}: use the integer {n}', severity="warning"))
            out.change(key, value, n, "DS103", "an integer")
        given[key] = n
        out.provenance[key] = origin.get(key, "user")
    if not usable:
        return
    ws = ctx.world_size
    train, micro, grad_acc = (given[k] for k in BATCH_KEYS)
    d_train, d_micro, d_acc, how, error = derive_batch(train, micro, grad_acc, ws)
    for key, text in how.items():
        out.provenance[key] = f"derived: {text}" if "default" not in text else "default: 1"
    out.batch = {"train_batch_size": d_train, "train_micro_batch_size_per_gpu": d_micro,
                 "gradient_accumulation_steps": d_acc, "world_size": ws}
    if error and error.startswith("Either"):
        out.add(DS104.finding(f"train_batch_size and train_micro_batch_size_per_gpu are both unset: {error}"))
        return
    if error:
        fits = valid_world_sizes(train, micro, grad_acc)
        fits_text = (f"; this triple holds on world size {', '.join(map(str, fits[:8]))}"
                     if fits else "; it holds on no world size")
        fix_micro = micro if micro is not None else max(1, (train or 1) // max(1, ws * (grad_acc or 1)))
        fix_acc = grad_acc if grad_acc is not None else max(1, (train or 1) // max(1, ws * fix_micro))
        fixed_train = fix_micro * fix_acc * ws
        triple = (f"train_batch_size {fixed_train} = micro {fix_micro} x gradient_accumulation_steps {fix_acc} "
                  f"x world size {ws}")
        rule_ = DS103 if "greater than 0" in error else DS102
        out.add(rule_.finding(f"world size {ws} ({ctx.world_size_source}): {error}{fits_text}",
                              fix=f"Set {triple}; or drop train_batch_size so DeepSpeed derives it"
                                  + (' (under the HF Trainer: "auto")' if ctx.launch == "trainer" else "") + "."))
        if ctx.launch == "trainer":
            for key in BATCH_KEYS:
                if key in config and not is_auto(config[key]):
                    out.change(key, config[key], "auto", rule_.id, "the Trainer fills it from TrainingArguments")
        else:
            out.change("train_batch_size", config.get("train_batch_size", MISSING), fixed_train, rule_.id, triple)
            out.change("train_micro_batch_size_per_gpu", config.get("train_micro_batch_size_per_gpu", MISSING),
                       fix_micro, rule_.id, triple)
            out.change("gradient_accumulation_steps", config.get("gradient_accumulation_steps", MISSING),
                       fix_acc, rule_.id, triple)
        out.batch["error"] = error
        return
    if train is not None and ctx.launch == "engine":
        fits = valid_world_sizes(train, micro, grad_acc)
        if fits != list(range(1, 65)):
            out.add(DS105.finding(f"train_batch_size {train} holds on world size "
                                  f"{', '.join(map(str, fits[:8])) or 'none'} only; this run: {ws} "
                                  f"({ctx.world_size_source})"))
