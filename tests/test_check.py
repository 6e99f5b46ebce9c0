"""`dsdoctor check`: each rule on the config that triggers it (exact IDs and values), the batch math against
DeepSpeed's own DeepSpeedConfig, the Trainer's fills, --fix, and bad input (one line, exit 2, never a traceback)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsdoctor.checks.deepspeed_config import (CheckContext, check_config, derive_batch, load_schema,
                                              valid_world_sizes)
from dsdoctor.cli import cli
from dsdoctor.hardware import gpu_from_name
from dsdoctor.models import model_info

OPT = {"type": "AdamW", "params": {"lr": 2e-5}}


def ids(config, at_least=("warning", "error"), **ctx) -> list[str]:
    result = check_config(config, CheckContext(**ctx))
    return sorted(f.id for f in result.findings if f.severity in at_least)


def finding(config, rule_id, **ctx):
    found = [f for f in check_config(config, CheckContext(**ctx)).findings if f.id == rule_id]
    assert found, f"{rule_id} not found"
    return found[0]


# ------------------------------------------------------------------------------------------------ batch
@pytest.mark.parametrize("train, micro, acc, ws, expected", [
    (32, 4, None, 4, (32, 4, 2, None)),     # gradient accumulation derived: 32 // 4 // 4
    (32, None, 4, 4, (32, 2, 4, None)),     # micro batch derived: 32 // 4 // 4
    (None, 2, 8, 7, (112, 2, 8, None)),     # train_batch_size derived, any world size
    (32, 4, None, 7, (32, 4, 1, "32 != 4 * 1 * 7")),  # a config for 8 GPUs on 7
    (32, 4, 1, 8, (32, 4, 1, None)),
    (4, None, None, 8, (4, 0, 1, "Micro batch size per gpu: 0 has to be greater than 0")),
])
def test_batch_math_is_deepspeeds(train, micro, acc, ws, expected):
    d_train, d_micro, d_acc, _, error = derive_batch(train, micro, acc, ws)
    assert (d_train, d_micro, d_acc) == expected[:3]
    assert (error is None) == (expected[3] is None) and (expected[3] is None or expected[3] in error)


def test_batch_agrees_with_deepspeedconfig_for_many_world_sizes():
    """DeepSpeed's own DeepSpeedConfig with dist.get_world_size patched: the same accept/refuse verdicts and the
    same derived values for every partial triple and world size 1..8."""
    from unittest import mock

    from deepspeed.runtime import config as ds

    triples = [(t, m, a) for t in (None, 8, 12, 32) for m in (None, 1, 2, 4) for a in (None, 1, 2, 3)]
    for train, micro, acc in triples:
        for ws in range(1, 9):
            config = {k: v for k, v in (("train_batch_size", train), ("train_micro_batch_size_per_gpu", micro),
                                        ("gradient_accumulation_steps", acc)) if v is not None}
            mine = derive_batch(train, micro, acc, ws)
            with mock.patch.object(ds.dist, "get_world_size", return_value=ws), \
                    mock.patch.object(ds.dist, "get_rank", return_value=0):
                try:
                    real = ds.DeepSpeedConfig(dict(config))
                except AssertionError as exc:
                    assert mine[4] is not None and mine[4] == str(exc), (config, ws, str(exc), mine)
                    continue
            assert mine[4] is None, (config, ws, mine)
            assert mine[:3] == (real.train_batch_size, real.train_micro_batch_size_per_gpu,
                                real.gradient_accumulation_steps)


def test_config_for_8_gpus_launched_on_7():
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
              "optimizer": OPT}
    assert ids(config, world_size=8) == []
    f = finding(config, "DS102", world_size=7)
    assert "64 != 4 * 2 * 7" in f.evidence and "holds on world size 8" in f.evidence
    assert "train_batch_size 56 = micro 4 x gradient_accumulation_steps 2 x world size 7" in f.fix
    assert valid_world_sizes(64, 4, 2) == [8]


def test_tutorial_config_on_3_gpus_proposes_only_triples_deepspeed_accepts():
    """The first tutorial's config (train_batch_size 32, gradient_accumulation_steps 4, no micro batch) on 3 GPUs:
    "drop train_batch_size" alone would leave neither train_batch_size nor a micro batch, which DeepSpeed refuses
    (DS104); the fix writes the micro batch in its place instead."""
    config = {"train_batch_size": 32, "gradient_accumulation_steps": 4, "optimizer": OPT}
    f = finding(config, "DS102", world_size=3)
    assert "32 != 2 * 4 * 3" in f.evidence
    assert "drop train_batch_size" not in f.fix
    assert f.fix == ("Set train_batch_size 24 = micro 2 x gradient_accumulation_steps 4 x world size 3 (the global "
                     "batch becomes 24, not 32: 32 is not a multiple of world size 3); or replace train_batch_size by "
                     '"train_micro_batch_size_per_gpu": 2 (DeepSpeed then derives train_batch_size for any world '
                     "size: 2 x 4 x 3 = 24 here, not 32).")
    assert ids({k: v for k, v in config.items() if k != "train_batch_size"}, world_size=3) == ["DS104"]
    assert ids({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "optimizer": OPT},
               world_size=3) == []
    # with a micro batch given, dropping train_batch_size is accepted, and so is the same global batch on 4 GPUs
    f = finding({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
                 "optimizer": OPT}, "DS102", world_size=4)
    assert "keep the global batch 32: micro 2 x gradient_accumulation_steps 4 x world size 4" in f.fix
    # the micro batch (the memory) kept first, then the accumulation; dropping train_batch_size says what it costs
    assert f.fix.startswith("Keep the global batch 32: micro 4 x gradient_accumulation_steps 2 x world size 4")
    assert ("drop train_batch_size so DeepSpeed derives it: micro 4 x gradient_accumulation_steps 4 x world size 4 "
            "= 64 (the global batch becomes 64, not 32)") in f.fix


def test_every_batch_proposal_is_accepted_by_deepspeedconfig():
    """Each triple DS102/DS103 proposes, for every partial triple DeepSpeed refuses on world sizes 1..8, is one that
    DeepSpeed's own DeepSpeedConfig accepts on that world size (dist.get_world_size patched, as the differential
    tests do); and the fix text names no proposal that was not checked."""
    from unittest import mock

    from deepspeed.runtime import config as ds

    from dsdoctor.checks.deepspeed_config import batch_proposals

    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    refused = proposed = 0
    for train in (None, 4, 12, 32, 96):
        for micro in (None, 1, 3, 4):
            for acc in (None, 1, 2, 4):
                for ws in range(1, 9):
                    error = derive_batch(train, micro, acc, ws)[4]
                    if error is None or error.startswith("Either"):
                        continue
                    refused += 1
                    proposals = batch_proposals(train, micro, acc, ws)
                    assert proposals, (train, micro, acc, ws)
                    config = {k: v for k, v in zip(keys, (train, micro, acc)) if v is not None}
                    fix = finding({**config, "optimizer": OPT}, "DS103" if "greater than 0" in error else "DS102",
                                  world_size=ws).fix
                    for text, values in proposals:
                        proposed += 1
                        assert text[1:] in fix
                        trial = {k: v for k, v in values.items() if v is not None}
                        with mock.patch.object(ds.dist, "get_world_size", return_value=ws), \
                                mock.patch.object(ds.dist, "get_rank", return_value=0):
                            real = ds.DeepSpeedConfig(dict(trial))  # raises on a triple DeepSpeed refuses
                        assert real.train_batch_size == real.train_micro_batch_size_per_gpu * \
                            real.gradient_accumulation_steps * ws
                    # and what --fix writes is the first proposal, which DeepSpeed accepts too
                    result = check_config({**config, "optimizer": OPT}, CheckContext(world_size=ws))
                    fixed = {k: v for k, v in result.fixed_config(config).items() if k in keys}
                    assert fixed == {k: v for k, v in proposals[0][1].items() if v is not None}
                    assert ids({**fixed, "optimizer": OPT}, world_size=ws) == []
    assert refused > 100 and proposed > refused


def test_assumed_world_size_never_proposes_a_file_without_a_batch_size():
    """With the world size assumed and a triple that holds on none, the fix for a file without a micro batch is to
    replace train_batch_size by one, not to drop it (DS104)."""
    f = finding({"train_batch_size": 30, "gradient_accumulation_steps": 4, "optimizer": OPT}, "DS102",
                world_size_assumed=True, world_size_source="assumed")
    assert "holds on no world size up to 1024" in f.evidence
    assert "drop train_batch_size" not in f.fix
    assert "replace train_batch_size by train_micro_batch_size_per_gpu" in f.fix
    f = finding({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
                 "optimizer": OPT}, "DS102", world_size_assumed=True, world_size_source="assumed")
    assert "drop train_batch_size so DeepSpeed derives it" in f.fix


@pytest.mark.parametrize("value, rule_id, severity", [
    (0, "DS103", "error"), (-2, "DS103", "error"), ("4", "DS103", "error"), (2.5, "DS103", "error"),
    (True, "DS103", "error"), (4.0, "DS103", "warning"), ("auto", "DS101", "error"),
])
def test_bad_micro_batch_values(value, rule_id, severity):
    f = finding({"train_micro_batch_size_per_gpu": value, "optimizer": OPT}, rule_id)
    assert f.severity == severity


def test_no_batch_size_at_all():
    assert ids({"gradient_accumulation_steps": 2, "optimizer": OPT}) == ["DS104"]


# ------------------------------------------------------------------------------------------------ keys
def test_misspelled_top_level_key_is_named_with_its_correction():
    f = finding({"train_micro_batch_size_per_gpu": 1, "zero_optimisation": {"stage": 3}, "optimizer": OPT}, "DS130")
    assert f.severity == "warning" and 'did you mean "zero_optimization"' in f.evidence


def test_unknown_key_in_validated_and_in_ignored_sections():
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "zero_optimization": {"stage": 2, "overlap_com": True},
              "activation_checkpointing": {"partition_activation": True}}
    assert ids(config) == ["DS131", "DS132"]
    assert 'did you mean "overlap_comm"' in finding(config, "DS131").evidence


def test_deprecated_keys_alone_and_beside_their_replacement():
    base = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT}
    alone = {**base, "zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}}
    assert ids(alone) == ["DS133"] and "gather_16bit_weights_on_model_save" in finding(alone, "DS133").evidence
    both = {**base, "zero_optimization": {"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}}
    assert "DS134" in ids(both)


def test_removed_feature_key():
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "amp": {"enabled": True}}) == ["DS135"]


def test_auto_inside_a_validated_section_silently_becomes_the_default():
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT,
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "auto"}}, "fp16": {"enabled": "auto"}}
    result = check_config(config, CheckContext())
    assert sorted(f.id for f in result.findings if f.severity != "info") == ["DS136", "DS143"]
    assert 'DeepSpeed uses the default false' in next(f.evidence for f in result.findings if f.id == "DS136")


def test_wrong_types():
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "zero_optimization": {"stage": 4}}) == ["DS140"]
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT,
                "zero_optimization": {"stage": 2, "reduce_bucket_size": -1}}) == ["DS137"]
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "gradient_clipping": "1.0"}) == ["DS137"]
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "fp16": True}) == ["DS137"]


# ------------------------------------------------------------------------------------------------ precision
def test_both_precisions():
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "fp16": {"enabled": True},
                "bf16": {"enabled": True}}) == ["DS110"]


@pytest.mark.parametrize("gpu, precision, expected", [
    ("V100", "bf16", ["DS111"]), ("T4", "bf16", ["DS111"]), ("A100", "bf16", []), ("RTX 4090", "bf16", []),
    ("P100", "fp16", ["DS112"]), ("V100", "fp16", []),
])
def test_precision_against_the_gpu(gpu, precision, expected):
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, precision: {"enabled": True}}
    assert ids(config, gpu=gpu_from_name(gpu)) == expected


def test_fp16_on_a_bf16_model_and_the_reverse():
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "fp16": {"enabled": True}}
    assert ids(config, model=model_info("qwen2-7b")) == ["DS113"]
    assert ids(config, model=model_info("chatglm3-6b")) == []
    reverse = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "bf16": {"enabled": True}}
    assert finding(reverse, "DS113", model=model_info("llama-2-7b")).severity == "info"


def test_model_directory_dtype(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16", "hidden_size": 64}))
    info = model_info(str(tmp_path))
    assert (info.dtype, info.hidden_size) == ("bfloat16", 64)


def test_fp16_loss_scale_settings():
    f = finding({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT,
                 "fp16": {"enabled": True, "loss_scale": 128, "loss_scale_window": 100}}, "DS114")
    assert "static loss_scale 128" in f.evidence and "loss_scale_window 100" in f.evidence


# ------------------------------------------------------------------------------------------------ optimizer
def test_tutorial_config_gives_both_failures_at_once():
    config = {"train_batch_size": 32, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
              "bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
              "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-5,
                                                                 "warmup_num_steps": 200}}, "steps_per_print": 20}
    assert ids(config, world_size=4) == ["DS120", "DS125"]
    assert "zero stage 2 requires an optimizer" in finding(config, "DS120", world_size=4).evidence


@pytest.mark.parametrize("config, client, expected", [
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, True, ["DS121"]),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
      "zero_force_ds_cpu_optimizer": False}, True, []),
    ({"optimizer": {"type": "FusedAdam"}}, False, ["DS122"]),
    ({"optimizer": {"type": "SGD", "params": {"lr": 1e-5}}, "zero_optimization": {"stage": 1}}, False, ["DS123"]),
    ({"optimizer": {"type": "SGD", "params": {"lr": 1e-5}}, "zero_optimization": {"stage": 0}}, False, []),
    ({"optimizer": OPT, "scheduler": {"type": "CosineWarmup"}}, False, ["DS124"]),
    ({"optimizer": OPT, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 5}}}, False, ["DS126"]),
    ({"optimizer": OPT, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}}, False, ["DS127"]),
    ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}, False, ["DS128"]),
    ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "max_grad_norm": 1.0}}}, False, ["DS129"]),
    ({"optimizer": OPT}, True, ["DS117"]),
    ({"zero_optimization": {"stage": 3}}, False, ["DS120"]),
])
def test_optimizer_and_scheduler_rules(config, client, expected):
    assert ids({"train_micro_batch_size_per_gpu": 1, **config}, client_optimizer=client) == expected


def test_warmup_longer_than_the_run_is_a_warning():
    f = finding({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "scheduler": {
        "type": "WarmupDecayLR", "params": {"warmup_num_steps": 500, "total_num_steps": 100}}}, "DS127")
    assert f.severity == "warning"


# ------------------------------------------------------------------------------------------------ ZeRO
def test_zero_rules():
    base = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT}
    assert ids({**base, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}) == ["DS141"]
    assert ids({**base, "zero_optimization": {"stage": 3}}, launch="trainer") == ["DS142"]
    assert ids({**base, "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}},
               launch="trainer") == []
    # fp32: the reduction buffers are 4-byte, two of them with overlap_comm: 2 x 5e8 x 4 = 3.73 GiB, 16% of 24 GiB
    big = {**base, "zero_optimization": {"stage": 2, "overlap_comm": True}}
    f = finding(big, "DS144", gpu=gpu_from_name("RTX 4090"))
    assert f.severity == "warning" and "= 3.73 GiB per GPU during the backward pass" in f.evidence
    assert ids({**base, "zero_optimization": {"stage": 2}}, gpu=gpu_from_name("RTX 4090")) == []  # overlap off
    # bf16 with the defaults and overlap_comm: 1.86 GiB, 8% of a 24 GiB card: no finding (it was "8.4 GiB")
    assert ids({**base, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "overlap_comm": True}},
               gpu=gpu_from_name("RTX 4090")) == []


def test_bucket_formula_is_what_the_installed_deepspeed_allocates():
    """communication_buffer_bytes reads DeepSpeed's allocations: setup_buckets makes one reduce_bucket_size buffer,
    and a second with overlap_comm; all_gather_dp_groups allocates none (allgather_bucket_size only shards)."""
    import inspect

    from deepspeed.runtime import utils as ds_utils
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    from dsdoctor.checks.memory import communication_buffer_bytes

    setup = inspect.getsource(DeepSpeedZeroOptimizer.setup_buckets)
    assert setup.count("torch.empty(int(self.reduce_bucket_size)") == 2 and "if self.overlap_comm:" in setup
    gather = inspect.getsource(ds_utils.all_gather_dp_groups)
    assert not any(f"torch.{alloc}(" in gather for alloc in ("empty", "zeros", "ones", "cat"))
    assert communication_buffer_bytes(2, 4, 2, 500_000_000, True)["reduce_buckets"] == 2_000_000_000
    assert communication_buffer_bytes(2, 4, 2, 500_000_000, False)["reduce_buckets"] == 1_000_000_000
    assert communication_buffer_bytes(1, 1, 4, 200_000_000, False)["reduce_buckets"] == 800_000_000
    assert sum(communication_buffer_bytes(2, 4, 2, 500_000_000, True, contiguous_gradients=False).values()) == 0
    assert communication_buffer_bytes(3, 8, 2, 500_000_000, True, layer_params=10_000_000) == {
        "reduce_buckets": 0, "reduce_bucket": 1_000_000_000, "gathered_parameters": 120_000_000, "gathered_at_loss": 0}


@pytest.mark.parametrize("zero, gpus", [
    ({"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}, 4),
    ({"stage": 1, "reduce_bucket_size": 2e8}, 2),
    ({"stage": 2, "overlap_comm": False, "contiguous_gradients": False}, 8),
    ({"stage": 3, "reduce_bucket_size": 3e8, "stage3_prefetch_bucket_size": 4e7}, 4),
    ({"stage": 3, "overlap_comm": True}, 1),
])
def test_ds144_and_estimate_count_the_same_buffers(runner, tmp_path, zero, gpus):
    """Issue 12: DS144 said 8.4 GiB (4.5 x the bucket sizes x 2 bytes) where estimate's deepspeed_buffers said 1.86
    GiB for the same config. Both now use checks/memory.py communication_buffer_bytes: the same bytes."""
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
              "optimizer": OPT, "zero_optimization": zero}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    checked = json.loads(runner.invoke(cli, ["check", str(path), "--world-size", str(gpus), "--model", "qwen2-7b",
                                             "--json", "-"]).stdout)["result"]["communication_buffers_bytes"]
    estimated = json.loads(runner.invoke(cli, ["estimate", "--model", "qwen2-7b", "--deepspeed", str(path), "--gpus",
                                               str(gpus), "--gpu-mem", "80", "--json", "-"]).stdout)["result"]
    phases = estimated["terms_by_phase_bytes"]
    # ZeRO-1/2: alive in the backward pass only; ZeRO-3: between steps (every phase), plus from the end of the
    # forward pass what the reuse distance keeps gathered (checks/zero3.py)
    assert checked["total"] - checked["gathered_at_loss"] == phases["backward"]["deepspeed_buffers"]
    if zero["stage"] < 3:
        assert phases["loss"]["deepspeed_buffers"] == 0
        assert checked["total"] == (0 if zero.get("contiguous_gradients") is False else
                                    2 * int(zero.get("reduce_bucket_size", 5e8)) * (2 if zero.get("overlap_comm") else 1))
    else:
        assert checked["total"] == phases["loss"]["deepspeed_buffers"]
        assert checked["total"] - checked["gathered_at_loss"] == phases["step"]["deepspeed_buffers"]
        assert (checked["gathered_at_loss"] > 0) == (gpus > 1)  # qwen2-7b: its output projection, 545 M elements
    if zero == {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}:
        assert checked["total"] == 2_000_000_000  # 1.86 GiB, not 8.4


def test_prescale_gradients_string_under_zero2():
    f = finding({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "prescale_gradients": "false",
                 "zero_optimization": {"stage": 2}}, "DS145")
    assert "non-empty string is true" in f.evidence


# ------------------------------------------------------------------------------------------------ Trainer
def test_trainer_mismatches_all_at_once_in_hf_wording():
    config = {"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-4,
                                                           "warmup_num_steps": 500}}}
    args = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8, "learning_rate": 5e-5}
    f = finding(config, "HF201", launch="trainer", hf_args=args, world_size=8)
    assert "- ds train_batch_size=8 vs hf train_batch_size (calculated)=128" in f.evidence
    assert "- ds optimizer.params.lr=0.0001 vs hf learning_rate=5e-05" in f.evidence
    assert "- ds scheduler.params.warmup_max_lr=0.0001 vs hf learning_rate=5e-05" in f.evidence
    assert "- ds scheduler.params.warmup_num_steps=500 vs hf warmup_steps=1" in f.evidence


def test_trainer_fills_auto_and_reports_where_from():
    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                    "stage3_gather_16bit_weights_on_model_save": True}}
    args = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "bf16": True}
    result = check_config(config, CheckContext(launch="trainer", hf_args=args, world_size=4,
                                               model=model_info("qwen2-7b")))
    assert result.batch == {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                            "gradient_accumulation_steps": 2, "world_size": 4}
    assert result.provenance["train_batch_size"] == "auto <- train_batch_size (calculated) = 32"
    assert result.effective["zero_optimization"]["reduce_bucket_size"] == 3584 * 3584
    assert result.effective["bf16"]["enabled"] is True
    assert not [f for f in result.findings if f.severity in ("warning", "error")]


def test_trainer_auto_that_nothing_fills():
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "sub_group_size": "auto"}}
    f = finding(config, "HF203", launch="trainer", hf_args={})
    assert "`zero_optimization.sub_group_size` not found in kwargs" in f.evidence


def test_yaml_number_without_a_dot_is_a_string(tmp_path):
    (tmp_path / "train.yaml").write_text("learning_rate: 1e-4\nper_device_train_batch_size: 2\n")
    from dsdoctor.configfile import read_hf_args

    args = read_hf_args(str(tmp_path / "train.yaml"))
    assert args["learning_rate"] == "1e-4"
    f = finding({"train_micro_batch_size_per_gpu": "auto"}, "HF206", launch="trainer", hf_args=args)
    assert "'1e-4'" in f.evidence


def test_trainer_offload_without_optimizer_block():
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}}
    assert ids(config, launch="trainer") == ["DS121"]


# ------------------------------------------------------------------------------------------------ CLI
@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def write(tmp_path, config, name="ds.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config) if not isinstance(config, str) else config)
    return str(path)


def test_cli_json_result_and_exit_code(runner, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    path = write(tmp_path, {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "optimizer": OPT})
    result = runner.invoke(cli, ["check", path, "--world-size", "4", "--json", "-"])
    data = json.loads(result.stdout)
    assert result.exit_code == 0
    assert data["result"]["batch"] == {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                       "gradient_accumulation_steps": 2, "world_size": 4}
    assert data["result"]["provenance"]["gradient_accumulation_steps"] == "derived: 32 // 4 // 4"
    assert data["result"]["world_size_source"] == "--world-size"
    assert data["result"]["effective"]["zero_optimization"]["reduce_bucket_size"] == 500000000


def test_cli_world_size_from_the_launcher_environment(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "7")
    path = write(tmp_path, {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "optimizer": OPT})
    data = json.loads(runner.invoke(cli, ["check", path, "--json", "-"]).stdout)
    assert data["result"]["world_size"] == 7 and "WORLD_SIZE" in data["result"]["world_size_source"]
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["DS102"]


def test_fix_writes_a_corrected_copy_and_never_the_input(runner, tmp_path):
    original = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                "zero_optimisation": {"stage": 2}, "optimizer": {"type": "FusedAdam", "params": {"lr": 1e-5}},
                "bf16": {"enabled": True}, "fp16": {"enabled": True}}
    path = write(tmp_path, original)
    before = open(path).read()
    out = tmp_path / "fixed.json"
    result = runner.invoke(cli, ["check", path, "--world-size", "4", "--fix", str(out), "--json", "-"])
    assert result.exit_code == 1 and open(path).read() == before
    fixed = json.loads(out.read_text())
    # the global batch 32 is kept on 4 GPUs: micro 4 (as written) x gradient_accumulation_steps 2
    assert (fixed["train_batch_size"], fixed["train_micro_batch_size_per_gpu"], fixed["gradient_accumulation_steps"]
            ) == (32, 4, 2) and "zero_optimisation" not in fixed
    assert fixed["zero_optimization"] == {"stage": 2} and fixed["optimizer"]["type"] == "AdamW"
    assert fixed["fp16"]["enabled"] is False and fixed["bf16"]["enabled"] is True
    # the corrected copy passes
    again = runner.invoke(cli, ["check", str(out), "--world-size", "4", "--json", "-"])
    assert again.exit_code == 0, again.stdout
    changes = json.loads(result.stdout)["result"]["changes"]
    assert {c["rule"] for c in changes} >= {"DS102", "DS130", "DS122", "DS110"}
    assert all(c["why"] for c in changes)


def test_fix_refuses_to_overwrite_the_config(runner, tmp_path):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 1})
    result = runner.invoke(cli, ["check", path, "--fix", path])
    assert result.exit_code == 2 and "never overwrites its inputs" in result.stderr


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("", "the file is empty"), ("[1, 2]", "not an array"),
    ('{"a": ', "not valid JSON (nor HJSON)"), ('"text"', "not a string"), ("{\"a\": NaN}", "not valid JSON"),
])
def test_bad_config_file_is_one_line_exit_2(runner, tmp_path, content, message):
    path = tmp_path / "ds.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(cli, ["check", str(path)])
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--gpu", "Voodoo 5"], "unknown GPU"), (["--model", "gpt-99"], "unknown model name"),
    (["--world-size", "0"], "at least 1"), (["--launch", "engine", "--hf-args", "x.json"], "goes with --launch trainer"),
    (["--launch", "trainer", "--client-optimizer"], "goes with --launch engine"),
    (["--launch", "trainer", "--hf-args", "missing.yaml"], "no such file"),
])
def test_bad_options_are_one_line_exit_2(runner, tmp_path, args, message):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 1})
    result = runner.invoke(cli, ["check", path, *args])
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_hjson_is_accepted(runner, tmp_path):
    path = write(tmp_path, "{\n  # HJSON, as DeepSpeed accepts\n  train_micro_batch_size_per_gpu: 2\n"
                           "  optimizer: {\n    type: AdamW\n    params: {\n      lr: 2e-5\n    }\n  }\n}\n",
                 "ds.hjson")
    result = runner.invoke(cli, ["check", path, "--world-size", "2", "--json", "-"])
    assert result.exit_code == 0 and json.loads(result.stdout)["result"]["batch"]["train_batch_size"] == 4


def test_duplicate_key_is_reported(runner, tmp_path):
    """DeepSpeed given the path refuses repeated keys (engine: error); the Trainer's json.load keeps the last."""
    path = write(tmp_path, '{"train_micro_batch_size_per_gpu": 1, "train_micro_batch_size_per_gpu": 2, '
                           '"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}')
    data = json.loads(runner.invoke(cli, ["check", path, "--json", "-"]).stdout)
    assert [(f["id"], f["severity"]) for f in data["findings"] if f["severity"] != "info"] == [("DS138", "error")]
    data = json.loads(runner.invoke(cli, ["check", path, "--launch", "trainer", "--json", "-"]).stdout)
    assert [(f["id"], f["severity"]) for f in data["findings"] if f["severity"] in ("warning", "error")] == [
        ("DS138", "warning")]
    deep = json.loads(runner.invoke(cli, ["check", path, "--deep", "--json", "-"]).stdout)
    assert "Duplicate keys" in [f for f in deep["findings"] if f["id"] == "DS199"][0]["evidence"]


def test_deep_mode_asks_deepspeed(runner, tmp_path):
    path = write(tmp_path, {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                            "gradient_accumulation_steps": 4, "optimizer": OPT})
    data = json.loads(runner.invoke(cli, ["check", path, "--world-size", "1", "--deep", "--json", "-"]).stdout)
    deep = [f for f in data["findings"] if f["id"] == "DS199"][0]
    assert "30 != 4 * 4 * 1" in deep["evidence"] and deep["severity"] == "error"


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10, 10 ** 10) | st.floats(allow_nan=False,
                    allow_infinity=False) | st.sampled_from(["auto", "cpu", "AdamW", "WarmupDecayLR", "1e-4", ""]),
                    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children,
                                                                                       max_size=4), max_leaves=12)
KEYS = st.sampled_from(["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                        "zero_optimization", "fp16", "bf16", "optimizer", "scheduler", "gradient_clipping",
                        "activation_checkpointing", "prescale_gradients", "steps_per_print", "bfloat16", "amp"])
SUBKEYS = st.sampled_from(["stage", "offload_optimizer", "offload_param", "device", "enabled", "type", "params",
                           "lr", "total_num_steps", "warmup_num_steps", "reduce_bucket_size", "overlap_comm",
                           "loss_scale", "cpu_offload", "stage3_gather_16bit_weights_on_model_save"])
NESTED = st.recursive(JSON, lambda c: st.dictionaries(SUBKEYS, c, max_size=5), max_leaves=20)


@settings(max_examples=int(os.environ.get("DSDOCTOR_FUZZ_EXAMPLES", "400")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(config=st.dictionaries(KEYS, NESTED, max_size=8), launch=st.sampled_from(["engine", "trainer"]),
       hf_args=st.none() | st.dictionaries(st.sampled_from(["per_device_train_batch_size", "learning_rate", "bf16",
                                                             "warmup_ratio", "max_steps", "warmup_steps"]), JSON,
                                           max_size=4),
       world_size=st.integers(1, 16), gpu=st.sampled_from([None, "V100", "A100", "P100"]))
def test_any_json_object_gives_findings_never_an_exception(config, launch, hf_args, world_size, gpu):
    result = check_config(config, CheckContext(world_size=world_size, launch=launch,
                                               hf_args=hf_args if launch == "trainer" else None,
                                               gpu=gpu_from_name(gpu) if gpu else None))
    json.dumps([f.to_dict() for f in result.findings])
    result.fixed_config(config)


def test_schema_is_the_installed_deepspeeds():
    schema, note = load_schema()
    assert schema["deepspeed_version"] == "0.19.8" and "installed" in note
    assert schema["sections"]["zero_optimization"]["strict"] is True
    assert schema["sections"]["activation_checkpointing"]["strict"] is False
    assert schema["schedulers"]["WarmupDecayLR"]["required"] == ["total_num_steps"]


def test_check_imports_neither_torch_nor_deepspeed(tmp_path):
    import subprocess
    import sys

    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT})
    code = ("import sys, runpy; sys.argv = ['dsdoctor', 'check', %r, '--json', '-'];\n"
            "try:\n    runpy.run_module('dsdoctor', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('IMPORTED', sorted(m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules), "
            "file=sys.stderr)") % path
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "WORLD_SIZE": "1"})
    assert "IMPORTED []" in proc.stderr, proc.stderr[-1500:]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_file_content_parses_or_is_one_clear_error(tmp_path_factory, content):
    from dsdoctor.configfile import read_ds_config
    from dsdoctor.report import DsdoctorError

    path = tmp_path_factory.mktemp("fuzz") / "ds.json"
    path.write_bytes(content)
    try:
        config, _ = read_ds_config(str(path))
    except DsdoctorError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert isinstance(config, dict)
        check_config(config, CheckContext())


# ------------------------------------------------------------------------------------------------ hostile input
def _nested(depth: int) -> str:
    return '{"train_micro_batch_size_per_gpu": 2, "a": ' + "[" * depth + "1" + "]" * depth + "}"


@pytest.mark.parametrize("content, message", [
    ('{"a": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
    (_nested(500), "nested more than 64 levels"),
    ('{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1' + "0" * 400 + "}", "401 digits"),
    ('{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e999}}}',
     "not a finite number"),
    ('{"train_micro_batch_size_per_gpu": 2, "\\ud800": 1}', "not valid Unicode"),
])
def test_hostile_configs_are_one_line_exit_2(runner, tmp_path, content, message):
    result = runner.invoke(cli, ["check", write(tmp_path, content)])
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("yaml_text, message", [
    ("warmup_steps: .inf\nmax_steps: 100\n", "not a finite number"),
    ("per_device_train_batch_size: .nan\n", "not a finite number"),
])
def test_hostile_hf_args(runner, tmp_path, yaml_text, message):
    (tmp_path / "a.yaml").write_text(yaml_text)
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto"})
    result = runner.invoke(cli, ["check", path, "--launch", "trainer", "--hf-args", str(tmp_path / "a.yaml")])
    assert result.exit_code == 2 and message in result.stderr


@pytest.mark.parametrize("env", ["²", "9" * 5000, "-1", "x"])
def test_world_size_environment_garbage(runner, tmp_path, monkeypatch, env):
    monkeypatch.setenv("WORLD_SIZE", env)
    result = runner.invoke(cli, ["check", write(tmp_path, {"train_micro_batch_size_per_gpu": 1})])
    assert result.exit_code == 2 and "WORLD_SIZE" in result.stderr and len(result.stderr) < 200


def test_outputs_never_overwrite_inputs(runner, tmp_path):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto"})
    (tmp_path / "args.json").write_text('{"per_device_train_batch_size": 2}')
    os.link(path, tmp_path / "hard.json")
    os.symlink(path, tmp_path / "soft.json")
    before = open(path).read()
    for extra in (["--fix", str(tmp_path / "hard.json")], ["--fix", str(tmp_path / "soft.json")],
                  ["--json", path], ["--json", str(tmp_path / "hard.json")],
                  ["--fix", str(tmp_path / "args.json")]):
        result = runner.invoke(cli, ["check", path, "--launch", "trainer", "--hf-args", str(tmp_path / "args.json"),
                                     *extra])
        assert result.exit_code == 2 and "never overwrites its inputs" in result.stderr, extra
    assert open(path).read() == before and (tmp_path / "args.json").read_text() == '{"per_device_train_batch_size": 2}'


@pytest.mark.parametrize("target, message", [("", "give a file name"), (".", "give a file name"),
                                             ("/dev/full", "No space left on device")])
def test_fix_targets_that_cannot_be_written(runner, tmp_path, target, message):
    result = runner.invoke(cli, ["check", write(tmp_path, {"train_micro_batch_size_per_gpu": 1}), "--fix", target])
    assert result.exit_code == 2 and message in result.stderr


def test_dotted_key_is_nested_by_fix(runner, tmp_path):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 2, "optimizer": OPT, "zero_optimization.stage": 3})
    out = tmp_path / "fixed.json"
    result = runner.invoke(cli, ["check", path, "--fix", str(out), "--json", "-"])
    assert 'Nest it: {"zero_optimization": {"stage": 3}}' in json.loads(result.stdout)["findings"][0]["fix"]
    assert json.loads(out.read_text())["zero_optimization"] == {"stage": 3}
    assert "zero_optimization.stage" not in json.loads(out.read_text())


def test_only_exact_auto_is_auto():
    """transformers fills only the exact string "auto": under the Trainer "AUTO" is a mismatch with
    TrainingArguments (HF201, as transformers' fill_match reports it); under the engine a string batch."""
    config = {"train_micro_batch_size_per_gpu": "AUTO", "optimizer": {"type": "AdamW", "params": {"lr": " auto"}}}
    assert ids(config, launch="trainer", hf_args={"per_device_train_batch_size": 2}) == ["DS137", "HF201"]
    assert "train_micro_batch_size_per_gpu=AUTO" in finding(config, "HF201", launch="trainer", hf_args={}).evidence
    assert ids(config, launch="engine") == ["DS103", "DS137"]


def test_twenty_thousand_stray_keys_are_summarised():
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": OPT, **{f"k{i}": i for i in range(20000)}}
    result = check_config(config, CheckContext())
    ds130 = [f for f in result.findings if f.id == "DS130"]
    assert len(ds130) == 21 and "19,980 more unknown keys" in ds130[-1].evidence
    assert len(result.changes) == 20000


def test_negative_learning_rate():
    assert ids({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": -1}}}) == [
        "DS137"]


# ------------------------------------------------------------------------------------------------ HJSON (issue 12)
_BODY = '"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}}'
HJSON_FORMS = [  # (text, line, column, what is there): each is read by DeepSpeed's hjson.load, refused by json.load
    ("{" + _BODY + ",}", 1, 94, "a trailing comma"),
    ("{\n  # ZeRO-2\n  " + _BODY + "\n}", 2, 3, "a comment"),
    ("{\n  // ZeRO-2\n  " + _BODY + "\n}", 2, 3, "a comment"),
    ("{/* ZeRO-2 */ " + _BODY + "}", 1, 2, "a comment"),
    ("{train_micro_batch_size_per_gpu: 2, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 2e-5}}}", 1, 2,
     "an unquoted key"),
    ("{'train_micro_batch_size_per_gpu': 2, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 2e-5}}}", 1, 2,
     "a single-quoted string"),
    ("train_micro_batch_size_per_gpu: 2\noptimizer: {\n  type: AdamW\n  params: {lr: 2e-5}\n}\n", 1, 1,
     "no root braces"),
    ('{\n"train_micro_batch_size_per_gpu": 2\n"optimizer": {"type": "AdamW", "params": {"lr": 2e-5}}}', 3, 1,
     "a missing comma"),
    ('{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": AdamW\n, "params": {"lr": 2e-5}}}', 1, 61,
     "an unquoted string"),
    ("\ufeff{" + _BODY + "}", 1, 1, "byte-order mark"),
]


@pytest.mark.parametrize("text, line, column, feature", HJSON_FORMS)
def test_hjson_only_file_is_an_error_under_the_trainer_and_a_warning_under_the_engine(runner, tmp_path, text, line,
                                                                                       column, feature):
    path = tmp_path / "ds.json"
    path.write_bytes(text.encode("utf-8"))
    for launch, severity in (("trainer", "error"), ("engine", "warning")):
        result = runner.invoke(cli, ["check", str(path), "--launch", launch, "--world-size", "1", "--json", "-"])
        found = [f for f in json.loads(result.stdout)["findings"] if f["id"] == "DS139"]
        assert len(found) == 1 and found[0]["severity"] == severity, result.stdout
        assert f"json.load stops at line {line} column {column}" in found[0]["evidence"] and \
            feature in found[0]["evidence"], found[0]["evidence"]
        assert "--fix OUT.json writes the config as plain JSON" in found[0]["fix"]
        assert result.exit_code == (1 if severity == "error" else 0)
    out = tmp_path / "fixed.json"
    runner.invoke(cli, ["check", str(path), "--launch", "trainer", "--fix", str(out)])
    assert json.loads(out.read_text())["train_micro_batch_size_per_gpu"] == 2  # --fix writes plain JSON


def test_plain_json_has_no_hjson_finding(runner, tmp_path):
    path = write(tmp_path, "{" + _BODY + "}")
    data = json.loads(runner.invoke(cli, ["check", path, "--launch", "trainer", "--json", "-"]).stdout)
    assert "DS139" not in [f["id"] for f in data["findings"]]


def test_hjson_forms_are_what_deepspeed_reads_and_the_trainer_refuses(tmp_path):
    """The real readers: DeepSpeed's DeepSpeedConfig reads each form from its path (hjson.load); accelerate's
    HfDeepSpeedConfig, which transformers' HfDeepSpeedConfig (TrainingArguments(deepspeed=path)) inherits, raises
    JSONDecodeError at the line and column the finding names."""
    from unittest import mock

    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    from deepspeed.runtime import config as ds

    for i, (text, line, column, _) in enumerate(HJSON_FORMS):
        path = tmp_path / f"ds{i}.json"
        path.write_bytes(text.encode("utf-8"))
        with mock.patch.object(ds.dist, "get_world_size", return_value=1), \
                mock.patch.object(ds.dist, "get_rank", return_value=0):
            assert ds.DeepSpeedConfig(str(path)).train_micro_batch_size_per_gpu == 2, text
        with pytest.raises(json.JSONDecodeError) as raised:
            HfDeepSpeedConfig(str(path))
        assert (raised.value.lineno, raised.value.colno) == (line, column), text


@pytest.mark.parametrize("content", ["this is not json {", "hello", "42 apples", "{\"a\": 1} trailing"])
def test_text_that_is_not_json_says_so_with_where(runner, tmp_path, content):
    result = runner.invoke(cli, ["check", write(tmp_path, content)])
    assert result.exit_code == 2 and "not valid JSON (nor HJSON)" in result.stderr and "line 1 column" in result.stderr
    assert "top level must be" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ world size assumed
FOUR_GPUS = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
             "optimizer": OPT}


@pytest.fixture
def no_gpu_box(monkeypatch):
    """A preparation box: no launcher, no visible GPU (CUDA_VISIBLE_DEVICES="" hides any GPU from NVML too)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_assumed_world_size_is_a_warning_and_fix_keeps_the_triple(runner, tmp_path, no_gpu_box):
    """Issue 12: a config for the 4-GPU run checked on a box without GPUs was checked for world size 1 in silence,
    and --fix rewrote train_batch_size to 8 (= 4 x 2 x 1), breaking the real run."""
    path = write(tmp_path, FOUR_GPUS)
    out = tmp_path / "fixed.json"
    result = runner.invoke(cli, ["check", path, "--fix", str(out), "--json", "-"])
    data = json.loads(result.stdout)
    found = {f["id"]: f for f in data["findings"] if f["severity"] in ("warning", "error")}
    assert sorted(found) == ["DS106"] and result.exit_code == 0
    assert "world size 4 only: train_batch_size 32 / (micro 4 x gradient_accumulation_steps 2)" in \
        found["DS106"]["evidence"] and "on world size 1 DeepSpeed would refuse them" in found["DS106"]["evidence"]
    assert data["result"]["world_size_assumed"] is True and data["result"]["changes"] == []
    assert json.loads(out.read_text()) == FOUR_GPUS
    assert [u["path"] for u in data["result"]["unfixed"]] == ["train_batch_size"]
    assert "--world-size" in data["result"]["unfixed"][0]["needs"]
    # given the world size, the same file is checked and fixed for it
    data = json.loads(runner.invoke(cli, ["check", path, "--world-size", "2", "--json", "-"]).stdout)
    assert [f["id"] for f in data["findings"] if f["severity"] == "error"] == ["DS102"]
    # (the global batch 32 kept on 2 GPUs: micro 4 x gradient_accumulation_steps 4)
    assert {c["path"]: c["new"] for c in data["result"]["changes"]} == {"gradient_accumulation_steps": 4}


@pytest.mark.parametrize("config, severity, text", [
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}, "warning", "world size 1, 2, 4, 8 only"),
    ({"train_batch_size": 1}, "warning", "world size 1 only"),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, "info", "any world size"),
    ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}, "warning",
     "hold on no world size"),
])
def test_assumed_world_size_names_the_sizes_the_file_holds_on(config, severity, text):
    result = check_config({**config, "optimizer": OPT}, CheckContext(world_size=1, world_size_source="guess",
                                                                      world_size_assumed=True))
    found = [f for f in result.findings if f.id == "DS106"]
    assert len(found) == 1 and found[0].severity == severity and text in found[0].evidence, found
    assert not [c for c in result.changes if c.path in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                        "gradient_accumulation_steps")]


def test_a_known_world_size_has_no_assumption_finding():
    assert "DS106" not in ids(FOUR_GPUS, at_least=("info", "warning", "error"), world_size=4)


def test_trainer_batch_mismatch_is_not_claimed_for_an_assumed_world_size():
    config = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
    args = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    assumed = check_config(config, CheckContext(launch="trainer", hf_args=args, world_size_assumed=True))
    assert [f.id for f in assumed.findings if f.severity in ("warning", "error")] == ["DS106"]
    assert "world size 4 only" in next(f.evidence for f in assumed.findings if f.id == "DS106")
    assert "HF201" in ids(config, launch="trainer", hf_args=args, world_size=1)


def test_consistent_world_sizes_agree_with_deepspeedconfig():
    """consistent_world_sizes against DeepSpeed's own DeepSpeedConfig for world sizes 1..16."""
    from unittest import mock

    from deepspeed.runtime import config as ds

    from dsdoctor.checks.deepspeed_config import consistent_world_sizes

    assert consistent_world_sizes({"train_micro_batch_size_per_gpu": 4}) is None
    assert consistent_world_sizes({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4}) is None
    assert consistent_world_sizes({"train_batch_size": "32"}) == []
    assert consistent_world_sizes({"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 1,
                                   "gradient_accumulation_steps": 1}) == []  # 2048 GPUs: past the 1024 tried
    assert consistent_world_sizes({"train_batch_size": 2048})[-1] == 1024
    for train, micro, acc in [(32, 4, 2), (32, 4, None), (32, None, 2), (32, None, None), (30, 4, 4), (12, 3, None)]:
        config = {k: v for k, v in zip(("train_batch_size", "train_micro_batch_size_per_gpu",
                                        "gradient_accumulation_steps"), (train, micro, acc)) if v is not None}
        mine = consistent_world_sizes(config)
        for ws in range(1, 17):
            with mock.patch.object(ds.dist, "get_world_size", return_value=ws), \
                    mock.patch.object(ds.dist, "get_rank", return_value=0):
                try:
                    ds.DeepSpeedConfig(dict(config))
                    accepted = True
                except AssertionError:
                    accepted = False
            assert accepted == (ws in mine), (config, ws, mine)


# ------------------------------------------------------------------------------------------------ --fix and training
def test_fix_never_drops_to_fp32_under_a_false_reason():
    """Issue 12: under "auto", --fix set fp16 to false as "one 16-bit type: bf16" while bf16 was not enabled. The
    file trains in fp32 (DeepSpeed reads "auto" as false): the fix says so, and leaves the choice to the user."""
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "fp16": {"enabled": "auto"}}
    result = check_config(config, CheckContext())
    change = next(c for c in result.changes if c.path == "fp16.enabled")
    assert change.new is False and "fp32" in change.why and "bf16" not in change.why.split(";")[0]
    assert "16-bit type" in dict(result.unfixed)["fp16.enabled / bf16.enabled"]
    assert not change.training  # fp32 before (as DeepSpeed reads "auto") and after


@pytest.mark.parametrize("config, gpu, path, training", [
    ({"fp16": {"enabled": "auto"}}, "A100", "bf16.enabled", "precision fp32 -> bf16"),
    ({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}, "V100", "fp16.enabled", "precision fp32 -> fp16"),
    ({"bf16": {"enabled": True}}, "V100", "fp16.enabled", "precision bf16 -> fp16"),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, None, "fp16.enabled",
     "precision fp16 and bf16 (DeepSpeed refuses both) -> bf16"),
    ({"fp_16": {"enabled": True}}, None, "fp16", "precision fp32 -> fp16"),
    ({"zero_optimisation": {"stage": 2}}, None, "zero_optimization", "ZeRO stage 0 -> 2"),
])
def test_fix_that_changes_training_says_so_on_the_edit(config, gpu, path, training):
    result = check_config({"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, **config},
                          CheckContext(gpu=gpu_from_name(gpu) if gpu else None))
    assert next(c for c in result.changes if c.path == path).training == training


def test_fix_table_and_json_show_the_training_change(runner, tmp_path):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "fp16": {"enabled": "auto"}})
    data = json.loads(runner.invoke(cli, ["check", path, "--gpu", "A100", "--world-size", "1", "--json", "-"]).stdout)
    change = next(c for c in data["result"]["changes"] if c["path"] == "bf16.enabled")
    assert change["new"] is True and change["changes_training"] == "precision fp32 -> bf16"
    table = runner.invoke(cli, ["check", path, "--gpu", "A100", "--world-size", "1"]).stdout
    assert "changes precision fp32 -> bf16" in " ".join(table.split()).replace("│ ", "")


@settings(max_examples=int(os.environ.get("DSDOCTOR_FUZZ_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), launch=st.sampled_from(["engine", "trainer"]),
       gpu=st.sampled_from([None, "V100", "A100", "P100", "T4"]),
       model=st.sampled_from([None, "qwen2-7b", "chatglm3-6b", "llama-2-7b"]), world_size=st.integers(1, 8))
def test_fix_keeps_what_trains_or_says_so(rng, launch, gpu, model, world_size):
    """Over generated configs (valid and faulty): every aspect of the training that --fix changes (precision,
    ZeRO stage, offload, optimizer, learning rate, scheduler, clipping, as DeepSpeed reads the file) is named on an
    edit of it, "aspect before -> after"."""
    from config_generator import generate

    from dsdoctor.checks.deepspeed_config import TRAINING_ASPECTS, training_of

    config, client, _, _ = generate(rng)
    result = check_config(config, CheckContext(world_size=world_size, launch=launch, client_optimizer=client and
                                               launch == "engine", gpu=gpu_from_name(gpu) if gpu else None,
                                               model=model_info(model) if model else None))
    fixed = result.fixed_config(config)
    before, after = training_of(config, launch), training_of(fixed, launch)
    for aspect in TRAINING_ASPECTS:
        if before[aspect] != after[aspect]:
            said = f"{aspect} {before[aspect]} -> {after[aspect]}"
            assert any(said in c.training for c in result.changes), (config, said, result.changes)
    assert before["precision"] == after["precision"] or any("precision" in c.training for c in result.changes)


# ------------------------------------------------------------------------------------------------ unbounded reads
def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\nper_device_train_batch_size: 2\n"


def test_yaml_alias_bomb_in_hf_args_is_refused_at_once(runner, tmp_path):
    """Issue 12: 294 bytes of YAML with 7 levels of aliases took 82 s (x10 per level). 6 levels took 8 s."""
    import time

    (tmp_path / "bomb.yaml").write_text(_alias_bomb(6))
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto"})
    start = time.perf_counter()
    result = runner.invoke(cli, ["check", path, "--launch", "trainer", "--hf-args", str(tmp_path / "bomb.yaml")])
    assert time.perf_counter() - start < 2
    assert result.exit_code == 2 and "expands to more than 100,000 values (YAML aliases" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("yaml_text, exit_code, message", [
    ("a: &a [*a]\n", 2, "a YAML alias refers to a value that holds it"),
    ("defaults: &d {learning_rate: 2.0e-5, per_device_train_batch_size: 4}\n<<: *d\nbf16: true\n", 0, None),
])
def test_yaml_anchors_that_do_not_explode_are_read(runner, tmp_path, yaml_text, exit_code, message):
    (tmp_path / "args.yaml").write_text(yaml_text)
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto", "optimizer": OPT})
    result = runner.invoke(cli, ["check", path, "--launch", "trainer", "--world-size", "1", "--hf-args",
                                 str(tmp_path / "args.yaml"), "--json", "-"])
    assert result.exit_code == exit_code, result.stderr
    if message:
        assert message in result.stderr
    else:
        assert json.loads(result.stdout)["result"]["batch"]["train_micro_batch_size_per_gpu"] == 4  # the merge key


#: the shapes that took from 20 s to several minutes (table output) before findings were capped per rule, their
#: text cut, and the per-key work bounded: "duplicate keys" took 198 s, "SGD params unknown" over 60 s
SLOW_SHAPES = [("duplicate keys", "engine"), ("SGD params unknown", "engine"), ("optimizer params auto", "trainer"),
               ("auto in a long list", "engine"), ("long optimizer type", "engine"),
               ("arrays nested 60 deep", "trainer")]


@pytest.mark.parametrize("shape, launch", SLOW_SHAPES)
def test_a_1_mib_config_of_any_shape_checks_in_seconds(runner, tmp_path, monkeypatch, shape, launch):
    import time

    from config_generator import SHAPES, hostile_shapes

    monkeypatch.setenv("WORLD_SIZE", "1")
    text = hostile_shapes(shapes={shape: SHAPES[shape]})[shape]
    assert len(text) > 1_000_000
    path = write(tmp_path, text)
    start = time.perf_counter()
    result = runner.invoke(cli, ["check", path, "--launch", launch, "--fix", str(tmp_path / "fixed.json")])
    assert time.perf_counter() - start < 5 and result.exit_code in (0, 1), result.stderr
    assert len(result.stdout) < 100_000  # at most 25 findings a rule, each text cut at 1,000 characters
    json.loads((tmp_path / "fixed.json").read_text())


def test_many_near_miss_hf_args_keys_check_in_seconds(runner, tmp_path):
    import time

    from config_generator import HF_SHAPES, hostile_shapes

    (tmp_path / "args.json").write_text(hostile_shapes(shapes=HF_SHAPES)["near-miss TrainingArguments keys"])
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW", "params": {
        "lr": "auto"}}})
    start = time.perf_counter()
    result = runner.invoke(cli, ["check", path, "--launch", "trainer", "--world-size", "1", "--hf-args",
                                 str(tmp_path / "args.json")])
    assert time.perf_counter() - start < 5 and result.exit_code == 0 and len(result.stdout) < 100_000, result.stdout


# ------------------------------------------------------------------------------------------------ numbers and text
@pytest.mark.parametrize("config, rule_id, text", [
    ({"zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 1e308}}, "DS144", "1e+308"),
    ({"zero_optimization": {"stage": "²"}}, "DS140", '"\\u00b2"'),
    ({"zero_optimization": {"stage": "9" * 5000}}, "DS140", "characters)"),
    ({"gradient_accumulation_steps": "²"}, "DS103", "a string"),
    ({"gradient_accumulation_steps": "9" * 5000}, "DS103", "a string"),
])
def test_numbers_that_overflowed_or_crashed_are_findings(runner, tmp_path, config, rule_id, text):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 2, "optimizer": OPT, **config})
    result = runner.invoke(cli, ["check", path, "--world-size", "1", "--gpu", "RTX 4090", "--json", "-",
                                 "--fix", str(tmp_path / "fixed.json")])
    assert result.exit_code in (0, 1), result.stderr
    found = [f for f in json.loads(result.stdout)["findings"] if f["id"] == rule_id]
    assert found and text in found[0]["evidence"], found


def _strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} in the output")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("key", ["warmup_steps", "learning_rate", "per_device_train_batch_size", "max_grad_norm"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_hf_args_strings_that_are_no_finite_number(runner, tmp_path, key, value):
    """float("nan") and float("1e999") are numbers to Python: they crashed the warmup arithmetic (ValueError,
    OverflowError) or reached the JSON result as NaN, which is not JSON."""
    (tmp_path / "args.json").write_text(json.dumps({key: value, "max_steps": 100}))
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW", "params": {
        "lr": "auto"}}, "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto",
                                                                          "total_num_steps": "auto"}},
        "gradient_clipping": "auto"})
    result = runner.invoke(cli, ["check", path, "--launch", "trainer", "--world-size", "1", "--hf-args",
                                 str(tmp_path / "args.json"), "--json", "-"])
    assert result.exit_code in (0, 1), result.stderr
    data = _strict_json(result.stdout)
    assert any(f["id"] == "HF206" and key in f["evidence"] for f in data["findings"])


def test_fix_never_writes_a_number_json_cannot_hold(runner, tmp_path):
    path = write(tmp_path, {"train_micro_batch_size_per_gpu": 2, "optimizer": OPT, "gradient_clipping": "1e999"})
    result = runner.invoke(cli, ["check", path, "--world-size", "1", "--fix", str(tmp_path / "fixed.json")])
    assert result.exit_code == 1
    assert _strict_json((tmp_path / "fixed.json").read_text())["gradient_clipping"] == "1e999"


def test_user_keys_never_reach_the_terminal_raw(runner, tmp_path):
    """Keys with a newline, an escape sequence, a bell, DEL, C1 and the Unicode line separator, in every kind of
    section: findings and the --fix table show them escaped."""
    import re

    keys = ["zero_optimisation\n\x1b[31m", "a\u2028b\x7f", "c\x85\x07"]
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}},
              "zero_optimization": {"stage": 2}, "scheduler": {"type": "WarmupLR", "params": {}},
              "activation_checkpointing": {}}
    for key in keys:
        config[key] = 1
        for section in (config["optimizer"]["params"], config["zero_optimization"], config["scheduler"]["params"],
                        config["activation_checkpointing"]):
            section[key] = "auto"
    path = write(tmp_path, config)
    for launch in ("engine", "trainer"):
        result = runner.invoke(cli, ["check", path, "--world-size", "1", "--launch", launch])
        assert result.exit_code in (0, 1)
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", result.stdout), repr(result.stdout)
        assert "\\x1b[31m" in result.stdout and "\\u2028" in result.stdout
        data = json.loads(runner.invoke(cli, ["check", path, "--world-size", "1", "--launch", launch,
                                              "--json", "-"]).stdout)
        for f in data["findings"]:
            assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", f["evidence"] + f["fix"] + f["title"]), f


# ------------------------------------------------------------------------------------------------ training files
LLAMA_FACTORY_YAML = """### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
deepspeed: examples/deepspeed/ds_z3_config.json
### dataset
dataset: identity,alpaca_en_demo
template: qwen
cutoff_len: 2048
### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""
AXOLOTL_YAML = """base_model: NousResearch/Llama-2-7b-hf
datasets:
  - path: mhenrichsen/alpaca_2k_test
    type: alpaca
sequence_len: 4096
adapter: lora
micro_batch_size: 2
gradient_accumulation_steps: 4
deepspeed: deepspeed_configs/zero2.json
"""
ACCELERATE_YAML = """compute_environment: LOCAL_MACHINE
deepspeed_config:
  deepspeed_config_file: ds_z2.json
  zero3_init_flag: false
distributed_type: DEEPSPEED
num_processes: 4
"""


@pytest.mark.parametrize("name, text, expected", [
    ("train.yaml", LLAMA_FACTORY_YAML,
     "CONFIG {dir}/train.yaml: this is a LLaMA-Factory training file, not a DeepSpeed config; its DeepSpeed config is "
     "{dir}/examples/deepspeed/ds_z3_config.json: dsdoctor check {dir}/examples/deepspeed/ds_z3_config.json "
     "--launch trainer --hf-args {dir}/train.yaml (--hf-args reads LLaMA-Factory's YAML: the TrainingArguments keys "
     "in it)"),
    ("axolotl.yml", AXOLOTL_YAML,
     "this is an axolotl config, not a DeepSpeed config; its DeepSpeed config is deepspeed_configs/zero2.json (not "
     "found from here: give its path as the training sees it): dsdoctor check deepspeed_configs/zero2.json --launch "
     "trainer (axolotl runs the HF Trainer"),
    ("accelerate.yaml", ACCELERATE_YAML,
     "this is an accelerate config, not a DeepSpeed config; its DeepSpeed config is ds_z2.json "
     "(deepspeed_config.deepspeed_config_file): dsdoctor check ds_z2.json"),
    ("args.json", json.dumps({"output_dir": "out", "per_device_train_batch_size": 4, "learning_rate": 2e-5,
                              "deepspeed": "ds.json"}),
     "this is a TrainingArguments file (learning_rate, output_dir, per_device_train_batch_size), not a DeepSpeed "
     "config; its DeepSpeed config is ds.json (not found from here"),
    ("inline.json", json.dumps({"output_dir": "out", "num_train_epochs": 1, "deepspeed": {"zero_optimization": {}}}),
     "its DeepSpeed config is written inline under deepspeed: save that object as ds.json"),
    ("nods.yaml", LLAMA_FACTORY_YAML.replace("deepspeed: examples/deepspeed/ds_z3_config.json\n", ""),
     "it names no DeepSpeed config (deepspeed is absent): LLaMA-Factory then trains without DeepSpeed"),
], ids=["llama-factory", "axolotl", "accelerate", "training-arguments", "inline", "no-deepspeed"])
def test_a_training_tools_file_as_config_names_its_deepspeed_config(runner, tmp_path, name, text, expected):
    """Issue 12: a LLaMA-Factory train.yaml given as CONFIG was checked as a DeepSpeed config (HJSON reads its
    key: value lines), every key "unknown". One line, exit 2, naming the file's deepspeed: value and the command."""
    (tmp_path / "examples/deepspeed").mkdir(parents=True)
    (tmp_path / "examples/deepspeed/ds_z3_config.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto"}))
    (tmp_path / name).write_text(text)
    result = runner.invoke(cli, ["check", str(tmp_path / name)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert expected.format(dir=tmp_path) in result.stderr
    if name == "train.yaml":  # the command it gives works: the ds_config checked with this file's TrainingArguments
        ds = tmp_path / "examples/deepspeed/ds_z3_config.json"
        again = runner.invoke(cli, ["check", str(ds), "--launch", "trainer", "--hf-args", str(tmp_path / name),
                                    "--world-size", "2", "--json", "-"])
        assert again.exit_code in (0, 1), again.output
        assert json.loads(again.stdout)["result"]["batch"]["train_micro_batch_size_per_gpu"] == 1


@pytest.mark.parametrize("config", [
    {"train_micro_batch_size_per_gpu": 2, "optimizer": OPT, "fp16": {"enabled": True}},
    {"train_batch_size": 8, "gradient_accumulation_steps": 2, "optimizer": OPT, "zero_optimization": {"stage": 2}},
    {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto"},
])
def test_deepspeed_configs_are_not_taken_for_training_files(runner, tmp_path, config):
    path = write(tmp_path, config)
    assert runner.invoke(cli, ["check", path, "--world-size", "2"]).exit_code in (0, 1)


def test_hf_args_that_are_not_trainingarguments(runner, tmp_path):
    """The reverse mix-up: a DeepSpeed config (or an axolotl config) as --hf-args would be read as TrainingArguments
    with every value at its default."""
    ds = write(tmp_path, {"train_micro_batch_size_per_gpu": "auto"})
    swapped = write(tmp_path, {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}, "other.json")
    axolotl = write(tmp_path, AXOLOTL_YAML, "axolotl.yml")
    for path, text in ((swapped, "this is a DeepSpeed config (train_micro_batch_size_per_gpu, zero_optimization), "
                                 "not TrainingArguments"),
                       (axolotl, "this is an axolotl config; its keys are not TrainingArguments names")):
        result = runner.invoke(cli, ["check", ds, "--launch", "trainer", "--hf-args", path])
        assert result.exit_code == 2 and text in result.stderr and len(result.stderr.strip().splitlines()) == 1
    lf = write(tmp_path, LLAMA_FACTORY_YAML, "train.yaml")
    assert runner.invoke(cli, ["check", ds, "--launch", "trainer", "--hf-args", lf]).exit_code in (0, 1)
