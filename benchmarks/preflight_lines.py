"""How well ``dsdoctor preflight`` reads real launch lines: the 68 pastes of ``cases/launch-lines/lines`` (collected
from public GitHub issues by a helper, not written by us), against ``cases/launch-lines/truth.json`` (launcher,
the script or tool config the line runs, the world size the line fixes). Odd numbers tuned the reader; even numbers
are held out and reported apart.

    python benchmarks/preflight_lines.py [--show] [--corpus cases/launch-lines-2]

``cases/launch-lines-2`` is a second batch of 51, every line held out (no split by number).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "cases" / "launch-lines"


def read(text: str) -> object:
    """(launcher, target, world size) as preflight reads ``text``, or "refuse" when it gives its one-line error."""
    from dsdoctor.checks import preflight as rules
    from dsdoctor.preflight.cmdline import parse_launch
    from dsdoctor.preflight.plan import build_plan
    from dsdoctor.report import DsdoctorError

    try:
        launch = parse_launch([text])
        with tempfile.TemporaryDirectory() as empty:
            plan = build_plan(launch, Path(empty), [], None, rules)
    except DsdoctorError:
        return "refuse"
    target = launch.tool_config or launch.script or ""
    target = target if launch.module and not launch.tool_config else Path(target).name
    return [launch.launcher, target, plan.world_size]


def main() -> None:
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    corpus = ROOT / sys.argv[sys.argv.index("--corpus") + 1] if "--corpus" in sys.argv else CORPUS
    second = corpus != CORPUS
    expected = json.loads((corpus / "truth.json").read_text())["items"]
    score = {"tuning": [0, 0], "held-out": [0, 0]}
    for path in sorted((corpus / "lines").glob("*.txt")):
        number = path.name[:2]
        text = path.read_text().split("\n", 1)[1]
        got, want = read(text), expected[number]
        ok = got == want
        split = "held-out" if second or int(number) % 2 == 0 else "tuning"
        score[split][0] += ok
        score[split][1] += 1
        if "--show" in sys.argv or not ok:
            print(f"{'ok ' if ok else 'BAD'} {path.name[:50]:50} got {got} want {want}")
    for split, (good, total) in score.items():
        if not total:
            continue
        print(f"{split}: {good}/{total} read right ({good / total:.0%})")


if __name__ == "__main__":
    main()
