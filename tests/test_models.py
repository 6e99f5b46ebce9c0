"""The model registry's parameter counts against transformers and peft themselves: every registry model whose
architecture transformers implements is built on the meta device, and LoRA / prefix tuning applied with peft; the
analytic counts of dsdoctor.models must be exactly theirs."""

from __future__ import annotations

import json

import pytest

from dsdoctor.models import (REGISTRY, TRANSFORMERS_FAMILIES, default_lora_targets, resolve_arch,
                             trainable_params)
from dsdoctor.report import DsdoctorError

KNOWN = [name for name, (_, config) in REGISTRY.items() if config["model_type"] in TRANSFORMERS_FAMILIES]


def test_registry_covers_the_issue_list():
    wanted = {"chatglm-6b", "chatglm2-6b", "chatglm3-6b", "glm-4-9b", "qwen2-7b", "qwen2.5-0.5b", "qwen2.5-1.5b",
              "qwen2.5-7b", "qwen2.5-14b", "llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "baichuan2-7b",
              "baichuan2-13b", "internlm2-7b", "yi-6b"}
    assert wanted <= set(REGISTRY)


def test_chatglm_6b_counts_from_the_issue():
    arch = resolve_arch("chatglm-6b")
    assert arch.total_params == 6_173_286_400
    assert trainable_params(arch, "lora", lora_r=8) == 3_670_016 == 28 * (4096 * 8 + 8 * 12288)
    assert resolve_arch("THUDM/ChatGLM-6B").total_params == 6_173_286_400  # repository names, any case


def test_published_sizes_of_remote_code_models():
    """Counts for models transformers cannot build without remote code, against their model cards."""
    assert resolve_arch("chatglm2-6b").total_params == 6_243_584_000
    assert resolve_arch("glm-4-9b").total_params == 9_399_951_360
    assert resolve_arch("baichuan2-7b").total_params == 7_505_973_248
    assert resolve_arch("baichuan2-13b").total_params == 13_896_668_160
    assert resolve_arch("internlm2-7b").total_params == 7_737_708_544
    assert resolve_arch("qwen-7b").total_params == 7_721_324_544


def _meta_model(name):
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(REGISTRY[name][1])
    values.pop("torch_dtype", None)
    config = AutoConfig.for_model(**values)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()  # init_empty_weights unties them in transformers 5.24
    return model


@pytest.mark.parametrize("name", KNOWN)
def test_analytic_count_equals_transformers_on_meta(name):
    model = _meta_model(name)
    assert resolve_arch(name).total_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3-8b", "gpt-j-6b"])
def test_trainable_counts_equal_peft_on_meta(name):
    from accelerate import init_empty_weights
    from peft import LoraConfig, PrefixTuningConfig, get_peft_model

    arch = resolve_arch(name)
    for method, config in (("lora", LoraConfig(task_type="CAUSAL_LM", r=16, target_modules=["q_proj", "v_proj"])),
                           ("ptuning", PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=16))):
        with init_empty_weights():
            model = get_peft_model(_meta_model(name), config)
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable_params(arch, method, lora_r=16, lora_targets=("q_proj", "v_proj")) == expected
    model = _meta_model(name)
    layers = max((m for m in model.modules() if m.__class__.__name__ == "ModuleList"), key=len)
    assert trainable_params(arch, "freeze", freeze_last=3) == sum(p.numel() for layer in layers[-3:]
                                                                  for p in layer.parameters())


def test_default_lora_targets_follow_peft_and_the_trainer():
    assert default_lora_targets(resolve_arch("chatglm-6b")) == ("query_key_value",)
    assert default_lora_targets(resolve_arch("qwen2-7b")) == ("q_proj", "v_proj")
    assert default_lora_targets(resolve_arch("baichuan2-7b")) == ("W_pack",)
    assert default_lora_targets(resolve_arch("internlm2-7b")) == ("wqkv",)


def test_unknown_name_lists_close_names():
    with pytest.raises(DsdoctorError, match="did you mean.*qwen2.5-7b"):
        resolve_arch("qwen2.5-7")
    with pytest.raises(DsdoctorError, match="not a linear layer"):
        trainable_params(resolve_arch("llama-2-7b"), "lora", lora_targets=("query_key_value",))
    with pytest.raises(DsdoctorError, match="between 1 and 32"):
        trainable_params(resolve_arch("llama-2-7b"), "freeze", freeze_last=33)


def test_local_config_is_read_as_data(tmp_path):
    _, values = REGISTRY["chatglm2-6b"]
    (tmp_path / "config.json").write_text(json.dumps({**values, "auto_map": {"AutoModel": "modeling_chatglm.X"}}))
    assert resolve_arch(str(tmp_path)).total_params == 6_243_584_000
    broken = tmp_path / "b"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    with pytest.raises(DsdoctorError, match="no num_hidden_layers"):
        resolve_arch(str(broken))
    (broken / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(DsdoctorError, match="'t5' is not an architecture"):
        resolve_arch(str(broken))
