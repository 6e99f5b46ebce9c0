"""Training smoke checks (``TRN6xx``): verdicts on what a short real run of the reference trainer measured.

Pure functions over plain data (lists of per-step rows, the trainer's ``summary.json``, its error records):
no torch here, so the verdicts are unit-testable with controlled inputs and cheap to import.
"""

from __future__ import annotations

import math
import re
import statistics

from dsdoctor.report import Finding
from dsdoctor.rules import rule

GiB = 2**30

TRN600 = rule(
    "TRN600", "info", "Run environment",
    what="World size, each rank's host, device and PID, the backend and the versions of the run.",
    why="The first thing to read when a multi-GPU run misbehaves: a world size of 1 where 8 were meant, "
        "a rank on the wrong device, a version that differs between nodes.",
    fix="Compare with what you meant to launch.",
    source="reference_train/train.py run_environment (torch.distributed.all_gather_object)")
TRN601 = rule(
    "TRN601", "error", "Loss did not go down",
    what="The mean loss of the last 10 optimizer steps is not below the mean of the first 10 by the margin.",
    why="A real bug keeps the loss flat: labels all -100, a frozen model (no trainable parameter reaches the "
        "optimizer), a zero or tiny learning rate, a scheduler stuck in warmup, an optimizer never stepped.",
    fix="Check that labels are not all -100, that the trainable parameters were passed to "
        "deepspeed.initialize(model_parameters=...), and the optimizer's lr and the scheduler's warmup_max_lr.",
    source="dsdoctor smoke; the tutorials' '100-step smoke test' (loss direction, memory, reload)",
    example="loss 7.46 -> 7.45 over 100 steps with lr 0")
TRN602 = rule(
    "TRN602", "error", "Loss is NaN or infinite",
    what="A step's loss is not finite.",
    why="fp16 overflow (bf16 model trained in fp16), a sample whose labels are all -100 (0/0), a learning "
        "rate that diverges.",
    fix="Use bf16 on GPUs that have it (compute capability >= 8.0); check the data for samples with no "
        "answer token; lower the learning rate.",
    source="torch.nn.CrossEntropyLoss(ignore_index=-100) returns NaN when every target is ignored")
TRN603 = rule(
    "TRN603", "warning", "Too few steps to judge the loss",
    what="The run logged fewer steps than two windows of 10.",
    why="The first/last comparison needs two disjoint windows.",
    fix="Run with --steps 20 or more.",
    source="dsdoctor smoke")
TRN604 = rule(
    "TRN604", "warning", "Memory grows during training",
    what="A rank's per-step peak memory in the second half of the run exceeds the first half's by more "
         "than the tolerance.",
    why="Memory that climbs step after step ends in OOM at step 1000: tensors kept across steps (a loss "
        "summed without .item() or .detach()), growing padding, a cache enabled in training.",
    fix="Log loss.item(), not the loss tensor; pad per batch, not to a growing maximum; set use_cache=False.",
    source="torch.cuda.max_memory_allocated / max_memory_reserved, reset every step")
TRN605 = rule(
    "TRN605", "error", "Saved adapter or checkpoint is not usable",
    what="The save did not reload into a fresh base model with the trained model's logits, or the merge "
         "changed them, or the saved tensors are empty, or the adapter has no effect.",
    why="The classic 'trained but the model looks untrained': saving engine state instead of the adapter, "
        "saving under ZeRO-3 without gathering (empty tensors), reloading into a different base or dtype.",
    fix="Save with model.save_pretrained(dir, state_dict=engine._zero3_consolidated_16bit_state_dict()) "
        "under ZeRO-3 (called on every rank); reload the same base in the training dtype; keep the template.",
    source="peft PeftModel.save_pretrained / from_pretrained / merge_and_unload; "
           "deepspeed/runtime/engine.py _zero3_consolidated_16bit_state_dict")
TRN606 = rule(
    "TRN606", "info", "Throughput",
    what="Tokens/s and samples/s per rank over the steps after warm-up; on GPU the model FLOPs utilisation.",
    why="A baseline for the long run's duration and a way to spot a slow rank.",
    fix="Compare ranks: one much slower rank points at its GPU or link.",
    source="MFU as in PaLM (Chowdhery et al. 2022, appendix B), with weight gradients only for trainable "
           "parameters")
TRN607 = rule(
    "TRN607", "error", "A rank failed",
    what="A training process raised an exception or died; the first rank to fail and its message.",
    why="One rank's exception makes the others hang or die with secondary errors; the first one is the cause.",
    fix="Fix the cause named in the evidence.",
    source="the trainer's errors/rank{R}.json; torchrun's ChildFailedError summary")
TRN608 = rule(
    "TRN608", "error", "Run timed out",
    what="The run did not finish within --timeout; the ranks and the last step seen.",
    why="A hang: a rank that never joined a collective, a rendezvous that never completed, a deadlock in "
        "a save that only rank 0 entered.",
    fix="If the last step kept advancing, the run is only slow: raise --timeout. If it stopped, a rank is stuck "
        "in a collective the others never entered (a save or eval only rank 0 runs), or the network is wrong: "
        "rerun with NCCL_DEBUG=INFO and check NCCL_SOCKET_IFNAME.",
    source="dsdoctor smoke")
TRN609 = rule(
    "TRN609", "error", "Nothing to train",
    what="The method left no trainable parameter, or LoRA found no target module in the architecture.",
    why="DeepSpeed then has an empty optimizer and the loss cannot move.",
    fix="Pass --lora-targets with the model's linear layer names (print the model to see them), or "
        "--freeze-last N with N >= 1.",
    source="reference_train/train.py build_model")
TRN610 = rule(
    "TRN610", "error", "DeepSpeed rejected the config at initialize",
    what="deepspeed.initialize raised: the config cannot train with this engine loop.",
    why="DeepSpeed validates much of the config only after the model has loaded: an optimizer missing for "
        "ZeRO >= 1, \"auto\" outside the HF Trainer, both fp16 and bf16, inconsistent batch values.",
    fix="Correct the config key named in DeepSpeed's message (the evidence).",
    source="deepspeed/runtime/engine.py, deepspeed/runtime/config.py")
TRN611 = rule(
    "TRN611", "warning", "Loss trend inconclusive on a random-init model",
    what="The loss did not fall by the margin, but the optimizer did move the trainable parameters, and the model is "
         "a random init (the bundled tiny model, or a config.json without weights).",
    why="A random init under a real fine-tuning learning rate (LoRA 1e-4 with warmup, full 2e-5) barely moves the "
        "loss in 100 steps: that is the model, not the setup. The plumbing (gradients reach the optimizer, the "
        "scheduler applies a learning rate, the parameters change) is what such a run can prove, and it did.",
    fix="To judge the loss itself, run the same config on the real model (--model DIR with its weights), or give the "
        "bundled model a learning rate it learns at in this many steps (see the evidence).",
    source="dsdoctor smoke; reference_train/train.py parameter_change")
TRN612 = rule(
    "TRN612", "error", "The config cannot run on this machine's device",
    what="smoke would run the ds_config here on DeepSpeed's CPU accelerator (no GPU visible), and the config enables "
         "fp16, which that accelerator refuses.",
    why="Every rank fails at deepspeed.initialize ('Type fp16 is not supported on your device'), about ten seconds "
        "after launch. That is this machine, not a fault of a config written for GPUs.",
    fix="Smoke the config on the GPU machine it is for; here, a copy with \"fp16\": {\"enabled\": false} and "
        "\"bf16\": {\"enabled\": true} checks everything else.",
    source="deepspeed/accelerator/cpu_accelerator.py (supported dtypes: bf16, fp32)")
TRN614 = rule(
    "TRN614", "error", "save_checkpoint on one rank only",
    what="The script calls the engine's save_checkpoint (or save_16bit_model) inside a branch only rank 0 enters "
         "(`if engine.global_rank == 0:`, `if args.local_rank in [-1, 0]:`, `if is_main_process`).",
    why="DeepSpeed's save_checkpoint is collective: every rank writes its own ZeRO partition and they meet in "
        "barriers (and save_16bit_model gathers ZeRO-3's partitions). Called on rank 0 alone, it waits for ranks that "
        "never come: a hang until the collective timeout, or, when the others exit, 'Connection closed by peer'; and "
        "no usable checkpoint.",
    fix="Call engine.save_checkpoint(dir, tag) on every rank (DeepSpeed writes the shared files from rank 0 itself); "
        "keep only your own extra files (a tokenizer, a JSON) under the rank-0 branch.",
    source="deepspeed/runtime/engine.py save_checkpoint (its docstring: 'all processes must call this method and not "
           "just the process with rank 0'), save_16bit_model")
TRN613 = rule(
    "TRN613", "error", "gradient checkpointing over a frozen base with no input that requires grad",
    what="LoRA or P-Tuning with gradient checkpointing, and the checkpointed blocks' input (the embedding output of "
         "frozen weights) does not require grad.",
    why="Reentrant checkpointing (torch.utils.checkpoint with use_reentrant=True, the default of older transformers) "
        "returns outputs that need no grad, so the loss has no grad_fn and backward fails: 'element 0 of tensors does "
        "not require grad and does not have a grad_fn'.",
    fix="model.enable_input_require_grads() after gradient_checkpointing_enable() (dsdoctor's reference trainer does), "
        "or gradient_checkpointing_kwargs={'use_reentrant': False}.",
    source="transformers/modeling_utils.py enable_input_require_grads, gradient_checkpointing_enable; "
           "torch/utils/checkpoint.py CheckpointFunction")

# What DeepSpeed's own messages mean, for the fix of TRN607/TRN610 (seen on DeepSpeed 0.19.8, shared/FACTS.md).
KNOWN_CAUSES: list[tuple[str, str]] = [
    (r"requires an optimizer|must provide optimizer",
     "Add an \"optimizer\" block to the ds_config (e.g. {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}}) or pass "
     "a client optimizer to deepspeed.initialize."),
    (r"not supported between instances of ('str' and '\w+'|'\w+' and 'str')|unsupported operand type\(s\).*'str'"
     r"|non-int of type 'str'",
     "A value is \"auto\": only the HF Trainer fills \"auto\"; with your own engine loop write numbers."),
    (r"total_num_steps",
     "WarmupDecayLR and WarmupCosineLR need scheduler.params.total_num_steps (your number of optimizer steps)."),
    (r"Check batch related parameters",
     "Make train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size, "
     "or give only two of the three."),
    (r"bfloat16 and fp16 modes cannot be simultaneously enabled", "Enable only one of fp16 and bf16."),
    (r"Type fp16 is not supported", "The CPU accelerator has no fp16: use bf16 or fp32 on the CPU."),
    (r"untested ZeRO Optimizer", "Use Adam/AdamW, or set \"zero_allow_untested_optimizer\": true."),
    (r"ZeRO-Offload with a client provided optimizer",
     "Let DeepSpeed build the optimizer (an \"optimizer\" block), or set \"zero_force_ds_cpu_optimizer\": false."),
    (r"out of memory|OutOfMemoryError",
     "Lower the micro batch or the sequence length, enable gradient checkpointing, or use a higher ZeRO stage "
     "or optimizer offload."),
]


def cause_hint(message: str) -> str | None:
    """The fix for a known DeepSpeed/torch error message, or None."""
    for pattern, fix in KNOWN_CAUSES:
        if re.search(pattern, message):
            return fix
    return None


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def loss_means(losses: list[float], window: int = 10) -> tuple[float, float]:
    """Mean of the finite losses in the first and the last ``window`` steps (NaN for a window with none).
    Raises ValueError for fewer than 2 steps."""
    if len(losses) < 2:
        raise ValueError(f"need at least 2 steps, got {len(losses)}")
    window = min(window, len(losses) // 2)
    first, last = _finite(losses[:window]), _finite(losses[-window:])
    return (statistics.fmean(first) if first else math.nan, statistics.fmean(last) if last else math.nan)


#: the smallest peak learning rate of the grid at which the bundled tiny random model showed the loss drop TRN601 asks
#: for in 100 steps, by method (2 CPU ranks, AdamW, WarmupLR over 5 steps; benchmarks/results/smoke-lr-grid.txt: LoRA
#: failed at 2e-5 and passed from 5e-5; full and freeze passed at 2e-5, P-Tuning at 2e-3, the smallest values tried)
BUNDLED_LEARNS_AT = {"lora": 5e-5, "ptuning": 2e-3, "freeze": 2e-5, "full": 2e-5}


def loss_verdicts(losses: list[float], window: int = 10, margin: float = 0.03, *,
                  context: dict | None = None) -> list[Finding]:
    """TRN601/TRN602/TRN603/TRN611 from the per-step global loss (one value per optimizer step).

    The loss went down when ``mean(last window) < mean(first window) * (1 - margin)`` and the gap exceeds
    twice the standard error of the difference (so batch-to-batch noise with a zero learning rate does not
    pass). A run with lr 0, a frozen model or all labels masked fails it; the bundled default drops by ~25%
    in 100 steps.

    ``context`` (from the trainer's summary) separates the user's setup from our bundled model when the loss did not
    fall: ``parameter_change`` (``tensors_changed``, ``relative_change``), ``lr_peak`` (the largest learning rate the
    scheduler applied), ``random_init``, ``bundled_model``, ``method``, ``steps``. No parameter moved, or a learning
    rate of 0 at every step, is a setup error (TRN601); parameters that moved on a random-init model are TRN611
    (inconclusive), with what would make the run conclusive."""
    findings = []
    bad = [i + 1 for i, v in enumerate(losses) if v is None or not math.isfinite(v)]
    if bad:
        findings.append(TRN602.finding(f"non-finite loss at {len(bad)} of {len(losses)} steps, first at step {bad[0]}"))
    if len(losses) < 2 * window:
        findings.append(TRN603.finding(f"{len(losses)} steps logged, {2 * window} needed"))
        return findings
    first, last = _finite(losses[:window]), _finite(losses[-window:])
    if len(first) < 2 or len(last) < 2:
        findings.append(TRN601.finding("too few finite losses in the first or last window"))
        return findings
    f_mean, l_mean = loss_means(losses, window)
    noise = math.sqrt(statistics.variance(first) / len(first) + statistics.variance(last) / len(last))
    drop = f_mean - l_mean
    relative = f"{drop / abs(f_mean):.1%}" if f_mean else "n/a"
    evidence = (f"mean loss first {window} steps {f_mean:.4f}, last {window} steps {l_mean:.4f} "
                f"(drop {drop:.4f} = {relative}; needed > {margin:.0%} and > 2 x noise {noise:.4f})")
    if drop > margin * abs(f_mean) and drop > 2 * noise:
        findings.append(TRN601.finding(evidence, severity="ok", title="Loss goes down", fix=""))
        return findings
    context = context or {}
    change, lr_peak = context.get("parameter_change") or {}, context.get("lr_peak")
    if lr_peak is not None:
        evidence += f"; peak learning rate applied {lr_peak:.3g}"
    if change:
        evidence += (f"; trainable parameters moved by {change.get('relative_change', 0):.2e} (relative L2), "
                     f"{change.get('tensors_changed')} of {change.get('tensors')} tensors changed")
    if lr_peak == 0:
        findings.append(TRN601.finding(evidence, title="The learning rate was 0 at every step",
                                       fix="Set optimizer.params.lr and the scheduler's warmup_max_lr above 0; a "
                                           "warmup longer than the run stays near warmup_min_lr."))
    elif change and not change.get("tensors_changed"):
        findings.append(TRN601.finding(evidence, title="The optimizer changed no trainable parameter",
                                       fix="The optimizer steps but nothing it holds moves: pass the trainable "
                                           "parameters to deepspeed.initialize(model_parameters=...), check that "
                                           "the learning rate is not 0 and that gradients reach them (labels not "
                                           "all -100, no torch.no_grad around the forward)."))
    elif change and context.get("random_init"):
        method = context.get("method", "lora")
        needed = BUNDLED_LEARNS_AT.get(method)
        what = "the bundled tiny model" if context.get("bundled_model") else "a config.json without weights"
        conclusive = (f"on {what}, a peak learning rate of at least {needed:g} for {method}, reached within the "
                      f"first 10 steps of a 100-step run (yours: {lr_peak:.3g} in {len(losses)} steps)"
                      if needed and lr_peak is not None and context.get("bundled_model")
                      else "more steps or a larger learning rate")
        findings.append(TRN611.finding(
            evidence + f"; the model is {what}, a random init",
            title="Loss trend inconclusive: a random init barely moves at this learning rate",
            fix=f"Nothing here points at your setup: the optimizer moved the parameters. To judge the loss, run the "
                f"same config on your real model (--model DIR with its weights), or use {conclusive}."))
    else:
        findings.append(TRN601.finding(evidence))
    return findings


def memory_tolerance(first_half_peak: int, device_type: str) -> int:
    """The highest second-half peak TRN604 accepts after a first-half peak of ``first_half_peak`` bytes: 5% plus
    64 MiB on a GPU (allocator rounding, varying padding), 10% plus 256 MiB on the CPU, where the resident set also
    holds the Python heap and allocator caches."""
    pct, slack = (0.05, 64 * 2**20) if device_type == "cuda" else (0.10, 256 * 2**20)
    return int(first_half_peak * (1 + pct) + slack)


def steady_climb(series: list[int], device_type: str) -> tuple[float, float] | None:
    """(bytes per step, fraction of steps that rose) when ``series`` climbs steadily: at least 6 steps, at least 80% of
    step-to-step changes up, and a rise from the first to the last value of more than 2% and more than 8 MiB (GPU)
    or 32 MiB (CPU). A leak inside TRN604's absolute tolerance shows this way in a short run. The slope is the
    median of the pairwise slopes (Theil-Sen), robust to one-step spikes. None otherwise."""
    if len(series) < 6:
        return None
    ups = sum(b > a for a, b in zip(series, series[1:]))
    downs = sum(b < a for a, b in zip(series, series[1:]))
    rose = ups / (len(series) - 1)
    rise = series[-1] - series[0]
    floor = (8 if device_type == "cuda" else 32) * 2**20
    if rose < 0.8 or downs > 0.1 * (len(series) - 1) or rise <= max(0.02 * series[0], floor):
        return None
    slopes = sorted((series[j] - series[i]) / (j - i) for i in range(len(series)) for j in range(i + 1, len(series)))
    return slopes[len(slopes) // 2], rose


def memory_verdict(per_rank: dict[int, list[int]], device_type: str, warmup: int = 5) -> Finding:
    """TRN604: compare each rank's per-step peak in the first and second halves after ``warmup`` steps
    (:func:`memory_tolerance`), and look for a steady climb inside that tolerance (:func:`steady_climb`)."""
    grown, climbing, lines = [], [], []
    skipped = warmup if all(len(v) > warmup + 4 for v in per_rank.values()) else 0
    for rank, series in sorted(per_rank.items()):
        series = series[skipped:]
        half = len(series) // 2
        if half == 0:
            continue
        a, b = max(series[:half]), max(series[half:])
        lines.append(f"rank {rank}: {a / GiB:.2f} -> {b / GiB:.2f} GiB")
        if b > memory_tolerance(a, device_type):
            grown.append(rank)
        else:
            climb = steady_climb(series, device_type)
            if climb is not None:
                climbing.append(f"rank {rank} +{climb[0] / 2**20:.1f} MiB per step, higher at {climb[1]:.0%} of "
                                f"steps ({series[0] / GiB:.2f} -> {series[-1] / GiB:.2f} GiB)")
    what = "peak allocated per step" if device_type == "cuda" else "resident memory per step"
    evidence = f"{what} (first half -> second half, {skipped} warm-up steps skipped): " + "; ".join(lines)
    if grown:
        return TRN604.finding(evidence + f"; grew on rank(s) {grown}")
    if climbing:
        steps = len(next(iter(per_rank.values()), []))
        return TRN604.finding(evidence + "; climbs steadily: " + "; ".join(climbing),
                              title="Memory climbs step after step",
                              fix=f"Inside the tolerance for now, but a steady climb over {steps} steps is how a leak "
                                  f"starts: run more steps (--steps {max(200, 4 * steps)}) to see whether it levels "
                                  f"off (allocator warm-up) or keeps going (a leak: {TRN604.fix})")
    return TRN604.finding(evidence, severity="ok", title="Memory is stable", fix="")


def checkpoint_verdict(verify: dict | None, method: str, parameter_change: dict | None = None) -> Finding:
    """TRN605 from the trainer's ``summary["verify"]`` (see ``verify_reload_and_merge``).

    The save holds what training learned when the adapter's (or training's) effect on the logits stands out from what
    the reload and merge change: above the dtype's tolerance, or more than 10x the reload/merge differences. An effect
    of 0 (below 1e-7 of the logit scale) is a save of the untrained model. An effect in between, with parameters that
    did move (``parameter_change``), is a change too small for this precision to tell apart (a real learning rate on a
    random init in few steps): inconclusive, a warning, not a verdict on the save."""
    if not verify:
        return TRN605.finding("the trainer wrote no reload result", title="Save was not verified",
                              severity="warning", fix="Run without --no-verify.")
    tol = verify["tolerance"]
    parts = [f"saved {verify.get('saved_tensors')} tensors to {verify.get('saved_to')}"]
    problems = []
    if verify.get("empty_tensors"):
        problems.append(f"{len(verify['empty_tensors'])} empty tensor(s), e.g. {verify['empty_tensors'][0]}")
    if verify.get("missing_keys"):
        problems.append(f"{len(verify['missing_keys'])} key(s) missing, e.g. {verify['missing_keys'][0]}")
    diffs = []
    for key, label in (("reload_max_diff", "reload"), ("merge_max_diff", "merge")):
        if key in verify:
            parts.append(f"{label} max |Δlogit| {verify[key]:.2e} of scale")
            diffs.append(verify[key])
            if not verify[key] <= tol:
                problems.append(f"{label} changes the logits by {verify[key]:.2e} > {tol:.0e}")
    kind = "adapter" if method in ("lora", "ptuning") else "training"
    effect = verify["adapter_effect"]
    parts.append(f"{kind} effect {effect:.2e} vs base")
    visible = effect > tol or (effect > 1e-7 and effect > 10 * max(diffs, default=0.0))
    moved = bool(parameter_change and parameter_change.get("tensors_changed"))
    if not visible and moved and effect > 1e-7 and not problems:
        return TRN605.finding("; ".join(parts) + f"; the parameters moved ({parameter_change['relative_change']:.2e} "
                                                 f"relative) but change the logits by less than this precision tells "
                                                 f"apart from rounding ({tol:.0e})",
                              severity="warning", title="Save round-trips; what it learned is too small to see",
                              fix="Inconclusive, not a fault: run more steps or a larger learning rate (or the real "
                                  "model) to see the adapter's effect on the logits.")
    if not visible:
        problems.append("the trained model's logits equal the base model's: the save holds nothing learned")
    evidence = "; ".join(parts + problems)
    if not visible and len(problems) == 1:  # the save itself round-trips: training did not change the model
        return TRN605.finding(evidence, title="Training left the model unchanged",
                              fix="The save is fine but holds the untrained model: fix training first (see "
                                  "TRN601: learning rate, trainable parameters, labels).")
    if problems:
        return TRN605.finding(evidence)
    title = "Adapter reloads and merges" if method == "lora" else "Save reloads into a fresh model"
    return TRN605.finding(evidence, severity="ok", title=title, fix="")


# Dense bf16/fp16 tensor-core peak, FLOP/s, from NVIDIA's datasheets (no sparsity). Matched by substring.
PEAK_FLOPS = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H800", 989e12),
              ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("A10", 125e12),
              ("RTX 4090", 165e12), ("RTX 3090", 71e12), ("A6000", 155e12), ("V100", 125e12), ("T4", 65e12)]


def peak_flops(device_name: str) -> float | None:
    """Dense 16-bit peak FLOP/s of a GPU by name, or None when it is not in the table."""
    for key, value in PEAK_FLOPS:
        if key in device_name:
            return value
    return None


def model_flops_per_token(total_params: int, trainable_params: int, num_layers: int, hidden: int,
                          seq_len: float) -> float:
    """Model FLOPs per trained token, recomputation excluded (so gradient checkpointing does not inflate it).

    Forward 2N, activation gradients 2N, weight gradients 2N_trainable (6N for full fine-tuning, as
    Chowdhery et al. 2022, appendix B; LoRA/freeze skip the frozen weights' gradients), plus attention
    scores and values 12·L·h·s (forward 4·L·h·s, backward twice that)."""
    return 4 * total_params + 2 * trainable_params + 12 * num_layers * hidden * seq_len


def throughput(rows_by_rank: dict[int, list[dict]], warmup: int = 2) -> dict:
    """Tokens/s and samples/s per rank over the steps after ``warmup`` (compilation, allocator growth)."""
    out = {"tokens_per_s": [], "samples_per_s": [], "mean_tokens_per_sample": []}
    for rank in sorted(rows_by_rank):
        rows = rows_by_rank[rank][warmup:] or rows_by_rank[rank]
        seconds = sum(r["step_time_s"] for r in rows) or float("nan")
        tok, smp = sum(r["tokens"] for r in rows), sum(r["samples"] for r in rows)
        out["tokens_per_s"].append(tok / seconds)
        out["samples_per_s"].append(smp / seconds)
        out["mean_tokens_per_sample"].append(tok / smp if smp else 0.0)
    return out


# Errors a rank raises because another rank died: never the cause when a rank failed before them.
SECONDARY = re.compile(r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe|"
                       r"communicator was aborted|ProcessGroupNCCL.*(watchdog|timeout)|SIGTERM|Signal 15", re.I)
SIGNALS = {"-9": "SIGKILL: often the host's OOM killer", "-11": "SIGSEGV: a crash in a compiled op",
           "-6": "SIGABRT", "-15": "SIGTERM", "-7": "SIGBUS: often /dev/shm too small"}


def root_cause(log_tail: str) -> tuple[int, str] | None:
    """(rank, exit code) of torchrun's 'Root Cause (first observed failure)' block, or None."""
    block = log_tail.rsplit("Root Cause", 1)
    if len(block) < 2:
        return None
    match = re.search(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", block[1], flags=re.S)
    return (int(match.group(1)), match.group(2)) if match else None


def failure_findings(errors: list[dict], returncode: int | None, log_tail: str) -> list[Finding]:
    """TRN607/TRN609/TRN610/DATA7xx: which rank failed first and why.

    The cause is, in order: torchrun's 'Root Cause (first observed failure)' rank (with its error record when
    it wrote one, else its exit code: a rank killed by a signal writes nothing); else the earliest error record
    that is not a consequence of another rank's death (gloo/NCCL 'connection closed by peer'); else the
    earliest record; else the launcher's exit code and last log lines."""
    from dsdoctor.rules import catalogue

    rules = catalogue()
    errors = sorted(errors, key=lambda e: e.get("time", 0))
    by_rank = {e["rank"]: e for e in errors}
    root = root_cause(log_tail)
    first = None
    if root is not None and root[0] in by_rank:
        first = by_rank[root[0]]
    elif root is not None and root[1].startswith("-"):
        rank, code = root
        others = sorted(r for r in by_rank if r != rank)
        evidence = (f"rank {rank} exit code {code} ({SIGNALS.get(code, 'killed by a signal')}) with no Python error"
                    + (f"; rank(s) {others} failed after it" if others else ""))
        return [TRN607.finding(evidence, fix="A rank killed by a signal: check host memory (`dmesg | grep -i "
                                             "oom`), /dev/shm size, and train.log in --out.")]
    if first is None:
        primary = [e for e in errors if not SECONDARY.search(e.get("message", ""))]
        first = (primary or errors or [None])[0]
    if first is None:
        failed = re.findall(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", log_tail, flags=re.S)
        detail = "; ".join(f"rank {r} exit code {c}" for r, c in failed[:4]) or f"launcher exit code {returncode}"
        lines = [ln for ln in log_tail.strip().splitlines() if ln.strip()][-3:]
        return [TRN607.finding(f"{detail}; no error record written. Last log lines: " + " | ".join(lines),
                               fix="Read train.log in --out; a signal kill with no Python error is usually "
                                   "host memory (dmesg) or a segfault in a compiled op.")]
    message = first["message"].strip()
    last_line = message.splitlines()[-1] if message else ""
    same = [e["rank"] for e in errors if (e["type"], e["message"].strip(), e["phase"]) ==
            (first["type"], message, first["phase"])]
    if len(same) > 1:
        evidence = f"ranks {sorted(same)} all failed in {first['phase']}: {first['type']}: {last_line}"
    else:
        evidence = f"rank {first['rank']} failed first, in {first['phase']}: {first['type']}: {last_line}"
    others = sorted(r for r in by_rank if r not in same and r != first["rank"])
    if others:
        evidence += f" (rank(s) {others} stopped after it)"
    rule_id = first.get("rule")
    if rule_id and rule_id in rules:
        return [rules[rule_id].finding(evidence)]
    hint = cause_hint(message) or ""
    if first["phase"] == "deepspeed.initialize":
        return [TRN610.finding(evidence, fix=hint or TRN610.fix)]
    return [TRN607.finding(evidence, fix=hint or TRN607.fix)]
