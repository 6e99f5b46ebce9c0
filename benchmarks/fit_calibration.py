"""Fit the allocator-slack coefficients of ``checks/memory.py`` ``Calibration`` on the measured fit points, and
judge them on the held-out ones (each set reported apart).

    python benchmarks/fit_calibration.py > benchmarks/results/memory-loops/calibration-fit.txt

Points: ``benchmarks/results/memory-accuracy/points`` (the engine loop keeping only the loss; a point is held out
when its name starts with ``v``), ``benchmarks/results/memory-loops/points`` (round 2) and ``points-r3`` (round 3,
run after the round-2 analysis and never looked at while choosing the features; held out as the point says),
``points-r4`` and ``points-r5`` (rounds 4 and 5, every point held out, run after the refit).
The target of a point is its own measured slack, ``max_memory_reserved - max_memory_allocated``, so the fit does not
absorb errors of the allocated terms; the judgement is the full estimate against NVML's peak "used" over the idle
baseline (round 2 and 3) or the process's NVML "used" (memory-accuracy). Points that ran out of memory have no
slack to fit; their verdict is judged.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
GIB = 2 ** 30
ROUNDS = {"accuracy": HERE / "results/memory-accuracy/points", "loops-r2": HERE / "results/memory-loops/points",
          "loops-r3": HERE / "results/memory-loops/points-r3", "loops-r4": HERE / "results/memory-loops/points-r4",
          "loops-r5": HERE / "results/memory-loops/points-r5", "loops-r6": HERE / "results/memory-loops/points-r6"}


def load() -> list[dict]:
    """Every measured point that ran: its round, whether held out, measured NVML / allocated / reserved, and the
    Setup dsdoctor builds for it (through each harness's own ``predict`` arguments)."""
    import memory_accuracy
    import memory_loops

    out = []
    for round_name, folder in ROUNDS.items():
        for path in sorted(folder.glob("*.json")):
            r = json.loads(path.read_text())
            if r.get("failed"):
                continue
            point = r["point"]
            if round_name == "accuracy":
                setup = memory_accuracy.setup_of(point)
                measured = {"nvml": r.get("nvml_used"), "allocated": r["peak_allocated"],
                            "reserved": r["peak_reserved"]}
                held = point["name"].startswith("v")
            else:
                setup = memory_loops.setup_of(point)
                measured = {"nvml": r["nvml_peak_over_baseline"], "allocated": r["max_allocated"],
                            "reserved": r["max_reserved"]}
                held = bool(point.get("holdout"))
            out.append({"round": round_name, "name": point["name"], "held": held, "oom": r["oom"],
                        "gpu_total": r["gpu_total"], "setup": setup, **measured})
    return out


def fit(points: list[dict]):
    """Least-squares coefficients of :func:`slack_features` on the fit points that ran (a feature no fit point
    has keeps its current value)."""
    from dsdoctor.checks.memory import CALIBRATION, slack_features

    rows = [p for p in points if not p["held"] and not p["oom"]]
    names = list(slack_features(rows[0]["setup"]))
    X = np.array([[slack_features(p["setup"])[n] for n in names] for p in rows])
    y = np.array([p["reserved"] - p["allocated"] for p in rows], dtype=float)
    used = [i for i, n in enumerate(names) if np.any(X[:, i])]
    coef, *_ = np.linalg.lstsq(X[:, used], y, rcond=None)
    values = {names[i]: float(c) for i, c in zip(used, coef)}
    return replace(CALIBRATION, **{"slack_" + n: v for n, v in values.items()}), values, len(rows)


def judge(points: list[dict], cal) -> list[str]:
    from dsdoctor.checks.memory import estimate
    from dsdoctor.checks.memory import verdict as memory_verdict

    lines = []
    for round_name in ROUNDS:
        for held in (False, True):
            group = [p for p in points if p["round"] == round_name and p["held"] == held]
            if not group:
                continue
            lines.append(f"\n## {round_name}, {'held-out' if held else 'fit'} points ({len(group)})")
            lines.append("| point | launch | NVML GiB | estimate GiB | error | alloc GiB | est. alloc GiB | OOM | verdict |")
            lines.append("|---|---|---|---|---|---|---|---|---|")
            errors, right, tight = [], 0, 0
            for p in group:
                est = estimate(p["setup"], cal)
                err = (est.total - p["nvml"]) / p["nvml"] if p["nvml"] else float("nan")
                # dsdoctor's verdict: fits, tight (MEM502: within TIGHT of the card on either side, a warning either way)
                # or does not fit (MEM501)
                verdict = memory_verdict(est.total, p["gpu_total"])
                ok = verdict == "tight" or (verdict == "no") == p["oom"]
                right += ok
                tight += verdict == "tight"
                if not p["oom"]:
                    errors.append(abs(err))
                lines.append(f"| {p['name']} | {p['setup'].launch} | {(p['nvml'] or 0) / GIB:.2f} | {est.total / GIB:.2f} | "
                             f"{100 * err:+.1f}% | {(p['allocated'] or 0) / GIB:.2f} | {est.allocated / GIB:.2f} | "
                             f"{p['oom']} | {verdict}: {'right' if ok else 'WRONG'} |")
            if errors:
                within = sum(e <= 0.05 for e in errors)
                lines.append(f"\n|error| on the {len(errors)} that ran: median {100 * statistics.median(errors):.1f}%, "
                             f"max {100 * max(errors):.1f}%, within 5%: {within}/{len(errors)}; verdicts right: "
                             f"{right}/{len(group)} ({tight} of them tight: a warning either way)")
    return lines


def main() -> None:
    points = load()
    cal, values, n = fit(points)
    print("# python benchmarks/fit_calibration.py")
    print(f"\nslack = sum(coefficient x feature), least squares on {n} fit points that ran "
          "(checks/memory.py slack_features):")
    for name, value in values.items():
        print(f"- slack_{name} = {value / GIB:.3f} GiB" if name == "base" else f"- slack_{name} = {value:.3f}")
    print("\n".join(judge(points, cal)))


if __name__ == "__main__":
    main()
