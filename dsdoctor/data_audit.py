"""The data audit of ``dsdoctor data`` and ``dsdoctor preflight``: what an instruction dataset does once the run's
tokenizer, prompt template and sequence length meet it.

Formats (the reference trainer's readers, ``reference_train/sft_data.py``): JSON lines or a JSON array of Alpaca
(``instruction``/``input``/``output``), prompt/response, ``messages`` or ShareGPT ``conversations`` records; and
LLaMA-Factory's ``dataset_info.json`` entries, whose ``columns`` and ``tags`` rename those fields
(LLaMA-Factory ``data/README.md``: ``formatting`` alpaca or sharegpt).

Each sample is tokenized as the reference trainer builds it (``reference_train/train.py`` ``build_dataset``): the
prompt through the template, the answer tokenized apart plus EOS, prompt labels -100, truncated to the sequence
length; a sample whose prompt fills the sequence keeps no answer token (every label -100: a NaN loss, or nothing
learned). On a large file a seeded random sample is tokenized and the shares extrapolated; the samples that can be
cut away entirely are then found exactly: every record whose prompt is long enough in characters to reach the
sequence length at the sample's densest characters-per-token ratio is tokenized (``full=True`` tokenizes all).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from dsdoctor.reference_train.sft_data import CHATGLM_TEMPLATE
from dsdoctor.report import DsdoctorError, Finding

ALPACA_TEMPLATE = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")  # tatsu-lab/stanford_alpaca
#: torch's default collective timeout for NCCL process groups (torch/distributed/constants.py
#: default_pg_nccl_timeout), DeepSpeed's (deepspeed/constants.py default_pg_timeout) and HF's ddp_timeout default
DEFAULT_TIMEOUT_S = 1800
SAMPLE = 2000
MAX_BYTES = 4 << 30


@dataclass
class Sample:
    """One record: where it is (``where``: "line 17" or "record 17"), its prompt turns and its answer."""

    where: str
    prompt: tuple
    answer: str


@dataclass
class Audit:
    """What the audit found. Token counts are of the run's tokenizer; shares are fractions of ``records``."""

    records: int = 0
    malformed: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    cut_away: list[str] = field(default_factory=list)
    tokenized: int = 0
    lengths: list[int] = field(default_factory=list)
    truncated_share: float = 0.0
    percentiles: dict[str, int] = field(default_factory=dict)
    padding: dict[str, float] = field(default_factory=dict)
    tokenize_s_per_sample: float = 0.0
    template: str = ""
    truncation: str = "reference"
    dropped: list[str] = field(default_factory=list)  # axolotl: samples longer than sequence_len (of those tokenized)
    chat_template: bool = False  # the tokenizer ships a chat template
    tokenizer: str = ""
    notes: list[str] = field(default_factory=list)


def _convert(row, info: dict | None):
    """A row in a dataset_info.json entry's column names, in the reader's (``instruction``/``input``/``output``,
    ``conversations`` with ``from``/``value``)."""
    if not info or not isinstance(row, dict):
        return row
    columns = info.get("columns") or {}
    if info.get("formatting", "alpaca") == "sharegpt":
        key = columns.get("messages", "conversations")
        tags = info.get("tags") or {}
        role, content = tags.get("role_tag", "from"), tags.get("content_tag", "value")
        roles = {tags.get("user_tag", "human"): "user", tags.get("assistant_tag", "gpt"): "assistant",
                 tags.get("system_tag", "system"): "system", tags.get("observation_tag", "observation"): "user",
                 tags.get("function_tag", "function_call"): "assistant"}
        turns = row.get(key)
        if not isinstance(turns, list):
            return {"messages": turns}
        out = [{"role": roles.get(t.get(role), t.get(role)), "content": t.get(content)} if isinstance(t, dict) else t
               for t in turns]
        if columns.get("system") and isinstance(row.get(columns["system"]), str):
            out.insert(0, {"role": "system", "content": row[columns["system"]]})
        return {"messages": out}
    mapped = {"instruction": row.get(columns.get("prompt", "instruction")),
              "output": row.get(columns.get("response", "output"))}
    if columns.get("query", "input") in row:
        mapped["input"] = row.get(columns.get("query", "input"))
    if columns.get("history") and row.get(columns["history"]):
        mapped = {"prompt": "\n".join(x for x in [mapped["instruction"], mapped.get("input")] if x),
                  "response": mapped["output"], "history": row[columns["history"]]}
    return {k: v for k, v in mapped.items() if v is not None}


def not_sft(info: dict | None) -> str:
    """Why a dataset_info.json entry holds no instruction/answer records, or "": a preference dataset (``ranking``:
    chosen/rejected pairs, for DPO, ORPO, KTO, a reward model) or a pre-training one (a text column and no response:
    ``columns: {prompt: text}``), as LLaMA-Factory's data/README.md describes them."""
    if not isinstance(info, dict):
        return ""
    if info.get("ranking"):
        return "a preference dataset (ranking: chosen/rejected pairs)"
    columns = info.get("columns") or {}
    if info.get("formatting", "alpaca") != "sharegpt" and "prompt" in columns and "response" not in columns:
        return "a pre-training dataset (a text column, no response)"
    return ""


def read_samples(path: Path, info: dict | None = None) -> tuple[list[Sample], list[str], list[str]]:
    """(samples with an answer, malformed "where: why", samples whose answer is empty) of a JSON lines file or a
    JSON array. ``info``: a dataset_info.json entry. Raises DsdoctorError for a file that cannot be read or is not
    UTF-8."""
    from dsdoctor.files import read_input
    from dsdoctor.reference_train.sft_data import parse_row

    raw = read_input(str(path), "the data file", MAX_BYTES, what="dataset")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise DsdoctorError(f"{path}: not UTF-8 text (byte {exc.start}): expected JSON lines or a JSON array") from None
    items = []
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except (ValueError, RecursionError) as exc:
            where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise DsdoctorError(f"{path}: starts like a JSON array but is not valid JSON{where}") from None
        if not isinstance(rows, list):
            raise DsdoctorError(f"{path}: not a JSON array of records")
        items = [(f"record {i}", row) for i, row in enumerate(rows, start=1)]
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((f"line {number}", json.loads(line)))
            except (ValueError, RecursionError):
                items.append((f"line {number}", ValueError))
    samples, malformed, empty = [], [], []
    for where, row in items:
        if row is ValueError:
            malformed.append(f"{where}: not JSON")
            continue
        record, problems = parse_row(_convert(row, info), 0)
        if problems:
            malformed.append(f"{where}: " + "; ".join(problems))
        elif not record.answer.strip():
            empty.append(where)
        else:
            samples.append(Sample(where, record.prompt, record.answer))
    return samples, malformed, empty


def load_tokenizer(model: str | None):
    """(tokenizer, what it is): the model directory's own (``AutoTokenizer.from_pretrained``, never
    ``trust_remote_code``), else the bundled tiny model's (``reference_train/assets/tiny-model``) with a note that
    counts are approximate. Raises DsdoctorError when a local model directory's tokenizer cannot be loaded."""
    from transformers import AutoTokenizer

    import dsdoctor.reference_train as bundle

    bundled = Path(bundle.__file__).resolve().parent / "assets" / "tiny-model"
    if model and not Path(model).expanduser().exists() and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        raise DsdoctorError(f"--model {model}: no such directory")
    if model and Path(model).expanduser().exists() and not Path(model).expanduser().is_dir():
        raise DsdoctorError(f"--model {model}: not a model directory (give the directory with config.json)")
    if model and Path(model).expanduser().is_dir():
        names = {p.name for p in Path(model).expanduser().iterdir()}
        if not names & {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                        "spiece.model", "qwen.tiktoken"}:
            raise DsdoctorError(f"--model {model}: no tokenizer files in it (tokenizer.json, tokenizer_config.json, "
                                "tokenizer.model): give the model's directory")
        try:
            return AutoTokenizer.from_pretrained(str(Path(model).expanduser()), trust_remote_code=False), \
                f"{model}'s tokenizer"
        except Exception as exc:  # transformers raises many kinds for a tokenizer it cannot build
            detail = " ".join(str(exc).split())[:160]
            raise DsdoctorError(f"--model {model}: its tokenizer does not load here without the model's own code "
                                f"({type(exc).__name__}: {detail})") from None
    what = "the bundled tiny tokenizer (" + (f"{model} is not a local directory: " if model else "no --model: ") + \
        "token counts are approximate; give --model DIR for the model's own)"
    return AutoTokenizer.from_pretrained(str(bundled)), what


def _prompt_text(tokenizer, template: str, prompt: tuple) -> tuple[str | None, list[int] | None]:
    if template == "chat":
        ids = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in prompt],
                                            add_generation_prompt=True, tokenize=True)
        return None, list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    fmt = CHATGLM_TEMPLATE if template == "chatglm" else ALPACA_TEMPLATE
    return fmt.format(instruction="\n".join(c for _, c in prompt)), None


def _encode(tokenizer, template: str, samples: list[Sample]) -> list[tuple[int, int]]:
    """(prompt tokens, answer tokens + EOS) of each sample, batched through the fast tokenizer."""
    prompts: list[list[int] | None] = []
    texts = []
    for s in samples:
        text, ids = _prompt_text(tokenizer, template, s.prompt)
        prompts.append(ids)
        texts.append(text)
    need = [i for i, t in enumerate(texts) if t is not None]
    if need:
        encoded = tokenizer([texts[i] for i in need])["input_ids"]
        for i, ids in zip(need, encoded):
            prompts[i] = ids
    answers = tokenizer([s.answer for s in samples], add_special_tokens=False)["input_ids"]
    return [(len(p), len(a) + 1) for p, a in zip(prompts, answers)]


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """(prompt tokens, answer tokens) LLaMA-Factory keeps of a sample at ``cutoff_len``: the answer keeps its share
    of the budget, so it is never cut away entirely (LLaMA-Factory ``data/processor/processor_utils.py``
    ``infer_seqlen``, mirrored)."""
    if target_len * 2 < cutoff_len:
        max_target_len = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target_len = cutoff_len - source_len
    else:
        max_target_len = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target_len = min(max_target_len, target_len)
    new_source_len = min(max(cutoff_len - new_target_len, 0), source_len)
    return new_source_len, new_target_len


def audit(path: Path, model: str | None, seq_len: int, template: str = "auto", micro_batch: int = 1,
          info: dict | None = None, full: bool = False, seed: int = 0, tokenizer=None,
          truncation: str = "reference", limit: int | None = None) -> Audit:
    """Audit the dataset at ``path`` for a run at ``seq_len`` tokens with ``template`` ("auto": the tokenizer's
    chat template if it has one, else ChatGLM's, as the reference trainer) and ``micro_batch`` samples a batch (for
    the padding). ``truncation``: how the run shortens a long sample: "reference" (the answer is cut, and lost
    entirely when the prompt fills the length: reference_train, the tutorials), "llamafactory" (the length is shared:
    :func:`infer_seqlen`; no answer is lost) or "axolotl" (a sample longer than ``sequence_len`` is dropped:
    axolotl's ``drop_long_seq``). Raises DsdoctorError for a file that cannot be read."""
    result = Audit()
    samples, result.malformed, result.empty = read_samples(path, info)
    if limit:  # the run keeps only the first `limit` records (LLaMA-Factory's max_samples)
        last = _number((samples[limit - 1:limit] or [None])[0]) if len(samples) >= limit else None
        if last is not None:
            samples = samples[:limit]
            result.malformed = [m for m in result.malformed if _number(m.split(":")[0]) <= last]
            result.empty = [w for w in result.empty if _number(w) <= last]
    result.truncation = truncation
    result.records = len(samples) + len(result.empty) + len(result.malformed)
    seen: dict[str, str] = {}
    for s in samples:
        key = hashlib.sha1(json.dumps([s.prompt, s.answer], ensure_ascii=False).encode()).hexdigest()
        if key in seen:
            result.duplicates.append(f"{s.where} = {seen[key]}")
        else:
            seen[key] = s.where
    if not samples:
        return result
    if tokenizer is None:
        tokenizer, result.tokenizer = load_tokenizer(model)
    else:
        result.tokenizer = getattr(tokenizer, "name_or_path", "given")
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    result.chat_template = has_chat
    if template == "auto":
        template = "chat" if has_chat else "chatglm"
    if template == "chat" and not has_chat:
        raise DsdoctorError("--template chat: this tokenizer has no chat template (give --template chatglm|alpaca)")
    result.template = template
    tokenizer.model_max_length = 1 << 60  # the audit truncates itself; no "longer than the maximum" warning per sample
    chosen = samples if full or len(samples) <= SAMPLE else random.Random(seed).sample(samples, SAMPLE)
    started = time.perf_counter()
    counts = _encode(tokenizer, template, chosen)
    result.tokenize_s_per_sample = (time.perf_counter() - started) / len(chosen)
    result.tokenized = len(chosen)
    totals = [p + a for p, a in counts]
    result.lengths = totals
    ordered = sorted(totals)
    result.percentiles = {f"p{q}": ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)]
                          for q in (50, 90, 99)}
    result.percentiles["max"] = ordered[-1]
    result.percentiles["mean"] = round(statistics.fmean(totals))
    result.truncated_share = sum(t > seq_len for t in totals) / len(totals)
    result.truncation = truncation
    if truncation == "axolotl":  # too long: dropped, not truncated
        result.dropped = sorted((s.where for s, t in zip(chosen, totals) if t > seq_len),
                                key=lambda w: int(w.split()[-1]))
    cut = {s.where for s, (p, _) in zip(chosen, counts) if p >= seq_len} if truncation == "reference" else set()
    if truncation == "reference" and len(chosen) < len(samples):  # every record that could be cut away, exactly
        # a prompt of c characters has at least c / r tokens, r the most characters a prompt token held in the
        # sample (the template's tokens only lower r); 0.8 of the densest r seen leaves room for denser text
        densest = min(len(_flat(s)) / max(p, 1) for s, (p, _) in zip(chosen, counts))
        floor = seq_len * densest * 0.8
        suspects = [s for s in samples if len(_flat(s)) >= floor]
        tokenized = {c.where for c in chosen}
        suspects = [s for s in suspects if s.where not in tokenized]
        for s, (p, _) in zip(suspects, _encode(tokenizer, template, suspects) if suspects else []):
            if p >= seq_len:
                cut.add(s.where)
        result.notes.append(f"{len(chosen):,} of {len(samples):,} samples tokenized (seeded random sample), "
                            f"and {len(suspects):,} more whose prompts are long enough to fill {seq_len} tokens")
    result.cut_away = sorted(cut, key=lambda w: int(w.split()[-1]))
    kept = [min(t, seq_len) for t in totals]
    fixed = len(kept) * seq_len
    batches = [kept[i:i + micro_batch] for i in range(0, len(kept), micro_batch)]
    dynamic = sum(max(b) * len(b) for b in batches)
    result.padding = {"real_tokens": sum(kept), "fixed_padding_tokens": fixed, "dynamic_padding_tokens": dynamic,
                      "fixed_waste": round(1 - sum(kept) / fixed, 4), "dynamic_waste": round(1 - sum(kept) / dynamic, 4)}
    return result


def _number(where) -> int:
    """The line or record number of a "line 17" / "record 17" (or of a Sample)."""
    text = where.where if isinstance(where, Sample) else str(where)
    return int(text.split()[-1])


def _flat(s: Sample) -> str:
    return "\n".join(c for _, c in s.prompt)


def _lines(wheres: list[str], limit: int = 12) -> str:
    if not wheres:
        return ""
    unit = wheres[0].split()[0] + "s"
    shown = ", ".join(w.split(" ", 1)[1] for w in wheres[:limit])
    return f"{unit} {shown}" + (f" ... ({len(wheres)} in all)" if len(wheres) > limit else "")


def findings(result: Audit, name: str, seq_len: int, world_size: int = 1, micro_batch: int = 1,
             timeout_s: float | None = None, workers: int = 1) -> list[Finding]:
    """The DATA7xx findings of ``result`` for the file ``name``."""
    from dsdoctor.checks import data as rules

    out = []
    if result.malformed:
        rest = result.malformed[5:]
        out.append(rules.DATA702.finding(
            f"{name}: {len(result.malformed)} malformed: " + "; ".join(result.malformed[:5])
            + (f"; and {len(rest)} more: " + ", ".join(m.split(":")[0] for m in rest[:20])
               + (" ..." if len(rest) > 20 else "") if rest else "")))
    if not result.records:
        out.append(rules.DATA702.finding(f"{name}: no samples (the file is empty or holds only blank lines)",
                                         title="No samples"))
    if result.empty:
        out.append(rules.DATA701.finding(f"{name}: {len(result.empty)} sample(s) with an empty answer: "
                                         f"{_lines(result.empty)}", title="Samples with an empty answer",
                                         severity="warning" if result.truncation == "llamafactory" else None,
                                         fix="Drop those samples, or fill their answers: an empty answer has no "
                                             "token to learn."))
    if result.cut_away:
        out.append(rules.DATA701.finding(
            f"{name}: {len(result.cut_away)} sample(s) whose prompt fills the sequence length {seq_len} with the "
            f"{result.template} template, so every label is -100: {_lines(result.cut_away)}"))
    if result.dropped:
        share = len(result.dropped) / max(result.tokenized, 1)
        out.append(rules.DATA704.finding(
            f"{name}: {share:.1%} of the samples tokenized are longer than sequence_len {seq_len}: axolotl drops "
            f"them (drop_long_seq): {_lines(result.dropped)}", severity="warning" if share > 0.05 else "info",
            title="Samples dropped for their length"))
    usable = result.records - len(result.malformed) - len(result.empty) - len(result.cut_away)
    if result.records and usable < micro_batch * world_size:
        out.append(rules.DATA703.finding(f"{name}: {usable} usable sample(s); micro batch {micro_batch} x world "
                                         f"size {world_size} = {micro_batch * world_size}"))
    if result.tokenized and not result.dropped:
        share = result.truncated_share
        out.append(rules.DATA704.finding(
            f"{name}: {share:.1%} of samples longer than {seq_len} tokens (tokens: "
            + ", ".join(f"{k} {v:,}" for k, v in result.percentiles.items()) + f"; {result.tokenizer})",
            severity="warning" if share > 0.05 else "info" if share > 0 else "ok",
            title="Samples truncated at the sequence length" if share else "No sample is truncated"))
    if result.duplicates:
        share = len(result.duplicates) / max(result.records, 1)
        out.append(rules.DATA705.finding(f"{name}: {len(result.duplicates)} duplicate(s) ({share:.1%}): "
                                         + "; ".join(result.duplicates[:6]),
                                         severity="warning" if share > 0.01 else "info"))
    if result.padding:
        p = result.padding
        out.append(rules.DATA706.finding(
            f"{name}: padding every sample to {seq_len} wastes {p['fixed_waste']:.0%} of the tokens computed; padding "
            f"each micro batch of {micro_batch} to its longest wastes {p['dynamic_waste']:.0%}",
            severity="warning" if p["fixed_waste"] > 0.5 and micro_batch > 1 else "info"))
    if result.tokenized:
        per_sample = result.tokenize_s_per_sample
        readable = result.records - len(result.malformed)  # what the run tokenizes (a malformed line stops it)
        total = per_sample * readable / max(workers, 1)
        limit = timeout_s or DEFAULT_TIMEOUT_S
        severity = "error" if total > limit else "warning" if total > limit / 2 else "ok"
        out.append(rules.DATA707.finding(
            f"{name}: tokenizing {readable:,} samples takes about {total:,.0f} s on rank 0 here "
            f"({per_sample * 1e6:.0f} µs a sample over {result.tokenized:,} timed, {max(workers, 1)} worker(s)); "
            f"the collective timeout is {limit:,.0f} s" + ("" if timeout_s else " (torch's and HF's default)"),
            severity=severity, title="Tokenizing before training runs past the collective timeout"
            if severity == "error" else "Tokenizing before training nears the collective timeout"
            if severity == "warning" else "Tokenizing before training fits the collective timeout"))
    if result.chat_template and result.template in ("chatglm", "alpaca"):
        out.append(rules.DATA708.finding(f"{name}: formatted with the {result.template} template; {result.tokenizer} "
                                         "ships a chat template"))
    return out
