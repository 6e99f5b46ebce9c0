"""Step times against the GPU's clocks and power (``benchmarks/eta_gpu_clocks.sh``'s files in DIR).

    python benchmarks/eta_clocks_report.py benchmarks/results/eta-gpu/clocks

For each 20-step window of each run: the median step time (rank 0's metrics), and nvidia-smi's median SM clock,
median power draw, peak temperature and the clock-event reasons seen in that window (0x4: SW power cap;
``nvidia-smi --help-query-gpu``)."""

from __future__ import annotations

import csv
import datetime as dt
import json
import statistics
import sys
from pathlib import Path


def _samples(path: Path) -> list[tuple[float, int, float, int, str]]:
    out = []
    for row in list(csv.reader(path.open()))[1:]:
        try:
            when = dt.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
            out.append((when.timestamp(), int(row[1].split()[0]), float(row[3].split()[0]), int(row[4]), row[6].strip()))
        except (ValueError, IndexError):
            continue
    return out


def main(out: Path) -> None:
    samples = _samples(out / "clocks.csv")
    for run in sorted(out.glob("run*.metrics.jsonl")):
        rows = [json.loads(line) for line in run.read_text().splitlines() if line.strip()]
        total = sum(r["step_time_s"] for r in rows)
        print(f"{run.name}: {len(rows)} steps, sum of step times {total:.1f} s")
        for a in range(0, len(rows), 20):
            seg = rows[a:a + 20]
            t0, t1 = seg[0]["time"] - seg[0]["step_time_s"], seg[-1]["time"]
            win = [s for s in samples if t0 <= s[0] <= t1]
            med = statistics.median(r["step_time_s"] for r in seg)
            if not win:
                print(f"  steps {a + 1}-{a + len(seg)}: median {med:.3f} s (no clock samples)")
                continue
            print(f"  steps {a + 1}-{a + len(seg)}: median {med:.3f} s, SM {statistics.median(s[1] for s in win):.0f} MHz, "
                  f"{statistics.median(s[2] for s in win):.0f} W, {max(s[3] for s in win)} C, "
                  f"reasons {','.join(sorted(set(s[4] for s in win)))}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
