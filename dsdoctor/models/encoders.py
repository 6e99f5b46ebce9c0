"""Encoder architectures that transformers also lists as causal language models.

transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (``models/auto/modeling_auto.py``) holds BERT, RoBERTa and
their kin too: ``BertLMHeadModel`` is BERT run as a decoder, which it is only when the config says
``is_decoder: true`` (``BertLMHeadModel.__init__`` warns otherwise). A BERT config.json as published
(``architectures: ["BertForMaskedLM"]``, no ``is_decoder``) is an encoder; its fine-tuning is not the causal-LM
training that ``estimate`` models, so it is refused with one line instead of being counted as a decoder.

Which types those are is derived from transformers itself and shipped as data (``encoders.json``), so the check
needs no transformers import: the model types with both a causal-LM class and a masked-LM class
(``MODEL_FOR_MASKED_LM_MAPPING_NAMES``). Regenerate for another transformers with
``python -m dsdoctor.models.encoders --write``; ``tests/test_encoders.py`` fails when the shipped list is not the
installed transformers'.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

_PATH = Path(__file__).with_name("encoders.json")


def derive() -> dict:
    """``{"transformers": version, "masked_lm": {model_type: masked-LM class}}`` for the model types the installed
    transformers maps both to a causal-LM class and to a masked-LM class (imports transformers' auto tables)."""
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    both = sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(MODEL_FOR_MASKED_LM_MAPPING_NAMES))
    return {"transformers": transformers.__version__,
            "source": "transformers/models/auto/modeling_auto.py: MODEL_FOR_CAUSAL_LM_MAPPING_NAMES & "
                      "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            "masked_lm": {t: MODEL_FOR_MASKED_LM_MAPPING_NAMES[t] for t in both}}


@functools.cache
def shipped() -> dict:
    """The shipped ``encoders.json`` (read once per process); an empty table when it is missing or broken."""
    try:
        data = json.loads(_PATH.read_text())
    except (OSError, ValueError):
        return {"masked_lm": {}}
    return data if isinstance(data.get("masked_lm"), dict) else {"masked_lm": {}}


def encoder_class(config: dict) -> str | None:
    """The masked-LM class of ``config`` (a config.json as data) when it describes an encoder: a model type of the
    shipped table whose config does not set ``is_decoder: true``; None for a decoder."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or config.get("is_decoder") is True:
        return None
    return shipped()["masked_lm"].get(model_type)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {_PATH.name} from the installed transformers")
    args = parser.parse_args()
    data = derive()
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.write:
        _PATH.write_text(text)
        print(f"wrote {_PATH} ({len(data['masked_lm'])} model types, transformers {data['transformers']})")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
