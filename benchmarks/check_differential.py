"""Agreement of `dsdoctor check` with real DeepSpeed on generated configs.

For each config of tests/config_generator.py: real ``deepspeed.initialize`` plus one step on a tiny model (CPU,
world size 1, tests/ds_reference.py) against ``check_config`` with ``--launch engine``. Agreement: check reports an
``error`` exactly when DeepSpeed raises; and every key DeepSpeed silently ignores has a DS130/DS132 finding.

    python benchmarks/check_differential.py --n 1000 --seed 0 > benchmarks/results/check-differential.txt
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from config_generator import generate  # noqa: E402
from ds_reference import run_real  # noqa: E402

from dsdoctor.checks.deepspeed_config import CheckContext, check_config  # noqa: E402


def judge(config: dict, client: bool, ignored: list[str]) -> dict:
    """Run both sides on one config; the verdicts and whether they agree."""
    real = run_real(config, client)
    result = check_config(config, CheckContext(world_size=1, launch="engine", client_optimizer=client))
    errors = [f for f in result.findings if f.severity == "error"]
    ignore_found = all(any(f.id in ("DS130", "DS132") and f'"{key}"' in f.evidence for f in result.findings)
                       for key in ignored)
    return {"real": real, "check_errors": [f"{f.id}: {f.evidence}" for f in errors],
            "agree": (real is not None) == bool(errors) and ignore_found, "ignored_found": ignore_found}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.time()
    agree, raised, per_fault = 0, 0, collections.Counter()
    disagreements = []
    ignored_total = ignored_found = 0
    for i in range(args.n):
        config, client, faults, ignored = generate(rng)
        verdict = judge(config, client, ignored)
        agree += verdict["agree"]
        raised += verdict["real"] is not None
        ignored_total += len(ignored)
        ignored_found += len(ignored) if verdict["ignored_found"] else 0
        for fault in faults or ["(valid)"]:
            per_fault[fault] += 1
        if not verdict["agree"]:
            disagreements.append({"i": i, "config": config, "client_optimizer": client, "faults": faults,
                                  **verdict})
    print(f"configs: {args.n} (seed {args.seed}); DeepSpeed raised on {raised}, trained a step on "
          f"{args.n - raised}")
    print(f"agreement (check has an error exactly when DeepSpeed raises, and names every ignored key): "
          f"{agree}/{args.n} = {100 * agree / args.n:.1f}%")
    print(f"silently ignored keys named by check: {ignored_found}/{ignored_total}")
    print(f"faults generated: {dict(sorted(per_fault.items()))}")
    print(f"wall: {time.time() - start:.1f} s")
    for d in disagreements:
        print("DISAGREE", json.dumps(d, default=str))


if __name__ == "__main__":
    main()
