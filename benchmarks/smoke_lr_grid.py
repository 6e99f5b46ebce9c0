"""Which learning rates the bundled tiny random model shows learning at in 100 steps, by method: the figures behind
``checks/training.py`` BUNDLED_LEARNS_AT and TRN611's advice, and the tutorials' own configs on it.

Each point is a real ``dsdoctor smoke`` on 2 CPU ranks with a ds_config (AdamW, WarmupLR over 5 steps unless the
tutorial's scheduler is given), and records the loss drop (first 10 vs last 10 steps) and the verdict.

    python benchmarks/smoke_lr_grid.py [--steps 100] [--only lora,full] > benchmarks/results/smoke-lr-grid.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def config(lr: float, scheduler: dict | None = None) -> dict:
    return {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0, "torch_adam": True}},
            "scheduler": scheduler or {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": lr,
                                                                      "warmup_num_steps": 5}},
            "zero_optimization": {"stage": 2}, "steps_per_print": 10 ** 9}


#: the tutorials' learning rates and schedulers (shared/tutorials): the ChatGLM LoRA one (WarmupDecayLR to 2e-5 over a
#: 200-step warmup; total_num_steps, which it lacks, set to 1000) and the Trainer one (full, 2e-5, cosine with 10%
#: warmup, as DeepSpeed's WarmupCosineLR)
TUTORIALS = {
    "tutorial-A lora WarmupDecayLR 2e-5 warmup 200": ("lora", config(2e-5, {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 0, "warmup_max_lr": 2e-5, "warmup_num_steps": 200, "total_num_steps": 1000}})),
    "tutorial-B full cosine 2e-5 warmup 10%": ("full", config(2e-5, {"type": "WarmupCosineLR", "params": {
        "warmup_min_ratio": 0.0, "warmup_num_steps": 10, "total_num_steps": 100, "cos_min_ratio": 0.0}})),
}
GRID = {"lora": [2e-5, 5e-5, 1e-4, 2e-4, 5e-4], "full": [2e-5, 5e-5, 1e-4, 2e-4], "freeze": [2e-5, 1e-4],
        "ptuning": [2e-3, 1e-2]}


def run(method: str, cfg: dict, steps: int, work: Path) -> dict:
    path = work / "ds.json"
    path.write_text(json.dumps(cfg))
    report = work / "report.json"
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "smoke", "--steps", str(steps), "--method", method,
                           "--deepspeed", str(path), "--out", str(work / "out"), "--json", str(report)],
                          capture_output=True, text=True)
    data = json.loads(report.read_text()) if report.exists() else {"findings": [], "result": {}}
    verdicts = {f["id"]: f["severity"] for f in data["findings"] if f["id"] in ("TRN601", "TRN605", "TRN611")}
    r = data["result"]
    first, last = r.get("loss_first"), r.get("loss_last")
    return {"exit": proc.returncode, "wall_s": round(time.time() - start, 1), "loss_first": first, "loss_last": last,
            "drop": None if first is None else round((first - last) / first, 4), "verdicts": verdicts,
            "parameter_change": (r.get("parameter_change") or {}).get("relative_change")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--only", default=None, help="comma-separated methods of the grid; 'tutorials' for those")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    print(f"# {' '.join(sys.argv)}\n# 2 CPU ranks, bundled tiny model, {args.steps} steps; drop = (first10 - last10) "
          f"/ first10; TRN601 needs > 3% and > 2x noise", flush=True)
    points = [(name, m, c) for name, (m, c) in TUTORIALS.items() if not only or "tutorials" in only]
    points += [(f"{m} AdamW WarmupLR(5) lr {lr:g}", m, config(lr)) for m, lrs in GRID.items()
               if not only or m in only for lr in lrs]
    for name, method, cfg in points:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"{name}: {json.dumps(run(method, cfg, args.steps, Path(tmp)))}", flush=True)


if __name__ == "__main__":
    main()
