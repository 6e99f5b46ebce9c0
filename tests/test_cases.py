"""Every case in cases/<id>-<slug>/: real pitfalls as fixtures. expected.json names the command, its arguments
(``{case}`` is the case's directory), the exit code, and the rule IDs at warning or above it must produce."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = sorted(p for p in (Path(__file__).resolve().parents[1] / "cases").iterdir() if (p / "expected.json").is_file())


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case, tmp_path):
    expected = json.loads((case / "expected.json").read_text())
    args = [a.replace("{case}", str(case)) for a in expected["args"]]
    if expected["command"] == "smoke":
        args += ["--out", str(tmp_path / "out")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("MASTER_PORT", None)
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", expected["command"], *args, "--json", "-"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    report = json.loads(proc.stdout)
    found = {f["id"]: f for f in report["findings"] if f["severity"] in ("warning", "error")}
    assert proc.returncode == expected["exit_code"], proc.stderr[-2000:]
    assert sorted(found) == sorted(expected["findings"])
    for rule_id, text in expected.get("evidence_contains", {}).items():
        assert text in found[rule_id]["evidence"]
    for rule_id, text in expected.get("fix_contains", {}).items():
        assert text in found[rule_id]["fix"]
