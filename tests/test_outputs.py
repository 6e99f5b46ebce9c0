"""What dsdoctor writes (issue 12, the fuzz trial's items 1 and 8-10): no output path may be an input, of any
command; a failed write leaves nothing half-written; a closed pipe or a full disk on stdout is one clear outcome; an
error quoting a user's text stays one line."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor.files import read_input, write_output
from dsdoctor.report import DsdoctorError
from fuzzing import run

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 2}}


@pytest.fixture
def files(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(CONFIG))
    data = tmp_path / "my.jsonl"
    data.write_text('{"instruction": "hi", "output": "there"}\n')
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                                                   "num_attention_heads": 4, "intermediate_size": 512,
                                                   "vocab_size": 1000}))
    env_report = tmp_path / "r.json"
    env_report.write_text(json.dumps({"result": {"facts": {"host": {"cores": 2}}}}))
    return {"ds": ds, "data": data, "log": log, "model": model, "env": env_report}


# Every command that reads a file, with --json (or --fix) aimed at that very file. Each overwrote the input before.
CASES = [
    ("explain-log", lambda f: ["explain", f["log"], "--json", f["log"]], "log", "LOG"),
    ("smoke-data", lambda f: ["smoke", "--data", f["data"], "--json", f["data"]], "data", "--data"),
    ("smoke-deepspeed", lambda f: ["smoke", "--deepspeed", f["ds"], "--json", f["ds"]], "ds", "--deepspeed"),
    ("estimate-deepspeed", lambda f: ["estimate", "--model", "qwen2-7b", "--deepspeed", f["ds"], "--json", f["ds"]],
     "ds", "--deepspeed"),
    ("estimate-model-config", lambda f: ["estimate", "--model", f["model"] / "config.json", "--json",
                                         f["model"] / "config.json"], "model", "--model"),
    ("estimate-model-dir", lambda f: ["estimate", "--model", f["model"], "--json", f["model"] / "config.json"],
     "model", "config.json in --model"),
    ("env-from", lambda f: ["env", "--from", f["env"], "--json", f["env"]], "env", "--from"),
    ("check-json", lambda f: ["check", f["ds"], "--json", f["ds"]], "ds", "CONFIG"),
    ("check-fix-model", lambda f: ["check", f["ds"], "--model", f["model"] / "config.json", "--fix",
                                   f["model"] / "config.json"], "model", "--model"),
]


@pytest.mark.parametrize("name, argv, key, option", CASES, ids=[c[0] for c in CASES])
def test_no_output_may_be_an_input(files, name, argv, key, option):
    result = run(argv(files), inputs=list(files.values()))
    assert result.exit_code == 2
    assert f"that is {option} itself; dsdoctor never overwrites its inputs" in result.stderr


def test_a_hard_link_to_an_input_is_the_input(files, tmp_path):
    link = tmp_path / "alias.json"
    os.link(files["ds"], link)
    result = run(["check", files["ds"], "--json", link], inputs=[files["ds"]])
    assert result.exit_code == 2 and "that is CONFIG itself" in result.stderr


def test_two_outputs_on_one_file_are_refused(files, tmp_path):
    out = tmp_path / "out.json"
    result = run(["check", files["ds"], "--fix", out, "--json", out])
    assert result.exit_code == 2 and "also given to --fix" in result.stderr
    assert not out.exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DsdoctorError, match="cannot write --json .*report.json: No space left on device"):
        write_output(str(target), "new" * 1000, "--json")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_new_output_file_gets_the_umask_mode(tmp_path):
    target = tmp_path / "new.json"
    write_output(str(target), "{}", "--json")
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("make, says", [
    (lambda p: os.mkfifo(p), "a named pipe (FIFO), not a regular file"),
    (lambda p: p.mkdir(), "a directory, not a regular file"),
])
def test_inputs_that_are_not_regular_files_are_refused_at_once(tmp_path, make, says):
    path = tmp_path / "input"
    make(path)
    with pytest.raises(DsdoctorError, match=re.escape(says)):
        read_input(str(path), "LOG", 1 << 20)


def test_a_device_is_refused_and_stdin_is_capped(monkeypatch):
    with pytest.raises(DsdoctorError, match="a character device, not a regular file"):
        read_input("/dev/zero", "--from", 1 << 20)


def test_a_long_path_is_one_clear_line(tmp_path):
    long = tmp_path / ("x" * 300 + ".json")
    result = run(["check", long])
    assert result.exit_code == 2 and "the path is too long" in result.stderr
    assert len(result.stderr) < 400  # the path is shown cut in the middle


def test_control_characters_in_an_error_are_escaped(tmp_path):
    name = tmp_path / "bad\nname\x1b[31m.json"
    result = run(["check", name])
    assert result.exit_code == 2
    assert "bad\\nname\\x1b[31m.json" in result.stderr


def _dsdoctor(*args, **kw):
    return subprocess.run([sys.executable, "-m", "dsdoctor.cli", *args], capture_output=True, text=True, timeout=60,
                          **kw)


def test_a_closed_pipe_is_not_an_error():
    proc = subprocess.run(f"{sys.executable} -m dsdoctor.cli rules | head -1", shell=True, capture_output=True,
                          text=True, timeout=60, executable="/bin/bash")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    piped = subprocess.run(f"{sys.executable} -m dsdoctor.cli rules | head -1; echo \"${{PIPESTATUS[0]}}\"",
                           shell=True, capture_output=True, text=True, timeout=60, executable="/bin/bash")
    assert piped.stdout.splitlines()[-1] == "0", piped


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_disk_on_stdout_is_one_line_exit_2():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "dsdoctor.cli", "rules"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "dsdoctor: error: cannot write the report to stdout: No space left on device"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("target", ["/dev/full", "/dev/null"])
def test_a_device_as_output_is_written_in_place_never_replaced(tmp_path, target):
    before = os.stat(target)
    if target == "/dev/full":
        with pytest.raises(DsdoctorError, match="No space left on device"):
            write_output(target, "{}", "--json")
    else:
        write_output(target, "{}", "--json")
    after = os.stat(target)
    assert (after.st_ino, after.st_rdev, after.st_mode) == (before.st_ino, before.st_rdev, before.st_mode)


@pytest.mark.parametrize("path", ["/proc/kmsg", "/proc/self/status", "/sys/kernel/mm/transparent_hugepage/enabled"])
def test_kernel_files_are_never_read(path):
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    with pytest.raises(DsdoctorError, match=r"a kernel file \((proc|sys)\), not a log"):
        read_input(path, "LOG", 1 << 20, what="log")


def test_a_fifo_given_to_explain_says_to_pipe_it(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    result = run(["explain", fifo])
    assert result.exit_code == 2 and "pipe it in instead: ... | dsdoctor explain -" in result.stderr
