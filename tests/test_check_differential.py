"""Differential test of `dsdoctor check` against the real thing: for generated configs (valid as often as broken,
one or two faults each), real ``deepspeed.initialize`` plus one optimizer step on a tiny model on the CPU
(tests/ds_reference.py) must raise exactly when check reports an ``error``, and every key DeepSpeed silently
ignores must have a DS130/DS132 finding. The agreement rate over 4,000 configs is recorded by
benchmarks/check_differential.py in benchmarks/results/check-differential.txt."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config_generator import generate
from ds_reference import run_real
from dsdoctor.checks.deepspeed_config import CheckContext, check_config


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.randoms(use_true_random=False))
def test_check_errors_exactly_when_deepspeed_raises(rng):
    config, client, faults, ignored = generate(rng)
    real = run_real(config, client)
    result = check_config(config, CheckContext(world_size=1, launch="engine", client_optimizer=client))
    errors = [f"{f.id}: {f.evidence}" for f in result.findings if f.severity == "error"]
    context = json.dumps({"config": config, "client_optimizer": client, "faults": faults, "deepspeed": real,
                          "check_errors": errors})
    assert (real is not None) == bool(errors), context
    for key in ignored:
        assert any(f.id in ("DS130", "DS132") and f'"{key}"' in f.evidence for f in result.findings), context


@pytest.mark.slow
@pytest.mark.parametrize("config, client, expected", [
    # the tutorial's config, as its own script uses it: DeepSpeed fails on the optimizer first, then, with an
    # optimizer added, on WarmupDecayLR's missing total_num_steps; check names both at once
    ({"train_batch_size": 4, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-5,
                                                         "warmup_num_steps": 200}}}, False, ["DS120", "DS125"]),
    ({"train_micro_batch_size_per_gpu": 2, "zero_optimisation": {"stage": 3}, "optimizer": {
        "type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}}}, False, []),
    # a torch scheduler in the config: DeepSpeed hands it ZeRO's optimizer, which torch refuses; with ZeRO off and
    # fp32 it gets the torch optimizer itself and works (found by a new user's trial)
    ({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}, "optimizer": {
        "type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}},
      "scheduler": {"type": "CosineAnnealingLR", "params": {"T_max": 100}}}, False, ["DS124"]),
    ({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}},
      "scheduler": {"type": "CosineAnnealingLR", "params": {"T_max": 100}}}, False, []),
    ({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}, "optimizer": {
        "type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}},
      "scheduler": {"type": "StepLR", "params": {"step_size": 10}}}, False, ["DS124"]),
])
def test_named_configs_agree_with_deepspeed(config, client, expected):
    real = run_real(config, client)
    result = check_config(config, CheckContext(world_size=1, launch="engine", client_optimizer=client))
    errors = sorted(f.id for f in result.findings if f.severity == "error")
    assert errors == expected
    assert (real is not None) == bool(expected), real
