"""``dsdoctor estimate``: per-GPU memory of a DeepSpeed fine-tuning run, before the run.

The arithmetic is :mod:`dsdoctor.checks.memory`; this module resolves the model and the setup (flags, or a
ds_config), the GPU (``--gpu-mem``, ``--gpu NAME``, NVML, or the common cards side by side), and builds the report:
the breakdown at each moment of a step, host RAM, whether it fits and the largest micro batch that does, the setups
that fit ranked by estimated step time (:func:`search`), the ZeRO stages side by side (``--compare``) and
DeepSpeed's and accelerate's estimators beside ours.

A registry model never imports torch; ``--model PATH`` of an architecture transformers implements may be counted on
the meta device (:mod:`dsdoctor.meta_count`).
"""

from __future__ import annotations

import click

from dsdoctor.cli import FiniteFloat, report_command
from dsdoctor.report import Report

from .inputs import Count, build_setup  # noqa: F401 (build_setup: the benchmarks and tests build setups with it)
from .report import run_estimate


@click.command("estimate")
@click.option("--model", required=True, metavar="NAME|PATH",
              help="A registry name (chatglm-6b, qwen2.5-7b, llama-2-7b, ...: an unknown name lists the closest; README lists all) or a "
                   "local model directory / config.json.")
@click.option("--zero", type=click.IntRange(0, 3), default=2, show_default=True, help="ZeRO stage.")
@click.option("--offload-optimizer", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--offload-param", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--method", type=click.Choice(["full", "lora", "freeze", "ptuning"]), default="full",
              show_default=True)
@click.option("--lora-r", type=Count(1, 65536), default=8, show_default=True)
@click.option("--lora-targets", default=None,
              help="Comma-separated module names (default: peft's for the model type, else the attention "
                   "projections the reference trainer falls back to, which the report then names).")
@click.option("--lora-dropout", type=FiniteFloat(min=0, max=1), default=0.05, show_default=True)
@click.option("--freeze-last", type=Count(0, 100_000), default=2, show_default=True,
              help="freeze: the last N layers train.")
@click.option("--prefix-tokens", type=Count(1, 1_000_000), default=16, show_default=True,
              help="ptuning: virtual tokens.")
@click.option("--gpus", type=Count(1, 1024), default=None,
              help="GPUs per node (default: the GPUs NVML sees, else 1, reported as assumed).")
@click.option("--nodes", type=Count(1, 100_000), default=1, show_default=True)
@click.option("--micro-batch", type=Count(1, 1_000_000), default=1, show_default=True,
              help="train_micro_batch_size_per_gpu.")
@click.option("--grad-accum", type=Count(1, 1_000_000), default=1, show_default=True,
              help="gradient_accumulation_steps (kept with the micro batch when changes are proposed).")
@click.option("--seq-len", type=Count(1, 10_000_000), default=1024, show_default=True)
@click.option("--grad-ckpt/--no-grad-ckpt", default=None,
              help="Gradient checkpointing (default: on, except for ptuning, which peft refuses with it: as the "
                   "reference trainer and smoke do).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--deepspeed", default=None, metavar="ds_config.json",
              help="Take stage, offload, batch, precision and bucket sizes from this config.")
@click.option("--gpu", default=None, metavar="NAME",
              help="The GPU as nvidia-smi names it (\"NVIDIA A100-SXM4-80GB\", RTX 4090): its memory and capability.")
@click.option("--gpu-cc", default=None, metavar="X.Y", help="Compute capability, with a --gpu the table lacks.")
@click.option("--gpu-mem", default=None, metavar="GiB|auto", help="Memory per GPU (default: --gpu, else NVML).")
@click.option("--host-mem", type=FiniteFloat(min=0, min_open=True, max=1_000_000), default=None, metavar="GiB",
              help="Host RAM per node (offload check).")
@click.option("--compare", is_flag=True, help="Show ZeRO stages 0 to 3 side by side.")
@click.option("--launch", type=click.Choice(["engine", "engine-loss", "trainer"]), default="engine",
              show_default=True,
              help="The training loop: DeepSpeed's engine loop as the tutorials write it (`outputs = engine(...)` "
                   "keeps the logits through backward), that loop keeping only the loss (`loss = "
                   "engine(...).loss`, as dsdoctor smoke's reference trainer), or the HF Trainer.")
@click.option("--attn", type=click.Choice(["sdpa", "eager", "flash"]), default=None,
              help="The attention implementation the run uses (default: what the installed transformers picks for "
                   "the model: SDPA where the class supports it, else eager, which keeps the s x s scores).")
@click.option("--replay", is_flag=True,
              help="Run the step's tensors on the meta device and replay their allocations through a model of "
                   "PyTorch's caching allocator: the reserved peak nvidia-smi shows, for ZeRO-0 to 3 with "
                   "or without CPU offload (seconds; imports torch and transformers).")
@report_command(inputs=("model", "deepspeed"))
def estimate(model, zero, offload_optimizer, offload_param, method, lora_r, lora_targets, lora_dropout, freeze_last,
             prefix_tokens, gpus, nodes, micro_batch, grad_accum, seq_len, grad_ckpt, precision, deepspeed, gpu, gpu_cc,
             gpu_mem, host_mem, compare, launch, attn, replay) -> Report:
    """Per-GPU memory of a DeepSpeed fine-tuning run: model states by ZeRO stage, activations, logits, buffers,
    allocator and CUDA context, against the GPU's memory; what fits, and the fastest setups that do."""
    ctx = click.get_current_context()
    if grad_ckpt is None:  # our default must not make an error of the user's method (MEM507)
        grad_ckpt = method != "ptuning"
    explicit = {name for name in ("zero", "offload_optimizer", "offload_param", "micro_batch", "precision",
                                  "grad_accum", "lora_r", "lora_targets", "lora_dropout", "freeze_last",
                                  "prefix_tokens")
                if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    return run_estimate(model, zero, offload_optimizer, offload_param, method, lora_r, lora_targets, lora_dropout,
                        freeze_last, prefix_tokens, gpus, nodes, micro_batch, seq_len, grad_ckpt, precision,
                        deepspeed, gpu_mem, host_mem, compare, explicit, grad_accum=grad_accum, gpu=gpu, gpu_cc=gpu_cc,
                        launch=launch, attn=attn, replay=replay)
