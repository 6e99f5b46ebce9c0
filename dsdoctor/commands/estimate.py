"""``dsdoctor estimate``: per-GPU memory of a DeepSpeed fine-tuning run, before the run.

The arithmetic is :mod:`dsdoctor.checks.memory`; this module resolves the model and the setup (flags, or a
ds_config), the GPU's memory (flag, NVML, or a table of common cards), and builds the report: the breakdown, host
RAM, whether it fits and the largest micro batch that does, a ranked list of what to change, the ZeRO stages side
by side (``--compare``) and DeepSpeed's and accelerate's estimators beside ours.

A registry model never imports torch; ``--model PATH`` of an architecture transformers implements is counted on
the meta device (:mod:`dsdoctor.meta_count`).
"""

from __future__ import annotations

from dataclasses import replace

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report

GIB = 2 ** 30

#: Usable memory NVML reports for common cards, bytes (RTX 3090/4090 and A10: 24 GiB; A100 40GB; A100/H100
#: 80GB; H200).
CARDS = {"24 GiB (RTX 3090/4090, A10)": 24 * GIB, "40 GiB (A100 40GB)": 40 * GIB,
         "80 GiB (A100/H100 80GB)": 80 * GIB, "141 GiB (H200)": 143771 * 2 ** 20}

#: Step-time cost of each change, from the literature and DeepSpeed's docs; the order is the ranking among the
#: changes that fit.
COSTS = {
    "micro_batch": "same global batch; smaller kernels, typically 5-20% slower per sample",
    "grad_ckpt": "one extra forward per step: about +30-40% step time (Chen et al. 2016)",
    "zero": "ZeRO-3 moves 1.5x the data of ZeRO-2 (ZeRO paper section 7): small on NVLink, large across nodes",
    "offload_optimizer": "the Adam step runs on the CPU, gradients cross PCIe: often 1.5-3x slower steps "
                         "(ZeRO-Offload, Ren et al. 2021)",
    "offload_param": "weights stream from the host every layer: several times slower (ZeRO-Infinity)",
    "seq_len": "truncates longer samples: changes what the model learns",
    "method": "trains an adapter instead of every weight: changes the method",
}


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _from_deepspeed(path: str, explicit: set[str], values: dict, notes: list[str]) -> dict:
    """Stage, offload, micro batch, precision and bucket sizes from a ds_config; a flag given on the command line
    wins. Values of "auto" are left to the flags (the Trainer fills them)."""
    from dsdoctor.configfile import read_ds_config

    config, _duplicates = read_ds_config(path)

    def bad(key: str, value) -> DsdoctorError:
        return DsdoctorError(f"{path}: {key} = {value!r} is not usable (dsdoctor check {path} explains it)")

    zero = config.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise bad("zero_optimization", zero)

    def take(option: str, value, cast, source: str):
        if option in explicit or value is None or value == "auto":
            if value == "auto":
                notes.append(f'{source} is "auto" in {path}: using --{option.replace("_", "-")} '
                             f'{values[option]}')
            return
        try:
            values[option] = cast(value)
        except (TypeError, ValueError):
            raise DsdoctorError(f"{path}: {source} = {value!r} is not usable (run dsdoctor check {path})") from None
        values.setdefault("_from_config", []).append(option)

    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or (isinstance(stage, float) and not stage.is_integer()):
        raise bad("zero_optimization.stage", stage)
    take("zero", zero.get("stage", 0), int, "zero_optimization.stage")  # DeepSpeed's default stage is 0
    for key in ("offload_optimizer", "offload_param"):
        block = zero.get(key)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise bad(f"zero_optimization.{key}", block)
        device = block.get("device", "none")
        if device not in ("none", "cpu", "nvme", "auto", None):
            raise bad(f"zero_optimization.{key}.device", device)
        take(key, device or "none", str, f"zero_optimization.{key}.device")
    if zero.get("cpu_offload") is True and "offload_optimizer" not in explicit:
        values["offload_optimizer"] = "cpu"
    take("micro_batch", config.get("train_micro_batch_size_per_gpu"), int, "train_micro_batch_size_per_gpu")
    enabled = [name for name in ("bf16", "fp16")
               if isinstance(config.get(name) or (config.get("bfloat16") if name == "bf16" else None), dict)
               and (config.get(name) or config.get("bfloat16"))["enabled"] is True]
    if len(enabled) == 2:
        raise DsdoctorError(f"{path}: bf16 and fp16 are both enabled; DeepSpeed refuses that "
                            f"(dsdoctor check {path} explains it)")
    if enabled and "precision" not in explicit:
        values["precision"] = enabled[0]
        values.setdefault("_from_config", []).append("precision")
    if not any(isinstance(config.get(n), dict) and config[n].get("enabled") in (True, "auto")
               for n in ("bf16", "fp16", "bfloat16")) and "precision" not in explicit:
        values["precision"] = "fp32"
        notes.append(f"{path} enables neither bf16 nor fp16: DeepSpeed trains in fp32")
    for key, option in (("reduce_bucket_size", "reduce_bucket_size"), ("overlap_comm", "overlap_comm"),
                        ("contiguous_gradients", "contiguous_gradients"),
                        ("stage3_prefetch_bucket_size", "prefetch_bucket_size"),
                        ("stage3_max_live_parameters", "max_live_parameters"), ("sub_group_size", "sub_group_size")):
        value = zero.get(key)
        if option in ("overlap_comm", "contiguous_gradients"):
            if value is None or value == "auto":
                continue
            if not isinstance(value, bool):
                raise bad(f"zero_optimization.{key}", value)
            values[option] = value
        elif value is not None and value != "auto":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e12:
                raise bad(f"zero_optimization.{key}", value)
            values[option] = int(value)
        else:
            continue
        values.setdefault("_from_config", []).append(option)
    return values


def build_setup(model: str, method: str, lora_r: int, lora_targets: str | None, freeze_last: int,
                prefix_tokens: int, lora_dropout: float, zero: int, offload_optimizer: str, offload_param: str,
                gpus: int, nodes: int, micro_batch: int, seq_len: int, grad_ckpt: bool, precision: str,
                extra: dict | None = None):
    """The :class:`dsdoctor.checks.memory.Setup` for these choices, with the model resolved and its parameters
    counted: analytically for a registry name and for a local config.json whose every key the formulas account for
    (:func:`dsdoctor.models.unmodeled_keys`); otherwise, for an architecture transformers implements, on the meta
    device (importing transformers' modeling code takes about 4.5 s, so that path is the slow one).

    Returns (setup, base_total, counting): the base model's parameters, and how they were counted.

    Raises:
        DsdoctorError: an unknown model or method, impossible numbers (a micro batch, sequence length, GPU or node
            count below 1, a LoRA rank below 1, ``--freeze-last`` above the layers), offload at ZeRO-0, or
            parameter offload below ZeRO-3.
    """
    from dsdoctor.checks.memory import Setup
    from dsdoctor.models import default_lora_targets, is_local, resolve_arch, trainable_params

    for name, value in (("--micro-batch", micro_batch), ("--seq-len", seq_len), ("--gpus", gpus),
                        ("--nodes", nodes)):
        if value < 1:
            raise DsdoctorError(f"{name} must be at least 1, got {value}")
    if seq_len > 10_000_000 or micro_batch > 1_000_000:
        raise DsdoctorError(f"--seq-len {seq_len} / --micro-batch {micro_batch}: not a training setup")
    if offload_param != "none" and zero != 3:
        raise DsdoctorError(f"--offload-param needs --zero 3 (DeepSpeed offloads parameters only at stage 3), "
                            f"got --zero {zero}")
    if offload_optimizer != "none" and zero == 0:
        raise DsdoctorError("--offload-optimizer needs ZeRO-1 or above (DeepSpeed's ZeRO-Offload); "
                            "use --zero 1, 2 or 3")
    if not 0 <= lora_dropout < 1:
        raise DsdoctorError(f"--lora-dropout must be in [0, 1), got {lora_dropout}")
    arch = resolve_arch(model)
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip()) if lora_targets else \
        default_lora_targets(arch)
    trainable = trainable_params(arch, method, lora_r=lora_r, lora_targets=targets, freeze_last=freeze_last,
                                 prefix_tokens=prefix_tokens)
    total = arch.total_params
    counting = "analytic, from the registry's config.json values (checked against transformers on the meta device " \
               "in tests/test_models.py)"
    if is_local(model):
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
    added = trainable if method in ("lora", "ptuning") else 0
    setup = Setup(arch=arch, total_params=total + added, trainable_params=trainable, method=method, zero_stage=zero,
                  offload_optimizer=offload_optimizer, offload_param=offload_param, gpus=gpus, nodes=nodes,
                  micro_batch=micro_batch, seq_len=seq_len, grad_ckpt=grad_ckpt, precision=precision,
                  lora_targets=targets if method == "lora" else (), lora_dropout=lora_dropout,
                  freeze_last=freeze_last, **(extra or {}))
    return setup, total, counting


def gpu_memory(option: str | None, gpus_option: int | None) -> tuple[int | None, int, str]:
    """(usable bytes per GPU or None, GPUs per node, where they came from) from ``--gpu-mem``/``--gpus`` or NVML.

    Raises:
        DsdoctorError: a ``--gpu-mem`` that is not a positive number of GiB or ``auto``; ``auto`` with no GPU.
    """
    from dsdoctor.hardware import visible_gpus

    detected = visible_gpus() if (option in (None, "auto") or gpus_option is None) else []
    if option is None or option == "auto":
        if detected:
            memory = min(g.memory_bytes for g in detected)
            return memory, gpus_option or len(detected), \
                f"{len(detected)} x {detected[0].name} ({gib(memory)} GiB, NVML)"
        if option == "auto":
            raise DsdoctorError("--gpu-mem auto: NVML sees no GPU here; give --gpu-mem GiB (e.g. 80)")
        return None, gpus_option or 1, "no GPU seen (NVML) and no --gpu-mem: common cards shown"
    try:
        value = float(option)
    except ValueError:
        raise DsdoctorError(f"--gpu-mem must be a number of GiB or auto, got {option!r}") from None
    if not 0 < value < 100_000:  # also refuses nan and inf
        raise DsdoctorError(f"--gpu-mem must be a positive number of GiB, got {option}")
    return int(value * GIB), gpus_option or (len(detected) if detected else 1), f"--gpu-mem {option} GiB"


def what_to_change(setup, gpu_bytes: int) -> list[dict]:
    """Single changes that bring ``setup`` under ``gpu_bytes`` (or closest to it), ranked: those that fit first,
    then by step-time cost (:data:`COSTS` order). Each: change, total bytes, fits, cost."""
    from dsdoctor.checks.memory import estimate, max_micro_batch

    options: list[tuple[str, str, object]] = []
    if setup.micro_batch > 1:
        best = max_micro_batch(replace(setup, micro_batch=1), gpu_bytes, limit=setup.micro_batch - 1)
        mb = max(best, 1)
        factor = setup.micro_batch / mb
        options.append(("micro_batch", f"--micro-batch {mb} with {factor:g}x gradient_accumulation_steps",
                        replace(setup, micro_batch=mb)))
    if not setup.grad_ckpt and setup.method != "ptuning":
        options.append(("grad_ckpt", "gradient checkpointing on", replace(setup, grad_ckpt=True)))
    if setup.zero_stage < 3 and setup.world_size > 1:
        stage = 3 if setup.zero_stage == 2 else 2
        options.append(("zero", f"ZeRO-{stage}", replace(setup, zero_stage=stage)))
    if setup.offload_optimizer == "none" and setup.method in ("full", "freeze"):
        options.append(("offload_optimizer", "offload_optimizer to cpu" + ("" if setup.zero_stage else " (ZeRO-1)"),
                        replace(setup, offload_optimizer="cpu", zero_stage=max(setup.zero_stage, 1))))
    if setup.offload_param == "none":
        options.append(("offload_param", "ZeRO-3 with offload_param and offload_optimizer to cpu",
                        replace(setup, zero_stage=3, offload_param="cpu", offload_optimizer="cpu")))
    if setup.seq_len > 256:
        options.append(("seq_len", f"--seq-len {setup.seq_len // 2}", replace(setup, seq_len=setup.seq_len // 2)))
    if setup.method == "full":
        from dsdoctor.models import default_lora_targets, trainable_params

        targets = default_lora_targets(setup.arch)
        lora_t = trainable_params(setup.arch, "lora", lora_targets=targets)
        options.append(("method", f"LoRA r=8 on {','.join(targets)}",
                        replace(setup, method="lora", trainable_params=lora_t, lora_targets=targets,
                                total_params=setup.total_params + lora_t)))
    rows = []
    order = list(COSTS)
    for key, text, changed in options:
        total = estimate(changed).total
        rows.append({"change": text, "total_bytes": total, "fits": total <= gpu_bytes, "cost": COSTS[key],
                     "_rank": (total > gpu_bytes, order.index(key))})
    rows.sort(key=lambda r: r.pop("_rank"))
    return rows


def run_estimate(model: str, zero: int, offload_optimizer: str, offload_param: str, method: str, lora_r: int,
                 lora_targets: str | None, lora_dropout: float, freeze_last: int, prefix_tokens: int, gpus: int | None,
                 nodes: int, micro_batch: int, seq_len: int, grad_ckpt: bool, precision: str,
                 deepspeed: str | None, gpu_mem: str | None, host_mem: float | None, compare: bool,
                 explicit: set[str]) -> Report:
    """The body of ``dsdoctor estimate`` (see the module docstring). Raises DsdoctorError on bad input."""
    from dsdoctor.checks import memory as mem

    notes: list[str] = []
    values = {"zero": zero, "offload_optimizer": offload_optimizer, "offload_param": offload_param,
              "micro_batch": micro_batch, "precision": precision}
    if deepspeed:
        values = _from_deepspeed(deepspeed, explicit, values, notes)
    from_config = values.pop("_from_config", [])
    extra = {k: values.pop(k) for k in list(values) if k in ("reduce_bucket_size", "overlap_comm",
                                                              "contiguous_gradients", "prefetch_bucket_size",
                                                              "max_live_parameters", "sub_group_size")}
    if values["zero"] not in (0, 1, 2, 3):
        raise DsdoctorError(f"ZeRO stage must be 0, 1, 2 or 3, got {values['zero']}")
    if deepspeed and values["offload_param"] != "none" and values["zero"] != 3 and "offload_param" in from_config:
        raise DsdoctorError(f"{deepspeed} offloads parameters (zero_optimization.offload_param), which DeepSpeed "
                            f"does only at ZeRO-3, but the stage is {values['zero']}"
                            + (" (--zero on the command line)" if "zero" in explicit else ""))
    if values["offload_optimizer"] not in ("none", "cpu", "nvme") or values["offload_param"] not in ("none", "cpu", "nvme"):
        raise DsdoctorError("offload devices are none, cpu or nvme")
    gpu_bytes, gpus_per_node, gpu_source = gpu_memory(gpu_mem, gpus)
    setup, base_total, counting = build_setup(
        model, method, lora_r, lora_targets, freeze_last, prefix_tokens, lora_dropout, values["zero"],
        values["offload_optimizer"], values["offload_param"], gpus_per_node, nodes, values["micro_batch"], seq_len,
        grad_ckpt, values["precision"], extra)
    est = mem.estimate(setup)
    states = mem.model_state_bytes(setup)
    arch = setup.arch
    report = Report("estimate")

    per_gpu = dict(est.terms)
    per_gpu["total"] = est.total
    result = {
        "model": arch.name, "model_source": arch.source, "counting": counting,
        "total_params": base_total, "trainable_params": setup.trainable_params,
        "setup": {"method": method, "zero_stage": setup.zero_stage, "offload_optimizer": setup.offload_optimizer,
                  "offload_param": setup.offload_param, "gpus_per_node": setup.gpus, "nodes": setup.nodes,
                  "world_size": setup.world_size, "micro_batch": setup.micro_batch, "seq_len": setup.seq_len,
                  "grad_ckpt": setup.grad_ckpt, "precision": setup.precision,
                  "lora_targets": list(setup.lora_targets), "from_deepspeed_config": from_config},
        "per_gpu_bytes": per_gpu,
        "model_states_bytes": sum(states[k] for k in ("weights", "gradients", "persistent_gradients",
                                                      "optimizer_states")),
        "peak_phase": est.peak_phase, "phases_bytes": est.phases,
        "allocated_bytes": est.allocated, "reserved_bytes": est.reserved,
        "host_bytes": est.host, "gpu_memory_bytes": gpu_bytes, "gpu_source": gpu_source,
        "deepspeed_estimator_bytes": mem.deepspeed_estimator_bytes(setup),
        "accelerate_estimator_bytes": mem.accelerate_estimator_bytes(setup),
    }
    report.result = result

    # the breakdown
    sources = {"weights": "2 bytes x parameters (x 1/N under ZeRO-3)", "gradients": "16-bit, partitioned from ZeRO-2",
               "optimizer_states": "Adam: fp32 master + 2 moments, 12 bytes x trainable / N",
               "optimizer_step": "fp32 gradient copies during the step",
               "activations": "saved at the start of backward (layer inputs under checkpointing)",
               "checkpoint_recompute": "one layer recomputed in backward",
               "logits_and_loss": "micro x seq x vocab x 12 bytes (fp32 log-softmax and gradients)",
               "deepspeed_buffers": "DeepSpeed's buckets: gradient reduction, ZeRO-3 gathered parameters, offload",
               "allocator_slack": "PyTorch caching allocator (fitted on an H200)",
               "cuda_context": "CUDA context, cuBLAS, NCCL (measured)"}
    rows = [[term, gib(value), sources.get(term, "")] for term, value in est.terms.items()]
    rows.append(["total (what nvidia-smi shows)", gib(est.total), f"peak at: {est.peak_phase}"])
    rows.append(["(model states: weights + gradients + Adam)", gib(result["model_states_bytes"]),
                 "the ZeRO paper's 16 bytes x parameters, partitioned by stage"])
    report.tables.append((f"Per-GPU memory, GiB: {arch.name}, {method}, ZeRO-{setup.zero_stage}, "
                          f"micro batch {setup.micro_batch} x seq {setup.seq_len}, "
                          f"{'checkpointing' if setup.grad_ckpt else 'no checkpointing'}, {setup.precision}, "
                          f"{setup.world_size} GPU(s)", ["term", "GiB", "what"], rows))
    host_rows = [[k, gib(v)] for k, v in est.host.items()]
    report.tables.append(("Host RAM, GiB", ["what", "GiB"], host_rows))
    report.tables.append(("Other estimators, per GPU (model states only: no activations, no logits)",
                          ["estimator", "GiB"],
                          [["DeepSpeed estimate_zero%s_model_states_mem_needs (all parameters as trained)"
                            % ("3" if setup.zero_stage == 3 else "2"), gib(result["deepspeed_estimator_bytes"])],
                           ["accelerate estimate-memory, Training using Adam", gib(result["accelerate_estimator_bytes"])],
                           ["dsdoctor", gib(est.total)]]))

    # fits?
    if gpu_bytes is None:
        fits_by_card = {name: est.total <= size for name, size in CARDS.items()}
        result["fits"] = None
        result["fits_by_card"] = fits_by_card
        result["max_micro_batch"] = {name: mem.max_micro_batch(setup, size) for name, size in CARDS.items()}
        report.tables.append(("Common cards (no GPU seen: give --gpu-mem or run on the GPU machine)",
                              ["card", "fits", "headroom GiB", "max micro batch"],
                              [[name, "yes" if fits_by_card[name] else "NO", gib(size - est.total),
                                str(result["max_micro_batch"][name])] for name, size in CARDS.items()]))
        too_small = [n.split(" (")[0] for n, f in fits_by_card.items() if not f]
        ask = "give --gpu-mem GiB (or run where NVML sees the GPUs) for the ranked list of changes"
        if not too_small:
            report.add(mem.MEM500.finding(f"{gib(est.total)} GiB per GPU: fits every card listed",
                                          title="fits on 24 GiB and up"))
        elif len(too_small) == len(CARDS):
            report.add(mem.MEM501.finding(f"{gib(est.total)} GiB per GPU: more than any card listed (the largest, "
                                          f"an H200, has {gib(max(CARDS.values()))} GiB)",
                                          fix=f"More GPUs with ZeRO-3, offload, or LoRA; {ask}"))
        else:
            report.add(mem.MEM501.finding(f"{gib(est.total)} GiB per GPU: does not fit " + ", ".join(too_small)
                                          + " cards", severity="info", title="does not fit on smaller cards",
                                          fix=ask))
    else:
        fits = est.total <= gpu_bytes
        result["fits"] = fits
        result["max_micro_batch"] = mem.max_micro_batch(setup, gpu_bytes)
        headroom = gpu_bytes - est.total
        result["headroom_bytes"] = headroom
        changes = what_to_change(setup, gpu_bytes) if (not fits or headroom < 0.05 * gpu_bytes) else []
        result["what_to_change"] = changes
        if changes:
            report.tables.append((f"What to change (GPU: {gib(gpu_bytes)} GiB), ranked", ["change", "GiB", "fits",
                                                                                            "step-time cost"],
                                  [[c["change"], gib(c["total_bytes"]), "yes" if c["fits"] else "no", c["cost"]]
                                   for c in changes]))
        if not fits:
            first = next((c for c in changes if c["fits"]), None)
            fix = (f"{first['change']} ({gib(first['total_bytes'])} GiB; {first['cost']})" if first
                   else "no single change fits: combine them (see the list), or use more GPUs with ZeRO-3")
            report.add(mem.MEM501.finding(
                f"{gib(est.total)} GiB estimated per GPU (peak at {est.peak_phase}) > {gib(gpu_bytes)} GiB "
                f"({gpu_source})", fix=fix))
        elif headroom < 0.05 * gpu_bytes:
            report.add(mem.MEM502.finding(f"{gib(est.total)} of {gib(gpu_bytes)} GiB: {gib(headroom)} GiB spare"))
        else:
            report.add(mem.MEM500.finding(f"{gib(est.total)} of {gib(gpu_bytes)} GiB ({gpu_source}); largest "
                                          f"micro batch that fits: {result['max_micro_batch']}"))
        if setup.offload_optimizer != "none" or setup.offload_param != "none":
            plain = replace(setup, offload_optimizer="none", offload_param="none")
            plain_total = mem.estimate(plain).total
            if plain_total <= 0.95 * gpu_bytes:
                report.add(mem.MEM503.finding(f"without offload: {gib(plain_total)} of {gib(gpu_bytes)} GiB"))

    # host RAM
    from dsdoctor.hardware import host_ram_bytes

    host_total = int(host_mem * GIB) if host_mem else (host_ram_bytes() if gpu_source.endswith("NVML)") else None)
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
        report.tables.append((f"ZeRO stages side by side, GiB ({setup.world_size} GPU(s))",
                              ["term"] + [f"ZeRO-{s}" for s in stages], body))
    return report


@click.command("estimate")
@click.option("--model", required=True, metavar="NAME|PATH",
              help="A registry name (chatglm-6b, qwen2.5-7b, llama-2-7b, ...: an unknown name lists them all) or a "
                   "local model directory / config.json.")
@click.option("--zero", type=click.IntRange(0, 3), default=2, show_default=True, help="ZeRO stage.")
@click.option("--offload-optimizer", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--offload-param", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--method", type=click.Choice(["full", "lora", "freeze", "ptuning"]), default="full",
              show_default=True)
@click.option("--lora-r", type=int, default=8, show_default=True)
@click.option("--lora-targets", default=None, help="Comma-separated module names (default: peft's for the model).")
@click.option("--lora-dropout", type=float, default=0.05, show_default=True)
@click.option("--freeze-last", type=int, default=2, show_default=True, help="freeze: the last N layers train.")
@click.option("--prefix-tokens", type=int, default=16, show_default=True, help="ptuning: virtual tokens.")
@click.option("--gpus", type=int, default=None, help="GPUs per node (default: the GPUs NVML sees, else 1).")
@click.option("--nodes", type=int, default=1, show_default=True)
@click.option("--micro-batch", type=int, default=1, show_default=True, help="train_micro_batch_size_per_gpu.")
@click.option("--seq-len", type=int, default=1024, show_default=True)
@click.option("--grad-ckpt/--no-grad-ckpt", default=True, show_default=True, help="Gradient checkpointing.")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--deepspeed", default=None, metavar="ds_config.json",
              help="Take stage, offload, micro batch, precision and bucket sizes from this config.")
@click.option("--gpu-mem", default=None, metavar="GiB|auto", help="Memory per GPU (default: NVML).")
@click.option("--host-mem", type=float, default=None, metavar="GiB", help="Host RAM per node (offload check).")
@click.option("--compare", is_flag=True, help="Show ZeRO stages 0 to 3 side by side.")
@report_command(inputs=("model", "deepspeed"))
def estimate(model, zero, offload_optimizer, offload_param, method, lora_r, lora_targets, lora_dropout, freeze_last,
             prefix_tokens, gpus, nodes, micro_batch, seq_len, grad_ckpt, precision, deepspeed, gpu_mem, host_mem,
             compare) -> Report:
    """Per-GPU memory of a DeepSpeed fine-tuning run: model states by ZeRO stage, activations, logits, buffers,
    allocator and CUDA context, against the GPU's memory; what fits and what to change."""
    ctx = click.get_current_context()
    explicit = {name for name in ("zero", "offload_optimizer", "offload_param", "micro_batch", "precision")
                if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    if host_mem is not None and not 0 < host_mem < 1_000_000:
        raise DsdoctorError(f"--host-mem must be a positive number of GiB, got {host_mem}")
    if gpus is not None and gpus < 1:
        raise DsdoctorError(f"--gpus must be at least 1, got {gpus}")
    return run_estimate(model, zero, offload_optimizer, offload_param, method, lora_r, lora_targets, lora_dropout,
                        freeze_last, prefix_tokens, gpus, nodes, micro_batch, seq_len, grad_ckpt, precision,
                        deepspeed, gpu_mem, host_mem, compare, explicit)

