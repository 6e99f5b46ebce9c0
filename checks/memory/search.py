"""The verdict against a GPU's memory and what to change when a setup does not fit: every setup that trains the same
way, ranked by step time."""

from __future__ import annotations

from dataclasses import replace

from dsdoctor.checks.memory.speed import step_time
from dsdoctor.checks.memory.terms import estimate

# --- what to change: every setup that trains the same way, ranked by step time --------------------------------------

#: What a change that alters the training itself costs; these rows come after every setup that trains the same way.
TRAINING_CHANGES = {
    "seq_len": "truncates longer samples: changes what the model learns",
    "method": "trains an adapter instead of every weight: changes the method",
}

#: Headroom below which a fitting setup is tight (MEM502): the estimate's largest |error| against NVML's peak on
#: the fit points (7.1%, ``benchmarks/results/memory-loops/calibration-fit.txt``), rounded up. Near the limit the
#: caching allocator's fragmentation decides: two held-out runs at 94% and 98% of the card's estimate ran out of memory.
TIGHT = 0.08

#: The band below the card for ZeRO-3 with parameter offload, whose caching-allocator slack the formulas
#: under-estimate: of the ten parameter-offload runs on record (rounds 3-14, ``benchmarks/results/memory-loops/``),
#: every one was under, by 1.3-14.1% (Llama-3.2-3B full, both offloads, under the Trainer: -14.1%). The slack
#: there comes from the 16-bit partitions copied from the host module by module between the activations' blocks,
#: whose order a sum of sizes does not capture; ``--replay`` replays that order (0.0-0.3% on the same runs).
TIGHT_PARAM_OFFLOAD = 0.15


def band_below(setup=None) -> float:
    """How far below the card an estimate of ``setup`` (a :class:`Setup`, or None) is still "tight": :data:`TIGHT`,
    or :data:`TIGHT_PARAM_OFFLOAD` for ZeRO-3 with parameter offload."""
    if setup is not None and setup.zero_stage == 3 and setup.offload_param != "none":
        return TIGHT_PARAM_OFFLOAD
    return TIGHT


def verdict(total: int, gpu_bytes: int, setup=None) -> str:
    """The estimate's verdict for ``total`` bytes on a GPU of ``gpu_bytes``: "tight" within :data:`TIGHT` of the
    card on either side, or within :func:`band_below` below it for ``setup`` (MEM502: within the estimate's own
    error, it may or may not fit), else "fits" or "no" (MEM501)."""
    if 0 < total - gpu_bytes < TIGHT * gpu_bytes or 0 <= gpu_bytes - total < band_below(setup) * gpu_bytes:
        return "tight"
    return "fits" if total < gpu_bytes else "no"


def replay_verdict(replayed, context: int, gpu_bytes: int) -> str:
    """The verdict of ``estimate --replay`` ("fits", "tight" or "no", as :func:`verdict`) for ``replayed``
    (:class:`dsdoctor.checks.step_trace.Replayed` of a run given ``gpu_bytes - context`` bytes). A replay that fits is
    judged by its reserved peak plus the CUDA context ``context`` (bytes) in :func:`verdict`'s band. One that ran out of
    memory is "no" when the bytes allocated at once (``unbounded_allocated``, the same events replayed with no limit)
    plus the context come within :data:`TIGHT` of the card or past it. Below that it is "tight" (MEM512): the
    allocations leave room, and the order in which the run frees blocks, which the replay does not know to the byte,
    decides whether the caching allocator finds a block after releasing its free segments
    (``c10/cuda/CUDACachingAllocator.cpp``). Seen on the H200: Qwen3-14B LoRA with allocations at 83% of the card
    trained where its replay ran out; Qwen3-8B LoRA at sequence 4096, micro batch 13, with allocations at 98%, ran out
    as its replay did (``benchmarks/results/memory-loops/README.md``)."""
    if replayed.reserved is not None:
        return verdict(replayed.reserved + context, gpu_bytes)
    if replayed.unbounded_allocated is None:  # nothing replayed: the model states alone do not fit
        return "no"
    return "tight" if replayed.unbounded_allocated + context < (1 - TIGHT) * gpu_bytes else "no"


def _divisors(n: int, limit: int = 4096) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidates(setup) -> list:
    """Every DeepSpeed setup that trains ``setup``'s model the same way on the same GPUs with the same global batch
    (micro batch x gradient accumulation x world size): each ZeRO stage; offload of the optimizer (stage 1 and up) and
    of the parameters (stage 3) to the CPU; gradient checkpointing on and off (always off under P-Tuning, which peft
    refuses with checkpointing); and each micro batch that divides the samples a GPU takes per step."""
    samples = setup.micro_batch * setup.grad_accum
    micro = _divisors(samples) or [setup.micro_batch]
    out = []
    offloads = [("none", "none"), ("cpu", "none")]
    for stage in (0, 1, 2, 3):
        for opt, par in offloads + ([("cpu", "cpu"), ("none", "cpu")] if stage == 3 else []):
            if stage == 0 and opt != "none":
                continue
            for ckpt in ((False,) if setup.method == "ptuning" else (True, False)):
                base = replace(setup, zero_stage=stage, offload_optimizer=opt, offload_param=par, grad_ckpt=ckpt)
                out.append((base, micro))
    return out


def _describe(current, changed) -> tuple[str, dict]:
    """The change from ``current`` to ``changed`` in words, and the ds_config values to set for it."""
    parts = []
    if changed.zero_stage != current.zero_stage:
        parts.append(f"ZeRO-{changed.zero_stage}")
    for key in ("offload_optimizer", "offload_param"):
        before, after = getattr(current, key), getattr(changed, key)
        if before != after:
            parts.append(f"{key} {after}" if after != "none" else f"no {key}")
    if changed.grad_ckpt != current.grad_ckpt:
        parts.append("gradient checkpointing " + ("on" if changed.grad_ckpt else "off"))
    if changed.micro_batch != current.micro_batch:
        parts.append(f"micro batch {changed.micro_batch} x gradient_accumulation_steps {changed.grad_accum}")
    if changed.launch != current.launch:  # MEM509's fix: a line of the loop, no ds_config change
        parts.append("keep only the loss in the loop (`loss = engine(**batch).loss`)")
    zero: dict = {"stage": changed.zero_stage}
    if changed.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": changed.offload_optimizer}
    if changed.offload_param != "none":
        zero["offload_param"] = {"device": changed.offload_param}
    config = {"zero_optimization": zero, "train_micro_batch_size_per_gpu": changed.micro_batch,
              "gradient_accumulation_steps": changed.grad_accum}
    return ", ".join(parts), config


def search(setup, gpu_bytes: int, rates, limit: int = 8, cache: dict | None = None,
           host_bytes: int | None = None) -> list[dict]:
    """The setups of :func:`candidates` that fit ``gpu_bytes``, ranked by estimated step time
    (:func:`step_time`): those with 8% headroom (TIGHT) or more first, then the tight ones; for each
    stage/offload/checkpointing combination the largest micro batch that fits (memory grows with the micro batch, a
    binary search over the divisors; fewer micro steps mean fewer per-micro-step collectives and copies). When none
    fits, the closest ones. ``cache`` (bytes by setup) is shared across GPUs of different memory. ``host_bytes``
    (the node's RAM, when known): an offload that needs more host RAM than that (MEM504) is not proposed.

    Each row: ``change`` (words), ``deepspeed`` (the ds_config values), ``total_bytes``, ``fits``, ``tight``,
    ``step_time_s`` (terms and total), ``vs_current`` (step time / the current setup's).
    """
    cache = {} if cache is None else cache

    def measured(s) -> tuple[int, int]:
        if s not in cache:
            e = estimate(s)
            cache[s] = (e.total, e.host["needed_per_node"])
        return cache[s]

    def total(s) -> int:
        return measured(s)[0]

    def host_ok(s) -> bool:
        return host_bytes is None or measured(s)[1] <= host_bytes

    samples = setup.micro_batch * setup.grad_accum
    current_time = step_time(setup, rates)["total"]
    rows, closest = [], []
    for base, micros in candidates(setup):
        lo, hi, best = 0, len(micros) - 1, None
        while lo <= hi:  # the largest micro batch that fits
            mid = (lo + hi) // 2
            s = replace(base, micro_batch=micros[mid], grad_accum=samples // micros[mid])
            if total(s) <= gpu_bytes:
                best, lo = s, mid + 1
            else:
                hi = mid - 1
        if best is not None and not host_ok(best):
            continue  # its offload needs more host RAM than the node has
        if best is None:
            smallest = replace(base, micro_batch=micros[0], grad_accum=samples // micros[0])
            if host_ok(smallest):
                closest.append(smallest)
            continue
        if (best.zero_stage, best.offload_optimizer, best.offload_param, best.grad_ckpt, best.micro_batch) == \
                (setup.zero_stage, setup.offload_optimizer, setup.offload_param, setup.grad_ckpt, setup.micro_batch):
            continue  # the current setup itself is not a change
        rows.append(best)
    if setup.launch == "engine":  # the loop that keeps the logits: dropping them (MEM509) trains the same way
        lean = replace(setup, launch="engine-loss")
        if total(lean) <= gpu_bytes and host_ok(lean):
            rows.append(lean)

    def row(s) -> dict:
        times = step_time(s, rates)
        text, config = _describe(setup, s)
        used = total(s)
        return {"change": text, "deepspeed": config, "total_bytes": used, "fits": used <= gpu_bytes,
                "_parts": (text.count(",") + 1, -s.zero_stage), "tight": verdict(used, gpu_bytes, s) == "tight",
                "step_time_s": {k: round(v, 4) for k, v in times.items()},
                "vs_current": round(times["total"] / current_time, 3) if current_time else None}

    ranked = sorted((row(s) for s in rows),
                    key=lambda r: (r["tight"], r["step_time_s"]["total"], r["total_bytes"], r["_parts"]))
    if not ranked:
        ranked = sorted((row(s) for s in closest), key=lambda r: (r["total_bytes"], r["_parts"]))[:3]
    out, seen = [], set()
    for r in ranked:  # ZeRO-1 and ZeRO-2 with the optimizer offloaded come out the same: keep the smaller change
        same = (r["total_bytes"], r["step_time_s"]["total"])
        if same not in seen:
            seen.add(same)
            r.pop("_parts")
            out.append(r)
    return out[:limit]


def training_changes(setup, gpu_bytes: int) -> list[dict]:
    """Changes to what is trained, for when no setup of :func:`search` fits: LoRA instead of full fine-tuning,
    half the sequence length; each with its memory and what it costs (:data:`TRAINING_CHANGES`)."""
    options = []
    if setup.method == "full":
        from dsdoctor.models import default_lora_targets, trainable_params
        from dsdoctor.report import DsdoctorError

        try:
            targets = default_lora_targets(setup.arch)
        except DsdoctorError:  # no default for this architecture (DeepSeek-V2): peft's own "all-linear"
            targets = ("all-linear",)
        lora_t = trainable_params(setup.arch, "lora", lora_targets=targets)
        options.append(("method", f"LoRA r=8 on {','.join(targets)}",
                        replace(setup, method="lora", trainable_params=lora_t, lora_targets=targets,
                                total_params=setup.total_params + lora_t)))
    if setup.seq_len > 256:
        options.append(("seq_len", f"--seq-len {setup.seq_len // 2}", replace(setup, seq_len=setup.seq_len // 2)))
    rows = []
    for key, text, changed in options:
        used = estimate(changed).total
        rows.append({"change": text, "total_bytes": used, "fits": used <= gpu_bytes, "cost": TRAINING_CHANGES[key]})
    return rows


