"""Models by name or local directory: the facts the config checks need (weight dtype, hidden size).

Names are the Hugging Face repositories' ``config.json`` values (``torch_dtype``, ``hidden_size``). A local
directory is read from its ``config.json`` without importing transformers or running remote code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dsdoctor.report import DsdoctorError


@dataclass(frozen=True)
class ModelInfo:
    """``dtype`` is the weights' dtype as saved (``bfloat16``, ``float16``, ``float32``) or "" when unknown."""

    name: str
    dtype: str
    hidden_size: int | None
    source: str


#: name -> (repository, torch_dtype in its config.json, hidden_size)
MODEL_TABLE: dict[str, tuple[str, str, int]] = {
    "chatglm-6b": ("THUDM/chatglm-6b", "float16", 4096),
    "chatglm2-6b": ("THUDM/chatglm2-6b", "float16", 4096),
    "chatglm3-6b": ("THUDM/chatglm3-6b", "float16", 4096),
    "glm-4-9b": ("THUDM/glm-4-9b", "bfloat16", 4096),
    "qwen-7b": ("Qwen/Qwen-7B", "bfloat16", 4096),
    "qwen-14b": ("Qwen/Qwen-14B", "bfloat16", 5120),
    "qwen2-7b": ("Qwen/Qwen2-7B", "bfloat16", 3584),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B", "bfloat16", 3584),
    "qwen2.5-14b": ("Qwen/Qwen2.5-14B", "bfloat16", 5120),
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", "float16", 4096),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf", "float16", 5120),
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B", "bfloat16", 4096),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", "bfloat16", 4096),
    "baichuan2-7b": ("baichuan-inc/Baichuan2-7B-Base", "bfloat16", 4096),
    "baichuan2-13b": ("baichuan-inc/Baichuan2-13B-Base", "bfloat16", 5120),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", "bfloat16", 4096),
    "gpt-j-6b": ("EleutherAI/gpt-j-6b", "float32", 4096),
}

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}


def model_info(spec: str) -> ModelInfo:
    """Facts about ``spec``: a name of :data:`MODEL_TABLE` (case-insensitive, ``Qwen/Qwen2-7B`` works too) or
    a local directory with a ``config.json``.

    Raises:
        DsdoctorError: an unknown name, a directory without ``config.json``, or a broken ``config.json``.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
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
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        dtype = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or text.get("dtype")
        hidden = config.get("hidden_size") or text.get("hidden_size")
        return ModelInfo(name=str(path), dtype=_DTYPES.get(str(dtype).lower(), "") if dtype else "",
                         hidden_size=hidden if isinstance(hidden, int) else None, source=str(config_path))
    key = spec.lower().split("/")[-1]
    if key not in MODEL_TABLE:
        raise DsdoctorError(f"--model {spec}: unknown model name and not a directory; known names: "
                            f"{', '.join(MODEL_TABLE)}")
    repo, dtype, hidden = MODEL_TABLE[key]
    return ModelInfo(name=key, dtype=dtype, hidden_size=hidden, source=f"{repo} config.json")
