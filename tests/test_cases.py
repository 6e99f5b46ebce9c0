"""Every case in cases/<id>-<slug>/: real pitfalls as fixtures. expected.json names the command, its arguments
(``{case}`` is the case's directory), environment variables (``env``; with ``hold_port``, ``{held_port}`` is a port this
runner holds bound while the command runs, as another job's rendezvous store would), the exit code, and the rule IDs
at warning or above it must produce.
A case whose command does not exist yet says so in ``pending`` (the issue that will cover it) and is skipped."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

CASES = sorted(p for p in (Path(__file__).resolve().parents[1] / "cases").iterdir() if (p / "expected.json").is_file())


def _expected(case: Path) -> dict:
    return json.loads((case / "expected.json").read_text())


def run_case(case: Path, tmp_path: Path) -> None:
    expected = _expected(case)
    if "pending" in expected:
        pytest.skip(expected["pending"])
    args = [a.replace("{case}", str(case)) for a in expected["args"]]
    if expected["command"] == "smoke":
        args += ["--out", str(tmp_path / "out")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("MASTER_PORT", None)
    env.pop("WORLD_SIZE", None)
    with contextlib.ExitStack() as stack:
        if expected.get("hold_port"):  # another job's rendezvous store on a port: held while the command runs
            holder = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            holder.bind(("", 0))
            holder.listen(1)
            held = str(holder.getsockname()[1])
        for key, value in expected.get("env", {}).items():
            env[key] = value.replace("{held_port}", held if expected.get("hold_port") else "")
        proc = subprocess.run([sys.executable, "-m", "dsdoctor", expected["command"], *args, "--json", "-"],
                              capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.stdout, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    found = {f["id"]: f for f in report["findings"] if f["severity"] in ("warning", "error")}
    assert proc.returncode == expected["exit_code"], proc.stderr[-2000:]
    assert sorted(found) == sorted(expected["findings"]), [f"{f['id']}: {f['evidence']}" for f in found.values()]
    for rule_id, text in expected.get("evidence_contains", {}).items():
        assert text in found[rule_id]["evidence"]
    for rule_id, text in expected.get("fix_contains", {}).items():
        assert text in found[rule_id]["fix"]


FAST = [c for c in CASES if _expected(c)["command"] != "smoke"]
SLOW = [c for c in CASES if _expected(c)["command"] == "smoke"]


@pytest.mark.parametrize("case", FAST, ids=[c.name for c in FAST])
def test_case(case, tmp_path):
    run_case(case, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=[c.name for c in SLOW])
def test_smoke_case(case, tmp_path):
    run_case(case, tmp_path)


def test_every_report_is_a_case():
    """Each of the 26 public reports in shared/cases/reports.jsonl has its case folder (by report id)."""
    ids = {int(c.name.split("-")[1]) for c in CASES if c.name.startswith("report-")}
    assert len(ids) == 26
