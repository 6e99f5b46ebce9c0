"""Wall time of `dsdoctor explain` (the installed console script, a fresh process each run, as a user pipes a log
into it) on logs of 8 interleaved ranks: DeepSpeed step lines, Trainer loss dicts and tqdm bars, a CUDA out-of-memory
on one rank near the end, then the cascade (peers' connection errors and NCCL watchdog timeouts). Goal (issue 7):
the first real failure found in a log of 10,000+ lines from 8 ranks in <= 1 s.

    python benchmarks/explain_speed.py --repeat 5 > benchmarks/results/explain-speed.txt
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def eight_rank_log(lines_per_rank: int, seed: int = 0) -> tuple[str, int]:
    """(text, line number of the OOM)."""
    rng = random.Random(seed)
    streams = []
    for rank in range(8):
        lines = []
        for i in range(lines_per_rank):
            kind = i % 4
            if kind == 0:
                lines.append(f"[rank{rank}]: {{'loss': {2.5 - i / lines_per_rank:.4f}, 'grad_norm': 1.2, "
                             f"'learning_rate': 1e-05, 'epoch': {i / lines_per_rank:.2f}}}")
            elif kind == 1:
                lines.append(f"[rank{rank}]: [2024-01-01 10:{i // 60 % 60:02d}:{i % 60:02d},000] [INFO] "
                             f"[logging.py:96:log_dist] [Rank {rank}] step={i}, skipped=0, lr=[1e-05], "
                             f"mom=[(0.9, 0.999)]")
            elif kind == 2:
                lines.append(f"[rank{rank}]: {i * 100 // lines_per_rank}%|####      | {i}/{lines_per_rank} "
                             f"[01:02<03:04,  1.23it/s]")
            else:
                lines.append(f"[rank{rank}]: [2024-01-01 10:00:00,000] [INFO] [timer.py:260:stop] epoch=0/"
                             f"micro_step={i}/global_step={i}, RunningAvgSamplesPerSec=9.8, CurrSamplesPerSec=9.7, "
                             f"MemAllocated=61.2GB, MaxMemAllocated=77.9GB")
        streams.append(lines)
    merged = []
    while any(streams):
        stream = rng.choice([s for s in streams if s])
        merged.append(stream.pop(0))
    oom_at = len(merged) - 300
    merged.insert(oom_at, "[rank6]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 6 "
                          "has a total capacity of 79.15 GiB of which 2.10 GiB is free.")
    for rank in (0, 1, 2, 3, 4, 5, 7):
        merged.append(f"[rank{rank}]: RuntimeError: Connection closed by peer [10.0.0.1]:{40000 + rank}")
        merged.append(f"[rank{rank}]: [E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation "
                      f"timeout: WorkNCCL(SeqNum=9001, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                      f"ran for 600042 milliseconds before timing out.")
    return "\n".join(merged) + "\n", oom_at + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    exe = shutil.which("dsdoctor")
    print(f"$ python benchmarks/explain_speed.py --repeat {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        for per_rank in (1300, 13000):
            text, oom_line = eight_rank_log(per_rank)
            log = Path(tmp) / f"train-{per_rank}.log"
            log.write_text(text)
            runs = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                proc = subprocess.run([exe, "explain", str(log), "--json", "-"], capture_output=True, text=True)
                runs.append(time.perf_counter() - start)
            first = json.loads(proc.stdout)["findings"][0]
            right = first["id"] == "MEM501" and first["evidence"].startswith(f"line {oom_line}: rank 6:")
            print(f"{len(text.splitlines()):,} lines, 8 ranks, {log.stat().st_size / 2 ** 20:.1f} MiB: median "
                  f"{statistics.median(runs):.3f} s, max {max(runs):.3f} s (goal <= 1 s for 10,000+ lines); first "
                  f"failure {first['id']} at line {oom_line}: {'found' if right else 'MISSED: ' + first['evidence']}")


if __name__ == "__main__":
    main()
