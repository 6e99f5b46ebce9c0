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
    with pytest.raises(DsdoctorError, match="not a module peft can wrap"):
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
    with pytest.raises(DsdoctorError, match="'t5' is not a decoder-only language model"):
        resolve_arch(str(broken))


# --- the analytic count is exact for any config of a family transformers implements ---------------------------------
# ``estimate --model PATH`` trusts the formulas (no 4.5 s transformers import) when every key of the config.json is in
# SHAPE_KEYS or NEUTRAL_KEYS. These tests are what makes that trust earned: random configs over the shape keys against
# transformers and peft on the meta device, each neutral key changed against an unchanged count, and every parameter
# of the installed transformers' config classes classified.

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsdoctor.models import NEUTRAL_KEYS, SHAPE_KEYS, arch_from_config, unmodeled_keys


@st.composite
def family_config(draw, model_type: str) -> dict:
    """A small config.json of ``model_type`` with every shape key drawn (or left to its default)."""
    vocab = draw(st.integers(8, 300))
    tie = draw(st.booleans())
    if model_type == "gptj":
        heads = draw(st.integers(1, 4))
        head_dim = 2 * draw(st.integers(1, 6))
        config = {"model_type": "gptj", "vocab_size": vocab, "n_embd": heads * head_dim, "n_head": heads,
                  "n_layer": draw(st.integers(1, 3)), "rotary_dim": head_dim, "tie_word_embeddings": tie}
        if draw(st.booleans()):
            config["n_inner"] = draw(st.integers(1, 64))
        return config
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 3))
    head_dim = 2 * draw(st.integers(1, 6))
    config = {"model_type": model_type, "vocab_size": vocab, "num_hidden_layers": draw(st.integers(1, 3)),
              "num_attention_heads": heads, "intermediate_size": draw(st.integers(1, 64)), "tie_word_embeddings": tie}
    if draw(st.booleans()):  # an explicit head_dim: the hidden size (a multiple of the heads) need not be heads x it
        config["head_dim"] = head_dim
        config["hidden_size"] = heads * draw(st.integers(1, 8))
    else:
        config["hidden_size"] = heads * head_dim
    if draw(st.booleans()):
        config["num_key_value_heads"] = kv_heads
    if model_type == "llama":
        for key in ("attention_bias", "mlp_bias"):
            if draw(st.booleans()):
                config[key] = draw(st.booleans())
    return config


def _analytic(config: dict, method: str, **kw) -> tuple[int, int]:
    arch = arch_from_config(config, name="random", source="random config.json")
    return arch.total_params, trainable_params(arch, method, **kw)


@pytest.mark.parametrize("model_type", sorted(SHAPE_KEYS))
def test_random_configs_count_as_transformers_and_peft_do(model_type):
    from dsdoctor.meta_count import meta_counts

    seen = []

    @settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(config=family_config(model_type), r=st.integers(1, 4))
    def check(config, r):
        assert unmodeled_keys(arch_from_config(config, "random", "random")) == []
        targets = ("q_proj", "v_proj")
        for method, kw in (("full", {}), ("lora", {"lora_r": r, "lora_targets": targets}),
                           ("ptuning", {"prefix_tokens": r}), ("freeze", {"freeze_last": 1})):
            assert _analytic(config, method, **kw) == meta_counts(config, method, **kw), (config, method)
        seen.append(config)

    check()
    assert len(seen) == 25


#: For each neutral key, a value other than the default: what a saved config.json might carry.
NEUTRAL_VALUES = {
    "_name_or_path": "/models/x", "architectures": ["SomethingForCausalLM"], "transformers_version": "4.40.0",
    "output_hidden_states": True, "output_attentions": True, "return_dict": False, "dtype": "bfloat16",
    "torch_dtype": "float16", "chunk_size_feed_forward": 1, "is_encoder_decoder": False, "id2label": {"0": "a"},
    "label2id": {"a": 0}, "problem_type": "regression", "hidden_act": "gelu", "activation_function": "relu",
    "max_position_embeddings": 77, "n_positions": 77, "initializer_range": 0.5, "rms_norm_eps": 1e-3,
    "layer_norm_epsilon": 1e-3, "use_cache": False, "pad_token_id": 3, "bos_token_id": 4, "eos_token_id": 5,
    "pretraining_tp": 2, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5},
    "rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2.0}, "attention_dropout": 0.1,
    "resid_pdrop": 0.2, "embd_pdrop": 0.2, "attn_pdrop": 0.2, "use_sliding_window": True, "sliding_window": 64,
    "max_window_layers": 1, "layer_types": ["sliding_attention", "full_attention"], "rotary_dim": 2}
BASE = {"llama": {"model_type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 24,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2},
        "gptj": {"model_type": "gptj", "vocab_size": 50, "n_embd": 16, "n_head": 4, "n_layer": 2, "rotary_dim": 4}}


def test_neutral_values_cover_the_neutral_keys():
    assert set(NEUTRAL_VALUES) == NEUTRAL_KEYS - {"model_type"}


@pytest.mark.parametrize("model_type", sorted(SHAPE_KEYS))
@pytest.mark.parametrize("key", sorted(NEUTRAL_VALUES))
def test_a_neutral_key_changes_no_count(model_type, key):
    from dsdoctor.meta_count import meta_counts

    base = dict(BASE["gptj" if model_type == "gptj" else "llama"], model_type=model_type)
    changed = {**base, key: NEUTRAL_VALUES[key]}
    lora = {"lora_r": 2, "lora_targets": ("q_proj", "v_proj")}
    assert meta_counts(changed, "full") == meta_counts(base, "full") == _analytic(changed, "full")
    assert meta_counts(changed, "lora", **lora) == _analytic(changed, "lora", **lora)


@pytest.mark.parametrize("model_type", sorted(SHAPE_KEYS))
def test_every_config_parameter_of_transformers_is_classified(model_type):
    import inspect

    from transformers import AutoConfig

    config_class = type(AutoConfig.for_model(model_type))
    parameters = set(inspect.signature(config_class.__init__).parameters) - {"self", "kwargs"}
    assert parameters - SHAPE_KEYS[model_type] - NEUTRAL_KEYS == set(), \
        f"new {config_class.__name__} parameters: put each in SHAPE_KEYS (and model it) or NEUTRAL_KEYS (and test it)"


def test_an_unmodeled_key_is_named():
    config = dict(BASE["llama"], model_type="qwen2", attention_bias=True, num_experts=4)
    assert unmodeled_keys(arch_from_config(config, "x", "x")) == ["attention_bias", "num_experts"]
    assert unmodeled_keys(resolve_arch("chatglm2-6b")) is None  # remote code: analytic is the only count


def test_lora_on_the_output_projection_and_all_linear_as_peft():
    from dsdoctor.meta_count import meta_counts

    for tie in (False, True):
        config = dict(BASE["llama"], tie_word_embeddings=tie)
        for targets in (("q_proj", "lm_head"), ("all-linear",)):
            kw = {"lora_r": 4, "lora_targets": targets}
            assert _analytic(config, "lora", **kw) == meta_counts(config, "lora", **kw), (tie, targets)
    # all-linear on the meta path too (a config with a key the formulas do not model)
    config = dict(BASE["llama"], num_experts=2)
    assert meta_counts(config, "lora", lora_r=4, lora_targets=("all-linear",))[1] == \
        _analytic(dict(BASE["llama"]), "lora", lora_r=4, lora_targets=("all-linear",))[1]


@pytest.mark.parametrize("key", ["tie_word_embeddings", "attention_bias", "mlp_bias"])
def test_a_boolean_given_as_a_string_is_refused(key):
    with pytest.raises(DsdoctorError, match=f"{key} must be true or false, got 'false'"):
        arch_from_config(dict(BASE["llama"], **{key: "false"}), "x", "x/config.json")


def test_a_multimodal_config_counts_its_language_model():
    nested = {"model_type": "llava", "text_config": dict(BASE["llama"]), "vision_config": {"hidden_size": 32},
              "image_token_index": 32000}
    arch = arch_from_config(nested, "x", "x/config.json")
    assert arch.total_params == arch_from_config(dict(BASE["llama"]), "x", "x").total_params
    assert "text_config" in arch.source and "text_config" not in arch.config


@pytest.mark.parametrize("model_type", sorted(SHAPE_KEYS))
def test_config_defaults_are_transformers(model_type):
    from transformers import AutoConfig

    from dsdoctor.models import CONFIG_DEFAULTS

    filled = AutoConfig.for_model(model_type).to_dict()
    assert {k: filled[k] for k in CONFIG_DEFAULTS[model_type]} == CONFIG_DEFAULTS[model_type]


def test_a_text_config_that_relies_on_defaults():
    """LLaVA-1.5's config.json: the text_config names the model type and a vocabulary, transformers fills the rest."""
    from dsdoctor.meta_count import meta_counts

    llava = {"model_type": "llava", "text_config": {"model_type": "llama", "vocab_size": 32064,
                                                    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5},
             "vision_config": {"hidden_size": 1024}}
    arch = arch_from_config(llava, "llava", "llava/config.json")
    assert arch.total_params == meta_counts({"model_type": "llama", "vocab_size": 32064}, "full")[0]
