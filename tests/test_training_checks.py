"""Verdicts of dsdoctor smoke (checks/training.py, installed as dsdoctor.checks.training) on controlled data."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsdoctor.checks import training
from dsdoctor.checks.training import (checkpoint_verdict, failure_findings, loss_verdicts, memory_verdict,
                                      model_flops_per_token, peak_flops, throughput)

MiB, GiB = 2**20, 2**30


def ids(findings) -> list[tuple[str, str]]:
    return [(f.id, f.severity) for f in findings]


# ------------------------------------------------------------------------------------------- loss
def test_falling_loss_passes():
    losses = [7.5 * math.exp(-0.004 * i) for i in range(100)]  # ~33% drop, like the bundled default
    (f,) = loss_verdicts(losses)
    assert (f.id, f.severity, f.title, f.fix) == ("TRN601", "ok", "Loss goes down", "")
    assert "mean loss first 10 steps 7.3" in f.evidence


def test_falling_noisy_loss_passes():
    rng = random.Random(1)
    losses = [7.4 - 0.02 * i + rng.gauss(0, 0.1) for i in range(100)]
    assert ids(loss_verdicts(losses)) == [("TRN601", "ok")]


def test_flat_noisy_loss_fails():
    rng = random.Random(0)
    losses = [7.4 + rng.gauss(0, 0.1) for _ in range(100)]
    (f,) = loss_verdicts(losses)
    assert (f.id, f.severity) == ("TRN601", "error")
    assert f.title == "Loss did not go down"
    assert f.fix == training.TRN601.fix


def test_small_drop_within_noise_fails():
    # a 5% drop (over the 3% margin) that is smaller than twice the noise of the windows
    first = [10.0, 12.0] * 5  # mean 11, sd ~1.05
    last = [9.5, 11.4] * 5    # mean 10.45, drop 0.55 < 2 x noise (~0.67)
    assert ids(loss_verdicts(first + [10.5] * 10 + last)) == [("TRN601", "error")]


def test_nan_loss_gives_trn602():
    losses = [7.5 - 0.05 * i for i in range(40)]
    losses[12] = float("nan")
    losses[30] = float("inf")
    found = loss_verdicts(losses)
    assert found[0].id == "TRN602" and found[0].severity == "error"
    assert found[0].evidence == "non-finite loss at 2 of 40 steps, first at step 13"
    assert ("TRN601", "ok") in ids(found)  # the finite values still go down


def test_nan_in_short_series_gives_trn602_and_trn603():
    assert ids(loss_verdicts([7.0, float("nan"), 6.0])) == [("TRN602", "error"), ("TRN603", "warning")]


@pytest.mark.parametrize("n", [0, 1, 10, 19])
def test_too_few_steps_gives_trn603(n):
    (f,) = loss_verdicts([7.0 - 0.1 * i for i in range(n)])
    assert (f.id, f.severity) == ("TRN603", "warning")
    assert f.evidence == f"{n} steps logged, 20 needed"


def test_twenty_steps_are_enough():
    assert ids(loss_verdicts([7.0 - 0.1 * i for i in range(20)])) == [("TRN601", "ok")]


def test_all_nan_window_fails():
    losses = [float("nan")] * 10 + [5.0] * 10
    assert ids(loss_verdicts(losses)) == [("TRN602", "error"), ("TRN601", "error")]


@settings(max_examples=300, deadline=None)
@given(level=st.floats(0.05, 50.0),
       noise=st.lists(st.floats(-1.0, 1.0), min_size=20, max_size=200),
       data=st.data())
def test_constant_plus_bounded_noise_never_passes(level, noise, data):
    """Noise bounded by 1% of the level can move the window means apart by at most 2%, under the 3% margin."""
    amplitude = data.draw(st.floats(0.0, 0.01)) * level
    losses = [level + amplitude * e for e in noise]
    verdict = [f for f in loss_verdicts(losses) if f.id == "TRN601"]
    assert len(verdict) == 1 and verdict[0].severity == "error"


@settings(max_examples=100, deadline=None)
@given(start=st.floats(1.0, 20.0), drop=st.floats(0.1, 0.9), n=st.integers(20, 150))
def test_linear_decrease_always_passes(start, drop, n):
    """A noiseless linear fall by 10%..90% over the run passes (its window noise is tiny)."""
    losses = [start * (1 - drop * i / (n - 1)) for i in range(n)]
    assert ids(loss_verdicts(losses)) == [("TRN601", "ok")]


# ------------------------------------------------------------------------------------------- memory
def test_stable_memory_ok():
    rng = random.Random(3)
    per_rank = {0: [4 * GiB + rng.randrange(0, 16 * MiB) for _ in range(50)],
                1: [4 * GiB + rng.randrange(0, 16 * MiB) for _ in range(50)]}
    f = memory_verdict(per_rank, "cuda")
    assert (f.id, f.severity, f.title) == ("TRN604", "ok", "Memory is stable")
    assert "rank 0: 4.0" in f.evidence and "rank 1: 4.0" in f.evidence
    assert f.evidence.startswith("peak allocated per step")


def test_memory_growing_50_mib_per_step_warns_naming_rank():
    per_rank = {0: [2 * GiB] * 40, 1: [2 * GiB + 50 * MiB * i for i in range(40)]}
    f = memory_verdict(per_rank, "cuda")
    assert (f.id, f.severity) == ("TRN604", "warning")
    assert f.evidence.endswith("grew on rank(s) [1]")
    # rank 1 after 5 warm-up steps: 35 steps, halves of 17 and 18: peaks at steps 21 and 39
    assert f"rank 1: {(2 * GiB + 21 * 50 * MiB) / GiB:.2f} -> {(2 * GiB + 39 * 50 * MiB) / GiB:.2f} GiB" in f.evidence


def test_cpu_tolerance_is_wider():
    # +200 MiB on a 1 GiB resident set: over the GPU tolerance (5% + 64 MiB), under the CPU's (10% + 256 MiB)
    series = {0: [GiB] * 20 + [GiB + 200 * MiB] * 10}  # halves of 12 and 13 after 5 warm-up steps
    assert memory_verdict(series, "cuda").severity == "warning"
    cpu = memory_verdict(series, "cpu")
    assert cpu.severity == "ok"
    assert cpu.evidence.startswith("resident memory per step")


# ------------------------------------------------------------------------------------------- checkpoint
GOOD = {"saved_to": "out/adapter", "saved_tensors": 16, "tolerance": 1e-3, "empty_tensors": [],
        "reload_max_diff": 2e-7, "merge_max_diff": 3e-6, "adapter_effect": 0.12, "roundtrip_ok": True}


def test_checkpoint_ok():
    f = checkpoint_verdict(dict(GOOD), "lora")
    assert (f.id, f.severity, f.title) == ("TRN605", "ok", "Adapter reloads and merges")
    assert "saved 16 tensors to out/adapter" in f.evidence
    assert checkpoint_verdict(dict(GOOD), "full").title == "Save reloads into a fresh model"


def test_checkpoint_empty_tensors():
    f = checkpoint_verdict({**GOOD, "empty_tensors": ["base_model.model.q_proj.lora_A.weight"],
                            "roundtrip_ok": False}, "lora")
    assert (f.id, f.severity) == ("TRN605", "error")
    assert "1 empty tensor(s), e.g. base_model.model.q_proj.lora_A.weight" in f.evidence


def test_checkpoint_empty_tensors_even_if_roundtrip_claims_ok():
    assert checkpoint_verdict({**GOOD, "empty_tensors": ["x"]}, "lora").severity == "error"


def test_checkpoint_merge_over_tolerance():
    f = checkpoint_verdict({**GOOD, "merge_max_diff": 0.02}, "lora")
    assert f.severity == "error"
    assert "merge changes the logits by 2.00e-02 > 1e-03" in f.evidence


def test_checkpoint_nan_diff_is_an_error():
    assert checkpoint_verdict({**GOOD, "reload_max_diff": float("nan")}, "lora").severity == "error"


def test_checkpoint_no_adapter_effect():
    f = checkpoint_verdict({**GOOD, "adapter_effect": 0.0}, "lora")
    assert f.severity == "error"
    assert "the save holds nothing learned" in f.evidence


def test_checkpoint_missing_keys():
    f = checkpoint_verdict({**GOOD, "missing_keys": ["lm_head.weight"]}, "full")
    assert f.severity == "error" and "1 key(s) missing, e.g. lm_head.weight" in f.evidence


@pytest.mark.parametrize("verify", [None, {}])
def test_checkpoint_not_verified_is_a_warning(verify):
    f = checkpoint_verdict(verify, "lora")
    assert (f.id, f.severity, f.title) == ("TRN605", "warning", "Save was not verified")


# ------------------------------------------------------------------------------------------- failures
def record(rank, t, phase="train step 3", type_="RuntimeError", message="boom", rule=None):
    return {"rank": rank, "phase": phase, "type": type_, "message": message, "rule": rule, "time": t}


def test_earliest_error_wins_and_others_are_listed():
    errors = [record(0, 105.0, message="secondary: connection reset"),
              record(2, 100.0, message="first line\nCUDA error: an illegal memory access"),
              record(1, 103.0, message="secondary: timeout")]
    (f,) = failure_findings(errors, 1, "")
    assert (f.id, f.severity) == ("TRN607", "error")
    assert f.evidence == ("rank 2 failed first, in train step 3: RuntimeError: CUDA error: an illegal memory "
                          "access (rank(s) [0, 1] stopped after it)")
    assert f.fix == training.TRN607.fix


def test_a_peer_crash_error_is_not_the_cause_even_when_earlier():
    errors = [record(0, 100.0, message="[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5"),
              record(1, 101.0, phase="deepspeed.initialize", type_="AssertionError",
                     message="zero stage 2 requires an optimizer")]
    (f,) = failure_findings(errors, 1, "")
    assert (f.id, f.evidence.split(",")[0]) == ("TRN610", "rank 1 failed first")


TORCHRUN_ROOT_CAUSE = """Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 8880)  (SIGTERM)
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_09:39:37
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 8881)  (SIGKILL)
  error_file: <N/A>
"""


def test_torchrun_root_cause_rank_killed_by_signal_beats_the_survivors_errors():
    errors = [record(0, 100.0, message="Connection closed by peer")]
    (f,) = failure_findings(errors, 1, TORCHRUN_ROOT_CAUSE)
    assert f.id == "TRN607"
    assert f.evidence == ("rank 1 exit code -9 (SIGKILL: often the host's OOM killer) with no Python error; "
                          "rank(s) [0] failed after it")


def test_torchrun_root_cause_rank_with_a_record_uses_the_record():
    log = TORCHRUN_ROOT_CAUSE.replace("-9 (pid: 8881)  (SIGKILL)", "1 (pid: 8881)")
    errors = [record(0, 99.0, message="Connection closed by peer"),
              record(1, 100.0, message="data broke", rule="DATA702")]
    (f,) = failure_findings(errors, 1, log)
    assert f.id == "DATA702" and f.evidence.startswith("rank 1 failed first")


def test_single_error_lists_no_others():
    (f,) = failure_findings([record(0, 1.0)], 1, "")
    assert "stopped after it" not in f.evidence


def test_rule_in_record_maps_to_that_rule():
    msg = "data.jsonl: 1 sample(s) have no answer token left after truncation to --seq-len 256: line(s) 2"
    (f,) = failure_findings([record(1, 5.0, phase="load tokenizer and data", type_="SetupError", message=msg,
                                    rule="DATA701"), record(0, 5.5, rule="DATA701")], 1, "")
    assert (f.id, f.severity, f.title) == ("DATA701", "error", "Sample with no answer token")
    assert "rank 1 failed first, in load tokenizer and data: SetupError:" in f.evidence
    assert "line(s) 2" in f.evidence


def test_unknown_rule_in_record_falls_back_to_trn607():
    (f,) = failure_findings([record(0, 1.0, rule="XYZ999")], 1, "")
    assert f.id == "TRN607"


def test_initialize_failure_maps_to_trn610_with_optimizer_fix():
    msg = "AssertionError: zero stage 2 requires an optimizer"
    (f,) = failure_findings([record(0, 1.0, phase="deepspeed.initialize", type_="AssertionError", message=msg)],
                            1, "")
    assert (f.id, f.severity) == ("TRN610", "error")
    assert f.fix.startswith('Add an "optimizer" block to the ds_config')
    assert "requires an optimizer" in f.evidence


def test_initialize_failure_without_known_cause_keeps_default_fix():
    (f,) = failure_findings([record(0, 1.0, phase="deepspeed.initialize", message="something new")], 1, "")
    assert f.id == "TRN610" and f.fix == training.TRN610.fix


def test_known_cause_in_training_phase():
    (f,) = failure_findings([record(0, 1.0, message="torch.OutOfMemoryError: CUDA out of memory.")], 1, "")
    assert f.id == "TRN607" and "gradient checkpointing" in f.fix


TORCHRUN_TAIL = """\
step 12 loss 7.1
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : node1
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
"""


def test_no_record_and_sigkill_gives_trn607_mentioning_minus_9():
    (f,) = failure_findings([], 1, TORCHRUN_TAIL)
    assert (f.id, f.severity) == ("TRN607", "error")
    assert f.evidence == "rank 1 exit code -9 (SIGKILL: often the host's OOM killer) with no Python error"
    assert "dmesg" in f.fix


def test_no_record_and_no_summary_uses_launcher_code():
    (f,) = failure_findings([], 3, "Segmentation fault\n")
    assert f.id == "TRN607"
    assert f.evidence.startswith("launcher exit code 3; no error record written")
    assert "-9" not in f.evidence


# ------------------------------------------------------------------------------------------- throughput, MFU
def test_model_flops_per_token_by_hand():
    # LoRA-like: N = 1,000,000 parameters, 10,000 trainable, 4 layers, hidden 256, 100 tokens per sample
    # 4N = 4,000,000; 2 x trainable = 20,000; 12 * 4 * 256 * 100 = 1,228,800 -> 5,248,800
    assert model_flops_per_token(1_000_000, 10_000, 4, 256, 100) == 5_248_800
    # full fine-tuning is 6N + attention (PaLM appendix B): 6 * 1000 + 12 * 2 * 8 * 16 = 6000 + 3072
    assert model_flops_per_token(1000, 1000, 2, 8, 16) == 9072


@pytest.mark.parametrize("name, flops", [
    ("NVIDIA H200", 989e12), ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A10", 125e12), ("NVIDIA L40S", 362e12), ("NVIDIA L40", 181e12),
    ("Tesla V100-SXM2-32GB", 125e12),
])
def test_peak_flops_known(name, flops):
    assert peak_flops(name) == flops


@pytest.mark.parametrize("name", ["cpu", "NVIDIA GeForce GTX 1080", ""])
def test_peak_flops_unknown(name):
    assert peak_flops(name) is None


def rows(*steps):
    return [{"step": i + 1, "step_time_s": t, "tokens": tok, "samples": s} for i, (t, tok, s) in enumerate(steps)]


def test_throughput_two_ranks():
    by_rank = {
        # two warm-up steps (slow) are skipped; then 3 steps: 3.0 s, 1200 tokens, 12 samples
        1: rows((9.0, 50, 1), (9.0, 50, 1), (1.0, 400, 4), (1.0, 400, 4), (1.0, 400, 4)),
        0: rows((5.0, 999, 9), (5.0, 999, 9), (0.5, 300, 2), (1.5, 500, 6)),
    }
    out = throughput(by_rank)
    assert out["tokens_per_s"] == [pytest.approx(800 / 2.0), pytest.approx(1200 / 3.0)]
    assert out["samples_per_s"] == [pytest.approx(8 / 2.0), pytest.approx(12 / 3.0)]
    assert out["mean_tokens_per_sample"] == [pytest.approx(100.0), pytest.approx(100.0)]


def test_throughput_short_run_uses_all_steps():
    out = throughput({0: rows((2.0, 100, 4))})
    assert out["tokens_per_s"] == [50.0] and out["samples_per_s"] == [2.0] and out["mean_tokens_per_sample"] == [25.0]


def test_zero_loss_does_not_crash():
    (f,) = loss_verdicts([0.0] * 20)
    assert (f.id, f.severity) == ("TRN601", "error")


def test_the_same_error_on_every_rank_is_one_cause_not_a_race():
    errors = [record(0, 100.0, phase="deepspeed.initialize", message="zero stage 2 requires an optimizer"),
              record(1, 100.5, phase="deepspeed.initialize", message="zero stage 2 requires an optimizer")]
    (f,) = failure_findings(errors, 1, "")
    assert f.evidence == "ranks [0, 1] all failed in deepspeed.initialize: RuntimeError: zero stage 2 requires an optimizer"


def test_an_unchanged_model_is_a_training_problem_not_a_save_problem():
    verify = {"saved_to": "out/adapter", "saved_tensors": 16, "empty_tensors": [], "tolerance": 1e-3,
              "reload_max_diff": 0.0, "merge_max_diff": 0.0, "adapter_effect": 0.0, "roundtrip_ok": False}
    f = checkpoint_verdict(verify, "lora")
    assert (f.id, f.severity, f.title) == ("TRN605", "error", "Training left the model unchanged")
    assert "TRN601" in f.fix and "ZeRO-3" not in f.fix
    assert "training effect" in checkpoint_verdict({**verify, "adapter_effect": 1.0, "roundtrip_ok": True}, "full").evidence


def test_loss_means_are_the_finite_means_of_the_two_windows():
    from dsdoctor.checks.training import loss_means

    assert loss_means([float("nan"), 2.0, 4.0, 6.0]) == (2.0, 5.0)  # window shrinks to half of 4 steps
    assert loss_means([7.0] * 10 + [5.0] * 10) == (7.0, 5.0)
    with pytest.raises(ValueError):
        loss_means([1.0])


# ------------------------------------------------------------------------------------------- issue 12: our model, not
# the user's setup. A flat loss on a random init under a real fine-tuning learning rate is inconclusive (TRN611) when
# the optimizer did move the parameters; no movement, or lr 0 at every step, stays a setup error.
FLAT = [7.40 + 0.01 * ((i * 7) % 5) for i in range(100)]
MOVED = {"relative_change": 3e-4, "mean_abs_change": 1e-5, "tensors_changed": 16, "tensors": 16}


def test_a_flat_loss_on_the_bundled_random_init_with_moving_parameters_is_inconclusive():
    (f,) = loss_verdicts(FLAT, context={"parameter_change": MOVED, "lr_peak": 2e-5, "random_init": True,
                                        "bundled_model": True, "method": "lora"})
    assert (f.id, f.severity) == ("TRN611", "warning")
    assert "peak learning rate applied 2e-05" in f.evidence and "16 of 16 tensors changed" in f.evidence
    assert "the bundled tiny model, a random init" in f.evidence
    assert ("at least 5e-05 for lora, reached within the first 10 steps of a 100-step run (yours: 2e-05 in 100 "
            "steps)" in f.fix
            and training.BUNDLED_LEARNS_AT["lora"] == 5e-5)
    assert "--model DIR with its weights" in f.fix and "labels" not in f.fix  # the user's setup is not blamed


def test_a_flat_loss_with_no_parameter_moved_is_a_setup_error_even_on_the_random_init():
    (f,) = loss_verdicts(FLAT, context={"parameter_change": {**MOVED, "tensors_changed": 0, "relative_change": 0.0},
                                        "lr_peak": 2e-5, "random_init": True, "bundled_model": True})
    assert (f.id, f.severity, f.title) == ("TRN601", "error", "The optimizer changed no trainable parameter")
    assert "model_parameters" in f.fix


def test_a_zero_learning_rate_is_a_setup_error():
    (f,) = loss_verdicts(FLAT, context={"parameter_change": MOVED, "lr_peak": 0.0, "random_init": True})
    assert (f.id, f.severity, f.title) == ("TRN601", "error", "The learning rate was 0 at every step")
    # newcomer trial: with lr 0 nothing moves either; the learning rate is named, not model_parameters
    (g,) = loss_verdicts(FLAT, context={"parameter_change": {**MOVED, "tensors_changed": 0}, "lr_peak": 0.0})
    assert g.title == "The learning rate was 0 at every step" and "model_parameters" not in g.fix


def test_a_flat_loss_on_real_weights_stays_an_error():
    (f,) = loss_verdicts(FLAT, context={"parameter_change": MOVED, "lr_peak": 2e-5, "random_init": False})
    assert (f.id, f.severity, f.title) == ("TRN601", "error", "Loss did not go down")
    assert "16 of 16 tensors changed" in f.evidence


def test_steady_climb_inside_the_tolerance_is_a_finding():
    # issue 12: 20 steps on the CPU, 0.47 -> 0.70 GiB step after step: inside 10% + 256 MiB, but a climb
    series = {0: [int((0.47 + 0.23 * i / 19) * GiB) for i in range(20)], 1: [int(0.47 * GiB)] * 20}
    f = memory_verdict(series, "cpu")
    assert (f.id, f.severity, f.title) == ("TRN604", "warning", "Memory climbs step after step")
    assert "rank 0 +12.4 MiB per step, higher at 100% of steps" in f.evidence and "rank 1" not in f.evidence.split(
        "climbs steadily")[1]
    assert "--steps 200" in f.fix


@pytest.mark.parametrize("series", [
    [GiB + (i % 3) * 4 * MiB for i in range(40)],  # allocator noise
    [GiB] * 10 + [GiB + 200 * MiB] + [GiB] * 10,  # one spike
    [GiB + i * MiB // 2 for i in range(40)],  # +17 MiB over the 35 judged steps: under 2% of 1 GiB and 32 MiB
])
def test_noise_spikes_and_tiny_growth_are_not_a_climb(series):
    assert memory_verdict({0: series}, "cpu").severity == "ok"


def test_a_small_adapter_effect_with_moved_parameters_is_inconclusive_not_unchanged():
    # issue 12: 20 steps at a real learning rate on the random init: the save round-trips exactly, the effect is
    # below the fp32 tolerance
    verify = {**GOOD, "reload_max_diff": 0.0, "merge_max_diff": 0.0, "adapter_effect": 4e-4, "roundtrip_ok": True}
    f = checkpoint_verdict(verify, "lora", MOVED)
    assert (f.id, f.severity) == ("TRN605", "ok")  # 4e-4 stands out from exact reloads (more than 10x their 0)
    f = checkpoint_verdict({**verify, "reload_max_diff": 1e-4, "merge_max_diff": 1e-4}, "lora", MOVED)
    assert (f.id, f.severity, f.title) == ("TRN605", "warning", "Save round-trips; what it learned is too small to see")
    assert checkpoint_verdict({**verify, "adapter_effect": 0.0}, "lora", MOVED).severity == "error"


def test_a_timed_out_run_is_an_error_even_when_it_was_still_advancing():
    import time as _time

    from dsdoctor.commands.smoke.judge import timeout_finding

    now = _time.time()
    rows = {r: [{"step": i, "step_time_s": 0.2, "time": now - 1} for i in range(1, 40)] for r in (0, 1)}
    f = timeout_finding(rows, 2, 100, 12, [])
    assert (f.id, f.severity, f.title) == ("TRN608", "error", "Run did not finish within --timeout")
    assert "still advancing at 0.20 s/step" in f.evidence and "not judged" in f.fix
    building = timeout_finding({}, 2, 100, 12, [{"op": "deepspeed_shm_comm", "path": "/x/lock", "by": "this run"}])
    assert building.title == "Run timed out while DeepSpeed's op was still building"


def test_the_plot_shows_what_the_verdicts_judged():
    """issue 12: the memory axis auto-zoomed (0.462 to 0.474 GiB looked like a leak); the loss means, the verdict and
    the learning rate were not on the plot."""
    import matplotlib

    matplotlib.use("Agg")
    from dsdoctor.commands.smoke.plot import figure

    rows = {r: [{"step": i, "loss": 7.5 - 0.01 * i, "lr": min(i, 5) * 4e-4, "mem_allocated_bytes": int(0.462 * GiB)
                 + (i % 3) * 4 * MiB} for i in range(1, 41)] for r in (0, 1)}
    fig = figure(rows, "resident memory per step", {"window": 10, "first": 7.44, "last": 7.14, "status": "PASS",
                                                    "title": "Loss goes down"},
                 {0: (int(0.47 * GiB), int(0.77 * GiB)), 1: (int(0.47 * GiB), int(0.77 * GiB))})
    loss, lr, memory = fig.axes
    assert loss.get_title() == "loss: PASS (Loss goes down)"
    assert {t.get_text() for t in loss.get_legend().get_texts()} >= {"mean of first 10: 7.4400", "mean of last 10: 7.1400"}
    assert [round(float(v), 6) for v in lr.lines[0].get_ydata()][:6] == [4e-4, 8e-4, 1.2e-3, 1.6e-3, 2e-3, 2e-3]
    assert memory.get_ylim()[0] == 0
    assert any("TRN604 accepts up to 0.77 GiB" in t.get_text() for t in memory.get_legend().get_texts())
