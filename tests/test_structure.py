"""Issue 13: every architecture transformers implements, read off its model on the meta device
(dsdoctor.models.structure), and the 2025-2026 registry. Counts are checked against transformers and peft themselves;
the general activation formulas against the family formulas that were calibrated on the H200."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsdoctor.checks import memory as mem
from dsdoctor.models import REGISTRY, arch_from_config, resolve_arch, trainable_params
from dsdoctor.models.analytic import is_analytic
from dsdoctor.models.registry import PUBLISHED
from dsdoctor.report import DsdoctorError


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_2026_row_counts_its_published_parameters(name):
    assert resolve_arch(name).total_params == PUBLISHED[name][0]


def test_registry_names_need_neither_torch_nor_transformers():
    """The shipped structures make a registry name fast: no torch or transformers import (about 4.5 s)."""
    code = ("import sys; from dsdoctor.models import resolve_arch; from dsdoctor.models.registry import REGISTRY\n"
            "[resolve_arch(n) for n in REGISTRY]\n"
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_issue_list_is_in_the_registry():
    wanted = {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b",
              "llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b", "gemma-2-2b", "gemma-2-9b",
              "gemma-2-27b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "glm-4-9b-hf", "phi-3-mini",
              "phi-4-mini", "mistral-nemo-12b", "deepseek-r1-distill-qwen-7b", "deepseek-r1-distill-qwen-14b",
              "deepseek-r1-distill-llama-8b", "yi-1.5-9b", "internlm2.5-7b"}
    from dsdoctor.models import registry_key

    for name in wanted:
        assert registry_key(name) in REGISTRY, name
        assert resolve_arch(name).total_params > 5e8, name
    with pytest.raises(DsdoctorError, match="did you mean qwen3-8b"):
        resolve_arch("qwen3-8")


def test_shipped_structures_are_what_transformers_builds():
    """structures.json is written by ``python -m dsdoctor.models.structure --write``: a row rebuilt now must give
    the same structure (when the installed transformers and peft are the ones it was written with), and every
    registry row outside the analytic families has one."""
    from dsdoctor.models import structure

    shipped = structure.shipped_structures()
    assert {n for n, (_, c) in REGISTRY.items() if not is_analytic(c)} == set(shipped)
    for name in ("qwen3-8b", "gemma-2-9b", "phi-3-mini-4k-instruct", "qwen3-30b-a3b", "deepseek-v2-lite"):
        if shipped[name]["versions"] != list(structure._versions()):
            pytest.skip(f"structures.json was written with {shipped[name]['versions']}")
        assert structure.describe_config(REGISTRY[name][1]) == shipped[name], name


# --- counts against transformers and peft on the meta device, for random configs --------------------------------


@st.composite
def structured_config(draw, model_type: str) -> dict:
    """A small config.json of a type read off transformers' model (qwen3, gemma2, phi3, glm and the MoE types)."""
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    head_dim = 4 * draw(st.integers(1, 4))
    config = {"model_type": model_type, "vocab_size": draw(st.integers(16, 200)),
              "hidden_size": heads * head_dim * draw(st.integers(1, 2)), "num_attention_heads": heads,
              "num_key_value_heads": kv, "intermediate_size": 4 * draw(st.integers(1, 16)),
              "num_hidden_layers": draw(st.integers(1, 3)), "tie_word_embeddings": draw(st.booleans()),
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if model_type != "phi3":
        config["head_dim"] = head_dim
    if model_type in ("qwen3_moe", "mixtral"):
        experts = draw(st.integers(2, 6))
        config["num_experts" if model_type == "qwen3_moe" else "num_local_experts"] = experts
        config["num_experts_per_tok"] = draw(st.integers(1, experts))
        if model_type == "qwen3_moe":
            config["moe_intermediate_size"] = 4 * draw(st.integers(1, 8))
    return config


TARGETS = {"qwen3": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           "gemma2": ["q_proj", "v_proj", "o_proj", "down_proj"], "phi3": ["qkv_proj", "o_proj", "gate_up_proj"],
           "glm": ["q_proj", "v_proj", "gate_up_proj", "down_proj"], "qwen3_moe": ["q_proj", "v_proj", "o_proj"],
           "mixtral": ["q_proj", "k_proj", "o_proj"]}


@pytest.mark.parametrize("model_type", sorted(TARGETS))
def test_random_configs_count_as_transformers_and_peft_do(model_type, tmp_path, monkeypatch):
    from dsdoctor.meta_count import meta_counts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    seen = []

    @settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(config=structured_config(model_type), r=st.integers(1, 4), data=st.data())
    def check(config, r, data):
        (tmp_path / "config.json").write_text(json.dumps(config))
        arch = resolve_arch(str(tmp_path / "config.json"))
        targets = tuple(data.draw(st.lists(st.sampled_from(TARGETS[model_type]), min_size=1, max_size=3,
                                           unique=True)))
        freeze = data.draw(st.integers(1, config["num_hidden_layers"]))
        for method, kw in (("full", {}), ("lora", {"lora_r": r, "lora_targets": targets}),
                           ("lora", {"lora_r": r, "lora_targets": ("all-linear",)}),
                           ("ptuning", {"prefix_tokens": r}), ("freeze", {"freeze_last": freeze})):
            expected = meta_counts(config, method, **kw)
            assert (arch.total_params, trainable_params(arch, method, **kw)) == expected, (config, method, kw)
        seen.append(config)

    check()
    assert len(seen) == 12


# --- the general activation formulas reproduce the calibrated family formulas -----------------------------------


def _structured(config: dict):
    from dsdoctor.models import structure

    return structure.arch_from_structure(structure.describe_config(config), "s", "s", config)


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-2-7b", "gpt-j-6b", "mistral-7b"])
@pytest.mark.parametrize("method, grad_ckpt", [("lora", False), ("full", False), ("freeze", False), ("lora", True)])
def test_structure_read_off_the_model_gives_the_calibrated_estimate(name, method, grad_ckpt):
    """For the families whose formulas were fitted on the H200 (llama, qwen2, gptj), the architecture read off the
    model on the meta device gives the same parameter counts and the same bytes at every moment of the step: the
    general formulas (roles and inputs traced on the meta device, norms read off the modules) are the family ones,
    GPT-J's parallel block included (its attention and MLP read one norm)."""
    config = dict(REGISTRY[name][1])
    analytic = arch_from_config(config, name, "registry")
    general = _structured(config)
    assert general.total_params == analytic.total_params
    for setup_kw in ({"micro_batch": 2, "seq_len": 512}, {"micro_batch": 1, "seq_len": 2048, "zero_stage": 3}):
        targets = ("q_proj", "v_proj")
        setups = [mem.Setup(arch=a, total_params=a.total_params, trainable_params=trainable_params(
            a, method, lora_targets=targets), method=method, grad_ckpt=grad_ckpt,
            lora_targets=targets if method == "lora" else (), **setup_kw) for a in (analytic, general)]
        assert setups[0].trainable_params == setups[1].trainable_params
        a, g = mem.estimate(setups[0]), mem.estimate(setups[1])
        assert g.phase_terms == a.phase_terms, (name, method, setup_kw)


def test_moe_activations_follow_the_routed_tokens_not_the_experts():
    """Each token runs its top_k experts: k, not the number of experts, scales the MoE activations; the experts add
    only the router's fp32 softmax (4 bytes each per token)."""
    base = {"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64, "moe_intermediate_size": 32,
            "num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": 2}
    arch = _structured(base)
    assert (arch.experts, arch.top_k, arch.expert_intermediate, arch.intermediate_size) == (8, 2, 32, 0)
    setup = mem.Setup(arch=arch, total_params=arch.total_params, trainable_params=1, method="lora",
                      lora_targets=("q_proj",), grad_ckpt=False, lora_dropout=0.0)

    def per_token(a):
        return mem.layer_activation_bytes_per_token(a, replace(setup, arch=a), trainable=False)

    more_k = replace(arch, top_k=4)
    more_e = replace(arch, experts=16)
    per_expert = 6 * 32 + 2 * 64  # gate/up output and activation, the routing weight's product
    assert per_token(more_k) - per_token(arch) == 2 * per_expert
    assert per_token(more_e) - per_token(arch) == 4 * 8
    assert arch.largest_layer_params >= 8 * 3 * 64 * 32  # ZeRO-3 gathers a layer's fused experts at once


def test_eager_attention_of_gemma2_is_quadratic_in_the_sequence():
    """Gemma-2 has no SDPA (softcapping): transformers runs eager attention, which keeps the s x s probabilities
    (fp32 softmax, its 16-bit copy, tanh's output): per token and layer heads x seq x 8 bytes on top of the rest."""
    arch = resolve_arch("gemma-2-9b")
    assert arch.eager_attention and arch.attn_softcap and arch.final_softcap
    assert arch.attention_width == 16 * 256 != arch.hidden_size  # q_dim 4096 on a 3584 model
    setup = mem.Setup(arch=arch, total_params=arch.total_params, trainable_params=1, method="lora",
                      lora_targets=("q_proj", "v_proj"), grad_ckpt=False, seq_len=1024)
    short = mem.layer_activation_bytes_per_token(arch, setup, trainable=False)
    long = mem.layer_activation_bytes_per_token(arch, replace(setup, seq_len=2048), trainable=False)
    assert long - short == 16 * 1024 * 8
    logits = mem.estimate(setup).phase_terms["loss"]["logits_and_loss"]
    assert logits == 1024 * 256_000 * (12 + 2)  # the final softcapping's tanh output stays for the backward


def test_norms_are_read_off_the_modules():
    assert resolve_arch("gemma-2-9b").norm_widths == (3584,) * 4  # pre/post attention and feed-forward norms
    assert resolve_arch("qwen3-8b").norm_widths == (32 * 128, 8 * 128, 4096, 4096)  # per-head q/k norms
    assert {lin.name: lin.role for lin in resolve_arch("phi-3-mini").linears} == {
        "o_proj": "attn_out", "qkv_proj": "attn_in", "gate_up_proj": "mlp_in", "down_proj": "mlp_out"}


def test_what_the_formulas_do_not_model_is_named():
    assert any("kv_b_proj" in note for note in resolve_arch("deepseek-v2-lite").unmodeled)  # MLA's low rank
    assert any("dense MLP" in note for note in resolve_arch("deepseek-v2-lite").unmodeled)  # first_k_dense_replace
    assert any("vision tower" in note for note in resolve_arch("gemma-3-4b").unmodeled)
    assert resolve_arch("qwen3-8b").unmodeled == ()


# --- bad input: one line, exit 2 -------------------------------------------------------------------------------

@pytest.mark.parametrize("config, message", [
    ({"model_type": "not_a_model", "hidden_size": 10}, "model_type 'not_a_model': transformers .* has no such"),
    ({"model_type": "my_lm", "auto_map": {"AutoModelForCausalLM": "modeling_x.X"}, "hidden_size": 64},
     "its modeling code is the repository's own \\(auto_map\\), which dsdoctor never runs"),
    ({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 64, "moe_intermediate_size": 32,
      "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100},
     "config.json has no num_experts \\(its class default: 128\\)"),
    ({"model_type": "t5"}, "'t5' is not a decoder-only language model"),
    ({"model_type": "qwen3", "hidden_size": "64", "intermediate_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100}, "hidden_size"),
    # found by tests/test_fuzz_estimate.py: a causal LM without attention (Mamba) given attention keys
    ({"model_type": "mamba", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_key_value_heads": 2, "vocab_size": 100}, "has no attention heads in its config"),
])
def test_a_config_transformers_cannot_build_gets_one_line(tmp_path, monkeypatch, config, message):
    from click.testing import CliRunner

    from dsdoctor.cli import cli

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(cli, ["estimate", "--model", str(tmp_path), "--gpu-mem", "80", "--gpus", "1"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsdoctor: error: "), result.stderr
    import re

    assert re.search(message, lines[0]), lines[0]


def test_attn_names_the_attention_the_training_machine_runs():
    """transformers 5.17 runs Gemma-2 with SDPA, 5.24 with eager attention (``_supports_sdpa``): measured on the
    H200 (5.17), micro 1 x 2048 without checkpointing used 39.40 GiB peak allocated; --attn sdpa predicts that
    (benchmarks/results/memory-loops), the default follows the installed transformers and says so."""
    from click.testing import CliRunner

    from dsdoctor.cli import cli

    args = ["estimate", "--model", "gemma-2-9b", "--method", "lora", "--seq-len", "2048", "--no-grad-ckpt",
            "--launch", "trainer", "--gpus", "1", "--gpu-mem", "140", "--json", "-"]
    default = json.loads(CliRunner().invoke(cli, args).stdout)["result"]
    sdpa = json.loads(CliRunner().invoke(cli, args + ["--attn", "sdpa"]).stdout)["result"]
    quadratic = 42 * 2048 * 16 * 2048 * 8  # layers x tokens x heads x keys x (fp32 softmax, its copy, tanh output)
    # eager widens k and v to the 16 query heads (repeat_kv: 4 x (4096 - 2048) bytes a token) and has no SDPA
    # log-sum-exp (4 bytes a head)
    widened = 42 * 2048 * (4 * (4096 - 2048) - 4 * 16)
    assert default["allocated_bytes"] - sdpa["allocated_bytes"] == quadratic + widened
    assert abs(sdpa["allocated_bytes"] / 2 ** 30 - 39.40) < 0.01 * 39.40
    assert "give --attn sdpa" in default["counting"]


@pytest.mark.parametrize("spec, key", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("llama-3.1-8b-instruct", "llama-3.1-8b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"), ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("THUDM/glm-4-9b-chat-hf", "glm-4-9b-chat-hf"), ("glm-4-9b-hf", "glm-4-9b-chat-hf"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("mistral-7b-instruct-v0.3", None)])
def test_post_trained_hub_names_resolve_to_their_base(spec, key):
    """Newcomer trial: common hub names (Llama-3.1-8B-Instruct, Qwen3-30B-A3B-Instruct-2507) were refused. A
    post-trained variant (-Instruct, -Chat, -it, -Base, a -YYMM date) has its base's shapes; Mistral-7B v0.3 is a
    different model (a 32,768 vocabulary) and stays unknown."""
    from dsdoctor.models import registry_key

    assert registry_key(spec) == key


def test_moe_step_time_follows_the_active_parameters():
    """Newcomer trial (repeat): Qwen3-30B-A3B's compute time was 3.6 x Qwen3-8B's although a token runs about 3.3 B
    of its parameters. The active counts equal the published ones (Qwen3-30B-A3B 3.3 B, Mixtral-8x7B 12.9 B,
    Qwen1.5-MoE-A2.7B 2.7 B), and the step's FLOPs follow them."""
    assert round(resolve_arch("qwen3-30b-a3b").active_params / 1e9, 1) == 3.4  # 3,353,032,704
    assert round(resolve_arch("mixtral-8x7b").active_params / 1e9, 1) == 12.9
    assert round(resolve_arch("qwen1.5-moe-a2.7b").active_params / 1e9, 1) == 2.7
    assert resolve_arch("qwen3-8b").active_params == resolve_arch("qwen3-8b").total_params

    def compute(name):
        arch = resolve_arch(name)
        setup = mem.Setup(arch=arch, total_params=arch.total_params, trainable_params=arch.total_params,
                          method="full", zero_stage=3, gpus=8, micro_batch=1, seq_len=1024)
        return mem.step_time(setup, mem.Rates(gpu_flops=989e12))["compute"]

    assert compute("qwen3-30b-a3b") < 0.6 * compute("qwen3-8b")


def test_fallback_lora_targets_are_named():
    """Newcomer trial (repeat): peft 0.21 has no default LoRA targets for glm, phi3 or qwen3_moe; estimate silently
    used q_proj,v_proj (qkv_proj for Phi-3). The report now names the fallback; with peft's own default it says
    nothing."""
    from click.testing import CliRunner

    from dsdoctor.cli import cli

    def counting(model):
        out = CliRunner().invoke(cli, ["estimate", "--model", model, "--method", "lora", "--gpus", "1",
                                       "--gpu-mem", "80", "--json", "-"]).stdout
        return json.loads(out)["result"]["counting"]

    assert "LoRA targets q_proj,v_proj: peft has no default for glm" in counting("glm-4-9b-hf")
    assert "LoRA targets" not in counting("qwen3-8b")  # peft's table has qwen3


QWEN3_8B_AS_SAVED = {  # Qwen/Qwen3-8B config.json as the hub serves it: the registry row plus what it saves besides
    "architectures": ["Qwen3ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "transformers_version": "4.51.0", "use_cache": True}


def _resolved_in_a_fresh_process(tmp_path, config: dict) -> tuple[int, str, bool, bool]:
    """(total parameters, source, whether torch was imported, whether transformers was) of ``resolve_arch`` on a
    directory holding ``config``, in a fresh interpreter with an empty cache."""
    import subprocess
    import sys

    (tmp_path / "config.json").write_text(json.dumps(config))
    code = ("import json, sys; from dsdoctor.models import resolve_arch; a = resolve_arch(sys.argv[1]); "
            "print(json.dumps([a.total_params, a.source, 'torch' in sys.modules, 'transformers' in sys.modules]))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                         check=True).stdout
    return tuple(json.loads(out))


def test_a_local_copy_of_a_registry_model_uses_the_shipped_structure_without_transformers(tmp_path):
    """A user's local Qwen3-8B directory is the registry row as saved: counted from the shipped structure (0.5 s
    cold instead of the meta build's 8-10 s: no torch or transformers import), the same numbers as the name."""
    from dsdoctor.models import REGISTRY

    total, source, torch_loaded, transformers_loaded = _resolved_in_a_fresh_process(
        tmp_path, {**REGISTRY["qwen3-8b"][1], **QWEN3_8B_AS_SAVED})
    assert total == resolve_arch("qwen3-8b").total_params == 8_190_735_360
    assert "= registry qwen3-8b" in source and not torch_loaded and not transformers_loaded


@pytest.mark.parametrize("change", [{"num_hidden_layers": 35}, {"num_experts": 4}, {"attention_dropout": 0.1},
                                    {"vocab_size": 151_937}, {"head_dim": None}])
def test_a_config_that_differs_from_the_row_is_not_taken_for_it(change):
    from dsdoctor.models import REGISTRY
    from dsdoctor.models.matching import shipped_for

    assert shipped_for({**REGISTRY["qwen3-8b"][1], **QWEN3_8B_AS_SAVED})[0] == "qwen3-8b"
    config = {**REGISTRY["qwen3-8b"][1], **QWEN3_8B_AS_SAVED, **change}
    assert shipped_for(config) is None
    # a flag left to transformers' default is the row's only where that default is the row's value (Qwen3Config's
    # tie_word_embeddings is false, as Qwen3-8B's); a size left out never is
    missing = {k: v for k, v in REGISTRY["qwen3-8b"][1].items() if k != "tie_word_embeddings"}
    assert shipped_for(missing)[0] == "qwen3-8b"
    assert shipped_for({k: v for k, v in REGISTRY["qwen3-8b"][1].items() if k != "vocab_size"}) is None


def test_the_lora_targets_a_refusal_lists_are_the_ones_accepted():
    """No default LoRA targets (DeepSeek-V2): the message lists what peft wrapped on the meta model, and each name
    listed is accepted as --lora-targets (it used to list down_proj, gate_proj and up_proj, which were refused)."""
    import re

    from dsdoctor.models import default_lora_targets

    arch = resolve_arch("deepseek-v2-lite")
    with pytest.raises(DsdoctorError) as exc:
        default_lora_targets(arch)
    listed = re.search(r"its linears: (.*), or all-linear", str(exc.value)).group(1).split(", ")
    assert "q_proj" in listed and "kv_b_proj" in listed
    for name in listed:
        assert trainable_params(arch, "lora", lora_r=8, lora_targets=(name,)) > 0


@pytest.mark.parametrize("name, change", [
    ("qwen3-8b", {"vocab_size": 151_669 + 128, "num_hidden_layers": 20}),  # tokens added, layers pruned; untied
    ("qwen3-0.6b", {"vocab_size": 151_700}),  # tied
    ("qwen3-30b-a3b", {"num_hidden_layers": 4, "vocab_size": 1000}),  # MoE
    ("gemma-2-2b", {"num_hidden_layers": 6, "vocab_size": 256_128}),  # sliding and global layers: one kind
    ("phi-3-mini-4k-instruct", {"vocab_size": 32_011, "num_hidden_layers": 3}),  # fused qkv / gate_up
    ("qwen3-8b", {"max_position_embeddings": 8192, "vocab_size": 152_064, "torch_dtype": "float32"}),
])
def test_another_vocabulary_or_depth_of_a_registry_model_is_rewritten_as_transformers_builds_it(name, change):
    """A fine-tuned checkpoint with added tokens, or a pruned one, takes its row's shipped structure with the sizes
    rewritten (no transformers import): the very dict the meta build reads off the model (versions aside)."""
    from dsdoctor.models import REGISTRY
    from dsdoctor.models.matching import scaled_for, shipped_for
    from dsdoctor.models.structure import describe_config

    config = {**REGISTRY[name][1], **QWEN3_8B_AS_SAVED, **change} if name == "qwen3-8b" else \
        {**REGISTRY[name][1], **change}
    assert shipped_for(config) is None
    row, scaled = scaled_for(config)
    built = describe_config(config)
    assert row == name
    assert {k: v for k, v in scaled.items() if k != "versions"} == {k: v for k, v in built.items() if k != "versions"}


@pytest.mark.parametrize("name, change", [
    ("deepseek-v2-lite", {"num_hidden_layers": 5}),  # a dense first layer, then MoE layers: two kinds
    ("phi-3-mini-4k-instruct", {"hidden_size": 3000}),  # 32 heads do not divide it: the head size is not whole
    ("qwen3-30b-a3b", {"decoder_sparse_step": 2}),  # a key that changes the layers' pattern: fixed in the template
    ("qwen3-8b", {"vocab_size": 0}), ("qwen3-8b", {"num_hidden_layers": "36"}),
    ("qwen3-8b", {"attention_bias": True}),  # biases: another skeleton, no row has it
    ("gemma-3-4b-pt", {"vocab_size": 262_300}),  # multimodal: text_config
])
def test_what_the_rewrite_does_not_cover_is_left_to_the_meta_build(name, change):
    from dsdoctor.models import REGISTRY
    from dsdoctor.models.matching import scaled_for

    assert scaled_for({**REGISTRY[name][1], **change}) is None


def test_a_local_checkpoint_with_added_tokens_is_counted_without_transformers(tmp_path):
    from dsdoctor.models import REGISTRY

    total, source, torch_loaded, transformers_loaded = _resolved_in_a_fresh_process(
        tmp_path, {**REGISTRY["qwen3-8b"][1], **QWEN3_8B_AS_SAVED, "vocab_size": 151_936 + 64})
    assert total == 8_190_735_360 + 2 * 64 * 4096  # the embedding and the untied output projection each gain 64 rows
    assert "the architecture of registry qwen3-8b" in source and not torch_loaded and not transformers_loaded


def test_moe_lora_targets_are_decided_by_peft_itself():
    """Qwen3-30B-A3B under transformers 5 has fused experts (one `experts` module per layer, 3-D weights): peft 0.21
    maps the usual gate_proj,up_proj,down_proj onto them, and refuses `experts` by name. dsdoctor counts what peft
    adds on the meta model for such targets instead of refusing or accepting them from the shipped structure."""
    import peft
    from packaging.version import Version

    from dsdoctor.models.structure import peft_lora_params

    arch = resolve_arch("qwen3-30b-a3b")
    usual = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    if Version(peft.__version__) < Version("0.21"):
        pytest.skip("peft before 0.21 does not map names onto fused experts")
    counted = trainable_params(arch, "lora", lora_r=8, lora_targets=usual, lora_dropout=0.0)
    attention = trainable_params(arch, "lora", lora_r=8, lora_targets=usual[:4])
    assert counted > 10 * attention  # 48 layers x 128 experts' gate/up/down
    assert counted == peft_lora_params(arch.config, usual, 8)
    # with dropout, peft refuses the fused experts' wrapper: what stopped round 14's GPU run at get_peft_model
    with pytest.raises(DsdoctorError, match="lora.ParamWrapper does not work with lora_dropout != 0"):
        trainable_params(arch, "lora", lora_r=8, lora_targets=usual, lora_dropout=0.05)
    with pytest.raises(DsdoctorError, match="peft refuses them on qwen3_moe with lora_dropout 0.05: ValueError: Target module Qwen3MoeExperts"):
        trainable_params(arch, "lora", lora_r=8, lora_targets=("experts",))
