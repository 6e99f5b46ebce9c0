"""Trainable parameters per fine-tuning method (LoRA, freeze, P-Tuning, full), as peft and the reference trainer
build them."""

from __future__ import annotations

from dsdoctor.models.arch import Arch
from dsdoctor.report import DsdoctorError

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
