"""Wall time of ``dsdoctor preflight`` (issue 16: <= 3 s without --probe on a registry model) and of
``dsdoctor data`` on 100,000 samples (<= 20 s, sampled tokenization, and --full), each a fresh process.

    python benchmarks/preflight_speed.py [--repeat 3]
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], cwd: Path, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dsdoctor", *args, "--json", "-"], cwd=cwd,
                              capture_output=True, text=True)
        out.append(time.perf_counter() - started)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{args}: exit {proc.returncode}: {proc.stderr[-500:]}")
    return out


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    tutorial = ROOT / "tests" / "preflight" / "tutorial_a"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = [json.loads(line) for line in (ROOT / "reference_train/assets/data/sft.jsonl").read_text().splitlines()]
        rng = random.Random(1)
        with (tmp / "big.jsonl").open("w") as f:
            for i in range(100_000):
                row = dict(source[i % len(source)])
                row["instruction"] += f" {i}" + " more context" * rng.randint(0, 60)
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        (tmp / "ds.json").write_text((tutorial / "ds_config.json").read_text())
        cases = [
            ("preflight, tutorial A's line (registry model THUDM/chatglm-6b, no data file)",
             ["preflight", "--"] + "deepspeed --num_gpus 4 --master_port 29500 train_chatglm_lora.py".split(), tutorial, 3),
            ("preflight, a torchrun line with --data_path (100,000 samples audited, bundled tokenizer)",
             ["preflight", "--", "torchrun", "--nproc_per_node", "4", str(tutorial / "train_chatglm_lora.py"),
              "--data_path", "big.jsonl", "--model_max_length", "256"], tmp, 20),
            ("data, 100,000 samples, --seq-len 256 (2,000 sampled + every prompt long enough to be cut away)",
             ["data", "big.jsonl", "--seq-len", "256", "--micro-batch", "4"], tmp, 20),
            ("data, 100,000 samples, --seq-len 256 --full", ["data", "big.jsonl", "--seq-len", "256", "--full"], tmp, 20),
        ]
        for label, args, cwd, goal in cases:
            times = timed(args, cwd, repeat)
            print(f"{label}: median {statistics.median(times):.2f} s, max {max(times):.2f} s (goal <= {goal} s)")


if __name__ == "__main__":
    main()
