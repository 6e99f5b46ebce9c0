"""`dsdoctor estimate`: the arithmetic against what an H200 really measured (benchmarks/results/memory-accuracy),
ZeRO partitioning over N GPUs, the command's options and JSON, --deepspeed, --compare, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsdoctor.checks.memory import Setup, estimate, max_micro_batch, model_state_bytes
from dsdoctor.cli import cli
from dsdoctor.models import REGISTRY, resolve_arch

GIB = 2 ** 30
POINTS = sorted((Path(__file__).parents[1] / "benchmarks/results/memory-accuracy/points").glob("*.json"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run_json(runner, *args):
    result = runner.invoke(cli, ["estimate", *args, "--json", "-"])
    assert result.exit_code in (0, 1), result.output + result.stderr
    return json.loads(result.stdout), result.exit_code


def setup(name="llama-2-7b", method="full", **kw) -> Setup:
    arch = resolve_arch(name)
    from dsdoctor.models import trainable_params

    t = trainable_params(arch, method)
    return Setup(arch=arch, total_params=arch.total_params, trainable_params=t, method=method, **kw)


# --- against the GPU ------------------------------------------------------------------------------------------

#: Measured points the estimate is known to miss, and why (benchmarks/results/memory-loops/README.md): ZeRO-3 with
#: parameter offload allocates 0.6-3.3 GiB more than the gathered parameters and buffers modelled (checks/zero3.py).
KNOWN_MISSES = {"v2-q15-full-z3-offload-both", "r3-phi3-full-z3-offboth-mb2-engine",
                "r3-q3-8b-lora-z3-offboth-mb4-engine", "r3-q3-1.7b-full-z3-offboth-mb4-engine",
                "r3-l32-3b-full-z3-offboth-mb8-trainer"}
#: Points whose allocated peak is right but whose allocator slack is not, with the slack refitted on rounds 2-6
#: (round 10, benchmarks/results/memory-loops/calibration-fit.txt): NVML 10.4% above the estimate (Llama-3.2-1B full
#: ZeRO-1 under the Trainer at micro batch 16: 65.7 GiB allocated leave 22.6 GiB of slack the features do not see);
#: 10.0% below it (Qwen2.5-1.5B freeze, round 1's harness) and 9.3% (GLM-4-9B LoRA ZeRO-3 micro 24 under the
#: Trainer). `estimate --replay` is within 0.6% on each (report-r4.md, step-replay.md). The two other points this
#: set held before the refit (Llama-3.2-3B under the Trainer: ZeRO-2 offload, ZeRO-1 LoRA) are now within 4%.
SLACK_MISSES = {"r4-l32-1b-full-z1-mb16-s2048-trainer",
                "q15-freeze-z2-nockpt", "r3-glm4-lora-z3-mb24-s2048-trainer"}
ALL_POINTS = sorted(p for folder in ("memory-accuracy/points", "memory-loops/points", "memory-loops/points-r3",
                                     "memory-loops/points-r4", "memory-loops/points-r5")
                    for p in (Path(__file__).parents[1] / "benchmarks/results" / folder).glob("*.json"))


@pytest.fixture(scope="module")
def measured():
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import fit_calibration

    return {p["name"]: p for p in fit_calibration.load()}


@pytest.mark.parametrize("path", ALL_POINTS, ids=[p.stem for p in ALL_POINTS])
def test_estimate_matches_the_h200_measurement(path, measured):
    """Each point measured on the H200 (three rounds, fit and held-out alike): peak allocated within 2.5%, what
    nvidia-smi showed within MEM502's band (8%, the fit points' largest error rounded up), and the verdict right:
    fits, tight (a warning either way) or does not fit, against the run's own 139.8 GiB."""
    from dsdoctor.checks.memory import TIGHT, estimate, verdict

    if path.stem not in measured:
        pytest.skip("the run failed before training (its record says why)")
    point = measured[path.stem]
    est = estimate(point["setup"])
    kind = verdict(est.total, point["gpu_total"])
    assert kind == "tight" or (kind == "no") == point["oom"]
    if not point["oom"] and path.stem not in KNOWN_MISSES:
        assert abs(est.allocated - point["allocated"]) <= 0.025 * point["allocated"]
        if path.stem not in SLACK_MISSES:
            assert abs(est.total - point["nvml"]) <= TIGHT * point["nvml"]


def test_the_calibration_is_what_the_fit_gives(measured):
    """Calibration's slack coefficients are benchmarks/fit_calibration.py's least squares on the fit points, to the
    digits written."""
    import fit_calibration

    from dsdoctor.checks.memory import CALIBRATION

    _, values, n = fit_calibration.fit(list(measured.values()))
    assert n >= 30
    for name, value in values.items():
        written = getattr(CALIBRATION, "slack_" + name)
        assert abs(written - value) <= (0.001 * 2**30 if name == "base" else 0.001), name


def test_grid_has_the_points_the_issue_asks_for():
    points = [json.loads(p.read_text())["point"] for p in ALL_POINTS]
    assert len(points) >= 15
    assert {p["zero"] for p in points} == {0, 1, 2, 3}
    assert {p["method"] for p in points} >= {"full", "lora", "freeze"}
    assert any(p.get("offload_optimizer", "none") != "none" for p in points)
    assert any(json.loads(p.read_text()).get("oom") for p in ALL_POINTS)
    assert any(p.get("offload_param", "none") != "none" for p in points)
    assert {p.get("loop") for p in points} >= {"engine", "engine-loss", "trainer"}
    loops = [p for p in points if p.get("loop")]
    assert len({p["model"] for p in loops}) >= 6 and sum(bool(p.get("holdout")) for p in loops) * 2 >= len(loops)
    assert {p.get("grad_ckpt", True) for p in points} == {True, False}


# --- the arithmetic ---------------------------------------------------------------------------------------------

def test_full_fine_tuning_model_states_are_16_bytes_per_parameter():
    s = setup("chatglm-6b", zero_stage=0, precision="fp16")
    states = model_state_bytes(s)
    psi = 6_173_286_400
    assert states["weights"] + states["gradients"] + states["optimizer_states"] == 16 * psi
    assert round(16 * psi / GIB) == 92  # the tutorials' "about 92 GiB"


@pytest.mark.parametrize("stage,expected", [(0, 2 + 2 + 12), (1, 2 + 2 + 12 / 8), (2, 2 + 2 / 8 + 12 / 8),
                                            (3, (2 + 2 + 12) / 8)])
def test_zero_stages_partition_as_the_paper_says(stage, expected):
    """ZeRO paper section 3 (Figure 1): bytes per parameter of weights + gradients + Adam states on 8 GPUs."""
    s = setup("llama-2-7b", zero_stage=stage, gpus=8)
    st = model_state_bytes(s)
    per_param = (st["weights"] + st["gradients"] + st["optimizer_states"]) / s.total_params
    assert per_param == pytest.approx(expected, rel=1e-6)


def test_frozen_weights_are_partitioned_only_by_zero3():
    lora2 = model_state_bytes(replace(setup("qwen2.5-7b"), method="lora", trainable_params=2_523_136, gpus=4))
    lora3 = model_state_bytes(replace(setup("qwen2.5-7b"), method="lora", trainable_params=2_523_136, gpus=4,
                                      zero_stage=3))
    assert lora2["weights"] == 2 * 7_615_616_512
    assert lora3["weights"] == 2 * 7_615_616_512 // 4


def test_max_micro_batch_is_the_boundary():
    s = setup("qwen2.5-1.5b", zero_stage=2)
    limit = 80 * GIB
    best = max_micro_batch(s, limit)
    assert best > 1
    assert estimate(replace(s, micro_batch=best)).total <= limit < estimate(replace(s, micro_batch=best + 1)).total


def test_offload_moves_the_optimizer_to_the_host():
    s = setup("llama-2-7b", zero_stage=2, gpus=8)
    off = estimate(replace(s, offload_optimizer="cpu"))
    assert off.terms["optimizer_states"] == 0
    assert off.host["optimizer_offload_per_rank"] == (12 + 4) * s.trainable_params // 8
    assert off.host["offload_per_node"] == 8 * off.host["optimizer_offload_per_rank"]


# --- the command ----------------------------------------------------------------------------------------------

def test_chatglm_lora_counts_and_json_keys(runner):
    data, code = run_json(runner, "--model", "chatglm-6b", "--method", "lora", "--lora-r", "8", "--gpu-mem", "80")
    result = data["result"]
    assert code == 0
    assert result["total_params"] == 6_173_286_400 and result["trainable_params"] == 3_670_016
    assert set(result) >= {"total_params", "trainable_params", "per_gpu_bytes", "host_bytes", "fits",
                           "max_micro_batch"}
    assert result["per_gpu_bytes"]["total"] == sum(v for k, v in result["per_gpu_bytes"].items() if k != "total")
    assert result["fits"] is True and result["max_micro_batch"] > 1
    assert [f["id"] for f in data["findings"]] == ["MEM500", "MEM508"]  # no --gpus, no GPU here: world size assumed


def test_large_vocabulary_logits_dominate(runner):
    data, _ = run_json(runner, "--model", "qwen2.5-0.5b", "--method", "lora", "--micro-batch", "16", "--seq-len",
                       "2048", "--gpu-mem", "141")
    assert [f["id"] for f in data["findings"]] == ["MEM500", "MEM508", "MEM506", "MEM509"]
    terms = data["result"]["per_gpu_bytes"]
    assert terms["logits_and_loss"] == 16 * 2048 * 151936 * 12  # fp32 log-softmax output and two gradients
    assert terms["held_logits"] == 16 * 2048 * 151936 * 2  # the engine loop's outputs.logits, bf16


def test_engine_loop_holds_the_logits_and_the_trainer_does_not(runner):
    """Issue 13: the tutorials' loop keeps ``outputs`` (and its logits) through backward; the Trainer keeps only the
    loss. The two estimates differ by exactly micro x seq x vocabulary x 2 bytes at every moment of the step, and
    only the engine loop gets MEM509 (with the one-line fix)."""
    args = ["--model", "qwen2.5-7b", "--method", "lora", "--micro-batch", "8", "--seq-len", "2048", "--gpus", "4",
            "--gpu-mem", "80"]
    engine, _ = run_json(runner, *args)
    trainer, _ = run_json(runner, *args, "--launch", "trainer")
    held = 8 * 2048 * 152064 * 2
    assert held / 2 ** 30 == pytest.approx(4.64, abs=0.01)  # the issue's 4.6 GiB for a 150k vocabulary
    for phase in ("loss", "backward", "step"):
        assert engine["result"]["phases_bytes"][phase] - trainer["result"]["phases_bytes"][phase] == held
    assert engine["result"]["launch"] == "engine" and trainer["result"]["launch"] == "trainer"
    mem509 = next(f for f in engine["findings"] if f["id"] == "MEM509")
    assert "held logits 4.64 GiB per GPU: micro batch 8 x seq 2048 x vocabulary 152,064 x 2 bytes" in mem509["evidence"]
    assert "loss = engine(**batch).loss" in mem509["fix"]
    assert "MEM509" not in [f["id"] for f in trainer["findings"]]
    small, _ = run_json(runner, "--model", "qwen2.5-7b", "--method", "lora", "--gpus", "4", "--gpu-mem", "80")
    assert "MEM509" not in [f["id"] for f in small["findings"]]  # 1 x 1024 x 152,064 x 2 = 0.29 GiB: below 1 GiB


def test_the_three_loops_differ_by_the_held_logits_and_the_trainers_context(runner):
    """--launch engine-loss (``loss = engine(**batch).loss``, MEM509's fix) allocates what the Trainer allocates;
    the engine loop adds its held logits (allocated) and their fp32-sized blocks (slack); the Trainer adds its CUDA
    context (1.68 GiB at every stage against 1.30 GiB for the engine at ZeRO-2, measured on the H200)."""
    from dsdoctor.checks.memory import CALIBRATION

    args = ["--model", "qwen3-8b", "--method", "lora", "--micro-batch", "4", "--seq-len", "2048", "--gpus", "2",
            "--gpu-mem", "80"]
    runs = {launch: run_json(runner, *args, "--launch", launch)[0]["result"] for launch in
            ("engine", "engine-loss", "trainer")}
    assert runs["engine-loss"]["allocated_bytes"] == runs["trainer"]["allocated_bytes"]
    assert runs["engine-loss"]["launch"] == "engine-loss"
    held = 4 * 2048 * 151936 * 2
    assert runs["engine"]["allocated_bytes"] - runs["engine-loss"]["allocated_bytes"] == held
    assert runs["engine"]["reserved_bytes"] - runs["engine-loss"]["reserved_bytes"] == pytest.approx(
        held + CALIBRATION.slack_held_logits * 2 * held, abs=2)
    context = {k: v["per_gpu_bytes"]["cuda_context"] for k, v in runs.items()}
    assert context == {"engine": int(1.30 * GIB), "engine-loss": int(1.30 * GIB), "trainer": int(1.68 * GIB)}


def test_7b_full_zero2_on_one_h200_does_not_fit(runner):
    """The issue's example: DeepSpeed's estimator and accelerate say a 7B full fine-tune fits one 141 GB card;
    it ran out of memory on the H200 (benchmarks/results/memory-accuracy/points/q7-full-z2-oom.json)."""
    data, code = run_json(runner, "--model", "qwen2.5-7b", "--zero", "2", "--gpu-mem", "139.8", "--gpus", "1",
                          "--micro-batch", "1", "--seq-len", "512")
    assert code == 1
    assert data["findings"][0]["id"] == "MEM501"
    assert data["result"]["fits"] is False
    assert data["result"]["accelerate_estimator_bytes"] < 139.8 * GIB
    changes = data["result"]["what_to_change"]
    assert changes and changes[0]["fits"]  # ranked: something that fits comes first
    assert any("offload_optimizer" in c["change"] for c in changes)


def test_no_gpu_shows_common_cards(runner):
    data, _ = run_json(runner, "--model", "llama-2-13b", "--method", "lora")
    assert data["result"]["fits"] is None
    assert set(data["result"]["fits_by_card"]) == {"GeForce RTX 4090", "A100 40GB", "A100 80GB", "H200"}
    assert data["result"]["fits_by_card"]["GeForce RTX 4090"] is False


def test_deepspeed_config_supplies_stage_micro_batch_and_precision(runner, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    data, _ = run_json(runner, "--model", "qwen2.5-1.5b", "--deepspeed", str(cfg), "--gpu-mem", "80")
    s = data["result"]["setup"]
    assert (s["zero_stage"], s["micro_batch"], s["precision"], s["offload_optimizer"]) == (3, 4, "fp16", "cpu")
    data, _ = run_json(runner, "--model", "qwen2.5-1.5b", "--deepspeed", str(cfg), "--zero", "2", "--gpu-mem", "80")
    assert data["result"]["setup"]["zero_stage"] == 2  # a flag given on the command line wins
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}}))
    data, _ = run_json(runner, "--model", "qwen2.5-1.5b", "--deepspeed", str(cfg), "--micro-batch", "2",
                       "--gpu-mem", "80")
    assert data["result"]["setup"]["micro_batch"] == 2
    assert any('"auto"' in n for n in data["result"]["notes"])
    assert data["result"]["setup"]["zero_stage"] == 0  # no zero_optimization: DeepSpeed's default stage 0


def test_compare_shows_four_stages(runner):
    data, _ = run_json(runner, "--model", "llama-2-7b", "--gpus", "8", "--compare", "--gpu-mem", "80")
    compare = data["result"]["compare"]
    assert list(compare) == ["0", "1", "2", "3"]
    totals = [compare[s]["total"] for s in "0123"]
    assert totals[0] > totals[1] > totals[2] > totals[3]


def test_local_model_directory_counts_analytically_or_on_meta(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    _, values = REGISTRY["qwen2.5-0.5b"]
    (model / "config.json").write_text(json.dumps(values))
    data, _ = run_json(runner, "--model", str(model), "--method", "lora", "--gpu-mem", "24")
    assert data["result"]["total_params"] == 494_032_768  # tied embeddings counted once
    assert data["result"]["trainable_params"] == 540_672
    assert data["result"]["counting"].startswith("exact, analytic")
    assert not (tmp_path / "cache").exists()  # transformers was not needed
    # a key the formulas do not model (qwen2 ignores attention_bias): transformers counts it on the meta device
    (model / "config.json").write_text(json.dumps({**values, "attention_bias": True}))
    for _ in range(2):  # the second run reads the parameter-count cache
        data, _ = run_json(runner, "--model", str(model), "--method", "lora", "--gpu-mem", "24")
        assert data["result"]["total_params"] == 494_032_768
        assert data["result"]["trainable_params"] == 540_672
        assert data["result"]["counting"].startswith("exact: transformers' model built on the meta device")
        assert "attention_bias" in data["result"]["counting"]
    assert len(json.loads((tmp_path / "cache/dsdoctor/param-counts.json").read_text())) == 1
    (model / "config.json").write_text(json.dumps({**values, "num_hidden_layers": 12, "attention_bias": True}))
    data, _ = run_json(runner, "--model", str(model), "--method", "full", "--gpu-mem", "24")
    assert data["result"]["total_params"] == 494_032_768 - 12 * resolve_arch("qwen2.5-0.5b").layer_params


@pytest.mark.parametrize("args,message", [
    (["--model", "chatglm-7b"], "did you mean"),
    (["--model", "./no/such/dir"], "no such directory"),
    (["--model", "qwen2-7b", "--micro-batch", "0"], "'--micro-batch': 0 is not in the range 1<=x<=1000000"),
    (["--model", "qwen2-7b", "--seq-len", "-5"], "'--seq-len': -5 is not in the range 1<=x<=10000000"),
    (["--model", "qwen2-7b", "--gpu-mem", "lots"], "--gpu-mem must be a number"),
    (["--model", "qwen2-7b", "--gpu-mem", "-8"], "above 0 and below 100,000"),
    (["--model", "qwen2-7b", "--offload-param", "cpu"], "needs --zero 3"),
    (["--model", "qwen2-7b", "--zero", "0", "--offload-optimizer", "cpu"], "ZeRO-1 or above"),
    (["--model", "qwen2-7b", "--method", "freeze", "--freeze-last", "99"], "between 1 and 28"),
    (["--model", "qwen2-7b", "--method", "lora", "--lora-targets", "query_key_value"], "not a module peft can wrap"),
    (["--model", "qwen2-7b", "--deepspeed", "/no/such.json"], "no such file"),
])
def test_bad_input_is_one_line_exit_2(runner, args, message):
    result = runner.invoke(cli, ["estimate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_missing_config_field_is_one_line(runner, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 896}))
    result = runner.invoke(cli, ["estimate", "--model", str(tmp_path)])
    assert result.exit_code == 2 and "no num_hidden_layers" in result.stderr


def test_registry_path_imports_no_torch():
    code = ("import sys; from click.testing import CliRunner; from dsdoctor.cli import cli; "
            "r = CliRunner().invoke(cli, ['estimate', '--model', 'qwen2-7b', '--method', 'lora', '--gpu-mem', '80', '--json', '-']); "
            "assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_host_ram_for_offload_is_flagged(runner):
    """FACTS.md: a 7B full fine-tune with ZeRO-2 optimizer offload was killed on the GPU machine's 128 GiB host."""
    data, _ = run_json(runner, "--model", "llama-2-7b", "--zero", "2", "--offload-optimizer", "cpu", "--gpus", "1",
                       "--gpu-mem", "139.8", "--host-mem", "128")
    mem504 = [f for f in data["findings"] if f["id"] == "MEM504"]
    assert mem504 and "this node has 128.00 GiB" in mem504[0]["evidence"]
    host = data["result"]["host_bytes"]
    assert host["optimizer_offload_per_rank"] == 16 * 6_738_415_616  # fp32 master, 2 moments, fp32 gradients
    assert host["needed_per_node"] == int(1.5 * host["offload_per_node"]) + host["model_load_per_node"]
    data, _ = run_json(runner, "--model", "qwen2.5-1.5b", "--zero", "2", "--offload-optimizer", "cpu", "--gpus", "1",
                       "--gpu-mem", "139.8", "--host-mem", "128")
    assert "MEM504" not in [f["id"] for f in data["findings"]]  # ran on that host (memory-accuracy grid)
    assert "MEM503" in [f["id"] for f in data["findings"]]  # and did not need offload at all


@pytest.mark.parametrize("args,message", [
    (["--host-mem", "inf"], "'--host-mem': 'inf' is not a finite number"),
    (["--host-mem", "1e300"], "'--host-mem': 1e+300 is above 1e+06"),
    (["--gpus", "0"], "'--gpus': 0 is not in the range 1<=x<=1024"),
    (["--method", "freeze", "--freeze-last", "0"], "would train nothing"),
    (["--model", ""], "--model is empty"),
])
def test_more_bad_input_from_a_trial(runner, args, message):
    argv = ["--model", "chatglm-6b", *args] if args[0] != "--model" else args
    result = runner.invoke(cli, ["estimate", *argv])
    assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("zero,message", [
    ({"stage": 2.5}, "zero_optimization.stage = 2.5"),
    ([2], "zero_optimization = [2]"),
    ({"stage": 2, "offload_optimizer": "cpu"}, "zero_optimization.offload_optimizer = 'cpu'"),
    ({"stage": 3, "offload_param": {"device": "gpu"}}, "zero_optimization.offload_param.device = 'gpu'"),
    ({"stage": 2, "reduce_bucket_size": -5}, "zero_optimization.reduce_bucket_size = -5"),
    ({"stage": 3, "stage3_prefetch_bucket_size": 1e30}, "stage3_prefetch_bucket_size = 1e+30"),
    ({"stage": 2, "offload_param": {"device": "cpu"}}, "does only at ZeRO-3, but the stage is 2"),
])
def test_unusable_deepspeed_values_are_refused(runner, tmp_path, zero, message):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": zero}))
    result = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", "--deepspeed", str(cfg), "--gpu-mem", "80"])
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_both_precisions_and_absurd_sizes_are_refused(runner, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"bf16": {"enabled": True}, "fp16": {"enabled": True}}))
    result = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", "--deepspeed", str(cfg)])
    assert result.exit_code == 2 and "both enabled" in result.stderr
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**REGISTRY["llama-2-7b"][1], "num_hidden_layers": 20000}))
    result = runner.invoke(cli, ["estimate", "--model", str(model)])
    assert result.exit_code == 2 and "not a real model's size" in result.stderr


def test_fitting_no_card_is_an_error_without_a_gpu(runner):
    data, code = run_json(runner, "--model", "chatglm-6b")  # full fine-tuning on one GPU: 146.6 GiB
    assert code == 1 and data["findings"][0]["id"] == "MEM501" and data["findings"][0]["severity"] == "error"
    data, code = run_json(runner, "--model", "chatglm-6b", "--method", "lora", "--micro-batch", "8")
    # too big for 24 GiB only: its own rule (MEM511, info), not MEM501 at another severity than the catalogue's
    assert code == 0 and [(f["id"], f["severity"]) for f in data["findings"][:1]] == [("MEM511", "info")]
    assert "RTX 4090" in data["findings"][0]["evidence"] and "A100 40GB" not in data["findings"][0]["evidence"]


def test_model_loading_alone_can_exceed_host_ram(runner):
    data, _ = run_json(runner, "--model", "llama-2-13b", "--zero", "2", "--gpus", "8", "--gpu-mem", "80",
                       "--method", "lora", "--host-mem", "128")
    host = data["result"]["host_bytes"]
    assert host["needed_per_node"] == host["model_load_per_node"] == 8 * 2 * (13_015_864_320 + 6_553_600)
    assert "MEM504" in [f["id"] for f in data["findings"]]


def test_all_linear_lora_targets(runner):
    data, _ = run_json(runner, "--model", "llama-2-7b", "--method", "lora", "--lora-targets", "all-linear",
                       "--gpu-mem", "80")
    assert data["result"]["trainable_params"] == 32 * 8 * (4 * (4096 + 4096) + 3 * (4096 + 11008))


# --- issue 12: what to change -------------------------------------------------------------------------------------

def _gib_arg(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.6f}"


def test_changes_keep_the_global_batch_with_integer_triples(runner):
    """A micro batch of 4 where 3 fits proposed "1.33333x gradient_accumulation_steps": only micro batches that
    divide the samples per GPU, each with its integer gradient accumulation, keeping micro x accumulation x world."""
    base = replace(setup("qwen2.5-0.5b", "lora"), method="lora", trainable_params=540_672,
                   total_params=494_032_768 + 540_672, lora_targets=("q_proj", "v_proj"), gpus=2, seq_len=2048)
    limit = (estimate(replace(base, micro_batch=3)).total + estimate(replace(base, micro_batch=4)).total) // 2
    data, code = run_json(runner, "--model", "qwen2.5-0.5b", "--method", "lora", "--micro-batch", "4",
                          "--grad-accum", "3", "--seq-len", "2048", "--gpus", "2", "--gpu-mem", _gib_arg(limit))
    changes = data["result"]["what_to_change"]
    assert code == 1 and changes
    assert data["result"]["setup"]["global_batch"] == 4 * 3 * 2
    for change in changes:
        ds = change["deepspeed"]
        micro, accum = ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]
        assert isinstance(micro, int) and isinstance(accum, int) and micro * accum == 12
        assert not re.search(r"\d\.\d", change["change"])  # no fractional micro batch or accumulation
    assert any(c["deepspeed"]["train_micro_batch_size_per_gpu"] == 3 and c["deepspeed"]["gradient_accumulation_steps"]
               == 4 for c in changes)  # 3 divides 12: the micro batch that fits, with 4 accumulation steps


def test_chatglm_on_four_24gib_cards_ranks_the_fast_option_first(runner):
    """Issue 12: with ZeRO-3 on 4 x 24 GiB, ZeRO-3 with parameter offload was ranked first although ZeRO-3 with only
    the optimizer offloaded fits and is faster. Every combination is searched and ranked by estimated step time."""
    data, code = run_json(runner, "--model", "chatglm-6b", "--zero", "3", "--gpus", "4", "--gpu-mem", "24")
    changes = data["result"]["what_to_change"]
    assert code == 1 and all(c["fits"] for c in changes)
    times = [c["step_time_s"]["total"] for c in changes if not c["tight"]]
    assert times == sorted(times)
    assert "offload_param" not in changes[0]["change"]
    by_change = {c["change"]: c for c in changes}
    optimizer_only, both = by_change["offload_optimizer cpu"], by_change["offload_optimizer cpu, offload_param cpu"]
    assert optimizer_only["step_time_s"]["total"] < both["step_time_s"]["total"]
    assert changes.index(optimizer_only) < changes.index(both)
    assert optimizer_only["deepspeed"]["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"}}
    assert "MEM501" == data["findings"][0]["id"] and "the fastest that fits" in data["findings"][0]["fix"]


def test_candidates_cover_every_combination():
    from dsdoctor.checks.memory import candidates

    s = replace(setup("llama-2-7b"), gpus=4, micro_batch=4, grad_accum=3)
    combos = {(c.zero_stage, c.offload_optimizer, c.offload_param, c.grad_ckpt) for c, _ in candidates(s)}
    # ZeRO-0: no offload; 1-2: optimizer offload or not; 3: optimizer and/or parameter offload; checkpointing both
    assert len(combos) == 2 * (1 + 2 + 2 + 4)
    assert all(micros == [1, 2, 3, 4, 6, 12] for _, micros in candidates(s))
    ptuning = {c.grad_ckpt for c, _ in candidates(replace(s, method="ptuning"))}
    assert ptuning == {False}  # peft refuses prefix tuning with checkpointing


def test_step_time_terms_by_hand():
    """The step-time model's terms (checks/memory.py step_time), recomputed here from its stated sources."""
    from dsdoctor.checks.memory import Rates, step_time

    s = replace(setup("llama-2-7b"), gpus=4, micro_batch=2, grad_accum=3, seq_len=1024, zero_stage=2)
    r = Rates(gpu_flops=100e12, mfu=0.5, pcie_bytes_per_s=20e9, intra_node_bus_bytes_per_s=50e9,
              cpu_adam_params_per_s=1e9)
    psi, L, h = s.total_params, s.arch.num_layers, s.arch.hidden_size
    tokens, rate = 2 * 1024 * 3, 50e12
    t = step_time(s, r)
    assert t["compute"] == pytest.approx(tokens * (6 * psi + 12 * L * h * 1024) / rate)
    assert t["recompute"] == pytest.approx(tokens * (2 * psi + 4 * L * h * 1024) / rate)
    # ZeRO-2: a reduce-scatter per micro step and one all-gather, (N-1)/N of the 16-bit gradients each
    assert t["communication"] == pytest.approx((3 + 1) * 0.75 * 2 * psi / 50e9)
    assert t["pcie"] == t["cpu_optimizer"] == 0
    z3 = step_time(replace(s, zero_stage=3, grad_accum=1), r)
    z2 = step_time(replace(s, grad_accum=1), r)
    assert z3["communication"] == pytest.approx(1.5 * z2["communication"])  # ZeRO paper section 7: 3 psi vs 2 psi
    off = step_time(replace(s, offload_optimizer="cpu"), r)
    # gradients to the host each micro step, back for the sum on the 2nd and 3rd, the updated weights back once
    assert off["pcie"] == pytest.approx((3 + 2 + 1) * 2 * psi / 4 / 20e9)
    assert off["cpu_optimizer"] == pytest.approx(psi / 1e9)
    par = step_time(replace(s, zero_stage=3, offload_optimizer="cpu", offload_param="cpu"), r)
    assert par["pcie"] == pytest.approx((3 + 2 * 3) * 2 * psi / 4 / 20e9)  # weight partition fetched twice a micro step
    lora = step_time(replace(s, method="lora", trainable_params=4_194_304, grad_ckpt=False), r)
    assert lora["compute"] < t["compute"] and lora["recompute"] == 0


def test_gradient_accumulation_from_the_deepspeed_config(runner, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 2}}))
    data, _ = run_json(runner, "--model", "llama-2-7b", "--deepspeed", str(cfg), "--gpus", "4", "--gpu-mem", "24")
    s = data["result"]["setup"]
    assert (s["micro_batch"], s["gradient_accumulation_steps"], s["global_batch"]) == (4, 2, 32)
    for change in data["result"]["what_to_change"]:
        ds = change.get("deepspeed")
        if ds:
            assert ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 4 == 32


# --- issue 12: no GPU here --------------------------------------------------------------------------------------------

def test_assumed_world_size_is_a_finding(runner):
    data, _ = run_json(runner, "--model", "chatglm-6b", "--method", "lora")
    mem508 = [f for f in data["findings"] if f["id"] == "MEM508"]
    assert mem508 and mem508[0]["severity"] == "warning"
    assert "world size 1" in mem508[0]["evidence"] and "no --gpus" in mem508[0]["evidence"]
    assert "--gpus N" in mem508[0]["fix"]
    assert data["result"]["setup"]["world_size_source"].startswith("1 GPU(s) per node: assumed")
    data, _ = run_json(runner, "--model", "chatglm-6b", "--method", "lora", "--gpus", "4")
    assert "MEM508" not in [f["id"] for f in data["findings"]]


def test_no_gpu_shows_the_cards_side_by_side_with_what_to_change(runner):
    """Without a GPU the verdict for a 24, 40, 80 and 141 GB card, and for each card the fastest setup that fits
    (it used to withhold the changes until --gpu-mem was given)."""
    data, _ = run_json(runner, "--model", "chatglm-6b", "--gpus", "4")
    result = data["result"]
    assert result["fits"] is None and not all(result["fits_by_card"].values())
    assert list(result["fits_by_card"]) == ["GeForce RTX 4090", "A100 40GB", "A100 80GB", "H200"]
    assert result["cards"]["H200"]["memory_bytes"] == 143771 * 2 ** 20  # NVML's total, one figure everywhere
    assert result["cards"]["GeForce RTX 4090"]["memory_bytes"] == 24564 * 2 ** 20
    for name, fits in result["fits_by_card"].items():
        best = result["best_change_by_card"][name]
        if not fits:
            assert best and best["fits"] and best["total_bytes"] <= result["cards"][name]["memory_bytes"]


def test_breakdown_shows_every_moment_of_the_step(runner):
    """The peak of a 6B full fine-tune is the optimizer step, where the activations are 0: each moment is shown and
    the terms alive at the peak are named."""
    data, _ = run_json(runner, "--model", "chatglm-6b", "--gpus", "8", "--gpu-mem", "80")
    result = data["result"]
    assert result["peak_phase"] == "step" and result["per_gpu_bytes"]["activations"] == 0
    by_phase = result["terms_by_phase_bytes"]
    assert set(by_phase) == {"loss", "backward", "step"}
    assert by_phase["loss"]["activations"] > 0 and by_phase["loss"]["logits_and_loss"] > 0
    assert sum(by_phase["step"].values()) == result["phases_bytes"]["step"] == result["allocated_bytes"]
    table = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", "--gpus", "8", "--gpu-mem", "80"]).stdout
    assert "step (peak)" in table and "(alive at the peak)" in table and "(not alive at the peak)" in table


def test_the_h200_has_one_memory_figure(runner):
    result = runner.invoke(cli, ["estimate", "--model", "chatglm-6b"])
    assert "141 GiB" not in result.stdout and "H200 (140.40 GiB)" in result.stdout
    data, _ = run_json(runner, "--model", "chatglm-6b")
    assert "H200 (140.40 GiB)" in data["findings"][0]["evidence"]
    from dsdoctor.hardware import gpu_from_name

    assert gpu_from_name("NVIDIA H200").memory_bytes == 143771 * 2 ** 20


# --- issue 12: GPU names as nvidia-smi prints them ------------------------------------------------------------------

@pytest.mark.parametrize("name,capability,memory_mib", [
    ("NVIDIA TITAN X (Pascal)", (6, 1), None), ("GeForce GTX TITAN X", (5, 2), None),
    ("NVIDIA A100-SXM4-80GB", (8, 0), 81920), ("NVIDIA A100-PCIE-40GB", (8, 0), 40960),
    ("NVIDIA A100 80GB PCIe", (8, 0), 81920), ("Tesla V100-SXM2-16GB", (7, 0), 16160),
    ("Tesla V100S-PCIE-32GB", (7, 0), 32510), ("NVIDIA GeForce RTX 4090", (8, 9), 24564),
    ("NVIDIA GeForce RTX 3090", (8, 6), 24576), ("NVIDIA H100 80GB HBM3", (9, 0), 81559),
    ("NVIDIA H200", (9, 0), 143771), ("Tesla T4", (7, 5), 15360), ("Tesla K80", (3, 7), None),
    ("Tesla K40m", (3, 5), None), ("GeForce GTX 680", (3, 0), None), ("NVIDIA GeForce RTX 3060 Laptop GPU", (8, 6), None),
    ("NVIDIA RTX 6000 Ada Generation", (8, 9), None), ("Quadro RTX 6000", (7, 5), None),
    ("NVIDIA RTX A6000", (8, 6), 49140), ("NVIDIA A800-SXM4-80GB", (8, 0), 81920), ("NVIDIA H20", (9, 0), 97871),
    ("NVIDIA GeForce RTX 4090 D", (8, 9), None), ("NVIDIA A10G", (8, 6), 23028), ("Tesla P100-PCIE-16GB", (6, 0), 16384),
    ("NVIDIA GeForce GTX 1080 Ti", (6, 1), 11264), ("rtx4090", (8, 9), 24564), ("1080ti", (6, 1), 11264),
    ("NVIDIA B200", (10, 0), 183359), ("NVIDIA L20", (8, 9), 46068), ("NVIDIA H800", (9, 0), 81559), ("NVIDIA GeForce RTX 5090", (12, 0), 32607), ("NVIDIA L40S", (8, 9), 46068),
])
def test_gpu_names_as_nvidia_smi_prints_them(name, capability, memory_mib):
    from dsdoctor.hardware import gpu_from_name

    gpu = gpu_from_name(name)
    assert gpu.capability == capability and gpu.capability_source.startswith(("developer.nvidia.com", "NVIDIA",
                                                                               "AWS", "Turing", "Kepler"))
    if memory_mib:
        assert gpu.memory_bytes == memory_mib * 2 ** 20 and "NVML total" in gpu.memory_source


def test_a_card_with_no_nvml_reading_is_counted_below_its_nominal_size():
    """A nominal "24 GB" is never taken as 24 GiB: NVML reports less on most cards (23028 MiB on an A10G, 15360 on a
    T4), so a card with no reading is counted at the least share of its nominal size that any reading shows."""
    from dsdoctor.hardware import GIB, MEMORY_GB, NVML_MIB, gpu_from_name, nominal_ratio

    shares = [mib / ((size or MEMORY_GB[name][0]) * 1024) for (name, size), (mib, _) in NVML_MIB.items()]
    ratio = nominal_ratio()
    assert ratio == min(shares) and 0.9 < ratio <= 23028 / (24 * 1024)
    titan = gpu_from_name("NVIDIA TITAN RTX")  # 24 GB, no reading on record
    assert titan.memory_bytes == int(24 * GIB * ratio) < 23028 * 2 ** 20
    assert "no reading of this card" in titan.memory_source and "--gpu-mem" in titan.memory_source


def test_every_table_name_resolves_with_nvidia_smi_decorations():
    from dsdoctor.hardware import _index, gpu_from_name, known_names

    assert len(known_names()) > 200
    exact, _ = _index()
    by_name = {name: cc for name, cc, _ in exact.values()}
    for name in known_names():
        assert gpu_from_name(name).capability == by_name[name], name
        assert gpu_from_name("NVIDIA " + name + " (TM)").capability == by_name[name], name
    capabilities = set(by_name.values())
    assert {(3, 0), (3, 5), (3, 7), (5, 0), (5, 2), (6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0),
            (10, 0), (12, 0)} <= capabilities  # every architecture since Kepler


@pytest.mark.parametrize("name,cc,message", [
    ("Voodoo 5", None, "unknown GPU"), ("A1000", None, "close names: A100"), ("Titan X", None, "TITAN X (Pascal)"),
    ("V100", "6.1", "contradicts the V100's compute capability 7.0"), ("Foo", "9.0a", "MAJOR.MINOR"),
    ("Foo", "abc", "MAJOR.MINOR"), ("Foo", "99.0", "MAJOR.MINOR"), ("", None, "--gpu is empty"),
])
def test_bad_gpu_names_and_capabilities(name, cc, message):
    from dsdoctor.hardware import gpu_from_name
    from dsdoctor.report import DsdoctorError

    with pytest.raises(DsdoctorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gpu_from_name(name, cc)


def test_gpu_cc_names_a_card_the_table_lacks():
    from dsdoctor.hardware import gpu_from_name

    gpu = gpu_from_name("NVIDIA Quadro P9999 Prototype", "6.1")
    assert gpu.capability == (6, 1) and gpu.source == "--gpu-cc" and not gpu.bf16
    assert gpu_from_name("A100", "8.0").capability == (8, 0)  # agreeing with the table is fine
    assert gpu_from_name(None, "7.5").name == "a GPU of compute capability 7.5"


def test_check_accepts_the_name_nvidia_smi_prints(runner, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}))
    result = runner.invoke(cli, ["check", str(cfg), "--gpu", "NVIDIA TITAN X (Pascal)", "--json", "-"])
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["result"]["gpu"]["compute_capability"] == "6.1"
    assert "DS111" in [f["id"] for f in data["findings"]]  # bf16 below 8.0
    result = runner.invoke(cli, ["check", str(cfg), "--gpu", "NVIDIA Foo 9000", "--gpu-cc", "6.1", "--json", "-"])
    assert result.exit_code == 1 and json.loads(result.stdout)["result"]["gpu"]["compute_capability"] == "6.1"
    result = runner.invoke(cli, ["check", str(cfg), "--gpu", "NVIDIA Foo 9000"])
    assert result.exit_code == 2 and "--gpu-cc" in result.stderr and result.stderr.count("\n") == 1


def test_estimate_takes_the_gpu_by_name(runner):
    data, _ = run_json(runner, "--model", "qwen2.5-7b", "--method", "lora", "--gpu", "NVIDIA A100-SXM4-80GB",
                       "--gpus", "1")
    assert data["result"]["gpu_memory_bytes"] == 81920 * 2 ** 20
    assert data["result"]["gpu"]["compute_capability"] == "8.0"
    assert "A100" in data["result"]["step_time_basis"]
    data, _ = run_json(runner, "--model", "qwen2.5-7b", "--method", "lora", "--gpu", "Tesla V100-SXM2-16GB",
                       "--gpus", "1", "--precision", "bf16")
    assert "DS111" in [f["id"] for f in data["findings"]]  # --precision bf16 given on a 7.0 card
    result = runner.invoke(cli, ["estimate", "--model", "qwen2.5-7b", "--gpu", "A100"])
    assert result.exit_code == 2 and "40 GB or 80 GB" in result.stderr
    data, _ = run_json(runner, "--model", "qwen2.5-7b", "--method", "lora", "--gpu", "Foo", "--gpu-cc", "7.5",
                       "--gpu-mem", "16", "--gpus", "1", "--precision", "bf16")
    assert data["result"]["gpu"]["compute_capability"] == "7.5" and "DS111" in [f["id"] for f in data["findings"]]
    result = runner.invoke(cli, ["estimate", "--model", "qwen2.5-7b", "--gpu-cc", "7.5"])
    assert result.exit_code == 2 and "--gpu-cc goes with --gpu" in result.stderr


# --- issue 12: internal errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,key", [("qwen2.5-0.5b", "max_position_embeddings"), ("chatglm3-6b", "seq_length"),
                                      ("gpt-j-6b", "n_positions"), ("gpt-j-6b", "n_inner"),
                                      ("chatglm-6b", "max_sequence_length"), ("qwen-7b", "seq_length"),
                                      ("baichuan2-7b", "model_max_length")])
def test_a_string_size_in_config_json_is_one_line(runner, tmp_path, name, key):
    (tmp_path / "config.json").write_text(json.dumps({**REGISTRY[name][1], key: "4096"}))
    result = runner.invoke(cli, ["estimate", "--model", str(tmp_path), "--gpu-mem", "80"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"{key} must be a positive integer, got '4096'" in result.stderr


@pytest.mark.parametrize("block,precision", [({"bf16": {"loss_scale": 0}}, "fp32"),
                                             ({"bf16": {"immediate_grad_update": True}, "fp16": {"enabled": True}},
                                              "fp16"),
                                             ({"fp16": {"enabled": "true"}}, "fp16"),
                                             ({"bf16": {"enabled": "auto"}}, "bf16"),
                                             ({"bfloat16": {"enabled": 1}}, "bf16")])
def test_precision_blocks_as_deepspeed_reads_them(runner, tmp_path, block, precision):
    """A bf16 block without "enabled" gave a KeyError: DeepSpeed's default is false (precision_config.py), and its
    booleans are pydantic's ("true", 1)."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **block}))
    data, _ = run_json(runner, "--model", "qwen2.5-0.5b", "--deepspeed", str(cfg), "--gpu-mem", "80", "--gpus", "1")
    assert data["result"]["setup"]["precision"] == precision


@pytest.mark.parametrize("args", [
    ["--gpus", "1" + "0" * 400], ["--lora-r", "1" + "0" * 400, "--method", "lora"],
    ["--prefix-tokens", "1" + "0" * 400, "--method", "ptuning", "--no-grad-ckpt"], ["--nodes", "1" + "0" * 400],
    ["--micro-batch", "-" + "9" * 400], ["--grad-accum", "1e400"], ["--lora-dropout", "nan"], ["--host-mem", "-inf"],
])
def test_huge_flags_are_a_short_usage_error(runner, args):
    result = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", *args])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "internal error" not in result.stderr
    assert len(result.stderr) < 300, result.stderr


@pytest.mark.parametrize("zero", [{"stage": 2, "reduce_bucket_size": 1e308}, {"stage": 3, "sub_group_size": 1e308},
                                  {"stage": 3, "stage3_max_live_parameters": 1e308}, {"stage": 10 ** 30},
                                  {"stage": 2, "overlap_comm": "sometimes"}])
def test_huge_or_odd_zero_values_are_one_line(runner, tmp_path, zero):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": zero}))
    result = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", "--deepspeed", str(cfg), "--gpu-mem", "80"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "zero_optimization." in result.stderr
    assert len(result.stderr) < 300 and "internal error" not in result.stderr


def test_huge_micro_batch_in_the_config_is_one_short_line(runner, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1e308}')
    result = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", "--deepspeed", str(cfg), "--gpu-mem", "80"])
    assert result.exit_code == 2 and "train_micro_batch_size_per_gpu" in result.stderr and len(result.stderr) < 300


def test_meta_count_path_prints_only_our_line(tmp_path):
    """transformers logged "[transformers] Model config: pad_token_id must be ..." before our error line."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**REGISTRY["qwen2.5-0.5b"][1], "num_experts": 4,
                                                   "pad_token_id": 999_999}))
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "estimate", "--model", str(model), "--gpu-mem", "24"],
                          capture_output=True, text=True, env={**__import__("os").environ,
                                                               "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("dsdoctor: error: transformers cannot build"), \
        proc.stderr


def test_no_offload_is_proposed_beyond_the_hosts_ram(runner):
    """A 7B full fine-tune on one 80 GiB GPU: optimizer offload fits the GPU but needs about 150 GiB of host RAM
    (16 bytes x 6.7 B x 1.5 for pinned buffers); on a 64 GiB host it is not proposed."""
    data, _ = run_json(runner, "--model", "llama-2-7b", "--gpus", "1", "--gpu-mem", "80")
    assert any("offload_optimizer cpu" in c["change"] for c in data["result"]["what_to_change"])
    data, _ = run_json(runner, "--model", "llama-2-7b", "--gpus", "1", "--gpu-mem", "80", "--host-mem", "64")
    changes = data["result"]["what_to_change"]
    assert not any("offload_optimizer cpu" in c["change"] for c in changes)
    assert any(c["change"].startswith("LoRA") and c["fits"] for c in changes)  # nothing else fits there


def test_phases_bytes_are_gib_in_the_table(runner):
    """phases_bytes was printed as raw bytes in the table (render.py, 1206fad, shows a dict under a *_bytes key in
    GiB)."""
    import re

    out = runner.invoke(cli, ["estimate", "--model", "chatglm-6b", "--gpus", "1", "--gpu-mem", "80"]).stdout
    line = next(l for l in out.splitlines() if l.strip().startswith("phases_bytes"))
    assert "step 126.73 GiB" in line and not re.search(r"\d{9,}", line)  # engine loop: held logits 0.24 GiB


def test_ptuning_gets_no_checkpointing_by_default_as_smoke_does():
    """newcomer trial: `estimate --method ptuning` failed with MEM507 because of estimate's own --grad-ckpt default,
    while smoke and the reference trainer turn checkpointing off for ptuning."""
    from click.testing import CliRunner

    from dsdoctor.cli import cli

    result = CliRunner().invoke(cli, ["estimate", "--model", "chatglm3-6b", "--method", "ptuning", "--format", "json"])
    data = json.loads(result.stdout)
    assert "MEM507" not in [f["id"] for f in data["findings"]] and data["result"]["setup"]["grad_ckpt"] is False
    asked = CliRunner().invoke(cli, ["estimate", "--model", "chatglm3-6b", "--method", "ptuning", "--grad-ckpt",
                                     "--format", "json"])
    assert "MEM507" in [f["id"] for f in json.loads(asked.stdout)["findings"]]  # asked for: still an error


def test_default_precision_is_not_the_users_error_on_a_v100(runner):
    """Newcomer trial (issue 12's repeat): `estimate --gpu V100` without --precision got DS111 "--precision bf16 on
    V100" and exit 1, blaming the user for our default. Without --precision it is fp16 there, with a note; an
    explicit --precision bf16 is still DS111."""
    data, code = run_json(runner, "--model", "qwen3-8b", "--gpu", "Tesla V100-SXM2-32GB", "--method", "lora")
    assert code == 0 and "DS111" not in [f["id"] for f in data["findings"]]
    assert any("precision fp16: V100 32GB (compute capability 7.0)" in n for n in data["result"]["notes"])
    data, code = run_json(runner, "--model", "qwen3-8b", "--gpu", "Tesla V100-SXM2-32GB", "--method", "lora",
                          "--precision", "bf16")
    assert code == 1 and "DS111" in [f["id"] for f in data["findings"]]


def test_flags_beside_a_deepspeed_file_are_used_and_said(runner, tmp_path):
    """Newcomer trial (repeat): with the first tutorial's file (train_batch_size 32, gradient_accumulation_steps 4,
    no micro batch) on 4 GPUs, `--grad-accum 2` was replaced by 1 and the micro batch became 8 (a setup neither the
    file nor the flag describes), and `--zero 3` overrode the file silently. A flag now enters DeepSpeed's
    derivation and the report says it replaced the file's value; a flag that makes a triple DeepSpeed refuses is
    one line, exit 2."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 32, "gradient_accumulation_steps": 4,
                                "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    base = ["--model", "qwen3-8b", "--method", "lora", "--deepspeed", str(path), "--gpus", "4", "--gpu-mem", "24"]
    data, _ = run_json(runner, *base)
    assert data["result"]["setup"]["micro_batch"] == 2 and data["result"]["setup"]["gradient_accumulation_steps"] == 4
    data, _ = run_json(runner, *base, "--grad-accum", "2")
    assert (data["result"]["setup"]["micro_batch"], data["result"]["setup"]["gradient_accumulation_steps"]) == (4, 2)
    assert any("--grad-accum 2 (command line) instead of" in n for n in data["result"]["notes"])
    assert any("micro batch 4: train_batch_size 32 / (gradient_accumulation_steps 2 x world size 4)" in n
               for n in data["result"]["notes"])
    data, _ = run_json(runner, *base, "--zero", "3")
    assert data["result"]["setup"]["zero_stage"] == 3
    assert any("--zero 3 (command line) instead of" in n for n in data["result"]["notes"])
    result = runner.invoke(cli, ["estimate", *base, "--micro-batch", "4"])
    assert result.exit_code == 2 and "DeepSpeed refuses that triple" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["1e12", "0", "-3", "nan", "inf"])
def test_gpu_mem_out_of_range_says_the_range(runner, value):
    """Newcomer trial (repeat): `--gpu-mem 1e12` said "must be a positive number of GiB" of a positive number."""
    result = runner.invoke(cli, ["estimate", "--model", "qwen3-8b", "--gpu-mem", value])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"dsdoctor: error: --gpu-mem must be a number of GiB above 0 and below 100,000 (a GPU's memory), got {value}"]


def test_full_fine_tuning_of_a_model_without_default_lora_targets_is_estimated(runner):
    """DeepSeek-V2-Lite has no default LoRA targets (peft has none for deepseek_v2): a full fine-tune must not
    exit 2 for want of them, and the LoRA suggestion when nothing fits takes peft's all-linear."""
    from dsdoctor.checks.memory import training_changes
    from dsdoctor.commands.estimate import build_setup

    data, code = run_json(runner, "--model", "deepseek-v2-lite", "--micro-batch", "16", "--gpu-mem", "24")
    assert code == 1 and data["result"]["fits"] is False
    setup, _, _ = build_setup("deepseek-v2-lite", "full", 8, None, 2, 16, 0.05, 2, "none", "none", 1, 1, 16, 1024,
                              True, "bf16")
    lora = next(c for c in training_changes(setup, 24 * GIB) if c["change"].startswith("LoRA"))
    assert lora["change"] == "LoRA r=8 on all-linear"


def test_lora_on_a_model_type_peft_has_no_default_targets_for_is_a_finding():
    """Qwen1.5-MoE (qwen2_moe): peft's LoraConfig without target_modules raises there (the H200 run of
    benchmarks/results/memory-loops/points-r7 stopped so); the estimate says it as MEM510, not only in its counting
    line, and not when the targets are given or peft has a default (Qwen3)."""
    def ids(*args):
        out = CliRunner().invoke(cli, ["estimate", "--model", *args, "--method", "lora", "--gpu-mem", "140",
                                       "--json", "-"])
        data = json.loads(out.output)
        return {f["id"]: f for f in data["findings"]}, data["result"]

    found, result = ids("qwen1.5-moe-a2.7b")
    assert "qwen2_moe" in found["MEM510"]["evidence"] and found["MEM510"]["severity"] == "warning"
    assert result["setup"]["lora_targets"] == ["q_proj", "v_proj"]
    assert "MEM510" not in ids("qwen1.5-moe-a2.7b", "--lora-targets", "q_proj,k_proj")[0]
    assert "MEM510" not in ids("qwen3-8b")[0]
    # Gemma-3-12B is Gemma3ForConditionalGeneration: peft looks up its config's "gemma3", which has no default
    # (its text config's "gemma3_text" has one); peft raised on the H200 (points-r13), Gemma-3-1B's gemma3_text trained
    assert "'gemma3'" in ids("gemma-3-12b-pt")[0]["MEM510"]["evidence"]
    assert "MEM510" not in ids("gemma-3-1b-pt")[0]


def test_every_shipped_lora_default_is_peft_own_for_the_models_config():
    """The default targets each shipped structure records are peft's table at the built model's own model_type
    (what ``_prepare_adapter_config`` reads), never its text config's."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as table

    from dsdoctor.models import structure

    shipped = structure.shipped_structures()
    assert {name: row["lora_default"] for name, row in shipped.items()} == {
        name: list(table.get(row["model_type"], ())) for name, row in shipped.items()}


def test_zero3_without_replay_says_how_far_the_formulas_were_off_held_out(runner):
    """ZeRO-3's allocator slack is the calibrated formulas' weakest term (rounds 7-10: 10 of 16 held-out ZeRO-3 runs
    within 5%, at most 7.2% off); the estimate says so and points at --replay, and only at ZeRO-3."""
    z3, _ = run_json(runner, "--model", "qwen3-8b", "--method", "lora", "--zero", "3")
    z2, _ = run_json(runner, "--model", "qwen3-8b", "--method", "lora", "--zero", "2")
    note = [n for n in z3["result"]["notes"] if n.startswith("ZeRO-3: the allocator slack")]
    assert len(note) == 1 and "within 5% of what nvidia-smi showed on 10, at most 7.2% off" in note[0]
    assert "--replay" in note[0] and "within 2.2% on each of them" in note[0]
    assert not any(n.startswith("ZeRO-3: the allocator slack") for n in z2["result"]["notes"])


# --- sizes no model can have, encoders, and the JSON of a refusal (found by a new-user pass) ------------------------

@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 0}, "hidden_size must be a positive integer, got 0"),
    ({"intermediate_size": 0}, "intermediate_size must be a positive integer, got 0"),
    ({"hidden_size": 4096.0}, "hidden_size must be a positive integer, got 4096.0"),
    ({"vocab_size": "151936"}, "vocab_size must be a positive integer, got '151936'"),
    ({"num_hidden_layers": 1_000_000}, "num_hidden_layers = 1,000,000 is not a real model's size (at most 1,000)"),
    ({"num_key_value_heads": 5}, "num_attention_heads = 32 is not a multiple of num_key_value_heads = 5"),
    ({"num_experts_per_tok": -1}, "num_experts_per_tok must be a positive integer, got -1"),
])
def test_sizes_no_model_can_have_are_one_line_before_any_path(runner, tmp_path, change, message):
    """Qwen3-8B's config.json (the shipped structure's path), changed in one size: before, hidden_size 0 took the
    structure path and was called "a state-space model?", OLMo-2's gave transformers' raw ZeroDivisionError,
    intermediate_size 0 and 5 key/value heads of 32 got a normal estimate, and a million layers took 203 s."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**REGISTRY["qwen3-8b"][1], **change}))
    result = runner.invoke(cli, ["estimate", "--model", str(model), "--method", "lora"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_text_config_sizes_are_checked_and_valid_per_layer_lists_pass(tmp_path):
    from dsdoctor.models.analytic import check_sizes
    from dsdoctor.report import DsdoctorError

    with pytest.raises(DsdoctorError, match=r"text_config\.num_attention_heads = 8 is not a multiple of "
                                            r"text_config\.num_key_value_heads = 3"):
        check_sizes({"model_type": "gemma3", "text_config": {"num_attention_heads": 8, "num_key_value_heads": 3}}, "x")
    check_sizes({"intermediate_size": [8192, 8192, 16384], "num_experts": 0, "head_dim": None}, "x")  # no error
    with pytest.raises(DsdoctorError, match=r"intermediate_size must be a positive integer"):
        check_sizes({"intermediate_size": [8192, 0]}, "x")


def test_every_registry_row_passes_the_size_check():
    from dsdoctor.models.analytic import check_sizes

    for name, (_, config) in REGISTRY.items():
        check_sizes(config, name)  # raises on a row no model could have


def test_an_encoder_is_refused_in_one_line_a_bert_decoder_is_not(runner, tmp_path):
    """BERT as published (BertForMaskedLM) was estimated as transformers' BertLMHeadModel, a decoder it is not; README
    says an encoder gets one line and exit 2. With is_decoder true it is a causal LM and is counted."""
    bert = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "intermediate_size": 3072,
            "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 30522, "max_position_embeddings": 512,
            "type_vocab_size": 2}
    model = tmp_path / "bert"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(bert))
    result = runner.invoke(cli, ["estimate", "--model", str(model), "--method", "lora"])
    assert result.exit_code == 2 and "is an encoder or encoder-decoder (transformers' BertForMaskedLM)" in \
        result.stderr
    (model / "config.json").write_text(json.dumps({**bert, "is_decoder": True}))
    data, _ = run_json(runner, "--model", str(model), "--method", "lora", "--gpu-mem", "80")
    assert data["result"]["total_params"] == 109_514_298  # BertLMHeadModel at these sizes, as built on the meta device


def test_a_refusal_under_json_is_still_json(runner, tmp_path):
    result = runner.invoke(cli, ["estimate", "--model", "no-such-model-xyz", "--json", "-"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["command"] == "estimate" and data["findings"] == [] and data["result"] == {}
    assert data["error"].startswith("--model no-such-model-xyz: unknown model name")
    out = tmp_path / "report.json"
    result = runner.invoke(cli, ["estimate", "--model", "no-such-model-xyz", "--json", str(out)])
    assert result.exit_code == 2 and json.loads(out.read_text())["error"] == data["error"]
    # a --json PATH that guard_outputs refuses (the model's own config.json) is never written
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(REGISTRY["qwen3-8b"][1]))
    before = (model / "config.json").read_text()
    result = runner.invoke(cli, ["estimate", "--model", str(model), "--json", str(model / "config.json")])
    assert result.exit_code == 2 and (model / "config.json").read_text() == before


def test_a_dated_release_is_not_taken_for_an_older_architecture(runner):
    """GLM-4-9B-0414 is transformers' glm4 (q_proj, v_proj), not the chatglm-format glm-4-9b: never counted as it.
    A date after a post-training word still names its base (Qwen3-30B-A3B-Instruct-2507 is qwen3-30b-a3b)."""
    from dsdoctor.models import registry_key

    assert registry_key("THUDM/GLM-4-9B-0414") is None
    assert registry_key("Qwen/Qwen3-30B-A3B-Instruct-2507") == "qwen3-30b-a3b"
    assert registry_key("Qwen/Qwen3-4B-Thinking-2507") == "qwen3-4b"
    result = runner.invoke(cli, ["estimate", "--model", "THUDM/GLM-4-9B-0414", "--method", "lora"])
    assert result.exit_code == 2 and "not a known model name" in result.stderr


def test_a_zero3_peak_at_initialize_is_fixed_by_zero_init_not_more_gpus(runner):
    """Llama-3.3-70B LoRA, ZeRO-3 on 8 A100 80GB in the engine loop: deepspeed.initialize moves the whole 16-bit model
    to each GPU (131 GiB) before partitioning; more GPUs cannot help, zero.Init does (the Trainer's path)."""
    data, _ = run_json(runner, "--model", "llama-3.3-70b", "--method", "lora", "--zero", "3", "--gpus", "8",
                       "--gpu", "A100 80GB")
    (mem501,) = [f for f in data["findings"] if f["id"] == "MEM501"]
    assert "(peak at initialize)" in mem501["evidence"]
    assert mem501["fix"].startswith("build the model under ZeRO-3's zero.Init")
    peak = float(mem501["fix"].rsplit("the peak is ", 1)[1].split(" GiB")[0])
    trainer, _ = run_json(runner, "--model", "llama-3.3-70b", "--method", "lora", "--zero", "3", "--gpus", "8",
                          "--gpu", "A100 80GB", "--launch", "trainer")
    assert peak < 80 and abs(peak - trainer["result"]["per_gpu_bytes"]["total"] / 2 ** 30) < 3


def test_nvme_offload_is_not_counted_as_host_ram(runner):
    args = ["--model", "qwen3-8b", "--zero", "3", "--gpus", "8", "--gpu-mem", "80", "--host-mem", "256"]
    nvme, _ = run_json(runner, *args, "--offload-optimizer", "nvme", "--offload-param", "nvme")
    cpu, _ = run_json(runner, *args, "--offload-optimizer", "cpu", "--offload-param", "cpu")
    assert nvme["result"]["host_bytes"]["offload_per_node"] == 0
    assert nvme["result"]["host_bytes"]["nvme_per_node"] == cpu["result"]["host_bytes"]["offload_per_node"] > 0
    assert "MEM504" not in [f["id"] for f in nvme["findings"]]
    assert "MEM504" in [f["id"] for f in cpu["findings"]]


def test_a_quantized_checkpoint_is_named_as_counted_at_16_bits(runner, tmp_path):
    """Qwen3-8B's config.json with bitsandbytes 4-bit (QLoRA): the weights were counted at 16 bits without a word;
    MEM513 names it with the 16-bit and the 4-bit sizes. No quantization_config: no MEM513."""
    from dsdoctor.models import REGISTRY

    config = dict(REGISTRY["qwen3-8b"][1], quantization_config={"quant_method": "bitsandbytes",
                                                                  "load_in_4bit": True})
    (tmp_path / "config.json").write_text(json.dumps(config))
    data, _ = run_json(runner, "--model", str(tmp_path), "--method", "lora", "--gpu-mem", "24", "--gpus", "1")
    (mem513,) = [f for f in data["findings"] if f["id"] == "MEM513"]
    assert mem513["evidence"] == ("quantization_config: bitsandbytes, 4-bit; the estimate counts the weights at 16 "
                                  "bits: 15.26 GiB in all; at 4 bits they would take about 3.82 GiB in all (every "
                                  "parameter quantized: a lower bound)")
    plain, _ = run_json(runner, "--model", "qwen3-8b", "--method", "lora", "--gpu-mem", "24", "--gpus", "1")
    assert "MEM513" not in [f["id"] for f in plain["findings"]]


def test_parameter_offload_widens_the_band_below_the_card(runner):
    """ZeRO-3 with parameter offload: the formulas' allocator slack was under on all ten runs on record (by up to
    14.1%), so an estimate up to 15% below the card is "tight" (MEM502) there, and 8% everywhere else."""
    from dataclasses import replace

    from dsdoctor.checks.memory import TIGHT_PARAM_OFFLOAD, verdict
    from dsdoctor.commands.estimate import build_setup

    setup, _, _ = build_setup("qwen3-4b", "full", 8, None, 2, 16, 0.05, 3, "cpu", "cpu", 1, 1, 8, 2048, True, "bf16",
                              launch="trainer")
    gpu = 100 * 2 ** 30
    assert TIGHT_PARAM_OFFLOAD == 0.15
    assert verdict(int(0.88 * gpu), gpu, setup) == "tight"
    assert verdict(int(0.88 * gpu), gpu, replace(setup, offload_param="none")) == "fits"
    assert verdict(int(0.88 * gpu), gpu) == "fits" and verdict(int(0.84 * gpu), gpu, setup) == "fits"
    assert verdict(int(1.05 * gpu), gpu, setup) == "tight" and verdict(int(1.09 * gpu), gpu, setup) == "no"
    args = ["estimate", "--model", "qwen3-4b", "--method", "full", "--zero", "3", "--offload-optimizer", "cpu",
            "--gpus", "1", "--micro-batch", "26", "--seq-len", "2048", "--launch", "trainer", "--gpu", "H200",
            "--format", "json"]
    with_param = json.loads(runner.invoke(cli, args + ["--offload-param", "cpu"]).output)
    total = with_param["result"]["per_gpu_bytes"]["total"] / with_param["result"]["gpu_memory_bytes"]
    assert 0.85 < total < 0.92  # fits by 8%, not by 15%
    ids = [f["id"] for f in with_param["findings"]]
    assert "MEM502" in ids and "MEM500" not in ids
    evidence = next(f["evidence"] for f in with_param["findings"] if f["id"] == "MEM502")
    assert "up to 15% under with ZeRO-3 parameter offload" in evidence


def test_keeping_only_the_loss_is_a_change_when_nothing_else_fits(runner):
    """Micro batch 1 at sequence 32768: no ZeRO stage, offload or checkpointing fits 88 GiB, but the engine loop's
    held logits (MEM509) are 9.28 GiB: keeping only the loss fits, with the same step time, and is the fix (it was
    'no setup of this model, method and batch fits')."""
    args = ["estimate", "--model", "qwen2.5-7b", "--method", "lora", "--zero", "3", "--gpus", "8", "--micro-batch",
            "1", "--seq-len", "32768", "--gpu-mem", "88", "--format", "json"]
    data = json.loads(runner.invoke(cli, args).output)
    first = next(f for f in data["findings"] if f["id"] == "MEM501")
    assert first["fix"].startswith("keep only the loss in the loop (`loss = engine(**batch).loss`)")
    row = data["result"]["what_to_change"][0]
    assert row["change"] == "keep only the loss in the loop (`loss = engine(**batch).loss`)" and row["fits"]
    assert row["vs_current"] == 1.0
    lean = json.loads(runner.invoke(cli, args[:-2] + ["--launch", "engine-loss", "--format", "json"]).output)
    assert row["total_bytes"] == lean["result"]["per_gpu_bytes"]["total"]


def test_a_misspelled_lora_target_beside_a_right_one_is_refused_not_silently_skipped(runner):
    """A new user's trial: --lora-targets q_proj,foo gave q_proj's count with no word of foo. peft refuses only
    when no target matches (tuners_utils.py), so the run would train q_proj alone: one line, exit 2, saying so.
    An empty --lora-targets is refused too, not read as peft's defaults."""
    result = runner.invoke(cli, ["estimate", "--model", "qwen3-8b", "--method", "lora", "--lora-targets",
                                 "q_proj,foo", "--gpus", "1", "--gpu-mem", "80"])
    assert result.exit_code == 2
    assert "--lora-targets foo: not a module peft can wrap in qwen3-8b" in result.output
    assert "peft would silently skip it and train q_proj alone" in result.output
    result = runner.invoke(cli, ["estimate", "--model", "qwen3-8b", "--method", "lora", "--lora-targets=",
                                 "--gpus", "1", "--gpu-mem", "80"])
    assert result.exit_code == 2 and "--lora-targets is empty" in result.output
    good, _ = run_json(runner, "--model", "qwen3-8b", "--method", "lora", "--lora-targets", "q_proj", "--gpus", "1",
                    "--gpu-mem", "80")
    assert good["result"]["trainable_params"] == 36 * 8 * (4096 + 4096)


def test_an_option_the_method_does_not_read_is_said_not_silently_dropped(runner):
    """A new user's trial: --lora-r 4 with --method full ran without a word."""
    data, _ = run_json(runner, "--model", "qwen3-8b", "--method", "full", "--lora-r", "4", "--freeze-last", "3",
                       "--gpus", "8", "--gpu-mem", "80")
    assert ("--lora-r, --freeze-last: not used with --method full (--lora-r is for --method lora; --freeze-last is "
            "for --method freeze)") in data["result"]["notes"]
    data, _ = run_json(runner, "--model", "qwen3-8b", "--method", "lora", "--lora-r", "4", "--gpus", "8",
                       "--gpu-mem", "80")
    assert not [n for n in data["result"]["notes"] if "not used with" in n]


def test_with_no_gpu_given_a_card_within_the_band_is_a_warning_not_fits_every_card(runner):
    """A new user's trial: 22.64 GiB per GPU was "fits every card listed" (MEM500) beside an RTX 4090's 23.99 GiB
    (94%), where `--gpu "RTX 4090"` gives MEM502. Side by side, a card within the band is now MEM502 too."""
    data, _ = run_json(runner, "--model", "qwen2.5-7b", "--method", "lora", "--lora-r", "16", "--lora-targets",
                       "q_proj,k_proj,v_proj,o_proj", "--seq-len", "2048", "--zero", "3", "--offload-optimizer", "cpu",
                       "--offload-param", "cpu", "--no-grad-ckpt", "--gpus", "8")
    mem = {f["id"]: f for f in data["findings"] if f["id"].startswith("MEM5")}
    assert "MEM500" not in mem and mem["MEM502"]["severity"] == "warning"
    assert "GeForce RTX 4090 (23.99 GiB)" in mem["MEM502"]["evidence"] and "MEM511" not in mem
    small, _ = run_json(runner, "--model", "qwen3-0.6b", "--method", "lora", "--gpus", "8")
    assert [f["id"] for f in small["findings"] if f["id"].startswith("MEM50")] == ["MEM500"]
