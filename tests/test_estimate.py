"""`dsdoctor estimate`: the arithmetic against what an H200 really measured (benchmarks/results/memory-accuracy),
ZeRO partitioning over N GPUs, the command's options and JSON, --deepspeed, --compare, and bad input."""

from __future__ import annotations

import json
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

#: Measured points the estimate is known to miss, and why (benchmarks/results/memory-accuracy/README.md).
KNOWN_MISSES = {"v2-q15-full-z3-offload-both": "ZeRO-3 with parameter offload: one run, 27% under; not modelled"}


@pytest.mark.parametrize("path", POINTS, ids=[p.stem for p in POINTS])
def test_estimate_matches_the_h200_measurement(path):
    """Each grid point measured on the H200: peak allocated within 2.5%, what nvidia-smi showed within 7%, and the
    fits/OOM verdict right (the run's own 139.8 GiB)."""
    known_miss = path.stem in KNOWN_MISSES  # then only the verdict is asserted
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from memory_accuracy import predict

    record = json.loads(path.read_text())
    est, _, _ = predict(record["point"])
    assert (est.total > record["gpu_total"]) == record["oom"]
    if not record["oom"] and not known_miss:
        assert abs(est.allocated - record["peak_allocated"]) <= 0.025 * record["peak_allocated"]
        assert abs(est.total - record["nvml_used"]) <= 0.07 * record["nvml_used"]
        assert record["trainable_params"] == record["dsdoctor_trainable_params"]


def test_grid_has_the_points_the_issue_asks_for():
    points = [json.loads(p.read_text())["point"] for p in POINTS]
    assert len(points) >= 15
    assert {p["zero"] for p in points} == {0, 1, 2, 3}
    assert {p["method"] for p in points} >= {"full", "lora", "freeze"}
    assert any(p.get("offload_optimizer", "none") != "none" for p in points)
    assert any(json.loads(p.read_text())["oom"] for p in POINTS)
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
    assert [f["id"] for f in data["findings"]] == ["MEM500", "MEM508", "MEM506"]
    terms = data["result"]["per_gpu_bytes"]
    assert terms["logits_and_loss"] == 16 * 2048 * 151936 * 12  # fp32 log-softmax output and two gradients


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
    (["--model", "qwen2-7b", "--gpu-mem", "-8"], "positive number of GiB"),
    (["--model", "qwen2-7b", "--offload-param", "cpu"], "needs --zero 3"),
    (["--model", "qwen2-7b", "--zero", "0", "--offload-optimizer", "cpu"], "ZeRO-1 or above"),
    (["--model", "qwen2-7b", "--method", "freeze", "--freeze-last", "99"], "between 1 and 28"),
    (["--model", "qwen2-7b", "--method", "lora", "--lora-targets", "query_key_value"], "not a linear layer"),
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
    assert code == 0 and data["findings"][0]["severity"] == "info"  # too big for 24 GiB only


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
