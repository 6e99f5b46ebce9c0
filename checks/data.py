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
    what="A record is not JSON, lacks its format's fields (instruction/output, prompt/response, or messages with "
         "a user turn before an assistant turn), has a non-string value, or the file is not UTF-8 text.",
    why="The run would crash later, or train on nothing.",
    fix="Give every record one format's fields, as the evidence names for each line: alpaca {\"instruction\": ..., "
        "\"input\": ... (optional), \"output\": ...}; prompt/response; or {\"messages\": [{\"role\": \"user\", "
        "\"content\": ...}, {\"role\": \"assistant\", \"content\": ...}]} (ShareGPT's conversations/from/value too).",
    source="the alpaca, prompt/response, messages and ShareGPT formats (LLaMA-Factory data/README.md)")
DATA703 = rule(
    "DATA703", "error", "Fewer samples than one global micro batch",
    what="The dataset has fewer samples than micro batch x world size, so no rank gets a full batch.",
    why="With drop_last every rank's loader is empty and nothing trains; without it ranks get different "
        "batch counts and the collectives hang at the end of the epoch.",
    fix="Add samples, or lower the micro batch (--micro-batch) or the number of ranks (--nproc).",
    source="torch.utils.data.distributed.DistributedSampler(drop_last=True)")
DATA704 = rule(
    "DATA704", "warning", "Samples truncated at the sequence length",
    what="Prompt plus answer (with the run's template and tokenizer) is longer than the sequence length for more "
         "than 5% of the samples (info below that).",
    why="The end of each such answer is never trained on: the model learns to stop mid-answer, or never sees the "
        "conclusion.",
    fix="Raise the sequence length (cutoff_len / max_seq_length / --seq-len) toward the p99 shown, or filter the "
        "long samples.",
    source="reference_train/train.py build_dataset; LLaMA-Factory and the HF tokenizers truncate at max_length")
DATA705 = rule(
    "DATA705", "warning", "Duplicate samples",
    what="Records with the same prompt and answer (more than 1% of the file: warning).",
    why="Each epoch trains on them several times: overfitting to those answers, and a loss that looks better "
        "than it is.",
    fix="Deduplicate the file (the lines are listed), e.g. keep the first of each.",
    source="exact match of the prompt turns and the answer")
DATA706 = rule(
    "DATA706", "info", "Padding waste",
    what="The share of the tokens a step computes that are padding: every sample padded to the sequence length "
         "(padding='max_length') against each micro batch padded to its longest (dynamic padding).",
    why="Padding costs the same FLOPs and memory as real tokens.",
    fix="Pad dynamically (DataCollatorForSeq2Seq(padding=True), the reference trainer's collate), or pack "
        "(LLaMA-Factory packing, axolotl sample_packing).",
    source="transformers DataCollatorForSeq2Seq; reference_train/train.py collate")
DATA707 = rule(
    "DATA707", "error", "Tokenizing before training runs past the collective timeout",
    what="Tokenizing the whole file on rank 0, at the rate measured here, takes longer than the collective "
         "timeout in effect (torch's and HF's default 1800 s, or ddp_timeout).",
    why="While rank 0 tokenizes, the other ranks wait in a barrier; when the watchdog fires every rank is killed "
        "('Watchdog caught collective operation timeout'), hours into a run that never trained.",
    fix="Pre-tokenize once (LLaMA-Factory tokenized_path, datasets .map saved to disk), use more workers "
        "(preprocessing_num_workers), or raise ddp_timeout (e.g. 180000000 as LLaMA-Factory's examples do).",
    source="torch/distributed/constants.py default_pg_nccl_timeout; transformers TrainingArguments.ddp_timeout; "
           "cases/report-12-nccl-watchdog-timeout-during-preprocessing")
DATA708 = rule(
    "DATA708", "warning", "Prompt template differs from the model's chat template",
    what="The samples are formatted with one template (ChatGLM's 问/答, Alpaca's) while the model's tokenizer ships "
         "a chat template.",
    why="The model is then prompted at inference (chat, vLLM, the HF pipeline) with its chat template, which it "
        "was not fine-tuned on: answers look untrained.",
    fix="Train with the model's chat template (--template chat; LLaMA-Factory: the template matching the model), "
        "or serve with the template you trained on.",
    source="transformers tokenizer.apply_chat_template")
