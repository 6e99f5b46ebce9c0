"""DS102-DS106: the batch triple, derived exactly as ``deepspeed/runtime/config.py``
``_set_batch_related_parameters`` and ``_batch_assertion`` do, and the world sizes a file holds on."""

from __future__ import annotations

from .result import CheckContext, CheckResult
from .rules import DS102, DS103, DS104, DS105, DS106
from .values import BATCH_KEYS, MISSING, digits_int, is_auto, is_number, positive_int, show


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


def _divisor_near(n: int, near: int) -> int:
    """The divisor of ``n`` closest to ``near`` (the smaller one on a tie)."""
    best = 1
    d = 1
    while d * d <= n:
        if n % d == 0:
            for c in (d, n // d):
                if (abs(c - near), c) < (abs(best - near), best):
                    best = c
        d += 1
    return best


def batch_proposals(train: int | None, micro: int | None, grad_acc: int | None, world_size: int
                    ) -> list[tuple[str, dict[str, int | None]]]:
    """Batch triples that DeepSpeed accepts on ``world_size``, for a triple it refuses (:func:`derive_batch`
    returns a DS102 or DS103 error), best first: ``[(text, values)]``, ``values`` holding each of
    :data:`BATCH_KEYS` (None: the key is left out of the file).

    - keep the global batch ``train`` when the world size divides it: the given micro batch with the
      gradient_accumulation_steps that makes it, the given gradient_accumulation_steps with the micro batch that
      makes it, or (neither divides) the micro batch nearest the given one;
    - else the nearest triple below (micro batch and accumulation as given or derived, at least 1), saying that
      the global batch changes;
    - leave train_batch_size out so DeepSpeed derives it: only when a micro batch stays in the file, since
      without train_batch_size and train_micro_batch_size_per_gpu DeepSpeed refuses the file ("Either
      train_batch_size or train_micro_batch_size_per_gpu needs to be provided", DS104); without one it is
      replaced by the micro batch.

    Every proposal is checked with :func:`derive_batch` (DeepSpeed's own derivation and assertion,
    ``deepspeed/runtime/config.py`` ``_set_batch_related_parameters``, ``_batch_assertion``); the tests build
    DeepSpeed's ``DeepSpeedConfig`` from each. Returns [] when the triple is accepted or has no batch size at all.
    """
    if derive_batch(train, micro, grad_acc, world_size)[4] is None or (train is None and micro is None):
        return []
    ws = world_size
    found: list[tuple[str, dict[str, int | None]]] = []

    def add(text: str, t: int | None, m: int | None, a: int | None) -> None:
        values = {"train_batch_size": t, "train_micro_batch_size_per_gpu": m, "gradient_accumulation_steps": a}
        if derive_batch(t, m, a, ws)[4] is None and all(values != v for _, v in found):
            found.append((text, values))

    if train is not None and train % ws == 0:
        per_gpu = train // ws
        keeps = []
        if micro is not None and per_gpu % micro == 0:
            keeps.append((micro, per_gpu // micro))
        if grad_acc is not None and per_gpu % grad_acc == 0:
            keeps.append((per_gpu // grad_acc, grad_acc))
        if not keeps:
            m = _divisor_near(per_gpu, micro if micro is not None else per_gpu // (grad_acc or 1) or 1)
            keeps.append((m, per_gpu // m))
        for m, a in keeps:
            changed = ", ".join(f'"{k}": {v}' for k, v, given in (
                ("train_micro_batch_size_per_gpu", m, micro), ("gradient_accumulation_steps", a, grad_acc))
                if v != given)
            add(f"keep the global batch {train}: micro {m} x gradient_accumulation_steps {a} x world size {ws} "
                f"({changed})", train, m, a)
    elif train is not None:
        m = micro if micro is not None else max(1, train // (ws * (grad_acc or 1)))
        a = grad_acc if grad_acc is not None else max(1, train // (ws * m))
        add(f"set train_batch_size {m * a * ws} = micro {m} x gradient_accumulation_steps {a} x world size {ws} "
            f"(the global batch becomes {m * a * ws}, not {train}: {train} is not a multiple of world size {ws})",
            m * a * ws, m, a)
    if micro is not None:
        derived = micro * (grad_acc or 1) * ws
        add(f"drop train_batch_size so DeepSpeed derives it: micro {micro} x gradient_accumulation_steps "
            f"{grad_acc or 1} x world size {ws} = {derived} (the global batch becomes {derived}, not {train})",
            None, micro, grad_acc)
    else:
        m = max(1, train // (ws * (grad_acc or 1)))
        derived = m * (grad_acc or 1) * ws
        add(f'replace train_batch_size by "train_micro_batch_size_per_gpu": {m} (DeepSpeed then derives '
            f"train_batch_size for any world size: {m} x {grad_acc or 1} x {ws} = {derived} here"
            + ("" if derived == train else f", not {train}") + ")", None, m, grad_acc)
    return found


def valid_world_sizes(train, micro, grad_acc, limit: int = 64) -> list[int]:
    """World sizes 1..limit on which DeepSpeed accepts the given (possibly partial) triple."""
    return [ws for ws in range(1, limit + 1) if derive_batch(train, micro, grad_acc, ws)[4] is None]


#: the largest world size :func:`consistent_world_sizes` tries (128 nodes of 8 GPUs)
MAX_WORLD_SIZE_TRIED = 1024


def consistent_world_sizes(config: dict, limit: int = MAX_WORLD_SIZE_TRIED) -> list[int] | None:
    """The data-parallel world sizes 1..``limit`` on which DeepSpeed accepts the file's batch values
    (:func:`derive_batch` for each), or None when the values do not pin the world size.

    None: ``train_batch_size`` is absent or "auto" (DeepSpeed, or the Trainer, derives it for any world size).
    ``[]``: a batch value is not a positive integer (DS103 says which), or no world size up to ``limit`` fits.
    With all three given it is ``[train_batch_size / (micro x gradient_accumulation_steps)]`` when that divides;
    with ``train_batch_size`` and one other, every world size the integer division lands exactly on.
    Source: deepspeed/runtime/config.py ``_set_batch_related_parameters``, ``_batch_assertion``.
    """
    values: dict[str, int | None] = {}
    for key in BATCH_KEYS:
        value = config.get(key, MISSING) if isinstance(config, dict) else MISSING
        if value is MISSING or value is None or is_auto(value):
            values[key] = None
            continue
        number = positive_int(value)
        if number is None:
            return []
        values[key] = number
    train, micro, grad_acc = (values[k] for k in BATCH_KEYS)
    if train is None:
        return None
    if micro is not None and grad_acc is not None:  # one world size at most: no need to try them all
        ws, rest = divmod(train, micro * grad_acc)
        return [ws] if rest == 0 and 1 <= ws <= limit else []
    return [ws for ws in range(1, limit + 1) if derive_batch(train, micro, grad_acc, ws)[4] is None]


def _sizes_text(sizes: list[int], most: int = 8) -> str:
    shown = ", ".join(map(str, sizes[:most]))
    return shown + (f", ... ({len(sizes)} sizes up to {MAX_WORLD_SIZE_TRIED})" if len(sizes) > most else "")


def check_world_size(config: dict, original: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS106: the world size was assumed (``ctx.world_size_assumed``). Names the world sizes the batch values hold
    on (:func:`consistent_world_sizes` of ``config``, the file after the Trainer's fills; a train_batch_size that
    is "auto" in ``original`` holds on any). A warning when the file pins the world size, info when any holds."""
    if not ctx.world_size_assumed:
        return
    merged = dict(config) if isinstance(config, dict) else {}
    if is_auto(original.get("train_batch_size")):
        merged["train_batch_size"] = "auto"
    fits = consistent_world_sizes(merged)
    ws = ctx.world_size
    head = f"checked for world size {ws}, assumed ({ctx.world_size_source})"
    if fits is None:
        how = '"auto"' if is_auto(merged.get("train_batch_size")) else "not given"
        out.add(DS106.finding(f"{head}; the batch values hold on any world size (train_batch_size is {how}: it is "
                              "derived per world size)", severity="info"))
        return
    values = {k: positive_int(merged.get(k)) for k in BATCH_KEYS}
    if not fits:
        held = "the batch values hold on no world size" + (
            f" up to {MAX_WORLD_SIZE_TRIED}" if all(values.values()) else "")
    elif all(values.values()):
        train, micro, acc = (values[k] for k in BATCH_KEYS)
        held = (f"the batch values hold on world size {fits[0]} only: train_batch_size {train} / (micro {micro} x "
                f"gradient_accumulation_steps {acc})")
    else:
        held = f"the batch values hold on world size {_sizes_text(fits)} only"
    verdict = "" if not fits or ws in fits else f"; on world size {ws} DeepSpeed would refuse them"
    out.add(DS106.finding(f"{head}; {held}{verdict}", severity="warning"))


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
            if digits_int(value):
                out.change(key, value, digits_int(value), "DS103", "an integer, not a string")
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
        out.batch["error"] = error
        if ctx.world_size_assumed:
            # the world size is a guess: DS106 names the sizes the file holds on; --fix leaves the triple alone
            out.cannot_fix("train_batch_size", f"the world size is assumed ({ws}): give --world-size N of the real "
                                               "run and --fix writes the triple for it")
            if consistent_world_sizes({k: given[k] for k in BATCH_KEYS}):
                return
            rule_ = DS103 if "greater than 0" in error else DS102
            out.add(rule_.finding(f"world size {ws}, assumed ({ctx.world_size_source}): {error}; it holds on no "
                                  f"world size up to {MAX_WORLD_SIZE_TRIED}",
                                  fix="Make train_batch_size = micro x gradient_accumulation_steps x the world size "
                                      "of the real run (give it with --world-size), or "
                                      + ("drop train_batch_size so DeepSpeed derives it" if micro is not None else
                                         "replace train_batch_size by train_micro_batch_size_per_gpu (without "
                                         "either DeepSpeed refuses the file), so DeepSpeed derives train_batch_size")
                                      + (' (under the HF Trainer: "auto")' if ctx.launch == "trainer" else "") + "."))
            return
        fits_text = (f"; this triple holds on world size {', '.join(map(str, fits[:8]))}"
                     if fits else "; it holds on no world size")
        proposals = batch_proposals(train, micro, grad_acc, ws)
        rule_ = DS103 if "greater than 0" in error else DS102
        texts = [text for text, _ in proposals]
        if ctx.launch == "trainer":
            texts.insert(0, 'set the batch values to "auto" (the Trainer fills them from per_device_train_batch_size '
                            "and gradient_accumulation_steps)")
        fix = "; or ".join(texts)
        out.add(rule_.finding(f"world size {ws} ({ctx.world_size_source}): {error}{fits_text}",
                              fix=(fix[:1].upper() + fix[1:] + ".") if fix else rule_.fix))
        if ctx.launch == "trainer":
            for key in BATCH_KEYS:
                if key in config and not is_auto(config[key]):
                    out.change(key, config[key], "auto", rule_.id, "the Trainer fills it from TrainingArguments")
        elif proposals:
            text, values = proposals[0]
            for key in BATCH_KEYS:
                old = config.get(key, MISSING)
                new = MISSING if values[key] is None else values[key]
                if old is not MISSING and new is not MISSING and old == new and type(old) is type(new):
                    continue
                if old is MISSING and new is MISSING:
                    continue
                out.change(key, old, new, rule_.id, text)
        return
    if train is not None and ctx.launch == "engine" and not ctx.world_size_assumed:  # else DS106 says it
        fits = valid_world_sizes(train, micro, grad_acc)
        if fits != list(range(1, 65)):
            out.add(DS105.finding(f"train_batch_size {train} holds on world size "
                                  f"{', '.join(map(str, fits[:8])) or 'none'} only; this run: {ws} "
                                  f"({ctx.world_size_source})"))
