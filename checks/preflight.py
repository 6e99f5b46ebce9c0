"""Preflight checks (``PRE0xx``): what a launch line itself gets wrong, and the one verdict of ``dsdoctor preflight``."""

from __future__ import annotations

from dsdoctor.rules import rule

PRE001 = rule(
    "PRE001", "ok", "Verdict",
    what="The one answer of `dsdoctor preflight`: GO (nothing found at warning or above), GO with warnings, or "
         "NO-GO (an error: the run would crash, or not fit, or train on nothing), with the fixes in the order "
         "that unblocks the run.",
    why="Five commands' findings are one decision before a run of a day.",
    fix="Fix the blocking findings first, in the order given; then rerun `dsdoctor preflight` with the same line.",
    source="dsdoctor's own sections: check, estimate, env, data")
PRE010 = rule(
    "PRE010", "info", "The run the launch line starts",
    what="What was read off the line, its files and the script's literal values: launcher, world size, nodes, "
         "the loop (Trainer or engine), model, method, micro batch, sequence length, DeepSpeed config.",
    why="Every later section uses these values; a wrong one here makes every verdict wrong.",
    fix="Where a value is wrong, give it: `--set key=value` (e.g. --set per_device_train_batch_size=2).",
    source="deepspeed/launcher/runner.py, torch/distributed/run.py, accelerate/commands/launch.py parsers")
PRE011 = rule(
    "PRE011", "error", "deepspeed --num_nodes > 1 without a hostfile",
    what="The deepspeed launcher is given --num_nodes above 1 and no hostfile exists (--hostfile, default "
         "/job/hostfile).",
    why="DeepSpeed refuses it before any rank starts: ValueError('Num nodes is >1 but no extra nodes available "
        "via hostfile'). The same line run on each node (--node_rank) does not make it multi-node.",
    fix="Write a hostfile (one `host slots=N` line per node) and launch once from the first node with "
        "--hostfile, or run torchrun on each node (--nnodes N --node_rank R --master_addr A).",
    source="deepspeed/launcher/runner.py main(); checked with DeepSpeed 0.19.8",
    example="deepspeed --num_nodes 2 --num_gpus 8 --node_rank 0 --master_addr 10.0.0.1 train.py")
PRE012 = rule(
    "PRE012", "error", "deepspeed --num_gpus/--num_nodes with --include/--exclude",
    what="The deepspeed launcher is given --num_gpus or --num_nodes together with --include or --exclude.",
    why="DeepSpeed refuses it: ValueError('Cannot specify num_nodes/gpus with include/exclude').",
    fix="Keep one: --include localhost:0,1 (which GPUs) or --num_gpus 2 (how many).",
    source="deepspeed/launcher/runner.py main(); checked with DeepSpeed 0.19.8")
PRE013 = rule(
    "PRE013", "warning", "CUDA_VISIBLE_DEVICES ignored by the deepspeed launcher",
    what="CUDA_VISIBLE_DEVICES is set while the deepspeed launcher gets --num_gpus, --num_nodes, --include or "
         "--exclude.",
    why="The launcher then ignores CUDA_VISIBLE_DEVICES and deletes it ('Detected VISIBLE_DEVICES=... but "
        "ignoring it'): the run takes GPUs 0..N-1, which may be another job's.",
    fix="Select the GPUs with --include localhost:2,3 instead (and drop CUDA_VISIBLE_DEVICES and --num_gpus).",
    source="deepspeed/launcher/runner.py main()")
PRE014 = rule(
    "PRE014", "error", "A file the run opens does not exist",
    what="The script, the tool's config, the DeepSpeed config or the hostfile that the line (or the script's own "
         "literal values) names is not where the launch will look: relative paths are opened from the directory "
         "the launch runs in.",
    why="The run fails when it opens the file, often after the model has loaded.",
    fix="Give the path from the directory you launch in (or an absolute path); `--workdir DIR` tells preflight "
        "where you launch from.",
    source="transformers TrainingArguments(deepspeed=...) and deepspeed.initialize(config=...) open the path as "
           "given")
PRE015 = rule(
    "PRE015", "info", "Arguments preflight did not read",
    what="Names on the line or in the tool's config that are neither one dsdoctor reads nor a TrainingArguments "
         "field nor a known key of the tool.",
    why="They are listed, not guessed: if one of them sets the batch, the sequence length or the model, the "
        "sections below did not see it.",
    fix="Give what one of them means with --set (e.g. --set per_device_train_batch_size=4), or ignore them if "
        "they change none of those.",
    source="dsdoctor/preflight/settings.py ALIASES")
PRE016 = rule(
    "PRE016", "warning", "python starts one process",
    what="The line runs the script with plain `python` on a machine with several GPUs.",
    why="One process trains on one GPU: the others stay idle, and DeepSpeed runs with world size 1.",
    fix="Launch with `deepspeed --num_gpus N script.py ...` or `torchrun --nproc_per_node N script.py ...`.",
    source="torch.distributed: a world of one process unless a launcher starts more")
PRE023 = rule(
    "PRE023", "warning", "No launcher sets the ranks: DeepSpeed looks for MPI",
    what="The run uses DeepSpeed and is started without a launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, "
         "MASTER_ADDR and MASTER_PORT (plain `python script.py`, a notebook, a single-process `accelerate launch` "
         "without its DeepSpeed plugin).",
    why="deepspeed.init_distributed (called by deepspeed.initialize and by the Trainer's DeepSpeed setup) falls back "
        "to MPI discovery when any of the five is missing: it imports mpi4py (`No module named 'mpi4py'`) and runs "
        "`hostname -I` (which GNU inetutils' hostname refuses), so the run fails before the model loads.",
    fix="Launch with `deepspeed --num_gpus N script.py`, `torchrun --nproc_per_node N script.py` or `accelerate launch "
        "--use_deepspeed ...`; for one process without a launcher, set RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "
        "MASTER_ADDR=127.0.0.1 MASTER_PORT=29500.",
    source="deepspeed/comm/comm.py init_distributed (required_env, auto_mpi_discovery) and mpi_discovery")
PRE020 = rule(
    "PRE020", "info", "Time to train",
    what="Optimizer steps (samples x epochs / global batch, or max_steps) times the step time: measured by "
         "--probe, else from a FLOPs model against the GPU's dense 16-bit peak and a measured MFU.",
    why="A run of a day is planned on this number.",
    fix="For a measured step time, add --probe (a short smoke on this machine).",
    source="FLOPs per token: 6N full, 4N + 2N_trainable adapters (Chowdhery et al. 2022, appendix B); "
           "recomputation +2N with gradient checkpointing")
PRE002 = rule(
    "PRE002", "warning", "A section of preflight could not run",
    what="check, estimate, env or the data audit could not run with what the line gives: no DeepSpeed config, "
         "no model, a world size that depends on GPUs this machine cannot see, a model estimate cannot count.",
    why="The verdict says nothing about what that section checks (the config, the memory, the data): it is "
        "inconclusive there, not clean.",
    fix="Give the missing value (--set key=value, --gpus N, --gpu NAME), or run the section's own command.",
    source="dsdoctor preflight")
PRE017 = rule(
    "PRE017", "warning", "The command ends before its options",
    what="In the script or paste, the line after the launch command starts with an option (--...): the line "
         "before it has no backslash at its end (or a comment line sits inside the continuation).",
    why="The shell ends the command at that line: every option below it is not passed (the run uses the "
        "script's defaults for them), and the shell then tries to run the options as a command of their own.",
    fix="End every line of the command but the last with a backslash, with nothing after it; move comments out "
        "of the command.",
    source="bash: a backslash-newline continues a command; LLaMA-Factory issue 3224 (a missing backslash after "
           "--mix_strategy)")
PRE018 = rule(
    "PRE018", "info", "DeepSpeed ops the config builds",
    what="The ops DeepSpeed compiles for this config's optimizer (FusedAdam, CPUAdam with optimizer offload, ...), "
         "as deepspeed/runtime/engine.py _configure_basic_optimizer chooses them.",
    why="A first JIT build needs nvcc, a compiler and the CUDA headers on every node, and takes minutes while the "
        "other ranks wait; a build that fails stops the run after the model has loaded.",
    fix="Build them now, before the run: `dsdoctor env --build-ops ds_config.json` (ENV3xx says what is missing).",
    source="deepspeed/runtime/engine.py _configure_basic_optimizer; deepspeed/ops/op_builder")
PRE019 = rule(
    "PRE019", "error", "A file the run reads is broken",
    what="The DeepSpeed config or the tool's config does not parse (truncated JSON, not a mapping, a directory, "
         "binary), the training script is not valid Python here, or the model directory cannot be read (its "
         "config.json broken or missing, a model_type the installed transformers does not know).",
    why="The run stops when it reads it: DeepSpeed at initialize (after the model has loaded), Python at once.",
    fix="Fix the file at the line shown (python -m json.tool ds_config.json; python -m py_compile train.py).",
    source="json.loads / yaml.safe_load as DeepSpeed and HfArgumentParser read them; ast.parse; transformers "
           "AutoConfig.from_pretrained")
PRE022 = rule(
    "PRE022", "warning", "Two micro batches: the line's and the DeepSpeed config's differ",
    what="An engine loop (the script calls deepspeed.initialize with the config file) whose line or script sets a "
         "micro batch (per_device_train_batch_size, micro_batch_size) other than the config's "
         "train_micro_batch_size_per_gpu.",
    why="DeepSpeed's engine takes the config's value for its batch arithmetic (train_batch_size, the steps its "
        "scheduler counts, the loss averaging over gradient_accumulation_steps), while the script's DataLoader may "
        "batch by the line's: each step then holds another number of samples than DeepSpeed counts, and the memory "
        "follows the DataLoader's.",
    fix="Use one value: write the line's into the config before deepspeed.initialize "
        "(ds_config['train_micro_batch_size_per_gpu'] = args.per_device_train_batch_size, as DeepSpeedExamples' "
        "get_train_ds_config does), or drop the option.",
    source="deepspeed/runtime/config.py (_set_batch_related_parameters); DeepSpeedExamples "
           "applications/DeepSpeed-Chat dschat/utils/ds_utils.py")
PRE021 = rule(
    "PRE021", "error", "The script's argparse refuses an argument of the line",
    what="An argument on the line has a value that the script's own add_argument(type=int|float, choices=...) "
         "cannot take: `--max_len abc` for type=int, a value outside choices.",
    why="argparse exits with status 2 before anything else runs ('argument --max_len: invalid int value'); on 8 "
        "ranks, each prints it and the launcher reports the ranks failed.",
    fix="Give the value the script declares (the add_argument line in the evidence).",
    source="argparse.ArgumentParser._get_value (type conversion) and _check_value (choices)")
