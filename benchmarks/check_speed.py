"""Wall time of `dsdoctor check` on every check case in cases/ (the installed console script, a fresh process
each time, as a user or CI runs it). Goal: <= 0.3 s on this machine (2 cores).

    python benchmarks/check_speed.py --repeat 5 > benchmarks/results/check-speed.txt

``--hostile``: instead, the worst config shapes that fit in the reader's 1 MiB cap (tests/config_generator.py
``hostile_shapes``: 80,000 unknown or "auto" keys in each kind of section, duplicate keys, control characters,
a 1 MiB key or string, arrays nested 60 deep, ...), under both --launch values, with --fix to a temporary file,
plus --hf-args shapes under the Trainer. Goal: each well under 5 s.

    python benchmarks/check_speed.py --hostile > benchmarks/results/check-speed-hostile.txt
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
    parser.add_argument("--hostile", action="store_true", help="time the worst 1 MiB shapes instead of the cases")
    args = parser.parse_args()
    if args.hostile:
        hostile()
        return
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


def hostile() -> None:
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from config_generator import HF_SHAPES, hostile_shapes

    exe = shutil.which("dsdoctor")
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        auto = Path(tmp, "auto.json")
        auto.write_text('{"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW", "params": '
                        '{"lr": "auto"}}}')
        runs = [(f"config: {name}", text, launch, None) for name, text in hostile_shapes().items()
                for launch in ("engine", "trainer")]
        runs += [(f"--hf-args: {name}", text, "trainer", auto) for name, text in
                 hostile_shapes(shapes=HF_SHAPES).items()]
        for label, text, launch, config in runs:
            data = Path(tmp, "input.json")
            data.write_text(text)
            argv = [exe, "check", str(config or data), "--launch", launch, "--fix", str(Path(tmp, "fixed.json"))]
            if config is not None:
                argv += ["--hf-args", str(data)]
            start = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, env=env, cwd=tmp)
            rows.append((time.perf_counter() - start, label, launch, proc.returncode, len(proc.stdout)))
    print(f"dsdoctor check on {len(rows)} hostile inputs of up to 1 MiB, table output and --fix, one process each")
    print(f"worst {max(r[0] for r in rows):.2f} s, median {statistics.median(r[0] for r in rows):.2f} s")
    for seconds, label, launch, rc, out in sorted(rows, reverse=True):
        print(f"  {seconds:5.2f} s  exit {rc}  {out:>7,} bytes out  {launch:7}  {label}")


def baseline() -> float:
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(["python3", "-c", "pass"])
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


if __name__ == "__main__":
    main()
