"""Predict a calibration point's reserved peak by replaying its allocations, recorded on the meta device
(dsdoctor/checks/step_trace.py), through the caching allocator model (dsdoctor/checks/allocator.py); compare with
the GPU run's own max_memory_reserved / max_memory_allocated.

    python benchmarks/step_replay.py benchmarks/results/memory-loops/points*/*.json [--only NAME,...]

DeepSpeed's own blocks are added where its code allocates them (ZeRO-1/2, ``stage_1_and_2.py``): the flat 16-bit
copy of the trainable parameters and its fp32 master partition at ``initialize``; in each backward, the
reduction bucket of ``reduce_bucket_size`` elements (``setup_buckets``, released at the end), each gradient copied
into it and dropped as soon as it is accumulated; at each step the fp32 gradient partition (transient) and, at the
first, Adam's two fp32 moments.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = 2 ** 30


def predict(point: dict, capacity: int | None):
    """(Recorder, the allocator after it, seconds) for a point: its dsdoctor Setup, replayed."""
    from memory_loops import RAN_SDPA, setup_of

    from dsdoctor.checks.step_trace import replay, run_program
    from dsdoctor.models import REGISTRY

    setup = setup_of(point)
    t = time.time()
    rec = run_program(setup, attn=point.get("attn") or RAN_SDPA.get(REGISTRY[point["model"]][1]["model_type"]))
    return rec, replay(rec, capacity), time.time() - t


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--only")]
    only = None
    for a in sys.argv[1:]:
        if a.startswith("--only="):
            only = set(a.split("=", 1)[1].split(","))
    errs = []
    for path in args:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            r = json.load(f)
        if r.get("failed") or r.get("oom"):
            continue
        point = r["point"]
        if only and point["name"] not in only:
            continue
        if point["zero"] not in (0, 1, 2) or point.get("offload_optimizer", "none") != "none":
            continue
        from dsdoctor.checks.allocator import OutOfMemory
        from dsdoctor.checks.memory import cuda_context_bytes
        from memory_loops import setup_of

        try:
            rec, sim, secs = predict(point, r["gpu_total"] - cuda_context_bytes(setup_of(point)))
        except OutOfMemory as exc:
            print(f"{point['name']:42s} reserved {r['max_reserved'] / GIB:7.2f} model OUT OF MEMORY ({exc})")
            errs.append(1.0)
            continue
        err = (sim.peak_reserved - r["max_reserved"]) / r["max_reserved"]
        errs.append(abs(err))
        print(f"{point['name']:42s} reserved {r['max_reserved'] / GIB:7.2f} model {sim.peak_reserved / GIB:7.2f} "
              f"({100 * err:+5.1f}%)  allocated {r['max_allocated'] / GIB:7.2f} model {sim.peak_allocated / GIB:7.2f}"
              f"  [{secs:.1f} s, {len(rec.events)} events]", flush=True)
    if errs:
        print(f"|error| median {100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}%, n={len(errs)}")


if __name__ == "__main__":
    main()
