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
    what="A line is not JSON, lacks 'instruction' or 'output', has a non-string value, or the file has "
         "fewer samples than one micro batch per rank.",
    why="The run would crash later, or train on nothing.",
    fix="Write one JSON object per line: {\"instruction\": ..., \"input\": ... (optional), \"output\": ...}.",
    source="the alpaca format (instruction/input/output)")
