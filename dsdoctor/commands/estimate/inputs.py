"""What `dsdoctor estimate` estimates: the setup from the flags or a ds_config (read as DeepSpeed reads it), the
model and its trainable parameters, and the GPU and world size (``--gpu-mem``, ``--gpu NAME``, NVML)."""

from __future__ import annotations

from dataclasses import dataclass

import click

from dsdoctor.report import DsdoctorError

GIB = 2 ** 30

#: The cards shown side by side when no GPU is given and none is seen (issue 4): a 24, 40, 80 and 141 GB card,
#: each with its memory as NVML reports it (:mod:`dsdoctor.hardware`).
COMMON_CARDS = ("GeForce RTX 4090", "A100 40GB", "A100 80GB", "H200")


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _short(value) -> str:
    """A user's number for an error line, at most 24 characters."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


class Count(click.IntRange):
    """``click.IntRange(min, max)`` whose error quotes a number of many digits shortened (``--gpus 10**400`` is
    one short line, not 400 digits)."""

    def convert(self, value, param, ctx):
        text = str(value).strip()
        if isinstance(value, str) and len(text) > 24:
            self.fail(f"{text[:12]}... ({len(text)} characters) is not in the range {self.min}<=x<={self.max}",
                      param, ctx)
        return super().convert(value, param, ctx)


def common_cards():
    """The :class:`dsdoctor.hardware.Gpu` of each of :data:`COMMON_CARDS`."""
    from dsdoctor.hardware import gpu_from_name

    return [gpu_from_name(name) for name in COMMON_CARDS]


# --- the setup from a ds_config -------------------------------------------------------------------------------------

def _from_deepspeed(path: str, explicit: set[str], values: dict, notes: list[str]) -> dict:
    """Stage, offload, micro batch, gradient accumulation, precision and bucket sizes from a ds_config, read as
    DeepSpeed reads them (``deepspeed/runtime/config.py``, ``zero/config.py``, ``precision_config.py``: pydantic's lax
    booleans, a missing ``enabled`` is False, the legacy ``cpu_offload``); a flag given on the command line wins.
    Values of "auto" are left to the flags (the Trainer fills them). ``train_batch_size`` is kept as
    ``_train_batch_size`` for :func:`_grad_accum`, which needs the world size.

    Raises:
        DsdoctorError: a value DeepSpeed would refuse or that is not a training setup (one line naming the key).
    """
    from dsdoctor.checks.deepspeed_config import as_bool, is_auto, positive_int
    from dsdoctor.configfile import read_ds_config

    config, _duplicates = read_ds_config(path, "--deepspeed")

    def bad(key: str, value) -> DsdoctorError:
        return DsdoctorError(f"{path}: {key} = {_short(repr(value))} is not usable (dsdoctor check {path} explains it)")

    def use(option: str, value) -> None:
        if option in explicit:
            if value != values[option]:  # the flag wins, and the report says so
                notes.append(f"--{option.replace('_', '-')} {values[option]} (command line) instead of {path}'s "
                             f"{value}: the estimate is for the flag, not for the file as written")
            return
        values[option] = value
        values.setdefault("_from_config", []).append(option)

    def auto(option: str, source: str) -> None:
        if option not in explicit:
            notes.append(f'{source} is "auto" in {path}: using --{option.replace("_", "-")} {values[option]}')

    zero = config.get("zero_optimization")
    if zero is None:
        zero = {}
    elif isinstance(zero, bool):  # the legacy form: true is stage 1 (deepspeed/runtime/zero/config.py)
        zero = {"stage": 1 if zero else 0}
    elif not isinstance(zero, dict):
        raise bad("zero_optimization", zero)
    stage = zero.get("stage", 0)  # DeepSpeed's default stage is 0
    if is_auto(stage):
        auto("zero", "zero_optimization.stage")
    else:
        number = None  # pydantic's lax int, as DeepSpeedZeroConfig reads the stage: 2, 2.0 and "2", not true
        if isinstance(stage, int) and not isinstance(stage, bool):
            number = stage
        elif isinstance(stage, float) and stage.is_integer():
            number = int(stage)
        elif isinstance(stage, str) and stage.strip().isdecimal() and len(stage) < 6:
            number = int(stage)
        if number is None or not 0 <= number <= 3:
            raise bad("zero_optimization.stage", stage)
        use("zero", number)
    for key, legacy in (("offload_optimizer", "cpu_offload"), ("offload_param", "cpu_offload_param")):
        block = zero.get(key)
        if block is None:
            if as_bool(zero.get(legacy)):
                use(key, "cpu")
            continue
        if not isinstance(block, dict):
            raise bad(f"zero_optimization.{key}", block)
        device = block.get("device", "none")
        if is_auto(device):
            auto(key, f"zero_optimization.{key}.device")
            continue
        if device is None:
            device = "none"
        if device not in ("none", "cpu", "nvme"):
            raise bad(f"zero_optimization.{key}.device", device)
        use(key, device)
    for key, option in (("train_micro_batch_size_per_gpu", "micro_batch"),
                        ("gradient_accumulation_steps", "grad_accum"), ("train_batch_size", "_train_batch_size")):
        value = config.get(key)
        if value is None:
            continue
        if is_auto(value):
            if option != "_train_batch_size":
                auto(option, key)
            continue
        number = positive_int(value)
        if number is None or number > 1_000_000_000:
            raise bad(key, value)
        if option == "_train_batch_size":
            values[option] = number
        else:
            use(option, number)
    enabled: dict[str, object] = {}
    for name in ("bf16", "fp16"):
        block = config.get(name) if config.get(name) is not None else (config.get("bfloat16") if name == "bf16" else None)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise bad(name, block)
        flag = block.get("enabled", False)  # DeepSpeedBF16Config / DeepSpeedFP16Config: enabled defaults to False
        if is_auto(flag):
            enabled[name] = "auto"
            continue
        if as_bool(flag) is None:
            raise bad(f"{name}.enabled", flag)
        enabled[name] = as_bool(flag)
    on = [name for name, flag in enabled.items() if flag is True]
    if len(on) == 2:
        raise DsdoctorError(f"{path}: bf16 and fp16 are both enabled; DeepSpeed refuses that "
                            f"(dsdoctor check {path} explains it)")
    if on:
        use("precision", on[0])
    elif "auto" in enabled.values():
        auto("precision", " / ".join(f"{n}.enabled" for n, f in enabled.items() if f == "auto"))
    elif "precision" not in explicit:
        values["precision"] = "fp32"
        values.setdefault("_from_config", []).append("precision")
        notes.append(f"{path} enables neither bf16 nor fp16: DeepSpeed trains in fp32")
    for key, option in (("reduce_bucket_size", "reduce_bucket_size"), ("overlap_comm", "overlap_comm"),
                        ("contiguous_gradients", "contiguous_gradients"),
                        ("stage3_prefetch_bucket_size", "prefetch_bucket_size"),
                        ("stage3_max_live_parameters", "max_live_parameters"),
                        ("stage3_max_reuse_distance", "max_reuse_distance"), ("sub_group_size", "sub_group_size")):
        value = zero.get(key)
        if value is None or is_auto(value):
            continue
        if option in ("overlap_comm", "contiguous_gradients"):
            if as_bool(value) is None:
                raise bad(f"zero_optimization.{key}", value)
            values[option] = as_bool(value)
        else:
            floor = 0 if option in ("prefetch_bucket_size", "max_reuse_distance") else 1  # DeepSpeed takes 0 there
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not floor <= value <= 1e12:
                raise bad(f"zero_optimization.{key}", value)
            values[option] = int(value)
        values.setdefault("_from_config", []).append(option)
    return values


def _grad_accum(values: dict, world_size: int, path: str | None, notes: list[str],
                flags: set[str] = frozenset()) -> None:
    """Fill ``grad_accum`` (and the micro batch) from the file's batch triple for this world size, as DeepSpeed
    derives it (``dsdoctor.checks.deepspeed_config.derive_batch``, a copy of ``_set_batch_related_parameters``).
    ``flags``: the options given on the command line; a micro batch or accumulation given there enters the
    derivation as a given value, like the file's."""
    train = values.pop("_train_batch_size", None)
    if train is None or path is None:
        return
    from dsdoctor.checks.deepspeed_config import derive_batch

    from_config = values.get("_from_config", [])
    micro = values["micro_batch"] if "micro_batch" in from_config or "micro_batch" in flags else None
    accum = values["grad_accum"] if "grad_accum" in from_config or "grad_accum" in flags else None
    train_, micro_, accum_, _how, error = derive_batch(train, micro, accum, world_size)
    if error and flags & {"micro_batch", "grad_accum"}:
        given = ", ".join(f"--{k.replace('_', '-')} {values[k]}" for k in ("micro_batch", "grad_accum") if k in flags)
        raise DsdoctorError(f"{given} with {path}'s train_batch_size {train} on world size {world_size}: DeepSpeed "
                            f"refuses that triple ({error}); drop the flag, or change the file")
    if error:
        notes.append(f"{path}: train_batch_size {train} does not hold on world size {world_size} ({error}); "
                     f"dsdoctor check {path} --world-size {world_size} explains it")
        return
    if micro is None and micro_:
        values["micro_batch"] = micro_
        if accum is not None:
            notes.append(f"micro batch {micro_}: train_batch_size {train_} / (gradient_accumulation_steps {accum_} x "
                         f"world size {world_size}), as DeepSpeed derives it")
    if accum is None and accum_:
        values["grad_accum"] = accum_
        notes.append(f"gradient_accumulation_steps {accum_}: train_batch_size {train_} / (micro batch "
                     f"{values['micro_batch']} x world size {world_size}), as DeepSpeed derives it")


# --- the model and the hardware -------------------------------------------------------------------------------------

def _lora_fallback(method: str, lora_targets: str | None, arch) -> bool:
    """LoRA with no --lora-targets on a transformers architecture peft has no default targets for
    (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``): the count takes the reference trainer's fallback, and a
    LoraConfig without target_modules raises (MEM510)."""
    return method == "lora" and not lora_targets and arch.family == "transformers" and not arch.lora_default


def build_setup(model: str, method: str, lora_r: int, lora_targets: str | None, freeze_last: int,
                prefix_tokens: int, lora_dropout: float, zero: int, offload_optimizer: str, offload_param: str,
                gpus: int, nodes: int, micro_batch: int, seq_len: int, grad_ckpt: bool, precision: str,
                extra: dict | None = None, grad_accum: int = 1, launch: str = "engine", attn: str | None = None):
    """The :class:`dsdoctor.checks.memory.Setup` for these choices, with the model resolved and its parameters
    counted: analytically for the families of :mod:`dsdoctor.models.analytic` whose every key the formulas account
    for (:func:`dsdoctor.models.unmodeled_keys`); from the structure of transformers' model built on the meta device
    for every other architecture transformers implements (:mod:`dsdoctor.models.structure`: shipped for registry
    names, cached per config.json for a local one: importing transformers' modeling code takes about 4.5 s, so the
    first run of a new config.json is the slow one); on the meta device, peft applied, for an analytic family's
    config.json with a key the formulas do not model.

    Returns (setup, base_total, counting): the base model's parameters, and how they were counted.

    Raises:
        DsdoctorError: an unknown model or method, impossible numbers (a micro batch, sequence length, gradient
            accumulation, GPU or node count below 1, a LoRA rank below 1, ``--freeze-last`` above the layers),
            offload at ZeRO-0, or parameter offload below ZeRO-3.
    """
    from dsdoctor.checks.memory import Setup
    from dsdoctor.models import default_lora_targets, is_local, resolve_arch, trainable_params

    for name, value in (("--micro-batch", micro_batch), ("--seq-len", seq_len), ("--gpus", gpus),
                        ("--nodes", nodes), ("--grad-accum", grad_accum)):
        if value < 1:
            raise DsdoctorError(f"{name} must be at least 1, got {_short(value)}")
    if seq_len > 10_000_000 or micro_batch > 1_000_000 or grad_accum > 1_000_000:
        raise DsdoctorError(f"--seq-len {_short(seq_len)} / --micro-batch {_short(micro_batch)} / --grad-accum "
                            f"{_short(grad_accum)}: not a training setup")
    if offload_param != "none" and zero != 3:
        raise DsdoctorError(f"--offload-param needs --zero 3 (DeepSpeed offloads parameters only at stage 3), "
                            f"got --zero {zero}")
    if offload_optimizer != "none" and zero == 0:
        raise DsdoctorError("--offload-optimizer needs ZeRO-1 or above (DeepSpeed's ZeRO-Offload); "
                            "use --zero 1, 2 or 3")
    if not 0 <= lora_dropout < 1:
        raise DsdoctorError(f"--lora-dropout must be in [0, 1), got {lora_dropout}")
    arch = resolve_arch(model)
    if attn is not None:  # the attention the training machine's transformers runs, when it is not this one's
        from dataclasses import replace

        arch = replace(arch, eager_attention=attn == "eager")
    if lora_targets is not None and not lora_targets.strip(" ,"):
        raise DsdoctorError("--lora-targets is empty: give module names (q_proj,v_proj) or all-linear, or leave the "
                            "option out for peft's default targets")
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip()) if lora_targets else \
        default_lora_targets(arch) if method == "lora" else ()  # another method has no targets to miss
    trainable = trainable_params(arch, method, lora_r=lora_r, lora_targets=targets, freeze_last=freeze_last,
                                 prefix_tokens=prefix_tokens, lora_dropout=lora_dropout)
    total = arch.total_params
    counting = "analytic, from the registry's config.json values (checked against transformers on the meta device " \
               "in tests/test_models.py)"
    if arch.exact_total is not None:  # read off transformers' model on the meta device
        counting = ("exact: the structure of transformers' model, built on the meta device or read from the shape "
                    "template dsdoctor ships for it (model_source says which; total as "
                    "sum(p.numel())" + (", trainable from its linears as peft wraps them" if method == "lora" else "")
                    + (", prefix width as peft computes it" if method == "ptuning" else "") + ")")
        if arch.unmodeled:
            counting += "; not modelled in the activations: " + "; ".join(arch.unmodeled)
        if arch.eager_attention:
            counting += ("; eager attention (the s x s scores are kept): "
                         + ("--attn eager" if attn else "the installed transformers has no SDPA for this class; "
                            "give --attn sdpa if the training machine's transformers runs it with SDPA"))
    elif is_local(model):
        from dsdoctor.meta_count import cached_meta_counts, transformers_knows
        from dsdoctor.models import unmodeled_keys

        unmodeled = unmodeled_keys(arch)
        if unmodeled == []:
            counting = (f"exact, analytic: every key of this {arch.model_type} config.json is one the formulas model "
                        f"or one that changes no parameter count (tests/test_models.py checks both against "
                        f"transformers and peft on the meta device)")
        elif transformers_knows(arch.model_type):
            total, trainable = cached_meta_counts(arch.config, method, lora_r=lora_r, lora_targets=targets,
                                                  freeze_last=freeze_last, prefix_tokens=prefix_tokens)
            counting = "exact: transformers' model built on the meta device" + \
                       (", peft applied" if method in ("lora", "ptuning") else "") + \
                       (f" (config.json keys the formulas do not model: {', '.join(unmodeled[:6])})"
                        if unmodeled else "")
        else:
            counting = f"analytic: transformers has no {arch.model_type!r} architecture (remote code is never run)"
    if _lora_fallback(method, lora_targets, arch):
        counting += (f"; LoRA targets {','.join(targets)}: peft has no default for {arch.model_type} (a LoraConfig "
                     f"without target_modules raises there), so these are the reference trainer's fallback; give "
                     f"--lora-targets as your LoraConfig has them")
    added = trainable if method in ("lora", "ptuning") else 0
    setup = Setup(arch=arch, total_params=total + added, trainable_params=trainable, method=method, zero_stage=zero,
                  offload_optimizer=offload_optimizer, offload_param=offload_param, gpus=gpus, nodes=nodes,
                  micro_batch=micro_batch, seq_len=seq_len, grad_ckpt=grad_ckpt, precision=precision,
                  lora_targets=targets if method == "lora" else (), lora_dropout=lora_dropout,
                  freeze_last=freeze_last, grad_accum=grad_accum, launch=launch, **(extra or {}))
    return setup, total, counting


@dataclass
class Hardware:
    """What the estimate is judged against: ``memory_bytes`` per GPU (None: show :data:`COMMON_CARDS`), GPUs per node
    and where each came from; ``world_assumed`` when neither ``--gpus`` nor NVML gave the GPU count."""

    gpu: object | None
    memory_bytes: int | None
    gpus_per_node: int
    memory_source: str
    gpus_source: str
    world_assumed: bool


def resolve_hardware(gpu_mem: str | None, gpus: int | None, gpu: str | None, gpu_cc: str | None) -> Hardware:
    """The GPU and its memory from ``--gpu-mem`` (GiB or ``auto``), ``--gpu NAME`` (and ``--gpu-cc``), else NVML;
    GPUs per node from ``--gpus``, else the GPUs NVML sees, else 1 (assumed, reported as MEM508).

    Raises:
        DsdoctorError: a ``--gpu-mem`` that is not a positive number of GiB or ``auto``; ``auto`` with no GPU; an
            unknown ``--gpu`` name or a bad ``--gpu-cc`` (:func:`dsdoctor.hardware.gpu_from_name`); ``--gpu-cc``
            without ``--gpu``; a ``--gpu`` whose memory is not known without ``--gpu-mem``.
    """
    from dsdoctor.hardware import gpu_from_name, visible_gpus

    if gpu_cc is not None and gpu is None:
        raise DsdoctorError("--gpu-cc goes with --gpu NAME (the card the table lacks); with neither, NVML or the "
                            "common cards are used")
    named = gpu_from_name(gpu, gpu_cc) if gpu is not None else None
    detected = [] if named is not None else visible_gpus()
    if gpu_mem is not None and gpu_mem != "auto":
        try:
            value = float(gpu_mem)
        except ValueError:
            raise DsdoctorError(f"--gpu-mem must be a number of GiB or auto, got {_short(gpu_mem)!r}") from None
        if not 0 < value < 100_000:  # also refuses nan and inf
            raise DsdoctorError(f"--gpu-mem must be a number of GiB above 0 and below 100,000 (a GPU's memory), "
                                f"got {_short(gpu_mem)}")
        memory, source = int(value * GIB), f"--gpu-mem {gpu_mem} GiB"
    elif named is not None:
        if gpu_mem == "auto":
            raise DsdoctorError("--gpu-mem auto reads NVML; with --gpu NAME give --gpu-mem GiB, or drop --gpu")
        if not named.memory_bytes:
            variants = named.memory_variants
            raise DsdoctorError(f"--gpu {named.name}: its memory is not known "
                                + (f"(it comes with {' or '.join(f'{v} GB' for v in variants)}: say which, e.g. "
                                   f"--gpu '{named.name} {variants[-1]}GB')" if variants else f"({named.memory_source})"
                                   if named.memory_source else "")
                                + "; or give --gpu-mem GiB")
        memory, source = named.memory_bytes, f"--gpu {named.name}: {named.memory_source}"
    elif detected:
        memory = min(g.memory_bytes for g in detected)
        source = f"{len(detected)} x {detected[0].name} ({gib(memory)} GiB, NVML)"
    elif gpu_mem == "auto":
        raise DsdoctorError("--gpu-mem auto: NVML sees no GPU here; give --gpu-mem GiB (e.g. 80) or --gpu NAME")
    else:
        memory, source = None, "no GPU seen (NVML) and none given: the common cards side by side"
    card = named or (detected[0] if detected else None)
    if gpus is not None:
        return Hardware(card, memory, gpus, source, "--gpus", False)
    if detected:
        return Hardware(card, memory, len(detected), source, f"the {len(detected)} GPU(s) NVML sees", False)
    return Hardware(card, memory, 1, source, "assumed: no --gpus, and NVML sees no GPU here", True)


def rates_for(gpu) -> tuple[object, str]:
    """The step-time :class:`dsdoctor.checks.memory.Rates` for a GPU (its dense 16-bit peak when known), and where
    the peak comes from."""
    from dsdoctor.checks.memory import Rates

    peak = None
    if gpu is not None:
        from dsdoctor.checks.training import peak_flops

        peak = peak_flops(gpu.name)
    if peak:
        return Rates(gpu_flops=peak), f"{gpu.name}'s dense 16-bit peak {peak / 1e12:.0f} TFLOP/s"
    return Rates(), "an A100's dense 16-bit peak, 312 TFLOP/s (GPU not known)"


