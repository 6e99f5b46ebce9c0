"""Wall time of `dsdoctor explain` (the installed console script, a fresh process each run, as a user pipes a log
into it) on logs of 8 interleaved ranks: DeepSpeed step lines, Trainer loss dicts and tqdm bars, a CUDA out-of-memory
on one rank near the end, then the cascade (peers' connection errors and NCCL watchdog timeouts). Goal (issue 7):
the first real failure found in a log of 10,000+ lines from 8 ranks in <= 1 s.

Also (issue 12): the same log as 8 per-rank files (`dsdoctor explain DIR/rank*.log`, merged by their timestamps), and
the log with pathological lines spliced in (an OOM line followed by 100,000 digits, `NCCL WARN socketStartConnect`
followed by 160,000 characters, a 20,000-character dotted word, runs of `[`, unterminated terminal titles, a batch
assertion with a 4,300-digit number, absurd rank prefixes and world sizes): goal <= 1 s as well (before issue 12,
each of the first three lines alone took 10 to 60 s).

    python benchmarks/explain_speed.py --repeat 5 > benchmarks/results/explain-speed.txt
"""

from __future__ import annotations

import argparse
import json
import random
import resource
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


def pathological_lines() -> tuple[list[str], list[str]]:
    """Lines that made explain's regular expressions backtrack (issue 12: 10 s to over 60 s each) or crashed it: (noise
    that is no failure, lines after the first failure)."""
    noise = [
        "[rank2]: NCCL WARN socketStartConnect: Connect to " + "1" * 160_000,
        "[rank1]: " + "a." * 10_000 + "Error",
        "[rank1]: Watchdog caught collective operation timeout" + "[" * 50_000,
        "[rank4]: " + "\x1b]" * 30_000,
        "[rank5]: 12 validation errors for DeepSpeed" + "0" * 50_000,
        "[rank5]: " + "".join(f"{i}%|" for i in range(20_000)),
        "[W" + "1" * 50_000 + " socket.cpp:1] [c10d] a warning",
        "[rank99999999999999999999999]: RuntimeError: a rank prefix that is no rank",
        "[INFO] world_size=999999999",
    ]
    after = ["[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
             "micro_batch_per_gpu * gradient_acc_step * world_size " + "1234" * 1075 + " != 2 * 1 * 2"]
    return noise, after


def with_pathological_lines(text: str, oom_line: int) -> tuple[str, int]:
    """The 8-rank log with :func:`pathological_lines`: rank 6's OOM line followed by 100,000 digits (its evidence is
    read from that line), the noise spread before it, the rest after it. Returns (text, the OOM's line number)."""
    lines = text.split("\n")
    lines[oom_line - 1] += "0" * 100_000
    noise, after = pathological_lines()
    for line in after:
        lines.insert(oom_line, line)
    for k, line in enumerate(noise):
        lines.insert(1 + k * (oom_line // (len(noise) + 1)), line)
    return "\n".join(lines), oom_line + len(noise)


#: CPU seconds (user + system) of each run's process, by the runs' wall times: on this shared 2-core machine the wall
#: time varies with the other jobs' load, the CPU time much less
CPU: dict[float, float] = {}


def timed(args: list[str], repeat: int) -> tuple[list[float], dict]:
    """Wall times of ``repeat`` fresh processes running ``args``, and the last one's JSON report."""
    runs = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True)
        runs.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        CPU[runs[-1]] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if not proc.stdout.startswith("{"):  # an older dsdoctor (one LOG only), or an error: say so, go on
        return runs, {"findings": [{"id": "none", "evidence": proc.stderr.strip()[:200]}]}
    return runs, json.loads(proc.stdout)


def cpu(runs: list[float]) -> str:
    return f"cpu median {statistics.median(CPU[r] for r in runs):.3f} s"


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
            runs, report = timed([exe, "explain", str(log), "--json", "-"], args.repeat)
            first = report["findings"][0]
            right = first["id"] == "MEM501" and first["evidence"].startswith(f"line {oom_line}: rank 6:")
            print(f"{len(text.splitlines()):,} lines, 8 ranks, {log.stat().st_size / 2 ** 20:.1f} MiB: median "
                  f"{statistics.median(runs):.3f} s, max {max(runs):.3f} s, {cpu(runs)} (goal <= 1 s for 10,000+ "
                  f"lines); first "
                  f"failure {first['id']} at line {oom_line}: {'found' if right else 'MISSED: ' + first['evidence']}")
        # the same ranks, one file each (as deepspeed --enable_each_rank_log writes them); each file's failure after a
        # timestamped line (the OOM at 10:25, the others' cascade 10 minutes later, when their watchdog fires)
        text, _ = eight_rank_log(1300)
        folder = Path(tmp) / "ranks"
        folder.mkdir()
        for rank in range(8):
            own = [ln[len(f"[rank{rank}]: "):] for ln in text.splitlines() if ln.startswith(f"[rank{rank}]: ")]
            failed = next(i for i, ln in enumerate(own) if "OutOfMemoryError" in ln or "Connection closed" in ln)
            own.insert(failed, f"[2024-01-01 10:{25 if rank == 6 else 35}:00,000] [ERROR] [engine.py:2107:step] "
                               f"step {1300 + rank} failed")
            (folder / f"20240101100000_rank{rank}.log").write_text("\n".join(own) + "\n")
        files = sorted(str(p) for p in folder.iterdir())
        runs, report = timed([exe, "explain", *files, "--json", "-"], args.repeat)
        first = report["findings"][0]
        right = first["id"] == "MEM501" and "_rank6.log line " in first["evidence"] and ": rank 6:" in first["evidence"]
        verdict = "found on rank 6" if right else "MISSED: " + first["evidence"]
        print(f"the same log as 8 per-rank files (explain DIR/*.log): median {statistics.median(runs):.3f} s, max "
              f"{max(runs):.3f} s, {cpu(runs)}; first failure {first['id']}: {verdict}")
        # pathological lines spliced in
        text, oom_line = with_pathological_lines(*eight_rank_log(1300))
        log = Path(tmp) / "pathological.log"
        log.write_text(text)
        runs, report = timed([exe, "explain", str(log), "--json", "-"], args.repeat)
        first = report["findings"][0]
        right = first["id"] == "MEM501" and first["evidence"].startswith(f"line {oom_line}: rank 6:")
        print(f"{len(text.splitlines()):,} lines with {sum(map(len, pathological_lines())) + 1} pathological ones, "
              f"{log.stat().st_size / 2 ** 20:.1f} MiB: median {statistics.median(runs):.3f} s, max {max(runs):.3f} s, "
              f"{cpu(runs)} (goal <= 1 s); first failure {first['id']} at line {oom_line}: "
              f"{'found' if right else 'MISSED: ' + first['evidence']}")


if __name__ == "__main__":
    main()
