"""Data checks (``DATA7xx``): what the reference trainer finds in an instruction dataset before training."""

from __future__ import annotations

from dsdoctor.rules import rule

DATA701 = rule(
    "DATA701", "error", "Sample with no answer token",
    what="After the prompt template and truncation to the sequence length, a sample has no label other "
         "than -100 (empty output, or a prompt as long as the sequence).",
    why="Its loss is 0/0: NaN in torch's cross entropy with every target ignored, or a silently wasted "
        "sample; if all samples are like this, nothing is learned.",
    fix="Raise --seq-len (or max_source_length/max_target_length), shorten the prompts, drop empty outputs.",
    source="torch.nn.CrossEntropyLoss(ignore_index=-100); LLaMA-Factory and the tutorials mask the prompt "
           "with -100",
    example="line 17: prompt 300 tokens with --seq-len 256")
DATA702 = rule(
    "DATA702", "error", "Malformed dataset",
    what="A line is not JSON, lacks 'instruction' or 'output', has a non-string value, the file is not UTF-8 "
         "text, or it is one JSON array instead of JSON lines.",
    why="The run would crash later, or train on nothing.",
    fix="Write one JSON object per line: {\"instruction\": ..., \"input\": ... (optional), \"output\": ...}.",
    source="the alpaca format (instruction/input/output)")
DATA703 = rule(
    "DATA703", "error", "Fewer samples than one global micro batch",
    what="The dataset has fewer samples than micro batch x world size, so no rank gets a full batch.",
    why="With drop_last every rank's loader is empty and nothing trains; without it ranks get different "
        "batch counts and the collectives hang at the end of the epoch.",
    fix="Add samples, or lower the micro batch (--micro-batch) or the number of ranks (--nproc).",
    source="torch.utils.data.distributed.DistributedSampler(drop_last=True)")
