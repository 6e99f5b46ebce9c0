"""Trainable parameters per fine-tuning method (LoRA, freeze, P-Tuning, full), as peft and the reference trainer
build them."""

from __future__ import annotations

from dsdoctor.models.arch import Arch, Linear
from dsdoctor.report import DsdoctorError

# --- trainable parameters per fine-tuning method ---------------------------------------------------------------

#: LoRA target modules when --lora-targets is not given: peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
#: (``peft/utils/constants.py``) where it has the model type, else the fused attention projection that
#: ``reference_train.train.lora_targets`` falls back to.
DEFAULT_LORA_TARGETS = {"chatglm": ("query_key_value",), "chatglm2": ("query_key_value",),
                        "llama": ("q_proj", "v_proj"), "gptj": ("q_proj", "v_proj"), "qwen": ("c_attn",)}


def default_lora_targets(arch: Arch) -> tuple[str, ...]:
    """The modules LoRA wraps by default for ``arch`` (see :data:`DEFAULT_LORA_TARGETS`; for an architecture read
    off transformers' model, peft's own table for its model type, else the fused or separate attention projections
    ``reference_train.train.lora_targets`` falls back to).

    Raises:
        DsdoctorError: no default is known and the layer has none of those projections (give --lora-targets)."""
    if arch.model_type == "baichuan":
        return ("W_pack",)
    if arch.model_type == "internlm2":
        return ("wqkv",)
    if arch.family in DEFAULT_LORA_TARGETS:
        return DEFAULT_LORA_TARGETS[arch.family]
    if arch.lora_default:
        return arch.lora_default
    names = {lin.name.split(".")[-1] for lin in _all_linears(arch)}
    for candidates in (("query_key_value",), ("W_pack",), ("wqkv",), ("c_attn",), ("qkv_proj",), ("q_proj", "v_proj")):
        if set(candidates) <= names:
            return candidates
    peft_counts = _peft_rank_one(arch)
    if peft_counts is not None:  # name what --lora-targets accepts: the linears peft wrapped on the meta model (not
        # a fused experts block: peft wraps its parameters under all-linear but refuses its name as a target)
        linear = {lin.name for lin in _all_linears(arch)}
        names = {m.split(".")[-1] for _, modules in peft_counts for m in modules if m in linear} or \
            {m.split(".")[-1] for _, modules in peft_counts for m in modules}
    raise DsdoctorError(f"no default LoRA targets for {arch.name} ({arch.model_type}): give --lora-targets "
                        f"(its linears: {', '.join(sorted(names)[:12])}, or all-linear)")


def _kinds(arch: Arch) -> list[tuple[int, tuple[Linear, ...]]]:
    """(layers, linears) of each kind of decoder layer."""
    if arch.layer_kinds:
        return [(kind[0], kind[1]) for kind in arch.layer_kinds]
    return [(arch.num_layers, arch.linears)]


def _peft_rank_one(arch: Arch) -> list[tuple[int, dict[str, int]]] | None:
    """(layers, {module: LoRA parameters at rank 1}) of each kind, as peft added them on the meta device
    (:func:`dsdoctor.models.structure._lora_per_rank`), or None for the analytic families."""
    if not arch.layer_kinds or any(len(kind) < 4 or kind[3] is None for kind in arch.layer_kinds):
        return None
    return [(kind[0], dict(kind[3])) for kind in arch.layer_kinds]


def _all_linears(arch: Arch) -> list[Linear]:
    return [lin for _, linears in _kinds(arch) for lin in linears]


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    """peft's ``check_target_module_exists`` for a list of names: the module's name is a target or ends with
    ``.target`` (``peft/tuners/tuners_utils.py``)."""
    return any(name == t or name.endswith("." + t) for t in targets)


class UnknownLoraTargets(DsdoctorError):
    """LoRA targets that no module of the model has. ``unknown``: those names; ``known``: the other targets, which
    peft trains alone when there are any (it refuses only when no target matches: ``tuners_utils.py``)."""

    def __init__(self, message: str, unknown: tuple[str, ...], known: tuple[str, ...]):
        super().__init__(message)
        self.unknown, self.known = unknown, known


def _refuse_unknown(arch: Arch, targets: tuple[str, ...], names: list[str]) -> None:
    """Raise UnknownLoraTargets for targets no module has; beside targets that match, the message says that peft
    would silently skip them and train the others alone."""
    unknown = tuple(t for t in targets if not any(_matches(n, (t,)) for n in names) and t != "lm_head")
    if unknown:
        leaves = list(dict.fromkeys(n.split(".")[-1] for n in names))
        known = tuple(t for t in targets if t not in unknown)
        raise UnknownLoraTargets(f"--lora-targets {','.join(unknown)}: not a module peft can wrap in {arch.name} "
                                 f"({arch.model_type}); its modules: {', '.join(leaves)} (or all-linear)"
                                 + (f"; peft would silently skip {'it' if len(unknown) == 1 else 'them'} and train "
                                    f"{','.join(known)} alone" if known else ""), unknown, known)


def trainable_params(arch: Arch, method: str, *, lora_r: int = 8, lora_targets: tuple[str, ...] | None = None,
                     freeze_last: int = 2, prefix_tokens: int = 16, lora_dropout: float = 0.05) -> int:
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

    ``lora_dropout`` matters only where peft itself is asked (targets the shipped structure cannot decide): peft 0.21
    refuses dropout on fused MoE experts ("lora.ParamWrapper does not work with lora_dropout != 0").

    Raises:
        DsdoctorError: an unknown method, a LoRA target that is not a linear of this architecture (or that peft
            refuses with this dropout), a non-positive rank, or ``freeze_last`` above the number of layers.
    """
    if method == "full":
        return arch.total_params
    if method == "lora":
        if lora_r < 1:
            raise DsdoctorError(f"--lora-r must be at least 1, got {lora_r}")
        targets = tuple(lora_targets or default_lora_targets(arch))
        head = lora_r * (arch.hidden_size + arch.vocab_size) if "lm_head" in targets else 0  # the output projection
        peft_counts = _peft_rank_one(arch)
        if peft_counts is not None:  # what peft itself added, per module at rank 1: r times it for the wrapped ones
            names = list(dict.fromkeys(m for _, modules in peft_counts for m in modules))
            every = targets == ("all-linear",)
            if every:
                targets = tuple(names)
            linear = {lin.name for lin in _all_linears(arch)}
            fused = [] if every else [t for t in targets if not any(_matches(n, (t,)) for n in linear)
                                      and any(_matches(n, (t,)) for n in names)]  # peft wraps their parameters
            try:
                _refuse_unknown(arch, targets, names)
                if fused and arch.config.get("model_type"):
                    raise DsdoctorError(f"--lora-targets {','.join(fused)}: fused weights, not modules")
            except DsdoctorError as refused:
                if not arch.config.get("model_type") or not arch.experts:
                    raise  # only a mixture of experts has weights peft maps by a name no module has
                # a name no module has, which peft may still map (peft 0.21: gate_proj/up_proj/down_proj onto
                # transformers 5's fused MoE experts), or a fused experts block, which it may refuse by name: peft
                # itself decides, on the meta model
                from dsdoctor.models.structure import peft_lora_params

                try:
                    counted = peft_lora_params(arch.config, targets, lora_r, lora_dropout)
                except DsdoctorError as exc:
                    if fused or "not found in the base model" not in str(exc):
                        raise  # peft knows the names and refuses them for its own reason: its words
                    raise DsdoctorError(f"{refused} ({str(exc).split(': ', 2)[-1]})") from None
                known = getattr(refused, "known", ())
                if known and not fused and peft_lora_params(arch.config, known, lora_r, lora_dropout) == counted:
                    # peft wrapped nothing for the other names: it refuses only when no target at all matches
                    # (tuners_utils.py), so a misspelled one is silently skipped and trains less than asked
                    raise refused from None
                return counted
            return sum(count * lora_r * sum(n for m, n in modules.items() if _matches(m, targets))
                       for count, modules in peft_counts) + head
        linears = _all_linears(arch)
        names = list(dict.fromkeys(lin.name for lin in linears))
        if targets == ("all-linear",):  # peft's keyword: every linear layer but the output projection
            targets = tuple(names)
        _refuse_unknown(arch, targets, names)
        return sum(count * sum(lora_r * (lin.in_features + lin.out_features) for lin in kind
                               if _matches(lin.name, targets)) for count, kind in _kinds(arch)) + head
    if method == "freeze":
        if not 1 <= freeze_last <= arch.num_layers:
            raise DsdoctorError(f"--freeze-last must be between 1 and {arch.num_layers} (the layers of "
                                f"{arch.name}; 0 would train nothing and DeepSpeed refuses an empty optimizer), "
                                f"got {freeze_last}")
        if arch.layer_params_each:
            return sum(arch.layer_params_each[arch.num_layers - freeze_last:])
        return freeze_last * arch.layer_params
    if method == "ptuning":
        if prefix_tokens < 1:
            raise DsdoctorError(f"--prefix-tokens must be at least 1, got {prefix_tokens}")
        # peft reads the config's to_dict(), where transformers' llama, mistral and qwen2 configs always have
        # num_key_value_heads (the attention heads when config.json has none)
        if arch.prefix_token_dim is not None:
            return prefix_tokens * 2 * arch.num_layers * arch.prefix_token_dim
        gqa = "num_key_value_heads" in arch.config or arch.model_type in ("llama", "mistral", "qwen2")
        token_dim = arch.kv_dim if gqa else arch.hidden_size
        return prefix_tokens * 2 * arch.num_layers * token_dim
    raise DsdoctorError(f"unknown method {method!r}: full, lora, freeze or ptuning")
