"""``dsdoctor estimate``: per-GPU memory of a DeepSpeed fine-tuning run, before the run.

The arithmetic is :mod:`dsdoctor.checks.memory`; this module resolves the model and the setup (flags, or a
ds_config), the GPU (``--gpu-mem``, ``--gpu NAME``, NVML, or the common cards side by side), and builds the report:
the breakdown at each moment of a step, host RAM, whether it fits and the largest micro batch that does, the setups
that fit ranked by estimated step time (:func:`search`), the ZeRO stages side by side (``--compare``) and
DeepSpeed's and accelerate's estimators beside ours.

A registry model never imports torch; ``--model PATH`` of an architecture transformers implements may be counted on
the meta device (:mod:`dsdoctor.meta_count`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import click

from dsdoctor.cli import FiniteFloat, report_command
from dsdoctor.report import DsdoctorError, Report

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
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip()) if lora_targets else \
        default_lora_targets(arch) if method == "lora" else ()  # another method has no targets to miss
    trainable = trainable_params(arch, method, lora_r=lora_r, lora_targets=targets, freeze_last=freeze_last,
                                 prefix_tokens=prefix_tokens)
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


def _change_rows(rows: list[dict]) -> list[list[str]]:
    return [[r["change"], gib(r["total_bytes"]), ("tight" if r.get("tight") else "yes") if r["fits"] else "no",
             f"{r['step_time_s']['total']:.2f} s ({r['vs_current']:.2f}x)" if "step_time_s" in r else r["cost"]]
            for r in rows]


# --- the command ----------------------------------------------------------------------------------------------------

def _breakdown(report: Report, est, setup, method: str, states_bytes: int, world_source: str,
               replayed: bool = False) -> None:
    """The per-GPU table: every term at each moment of a step, the peak column marked, what is alive at the peak.
    ``replayed``: the slack is ``--replay``'s reserved peak less the allocated terms (labelled so)."""
    sources = {"weights": "2 bytes x parameters (x 1/N under ZeRO-3)", "gradients": "16-bit, partitioned from ZeRO-2",
               "optimizer_states": "Adam: fp32 master + 2 moments, 12 bytes x trainable / N",
               "optimizer_step": "fp32 gradient copies during the step",
               "activations": "saved for the backward (layer inputs under checkpointing)",
               "checkpoint_recompute": "one layer recomputed in backward",
               "logits_and_loss": "micro x seq x vocab x 12 bytes (fp32 log-softmax and gradients)",
               "held_logits": "16-bit logits the engine loop's outputs keep (0 with --launch engine-loss or trainer)",
               "deepspeed_buffers": "DeepSpeed's buckets: gradient reduction, ZeRO-3 gathered parameters, offload",
               "allocator_slack": "PyTorch caching allocator (fitted on an H200)",
               "cuda_context": "CUDA context, cuBLAS, NCCL (measured)"}
    if replayed:
        sources["allocator_slack"] = "--replay's reserved peak minus the allocated terms above (not fitted)"
    phases = list(est.phase_terms)
    peak = est.peak_phase
    rows = []
    for term in est.phase_terms[peak]:
        rows.append([term] + [gib(est.phase_terms[p][term]) for p in phases] + [sources.get(term, "")])
    rows.append(["allocated"] + [gib(est.phases[p]) for p in phases] + ["the sum at each moment"])
    for term in ("allocator_slack", "cuda_context"):
        rows.append([term] + [gib(est.terms[term]) if p == peak else "" for p in phases] + [sources[term]])
    rows.append(["total (what nvidia-smi shows)"] + [gib(est.total) if p == peak else "" for p in phases]
                + [f"the peak: at {peak}"])
    rows.append(["(model states: weights + gradients + Adam)"] + [gib(states_bytes) if p == peak else ""
                                                                  for p in phases]
                + ["the ZeRO paper's 16 bytes x parameters, partitioned by stage"])
    live = [t for t, v in est.phase_terms[peak].items() if v]
    gone = [t for t in est.phase_terms[peak] if not est.phase_terms[peak][t]
            and any(est.phase_terms[p][t] for p in phases)]
    rows.append(["(alive at the peak)"] + [""] * len(phases) + [", ".join(live)])
    if gone:
        rows.append(["(not alive at the peak)"] + [""] * len(phases) + [", ".join(gone)])
    report.tables.append((f"Per-GPU memory, GiB, at each moment of a step: {setup.arch.name}, {method}, "
                          f"ZeRO-{setup.zero_stage}, micro batch {setup.micro_batch} x seq {setup.seq_len}, "
                          f"{'checkpointing' if setup.grad_ckpt else 'no checkpointing'}, {setup.precision}, "
                          f"world size {setup.world_size} ({world_source}), {setup.launch} loop",
                          ["term"] + [f"{p} (peak)" if p == peak else p for p in phases] + ["what"], rows))


def run_estimate(model: str, zero: int, offload_optimizer: str, offload_param: str, method: str, lora_r: int,
                 lora_targets: str | None, lora_dropout: float, freeze_last: int, prefix_tokens: int, gpus: int | None,
                 nodes: int, micro_batch: int, seq_len: int, grad_ckpt: bool, precision: str,
                 deepspeed: str | None, gpu_mem: str | None, host_mem: float | None, compare: bool,
                 explicit: set[str], grad_accum: int = 1, gpu: str | None = None,
                 gpu_cc: str | None = None, launch: str = "engine", attn: str | None = None,
                 replay: bool = False) -> Report:
    """The body of ``dsdoctor estimate`` (see the module docstring). Raises DsdoctorError on bad input."""
    from dsdoctor.checks import memory as mem

    notes: list[str] = []
    values = {"zero": zero, "offload_optimizer": offload_optimizer, "offload_param": offload_param,
              "micro_batch": micro_batch, "precision": precision, "grad_accum": grad_accum}
    if deepspeed:
        values = _from_deepspeed(deepspeed, explicit, values, notes)
    hw = resolve_hardware(gpu_mem, gpus, gpu, gpu_cc)
    _grad_accum(values, hw.gpus_per_node * nodes, deepspeed, notes, explicit)
    from_config = values.pop("_from_config", [])
    if hw.gpu is not None and not hw.gpu.bf16 and values["precision"] == "bf16" and "precision" not in explicit \
            and "precision" not in from_config:  # our default must not be the user's error (DS111)
        values["precision"] = "fp16"
        notes.append(f"precision fp16: {hw.gpu.name} (compute capability {hw.gpu.capability[0]}."
                     f"{hw.gpu.capability[1]}) has no native bf16, so the default bf16 is not assumed")
    extra = {k: values.pop(k) for k in list(values) if k in ("reduce_bucket_size", "overlap_comm",
                                                              "contiguous_gradients", "prefetch_bucket_size",
                                                              "max_live_parameters", "max_reuse_distance", "sub_group_size")}
    if deepspeed and values["offload_param"] != "none" and values["zero"] != 3 and "offload_param" in from_config:
        raise DsdoctorError(f"{deepspeed} offloads parameters (zero_optimization.offload_param), which DeepSpeed "
                            f"does only at ZeRO-3, but the stage is {values['zero']}"
                            + (" (--zero on the command line)" if "zero" in explicit else ""))
    setup, base_total, counting = build_setup(
        model, method, lora_r, lora_targets, freeze_last, prefix_tokens, lora_dropout, values["zero"],
        values["offload_optimizer"], values["offload_param"], hw.gpus_per_node, nodes, values["micro_batch"], seq_len,
        grad_ckpt, values["precision"], extra, grad_accum=values["grad_accum"], launch=launch, attn=attn)
    est = mem.estimate(setup)
    states = mem.model_state_bytes(setup)
    states_bytes = sum(states[k] for k in ("weights", "gradients", "persistent_gradients", "optimizer_states"))
    arch = setup.arch
    gpu_bytes = hw.memory_bytes
    replayed = _replay(setup, est, states_bytes, gpu_bytes, lora_r, prefix_tokens, attn, notes) if replay else None
    if replayed is not None:
        est = replayed[0]
    if setup.offload_param != "none" and (replayed is None or "reserved_bytes" not in replayed[1]
                                          or replayed[1]["reserved_bytes"] is None):
        notes.append("parameter offload: the allocator slack it adds (allocator_slack) is fitted on the seven H200 "
                     "parameter-offload runs of rounds 2-6, 1.3% to 11.9% under what nvidia-smi showed on them "
                     "(benchmarks/results/memory-loops/calibration-fit.txt). --replay runs DeepSpeed's "
                     "fetches on their own stream instead (held out: within 0.5% of nvidia-smi on the three "
                     "parameter-offload runs of rounds 6 and 8, report-r6.md, report-r8.md; one seen run, Phi-3 "
                     "full fine-tuning, 8.2% under, step-replay-zero3-offload.md)")
    elif setup.zero_stage == 3 and replayed is None:
        notes.append("ZeRO-3: the allocator slack of its gathered parameters and sub-group states is the formulas' "
                     "weakest term: on the 16 held-out H200 ZeRO-3 runs of rounds 7-10 the estimate was within 5% of "
                     "what nvidia-smi showed on 10, at most 7.2% off (benchmarks/results/memory-loops/"
                     "calibration-fit.txt). --replay (about 20-35 s for an 8B model on 2 cores) was within 2.2% on "
                     "each of them (report-r7.md to report-r10.md)")
    rates, rates_source = rates_for(hw.gpu)
    report = Report("estimate")

    per_gpu = dict(est.terms)
    per_gpu["total"] = est.total
    world_source = f"{hw.gpus_per_node} GPU(s) per node: {hw.gpus_source}; {nodes} node(s)"
    result = {
        "model": arch.name, "model_source": arch.source, "counting": counting, "launch": launch,
        "total_params": base_total, "trainable_params": setup.trainable_params,
        "setup": {"method": method, "zero_stage": setup.zero_stage, "offload_optimizer": setup.offload_optimizer,
                  "offload_param": setup.offload_param, "gpus_per_node": setup.gpus, "nodes": setup.nodes,
                  "world_size": setup.world_size, "world_size_source": world_source,
                  "micro_batch": setup.micro_batch, "gradient_accumulation_steps": setup.grad_accum,
                  "global_batch": setup.micro_batch * setup.grad_accum * setup.world_size, "seq_len": setup.seq_len,
                  "grad_ckpt": setup.grad_ckpt, "precision": setup.precision,
                  "lora_targets": list(setup.lora_targets), "from_deepspeed_config": from_config},
        "per_gpu_bytes": per_gpu,
        "model_states_bytes": states_bytes,
        "peak_phase": est.peak_phase, "phases_bytes": est.phases, "terms_by_phase_bytes": est.phase_terms,
        "allocated_bytes": est.allocated, "reserved_bytes": est.reserved,
        "host_bytes": est.host, "gpu_memory_bytes": gpu_bytes, "gpu_source": hw.memory_source,
        "gpu": None if hw.gpu is None else {
            "name": hw.gpu.name, "compute_capability": "%d.%d" % hw.gpu.capability,
            "memory_bytes": hw.gpu.memory_bytes, "memory_source": hw.gpu.memory_source,
            "capability_source": hw.gpu.capability_source},
        "step_time_s": {k: round(v, 4) for k, v in mem.step_time(setup, rates).items()},
        "step_time_basis": rates_source,
        "deepspeed_estimator_bytes": mem.deepspeed_estimator_bytes(setup),
        "accelerate_estimator_bytes": mem.accelerate_estimator_bytes(setup),
    }
    replay_reserved = None if replayed is None else (replayed[1]["reserved_bytes"]
                                                     or replayed[1].get("unbounded_reserved_bytes"))
    result["reserved_source"] = "replay" if replay_reserved else "calibrated"
    if replayed is not None:
        result["replay"] = replayed[1]
        notes.append("--replay: the setups under 'What to change' and the largest micro batch that fits are the "
                     "calibrated formulas' (not replayed); replay one with its own flags to check it")
    report.result = result

    _breakdown(report, est, setup, method, result["model_states_bytes"], world_source,
               replayed=bool(replay_reserved))
    host_labels = {"needed_per_node": f"needed_per_node ({mem.HOST_BUFFER_FACTOR} x offload_per_node for DeepSpeed's "
                                      "pinned buffers, + model_load_per_node)"}
    report.tables.append(("Host RAM, GiB", ["what", "GiB"],
                          [[host_labels.get(k, k), gib(v)] for k, v in est.host.items()]))
    report.tables.append(("Other estimators, per GPU (theirs: model states only, no activations or logits; "
                          "dsdoctor's: the whole peak as nvidia-smi shows it)",
                          ["estimator", "GiB"],
                          [["DeepSpeed estimate_zero%s_model_states_mem_needs (all parameters as trained)"
                            % ("3" if setup.zero_stage == 3 else "2"), gib(result["deepspeed_estimator_bytes"])],
                           ["accelerate estimate-memory, Training using Adam", gib(result["accelerate_estimator_bytes"])],
                           ["dsdoctor", gib(est.total)]]))

    from dsdoctor.hardware import host_ram_bytes

    host_total = int(host_mem * GIB) if host_mem else (host_ram_bytes() if hw.memory_source.endswith("NVML)") else None)
    if gpu_bytes is None:
        _common_cards(report, setup, est, result, host_total)
    else:
        _one_gpu(report, setup, est, result, gpu_bytes, hw, rates, host_total)
    if hw.world_assumed:
        report.add(mem.MEM508.finding(
            f"world size {setup.world_size} ({hw.gpus_source}; {nodes} node(s)): ZeRO-{setup.zero_stage} "
            f"partitions over it, so the per-GPU memory of the machine that will train can differ",
            fix="Give --gpus N (and --nodes M) of the machine that will train; --compare then shows each ZeRO stage "
                "for that world size"))
    if _lora_fallback(method, lora_targets, arch):
        report.add(mem.MEM510.finding(
            f"model_type {arch.model_type!r}: peft has no default LoRA targets; counted with "
            f"{','.join(setup.lora_targets)}", fix="Give target_modules in your LoraConfig and the same to "
                                                   "--lora-targets (e.g. --lora-targets q_proj,k_proj,v_proj,o_proj)"))
    if hw.gpu is not None and setup.precision == "bf16" and not hw.gpu.bf16:
        from dsdoctor.checks.deepspeed_config import DS111

        report.add(DS111.finding(f"--precision bf16 on {hw.gpu.name} (compute capability "
                                 f"{hw.gpu.capability[0]}.{hw.gpu.capability[1]} < 8.0)",
                                 fix="--precision fp16 here, and fp16 instead of bf16 in the config"))

    if host_total and est.host["needed_per_node"] > 0.9 * host_total:
        offload = (f"{gib(est.host['offload_per_node'])} GiB of offloaded states x {mem.HOST_BUFFER_FACTOR} for "
                   f"pinned buffers, plus " if est.host["offload_per_node"] else "")
        report.add(mem.MEM504.finding(
            f"about {gib(est.host['needed_per_node'])} GiB of host RAM per node ({offload}"
            f"{gib(est.host['model_load_per_node'])} GiB while the ranks load the model); this node has "
            f"{gib(host_total)} GiB", severity="error" if est.host["needed_per_node"] > host_total else None))
    if arch.max_positions and setup.seq_len > arch.max_positions:
        report.add(mem.MEM505.finding(f"--seq-len {setup.seq_len} > {arch.max_positions} ({arch.source})"))
    if est.terms["logits_and_loss"] > est.total / 3:
        report.add(mem.MEM506.finding(f"logits {gib(est.terms['logits_and_loss'])} of {gib(est.total)} GiB "
                                      f"(vocabulary {arch.vocab_size:,})"))
    if est.terms["held_logits"] > GIB:
        report.add(mem.MEM509.finding(
            f"held logits {gib(est.terms['held_logits'])} GiB per GPU: micro batch {setup.micro_batch} x seq "
            f"{setup.seq_len} x vocabulary {arch.vocab_size:,} x {2 if setup.precision != 'fp32' else 4} bytes "
            f"(--launch engine)"))
    if method == "ptuning" and setup.grad_ckpt:
        report.add(mem.MEM507.finding("--method ptuning with gradient checkpointing on"))
    if notes:
        report.tables.append(("Notes", ["note"], [[note] for note in notes]))
    result["notes"] = notes

    if compare:
        stages = {}
        for stage in (0, 1, 2, 3):
            if stage == 0 and setup.offload_optimizer != "none":
                continue
            changed = replace(setup, zero_stage=stage,
                              offload_param=setup.offload_param if stage == 3 else "none")
            stages[stage] = mem.estimate(changed)
        result["compare"] = {str(s): {**e.terms, "total": e.total} for s, e in stages.items()}
        terms = list(est.terms)
        body = [[t] + [gib(stages[s].terms[t]) for s in stages] for t in terms]
        body.append(["total"] + [gib(stages[s].total) for s in stages])
        if gpu_bytes:
            body.append(["fits"] + ["yes" if stages[s].total <= gpu_bytes else "NO" for s in stages])
        report.tables.append((f"ZeRO stages side by side, GiB (world size {setup.world_size})",
                              ["term"] + [f"ZeRO-{s}" for s in stages], body))
    return report


def _replay(setup, est, states_bytes: int, gpu_bytes: int | None, lora_r: int, prefix_tokens: int,
            attn: str | None, notes: list[str]):
    """``--replay``: (the estimate with the replayed reserved bytes as its allocator slack, the replay's facts for
    the JSON) from :func:`dsdoctor.checks.step_trace.replay_setup`; None, with a note, where it does not apply.
    ``states_bytes``: the model states as the report counts them (past the GPU, nothing is replayed)."""
    from dataclasses import replace as dc_replace

    from dsdoctor.checks import memory as mem
    from dsdoctor.models.analytic import TRANSFORMERS_FAMILIES, is_analytic

    if "nvme" in (setup.offload_optimizer, setup.offload_param):
        notes.append("--replay: offload to NVMe is not replayed (its swap buffers are not modelled); the figures "
                     "are the calibrated formulas'")
        return None
    if is_analytic(setup.arch.config) and setup.arch.config.get("model_type") not in TRANSFORMERS_FAMILIES:
        notes.append(f"--replay: {setup.arch.config.get('model_type')!r} is counted from config keys (remote "
                     "code, never run), so its step cannot be run on the meta device; the figures are the "
                     "calibrated formulas'")
        return None
    from dsdoctor.checks.step_trace import Replayed, replay_setup

    context = mem.cuda_context_bytes(setup)
    capacity = gpu_bytes - context if gpu_bytes else None
    if capacity is not None and states_bytes > capacity:  # no step to replay: initialize cannot finish
        r = Replayed(None, None, "initialize (the model states alone)", 0, 0.0)
    else:
        # --attn flash is transformers' flash_attention_2: it allocates as the flash kernel the replay runs for SDPA
        r = replay_setup(setup, capacity, attn={"flash": "sdpa"}.get(attn, attn), lora_r=lora_r,
                         prefix_tokens=prefix_tokens)
    info = {"reserved_bytes": r.reserved, "allocated_bytes": r.allocated, "out_of_memory_in": r.oom_phase,
            "peak_allocated_in": r.peak_phase, "allocations": r.events, "seconds": round(r.seconds, 1),
            "capacity_bytes": capacity}
    if gpu_bytes:
        info["verdict"] = mem.replay_verdict(r, context, gpu_bytes)
    if r.reserved is None and r.unbounded_allocated is not None:
        return _replay_out_of_memory(est, r, info, capacity, context, gpu_bytes, notes)
    if r.reserved is None:
        notes.append((f"--replay: the replayed run runs out of the {gib(capacity)} GiB the caching allocator has "
                      f"(the GPU less the CUDA context) in {r.oom_phase}" if capacity > 0 else
                      f"--replay: the GPU's {gib(gpu_bytes)} GiB do not hold the CUDA context "
                      f"({gib(context)} GiB), so nothing can be allocated")
                     + (f": {gib(states_bytes)} GiB of model states" if r.events == 0 else "")
                     + "; the figures are the calibrated formulas', the verdict the replay's")
        return dc_replace(est, total=max(est.total, gpu_bytes + 1)), info
    terms = dict(est.terms)
    terms["allocator_slack"] = r.reserved - est.allocated
    notes.append(f"--replay: {r.events:,} allocations of 3 steps replayed through the caching allocator model "
                 f"({r.seconds:.1f} s): peak reserved {gib(r.reserved)} GiB, peak allocated {gib(r.allocated)} GiB "
                 f"in {r.peak_phase} (the formulas' allocated terms: {gib(est.allocated)} GiB); total = the replayed "
                 f"reserved + the CUDA context, and allocator_slack = the replayed reserved - the allocated terms")
    return dc_replace(est, terms=terms, reserved=r.reserved, total=r.reserved + context), info


def _replay_out_of_memory(est, r, info: dict, capacity: int, context: int, gpu_bytes: int, notes: list[str]):
    """The replay ran out of ``capacity`` bytes (``r``: :class:`dsdoctor.checks.step_trace.Replayed`, with the
    peaks of the same events replayed with no capacity): (the estimate at those unbounded peaks, ``info``, whose
    verdict (:func:`dsdoctor.checks.memory.replay_verdict`) "tight" is a ``fragmentation``: the allocations leave room
    and the cached blocks decide, MEM512)."""
    from dataclasses import replace as dc_replace

    terms = dict(est.terms)
    terms["allocator_slack"] = r.unbounded_reserved - est.allocated
    info.update(unbounded_reserved_bytes=r.unbounded_reserved, unbounded_allocated_bytes=r.unbounded_allocated,
                peak_allocated_in=r.peak_phase)
    fragmented = info["fragmentation"] = info["verdict"] == "tight"
    notes.append(f"--replay: the replayed run runs out of the {gib(capacity)} GiB the caching allocator has (the GPU "
                 f"less the CUDA context) in {r.oom_phase}; with no limit its allocations peak at "
                 f"{gib(r.unbounded_allocated)} GiB in {r.peak_phase} and it reserves {gib(r.unbounded_reserved)} GiB"
                 + (": the allocations leave room, the cached blocks' fragmentation decides (MEM512)" if fragmented
                    else ": the allocations alone come within 8% of the card or past it"))
    return dc_replace(est, terms=terms, reserved=r.unbounded_reserved, total=r.unbounded_reserved + context), info


def _one_gpu(report: Report, setup, est, result: dict, gpu_bytes: int, hw: Hardware, rates,
             host_bytes: int | None) -> None:
    """The verdict against one GPU's memory, and the ranked setups when it does not fit or is tight (none whose
    offload needs more than ``host_bytes`` of host RAM, when the node's RAM is known)."""
    from dsdoctor.checks import memory as mem

    headroom = gpu_bytes - est.total
    result["fits"] = headroom >= 0
    result["max_micro_batch"] = mem.max_micro_batch(setup, gpu_bytes)
    result["headroom_bytes"] = headroom
    replayed = result.get("replay") or {}
    kind = replayed.get("verdict") or mem.verdict(est.total, gpu_bytes)
    result["tight"] = kind == "tight"
    changes = mem.search(setup, gpu_bytes, rates, host_bytes=host_bytes) if kind != "fits" else []
    if changes and not any(c["fits"] for c in changes):
        changes += mem.training_changes(setup, gpu_bytes)
    result["what_to_change"] = changes
    if changes:
        report.tables.append((f"What to change (GPU: {gib(gpu_bytes)} GiB), ranked by estimated step time "
                              f"(same global batch {result['setup']['global_batch']}; {result['step_time_basis']}; "
                              f"now {result['step_time_s']['total']:.2f} s)",
                              ["change", "GiB", "fits", "step time (vs now)"], _change_rows(changes)))
    if kind == "no":
        first = next((c for c in changes if c["fits"]), None)
        if first is None:
            fix = "no setup of this model, method and batch fits: more GPUs with ZeRO-3, or the changes listed"
        elif "step_time_s" in first:
            fix = (f"{first['change']}: {gib(first['total_bytes'])} GiB, about {first['vs_current']:.2f}x the step "
                   f"time (the fastest that fits; the table lists the others)")
        else:
            fix = f"{first['change']} ({gib(first['total_bytes'])} GiB; {first['cost']})"
        report.add(mem.MEM501.finding(
            f"{gib(est.total)} GiB estimated per GPU (peak at {est.peak_phase}) > {gib(gpu_bytes)} GiB "
            f"({hw.memory_source})", fix=fix))
    elif kind == "tight" and replayed.get("fragmentation"):
        first = next((c for c in changes if c["fits"] and not c.get("tight")), None)
        report.add(mem.MEM512.finding(
            f"--replay: the allocations peak at {gib(replayed['unbounded_allocated_bytes'])} GiB, within the "
            f"{gib(replayed['capacity_bytes'])} GiB the caching allocator has, but it runs out in "
            f"{replayed['out_of_memory_in']}: no cached block is left for a request there (with no limit it would "
            f"reserve {gib(replayed['unbounded_reserved_bytes'])} GiB), so whether the run fits depends on how its "
            f"freed blocks fragment",
            fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment of every rank (freed memory "
                "then serves a request of any size: PyTorch's own advice for a fragmented cache)"
                + (f"; or {first['change']} ({gib(first['total_bytes'])} GiB) keeps a margin" if first else "")))
    elif kind == "tight":
        first = next((c for c in changes if c["fits"] and not c.get("tight")), None)
        report.add(mem.MEM502.finding(
            f"{gib(est.total)} of {gib(gpu_bytes)} GiB: {gib(abs(headroom))} GiB "
            f"{'spare' if headroom >= 0 else 'over'}, within the estimate's error ({mem.TIGHT:.0%})",
            fix=f"{first['change']} ({gib(first['total_bytes'])} GiB) keeps a margin" if first else None))
    else:
        report.add(mem.MEM500.finding(f"{gib(est.total)} of {gib(gpu_bytes)} GiB ({hw.memory_source}); largest "
                                      f"micro batch that fits: {result['max_micro_batch']}"))
    if setup.offload_optimizer != "none" or setup.offload_param != "none":
        plain = replace(setup, offload_optimizer="none", offload_param="none")
        plain_total = mem.estimate(plain).total
        if plain_total <= 0.95 * gpu_bytes:
            report.add(mem.MEM503.finding(f"without offload: {gib(plain_total)} of {gib(gpu_bytes)} GiB"))


def _common_cards(report: Report, setup, est, result: dict, host_bytes: int | None) -> None:
    """No GPU given or seen: the verdict for each of :data:`COMMON_CARDS` side by side, with the fastest setup that
    fits each (the same search as for one GPU)."""
    from dsdoctor.checks import memory as mem

    cards = common_cards()
    cache: dict = {}
    fits_by_card, best, max_micro = {}, {}, {}
    rows = []
    for card in cards:
        size = card.memory_bytes
        fits_by_card[card.name] = est.total <= size
        max_micro[card.name] = mem.max_micro_batch(setup, size)
        rates, _ = rates_for(card)
        # a card the estimate exceeds is NO here, even within TIGHT above it (one named GPU then gets MEM502)
        kind = "no" if not fits_by_card[card.name] else mem.verdict(est.total, size)
        found = mem.search(setup, size, rates, limit=1, cache=cache, host_bytes=host_bytes) \
            if kind != "fits" else []
        best[card.name] = found[0] if found and found[0]["fits"] else None
        if kind == "fits":
            advice = "as configured"
        elif best[card.name]:
            advice = (f"{best[card.name]['change']} ({gib(best[card.name]['total_bytes'])} GiB, "
                      f"{best[card.name]['vs_current']:.2f}x the step time)")
        else:
            advice = "no setup of this method and batch fits one card"
        rows.append([card.label, {"fits": "yes", "tight": "tight", "no": "NO"}[kind],
                     gib(size - est.total), str(max_micro[card.name]), advice])
    result["fits"] = None
    result["cards"] = {card.name: {"memory_bytes": card.memory_bytes, "memory_source": card.memory_source}
                       for card in cards}
    result["fits_by_card"] = fits_by_card
    result["max_micro_batch"] = max_micro
    result["best_change_by_card"] = best
    report.tables.append((f"Common cards side by side (no GPU seen or given: --gpu NAME or --gpu-mem GiB for yours; "
                          f"world size {setup.world_size})",
                          ["card (NVML memory)", "fits", "headroom GiB", "max micro batch", "fastest setup that fits"],
                          rows))
    too_small = [c for c in cards if not fits_by_card[c.name]]
    if not too_small:
        report.add(mem.MEM500.finding(f"{gib(est.total)} GiB per GPU: fits every card listed "
                                      f"({', '.join(c.label for c in cards)})", title="fits on every card listed"))
    elif len(too_small) == len(cards):
        largest = max(cards, key=lambda c: c.memory_bytes)
        rescue = [c.name for c in cards if best[c.name]]
        report.add(mem.MEM501.finding(
            f"{gib(est.total)} GiB per GPU: more than any card listed (the largest: {largest.label})",
            fix=("Change the setup as the table says for each card (" + ", ".join(rescue) + ")" if rescue else
                 "More GPUs with ZeRO-3, offload, or LoRA") + "; --gpu NAME or --gpu-mem GiB for yours"))
    else:
        report.add(mem.MEM511.finding(f"{gib(est.total)} GiB per GPU: does not fit "
                                      + ", ".join(c.label for c in too_small),
                                      fix="On those cards, the setup the table gives; --gpu NAME or --gpu-mem GiB "
                                          "for yours"))


@click.command("estimate")
@click.option("--model", required=True, metavar="NAME|PATH",
              help="A registry name (chatglm-6b, qwen2.5-7b, llama-2-7b, ...: an unknown name lists the closest; README lists all) or a "
                   "local model directory / config.json.")
@click.option("--zero", type=click.IntRange(0, 3), default=2, show_default=True, help="ZeRO stage.")
@click.option("--offload-optimizer", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--offload-param", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--method", type=click.Choice(["full", "lora", "freeze", "ptuning"]), default="full",
              show_default=True)
@click.option("--lora-r", type=Count(1, 65536), default=8, show_default=True)
@click.option("--lora-targets", default=None,
              help="Comma-separated module names (default: peft's for the model type, else the attention "
                   "projections the reference trainer falls back to, which the report then names).")
@click.option("--lora-dropout", type=FiniteFloat(min=0, max=1), default=0.05, show_default=True)
@click.option("--freeze-last", type=Count(0, 100_000), default=2, show_default=True,
              help="freeze: the last N layers train.")
@click.option("--prefix-tokens", type=Count(1, 1_000_000), default=16, show_default=True,
              help="ptuning: virtual tokens.")
@click.option("--gpus", type=Count(1, 1024), default=None,
              help="GPUs per node (default: the GPUs NVML sees, else 1, reported as assumed).")
@click.option("--nodes", type=Count(1, 100_000), default=1, show_default=True)
@click.option("--micro-batch", type=Count(1, 1_000_000), default=1, show_default=True,
              help="train_micro_batch_size_per_gpu.")
@click.option("--grad-accum", type=Count(1, 1_000_000), default=1, show_default=True,
              help="gradient_accumulation_steps (kept with the micro batch when changes are proposed).")
@click.option("--seq-len", type=Count(1, 10_000_000), default=1024, show_default=True)
@click.option("--grad-ckpt/--no-grad-ckpt", default=None,
              help="Gradient checkpointing (default: on, except for ptuning, which peft refuses with it: as the "
                   "reference trainer and smoke do).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--deepspeed", default=None, metavar="ds_config.json",
              help="Take stage, offload, batch, precision and bucket sizes from this config.")
@click.option("--gpu", default=None, metavar="NAME",
              help="The GPU as nvidia-smi names it (\"NVIDIA A100-SXM4-80GB\", RTX 4090): its memory and capability.")
@click.option("--gpu-cc", default=None, metavar="X.Y", help="Compute capability, with a --gpu the table lacks.")
@click.option("--gpu-mem", default=None, metavar="GiB|auto", help="Memory per GPU (default: --gpu, else NVML).")
@click.option("--host-mem", type=FiniteFloat(min=0, min_open=True, max=1_000_000), default=None, metavar="GiB",
              help="Host RAM per node (offload check).")
@click.option("--compare", is_flag=True, help="Show ZeRO stages 0 to 3 side by side.")
@click.option("--launch", type=click.Choice(["engine", "engine-loss", "trainer"]), default="engine",
              show_default=True,
              help="The training loop: DeepSpeed's engine loop as the tutorials write it (`outputs = engine(...)` "
                   "keeps the logits through backward), that loop keeping only the loss (`loss = "
                   "engine(...).loss`, as dsdoctor smoke's reference trainer), or the HF Trainer.")
@click.option("--attn", type=click.Choice(["sdpa", "eager", "flash"]), default=None,
              help="The attention implementation the run uses (default: what the installed transformers picks for "
                   "the model: SDPA where the class supports it, else eager, which keeps the s x s scores).")
@click.option("--replay", is_flag=True,
              help="Run the step's tensors on the meta device and replay their allocations through a model of "
                   "PyTorch's caching allocator: the reserved peak nvidia-smi shows, for ZeRO-0 to 3 with "
                   "or without CPU offload (seconds; imports torch and transformers).")
@report_command(inputs=("model", "deepspeed"))
def estimate(model, zero, offload_optimizer, offload_param, method, lora_r, lora_targets, lora_dropout, freeze_last,
             prefix_tokens, gpus, nodes, micro_batch, grad_accum, seq_len, grad_ckpt, precision, deepspeed, gpu, gpu_cc,
             gpu_mem, host_mem, compare, launch, attn, replay) -> Report:
    """Per-GPU memory of a DeepSpeed fine-tuning run: model states by ZeRO stage, activations, logits, buffers,
    allocator and CUDA context, against the GPU's memory; what fits, and the fastest setups that do."""
    ctx = click.get_current_context()
    if grad_ckpt is None:  # our default must not make an error of the user's method (MEM507)
        grad_ckpt = method != "ptuning"
    explicit = {name for name in ("zero", "offload_optimizer", "offload_param", "micro_batch", "precision",
                                  "grad_accum")
                if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    return run_estimate(model, zero, offload_optimizer, offload_param, method, lora_r, lora_targets, lora_dropout,
                        freeze_last, prefix_tokens, gpus, nodes, micro_batch, seq_len, grad_ckpt, precision,
                        deepspeed, gpu_mem, host_mem, compare, explicit, grad_accum=grad_accum, gpu=gpu, gpu_cc=gpu_cc,
                        launch=launch, attn=attn, replay=replay)
