"""The ``LOG8xx`` rules: failures in a run's log that no preflight check can catch (and LOG800, nothing found).

Declared with :func:`dsdoctor.rules.rule` (registered in the catalogue on import); every other failure explain
recognises is reported under the rule of the preflight check that would have caught it (``signatures.py``).
"""

from __future__ import annotations

from dsdoctor.rules import rule

LOG800 = rule(
    "LOG800", "info", "no known failure found",
    what="The log holds no failure that dsdoctor recognises.",
    why="The run may have ended for a reason not in the catalogue, or the log is cut before the failure.",
    fix="Read the last error-looking lines (in the evidence); `dsdoctor rules` lists what explain recognises.",
    source="dsdoctor explain")
LOG801 = rule(
    "LOG801", "error", "a collective timed out (NCCL watchdog, gloo)",
    what="A collective waited longer than the process group's timeout (NCCL's watchdog, 30 minutes by default; 10 "
         "in some torch versions; gloo's own timeout on CPU groups) and the job was aborted.",
    why="One rank stopped calling collectives while the others waited in one: it was busy elsewhere (rank 0 "
        "tokenising a large dataset, saving, evaluating), crashed earlier, or the network between the ranks hangs.",
    fix="The ranks that did not time out are the suspects. For long preprocessing: preprocess before launching, or "
        "raise the timeout (TrainingArguments ddp_timeout=7200; deepspeed.init_distributed(timeout=timedelta("
        "hours=2))). For a network hang: `dsdoctor nccl` names the stage and the rank.",
    source="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog's message); "
           "https://github.com/hiyouga/LlamaFactory/issues/2424")
LOG802 = rule(
    "LOG802", "error", "the model needs trust_remote_code, in a run that cannot answer",
    what="transformers asked whether to run the model repository's own code (ChatGLM, Qwen v1, Baichuan, InternLM), "
         "and the run has no terminal to answer on.",
    why="Every rank waits for the prompt or fails with EOFError / 'trust_remote_code=True' ValueError.",
    fix="Read the repository's modeling code, then pass trust_remote_code=True to from_pretrained (LLaMA-Factory and "
        "most scripts: --trust_remote_code), or use a transformers-native checkpoint of the model.",
    source="transformers/dynamic_module_utils.py resolve_trust_remote_code")
LOG803 = rule(
    "LOG803", "error", "LoRA target modules not in the model",
    what="peft found none of the LoRA target module names in the model.",
    why="Target names are per architecture: q_proj/v_proj (Llama, Qwen2, Mistral) do not exist in ChatGLM "
        "(query_key_value), Baichuan (W_pack), InternLM2 (wqkv) or Qwen v1 (c_attn).",
    fix="Set the targets to the model's own linear names (`dsdoctor estimate --model MODEL --method lora` lists them; "
        "or peft's target_modules='all-linear').",
    source="peft/tuners/tuners_utils.py inject_adapter; https://github.com/hiyouga/LlamaFactory/issues/590")
LOG804 = rule(
    "LOG804", "error", "the fine-tuning script refuses ZeRO-3 with LoRA on a base model",
    what="Qwen's finetune.py stops: with LoRA on a base (not chat) model it also trains the embeddings and output "
         "layer (modules_to_save), which ZeRO-3 cannot combine with LoRA there.",
    why="The script's own guard, before any training.",
    fix="Use a ZeRO-2 config for LoRA on a base model, or fine-tune the chat model (no modules_to_save).",
    source="https://github.com/QwenLM/Qwen/issues/1161 (finetune.py)")

LOG805 = rule(
    "LOG805", "error", "a Python error dsdoctor has no rule for",
    what="The first failure in the log is a Python exception that none of explain's signatures names.",
    why="The lines after it (other ranks' connection errors, watchdog timeouts, the launcher's exit codes) follow "
        "from it: they are not the cause.",
    fix="Read the traceback that ends at the line in the evidence, on that rank: its last frames name the code that "
        "raised it (the data pipeline, the model's code, the training script).",
    source="dsdoctor explain (the last line of a traceback)")
LOG806 = rule(
    "LOG806", "error", "a rank failed, and its error is not in this log",
    what="The launcher reports a rank that exited with an error code, and the log holds no error of that rank.",
    why="The rank's own output went elsewhere (DeepSpeed's launcher with each rank's log in a file; torchrun without "
        "--tee, or a traceback torchrun could not record).",
    fix="If the paste starts at torchrun's or the launcher's summary, the rank's traceback is above it in the same "
        "output: give the log from its first 'Traceback'. Otherwise keep every rank's output: `deepspeed "
        "--enable_each_rank_log DIR ...` then `dsdoctor explain DIR/*.log` "
        "(each file's rank from its name); `torchrun --tee 3 ...` (rank prefixes) or `torchrun --log-dir DIR "
        "--redirects 3 ...` then `dsdoctor explain DIR/*/attempt_*/*/std*.log`; or decorate main with "
        "torch.distributed.elastic.multiprocessing.errors.record so the traceback lands in torchrun's summary.",
    source="deepspeed/launcher/launch.py (sigkill_handler); torch/distributed/elastic/multiprocessing/errors")

LOG807 = rule(
    "LOG807", "error", "the run was stopped from outside (a signal), not by an error of its own",
    what="The launcher or the ranks got a stop signal (SIGTERM, SIGINT: a Ctrl-C, a `timeout`, dsdoctor smoke's "
         "--timeout, the job scheduler's time limit or a preemption) and no failure of the run itself came before it.",
    why="The signal is not the cause: the question is why the run had not finished when it came. The ranks' last lines "
        "before it say where they were (a hang at start-up, in an op build, in a collective; or only slow).",
    fix="Look at what the ranks were doing when the signal came (in the evidence). Silent ranks at start-up: an op "
        "build waiting on a stale lock (`dsdoctor env`), a rendezvous that never completes (`dsdoctor nccl`). Ranks "
        "still training: the run was only slow, give it more time.",
    source="torch/distributed/elastic/multiprocessing/api.py (SignalException, _terminate_process_handler); "
           "deepspeed/launcher/launch.py (sigkill_handler)")
LOG808 = rule(
    "LOG808", "error", "a package the run imports is not installed, incomplete, or shadowed by a local file",
    what="The run failed importing a package other than torch and DeepSpeed (ENV301, ENV309): not installed in the "
         "Python the launcher started (flash-attn, peft, bitsandbytes, a model's remote-code imports), DeepSpeed "
         "installed without a module it needs, or a file or folder of the user's with the package's name imported "
         "instead of it.",
    why="Python imports the first match on sys.path: the script's own folder comes first, so a `deepspeed.py` or a "
        "clone named `peft/` there hides the installed package; a package absent from the job's environment (a venv "
        "or conda env not activated on that node) fails at its first import.",
    fix="Install it in the environment the launcher starts (the pip command is in the finding), or rename the local "
        "file or folder that shadows it.",
    example="ModuleNotFoundError: No module named 'flash_attn'; ModuleNotFoundError: No module named "
            "'deepspeed.launcher'; 'deepspeed' is not a package",
    source="importlib._bootstrap (_find_and_load_unlocked); transformers/dynamic_module_utils.py check_imports")
LOG809 = rule(
    "LOG809", "error", "a library's own error message, which no dsdoctor rule names yet",
    what="The log's failure is a message that DeepSpeed, transformers, peft, accelerate, PyTorch or NCCL prints from "
         "its own source (dsdoctor's message catalogue, mined from those packages' code), and no explain rule names "
         "its cause.",
    why="The message's origin (the package, the file and function that raise or print it, and the versions it is in) "
        "is where its cause is: the condition in that code is what the run violated.",
    fix="Read the condition around the file and function in the evidence, in the version you run; search that "
        "message in the package's issue tracker.",
    source="dsdoctor/messages (python -m dsdoctor.messages.generate)")
LOG810 = rule(
    "LOG810", "error", "the log shows a failure dsdoctor cannot name (inconclusive)",
    what="The log holds a traceback, an error or fatal line, a FAILED or a non-zero exit, but none of explain's "
         "signatures and no message of the catalogue names it.",
    why="A failed run is never reported as clean: the lines in the evidence are the failure, or lead to it. The log "
        "may be cut before the failure's own message (a pasted tail, a wrapped line).",
    fix="Give the whole log of every rank (`deepspeed --enable_each_rank_log DIR`, torchrun's --log-dir), with the "
        "lines before the first error.",
    source="dsdoctor explain")
LOG811 = rule(
    "LOG811", "warning", "a library's own warning, in a log that shows no failure",
    what="The log shows no failure, but a line of it is a warning that DeepSpeed, transformers, peft, accelerate, "
         "PyTorch, NCCL or a training tool (LLaMA-Factory, axolotl, ms-swift, TRL, OpenRLHF) prints from its own "
         "source (dsdoctor's message catalogue), and no rule names it.",
    why="A warning is where a run that 'worked' can go wrong without an error: the launcher dropping "
        "CUDA_VISIBLE_DEVICES, a setting ignored, a fallback taken. The origin (package, file, function, versions) is "
        "where its condition is.",
    fix="Read the condition around the file and function in the evidence, in the version you run; if it is not what "
        "you meant, change the setting it names.",
    source="dsdoctor/messages (python -m dsdoctor.messages.generate)")
LOG812 = rule(
    "LOG812", "error", "a ZeRO-3 partitioned weight was used outside DeepSpeed's forward",
    what="An op received a weight of shape [0]: under ZeRO-3 every partitioned parameter is an empty placeholder "
         "until DeepSpeed's forward hooks gather it ('weight' must be 2-D from the embedding).",
    why="The model ran outside the engine that gathers its weights: one plain process with a ZeRO-3 config (started "
        "with python instead of deepspeed or torchrun, so the config's zero.Init partitioned but no engine wraps the "
        "model), the model called before deepspeed.initialize, or generation and evaluation on the bare module.",
    fix="Start every rank with the deepspeed launcher or torchrun (also on one GPU), call the model only through the "
        "engine that deepspeed.initialize (or the Trainer) returns, and gather weights used outside forward with "
        "deepspeed.zero.GatheredParameters; on one GPU, ZeRO-2 needs none of this.",
    source="deepspeed/runtime/zero/partition_parameters.py (the placeholder: param.data = torch.empty(0)); "
           "torch/nn/functional.py embedding")

