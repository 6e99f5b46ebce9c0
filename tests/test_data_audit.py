"""``dsdoctor data FILE``: the audit against the reference trainer's own tokenization, the tools' formats, and bad
input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor import data_audit
from dsdoctor.reference_train import train as reference

EXAMPLES = Path(__file__).resolve().parents[1] / "cases" / "launch-lines" / "examples" / "llamafactory"


def data(*args: str, cwd: Path | None = None) -> tuple[int, dict | None, str]:
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "data", "--json", "-", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=180, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    return proc.returncode, report, proc.stderr


def test_cut_away_samples_are_exactly_the_reference_trainers(tmp_path):
    """The lines the audit says lose every answer token are the ones reference_train/train.py build_dataset refuses
    (DATA701), through the same tokenizer and template, on the bundled data at a short sequence length."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(reference.DEFAULT_MODEL))
    result = data_audit.audit(reference.DEFAULT_DATA, str(reference.DEFAULT_MODEL), 24, "chatglm")
    with pytest.raises(reference.SetupError) as refused:
        reference.build_dataset(str(reference.DEFAULT_DATA), tokenizer, "chatglm", 24)
    lines = refused.value.args[1] if len(refused.value.args) > 1 else str(refused.value)
    assert result.cut_away and len(result.cut_away) == int(lines.split(":")[1].split()[0])
    shown = lines.split("line(s) ")[1].rstrip(" .").split(", ")
    assert [w.split()[1] for w in result.cut_away[:len(shown)]] == [s for s in shown if s != "..."][:10]
    # and the lengths are the trainer's: prompt + answer + EOS, for every sample
    samples = reference.build_dataset(str(reference.DEFAULT_DATA), tokenizer, "chatglm", 10_000)
    assert sorted(result.lengths) == sorted(len(s["input_ids"]) for s in samples)


def test_sampled_audit_finds_every_cut_away_line_the_full_one_does(tmp_path, monkeypatch):
    rows = [{"instruction": ("word " * (i % 40)) + str(i), "output": "ok"} for i in range(600)]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    monkeypatch.setattr(data_audit, "SAMPLE", 100)
    sampled = data_audit.audit(path, None, 40, "chatglm")
    full = data_audit.audit(path, None, 40, "chatglm", full=True)
    assert sampled.tokenized == 100 and full.tokenized == 600
    assert sampled.cut_away == full.cut_away and len(full.cut_away) > 50


def test_llamafactory_dataset_info_entries_alpaca_and_sharegpt(tmp_path):
    (tmp_path / "alpaca.json").write_bytes((EXAMPLES / "data__alpaca_en_demo.json.first20").read_bytes())
    (tmp_path / "tools.json").write_bytes((EXAMPLES / "data__glaive_toolcall_en_demo.json.first20").read_bytes())
    (tmp_path / "dataset_info.json").write_text(json.dumps({
        "alpaca_en_demo": {"file_name": "alpaca.json"},
        "glaive_toolcall_en_demo": {"file_name": "tools.json", "formatting": "sharegpt",
                                    "columns": {"messages": "conversations", "tools": "tools"}}}))
    code, report, err = data(str(tmp_path / "dataset_info.json"), "--dataset", "glaive_toolcall_en_demo",
                             "--seq-len", "4096")
    assert code == 0, err
    assert report["result"]["records"] == 20 and not report["result"]["malformed"]
    code, report, err = data(str(tmp_path / "dataset_info.json"), "--dataset", "alpaca_en_demo", "--seq-len", "128")
    assert report["result"]["records"] == 20 and report["result"]["truncated_share"] > 0
    code, _, err = data(str(tmp_path / "dataset_info.json"))
    assert code == 2 and "give --dataset NAME" in err and "alpaca_en_demo" in err


def test_empty_answers_duplicates_and_malformed_lines_by_line(tmp_path):
    lines = ['{"instruction": "a", "output": "x"}', '{"instruction": "b", "output": ""}', "not json",
             '{"instruction": "a", "output": "x"}', '{"question": "no known keys"}']
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
    code, report, _ = data(str(tmp_path / "d.jsonl"), "--seq-len", "64")
    assert code == 1
    found = {f["id"]: f for f in report["findings"]}
    assert "line 2" in report["result"]["empty"][0] and found["DATA701"]["severity"] == "error"
    assert report["result"]["duplicates"] == ["line 4 = line 1"]
    assert [m.split(":")[0] for m in report["result"]["malformed"]] == ["line 3", "line 5"]


def test_tokenizing_past_the_collective_timeout(tmp_path):
    rows = [{"instruction": f"question {i} " + "word " * 50, "output": "answer"} for i in range(3000)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = data_audit.audit(tmp_path / "d.jsonl", None, 256, "chatglm")
    result.tokenize_s_per_sample = 1.0  # a slow tokenizer: 3000 s on one worker
    found = {f.id: f for f in data_audit.findings(result, "d.jsonl", 256, timeout_s=1800)}
    assert found["DATA707"].severity == "error" and "3,000 s" in found["DATA707"].evidence
    found = {f.id: f for f in data_audit.findings(result, "d.jsonl", 256, timeout_s=1800, workers=4)}
    assert found["DATA707"].severity == "ok"  # 750 s with preprocessing_num_workers 4


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    (b"\xff\xfe not utf-8", "not UTF-8"),
    (b"[{\"instruction\": 1,", "not valid JSON"),
])
def test_bad_data_files_one_line_exit_2(tmp_path, content, message):
    path = tmp_path / "d.json"
    if content is not None:
        path.write_bytes(content)
    code, _, err = data(str(path))
    assert code == 2 and message in err and "Traceback" not in err and err.count("\n") == 1


def test_a_template_other_than_the_models_chat_template(tmp_path):
    import shutil

    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(reference.DEFAULT_MODEL / name, tmp_path / name)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    alpaca = data_audit.audit(reference.DEFAULT_DATA, str(tmp_path), 512, "alpaca")
    assert "DATA708" in [f.id for f in data_audit.findings(alpaca, "sft.jsonl", 512)]
    chat = data_audit.audit(reference.DEFAULT_DATA, str(tmp_path), 512, "auto")
    assert chat.template == "chat" and "DATA708" not in [f.id for f in data_audit.findings(chat, "sft.jsonl", 512)]
    assert min(chat.lengths) > 0 and chat.lengths != alpaca.lengths


def test_empty_file_nonexistent_model_and_a_stray_dataset_option(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    code, report, _ = data(str(tmp_path / "empty.jsonl"))
    assert code == 1 and [f["id"] for f in report["findings"]] == ["DATA702"]
    code, _, err = data(str(reference.DEFAULT_DATA), "--model", str(tmp_path / "no-such-model"))
    assert code == 2 and "no such directory" in err
    code, _, err = data(str(reference.DEFAULT_DATA), "--dataset", "alpaca")
    assert code == 2 and "goes with a LLaMA-Factory dataset_info.json" in err


def test_llamafactory_shares_the_length_and_axolotl_drops(tmp_path):
    assert data_audit.infer_seqlen(300, 20, 256) == (236, 20)  # a short answer keeps all its tokens
    assert data_audit.infer_seqlen(300, 300, 256) == (128, 128)
    lf = data_audit.audit(reference.DEFAULT_DATA, None, 24, "chatglm", truncation="llamafactory")
    ref = data_audit.audit(reference.DEFAULT_DATA, None, 24, "chatglm")
    ax = data_audit.audit(reference.DEFAULT_DATA, None, 24, "chatglm", truncation="axolotl")
    assert ref.cut_away and not lf.cut_away and not ax.cut_away
    assert len(ax.dropped) == sum(t > 24 for t in ax.lengths) > 0


def test_pretraining_and_preference_entries_are_not_sft(tmp_path):
    (tmp_path / "pt.jsonl").write_text('{"text": "plain text"}\n')
    (tmp_path / "dataset_info.json").write_text(json.dumps({
        "my_pt": {"file_name": "pt.jsonl", "columns": {"prompt": "text"}},
        "my_dpo": {"file_name": "pt.jsonl", "ranking": True}}))
    for name, why in (("my_pt", "pre-training"), ("my_dpo", "preference")):
        code, _, err = data(str(tmp_path / "dataset_info.json"), "--dataset", name)
        assert code == 2 and why in err


def test_max_samples_keeps_the_first_records_only(tmp_path):
    rows = [{"instruction": "q", "output": "a"}] * 5 + [{"instruction": "q6", "output": ""}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert data_audit.audit(tmp_path / "d.jsonl", None, 64, "chatglm").empty == ["line 6"]
    assert data_audit.audit(tmp_path / "d.jsonl", None, 64, "chatglm", limit=5).empty == []


def test_every_malformed_line_is_named_and_the_tokenizing_count_leaves_them_out(tmp_path):
    """A new user's trial: "6 malformed" listed five lines. Past five, the rest are named by line; DATA707 counts
    the samples the run tokenizes (a malformed line stops it), not every line."""
    good = [json.dumps({"instruction": f"q{i}", "input": "", "output": f"a{i}"}) for i in range(4)]
    bad = ['{"instruction": "x"}', "[1, 2]", '"just a string"', "{not json", '{"output": "y"}', "7", "null"]
    (tmp_path / "d.jsonl").write_text("\n".join(good + bad) + "\n")
    code, report, err = data(str(tmp_path / "d.jsonl"), "--seq-len", "64")
    assert report is not None, err
    d702 = [f for f in report["findings"] if f["id"] == "DATA702"][0]
    assert d702["evidence"].startswith("d.jsonl: 7 malformed: line 5: ")
    assert d702["evidence"].endswith("; and 2 more: line 10, line 11")
    d707 = [f for f in report["findings"] if f["id"] == "DATA707"][0]
    assert "tokenizing 4 samples" in d707["evidence"]
