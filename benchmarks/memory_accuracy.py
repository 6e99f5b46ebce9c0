"""Measure real per-GPU peak memory of DeepSpeed fine-tuning runs and compare it with `dsdoctor estimate`,
DeepSpeed's estimator and accelerate's.

Three modes:

    # on the GPU machine: run every point of a grid, each in its own process, one JSON per point into OUT
    python benchmarks/memory_accuracy.py run --grid benchmarks/memory_grid.json --out OUT [--only NAME,...]
    # (internal) one point, in the current process
    python benchmarks/memory_accuracy.py point '{"name": ..., ...}' --out OUT
    # anywhere: the comparison table from measured JSONs (fit points and held-out points reported apart)
    python benchmarks/memory_accuracy.py report benchmarks/results/memory-accuracy/points

A point builds the model from its registry config (random init, bf16, SDPA attention) on the GPU, applies the
method (LoRA via peft, freeze, P-Tuning, full), wraps it with ``deepspeed.initialize`` (FusedAdam, or DeepSpeed's
CPU Adam with optimizer offload) and trains 3 steps on random tokens. It records, after the first optimizer step,
the peak of ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` and NVML's "used" for this process, per
phase of a step (forward to loss, backward, optimizer step), and whether it ran out of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GIB = 2 ** 30


def nvml_used_by_me() -> int | None:
    """Bytes NVML says this process uses on GPU 0 (None without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid():
                return int(proc.usedGpuMemory)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:
        return None


def ds_config(point: dict) -> dict:
    zero: dict = {"stage": point["zero"]}
    if point.get("offload_optimizer", "none") != "none":
        zero["offload_optimizer"] = {"device": point["offload_optimizer"], "pin_memory": True}
    if point.get("offload_param", "none") != "none":
        zero["offload_param"] = {"device": point["offload_param"], "pin_memory": True}
    config = {"train_micro_batch_size_per_gpu": point["micro_batch"], "gradient_accumulation_steps": 1,
              "zero_optimization": zero, "gradient_clipping": 1.0, "steps_per_print": 1000,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.0}}}
    precision = point.get("precision", "bf16")
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif precision == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 12}
    return config


def run_point(point: dict, out_dir: Path) -> dict:
    """Train 3 steps of ``point`` and return the measurements (see the module docstring)."""
    import torch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM

    from dsdoctor.models import REGISTRY, resolve_arch, trainable_params

    record: dict = {"point": point, "oom": False, "phase": "build"}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = point.get("precision", "bf16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    repo, values = REGISTRY[point["model"]]
    values = dict(values)
    for key, value in point.get("override", {}).items():
        values[key] = value
    values.pop("torch_dtype", None)
    config = AutoConfig.for_model(**values)
    config._attn_implementation = "sdpa"
    t0 = time.time()
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        record["build_s"] = round(time.time() - t0, 1)
        method = point["method"]
        if method == "lora":
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=point.get("lora_r", 8), lora_alpha=16,
                                                     lora_dropout=point.get("lora_dropout", 0.05),
                                                     target_modules=point.get("lora_targets")))
        elif method == "ptuning":
            from peft import PrefixTuningConfig, get_peft_model

            model = get_peft_model(model, PrefixTuningConfig(task_type="CAUSAL_LM",
                                                             num_virtual_tokens=point.get("prefix_tokens", 16)))
        elif method == "freeze":
            model.requires_grad_(False)
            layers = model.model.layers
            for layer in layers[len(layers) - point.get("freeze_last", 2):]:
                layer.requires_grad_(True)
        if point.get("grad_ckpt", True):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if method != "full":
                model.enable_input_require_grads()
        model.config.use_cache = False
        trainable = [p for p in model.parameters() if p.requires_grad]
        record["total_params"] = sum(p.numel() for p in model.parameters())
        record["trainable_params"] = sum(p.numel() for p in trainable)
        arch = resolve_arch(point["model"])
        record["dsdoctor_trainable_params"] = trainable_params(
            arch, method, lora_r=point.get("lora_r", 8),
            lora_targets=tuple(point["lora_targets"]) if point.get("lora_targets") else None,
            freeze_last=point.get("freeze_last", 2), prefix_tokens=point.get("prefix_tokens", 16))
        record["phase"] = "initialize"
        engine, *_ = deepspeed.initialize(model=model, model_parameters=trainable, config=ds_config(point))
        b, s = point["micro_batch"], point["seq_len"]
        generator = torch.Generator().manual_seed(0)
        record["steps"] = []
        for step in range(3):
            ids = torch.randint(0, config.vocab_size, (b, s), generator=generator).to(engine.device)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            marks = {}
            for phase in ("forward", "backward", "step"):
                record["phase"] = f"step{step + 1}:{phase}"
                if phase == "forward":
                    loss = engine(input_ids=ids, labels=ids).loss
                elif phase == "backward":
                    engine.backward(loss)
                else:
                    engine.step()
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                    marks[phase] = {"peak_allocated": torch.cuda.max_memory_allocated(),
                                    "allocated": torch.cuda.memory_allocated(),
                                    "reserved": torch.cuda.memory_reserved()}
                    torch.cuda.reset_peak_memory_stats()
            record["steps"].append({"loss": float(loss.detach()), "marks": marks})
            del loss
        record["phase"] = "done"
    except torch.cuda.OutOfMemoryError as exc:
        record["oom"] = True
        record["error"] = str(exc).splitlines()[0][:300]
    if torch.cuda.is_available():
        steady = [m for st in record.get("steps", [])[1:] for m in st["marks"].values()]
        record["peak_allocated"] = max((m["peak_allocated"] for m in steady), default=None)
        record["peak_reserved"] = torch.cuda.max_memory_reserved()  # since start (reserved never shrinks here)
        record["reserved_end"] = torch.cuda.memory_reserved()
        record["nvml_used"] = nvml_used_by_me()
        record["gpu_total"] = torch.cuda.get_device_properties(0).total_memory
        record["gpu"] = torch.cuda.get_device_name(0)
    try:  # DeepSpeed's own estimators, called for real, to check dsdoctor's mirror of them
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

        total = record.get("total_params")
        if total:
            offload = point.get("offload_optimizer", "none") != "none"
            if point["zero"] < 3:
                record["deepspeed_estimate"] = estimate_zero2_model_states_mem_needs(total, 1, 1, offload)[1]
            else:
                arch = resolve_arch(point["model"])
                record["deepspeed_estimate"] = estimate_zero3_model_states_mem_needs(
                    total, arch.largest_layer_params, 1, 1, offload, point.get("offload_param", "none") != "none")[1]
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        record["deepspeed_estimate_error"] = repr(exc)
    (out_dir / f"{point['name']}.json").write_text(json.dumps(record, indent=1))
    return record


def run_grid(grid: list[dict], out_dir: Path, only: set[str] | None, timeout_s: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for point in grid:
        if only and point["name"] not in only:
            continue
        t0 = time.time()
        cmd = [sys.executable, __file__, "point", json.dumps(point), "--out", str(out_dir)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            status = f"rc {proc.returncode}"
            if proc.returncode != 0 and not (out_dir / f"{point['name']}.json").exists():
                (out_dir / f"{point['name']}.json").write_text(json.dumps(
                    {"point": point, "failed": True, "rc": proc.returncode, "stderr": proc.stderr[-3000:]}, indent=1))
        except subprocess.TimeoutExpired:
            status = "timeout"
            (out_dir / f"{point['name']}.json").write_text(json.dumps({"point": point, "failed": True,
                                                                        "timeout": True}, indent=1))
        result = json.loads((out_dir / f"{point['name']}.json").read_text())
        peak = result.get("nvml_used")
        print(f"{point['name']:28s} {status:8s} {time.time() - t0:6.1f}s oom={result.get('oom')} "
              f"nvml={peak / GIB if peak else float('nan'):.2f} GiB "
              f"alloc={(result.get('peak_allocated') or 0) / GIB:.2f} GiB", flush=True)


def setup_of(point: dict, attn: str | None = None):
    """The Setup ``dsdoctor estimate`` builds for a grid point (1 GPU, one node), through its own ``build_setup``.
    The harness keeps only the loss (``loss = engine(...).loss``): ``launch="engine-loss"``, unless the point
    records its loop; ``attn`` as ``--attn``."""
    from dsdoctor.commands.estimate import build_setup

    setup, _, _ = build_setup(
        point["model"], point["method"], point.get("lora_r", 8), ",".join(point.get("lora_targets") or []) or None,
        point.get("freeze_last", 2), point.get("prefix_tokens", 16), point.get("lora_dropout", 0.05), point["zero"],
        point.get("offload_optimizer", "none"), point.get("offload_param", "none"), 1, 1, point["micro_batch"],
        point["seq_len"], point.get("grad_ckpt", True), point.get("precision", "bf16"),
        launch=point.get("launch", "engine-loss"), attn=attn)
    return setup


def predict(point: dict, cal=None):
    """dsdoctor's estimate for a grid point (:func:`setup_of`), and DeepSpeed's and accelerate's estimators."""
    from dsdoctor.checks.memory import CALIBRATION, accelerate_estimator_bytes, deepspeed_estimator_bytes, estimate

    setup = setup_of(point)
    est = estimate(setup, cal or CALIBRATION)
    return est, deepspeed_estimator_bytes(setup), accelerate_estimator_bytes(setup)


def report(points_dir: Path, cal=None) -> str:
    rows, errors = [], {"fit": [], "held-out": []}
    ds_errors, acc_errors, verdicts = [], [], []
    lines = []
    for path in sorted(points_dir.glob("*.json")):
        rec = json.loads(path.read_text())
        point = rec["point"]
        if rec.get("failed"):
            rows.append(f"| {point['name']} | failed | | | | | | |")
            continue
        est, ds_bytes, acc_bytes = predict(point, cal)
        gpu_total = rec.get("gpu_total") or 0
        predicted_oom = est.total > gpu_total
        verdict_ok = predicted_oom == rec["oom"]
        verdicts.append(verdict_ok)
        split = "held-out" if point.get("holdout") else "fit"
        if rec["oom"]:
            rows.append(f"| {point['name']} | {split} | OOM | {est.total / GIB:.2f} | - | {ds_bytes / GIB:.2f} | "
                        f"{acc_bytes / GIB:.2f} | {'right' if verdict_ok else 'WRONG'} |")
            continue
        measured = rec["nvml_used"]
        err = (est.total - measured) / measured
        errors[split].append(err)
        ds_errors.append((ds_bytes - measured) / measured)
        acc_errors.append((acc_bytes - measured) / measured)
        rows.append(f"| {point['name']} | {split} | {measured / GIB:.2f} | {est.total / GIB:.2f} ({err:+.1%}) | "
                    f"{rec['peak_allocated'] / GIB:.2f} / {est.allocated / GIB:.2f} | "
                    f"{ds_bytes / GIB:.2f} ({(ds_bytes - measured) / measured:+.0%}) | "
                    f"{acc_bytes / GIB:.2f} ({(acc_bytes - measured) / measured:+.0%}) | "
                    f"{'right' if verdict_ok else 'WRONG'} |")

    def summary(values):
        if not values:
            return "n/a"
        absolute = [abs(v) for v in values]
        return f"median |error| {statistics.median(absolute):.1%}, max {max(absolute):.1%} over {len(values)} points"

    lines.append("| point | split | NVML used GiB | dsdoctor GiB (error) | peak allocated: measured / dsdoctor | "
                 "DeepSpeed estimator GiB (error) | accelerate GiB (error) | fits/OOM verdict |")
    lines.append("|---|---|---|---|---|---|---|---|")
    lines += rows
    lines.append("")
    lines.append(f"- dsdoctor, fit points: {summary(errors['fit'])}")
    lines.append(f"- dsdoctor, held-out points: {summary(errors['held-out'])}")
    lines.append(f"- dsdoctor, all points: {summary(errors['fit'] + errors['held-out'])}")
    lines.append(f"- DeepSpeed's estimator: {summary(ds_errors)}")
    lines.append(f"- accelerate estimate-memory: {summary(acc_errors)}")
    lines.append(f"- fits/OOM verdict right: {sum(verdicts)}/{len(verdicts)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--grid", default=str(Path(__file__).with_name("memory_grid.json")))
    p_run.add_argument("--out", required=True)
    p_run.add_argument("--only", default=None)
    p_run.add_argument("--timeout", type=int, default=240)
    p_point = sub.add_parser("point")
    p_point.add_argument("spec")
    p_point.add_argument("--out", required=True)
    p_report = sub.add_parser("report")
    p_report.add_argument("points_dir")
    args = parser.parse_args()
    if args.mode == "run":
        grid = json.loads(Path(args.grid).read_text())
        run_grid(grid, Path(args.out), set(args.only.split(",")) if args.only else None, args.timeout)
    elif args.mode == "point":
        run_point(json.loads(args.spec), Path(args.out))
    else:
        print(report(Path(args.points_dir)))


if __name__ == "__main__":
    main()
