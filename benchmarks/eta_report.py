"""Compare preflight's two ETAs with the run they predict (``benchmarks/eta_gpu.sh``'s files in DIR).

    python benchmarks/eta_report.py DIR

The run's time to train is the sum of its 200 step times (rank 0's ``metrics/rank0.jsonl``: what the ETA predicts,
steps x step time); its whole wall time (model build, DeepSpeed initialize, the steps) is shown beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    rows = [json.loads(line) for line in (out / "real.metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["step_time_s"] for r in rows if isinstance(r.get("step_time_s"), (int, float))]
    real = sum(steps)
    wall = json.loads((out / "real_smoke.json").read_text())["result"].get("wall_s")
    print(f"run: {len(steps)} steps, sum of step times {real:.1f} s (whole smoke wall {wall} s)")
    for name in ("preflight_flops", "preflight_probe"):
        path = out / f"{name}.json"
        if not path.is_file():
            print(f"{name}: missing")
            continue
        eta = json.loads(path.read_text())["result"]["eta"]
        total = eta.get("total_s")
        if total is None:
            print(f"{name}: no ETA ({eta})")
            continue
        print(f"{name}: {eta['steps']} steps x {eta['step_time_s']} s = {total:.1f} s; error {100 * (total - real) / real:+.1f}% "
              f"({eta['step_time_from']})")


if __name__ == "__main__":
    main()
