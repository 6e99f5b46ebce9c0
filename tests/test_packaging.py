"""The built wheel carries what the installed tool reads at run time (a non-editable install found the key
schema missing on the GPU machine)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_has_schemas_assets_and_the_remapped_packages(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("dsdoctor-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("dsdoctor/schemas/deepspeed-0.19.8.json", "dsdoctor/checks/deepspeed_config/__init__.py",
                   "dsdoctor/checks/hf_trainer.py", "dsdoctor/commands/check.py",
                   "dsdoctor/reference_train/train.py", "dsdoctor/reference_train/assets/tiny-model/config.json",
                   "dsdoctor/reference_train/assets/data/sft.jsonl", "dsdoctor/models/templates.json",
                   "dsdoctor/models/structures.json", "dsdoctor/models/default_templates/olmo2.json",
                   "dsdoctor/messages/deepspeed.json", "dsdoctor/messages/nccl.json", "dsdoctor/checks/memory/terms.py",
                   "dsdoctor/commands/estimate/report.py"):
        assert needed in names, needed
    assert not any(n.startswith("checks/") for n in names)  # no generic top-level module in site-packages
