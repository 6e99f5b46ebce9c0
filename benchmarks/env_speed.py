"""Wall time of `dsdoctor env` against DeepSpeed's `ds_report` on the same machine, in one run (issue 5's goal:
dsdoctor env <= 0.5x ds_report). Fresh processes, as a user runs them; medians of --repeat runs.

    python benchmarks/env_speed.py --repeat 5 > benchmarks/results/env-speed.txt
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time


def timed(argv: list[str], repeat: int) -> list[float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True)
        runs.append(time.perf_counter() - start)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    ours = timed([shutil.which("dsdoctor"), "env", "--json", "-"], args.repeat)
    theirs = timed([shutil.which("ds_report")], args.repeat)
    print(f"$ python benchmarks/env_speed.py --repeat {args.repeat}")
    print(f"dsdoctor env: median {statistics.median(ours):.3f} s (max {max(ours):.3f})")
    print(f"ds_report:    median {statistics.median(theirs):.3f} s (max {max(theirs):.3f})")
    print(f"ratio: {statistics.median(ours) / statistics.median(theirs):.2f} (goal <= 0.5)")


if __name__ == "__main__":
    main()
