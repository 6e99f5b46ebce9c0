"""Train the tiny byte-level BPE tokenizer bundled with the reference trainer.

The reference LoRA trainer runs fully offline, so instead of downloading a
tokenizer we train a small one here from the bundled instruction dataset
(``data/sft.jsonl``, written by ``make_data.py``). Run ``make_data.py`` first,
then::

    python reference_train/assets/make_tokenizer.py

Design choices, all aimed at "small, exact and reproducible":

* **Byte-level BPE** (the GPT-2 scheme): every UTF-8 byte is in the base
  alphabet, so any text - Chinese included - encodes without ``<unk>`` and
  decodes back byte-for-byte.
* **Vocabulary of at most ``VOCAB_SIZE`` tokens.** The corpus is small, so
  merges that occur only once are skipped (``MIN_FREQUENCY``) and the final
  vocabulary can come out a bit smaller than ``VOCAB_SIZE``; the script prints
  the real size. A model config should use ``vocab_size >= len(tokenizer)``.
* **Special tokens** ``<pad>`` (id 0), ``<s>`` (bos, id 1), ``</s>`` (eos,
  id 2), ``<unk>`` (id 3).
* **No automatic bos/eos.** The post-processor adds nothing; the trainer
  appends ``</s>`` to every target itself.
* The prompt template ``"问：{instruction}\\n答："`` is part of the training
  text, so its pieces become single tokens.

The result is saved with ``transformers.PreTrainedTokenizerFast`` into
``tiny-model/`` (the directory that also holds the tiny model's config), so
``AutoTokenizer.from_pretrained("reference_train/assets/tiny-model")`` works
with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 4096
MIN_FREQUENCY = 2          # a merge must be seen at least this often
MAX_TOKEN_LENGTH = 16      # no giant whole-sentence tokens
MODEL_MAX_LENGTH = 512
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]   # ids 0, 1, 2, 3

# The prompt template used by the reference trainer.
PROMPT_PREFIX = "问："
ANSWER_PREFIX = "\n答："

HERE = Path(__file__).resolve().parent
SFT_PATH = HERE / "data" / "sft.jsonl"
OUT_DIR = HERE / "tiny-model"


def format_prompt(row: dict) -> str:
    """Same prompt layout as the trainer: instruction (+ input), then answer marker."""
    instruction = row["instruction"]
    if row.get("input"):
        instruction = f"{instruction}\n{row['input']}"
    return f"{PROMPT_PREFIX}{instruction}{ANSWER_PREFIX}"


def training_texts() -> list[str]:
    """Texts the BPE merges are learned from, in a fixed order."""
    rows = [json.loads(line) for line in SFT_PATH.read_text(encoding="utf-8").splitlines() if line]
    texts = [PROMPT_PREFIX, ANSWER_PREFIX]
    for row in rows:
        texts.append(format_prompt(row) + row["output"])
    return texts


def build_tokenizer(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    # Split on GPT-2 style word boundaries, then map bytes to printable chars.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=False)
    # Adds no special tokens: encode("x") is just the tokens of "x".
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False)

    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=MIN_FREQUENCY,
        max_token_length=MAX_TOKEN_LENGTH,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def main() -> None:
    # Imported here so the module docstring / helpers are usable without transformers.
    from transformers import PreTrainedTokenizerFast

    texts = training_texts()
    tokenizer = build_tokenizer(texts)
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(tok) == i, (tok, tokenizer.token_to_id(tok))

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(str(OUT_DIR))
    print(f"trained on {len(texts)} texts; vocab size {len(hf_tok)} (target {VOCAB_SIZE})")
    print(f"saved tokenizer to {OUT_DIR}")


if __name__ == "__main__":
    main()
