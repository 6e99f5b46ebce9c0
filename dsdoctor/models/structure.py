"""The structure of any architecture transformers implements, read off the model itself built on the meta device.

For a ``model_type`` the installed transformers has modeling code for (``transformers/models/<type>/modeling_<type>.py``),
no formula per family is written here: the model is built from the config on torch's meta device (no memory, no
weights) and its modules are read. One decoder layer at a time (the longest ``nn.ModuleList`` of the model is its
decoder layer list, as ``reference_train.train.build_model`` and ``dsdoctor.meta_count`` take it):

- every ``nn.Linear`` (and transformers' ``Conv1D``, which peft's ``all-linear`` also wraps) with its shape, its bias
  and its role: ``attn_in`` / ``attn_out`` when an enclosing module's class is an attention module (its name holds
  ``Attention``), else ``mlp_in`` / ``mlp_out`` (reads / writes the hidden size), ``expert`` inside a list of experts,
  ``inner`` for anything else (a low-rank projection between two others, as DeepSeek-V2's ``kv_a_proj``);
- mixture-of-experts weights stored as 3-D parameters (transformers 5's fused ``*Experts`` modules:
  ``gate_up_proj`` of shape (E, 2I, h), ``down_proj`` (E, h, I)), their number E and width I; the router;
- the norms (a module whose class name holds ``Norm``) and the width of the tensor each normalises (Qwen3's
  ``q_norm``/``k_norm`` normalise each head: the query and key widths);
- what is left (any other parameter of the layer), which the activation formulas do not model and the report names.

From the whole model: the input embedding, the output projection (once when tied), the final norm, the exact total
``sum(p.numel() for p in model.parameters())``; from the config object (its normalised attributes, e.g. GPT-2's
``n_embd`` read as ``hidden_size`` through ``attribute_map``): heads, key/value heads, head size, experts per token,
logit softcapping; from the model class: whether it supports SDPA (``_supports_sdpa``; Gemma-2 does not, because
SDPA has no softcapping, so transformers runs eager attention, which saves the s x s probabilities); from peft:
the prefix width P-Tuning gives each layer (``peft/utils/other.py`` ``_prepare_prompt_learning_config``) and its
default LoRA targets (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``).

The result is a JSON-able dict (:func:`describe`), cached per (config.json, transformers, peft) in
``$XDG_CACHE_HOME/dsdoctor/structures.json``, and turned into the :class:`dsdoctor.models.arch.Arch` that the memory
estimate reads (:func:`arch_from_structure`). The registry's rows of such architectures ship their structure in
``dsdoctor/models/structures.json`` (written by ``python -m dsdoctor.models.structure --write``; a test
rebuilds each and compares), so that a registry name needs no import of torch or transformers.

Imports torch, transformers and peft (about 4 s on a 2-core machine, once per config thanks to the cache). No remote
code runs: a ``model_type`` transformers does not know is refused here, and left to :mod:`dsdoctor.models.analytic`.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

from dsdoctor.models.analytic import _DTYPES
from dsdoctor.models.arch import Arch, Linear
from dsdoctor.report import DsdoctorError

#: version of the dict :func:`describe` returns: a cache entry of another version is rebuilt
FORMAT = 1
#: the keys of config.json that are not the model's: dropped before ``AutoConfig.for_model``
_NOT_MODEL_KEYS = ("auto_map", "_name_or_path", "transformers_version", "architectures", "model_type")
#: config attributes that name the experts per token and the expert count, in the spellings of transformers'
#: mixture-of-experts configs (qwen2_moe/qwen3_moe: num_experts; mixtral, jamba: num_local_experts; deepseek_v2/v3:
#: n_routed_experts; olmoe, granitemoe: num_experts)
_EXPERTS_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k")


def _versions() -> tuple[str, str]:
    from dsdoctor.meta_count import versions

    transformers, peft = versions("transformers", "peft")
    return transformers, peft


def cached_structure(config: dict) -> dict:
    """:func:`describe` of the model ``config`` builds, remembered per (config.json, transformers, peft, format) in
    ``$XDG_CACHE_HOME/dsdoctor/structures.json`` (:func:`dsdoctor.meta_count.disk_cached`): building it takes about
    4 s cold (importing transformers' modeling code), the cache read a few milliseconds.

    Raises:
        DsdoctorError: transformers cannot build this config (see :func:`build_meta`)."""
    from dsdoctor.meta_count import disk_cached

    return disk_cached("structures.json", [config, _versions(), FORMAT], lambda: describe_config(config),
                       lambda hit: isinstance(hit, dict) and hit.get("format") == FORMAT)


def build_meta(config: dict):
    """(model, its config object): ``AutoModelForCausalLM.from_config`` of ``config`` under ``torch.device("meta")``,
    with transformers', peft's and torch's output silenced (``dsdoctor.meta_count._quiet``).

    Raises:
        DsdoctorError: no ``model_type``, or transformers refuses the config or cannot build it (one line with its
            message)."""
    from dsdoctor.meta_count import _quiet

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise DsdoctorError("config.json has no model_type: transformers cannot tell which architecture it is")
    values = {k: v for k, v in config.items() if k not in _NOT_MODEL_KEYS}
    with _quiet():
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise DsdoctorError(f"model_type {model_type!r} is not a decoder-only language model (transformers has "
                                f"no AutoModelForCausalLM for it): dsdoctor estimates causal-LM fine-tuning")
        try:
            hf_config = AutoConfig.for_model(model_type, **values)
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds here; the user gets one line
            raise DsdoctorError(f"transformers cannot read {model_type!r} from this config.json: "
                                f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
        _refuse_default_sizes(config, hf_config)
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(hf_config)
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds here; the user gets one line
            if isinstance(exc, ValueError) and "AutoModelForCausalLM" in str(exc):
                raise DsdoctorError(f"model_type {model_type!r} is not a decoder-only language model (transformers "
                                    f"has no AutoModelForCausalLM for it): dsdoctor estimates causal-LM "
                                    f"fine-tuning") from None
            raise DsdoctorError(f"transformers cannot build {model_type!r} from this config.json: "
                                f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
    return model, hf_config


#: The sizes a config class would fill from its own defaults when config.json omits them: a config.json without
#: one would silently be estimated as the default model of its class (Qwen3MoeConfig's 128 experts, a 4096 hidden
#: size), so a top-level config must give them. A multimodal ``text_config`` may rely on defaults (Gemma-3's do).
SIZE_ATTRIBUTES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                   *_EXPERTS_KEYS, "moe_intermediate_size", "num_experts_per_tok")


def _refuse_default_sizes(config: dict, hf_config) -> None:
    """Raise DsdoctorError when ``config`` (config.json, top level) leaves a size of :data:`SIZE_ATTRIBUTES` that its
    config class has to the class default (``attribute_map`` aliases count as given: GPT-2's ``n_embd`` is its
    ``hidden_size``)."""
    if isinstance(config.get("text_config"), dict):
        return
    aliases = dict(getattr(hf_config, "attribute_map", {}) or {})
    missing = []
    seen: set[str] = set()
    for name in SIZE_ATTRIBUTES:
        real = aliases.get(name, name)
        given = {name, real} | {alias for alias, target in aliases.items() if target == real}
        if real in seen or given & set(config):
            continue
        seen.add(real)
        if name == "intermediate_size" and any(k in config for k in ("n_inner", "ffn_hidden_size")):
            continue
        try:
            value = getattr(hf_config, name)
        except AttributeError:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            missing.append(f"{name} (its class default: {value:,})")
    if missing:
        raise DsdoctorError(f"config.json has no {', '.join(missing)}: transformers would build the default model "
                            f"of {type(hf_config).__name__}, not this one; give the value the model's repository has")


def describe_config(config: dict) -> dict:
    """:func:`describe` of the model built from ``config`` on the meta device (:func:`build_meta`)."""
    model, hf_config = build_meta(config)
    from dsdoctor.meta_count import _quiet

    with _quiet():
        return describe(model, hf_config)


def _attr(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None and not isinstance(value, bool):
            return value
    return default


def _layer_list(model):
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    if not lists:
        raise DsdoctorError(f"{type(model).__name__} has no list of decoder layers dsdoctor can read")
    return max(lists, key=len)


class _TraceDone(Exception):
    """Raised by a hook once the traced layer has run."""


def _trace_reads(model, layer) -> dict[str, tuple[str, bool]]:
    """What each linear of ``layer`` reads, found by running the model forward on the meta device (shapes only, no
    data: a few milliseconds) with hooks: ``{linear name: (label of its input tensor, whether it is an input
    projection)}``. The label is the norm whose output it reads, else ``tensor<k>``; linears reading one tensor share
    it (GPT-J's attention and MLP read one norm). An input projection reads the tensor the first linear called in its
    parent module reads (q, k and v; gate and up): the others (the attention output projection, the MLP's down
    projection, a low-rank up-projection) read what their block computed. A linear the forward never reached (a
    mixture-of-experts block stops a meta forward: its routing needs data) is absent."""
    import torch

    norm_outputs: dict[int, str] = {}
    calls: list[tuple[str, int]] = []
    kept: list = []  # every tensor seen stays alive until the end, so that no id() is reused for another
    hooks = []
    try:
        for name, module in layer.named_modules():
            if "Norm" in type(module).__name__:
                def after(mod, args, out, name=name):
                    tensor = out[0] if isinstance(out, tuple) else out
                    kept.append(tensor)
                    norm_outputs[id(tensor)] = name
                hooks.append(module.register_forward_hook(after))
            elif hasattr(module, "weight") and type(module).__name__ in ("Linear", "Conv1D"):
                def before(mod, args, name=name):
                    if args and not any(n == name for n, _ in calls):
                        kept.append(args[0])
                        calls.append((name, id(args[0])))
                hooks.append(module.register_forward_pre_hook(before))
        def stop(mod, args, out):
            raise _TraceDone

        hooks.append(layer.register_forward_hook(stop))  # the layers after this one are not needed
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 8, dtype=torch.long, device="meta"))
    except Exception:  # noqa: BLE001 - _TraceDone, or a failure: what was traced before it is kept
        pass
    finally:
        for hook in hooks:
            hook.remove()
    first_input: dict[str, int] = {}
    labels: dict[int, str] = {}
    out: dict[str, tuple[str, bool]] = {}
    for name, tensor in calls:
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        first_input.setdefault(parent, tensor)
        label = labels.setdefault(tensor, norm_outputs.get(tensor) or f"tensor{len(labels)}")
        out[name] = (label, first_input[parent] == tensor)
    return out


def _describe_layer(layer, hidden: int, heads: int, head_dim: int, kv_heads: int, num_experts: int | None,
                    reads: dict[str, tuple[str, bool]] | None = None) -> dict:
    """One decoder layer: its linears with roles, experts, router, norms and what is left (see the module
    docstring). Sizes in elements. ``reads`` (:func:`_trace_reads`) gives each linear's input and whether it is an
    input projection (reading the hidden size); any other is an output projection when it writes the hidden size,
    else ``inner``; a linear not traced falls back to its shape (reads the hidden size: input)."""
    reads = reads or {}
    import torch

    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - every transformers since 4.0 has it
        Conv1D = ()
    modules = dict(layer.named_modules())
    linears, norms, experts, other = [], [], [], 0
    router = 0
    claimed: set[str] = set()

    def ancestors(name: str):
        parts = name.split(".")
        return [modules.get(".".join(parts[:i])) for i in range(len(parts) - 1, -1, -1)]

    def in_attention(name: str) -> bool:
        return any(m is not None and ("Attention" in type(m).__name__ or "Attn" in type(m).__name__)
                   for m in ancestors(name)[:-1] if m is not layer)

    def in_expert_list(name: str) -> bool:
        parts = name.split(".")
        return any(isinstance(modules.get(".".join(parts[:i])), torch.nn.ModuleList) for i in range(1, len(parts)))

    for name, module in layer.named_modules():
        if name == "":
            continue
        own = dict(module.named_parameters(recurse=False))
        if isinstance(module, (torch.nn.Linear,) + ((Conv1D,) if Conv1D else ())):
            weight = module.weight
            if isinstance(module, torch.nn.Linear):
                fan_in, fan_out = weight.shape[1], weight.shape[0]
            else:  # Conv1D keeps (in, out)
                fan_in, fan_out = weight.shape[0], weight.shape[1]
            bias = getattr(module, "bias", None) is not None
            where = "attn" if in_attention(name) else "mlp"
            if name in reads:
                source, first = reads[name]
                reads_input = first and fan_in == hidden
            else:
                source, reads_input = None, fan_in == hidden
            if in_expert_list(name):
                role = "expert"
            elif "router" in name.split(".")[-1] or (num_experts and fan_out == num_experts and fan_in == hidden
                                                      and where == "mlp"):  # k_proj may write E values too
                role = "router"
            elif reads_input:
                role = f"{where}_in"
            else:
                role = f"{where}_out" if fan_out == hidden else "inner"
            linears.append({"name": name, "in": int(fan_in), "out": int(fan_out), "bias": bias, "role": role,
                            "reads": source or ""})
            claimed.update(f"{name}.{p}" for p in own)
            continue
        if "Norm" in type(module).__name__ and own:
            weight = own.get("weight")
            width = int(weight.numel()) if weight is not None else int(next(iter(own.values())).numel())
            applied = width
            if in_attention(name) and width == head_dim:  # per-head norm (Qwen3 q_norm / k_norm)
                applied = heads * head_dim if name.split(".")[-1].startswith("q") else kv_heads * head_dim
            layer_norm = "bias" in own or ("LayerNorm" in type(module).__name__ and "RMS" not in type(module).__name__)
            norms.append({"name": name, "params": int(sum(p.numel() for p in own.values())), "width": applied,
                          "layer_norm": layer_norm})
            claimed.update(f"{name}.{p}" for p in own)
            continue
        three_d = {p: t for p, t in own.items() if t.dim() == 3}
        if three_d:  # fused experts: (E, out, in) per parameter
            count = int(next(iter(three_d.values())).shape[0])
            params = int(sum(t.numel() for t in own.values()))
            down = own.get("down_proj")
            if down is not None and down.dim() == 3:
                shape = tuple(int(s) for s in down.shape[1:])
                width = shape[1] if shape[0] == hidden else shape[0]
            else:
                width = 0
            gated = any("gate" in p for p in three_d)
            experts.append({"name": name, "count": count, "params": params, "width": width, "gated": gated})
            claimed.update(f"{name}.{p}" for p in own)
            continue
        if own and num_experts and any(t.dim() == 2 and t.shape[0] == num_experts for t in own.values()):
            router += int(sum(t.numel() for t in own.values()))  # a router holding a (E, h) weight
            claimed.update(f"{name}.{p}" for p in own)
            continue
    for name, param in layer.named_parameters():
        if name not in claimed:
            other += int(param.numel())
    params = int(sum(p.numel() for p in layer.parameters()))
    # experts kept as a list of MLP modules (transformers 4.x style): their linears are the experts
    expert_lists = [m for n, m in modules.items() if isinstance(m, torch.nn.ModuleList) and n.split(".")[-1].startswith("expert")]
    if expert_lists and not experts:
        lst = expert_lists[0]
        per = [lin for lin in linears if lin["role"] == "expert"]
        down = [lin for lin in per if lin["out"] == hidden]
        width = down[0]["in"] if down else 0
        ins = [lin for lin in per if lin["in"] == hidden]
        experts.append({"name": "experts", "count": len(lst), "params": int(sum(p.numel() for p in lst.parameters())),
                        "width": width, "gated": len(ins) > len(down)})
    return {"params": params, "linears": linears, "norms": norms, "experts": experts, "router": router,
            "other": other}


def describe(model, hf_config) -> dict:
    """The structure of ``model`` (built by :func:`build_meta`), as a JSON-able dict (see the module docstring).

    Keys: ``model_type``, ``class``, ``total_params`` (exact), ``embedding_params``, ``lm_head_params`` (0 when tied;
    its bias included), ``lm_head_bias``, ``final_norm_params``, ``tied``, ``hidden_size``, ``heads``, ``kv_heads``,
    ``head_dim``, ``vocab_size``, ``layers`` (the kind index of each decoder layer), ``kinds`` (a list of
    :func:`_describe_layer` dicts), ``top_k``, ``sdpa`` (bool), ``final_softcap``, ``attn_softcap``,
    ``sliding_window``, ``max_positions``, ``prefix_token_dim``, ``lora_default``, ``versions``, ``format``."""

    model_type = hf_config.model_type
    if hasattr(hf_config, "get_text_config"):  # a multimodal config: the language model's sizes
        hf_config = hf_config.get_text_config()
    hidden = _attr(hf_config, "hidden_size", "n_embd", "d_model")
    heads = _attr(hf_config, "num_attention_heads", "n_head", "num_heads")
    if not (isinstance(hidden, int) and isinstance(heads, int) and hidden > 0 and heads > 0):
        raise DsdoctorError(f"{type(model).__name__} ({model_type}) has no attention heads in its config: dsdoctor's "
                            f"formulas count decoder transformers, not this architecture (a state-space model?)")
    kv_heads = int(_attr(hf_config, "num_key_value_heads", "multi_query_group_num", default=heads))
    head_dim = int(_attr(hf_config, "head_dim", default=hidden // heads))
    num_experts = _attr(hf_config, *_EXPERTS_KEYS)
    num_experts = int(num_experts) if isinstance(num_experts, int) else None
    layers = _layer_list(model)
    kinds: list[dict] = []
    index: list[int] = []
    traced: dict[int, dict] = {}
    for i, layer in enumerate(layers):
        signature = tuple((n, tuple(p.shape)) for n, p in layer.named_parameters())
        if signature not in traced:  # trace one layer of each shape (a forward each: milliseconds)
            traced[signature] = _trace_reads(model, layer)
        desc = _describe_layer(layer, hidden, heads, head_dim, kv_heads, num_experts, traced[signature])
        if desc not in kinds:
            kinds.append(desc)
        index.append(kinds.index(desc))
    embedding = model.get_input_embeddings()
    embedding_params = int(sum(p.numel() for p in embedding.parameters()))
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embedding.weight
    lm_head_params = 0
    lm_head_bias = False
    if head is not None:
        lm_head_bias = getattr(head, "bias", None) is not None
        lm_head_params = (0 if tied else int(head.weight.numel())) + (int(head.bias.numel()) if lm_head_bias else 0)
    total = int(sum(p.numel() for p in model.parameters()))
    in_layers = int(sum(p.numel() for p in layers.parameters()))
    rest = total - in_layers - embedding_params - lm_head_params
    vocab = int(embedding.weight.shape[0])
    max_positions = _attr(hf_config, "max_position_embeddings", "n_positions", "seq_length", "max_sequence_length")
    final_softcap = _attr(hf_config, "final_logit_softcapping")
    attn_softcap = _attr(hf_config, "attn_logit_softcapping")
    top_k = _attr(hf_config, *_TOP_K_KEYS)
    prefix_token_dim = _prefix_token_dim(hf_config)
    try:
        from peft.utils.constants import (
            TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as lora_table,
        )
        # peft looks up the model's own config (``model.config.to_dict()["model_type"]``, tuners/lora/model.py
        # ``_prepare_adapter_config``), not its text config: Gemma-3-12B's ``gemma3`` has no default although its
        # ``gemma3_text`` has (peft raised on the H200, round 13)
        lora_default = list(lora_table.get(model_type, ()))
    except ImportError:
        lora_default = []
    lora_per_rank = _lora_per_rank(model, layers, index)
    return {
        "lora_per_rank": lora_per_rank,
        "format": FORMAT, "versions": list(_versions()), "model_type": model_type,
        "class": type(model).__name__, "total_params": total, "embedding_params": embedding_params,
        "lm_head_params": lm_head_params, "lm_head_bias": lm_head_bias, "final_norm_params": int(rest), "tied": tied,
        "hidden_size": hidden, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "vocab_size": vocab,
        "layers": index, "kinds": kinds, "top_k": int(top_k) if isinstance(top_k, int) else None,
        "sdpa": bool(getattr(type(model), "_supports_sdpa", True)),
        "final_softcap": final_softcap, "attn_softcap": attn_softcap,
        "sliding_window": _attr(hf_config, "sliding_window"),
        "max_positions": int(max_positions) if isinstance(max_positions, int) else None,
        "prefix_token_dim": prefix_token_dim, "lora_default": lora_default,
        "dtype": str(getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None) or "")
        .replace("torch.", ""),
    }


def _lora_per_rank(model, layers, index: list[int]) -> list[dict[str, int]] | None:
    """For each kind of decoder layer, the LoRA parameters peft adds at rank 1 to each module of one such layer,
    when every module it can wrap is wrapped (``LoraConfig(r=1, target_modules="all-linear")``: the linears, and in
    peft 0.21 a mixture-of-experts block's fused 3-D expert weights and router too): ``[{module path inside the
    layer: parameters}]``. LoRA's parameters are linear in the rank (``lora_A``: r x in, ``lora_B``: out x r, times
    the experts for fused weights; ``peft/tuners/lora/layer.py``), so rank r adds r times these for the wrapped
    modules. Applied last: it wraps ``model``'s modules in place. None when peft refuses the model."""
    try:
        import torch
        from peft import LoraConfig, get_peft_model

        prefix = next(name for name, module in model.named_modules() if module is layers)
        # one layer of each kind is enough, and peft takes seconds over 64 layers: keep only those
        parent_name, _, attr = prefix.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        firsts = [index.index(kind) for kind in range(max(index) + 1)]
        setattr(parent, attr, torch.nn.ModuleList([layers[i] for i in firsts]))
        index = list(range(len(firsts)))
        with torch.device("meta"):
            peft_model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=1, target_modules="all-linear"))
    except Exception:  # noqa: BLE001 - peft raises many kinds on models it cannot wrap
        return None
    kinds: list[dict[str, int]] = [{} for _ in range(max(index) + 1)]
    for name, param in peft_model.named_parameters():
        if not param.requires_grad or ".lora_" not in name:
            continue
        inner = name.split(prefix + ".", 1)[-1] if prefix + "." in name else None
        if inner is None:
            continue
        layer_no, _, rest = inner.partition(".")
        if not layer_no.isdecimal():
            continue
        kind = index[int(layer_no)]
        if int(layer_no) != index.index(kind):
            continue  # one layer of each kind
        module = rest.split(".lora_")[0].replace(".base_layer", "")
        kinds[kind][module] = kinds[kind].get(module, 0) + int(param.numel())
    return kinds


def peft_lora_params(config: dict, targets: tuple[str, ...], r: int, dropout: float = 0.0) -> int:
    """The LoRA parameters peft itself adds for ``target_modules=targets`` at rank ``r`` to the model of ``config``
    built on the meta device (every layer): for target names the model has no module of, which peft may still map
    (peft 0.21 maps ``gate_proj,up_proj,down_proj`` onto transformers 5's fused MoE experts, and refuses a
    ``dropout`` other than 0 there).

    Raises:
        DsdoctorError: transformers cannot build the model, or peft refuses the targets (its own message, one line).
    """
    from dsdoctor.meta_count import _quiet

    model, _ = build_meta(config)
    with _quiet():
        import torch
        from peft import LoraConfig, get_peft_model

        try:
            with torch.device("meta"):
                peft_model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=r, lora_dropout=dropout,
                                                              target_modules=list(targets)))
        except Exception as exc:  # noqa: BLE001 - peft raises many kinds on targets it cannot wrap
            hint = " (fused MoE experts take no dropout: --lora-dropout 0)" if "lora_dropout" in str(exc) else ""
            raise DsdoctorError(f"--lora-targets {','.join(targets)}: peft refuses them on {config.get('model_type')} "
                                f"with lora_dropout {dropout:g}: {type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:300]}{hint}") from None
    return sum(int(p.numel()) for name, p in peft_model.named_parameters() if p.requires_grad and ".lora_" in name)


def _prefix_token_dim(hf_config) -> int | None:
    """The width of P-Tuning's per-layer key (and value) prefix, as peft computes it for this config
    (``peft/utils/other.py`` ``_prepare_prompt_learning_config``: the hidden size, or key/value heads x head size
    for grouped-query attention); None when peft refuses the config."""
    try:
        from peft import PrefixTuningConfig
        from peft.utils.other import _prepare_prompt_learning_config

        peft_config = _prepare_prompt_learning_config(
            PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=1), hf_config.to_dict())
        return int(peft_config.token_dim)
    except Exception:  # noqa: BLE001 - peft raises ValueError/KeyError on configs it cannot read
        return None


def arch_from_structure(desc: dict, name: str, source: str, config: dict | None = None) -> Arch:
    """The :class:`Arch` of a structure (:func:`describe`): the most common decoder layer kind gives the shapes the
    activation formulas read; the exact total, each layer's parameters and each kind's linears are kept for the
    counts (:func:`dsdoctor.models.methods.trainable_params`). What the formulas do not model is listed in
    ``Arch.unmodeled``: parameters of a layer that are none of linears, norms, experts and router; linears between
    two others (``inner``); layers of several kinds with different shapes beyond dense versus MoE MLPs."""
    kinds = desc["kinds"]
    counts = Counter(desc["layers"])
    main_index = counts.most_common(1)[0][0]
    main = kinds[main_index]
    hidden, heads, head_dim = desc["hidden_size"], desc["heads"], desc["head_dim"]
    q_dim, kv_dim = heads * head_dim, desc["kv_heads"] * head_dim
    dense = [lin for lin in main["linears"] if lin["role"] in ("mlp_in", "mlp_out")]
    downs = [lin for lin in dense if lin["role"] == "mlp_out"]
    dense_width = sum(lin["in"] for lin in downs)
    ins = [lin for lin in dense if lin["role"] == "mlp_in"]
    gated = sum(lin["out"] for lin in ins) >= 2 * dense_width if dense_width else True
    unmodeled: list[str] = []
    if main["other"]:
        unmodeled.append(f"{main['other']:,} parameters per layer outside linears, norms and experts")
    inner = sorted({lin["name"] for kind in kinds for lin in kind["linears"] if lin["role"] == "inner"})
    if inner:
        unmodeled.append(f"projections between two others ({', '.join(inner[:4])}: low-rank attention or MLP)")
    experts = main["experts"][0] if main["experts"] else None
    moe_layers = sum(n for k, n in counts.items() if kinds[k]["experts"])
    if experts and moe_layers != len(desc["layers"]):
        # DeepSeek's first_k_dense_replace, Qwen's mlp_only_layers: a dense MLP in the other layers
        dense_kind = next(kinds[k] for k in counts if not kinds[k]["experts"])
        dense_downs = [lin for lin in dense_kind["linears"] if lin["role"] == "mlp_out"]
        unmodeled.append(f"{len(desc['layers']) - moe_layers} of {len(desc['layers'])} layers have a dense MLP "
                         f"of width {sum(lin['in'] for lin in dense_downs)} instead of the experts (their "
                         f"activations are counted as the experts' layers')")
    if desc["final_norm_params"] > 0.01 * desc["total_params"]:
        unmodeled.append(f"{desc['final_norm_params']:,} parameters outside the decoder layers, embedding and output "
                         f"projection (a vision tower and projector: their weights are counted, their activations "
                         f"are not, as text-only data never runs them)")
    if not desc["sdpa"] and desc.get("attn_softcap") is None:
        unmodeled.append("attention without SDPA support")
    linears = tuple(Linear(lin["name"].split(".")[-1] if _unique_leaves(main) else lin["name"], lin["in"],
                           lin["out"], lin["bias"], lin["role"], lin.get("reads", "")) for lin in main["linears"])
    per_rank = desc.get("lora_per_rank") or [None] * len(kinds)
    layer_kinds = tuple((sum(1 for i in desc["layers"] if i == k),
                         tuple(Linear(lin["name"], lin["in"], lin["out"], lin["bias"], lin["role"], lin.get("reads", ""))
                               for lin in kind["linears"]), kind["params"],
                         tuple(sorted(per_rank[k].items())) if per_rank[k] is not None else None)
                        for k, kind in enumerate(kinds))
    norm_list = main["norms"]
    layer_norm = bool(norm_list) and all(n["layer_norm"] for n in norm_list)
    return Arch(
        name=name, source=source, model_type=desc["model_type"], family="transformers", hidden_size=hidden,
        num_layers=len(desc["layers"]), num_heads=heads, kv_dim=kv_dim,
        intermediate_size=dense_width, vocab_size=desc["vocab_size"], tied=desc["tied"],
        dtype=_DTYPES.get((desc.get("dtype") or "").lower(), ""), max_positions=desc.get("max_positions"),
        linears=linears, norm_params_per_layer=sum(n["params"] for n in norm_list),
        final_norm_params=desc["final_norm_params"], lm_head_bias=desc["lm_head_bias"], mlp_gated=gated,
        layer_norm=layer_norm, config=dict(config or {}),
        q_dim=q_dim, norm_widths=tuple(n["width"] for n in norm_list),
        experts=experts["count"] if experts else 0, top_k=(desc.get("top_k") or 0) if experts else 0,
        expert_intermediate=experts["width"] if experts else 0, expert_gated=experts["gated"] if experts else True,
        moe_params_per_layer=(sum(e["params"] for e in main["experts"]) + main["router"] + main["other"]),
        expert_params_total=sum(e["params"] for i in desc["layers"] for e in kinds[i]["experts"]),
        exact_total=desc["total_params"], layer_kinds=layer_kinds,
        layer_params_each=tuple(kinds[i]["params"] for i in desc["layers"]),
        eager_attention=not desc["sdpa"], attn_softcap=desc.get("attn_softcap") is not None,
        final_softcap=desc.get("final_softcap") is not None, prefix_token_dim=desc.get("prefix_token_dim"),
        lora_default=tuple(desc.get("lora_default") or ()), unmodeled=tuple(unmodeled), embedding_override=desc["embedding_params"],
        lm_head_override=desc["lm_head_params"])


def _unique_leaves(kind: dict) -> bool:
    leaves = [lin["name"].split(".")[-1] for lin in kind["linears"] if lin["role"] != "expert"]
    return len(leaves) == len(set(leaves))


# --- the registry's shipped structures -------------------------------------------------------------------------

SHIPPED = Path(__file__).with_name("structures.json")


@functools.cache
def shipped_structures() -> dict:
    """Registry name -> structure, as ``structures.json`` ships them ({} when the file is absent), read once per
    process. Callers must not modify it."""
    try:
        return json.loads(SHIPPED.read_text())
    except (OSError, ValueError):
        return {}


def _write_shipped(only: list[str] | None = None) -> None:
    """Write ``structures.json`` (each non-analytic registry row's structure) and ``templates.json`` (each one's
    shape template, :func:`dsdoctor.models.template.fit`; a row whose fit fails its checks has none). ``only``:
    refit those rows' templates, keeping the others'."""
    from dsdoctor.models import template
    from dsdoctor.models.analytic import is_analytic
    from dsdoctor.models.registry import REGISTRY

    out = {}
    templates = {} if only is None else dict(template.shipped_templates())
    for name, (repo, config) in REGISTRY.items():
        if is_analytic(config):
            continue
        out[name] = describe_config(config)
        if only is None or name in only:
            fitted = template.fit(config, describe_config)
            templates.pop(name, None)
            if fitted is not None:
                templates[name] = fitted
            print(f"{name}: " + (f"template over {', '.join(fitted['free'])} (fixed: "
                                 f"{', '.join(fitted['fixed']) or 'none'})" if fitted else "no template"), flush=True)
    SHIPPED.write_text(json.dumps(out, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
    template.SHIPPED.write_text(json.dumps(templates, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
    shipped_structures.cache_clear()
    template.shipped_templates.cache_clear()
    print(f"wrote {SHIPPED}: {len(out)} structures, {template.SHIPPED}: {len(templates)} templates")


if __name__ == "__main__":  # python -m dsdoctor.models.structure --write [ROW ...]
    import sys

    if sys.argv[1:2] == ["--write"]:
        _write_shipped(sys.argv[2:] or None)
    else:
        print("usage: python -m dsdoctor.models.structure --write [ROW ...]", file=sys.stderr)
        sys.exit(2)
