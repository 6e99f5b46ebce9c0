"""Predict each calibration point's reserved peak by replaying its allocations, recorded on the meta device
(dsdoctor/checks/step_trace.py: the model's own ops, DeepSpeed's ZeRO-0/1/2 buffers), through the caching allocator
model (dsdoctor/checks/allocator.py); compare with the GPU run's own max_memory_reserved and whether it ran out.

    python benchmarks/step_replay.py [--only=NAME,...] > benchmarks/results/memory-loops/step-replay.md

Every point of the three rounds (benchmarks/fit_calibration.py ``load``) at ZeRO-0/1/2 without offload; the
replay has no fitted coefficient, so fit and held-out points are reported apart only to compare with the
calibrated formulas (benchmarks/results/memory-loops/calibration-fit.txt).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = 2 ** 30


def main() -> None:
    import fit_calibration
    from memory_loops import RAN_SDPA

    from dsdoctor.checks.memory import cuda_context_bytes, replay_verdict
    from dsdoctor.checks.step_trace import replay_setup

    only = None
    which = "zero012"
    for a in sys.argv[1:]:
        if a.startswith("--only="):
            only = set(a.split("=", 1)[1].split(","))
        elif a == "--zero3-offload":  # the ZeRO-3 and offload points instead
            which = "zero3-offload"
    rows = {"fit": [], "held-out": []}
    print("# python benchmarks/step_replay.py " + " ".join(sys.argv[1:]) + "  (every measured point of "
          + ("ZeRO-0/1/2 without offload)" if which == "zero012" else "ZeRO-3 or offload)"))
    print("| round | point | loop | measured reserved GiB | replay GiB | error | allocated GiB | replay allocated GiB "
          "| OOM measured / replayed | verdict | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for point in fit_calibration.load():
        setup = point["setup"]
        if only and point["name"] not in only:
            continue
        z3_or_offload = setup.zero_stage == 3 or setup.offloaded or setup.offload_param != "none"
        if z3_or_offload != (which == "zero3-offload"):
            continue
        capacity = point["gpu_total"] - cuda_context_bytes(setup)
        attn = RAN_SDPA.get(setup.arch.config.get("model_type"))
        r = replay_setup(setup, capacity, attn=attn)
        oom_model = r.reserved is None
        # the verdict estimate --replay gives (MEM502's band, 8% either side, and MEM512's out of memory by
        # fragmentation are warnings, right either way)
        kind = replay_verdict(r, cuda_context_bytes(setup), point["gpu_total"])
        err = None if oom_model or point["oom"] or not point["reserved"] else \
            (r.reserved - point["reserved"]) / point["reserved"]
        rows["held-out" if point["held"] else "fit"].append((point, r, err, kind))
        print(f"| {point['round']} | {point['name']} | {setup.launch} | "
              f"{(point['reserved'] or 0) / GIB:.2f} | {(r.reserved or 0) / GIB:.2f} | "
              f"{'' if err is None else f'{100 * err:+.1f}%'} | {(point['allocated'] or 0) / GIB:.2f} | "
              f"{(r.allocated or 0) / GIB:.2f}{f' (no limit: {r.unbounded_allocated / GIB:.2f})' if r.unbounded_allocated else ''}"
              f" | {point['oom']} / {oom_model}"
              f"{' (' + r.oom_phase + ')' if r.oom_phase else ''} | {kind} | {r.seconds:.1f} |", flush=True)
    for group, items in rows.items():
        errs = [abs(e) for _, _, e, _ in items if e is not None]
        right = sum((r.reserved is None) == p["oom"] for p, r, _, _ in items)
        verdicts = sum(k == "tight" or (k == "no") == p["oom"] for p, _, _, k in items)
        if errs:
            print(f"\n{group}: |error| on the {len(errs)} that ran: median {100 * statistics.median(errs):.1f}%, "
                  f"max {100 * max(errs):.1f}%, within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}; "
                  f"out of memory right: {right}/{len(items)}; verdict (fits / tight: a warning either way / no) right: "
                  f"{verdicts}/{len(items)}, {sum(k == 'tight' for *_, k in items)} tight")


if __name__ == "__main__":
    main()
