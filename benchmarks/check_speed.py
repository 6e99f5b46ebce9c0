"""Wall time of `dsdoctor check` on every check case in cases/ (the installed console script, a fresh process
each time, as a user or CI runs it). Goal: <= 0.3 s on this machine (2 cores).

    python benchmarks/check_speed.py --repeat 5 > benchmarks/results/check-speed.txt
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    exe = shutil.which("dsdoctor")
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    times, per_case = [], {}
    for case in sorted((ROOT / "cases").iterdir()):
        expected = json.loads((case / "expected.json").read_text()) if (case / "expected.json").is_file() else {}
        if expected.get("command") != "check":
            continue
        argv = [exe, "check", *[a.replace("{case}", str(case)) for a in expected["args"]]]
        runs = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, env=env, cwd=ROOT)
            runs.append(time.perf_counter() - start)
        per_case[case.name] = statistics.median(runs)
        times += runs
    times.sort()
    print(f"dsdoctor check, {len(per_case)} cases x {args.repeat} runs = {len(times)} processes (table output)")
    print(f"median {statistics.median(times):.3f} s, p90 {times[int(0.9 * len(times)) - 1]:.3f} s, "
          f"max {times[-1]:.3f} s; python3 -c pass alone: {baseline():.3f} s")
    for name, t in per_case.items():
        print(f"  {t:.3f} s  {name}")


def baseline() -> float:
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(["python3", "-c", "pass"])
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


if __name__ == "__main__":
    main()
