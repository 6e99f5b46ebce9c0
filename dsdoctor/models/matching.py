"""Which shipped structure answers a local config.json without building it: the registry row it equals
(:func:`shipped_for`), a registry row at other sizes through its shape template (:func:`scaled_for`), or its config
class's defaults through theirs (:func:`default_for`). Each returns None when it cannot answer exactly, and the
caller builds the model on the meta device (:mod:`dsdoctor.models.structure`), which stays the reference.

No torch or transformers import: this is the fast path of ``estimate --model PATH``."""

from __future__ import annotations

from dsdoctor.models.structure import FORMAT, shipped_structures

#: config.json keys that change neither a parameter's shape nor what a training step saves, so that a local
#: config.json equal to a registry row on every other key has that row's shipped structure: names, ids, numerics
#: of norms and RoPE, initialisation, the dtype as saved, the generation cache, the activation function's name
#: (the structure holds the linears and norms; the activations are counted per linear and norm).
NEUTRAL_KEYS = frozenset({"architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "use_cache",
                          "initializer_range", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta",
                          "rope_scaling", "rope_parameters", "bos_token_id", "eos_token_id", "pad_token_id",
                          "max_position_embeddings", "hidden_act", "hidden_activation", "output_router_logits",
                          "cache_implementation"})


def _ignorable(key: str, value) -> bool:
    """Whether config.json's ``key`` leaves the structure a row ships as it is: one of :data:`NEUTRAL_KEYS`, a
    dropout rate of 0 (``attention_dropout``, Phi-3's ``embd_pdrop`` / ``resid_pdrop``: no mask is drawn), or
    ``auto_map`` (the repository's own code, which dsdoctor never runs: :func:`build_meta` drops it and builds
    transformers' class of the model_type, as ``AutoModelForCausalLM`` does without ``trust_remote_code``)."""
    if key in NEUTRAL_KEYS or key == "auto_map":
        return True
    return is_dropout(key) and value == 0


def is_dropout(key: str) -> bool:
    """Whether config.json's ``key`` is a dropout rate (``attention_dropout``, ``resid_pdrop``, ...): no shape, but
    a rate above 0 draws masks the activations keep."""
    return key.endswith(("dropout", "pdrop", "dropout_prob", "dropout_rate"))


def _same(a, b) -> bool:
    """Equal as config.json values: 4096.0 is not 4096 (transformers refuses a float size), True is not 1."""
    return a == b and isinstance(a, bool) == isinstance(b, bool) and isinstance(a, float) == isinstance(b, float)


def shipped_for(config: dict) -> tuple[str, dict] | None:
    """(registry name, shipped structure) when ``config`` is that registry row's config.json as saved: the same
    value for every key of the row but :data:`NEUTRAL_KEYS`, and only those besides (or :func:`_ignorable` ones),
    their values as saved (:func:`_as_saved`). A user's local copy of a registry model then needs no
    transformers import (the meta build costs 8-10 s cold on 2 cores, benchmarks/results/estimate-speed.txt). None
    otherwise."""
    for name, _, desc in _rows_like(config, frozenset()):
        return name, _as_saved(desc, config)
    return None


def _type_facts(config: dict) -> tuple[frozenset[str], dict, frozenset[str]]:
    """What the default template of ``config``'s model_type (:func:`dsdoctor.models.template.default_template`,
    probed on transformers' own config class at release) says of its keys: (the float keys whose change alone
    leaves the structure as it is: Mixtral's ``router_aux_loss_coef``; the class defaults; the keys its ``__init__``
    derives from others when omitted). Empty when the type has no default template. Flags the probe found neutral
    are not taken: a flag's effect can depend on another key (Qwen3's ``use_sliding_window`` with a window set)."""
    from dsdoctor.models.template import default_template

    entry = default_template(config.get("model_type"))
    if not isinstance(entry, dict) or not isinstance(entry.get("row"), dict):
        return frozenset(), {}, frozenset()
    row = entry["row"]
    floats = frozenset(k for k in entry.get("neutral", ()) if isinstance(row.get(k), float))
    return floats, row, frozenset(entry.get("derived", ()))


def _rows_like(config: dict, free: frozenset[str]):
    """(registry name, its config.json values, shipped structure) of each row ``config`` equals on every key but
    :data:`NEUTRAL_KEYS`, ``free`` and the float keys its model type's probe found neutral (:func:`_type_facts`),
    with no key besides those (:func:`_ignorable`). A key the row has must be given, unless it is a flag or a float
    whose config class default (what transformers then takes) equals the row's value and is not derived from other
    keys: Gemma-2-9B's config.json as served has no ``tie_word_embeddings``, and Gemma2Config's default is the row's
    ``true``. A size left out is never assumed (the meta build refuses it too)."""
    from dsdoctor.models.registry import REGISTRY

    neutral, defaults, derived = _type_facts(config)
    extra = {k for k, v in config.items() if not _ignorable(k, v) and k not in neutral}

    def agrees(key, value) -> bool:
        if key in NEUTRAL_KEYS or key in neutral:
            return True
        if key not in config:  # a flag or a float only: a size left out is refused (structure.SIZE_ATTRIBUTES)
            return isinstance(value, (bool, float)) and key in defaults and key not in derived and \
                _same(defaults[key], value)
        return key in free or _same(config[key], value)

    for name, (_, row) in REGISTRY.items():
        if row.get("model_type") == config.get("model_type") and extra <= set(row) | free and \
                all(agrees(k, v) for k, v in row.items()):
            desc = shipped_structures().get(name)
            if desc is not None and desc.get("format") == FORMAT:
                yield name, row, desc


def _as_saved(desc: dict, config: dict) -> dict:
    """``desc`` with what a neutral key of ``config`` changes: the positions (``max_position_embeddings``) and the
    dtype as saved (``torch_dtype`` / ``dtype``), as :func:`describe` reads them off the config. ``desc`` itself
    when neither differs (the shipped dict is shared: it is copied before a change)."""
    changes = {}
    positions = config.get("max_position_embeddings")
    if _positive_int(positions) and positions != desc.get("max_positions"):
        changes["max_positions"] = positions
    dtype = config.get("torch_dtype", config.get("dtype"))
    if isinstance(dtype, str) and dtype and dtype != desc.get("dtype"):
        changes["dtype"] = dtype
    return {**desc, **changes} if changes else desc


#: the keys in which a local config.json may differ from a registry row of its model_type and still take that row's
#: shipped structure, rewritten exactly (:func:`scaled_for`): the vocabulary (tokens added and the embedding resized)
#: and the number of decoder layers (of one kind)
SCALED_KEYS = frozenset({"vocab_size", "num_hidden_layers", "layer_types"})


def scaled_for(config: dict) -> tuple[str, dict] | None:
    """(registry name, structure) for a ``config`` that is a registry row's config.json but for its sizes
    (:data:`NEUTRAL_KEYS` ignored as in :func:`shipped_for`): the row's shipped structure rewritten exactly as
    :func:`describe` would read it off the model built from ``config`` (``tests/test_structure.py`` and
    ``tests/test_template.py`` compare the two):

    - any size key of the row's shape template (:mod:`dsdoctor.models.template`: ``hidden_size``,
      ``intermediate_size``, heads, key/value heads, head size, experts, ...; fitted on transformers' own models
      and shipped in ``templates.json``): every integer of the structure recomputed from the config's sizes;
    - vocabulary V -> V': the input embedding and an untied output projection are V x w (w: their width, bias
      V), so their parameters scale by V'/V; the total by the difference;
    - layers L -> L': every decoder layer of the row must be of one kind (a list of identical layers, as
      transformers' ``nn.ModuleList`` of ``config.num_hidden_layers`` decoder layers); the total changes by
      (L' - L) x that layer's parameters. ``layer_types`` may differ only in length, holding the row's one type.

    None when no row of the same model_type differs only so, when a layout the rewrite does not cover is met (a
    key the template keeps fixed, several layer kinds with another layer count, an embedding that is not V x w, a
    multimodal ``text_config``), or when the values are not positive integers: the caller then builds the model on
    the meta device."""
    if isinstance(config.get("text_config"), dict):
        return None
    from dsdoctor.models.template import shipped_templates

    templates = shipped_templates()
    sized = frozenset(k for t in templates.values() for k in t.get("free", ()))
    neutral = _type_facts(config)[0]
    for name, row, desc in _rows_like(config, SCALED_KEYS | sized):
        template = templates.get(name)
        own = set(template["free"]) if template else set()
        differs = {k for k, v in config.items() if not _ignorable(k, v) and k not in neutral
                   and not _same(v, row.get(k))}
        if not differs <= SCALED_KEYS | own:
            continue
        resized = _resized(template if differs & own else None, desc, row, config)
        if resized is not None:
            return name, resized
    return None


def _resized(template: dict | None, desc: dict, row: dict, config: dict) -> dict | None:
    """``desc`` (the structure of config.json ``row``) at ``config``'s sizes: the template's integers
    (:func:`dsdoctor.models.template.evaluate`), then the vocabulary and layer count (:func:`_rescale`); None where
    either declines or nothing differs."""
    from dsdoctor.models.template import evaluate

    resized, sized_row = desc, row
    if template is not None:
        resized = evaluate(template, desc, row, config)
        if resized is None:
            return None
        sized_row = {**row, **{k: config[k] for k in template["free"] if k in config}}
    scaled = _rescale(resized, sized_row, config)
    if scaled is not None:
        return _as_saved(scaled, config)
    if resized is not desc and _positive_int(config.get("num_hidden_layers")) and \
            config["num_hidden_layers"] == row.get("num_hidden_layers") and \
            config.get("layer_types") == row.get("layer_types"):
        return _as_saved(resized, config)
    return None


def default_for(config: dict) -> dict | None:
    """The structure of ``config`` from its model_type's shipped default template
    (:func:`dsdoctor.models.template.default_match`: the config class's defaults, built and fitted at release), for
    any causal-LM architecture of transformers that no registry row covers; the defaults' own structure when only
    neutral keys differ. None when the config differs from the defaults in a way the template does not cover: the
    caller builds it on the meta device. Exact: ``tests/test_template.py`` compares it with the meta build."""
    from dsdoctor.models.template import default_match

    if isinstance(config.get("text_config"), dict):
        return None
    match = default_match(config)
    if match is None:
        return None
    entry, full = match
    desc, row = entry["desc"], entry["row"]
    if all(_same(full.get(k), row.get(k)) for k in set(entry["template"]["free"]) | SCALED_KEYS):
        return _as_saved(desc, full)
    return _resized(entry["template"], desc, row, full)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _rescale(desc: dict, row: dict, config: dict) -> dict | None:
    """``desc`` (the structure of registry row ``row``) with ``config``'s vocabulary and layer count (see
    :func:`scaled_for`); None where the rewrite does not apply."""
    vocab = config.get("vocab_size", row.get("vocab_size"))
    layers = config.get("num_hidden_layers", row.get("num_hidden_layers"))
    if not (_positive_int(vocab) and _positive_int(layers)) or vocab == row.get("vocab_size") and \
            layers == row.get("num_hidden_layers") and config.get("layer_types") == row.get("layer_types"):
        return None
    types = config.get("layer_types")
    if types is not None or row.get("layer_types") is not None:
        if not (isinstance(types, list) and isinstance(row.get("layer_types"), list) and len(types) == layers
                and len(set(map(str, types))) == 1 and set(map(str, types)) == set(map(str, row["layer_types"]))):
            return None
    old_vocab = desc["vocab_size"]
    if old_vocab != row.get("vocab_size") or len(set(desc["layers"])) != 1 or desc["embedding_params"] % old_vocab:
        return None
    width = desc["embedding_params"] // old_vocab
    head = desc["lm_head_params"]
    if not desc["tied"] and head % old_vocab:
        return None
    kind = desc["layers"][0]
    embedding, lm_head = vocab * width, head // old_vocab * vocab
    return {**desc, "vocab_size": vocab, "embedding_params": embedding, "lm_head_params": lm_head,
            "layers": [kind] * layers,  # the shipped dict is shared: its values are replaced, never changed
            "total_params": (desc["total_params"] + embedding - desc["embedding_params"] + lm_head - head
                             + (layers - len(desc["layers"])) * desc["kinds"][kind]["params"])}


def _retied(desc: dict, tied: bool) -> dict | None:
    """``desc`` with its output projection tied to the input embedding (``tied``) or given its own weight: the
    embedding is V x h and an untied, bias-free ``lm_head`` is the same V x h (``nn.Linear(hidden, vocab,
    bias=False)`` in every causal-LM class built so: ``describe`` reads ``lm_head_params`` 0 when tied). None where
    the embedding is not exactly V x h (position or other embeddings counted with it) or the head has a bias."""
    if desc.get("tied") == tied:
        return desc
    embedding, vocab, hidden = desc.get("embedding_params"), desc.get("vocab_size"), desc.get("hidden_size")
    if desc.get("lm_head_bias") or not (_positive_int(vocab) and _positive_int(hidden)) or embedding != vocab * hidden:
        return None
    if tied:
        if desc.get("lm_head_params") != embedding:
            return None
        return {**desc, "tied": True, "lm_head_params": 0, "total_params": desc["total_params"] - embedding}
    if desc.get("lm_head_params") != 0:
        return None
    return {**desc, "tied": False, "lm_head_params": embedding, "total_params": desc["total_params"] + embedding}


def retied_for(config: dict) -> tuple[str, dict] | None:
    """(what answered, structure) for a ``config`` that one of :func:`shipped_for`, :func:`scaled_for` and
    :func:`default_for` would answer if its ``tie_word_embeddings`` were the other way: that answer with the output
    projection tied or untied (:func:`_retied`). A tied Granite-3.1-8B (GraniteConfig's default is untied) or an
    untied StarCoder2 is then counted without building it; ``tests/test_template.py`` compares with the meta build.
    None when ``tie_word_embeddings`` is not given as a boolean, or nothing answers the flipped config."""
    tied = config.get("tie_word_embeddings")
    if not isinstance(tied, bool):
        return None
    flipped = {**config, "tie_word_embeddings": not tied}
    for label, answer in (("registry", shipped_for), ("registry", scaled_for)):
        found = answer(flipped)
        if found is not None:
            desc = _retied(found[1], tied)
            if desc is not None:
                return f"{label} {found[0]}", desc
    desc = default_for(flipped)
    if desc is not None:
        desc = _retied(desc, tied)
        if desc is not None:
            return f"transformers' {desc['class']} at its config class's defaults", desc
    return None
