"""`dsdoctor smoke`'s checks before any rank starts: --out safety, ds_config reading, "auto" values."""

from __future__ import annotations

import pytest

from dsdoctor.checks.deepspeed_config import CheckContext, auto_paths, check_config
from dsdoctor.commands.smoke import MARKER, prepare_out, read_ds_config
from dsdoctor.report import DsdoctorError


def test_out_refuses_a_directory_it_did_not_make_and_touches_nothing(tmp_path):
    user = tmp_path / "my_training"
    (user / "checkpoint" / "global_step5000").mkdir(parents=True)
    (user / "checkpoint" / "global_step5000" / "model.pt").write_bytes(b"weights")
    (user / "train.log").write_text("epoch 3")
    with pytest.raises(DsdoctorError, match="not empty and not made by dsdoctor smoke"):
        prepare_out(user)
    assert (user / "checkpoint" / "global_step5000" / "model.pt").read_bytes() == b"weights"
    assert (user / "train.log").read_text() == "epoch 3" and not (user / MARKER).exists()


def test_out_clears_only_a_previous_smoke_runs_outputs(tmp_path):
    out = prepare_out(tmp_path / "smoke")
    (out / "adapter").mkdir()
    (out / "train.log").write_text("old")
    (out / "notes.txt").write_text("mine")
    prepare_out(out)
    assert not (out / "adapter").exists() and not (out / "train.log").exists()
    assert (out / "notes.txt").read_text() == "mine" and (out / "metrics").is_dir()


def test_out_that_is_a_file_is_bad_input(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(DsdoctorError, match="is a file, not a directory"):
        prepare_out(tmp_path / "f")


@pytest.mark.parametrize("content, message", [
    (b"", "the file is empty"), (b"  \n", "the file is empty"), (b"\xff\xfe\x00\x01", "not a UTF-8 text file"),
    (b"[1, 2]", "the top level must be a JSON object, not an array"),
    (b'{"a": ', r"not valid JSON \(nor HJSON\): Expecting value at line 1 column 7"),
])
def test_ds_config_bad_input(tmp_path, content, message):
    path = tmp_path / "ds.json"
    path.write_bytes(content)
    with pytest.raises(DsdoctorError, match=message.replace("[", r"\[")):
        read_ds_config(str(path))


def test_hjson_config_is_accepted_as_deepspeed_does(tmp_path):
    path = tmp_path / "ds.hjson"
    path.write_text("{\n  # comment\n  train_micro_batch_size_per_gpu: 2\n}\n")
    assert read_ds_config(str(path)) == {"train_micro_batch_size_per_gpu": 2}


def test_auto_values_are_found_everywhere():
    config = {"train_batch_size": "auto", "optimizer": {"params": {"lr": "auto", "betas": ["auto", 0.999]}},
              "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}, "fp16": {"enabled": "auto"}}
    assert list(auto_paths(config)) == ["train_batch_size", "optimizer.params.lr", "optimizer.params.betas[0]",
                                        "zero_optimization.reduce_bucket_size", "fp16.enabled"]
    # only the exact string is "auto" (transformers' fill_match compares with ==)
    assert list(auto_paths({"a": "AUTO", "b": " auto", "c": ["Auto"]})) == []
    found = {f.id: f for f in check_config(config, CheckContext()).findings}
    # outside the Trainer: top-level and optimizer "auto" crash (DS101), "auto" in a validated section is
    # silently the default (DS136)
    assert found["DS101"].evidence == ('3 value(s) are "auto": train_batch_size, optimizer.params.lr, '
                                       "optimizer.params.betas[0]")
    assert "zero_optimization.reduce_bucket_size" in found["DS136"].evidence or \
        "fp16.enabled" in found["DS136"].evidence
    assert not [f for f in check_config({"train_batch_size": 8}, CheckContext(client_optimizer=True)).findings
                if f.id in ("DS101", "DS136")]


# issue 12: a re-run deleted a user's own checkpoint/ under a name smoke uses; two runs on one --out mixed their files
def test_a_rerun_never_deletes_a_user_file_under_a_name_smoke_uses(tmp_path):
    from dsdoctor.commands.smoke.outdir import finish_out

    out = prepare_out(tmp_path / "smoke")
    (out / "adapter").mkdir()
    (out / "train.log").write_text("run 1")
    finish_out(out)  # run 1 wrote adapter/ and train.log (and metrics/, errors/)
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "mine.pt").write_bytes(b"weights")  # the user's, after run 1
    with pytest.raises(DsdoctorError, match="checkpoint there was not written by dsdoctor smoke"):
        prepare_out(out)
    assert (out / "checkpoint" / "mine.pt").read_bytes() == b"weights" and (out / "train.log").read_text() == "run 1"
    (out / "checkpoint" / "mine.pt").unlink()
    (out / "checkpoint").rmdir()
    prepare_out(out)  # without it, the re-run clears what run 1 wrote
    assert not (out / "adapter").exists() and not (out / "train.log").exists()


def test_a_second_smoke_on_the_same_out_is_refused_while_the_first_runs(tmp_path):
    import subprocess
    import sys
    import time

    out = tmp_path / "smoke"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from dsdoctor.commands.smoke.outdir import prepare_out; "
        f"prepare_out(Path({str(out)!r})); print('ready', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        (out / "train.log").write_text("the first run's log")
        with pytest.raises(DsdoctorError, match=rf"another dsdoctor smoke is running in it \(PID {holder.pid}\)"):
            prepare_out(out)
        assert (out / "train.log").read_text() == "the first run's log"
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    prepare_out(out)  # the kernel released the lock with the process


def test_an_old_plain_text_marker_still_marks_the_outputs_as_smokes(tmp_path):
    out = tmp_path / "smoke"
    out.mkdir()
    (out / MARKER).write_text("written by dsdoctor smoke: a later run clears its own outputs here\n")
    (out / "checkpoint").mkdir()
    prepare_out(out)
    assert not (out / "checkpoint").exists()
