"""A held-out round against the predictions written before its GPU run: the replay (estimate --replay) and the
calibrated formulas (estimate) against what nvidia-smi showed, and the out-of-memory verdicts.

    python benchmarks/heldout_report.py benchmarks/results/memory-loops/points-r4
    python benchmarks/heldout_report.py predict benchmarks/memory_loops_grid_r6.json > .../predictions-before-the-run.jsonl

The folder holds the run's records (memory_loops.py) and ``predictions-before-the-run.jsonl``: one JSON line per
point with the calibrated total, the replayed reserved bytes (or the phase the replay ran out of memory in) and
the CUDA context, from the code as committed before the run came back (its header line names the commit).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

GIB = 2 ** 30


def predict(grid_path: Path) -> None:
    """The predictions file of a grid, from the code as it is now (run before the GPU run, committed with it)."""
    import subprocess
    import time

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_loops import setup_of

    from dsdoctor.checks.memory import cuda_context_bytes, estimate, replay_verdict, verdict
    from dsdoctor.checks.step_trace import replay_setup

    gpu_total = 150_109_880_320  # the H200's total_memory, as torch reports it (points' gpu_total)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# replay predictions for {grid_path}, made before its GPU run came back; code at {commit} "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    from dsdoctor.report import DsdoctorError

    for point in json.loads(grid_path.read_text()):
        stops = errors_before_training(point)
        if stops:  # `dsdoctor estimate` as a user runs it says the run stops before training
            print(json.dumps({"name": point["name"], "predicted_failure": "; ".join(stops)}), flush=True)
            continue
        try:
            setup = setup_of(point)
            est = estimate(setup)
            context = cuda_context_bytes(setup)
            r = replay_setup(setup, gpu_total - context, attn=setup_attn(point))
        except DsdoctorError as exc:  # predicted to stop before training (peft or transformers refuses the setup)
            print(json.dumps({"name": point["name"], "predicted_failure": str(exc)}), flush=True)
            continue
        print(json.dumps({"name": point["name"], "calibrated_total": est.total, "calibrated_allocated": est.allocated,
                          "calibrated_verdict": verdict(est.total, gpu_total, setup),
                          "replay_reserved": r.reserved, "replay_allocated": r.allocated, "replay_oom": r.oom_phase,
                          "replay_unbounded_reserved": r.unbounded_reserved,
                          "replay_unbounded_allocated": r.unbounded_allocated,
                          "replay_verdict": replay_verdict(r, context, gpu_total), "context": context}), flush=True)


#: the GPU machine's host RAM, GiB (shared/gpu/README.md): what `estimate --host-mem` is given for the host check
HOST_GIB = 125


def point_flags(point: dict) -> list[str]:
    """The `dsdoctor estimate` command line of a grid point, as a user would type it for that run on the GPU machine
    (one H200: its memory as torch reports it, and its host RAM)."""
    flags = ["--model", point["model"], "--method", point["method"], "--zero", str(point["zero"]),
             "--offload-optimizer", point.get("offload_optimizer", "none"),
             "--offload-param", point.get("offload_param", "none"), "--gpus", "1",
             "--micro-batch", str(point["micro_batch"]), "--seq-len", str(point["seq_len"]),
             "--precision", point.get("precision", "bf16"), "--launch", point.get("loop", "engine"),
             "--gpu-mem", f"{150_109_880_320 / GIB:.4f}", "--host-mem", str(HOST_GIB),
             "--lora-r", str(point.get("lora_r", 8)), "--lora-dropout", str(point.get("lora_dropout", 0.05)),
             "--freeze-last", str(point.get("freeze_last", 2)), "--prefix-tokens", str(point.get("prefix_tokens", 16)),
             "--grad-ckpt" if point.get("grad_ckpt", True) else "--no-grad-ckpt"]
    if point.get("lora_targets"):
        flags += ["--lora-targets", ",".join(point["lora_targets"])]
    return flags


def errors_before_training(point: dict) -> list[str]:
    """The error findings `dsdoctor estimate` gives for a point that say the run stops before it trains (every
    error but MEM501, the out-of-memory verdict the memory columns judge), as "RULE: title"; a refusal (exit 2) is
    one too. The harness's own defaults (gradient checkpointing on unless the point says otherwise) are the flags."""
    from click.testing import CliRunner

    from dsdoctor.cli import cli

    if point.get("config"):
        return []  # a config given inline is estimated through setup_of's folder
    result = CliRunner().invoke(cli, ["estimate", *point_flags(point), "--format", "json"])
    if result.exit_code == 2:
        return [result.output.strip().splitlines()[-1][:200]]
    try:
        report = json.loads(result.output)
    except json.JSONDecodeError:
        return []
    return [f"{f['id']}: {f['title']}" for f in report.get("findings", [])
            if f.get("severity") == "error" and f.get("id") != "MEM501"]


def setup_attn(point: dict):
    from memory_loops import RAN_SDPA, point_config

    return point.get("attn") or RAN_SDPA.get(point_config(point)["model_type"])


def main(folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dsdoctor.checks.memory import verdict

    lines = (folder / "predictions-before-the-run.jsonl").read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    pred = {d["name"]: d for d in (json.loads(line) for line in lines if line.startswith("{"))}
    print(f"# python benchmarks/heldout_report.py {folder}")
    print("\n".join(header))
    print("\n| point | loop | NVML GiB | replay GiB | error | calibrated GiB | error | measured OOM / verdict: "
          "replay / calibrated (fits, tight: a warning, no) |")
    print("|---|---|---|---|---|---|---|---|")
    rep, cal, verdicts = [], [], []
    for path in sorted(folder.glob("*.json")):
        r = json.loads(path.read_text())
        point = r["point"]
        p = pred[point["name"]]
        if r.get("failed") or "predicted_failure" in p:
            errors = [line for line in r.get("stderr", "").splitlines() if "Error" in line]
            why = errors[-1].split("]:")[-1].strip()[:140] if errors else "timeout"
            said = f"predicted to stop before training: {p['predicted_failure'][:140]}" if "predicted_failure" in p \
                else "predicted to train"
            ran = f"failed before training: {why}" if r.get("failed") else "trained"
            print(f"| {point['name']} | {point.get('loop')} | ({ran}; {said}) |||||")
            verdicts.append(((bool(r.get("failed")) == ("predicted_failure" in p),) * 2))
            continue
        nvml, oom = r["nvml_peak_over_baseline"], r["oom"]
        replay_total = None if p["replay_reserved"] is None else p["replay_reserved"] + p["context"]
        cal_oom = p["calibrated_total"] > r["gpu_total"]
        # the verdicts as estimate gives them: "tight" (MEM502's band, MEM512) is a warning, right either way;
        # predictions written before the verdict was recorded (rounds up to 11) had none: out of memory was "no"
        kinds = (p.get("replay_verdict") or ("no" if replay_total is None else verdict(replay_total, r["gpu_total"])),
                 p.get("calibrated_verdict") or verdict(p["calibrated_total"], r["gpu_total"]))
        verdicts.append(tuple(k == "tight" or (k == "no") == oom for k in kinds))
        cells = [point["name"], point.get("loop", ""), f"{nvml / GIB:.2f}"]
        if oom or replay_total is None:
            cells += [f"OOM in {p['replay_oom']}" if replay_total is None else f"{replay_total / GIB:.2f}", "",
                      f"{p['calibrated_total'] / GIB:.2f}", ""]
        else:
            e1, e2 = (replay_total - nvml) / nvml, (p["calibrated_total"] - nvml) / nvml
            rep.append(abs(e1))
            cal.append(abs(e2))
            cells += [f"{replay_total / GIB:.2f}", f"{100 * e1:+.1f}%", f"{p['calibrated_total'] / GIB:.2f}",
                      f"{100 * e2:+.1f}%"]
        cells.append(f"{oom}{' (' + r['peak_phase'] + ')' if oom else ''} / {kinds[0]} / {kinds[1]}")
        print("| " + " | ".join(cells) + " |")
    for name, errs, k in (("replay", rep, 0), ("calibrated", cal, 1)):
        if errs:
            print(f"\n{name}: |error| against NVML on the {len(errs)} that ran: median "
                  f"{100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}%, within 5%: "
                  f"{sum(e <= 0.05 for e in errs)}/{len(errs)}; verdict right (a warning either way): "
                  f"{sum(v[k] for v in verdicts)}/{len(verdicts)}")


if __name__ == "__main__" and sys.argv[1:2] == ["predict"]:
    predict(Path(sys.argv[2]))
elif __name__ == "__main__":
    main(Path(sys.argv[1]))
