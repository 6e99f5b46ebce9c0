"""``dsdoctor data FILE``: what a dataset does once the run's tokenizer, template and sequence length meet it
(:mod:`dsdoctor.data_audit`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report


def run_data(file: str, model: str | None, seq_len: int, template: str, micro_batch: int, world_size: int,
             dataset: str | None, full: bool, timeout: float | None, workers: int,
             truncation: str = "reference") -> Report:
    """The body of ``dsdoctor data``. Raises DsdoctorError for a file that cannot be read, or a dataset_info.json
    entry that does not exist or is not local."""
    from dsdoctor import data_audit
    from dsdoctor.files import read_input, shown

    path = Path(file).expanduser()
    info = None
    if dataset and path.name != "dataset_info.json":
        raise DsdoctorError(f"--dataset {dataset}: goes with a LLaMA-Factory dataset_info.json FILE, not {shown(file)}")
    if path.name == "dataset_info.json":
        entries = json.loads(read_input(file, "FILE", 64 << 20, what="dataset_info.json").decode("utf-8", "replace"))
        if not isinstance(entries, dict):
            raise DsdoctorError(f"{shown(file)}: not a dataset_info.json mapping")
        local = sorted(k for k, v in entries.items() if isinstance(v, dict) and v.get("file_name"))
        if not dataset:
            raise DsdoctorError(f"{shown(file)}: give --dataset NAME (local entries: {', '.join(local[:12])})")
        info = entries.get(dataset)
        if not isinstance(info, dict) or not info.get("file_name"):
            raise DsdoctorError(f"--dataset {dataset}: not a local entry of {shown(file)} "
                                f"(local entries: {', '.join(local[:12])})")
        why = data_audit.not_sft(info)
        if why:
            raise DsdoctorError(f"--dataset {dataset}: {why}; the audit reads instruction/answer (SFT) records")
        path = path.parent / info["file_name"]
        if path.is_dir():
            raise DsdoctorError(f"--dataset {dataset}: {shown(str(path))} is a directory; give one of its files")
    result = data_audit.audit(path, model, seq_len, template, micro_batch, info=info, full=full,
                              truncation=truncation)
    report = Report("data")
    for finding in data_audit.findings(result, path.name, seq_len, world_size, micro_batch, timeout, workers):
        report.add(finding)
    report.result = {"file": str(path), "records": result.records, "tokenized": result.tokenized,
                     "tokenizer": result.tokenizer, "template": result.template, "seq_len": seq_len,
                     "token_percentiles": result.percentiles, "truncated_share": round(result.truncated_share, 4),
                     "cut_away": result.cut_away, "empty": result.empty, "duplicates": result.duplicates,
                     "malformed": result.malformed, "padding": result.padding, "truncation": result.truncation,
                     "dropped": result.dropped,
                     "tokenize_s_per_sample": result.tokenize_s_per_sample, "notes": result.notes}
    return report


@click.command("data")
@click.argument("file", metavar="FILE")
@click.option("--model", default=None, metavar="DIR|NAME",
              help="The model whose tokenizer counts the tokens (a local directory; else the bundled tokenizer).")
@click.option("--seq-len", type=click.IntRange(1, 10_000_000), default=1024, show_default=True,
              help="The run's sequence length (cutoff_len, max_seq_length).")
@click.option("--template", type=click.Choice(["auto", "chat", "chatglm", "alpaca"]), default="auto",
              show_default=True, help="The prompt template: auto = the tokenizer's chat template if any, else ChatGLM's.")
@click.option("--micro-batch", type=click.IntRange(1, 1_000_000), default=1, show_default=True)
@click.option("--world-size", type=click.IntRange(1, 100_000), default=1, show_default=True)
@click.option("--dataset", default=None, metavar="NAME", help="With a dataset_info.json FILE: the entry to audit.")
@click.option("--full", is_flag=True, help="Tokenize every sample (default: a seeded sample of 2,000 on large files).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="The collective timeout in effect (ddp_timeout); default torch's 1800 s.")
@click.option("--workers", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Tokenizing processes (preprocessing_num_workers).")
@click.option("--truncation", type=click.Choice(["reference", "llamafactory", "axolotl"]), default=None,
              help="How the run shortens a long sample: the answer is cut (reference trainer, the tutorials), the "
                   "length is shared (LLaMA-Factory), the sample is dropped (axolotl). Default: llamafactory for a "
                   "dataset_info.json FILE, else reference.")
@report_command(inputs=("file", "model"))
def data(file, model, seq_len, template, micro_batch, world_size, dataset, full, timeout, workers,
         truncation) -> Report:
    """Audit a dataset: token lengths, truncation, answers cut away, duplicates, padding, tokenizing time."""
    if truncation is None:
        truncation = "llamafactory" if Path(file).name == "dataset_info.json" else "reference"
    return run_data(file, model, seq_len, template, micro_batch, world_size, dataset, full, timeout, workers,
                    truncation)
