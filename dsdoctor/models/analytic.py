"""Analytic architectures from ``config.json`` keys: the families whose modeling code is remote (ChatGLM, Qwen v1,
Baichuan, InternLM2) and the transformers families llama, mistral, qwen2 and gptj, whose formulas
``tests/test_models.py`` checks against the model built on the meta device."""

from __future__ import annotations

from dsdoctor.models.arch import Arch, Linear
from dsdoctor.models.registry import REGISTRY
from dsdoctor.report import DsdoctorError

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}

#: The model types :func:`arch_from_config` counts from config.json keys; any other type that transformers implements
#: is read off the model built on the meta device (:mod:`dsdoctor.models.structure`).
ANALYTIC_TYPES = ("chatglm", "qwen", "baichuan", "internlm2", "llama", "mistral", "qwen2", "gptj", "yi")


def is_analytic(config: dict) -> bool:
    """Whether :func:`arch_from_config` counts ``config`` (its own, or its text_config's, model type is one of
    :data:`ANALYTIC_TYPES`)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    model_type = text.get("model_type") or config.get("model_type") if text else config.get("model_type")
    return str(model_type or "") in ANALYTIC_TYPES


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


def unmodeled_keys(arch: Arch) -> list[str] | None:
    """The keys of ``arch.config`` that the analytic count does not account for: ``[]`` when the count is exact
    for this config (every key is in :data:`SHAPE_KEYS` or :data:`NEUTRAL_KEYS` for its ``model_type``), ``None``
    when the model type is not one transformers implements (its count can only be analytic)."""
    shape = SHAPE_KEYS.get(arch.model_type)
    if shape is None:
        return None
    return sorted(k for k in arch.config if k not in shape and k not in NEUTRAL_KEYS)


SIZE_LIMITS = {"layers": 1000, "hidden": 1_000_000, "vocab": 10_000_000, "heads": 100_000}
_LIMIT_OF = {"num_layers": "layers", "num_hidden_layers": "layers", "n_layer": "layers", "hidden_size": "hidden",
             "n_embd": "hidden", "intermediate_size": "hidden", "inner_hidden_size": "hidden",
             "ffn_hidden_size": "hidden", "n_inner": "hidden", "kv_channels": "hidden", "head_dim": "hidden",
             "vocab_size": "vocab", "padded_vocab_size": "vocab", "num_attention_heads": "heads", "n_head": "heads",
             "num_key_value_heads": "heads", "multi_query_group_num": "heads"}


#: Mixture-of-experts sizes: the experts' count (four spellings), the experts each token is routed to, an expert's
#: width. Checked like the sizes above where present; an expert count may be 0 (some configs mean "dense").
_MOE_SIZES = {"num_experts": "heads", "num_local_experts": "heads", "n_routed_experts": "heads",
              "moe_num_experts": "heads", "num_experts_per_tok": "heads", "moe_intermediate_size": "hidden"}
_MAY_BE_ZERO = frozenset({"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"})
#: (attention heads, key/value heads) spellings whose ratio transformers' attention needs to be whole
_HEAD_PAIRS = (("num_attention_heads", "num_key_value_heads"), ("num_attention_heads", "multi_query_group_num"),
               ("n_head", "num_key_value_heads"))


def check_sizes(config: dict, source: str) -> None:
    """Refuse a config.json whose sizes no model can have, before any path counts it (the analytic formulas, a
    shipped structure, a shape template or the meta build would otherwise give a confident estimate of a model that
    cannot exist, or transformers a raw ``ZeroDivisionError``). Checked at the top level and in ``text_config``:

    - every size key present (hidden, MLP, head and expert widths, layers, heads, key/value heads, vocabulary, expert
      count and top-k; :data:`_LIMIT_OF`, :data:`_MOE_SIZES`) is null or an integer (not ``4096.0``, ``"4096"`` or
      ``true``; a list of such, one per layer), at least 1 (0 allowed for an expert count) and at most
      :data:`SIZE_LIMITS`;
    - the attention heads are a whole multiple of the key/value heads: transformers' attention repeats each
      key/value head ``num_attention_heads // num_key_value_heads`` times (``repeat_kv`` in
      ``models/llama/modeling_llama.py``), and the view into heads fails at the first forward when it does not divide.

    Raises:
        DsdoctorError: one line naming the key, the value seen and what it must be."""
    parts = [(config, "")]
    if isinstance(config.get("text_config"), dict):
        parts.append((config["text_config"], "text_config."))
    for part, prefix in parts:
        for key, kind in {**_LIMIT_OF, **_MOE_SIZES}.items():
            value = part.get(key)
            if value is None:
                continue
            least = 0 if key in _MAY_BE_ZERO else 1
            # a list holds one size per layer (Gemma-3n's intermediate_size): each is checked
            for item in value if isinstance(value, list) and value else [value]:
                if isinstance(item, bool) or not isinstance(item, int) or item < least:
                    what = "a non-negative integer" if least == 0 else "a positive integer"
                    raise DsdoctorError(f"{source}: {prefix}{key} must be {what}, got {_shown(value)}")
                if item > SIZE_LIMITS[kind]:
                    raise DsdoctorError(f"{source}: {prefix}{key} = {item:,} is not a real model's size (at most "
                                        f"{SIZE_LIMITS[kind]:,})")
        for heads_key, kv_key in _HEAD_PAIRS:
            heads, kv = part.get(heads_key), part.get(kv_key)
            if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
                raise DsdoctorError(f"{source}: {prefix}{heads_key} = {heads} is not a multiple of {prefix}{kv_key} = "
                                    f"{kv}: transformers' attention repeats each key/value head heads/kv times "
                                    f"(repeat_kv), so this model fails at its first forward; the repository's own "
                                    f"config.json has values that divide")


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
                      q_dim=q if q != h else None,
                      intermediate_size=ffn, vocab_size=vocab, tied=_bool(config, "tie_word_embeddings", False, where),
                      max_positions=max_positions, linears=attention + mlp, norm_params_per_layer=2 * h,
                      final_norm_params=h)
    raise DsdoctorError(f"{where}: model_type {model_type or '(none)'!r} is not an architecture dsdoctor can count "
                        f"without running its code; known: chatglm, qwen, qwen2, llama, mistral, baichuan, internlm2, "
                        f"gptj (or use a registry name: {', '.join(REGISTRY)})")
