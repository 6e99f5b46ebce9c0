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
