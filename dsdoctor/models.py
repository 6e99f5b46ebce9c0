"""Models by name or local directory: the architecture facts that the config checks and the memory estimate need.

A registry name stands for the values of that Hugging Face repository's ``config.json`` (kept here as data, in
the repository's own key names, so that a user's local ``config.json`` goes through exactly the same code).
Nothing here imports torch or transformers, and no remote code ever runs: a local directory is read as data.

Parameter counts are analytic, per architecture family, from the modules the modeling code builds. For the
families transformers implements itself (llama, mistral, qwen2, gptj) ``tests/test_models.py`` checks the formulas
against the model instantiated on the meta device (and peft applied) for random configs, and checks that every other
config key changes no count; a local config.json with a key outside both sets (:func:`unmodeled_keys`) is counted by
``dsdoctor.meta_count`` on the meta device instead.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

from dsdoctor.report import DsdoctorError

#: name -> (repository, values of its config.json). ``tie_word_embeddings`` is written out where the config
#: relies on ``PretrainedConfig``'s default (True), as ChatGLM-6B's does.
REGISTRY: dict[str, tuple[str, dict]] = {
    "chatglm-6b": ("THUDM/chatglm-6b", {
        "model_type": "chatglm", "hidden_size": 4096, "inner_hidden_size": 16384, "num_layers": 28,
        "num_attention_heads": 32, "vocab_size": 130528, "max_sequence_length": 2048,
        "tie_word_embeddings": True, "torch_dtype": "float16"}),
    "chatglm2-6b": ("THUDM/chatglm2-6b", {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128,
        "num_layers": 28, "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
        "padded_vocab_size": 65024, "add_bias_linear": False, "add_qkv_bias": True, "rmsnorm": True,
        "post_layer_norm": True, "seq_length": 32768, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "chatglm3-6b": ("THUDM/chatglm3-6b", {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128,
        "num_layers": 28, "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
        "padded_vocab_size": 65024, "add_bias_linear": False, "add_qkv_bias": True, "rmsnorm": True,
        "post_layer_norm": True, "seq_length": 8192, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "glm-4-9b": ("THUDM/glm-4-9b", {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128,
        "num_layers": 40, "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
        "padded_vocab_size": 151552, "add_bias_linear": False, "add_qkv_bias": True, "rmsnorm": True,
        "post_layer_norm": True, "seq_length": 8192, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen-7b": ("Qwen/Qwen-7B", {
        "model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 151936, "seq_length": 8192, "no_bias": True,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen-14b": ("Qwen/Qwen-14B", {
        "model_type": "qwen", "hidden_size": 5120, "intermediate_size": 27392, "num_hidden_layers": 40,
        "num_attention_heads": 40, "vocab_size": 152064, "seq_length": 2048, "no_bias": True,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2-7b": ("Qwen/Qwen2-7B", {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B", {
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}),
    "qwen2.5-1.5b": ("Qwen/Qwen2.5-1.5B", {
        "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 131072, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B", {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2.5-14b": ("Qwen/Qwen2.5-14B", {
        "model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48,
        "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf", {
        "model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
        "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 32000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "baichuan2-7b": ("baichuan-inc/Baichuan2-7B-Base", {
        "model_type": "baichuan", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 125696, "model_max_length": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "baichuan2-13b": ("baichuan-inc/Baichuan2-13B-Base", {
        "model_type": "baichuan", "hidden_size": 5120, "intermediate_size": 13696, "num_hidden_layers": 40,
        "num_attention_heads": 40, "vocab_size": 125696, "model_max_length": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "internlm2-7b": ("internlm/internlm2-7b", {
        "model_type": "internlm2", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 92544, "bias": False,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "yi-6b": ("01-ai/Yi-6B", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 64000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "gpt-j-6b": ("EleutherAI/gpt-j-6b", {
        "model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "n_inner": None, "vocab_size": 50400,
        "n_positions": 2048, "rotary_dim": 64, "tie_word_embeddings": False, "torch_dtype": "float32"}),
}

#: Names users type for the same repository.
ALIASES = {"chatglm": "chatglm-6b", "chatglm2": "chatglm2-6b", "chatglm3": "chatglm3-6b", "glm4-9b": "glm-4-9b",
           "glm-4-9b-chat": "glm-4-9b", "chatglm3-6b-base": "chatglm3-6b", "llama2-7b": "llama-2-7b",
           "llama2-13b": "llama-2-13b", "llama3-8b": "llama-3-8b", "meta-llama-3-8b": "llama-3-8b",
           "mistral-7b-v0.1": "mistral-7b", "baichuan2-7b-base": "baichuan2-7b", "baichuan2-7b-chat": "baichuan2-7b",
           "baichuan2-13b-base": "baichuan2-13b", "baichuan2-13b-chat": "baichuan2-13b",
           "llama-2-7b-hf": "llama-2-7b", "llama-2-13b-hf": "llama-2-13b", "llama-2-7b-chat-hf": "llama-2-7b",
           "llama-2-13b-chat-hf": "llama-2-13b", "qwen2-7b-instruct": "qwen2-7b",
           "qwen2.5-7b-instruct": "qwen2.5-7b", "qwen2.5-14b-instruct": "qwen2.5-14b",
           "qwen2.5-0.5b-instruct": "qwen2.5-0.5b", "qwen2.5-1.5b-instruct": "qwen2.5-1.5b",
           "internlm2-chat-7b": "internlm2-7b", "yi-6b-chat": "yi-6b", "meta-llama-3-8b-instruct": "llama-3-8b"}

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}

#: Families whose modeling code transformers ships (counted on the meta device for a local directory).
TRANSFORMERS_FAMILIES = ("llama", "mistral", "qwen2", "gptj")

#: The config.json keys that shape the modules of each architecture transformers implements, as its modeling code
#: reads them (transformers 5.24 ``models/<type>/modeling_<type>.py``: qwen2 and mistral read ``head_dim`` with
#: ``getattr``; only llama reads ``attention_bias`` and ``mlp_bias``), all of which :func:`arch_from_config` models.
SHAPE_KEYS = {
    "llama": frozenset({"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "attention_bias", "mlp_bias", "tie_word_embeddings"}),
    "mistral": frozenset({"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings"}),
    "qwen2": frozenset({"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "tie_word_embeddings"}),
    "gptj": frozenset({"vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "tie_word_embeddings"}),
}
#: Keys that change no parameter count in any of those families: what ``PretrainedConfig`` writes, generation,
#: initialisation, dropout, norm epsilons, activation, positions, rotary and attention-window settings, the dtype, and
#: the older spellings of these that saved config.json files still carry (``torch_dtype``, ``rope_theta``,
#: ``rope_scaling``). ``tests/test_models.py`` changes each one and counts again on the meta device, and checks that
#: every parameter of the installed transformers' config classes is here or in :data:`SHAPE_KEYS`.
NEUTRAL_KEYS = frozenset({
    "model_type", "_name_or_path", "architectures", "transformers_version", "output_hidden_states",
    "output_attentions", "return_dict", "dtype", "torch_dtype", "chunk_size_feed_forward", "is_encoder_decoder",
    "id2label", "label2id", "problem_type", "hidden_act", "activation_function", "max_position_embeddings",
    "n_positions", "initializer_range", "rms_norm_eps", "layer_norm_epsilon", "use_cache", "pad_token_id",
    "bos_token_id", "eos_token_id", "pretraining_tp", "rope_parameters", "rope_theta", "rope_scaling",
    "attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "use_sliding_window", "sliding_window",
    "max_window_layers", "layer_types", "rotary_dim"})


#: The sizes a config class fills when config.json omits them (transformers 5.24's LlamaConfig, MistralConfig,
#: Qwen2Config, GPTJConfig defaults; tests/test_models.py compares them with the installed transformers), used for a
#: multimodal config's text_config, which may rely on them (LLaVA-1.5's does). A top-level config.json that lacks a
#: size is an error instead: its estimate would silently be that of a 7B default.
CONFIG_DEFAULTS = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32},
    "gptj": {"vocab_size": 50400, "n_embd": 4096, "n_layer": 28, "n_head": 16},
}

#: ``num_key_value_heads`` of a config class when config.json omits it (None and "the attention heads" elsewhere).
KV_HEADS_DEFAULT = {"mistral": 8, "qwen2": 32}


def unmodeled_keys(arch: "Arch") -> list[str] | None:
    """The keys of ``arch.config`` that the analytic count does not account for: ``[]`` when the count is exact
    for this config (every key is in :data:`SHAPE_KEYS` or :data:`NEUTRAL_KEYS` for its ``model_type``), ``None``
    when the model type is not one transformers implements (its count can only be analytic)."""
    shape = SHAPE_KEYS.get(arch.model_type)
    if shape is None:
        return None
    return sorted(k for k in arch.config if k not in shape and k not in NEUTRAL_KEYS)


@dataclass(frozen=True)
class Linear:
    """One ``nn.Linear`` of a decoder layer: ``in_features``, ``out_features``, whether it has a bias."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


@dataclass(frozen=True)
class Arch:
    """A decoder-only architecture, normalised from a ``config.json``.

    Sizes are element counts. ``kv_dim`` is the width of the key (and of the value) projection: ``hidden_size``
    without grouped-query attention, ``num_key_value_heads * head_dim`` with it. ``mlp_gated`` is True for
    SwiGLU MLPs (three matrices of ``intermediate_size``), False for the two-matrix GeLU MLP.
    """

    name: str
    source: str
    model_type: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    kv_dim: int
    intermediate_size: int
    vocab_size: int
    tied: bool
    dtype: str
    max_positions: int | None
    linears: tuple[Linear, ...]
    norm_params_per_layer: int
    final_norm_params: int
    lm_head_bias: bool = False
    mlp_gated: bool = True
    layer_norm: bool = False  # LayerNorm (mean and variance) instead of RMSNorm
    config: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: its linears plus its norms."""
        return sum(lin.params for lin in self.linears) + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection's own parameters: its weight unless tied to the input embedding, and its bias
        (GPT-J's, which tying does not share)."""
        return (0 if self.tied else self.vocab_size * self.hidden_size) + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def total_params(self) -> int:
        """Every parameter once (a tied output projection shares the embedding's), as
        ``sum(p.numel() for p in model.parameters())`` counts them."""
        return (self.num_layers * self.layer_params + self.embedding_params + self.lm_head_params
                + self.final_norm_params)

    @property
    def largest_layer_params(self) -> int:
        """The largest single module's parameters (DeepSpeed's ZeRO-3 estimator takes it): the embedding, or the
        output projection, or the largest linear."""
        return max([self.embedding_params, self.lm_head_params] + [lin.params for lin in self.linears])

    def linear(self, name: str) -> Linear | None:
        return next((lin for lin in self.linears if lin.name == name), None)


#: Upper bounds on config.json sizes: far above any real model (the largest dense LLMs have hidden sizes near 25k,
#: fewer than 200 layers and vocabularies below 300k); a value past them is a broken config, not a model.
SIZE_LIMITS = {"layers": 1000, "hidden": 1_000_000, "vocab": 10_000_000, "heads": 100_000}
_LIMIT_OF = {"num_layers": "layers", "num_hidden_layers": "layers", "n_layer": "layers", "hidden_size": "hidden",
             "n_embd": "hidden", "intermediate_size": "hidden", "inner_hidden_size": "hidden",
             "ffn_hidden_size": "hidden", "n_inner": "hidden", "kv_channels": "hidden", "head_dim": "hidden",
             "vocab_size": "vocab", "padded_vocab_size": "vocab", "num_attention_heads": "heads", "n_head": "heads",
             "num_key_value_heads": "heads", "multi_query_group_num": "heads"}


def _int(config: dict, *keys: str, default: int | None = None, source: str = "") -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            limit = SIZE_LIMITS.get(_LIMIT_OF.get(key, ""), None)
            if limit is not None and value > limit:
                raise DsdoctorError(f"{source}: {key} = {_shown(value)} is not a real model's size (at most {limit:,})")
            return value
        if value is not None and key in config:
            raise DsdoctorError(f"{source}: {key} must be a positive integer, got {_shown(value)}")
    if default is not None:
        return default
    raise DsdoctorError(f"{source}: config.json has no {' / '.join(keys)} (needed for the parameter count)")


def _positions(config: dict, *keys: str, source: str) -> int | None:
    """The model's context length (the first of ``keys`` present), None when none is given. It changes no
    parameter count, but a value that is not a positive integer (``"4096"``, ``4096.0``, ``true``) is a broken
    config.json that transformers' rotary embedding and ``MEM505`` cannot use.

    Raises:
        DsdoctorError: a present value that is not a positive integer."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DsdoctorError(f"{source}: {key} must be a positive integer, got {_shown(value)}")
        return value
    return None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + f"...({len(text)} characters)"


def _bool(config: dict, key: str, default: bool, source: str) -> bool:
    """A boolean config.json value; a string such as "false" is refused, as transformers refuses it."""
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise DsdoctorError(f"{source}: {key} must be true or false, got {_shown(value)}")
    return value


def arch_from_config(config: dict, name: str, source: str) -> Arch:
    """Normalise a ``config.json`` (a dict) into an :class:`Arch`.

    The module shapes mirror each family's modeling code: transformers' ``models/llama`` (also mistral, yi),
    ``models/qwen2`` (q, k, v biases), ``models/gptj``; the repositories' own ``modeling_chatglm.py`` (ChatGLM-6B:
    fused ``query_key_value`` and biased linears with LayerNorm; ChatGLM2/3, GLM-4: multi-query
    ``query_key_value``, ``dense_h_to_4h`` of twice ``ffn_hidden_size``, RMSNorm), ``modeling_baichuan.py``
    (``W_pack``), ``modeling_internlm2.py`` (``wqkv``, ``w1``/``w2``/``w3``) and ``modeling_qwen.py`` (Qwen v1:
    ``c_attn``, ``w1``/``w2`` of half ``intermediate_size``).

    Raises:
        DsdoctorError: an architecture of none of these families, or a missing or non-positive size.
    """
    if isinstance(config.get("text_config"), dict):  # a multimodal config: its language model is what trains
        text = config["text_config"]
        # a text_config may leave sizes to its config class (LLaVA-1.5's does); a top-level config.json may not
        defaults = CONFIG_DEFAULTS.get(str(text.get("model_type") or config.get("model_type") or ""), {})
        filled = sorted(k for k in defaults if text.get(k) is None)
        text = {**defaults, **{k: v for k, v in text.items() if v is not None}}
        config = {k: v for k, v in {**config, **text}.items()
                  if k not in ("text_config", "vision_config", "audio_config")}
        source = f"{source} (its text_config: the language model" + \
            (f"; {', '.join(filled)} from transformers' defaults)" if filled else ")")
    model_type = str(config.get("model_type") or "")
    where = source
    tied_default = True  # PretrainedConfig's default
    dtype_value = config.get("torch_dtype") or config.get("dtype")
    dtype = _DTYPES.get(str(dtype_value).lower(), "") if dtype_value else ""

    def common(**kw) -> Arch:
        return Arch(name=name, source=source, model_type=model_type, dtype=dtype, config=config, **kw)

    if model_type == "chatglm" and "inner_hidden_size" in config:  # ChatGLM-6B (GLM-130B style)
        h = _int(config, "hidden_size", source=where)
        ffn = _int(config, "inner_hidden_size", source=where)
        layers = _int(config, "num_layers", source=where)
        heads = _int(config, "num_attention_heads", source=where)
        vocab = _int(config, "vocab_size", source=where)
        linears = (Linear("query_key_value", h, 3 * h, True), Linear("dense", h, h, True),
                   Linear("dense_h_to_4h", h, ffn, True), Linear("dense_4h_to_h", ffn, h, True))
        return common(family="chatglm", hidden_size=h, num_layers=layers, num_heads=heads, kv_dim=h,
                      intermediate_size=ffn, vocab_size=vocab,
                      tied=_bool(config, "tie_word_embeddings", tied_default, where),
                      max_positions=_positions(config, "max_sequence_length", source=where), linears=linears,
                      norm_params_per_layer=4 * h, final_norm_params=2 * h, mlp_gated=False, layer_norm=True)
    if model_type == "chatglm":  # ChatGLM2-6B, ChatGLM3-6B, GLM-4-9B
        h = _int(config, "hidden_size", source=where)
        ffn = _int(config, "ffn_hidden_size", source=where)
        layers = _int(config, "num_layers", source=where)
        heads = _int(config, "num_attention_heads", source=where)
        vocab = _int(config, "padded_vocab_size", "vocab_size", source=where)
        kv_channels = _int(config, "kv_channels", default=h // heads, source=where)
        projection = kv_channels * heads
        groups = _int(config, "multi_query_group_num", default=heads, source=where) \
            if _bool(config, "multi_query_attention", False, where) else heads
        kv_dim = groups * kv_channels
        bias_linear = _bool(config, "add_bias_linear", False, where)
        linears = (Linear("query_key_value", h, projection + 2 * kv_dim,
                          _bool(config, "add_qkv_bias", False, where) or bias_linear),
                   Linear("dense", projection, h, bias_linear),
                   Linear("dense_h_to_4h", h, 2 * ffn, bias_linear), Linear("dense_4h_to_h", ffn, h, bias_linear))
        layer_norm = not _bool(config, "rmsnorm", True, where)
        norm = 2 * h if layer_norm else h
        return common(family="chatglm2", hidden_size=h, num_layers=layers, num_heads=heads, kv_dim=kv_dim,
                      intermediate_size=ffn, vocab_size=vocab,
                      tied=_bool(config, "tie_word_embeddings", False, where),
                      max_positions=_positions(config, "seq_length", source=where), linears=linears, norm_params_per_layer=2 * norm,
                      final_norm_params=norm if _bool(config, "post_layer_norm", True, where) else 0, layer_norm=layer_norm)
    if model_type == "gptj":
        h = _int(config, "n_embd", "hidden_size", source=where)
        layers = _int(config, "n_layer", "num_hidden_layers", source=where)
        heads = _int(config, "n_head", "num_attention_heads", source=where)
        # GPTJMLP: intermediate_size = config.n_inner if config.n_inner is not None else 4 * embed_dim
        ffn = _int(config, "n_inner", default=4 * h, source=where)
        vocab = _int(config, "vocab_size", source=where)
        linears = (Linear("q_proj", h, h), Linear("k_proj", h, h), Linear("v_proj", h, h),
                   Linear("out_proj", h, h), Linear("fc_in", h, ffn, True), Linear("fc_out", ffn, h, True))
        return common(family="gptj", hidden_size=h, num_layers=layers, num_heads=heads, kv_dim=h,
                      intermediate_size=ffn, vocab_size=vocab, tied=_bool(config, "tie_word_embeddings", False, where),
                      max_positions=_positions(config, "n_positions", source=where), linears=linears, norm_params_per_layer=2 * h,
                      final_norm_params=2 * h, lm_head_bias=True, mlp_gated=False, layer_norm=True)
    if model_type == "qwen":  # Qwen v1 (remote code)
        h = _int(config, "hidden_size", source=where)
        layers = _int(config, "num_hidden_layers", source=where)
        heads = _int(config, "num_attention_heads", source=where)
        ffn = _int(config, "intermediate_size", source=where) // 2
        vocab = _int(config, "vocab_size", source=where)
        linears = (Linear("c_attn", h, 3 * h, True), Linear("c_proj", h, h), Linear("w1", h, ffn),
                   Linear("w2", h, ffn), Linear("mlp.c_proj", ffn, h))
        return common(family="qwen", hidden_size=h, num_layers=layers, num_heads=heads, kv_dim=h,
                      intermediate_size=ffn, vocab_size=vocab, tied=_bool(config, "tie_word_embeddings", False, where),
                      max_positions=_positions(config, "seq_length", source=where), linears=linears, norm_params_per_layer=2 * h,
                      final_norm_params=h)
    if model_type in ("llama", "mistral", "qwen2", "baichuan", "internlm2", "yi"):
        h = _int(config, "hidden_size", source=where)
        layers = _int(config, "num_hidden_layers", source=where)
        heads = _int(config, "num_attention_heads", source=where)
        # a config.json without num_key_value_heads gets its config class's default: 8 for mistral and 32 for qwen2
        # (transformers 5.24 configuration_mistral.py / configuration_qwen2.py), the attention heads elsewhere
        kv_heads = _int(config, "num_key_value_heads", default=KV_HEADS_DEFAULT.get(model_type, heads), source=where)
        head_dim = _int(config, "head_dim", default=h // heads, source=where) if config.get("head_dim") else h // heads
        ffn = _int(config, "intermediate_size", source=where)
        vocab = _int(config, "vocab_size", source=where)
        q, kv = heads * head_dim, kv_heads * head_dim
        mlp_bias = _bool(config, "mlp_bias", False, where)
        if model_type == "baichuan":
            attention = (Linear("W_pack", h, 3 * h), Linear("o_proj", h, h))
            mlp = (Linear("gate_proj", h, ffn), Linear("up_proj", h, ffn), Linear("down_proj", ffn, h))
        elif model_type == "internlm2":
            bias = _bool(config, "bias", False, where)
            attention = (Linear("wqkv", h, q + 2 * kv, bias), Linear("wo", q, h, bias))
            mlp = (Linear("w1", h, ffn), Linear("w3", h, ffn), Linear("w2", ffn, h))
        else:
            qkv_bias = model_type == "qwen2" or _bool(config, "attention_bias", False, where)
            attention = (Linear("q_proj", h, q, qkv_bias), Linear("k_proj", h, kv, qkv_bias),
                         Linear("v_proj", h, kv, qkv_bias),
                         Linear("o_proj", q, h, model_type != "qwen2" and _bool(config, "attention_bias", False, where)))
            mlp = (Linear("gate_proj", h, ffn, mlp_bias), Linear("up_proj", h, ffn, mlp_bias),
                   Linear("down_proj", ffn, h, mlp_bias))
        max_positions = _positions(config, "max_position_embeddings", "model_max_length", source=where)
        return common(family="llama", hidden_size=h, num_layers=layers, num_heads=heads, kv_dim=kv,
                      intermediate_size=ffn, vocab_size=vocab, tied=_bool(config, "tie_word_embeddings", False, where),
                      max_positions=max_positions, linears=attention + mlp, norm_params_per_layer=2 * h,
                      final_norm_params=h)
    raise DsdoctorError(f"{where}: model_type {model_type or '(none)'!r} is not an architecture dsdoctor can count "
                        f"without running its code; known: chatglm, qwen, qwen2, llama, mistral, baichuan, internlm2, "
                        f"gptj (or use a registry name: {', '.join(REGISTRY)})")


def read_config_json(spec: str) -> tuple[dict, str]:
    """A local ``config.json`` (the file, or a model directory holding one), read as data.

    Raises:
        DsdoctorError: no such file, a directory without ``config.json``, unreadable or not a JSON object.
    """
    path = Path(spec).expanduser()
    config_path = path / "config.json" if path.is_dir() else path
    if path.is_dir() and not config_path.is_file():
        raise DsdoctorError(f"--model {spec}: no config.json in {path}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise DsdoctorError(f"--model {spec}: {config_path} is not valid JSON") from None
    except OSError as exc:
        raise DsdoctorError(f"--model {spec}: cannot read {config_path} ({exc.strerror})") from None
    if not isinstance(config, dict):
        raise DsdoctorError(f"--model {spec}: {config_path} is not a JSON object")
    from dsdoctor.configfile import validate_values

    validate_values(config, "--model", str(config_path))
    return config, str(config_path)


def registry_key(spec: str) -> str | None:
    """The registry name for ``spec`` (case-insensitive; ``THUDM/chatglm-6b`` and common aliases work)."""
    key = spec.strip().lower().rstrip("/").split("/")[-1]
    key = ALIASES.get(key, key)
    return key if key in REGISTRY else None


def is_local(spec: str) -> bool:
    path = Path(spec).expanduser()
    return path.is_dir() or (path.is_file() and path.suffix == ".json")


def resolve_arch(spec: str) -> Arch:
    """The :class:`Arch` of a registry name or a local model directory / ``config.json``.

    Raises:
        DsdoctorError: an unknown name (the closest known names are listed), or a local config that is unreadable,
            of an unknown architecture, or missing a size.
    """
    if not spec.strip():
        raise DsdoctorError("--model is empty: give a registry name (e.g. chatglm-6b) or a model directory")
    if is_local(spec):
        config, source = read_config_json(spec)
        return arch_from_config(config, name=spec, source=source)
    key = registry_key(spec)
    if key is None:
        wanted = spec.strip().lower().split("/")[-1]
        close = difflib.get_close_matches(wanted, list(REGISTRY) + list(ALIASES), n=4, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        looks_like_path = "/" in spec or spec.startswith((".", "~"))
        what = "no such directory or config.json, and not a known model name" if looks_like_path else \
            "unknown model name"
        raise DsdoctorError(f"--model {spec}: {what}; {hint}known: {', '.join(REGISTRY)} "
                            f"(or a local model directory with a config.json)")
    repo, config = REGISTRY[key]
    return arch_from_config(config, name=key, source=f"{repo} config.json (registry)")


@dataclass(frozen=True)
class ModelInfo:
    """``dtype`` is the weights' dtype as saved (``bfloat16``, ``float16``, ``float32``) or "" when unknown."""

    name: str
    dtype: str
    hidden_size: int | None
    source: str


def model_info(spec: str) -> ModelInfo:
    """Facts the config checks need about ``spec`` (a registry name or a local directory with a ``config.json``):
    the weights' dtype and the hidden size. Unlike :func:`resolve_arch`, a local config of an architecture that
    cannot be counted is fine here.

    Raises:
        DsdoctorError: an unknown name, a directory without ``config.json``, or a broken ``config.json``.
    """
    if is_local(spec):
        config, source = read_config_json(spec)
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        dtype = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or text.get("dtype")
        hidden = config.get("hidden_size") or config.get("n_embd") or text.get("hidden_size")
        return ModelInfo(name=spec, dtype=_DTYPES.get(str(dtype).lower(), "") if dtype else "",
                         hidden_size=hidden if isinstance(hidden, int) else None, source=source)
    arch = resolve_arch(spec)
    return ModelInfo(name=arch.name, dtype=arch.dtype, hidden_size=arch.hidden_size, source=arch.source)


# --- trainable parameters per fine-tuning method ---------------------------------------------------------------

#: LoRA target modules when --lora-targets is not given: peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
#: (``peft/utils/constants.py``) where it has the model type, else the fused attention projection that
#: ``reference_train.train.lora_targets`` falls back to.
DEFAULT_LORA_TARGETS = {"chatglm": ("query_key_value",), "chatglm2": ("query_key_value",),
                        "llama": ("q_proj", "v_proj"), "gptj": ("q_proj", "v_proj"), "qwen": ("c_attn",)}


def default_lora_targets(arch: Arch) -> tuple[str, ...]:
    """The modules LoRA wraps by default for ``arch`` (see :data:`DEFAULT_LORA_TARGETS`)."""
    if arch.model_type == "baichuan":
        return ("W_pack",)
    if arch.model_type == "internlm2":
        return ("wqkv",)
    return DEFAULT_LORA_TARGETS[arch.family]


def trainable_params(arch: Arch, method: str, *, lora_r: int = 8, lora_targets: tuple[str, ...] | None = None,
                     freeze_last: int = 2, prefix_tokens: int = 16) -> int:
    """Trainable parameters of ``method`` on ``arch``, as peft and the reference trainer build them.

    - ``full``: every parameter.
    - ``lora``: ``r * (in_features + out_features)`` per wrapped linear per layer (peft's ``lora_A``: in x r,
      ``lora_B``: r x out, no bias; ``peft/tuners/lora/layer.py``). ChatGLM-6B, r=8 on ``query_key_value``:
      28 x (4096*8 + 8*12288) = 3,670,016.
    - ``freeze``: the last ``freeze_last`` decoder layers (``reference_train.train.build_model``).
    - ``ptuning``: peft prefix tuning without projection: an embedding of ``prefix_tokens`` x (2 x layers x
      token_dim), token_dim = hidden size, or ``num_key_value_heads * head_dim`` when the config has
      ``num_key_value_heads``, as llama, mistral and qwen2 configs always do once transformers has filled its
      default (``peft/utils/other.py`` ``_prepare_prompt_learning_config``).

    Raises:
        DsdoctorError: an unknown method, a LoRA target that is not a linear of this architecture, a
            non-positive rank, or ``freeze_last`` above the number of layers.
    """
    if method == "full":
        return arch.total_params
    if method == "lora":
        if lora_r < 1:
            raise DsdoctorError(f"--lora-r must be at least 1, got {lora_r}")
        targets = lora_targets or default_lora_targets(arch)
        names = [lin.name for lin in arch.linears]
        if tuple(targets) == ("all-linear",):  # peft's keyword: every linear layer but the output projection
            targets = tuple(names)
        unknown = [t for t in targets if arch.linear(t) is None and not any(n.endswith("." + t) for n in names)
                   and t != "lm_head"]
        if unknown:
            raise DsdoctorError(f"--lora-targets {','.join(unknown)}: not a linear layer of {arch.name} "
                                f"({arch.model_type}); its linears: {', '.join(names)} (or all-linear)")
        wrapped = [lin for lin in arch.linears if lin.name in targets or lin.name.split(".")[-1] in targets]
        head = lora_r * (arch.hidden_size + arch.vocab_size) if "lm_head" in targets else 0  # the output projection
        return arch.num_layers * sum(lora_r * (lin.in_features + lin.out_features) for lin in wrapped) + head
    if method == "freeze":
        if not 1 <= freeze_last <= arch.num_layers:
            raise DsdoctorError(f"--freeze-last must be between 1 and {arch.num_layers} (the layers of "
                                f"{arch.name}; 0 would train nothing and DeepSpeed refuses an empty optimizer), "
                                f"got {freeze_last}")
        return freeze_last * arch.layer_params
    if method == "ptuning":
        if prefix_tokens < 1:
            raise DsdoctorError(f"--prefix-tokens must be at least 1, got {prefix_tokens}")
        # peft reads the config's to_dict(), where transformers' llama, mistral and qwen2 configs always have
        # num_key_value_heads (the attention heads when config.json has none)
        gqa = "num_key_value_heads" in arch.config or arch.model_type in ("llama", "mistral", "qwen2")
        token_dim = arch.kv_dim if gqa else arch.hidden_size
        return prefix_tokens * 2 * arch.num_layers * token_dim
    raise DsdoctorError(f"unknown method {method!r}: full, lora, freeze or ptuning")
