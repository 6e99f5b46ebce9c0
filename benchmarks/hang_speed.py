"""How long `dsdoctor hang` takes to name the stuck rank of a real job, from the call to the verdict.

    python benchmarks/hang_speed.py [--ranks 8] [--repeat 3] >> benchmarks/results/hang-speed.txt

Starts tests/hang_job.py's ``sleep`` job (the last rank waits in its own code before step 3's all_reduce; the others
wait in all_reduce) under torchrun with gloo on the CPU, then runs ``dsdoctor hang --pid LAUNCHER`` as a user would
(a new process each time: imports included), with the default --interval (2 s of sampling) and with --interval 0.
Prints one line per run: wall seconds, the first finding, and whether it named the right rank.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "hang_job.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hang-speed-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.ranks),
                            "--master-port", str(port), str(JOB), "sleep", str(work)],
                           stdout=(work / "out.txt").open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            logs = [work / f"loss-{r}.log" for r in range(args.ranks)]
            if all(p.exists() and len(p.read_text().splitlines()) >= 2 for p in logs):
                break
            time.sleep(0.5)
        else:
            raise SystemExit("the job did not reach its stall")
        time.sleep(2)
        print(f"# python benchmarks/hang_speed.py --ranks {args.ranks} --repeat {args.repeat}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores, "
              f"{platform.python_version()}; torchrun + gloo on the CPU, tests/hang_job.py sleep")
        for interval in ("2", "0"):
            for _ in range(args.repeat):
                start = time.perf_counter()
                out = subprocess.run([sys.executable, "-m", "dsdoctor", "hang", "--pid", str(job.pid),
                                      "--interval", interval, "--json", "-"], capture_output=True, text=True,
                                     timeout=120)
                wall = time.perf_counter() - start
                data = json.loads(out.stdout)
                first = data["findings"][0]
                right = first["id"] == "HANG901" and first["title"].startswith(f"rank {args.ranks - 1} has not")
                print(f"ranks {args.ranks} interval {interval} s: {wall:.2f} s wall (in-command "
                      f"{data['result']['seconds']:.2f} s), {first['id']}: {first['title']} "
                      f"-> {'right' if right else 'WRONG'}")
        (work / "release").write_text("")
        job.wait(120)
        steps = [len((work / f"loss-{r}.log").read_text().splitlines()) for r in range(args.ranks)]
        print(f"after the release: the job exited {job.returncode}, steps logged per rank {steps}")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
