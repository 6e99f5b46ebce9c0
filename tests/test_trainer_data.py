"""The reference trainer's data, config and model helpers (reference_train/train.py), on the bundled assets."""

from __future__ import annotations

import json

import pytest
import torch

from dsdoctor.reference_train import train

BUNDLED_LINES = [json.loads(line) for line in train.DEFAULT_DATA.read_text(encoding="utf-8").splitlines()
                 if line.strip()]


@pytest.fixture(scope="module", autouse=True)
def offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def tokenizer(offline):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(train.DEFAULT_MODEL))


@pytest.fixture(scope="module")
def dataset(tokenizer):
    return train.build_dataset(str(train.DEFAULT_DATA), tokenizer, "auto", 256)


@pytest.fixture(scope="module")
def qwen_model(offline):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(train.DEFAULT_MODEL)))


def write_jsonl(path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


GOOD = json.dumps({"instruction": "What is 2 plus 2?", "output": "4."})


# ------------------------------------------------------------------------------------------- tokenizer
def test_bundled_tokenizer_ids(tokenizer):
    assert tokenizer.pad_token_id == 0
    assert tokenizer.eos_token_id == 2
    assert not getattr(tokenizer, "chat_template", None)  # so "auto" uses the ChatGLM template


def test_format_prompt_uses_chatglm_template(tokenizer):
    ids = train.format_prompt(tokenizer, "auto", "Hi")
    assert ids == tokenizer("问：Hi\n答：")["input_ids"]
    assert train.format_prompt(tokenizer, "auto", [("user", "Hi\nthere")]) == tokenizer("问：Hi\nthere\n答：")["input_ids"]
    assert train.format_prompt(tokenizer, "Q: {instruction} A:", "Hi") == tokenizer("Q: Hi A:")["input_ids"]


# ------------------------------------------------------------------------------------------- build_dataset
def test_bundled_dataset_has_502_samples(dataset):
    assert len(BUNDLED_LINES) == 502
    assert len(dataset) == 502


def test_labels_mask_exactly_the_prompt(dataset, tokenizer):
    for sample, row in zip(dataset, BUNDLED_LINES):
        prompt = train.format_prompt(tokenizer, "auto", row["instruction"] + ("\n" + row["input"] if row.get("input") else ""))
        ids, labels = sample["input_ids"], sample["labels"]
        n = len(prompt)
        assert len(ids) == len(labels) <= 256
        assert ids[:n] == prompt
        assert labels[:n] == [train.IGNORE_INDEX] * n
        assert labels[n:] == ids[n:]
        assert len(labels) > n and train.IGNORE_INDEX not in labels[n:]
        assert labels[-1] == tokenizer.eos_token_id == 2
        assert ids[n:-1] == tokenizer(row["output"], add_special_tokens=False)["input_ids"]


def test_truncation_keeps_prompt_and_cuts_the_answer(tokenizer, tmp_path):
    row = {"instruction": "Say it", "output": "one two three four five six seven eight nine ten"}
    prompt = train.format_prompt(tokenizer, "auto", row["instruction"])
    (sample,) = train.build_dataset(write_jsonl(tmp_path / "d.jsonl", [json.dumps(row)]), tokenizer, "auto",
                                    len(prompt) + 3)
    assert len(sample["input_ids"]) == len(prompt) + 3
    assert sample["labels"][:len(prompt)] == [-100] * len(prompt)
    assert sample["labels"][len(prompt):] == sample["input_ids"][len(prompt):]


def test_empty_output_on_line_2_is_data701(tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD, json.dumps({"instruction": "Say nothing", "output": ""}), GOOD])
    with pytest.raises(train.SetupError) as err:
        train.build_dataset(path, tokenizer, "auto", 256)
    assert err.value.rule == "DATA701"
    assert str(err.value).endswith("line(s) 2")
    assert "1 sample(s) have no answer token" in str(err.value)


def test_broken_json_on_line_3_is_data702(tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD, '{"instruction": "x", "output": ', GOOD])
    with pytest.raises(train.SetupError) as err:
        train.build_dataset(path, tokenizer, "auto", 256)
    assert err.value.rule == "DATA702"
    assert str(err.value).endswith("1 malformed line(s): line 3: not JSON (Expecting value at column 32)")


@pytest.mark.parametrize("row, kind", [
    ({"output": "x"}, "no 'instruction' key"),
    ({"instruction": "x"}, "no 'output' key"),
    ({"instruction": 3, "output": "x"}, "'instruction' is a JSON number, not a string"),
    ({"instruction": None, "output": "x"}, "'instruction' is a JSON null, not a string"),
    ({"instruction": "x", "input": 5, "output": "x"}, "'input' is a JSON number, not a string"),
    ({"instruction": "x", "input": 0, "output": "x"}, "'input' is a JSON number, not a string"),
    (["instruction", "output"], "a JSON array, not an object"),
    ({"prompt": "x"}, "no 'response' key"),
    ({"messages": [{"role": "user", "content": "x"}]}, "'messages' has no assistant turn to learn"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0] has role 'bot'"),
    ({"text": "x"}, "no known fields (keys: text)"),
])
def test_missing_or_non_string_fields_are_data702(tokenizer, tmp_path, row, kind):
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD, json.dumps(row)])
    with pytest.raises(train.SetupError) as err:
        train.build_dataset(path, tokenizer, "auto", 256)
    assert err.value.rule == "DATA702" and f"line 2: {kind}" in str(err.value)


def test_malformed_wins_over_no_target(tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps({"instruction": "a", "output": ""}), "not json"])
    with pytest.raises(train.SetupError) as err:
        train.build_dataset(path, tokenizer, "auto", 256)
    assert err.value.rule == "DATA702"


def test_seq_len_shorter_than_prompt_is_data701(tokenizer, tmp_path):
    row = {"instruction": "a fairly long instruction that surely needs more than a few tokens", "output": "ok"}
    prompt = train.format_prompt(tokenizer, "auto", row["instruction"])
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps(row)])
    for seq_len in (len(prompt) - 1, len(prompt)):  # a prompt as long as the sequence leaves no answer
        with pytest.raises(train.SetupError) as err:
            train.build_dataset(path, tokenizer, "auto", seq_len)
        assert err.value.rule == "DATA701"
        assert f"--seq-len {seq_len}" in str(err.value) and "line(s) 1" in str(err.value)
    assert len(train.build_dataset(path, tokenizer, "auto", len(prompt) + 1)) == 1


def test_blank_lines_are_skipped_and_empty_file_is_data702(tokenizer, tmp_path):
    assert len(train.build_dataset(write_jsonl(tmp_path / "a.jsonl", [GOOD, "", "  ", GOOD]), tokenizer,
                                   "auto", 64)) == 2
    with pytest.raises(train.SetupError) as err:
        train.build_dataset(write_jsonl(tmp_path / "b.jsonl", [""]), tokenizer, "auto", 64)
    assert err.value.rule == "DATA702" and "no samples" in str(err.value)


# ------------------------------------------------------------------------------------------- collate
def test_collate_pads_to_longest(dataset, tokenizer):
    batch = [dataset[0], dataset[1], dataset[2]]
    lengths = [len(x["input_ids"]) for x in batch]
    assert len(set(lengths)) > 1  # the test needs padding
    out = train.collate(batch, tokenizer.pad_token_id)
    longest = max(lengths)
    assert set(out) == {"input_ids", "attention_mask", "labels"}
    for key in out:
        assert out[key].shape == (3, longest) and out[key].dtype == torch.long
    for i, (x, n) in enumerate(zip(batch, lengths)):
        assert out["input_ids"][i, :n].tolist() == x["input_ids"]
        assert out["labels"][i, :n].tolist() == x["labels"]
        assert out["attention_mask"][i, :n].tolist() == [1] * n
        assert out["input_ids"][i, n:].tolist() == [0] * (longest - n)
        assert out["attention_mask"][i, n:].tolist() == [0] * (longest - n)
        assert out["labels"][i, n:].tolist() == [-100] * (longest - n)


def test_collate_uses_given_pad_id():
    out = train.collate([{"input_ids": [5], "labels": [5]}, {"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}], 9)
    assert out["input_ids"].tolist() == [[5, 9, 9], [5, 6, 7]]
    assert out["labels"].tolist() == [[5, -100, -100], [-100, 6, 7]]
    assert out["attention_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]


# ------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("config, dtype", [
    ({"bf16": {"enabled": True}}, torch.bfloat16),
    ({"bfloat16": {"enabled": True}}, torch.bfloat16),
    ({"fp16": {"enabled": True}}, torch.float16),
    ({"bf16": {"enabled": False}, "fp16": {"enabled": True}}, torch.float16),
    ({"bf16": {"enabled": False}, "fp16": {"enabled": False}}, torch.float32),
    ({"fp16": {"enabled": "auto"}}, torch.float32),
    ({}, torch.float32),
])
def test_precision_of(config, dtype):
    assert train.precision_of(config) is dtype


def walk(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)
    else:
        yield value


def test_build_ds_config_on_cpu():
    args = train.parse_args([])
    cfg = train.build_ds_config(args, on_gpu=False, bf16_supported=False)
    assert cfg["optimizer"]["type"] == "AdamW"
    assert cfg["optimizer"]["params"]["torch_adam"] is True
    assert cfg["optimizer"]["params"]["lr"] == args.learning_rate == 2e-3
    assert cfg["bf16"]["enabled"] is False and cfg["fp16"]["enabled"] is False
    assert train.precision_of(cfg) is torch.float32
    assert "auto" not in list(walk(cfg))
    assert cfg["zero_optimization"] == {"stage": 2}
    assert cfg["train_micro_batch_size_per_gpu"] == 4 and cfg["gradient_accumulation_steps"] == 1
    assert cfg["scheduler"]["params"]["warmup_max_lr"] == args.learning_rate
    json.dumps(cfg)  # a plain JSON document


@pytest.mark.parametrize("bf16, expected", [(True, torch.bfloat16), (False, torch.float16)])
def test_build_ds_config_on_gpu(bf16, expected):
    cfg = train.build_ds_config(train.parse_args([]), on_gpu=True, bf16_supported=bf16)
    assert cfg["optimizer"]["params"]["torch_adam"] is False
    assert train.precision_of(cfg) is expected
    assert "auto" not in list(walk(cfg))


def test_build_ds_config_respects_explicit_precision():
    cfg = train.build_ds_config(train.parse_args(["--precision", "bf16", "--zero-stage", "3"]), False, False)
    assert cfg["bf16"]["enabled"] is True and cfg["zero_optimization"]["stage"] == 3


# ------------------------------------------------------------------------------------------- model helpers
def test_lora_targets_qwen2(qwen_model):
    assert qwen_model.config.model_type == "qwen2"
    assert train.lora_targets(qwen_model, None) == ["q_proj", "v_proj"]
    assert train.lora_targets(qwen_model, " q_proj, k_proj ,,") == ["q_proj", "k_proj"]


def test_lora_targets_gpt_neox(offline):
    from transformers import AutoModelForCausalLM, GPTNeoXConfig

    config = GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=64)
    model = AutoModelForCausalLM.from_config(config)
    assert train.lora_targets(model, None) == ["query_key_value"]
    assert len(train.decoder_layers(model)) == 2


def test_decoder_layers(qwen_model):
    layers = train.decoder_layers(qwen_model)
    assert layers is qwen_model.model.layers and len(layers) == 4


def test_decoder_layers_none_is_trn609():
    with pytest.raises(train.SetupError) as err:
        train.decoder_layers(torch.nn.Linear(2, 2))
    assert err.value.rule == "TRN609"


def test_lora_parameter_count_exact(offline):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(train.DEFAULT_MODEL)))
    trainable0, total0 = train.count_parameters(base)
    assert trainable0 == total0
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16,
                                            target_modules=train.lora_targets(base, None)))
    # hidden 256, 4 heads of 64; 2 KV heads -> v_proj is 256 -> 128
    q_proj = 256 * 8 + 8 * 256  # lora_A [8, 256] + lora_B [256, 8] = 4096
    v_proj = 256 * 8 + 8 * 128  # lora_A [8, 256] + lora_B [128, 8] = 3072
    expected = 4 * (q_proj + v_proj)
    assert expected == 28_672
    trainable, total = train.count_parameters(model)
    assert trainable == 28_672
    assert total == total0 + 28_672


def test_a_tokenizer_chat_template_is_used_when_present(tokenizer):
    import copy

    chat = copy.deepcopy(tokenizer)
    chat.chat_template = ("{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    assert chat.decode(train.format_prompt(chat, "auto", "hi there")) == "<|user|>hi there<|assistant|>"
    assert chat.decode(train.format_prompt(chat, "chatglm", "hi there")) == "问：hi there\n答："
    assert chat.decode(train.format_prompt(chat, "Q: {instruction} A:", [("user", "hi\nx")])) == "Q: hi\nx A:"


def test_a_json_array_file_is_read_as_llama_factory_writes_them(tokenizer, tmp_path):
    """newcomer trial: LLaMA-Factory's dataset files (alpaca_zh_demo.json) are one JSON array; they were refused."""
    array = tmp_path / "a.json"
    array.write_text(json.dumps([{"instruction": "x", "output": "y"}] * 3 + [{"prompt": "p", "response": "r"}]))
    assert len(train.build_dataset(str(array), tokenizer, "auto", 256)) == 4
    bom = tmp_path / "bom.jsonl"  # a UTF-8 byte-order mark, as Windows editors write
    bom.write_bytes("\ufeff".encode() + json.dumps({"instruction": "x", "output": "y"}).encode() + b"\n")
    assert len(train.build_dataset(str(bom), tokenizer, "auto", 256)) == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"instruction": "x", "output": "y"}, 3]))
    with pytest.raises(train.SetupError, match="1 malformed record\\(s\\): record 2: a JSON number, not an object"):
        train.build_dataset(str(bad), tokenizer, "auto", 256)


def test_a_binary_file_is_data702(tokenizer, tmp_path):
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(train.SetupError) as err:
        train.build_dataset(str(binary), tokenizer, "auto", 256)
    assert err.value.rule == "DATA702" and "not UTF-8 text (byte 0)" in str(err.value)


def test_openai_style_turns_are_read_not_called_malformed():
    """A new user's trial: content given as a list of parts, an assistant turn that only calls a tool (content
    null, tool_calls) and a tool's reply were DATA702. They are read: the text parts joined, the call as its JSON,
    the tool's reply as context; the last assistant turn is the answer."""
    from dsdoctor.reference_train.sft_data import parse_row

    row = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "image"},
                                                     {"type": "text", "text": "2+2?"}]},
                        {"role": "assistant", "content": None,
                         "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": "2+2"}}]},
                        {"role": "tool", "content": "4"},
                        {"role": "assistant", "content": "It is 4."}]}
    record, problems = parse_row(row, 1)
    assert problems == [] and record.answer == "It is 4."
    assert record.prompt[0] == ("user", "What is 2+2?") and record.prompt[2] == ("user", "4")
    assert '"name": "calc"' in record.prompt[1][1] and record.prompt[1][0] == "assistant"
