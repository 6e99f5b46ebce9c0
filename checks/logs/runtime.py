"""The describers of :mod:`.signatures` for what fails in the ranks' own work: dtypes that clash, a CUDA kernel's or
native code's assertion, gradient checkpointing over a frozen base, an evaluation loss of NaN, the kernel's OOM
killer, ZeRO-3's placeholders and optimizer shards at load time, a DeepSpeed config path that is no file."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .evidence import _first_line, _where
from .lines import PYTHON_ERROR, Line

if TYPE_CHECKING:
    from .signatures import Match


#: a dtype's names in torch's messages: 'Half', 'c10::BFloat16', 'torch.float16', 'float', 'struct c10::Half'
HALF_NAMES = {"half": "fp16", "float16": "fp16", "bfloat16": "bf16"}


DTYPE_NAME = re.compile(r"(?:c10::|torch\.|struct c10::)?(?P<name>BFloat16|bfloat16|Half|float16|Float|float32|float|"
                        r"Double|double|float64)\b")


#: the DeepSpeed config a launch line names: --deepspeed PATH, its variable's assignment
DS_ARG = re.compile(r"--deepspeed[= ](?P<path>\S{1,300})")


ASSIGNED = r"^\s{0,8}(?:export\s{1,4})?%s=(?P<value>\S{1,300})"


def _config_not_found(match: Match, lines: list[Line]) -> tuple[str, str]:
    """PRE014: the --deepspeed value names no file from where the run started (HfDeepSpeedConfig then decodes it as
    base64, and fails on that or says so); ENV331 when what it received is the launcher's ``--local_rank=N`` (a script
    reading sys.argv[1] as its config under the deepspeed launcher)."""
    received = next((ln for ln in lines[match.line_index:match.line_index + 40] if "Received: --local_rank" in ln.text
                     and ln.rank == match.line.rank), None)
    if received is not None:
        return (_where(match) + received.text.strip()[:200] + " (the config DeepSpeed was given is the launcher's "
                "'--local_rank=N': the script takes its first argument for the config path, and the deepspeed launcher "
                "puts --local_rank=N before the script's own arguments)",
                "Read the config path with argparse (add `parser.add_argument('--local_rank', type=int, default=-1)` "
                "and a --deepspeed_config option) instead of sys.argv[1], or launch with torchrun, which passes "
                "LOCAL_RANK in the environment.", {"rule": "ENV331"})
    shown = ""
    for line in lines[:2000]:
        found = DS_ARG.search(line.text)
        if found:
            path = found.group("path").strip("'\"")
            var = re.fullmatch(r"\$\{?(\w{1,60})\}?", path)
            if var:  # the variable's value, where the log shows it
                value = next((m.group("value") for m in (re.search(ASSIGNED % re.escape(var.group(1)), ln.text)
                                                         for ln in lines[:2000]) if m), None)
                path = f"{path} = {value}" if value else path
            shown = f"; the launch gives --deepspeed {path}"
            break
    trainer = shown or any("HfDeepSpeedConfig" in ln.text or "hf_deepspeed_config" in ln.text or
                           "integrations/deepspeed.py" in ln.text for ln in lines[max(0, match.line_index - 60):
                                                                                   match.line_index])
    given = "the --deepspeed value" if trainer else "the config path given to DeepSpeed"
    reader = "HfDeepSpeedConfig" if trainer else "DeepSpeed"
    return (_where(match) + match.line.text.strip()[:240] + f" ({given} is not a file that exists from the directory "
            f"the run starts in, so {reader} took it for a base64-encoded config" + shown + ")",
            f"Give {'--deepspeed' if trainer else 'the config option'} a path that exists from the launch directory "
            "(`ls` it there: a typo, a relative path run from elsewhere, or a config the repository never shipped), "
            "or an absolute one.")


#: what a failed device-side condition of torch's kernels means, by the condition's text
ASSERT_MEANING = {
    "srcIndex < srcSelectDimSize": "an index past the rows of the tensor it selects from: in an embedding, a token id "
                                   "at or past the embedding's rows (a token added to the tokenizer without "
                                   "resize_token_embeddings, a pad id out of range, a tokenizer of another model)",
    "t >= 0 && t < n_classes": "a label outside the classes of the loss: a label id at or past the vocabulary (or a "
                               "negative one other than -100)",
}


def _device_assert(match: Match, lines: list[Line]) -> tuple:
    """A CUDA kernel of torch failed its device-side assertion (LOG810, no rule; its origin torch's kernel file)."""
    g = match.groups
    file = g.group("file")
    file = file[file.index("aten/"):]
    meaning = next((text for cond, text in ASSERT_MEANING.items() if cond in g.group("cond")), None)
    origin = {"package": "torch", "file": file, "function": g.group("kernel"), "line": int(g.group("line")),
              "code": "", "from": "mention"}
    return (_where(match) + f"torch's CUDA kernel {g.group('kernel')} ({file}:{g.group('line')}) failed its "
            f"assertion `{g.group('cond')}`" + (f": {meaning}" if meaning else ""),
            ("Compare the tokenizer's length with the model's embedding rows (len(tokenizer) against "
             "model.get_input_embeddings().weight.shape[0]) and call model.resize_token_embeddings(len(tokenizer)) "
             "after adding tokens; set pad_token to an existing token (eos). " if meaning and "token" in meaning else "")
            + "CUDA_LAUNCH_BLOCKING=1 makes the Python traceback point at the op; on the CPU the same op raises "
              "'index out of range in self' at once.",
            {"title": f"a CUDA kernel's assertion failed ({g.group('kernel')}, inconclusive)", "origin": origin})


#: a C++ function whose name says its package: deepspeed_io_handle_t::wait, c10::..., at::native::...
NATIVE_PACKAGE = re.compile(r"\b(?P<pkg>deepspeed|torch|c10|at|nccl)(?:_\w{0,60})?::")


def _native_assert(match: Match, lines: list[Line]) -> tuple:
    """A native assert() that failed (the process aborts: SIGABRT): LOG810 with its origin, the file the line names
    (a package's source, ``.../deepspeed/ops/csrc/aio/...``) or the package its function's name says."""
    from .origin import mentioned_origin

    g = match.groups
    func, cond = g.group("func") or g.group("func2"), g.group("cond") or g.group("cond2")
    origin = mentioned_origin(g.group("path")) if g.group("path") else None
    if origin is None:
        named = NATIVE_PACKAGE.search(func)
        if named:
            package = {"c10": "torch", "at": "torch"}.get(named.group("pkg"), named.group("pkg"))
            origin = {"package": package, "file": None, "function": func.strip()[-120:], "line": None,
                      "code": "", "from": "mention"}
    where = f"{origin['package']}'s " if origin else ""
    return (_where(match) + f"{where}native code failed its assertion `{cond}` in {func.strip()[-160:]}: the "
            f"process aborted (SIGABRT)",
            "An assertion in compiled code is a bug or a state the code did not expect: search the condition in the "
            "package's issue tracker and upgrade it (DeepSpeed's aio and swap ops have fixed several); the lines "
            "before it say which step ran.",
            {"title": "native code failed an assertion and aborted (inconclusive)", **({"origin": origin} if origin
                                                                                      else {})})


def _checkpoint_no_grad(match: Match, lines: list[Line]) -> tuple[str, str]:
    return (_where(match) + match.line.text.strip()[:200] + " (torch's reentrant checkpoint: the inputs of a "
            "checkpointed block need no grad, the frozen base's embedding output, so nothing in it, the LoRA layers "
            "included, gets a gradient)", "")


def _eval_nan(match: Match, lines: list[Line]) -> tuple[str, str]:
    train_nan = any(re.search(r"['\"]loss['\"]: '?nan\b", ln.text) for ln in lines[:200000])
    return (_where(match) + match.line.text.strip()[:200] + (" (the training loss is NaN too)" if train_nan else
            " (an evaluation batch whose every label is -100: samples truncated before their answer, or an answer "
            "template the collator cannot find, leave no token to score, and the mean over none is NaN)"),
            "Drop or shorten the samples whose answer starts past the sequence length (`dsdoctor data` counts them), "
            "or raise max_seq_length; with trl's DataCollatorForCompletionOnlyLM, check the response template is "
            "found in the tokenized eval samples.")


def _dtype_mismatch(match: Match, lines: list[Line]) -> tuple:
    """DS113 when the two dtypes torch names are fp16 and bf16 (the config's precision against the weights');
    a full-precision operand against a half one is a cast in the code (a layer or input upcast to fp32, autocast
    off), which no config setting explains: an unnamed error then, with its origin."""
    text = match.line.text
    names = {HALF_NAMES.get(m.group("name").lower(), "fp32/fp64") for m in DTYPE_NAME.finditer(text)}
    if names == {"fp16", "bf16"} or len(names) < 2:
        return _first_line(match, lines)
    return (_where(match) + text.strip()[:240] + " (a full-precision operand met a half-precision one: the weights "
            "are half (the config's fp16/bf16, or the checkpoint's dtype) and an input, a buffer or a layer stayed "
            "fp32, or the model's code casts one operand; no fp16/bf16 clash of config and weights)",
            "Cast the batch to the engine's dtype before the forward in your own loop (DeepSpeed halves the weights, "
            "not the inputs: `inputs.to(next(engine.parameters()).dtype)`), or find the cast in the frame the "
            "traceback ends in (a .float() or dtype=torch.float32 before a matmul) and cast back to the weight's "
            "dtype there; or run that op under torch.autocast.",
            {"rule": "LOG805", "title": "a matmul of an fp32 and a half-precision tensor"})


def _into_placeholders(match: Match, lines: list[Line]) -> tuple:
    return (_where(match) + match.line.text.strip()[:240] + " (the checkpoint's weight is whole, the model's is "
            "ZeRO-3's empty placeholder: the model was built partitioned, under zero.Init, and load_state_dict wrote "
            "past DeepSpeed's gathering)",
            "Load the weights while the model is built: from_pretrained(path) with the DeepSpeed config active "
            "(it loads each partition), not from_config followed by load_state_dict; or load them after "
            "deepspeed.initialize with engine.load_checkpoint, or inside deepspeed.zero.GatheredParameters(params, "
            "modifier_rank=0).")


def _missing_shard(match: Match, lines: list[Line]) -> tuple:
    """DS146 when DeepSpeed says the world sizes differ; a missing optimizer shard alone has two causes."""
    shard = match.groups.groupdict().get("shard")
    if not shard:
        return _first_line(match, lines)
    folder = shard.rsplit("/", 1)[0] if "/" in shard else "."
    return (_where(match) + match.line.text.strip()[:240] + " (DeepSpeed looks for this rank's optimizer shard: the "
            "checkpoint was saved by another world size, or holds no optimizer states at all: a converted or "
            "consolidated checkpoint, or one saved with save_only_model)",
            f"`ls {folder}`: no *_optim_states.pt at all means no optimizer states: load the weights only "
            "(engine.load_checkpoint(dir, load_module_only=True, load_optimizer_states=False, "
            "load_lr_scheduler_states=False); the Trainer: from_pretrained instead of resume_from_checkpoint). Fewer "
            "shards than ranks means another world size (DS146): resume with the saved world size, or make a "
            "universal checkpoint (ds_to_universal.py, then load_universal_checkpoint).",
            {"rule": "LOG810", "title": "this rank's ZeRO optimizer shard is missing (inconclusive: another world size, "
                                        "or a checkpoint without optimizer states)",
             # the shard's name is DeepSpeed's (engine.py _get_zero_ckpt_name), read by load_checkpoint
             "origin": {"package": "deepspeed", "file": "runtime/engine.py",
                        "function": "_get_all_zero_checkpoint_state_dicts", "line": None, "code": "",
                        "from": "mention"}})


def _kernel_oom(match: Match, lines: list[Line]) -> tuple[str, str]:
    g = match.groups
    rss = f", {int(g.group('rss')) * 1024 / 2 ** 30:.1f} GiB resident" if g.group("rss") else ""
    offload = any("offload" in line.text and ("cpu" in line.text or "nvme" in line.text) for line in lines[:20000])
    return (_where(match) + f"the kernel's out-of-memory killer killed process {g.group('pid')} "
            f"({g.group('comm')}{rss}): host RAM ran out" + ("; the config offloads to the CPU" if offload else ""),
            "Host RAM must hold what loading, offload and saving need on every rank at once (saving a ZeRO-3 "
            "model gathers it in host memory): `dsdoctor env --deepspeed ds_config.json --model MODEL` compares it "
            "with this host's; add RAM or swap, use fewer ranks per node, offload less, or load with "
            "low_cpu_mem_usage.")


#: DeepSpeed's load_checkpoint finding no ``latest`` file (runtime/engine.py): it returns (None, None) and warns
NO_LATEST = re.compile(r"Unable to find latest file at (?P<path>\S{1,300}?),? if trying to load latest checkpoint")


def none_from_missing_checkpoint(match: Match, lines: list[Line]) -> tuple[str, str, str] | None:
    """(evidence, fix, title) when ``match`` (a Python error) is an operation on None after DeepSpeed's
    load_checkpoint found no checkpoint ("Unable to find latest file at DIR/latest": it returns (None, None)), the
    warning before it being the cause; None otherwise."""
    if "NoneType" not in match.line.text:
        return None
    warned = next((ln for ln in reversed(lines[max(0, match.line_index - 400):match.line_index])
                   if "Unable to find latest file" in ln.text and ln.rank in (match.line.rank, None)
                   and NO_LATEST.search(ln.text)), None)
    if warned is None:
        return None
    path = NO_LATEST.search(warned.text).group("path")
    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    return (f"{match.line.text.strip()[:160]}: the code used what load_checkpoint returned after DeepSpeed found no "
            f"checkpoint ({warned.at}: no {path}; it returns (None, None))",
            f"Point load_checkpoint at the folder that holds the checkpoint (`ls {folder}`: a `latest` file and a "
            f"global_stepN/ folder), or pass tag='global_stepN'; on a first run, check the result before using it "
            f"(`path, state = engine.load_checkpoint(...)`; path is None when nothing was loaded).",
            "the checkpoint to resume from does not exist")


#: how a barrier ends when the rank it waits for died (not a timeout): the peer's connection gone
PEER_GONE = re.compile(r"reset by peer|Connection closed|Broken pipe|remote process exited|peer closed", re.I)
#: how a collective ends when its peers never come: a timeout, or the peers' connections gone
WAITED_OUT = re.compile(PEER_GONE.pattern + r"|Timeout|timed out|Watchdog caught", re.I)


def _traceback_error(match: Match, lines: list[Line], most: int = 80) -> str:
    """The exception line that ends the traceback ``match`` is a frame's line of (its rank's lines after it), or ""
    when the paste stops before it."""
    after = (ln.text.strip() for ln in lines[match.line_index + 1:match.line_index + most] if ln.rank == match.line.rank)
    return next((t for t in after if PYTHON_ERROR.match(t)), "")


def _main_process_first(match: Match, lines: list[Line]) -> tuple[str, str, dict]:
    """DATA707 from a traceback whose frame is at ``with ...main_process_first(...)`` (transformers' and accelerate's
    context manager: the other ranks wait in a barrier on entering while the main process runs the block, usually
    the dataset's tokenization): the ranks failed while waiting there, so the main process's work outlasted the
    collective timeout. When their error says the main process's connection went away instead, that rank died (its
    own error is the cause: LOG806)."""
    ended = _traceback_error(match, lines)
    evidence = _where(match) + match.line.text.strip()[:160]
    if ended and PEER_GONE.search(ended):
        return (evidence + f" (the ranks waiting at main_process_first's barrier lost the main process: {ended[:160]})",
                "The main process failed inside the `with main_process_first()` block (its own error, on rank 0, is "
                "the cause): give its log.", {"rule": "LOG806", "title": "a rank failed while the others waited at "
                                                                     "main_process_first's barrier"})
    return (evidence + " (the ranks failed waiting in main_process_first's barrier while the main process ran the "
                       "block, usually tokenizing the dataset" + (f": {ended[:160]}" if ended else ", their error "
                                                                   "not in the paste") + ")",
            "Tokenize once before the distributed run (datasets .map(...).save_to_disk, LLaMA-Factory's "
            "tokenized_path), use more workers (preprocessing_num_workers), or raise the timeout (TrainingArguments "
            "ddp_timeout, in seconds; accelerate's InitProcessGroupKwargs(timeout=...)). `dsdoctor data` measures the "
            "tokenization time against the timeout before launch.", {})


def _nothing_to_train(match: Match, lines: list[Line]) -> tuple[str, str]:
    """TRN609 from a run whose optimizer got no parameter (torch's "optimizer got an empty parameter list") or whose
    own count of trainable parameters is 0 before it failed."""
    return (_where(match) + match.line.text.strip()[:240] + " (no parameter of this rank requires a gradient: the "
            "optimizer is built from an empty list)",
            "Find what left nothing trainable before the optimizer is built: LoRA target_modules that match no module "
            "name of the model (print the model's named_modules), a freeze that froze every layer, a pipeline stage "
            "given no layer (more stages than layers, or a partition that leaves a stage empty), or parameters "
            "filtered with requires_grad before peft made the adapters. `dsdoctor smoke --model MODEL --method lora` "
            "counts the trainable parameters before launch.")



def _one_rank_save(match: Match, lines: list[Line]) -> tuple[str, str] | tuple[str, str, dict]:
    """TRN614 from a traceback whose frame stopped at the script's ``engine.save_checkpoint(...)`` (a consequence
    signature: reported only when no rank's own error explains the run) and whose error is a collective's
    timeout or a peer gone: the save waited for ranks that never called it. Otherwise the save failed for a reason
    the log does not name (LOG810)."""
    ended = _traceback_error(match, lines)
    evidence = _where(match) + match.line.text.strip()[:160]
    if ended and WAITED_OUT.search(ended):
        return evidence + f" (the save waited in a collective for ranks that did not call it: {ended[:160]})", ""
    return (evidence + (f" (the save failed: {ended[:160]})" if ended else " (the save failed; its error is not in the "
                        "paste)"), "", {"rule": "LOG810", "title": "save_checkpoint failed (inconclusive)"})


def _optimizer_param(match: Match, lines: list[Line]) -> tuple[str, str]:
    """DS118: the optimizer class DeepSpeed built refuses a key of the config's optimizer.params; the evidence names
    the parameters the installed class takes (its source, :func:`.imports.installed_parameters`: DeepSpeed's own
    optimizers where the catalogue's classes say, torch.optim's by module name)."""
    from dsdoctor.messages.catalogue import class_origin

    from .imports import installed_parameters

    cls, arg = match.groups.group("cls"), match.groups.group("arg")
    owner = class_origin(cls)
    taken = installed_parameters(owner["package"], owner["file"], cls) if owner else None
    if taken is None:
        taken = installed_parameters("torch", f"optim/{cls.lower()}.py", cls)
    names = sorted(taken - {"self", "params"}) if taken else []
    shown = f"; the installed {cls} takes {', '.join(names)}" if names else ""
    return (_where(match) + match.line.text.strip()[:200] + shown,
            f"Remove or rename {arg} in the config's optimizer.params" + (f" (one of {', '.join(names)})" if names
                                                                         else "") +
            ". `dsdoctor check ds_config.json` checks the keys against the class before launch.")

