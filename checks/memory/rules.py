"""The MEM5xx rules."""

from __future__ import annotations

from dsdoctor.rules import rule

# --- rules --------------------------------------------------------------------------------------------------------

MEM501 = rule(
    "MEM501", "error", "estimated peak exceeds GPU memory",
    what="The estimated per-GPU peak (what nvidia-smi would show) is above the GPU's memory.",
    why="The run would stop with CUDA out of memory, usually at the first backward pass or the first optimizer "
        "step, after the model has loaded.",
    fix="Apply the first change of the 'what to change' list (gradient checkpointing, a higher ZeRO stage, "
        "optimizer offload, a smaller micro batch with more gradient accumulation).",
    source="ZeRO paper section 3; Korthikanti et al. 2022 section 4; calibrated on an H200 "
           "(benchmarks/results/memory-accuracy/)")
MEM502 = rule(
    "MEM502", "warning", "within 8% of the GPU's memory",
    what="The estimate is within 8% of the GPU's memory, below or above it: within the estimate's own error, so "
         "the run may or may not fit.",
    why="Near the limit the caching allocator's fragmentation decides: on an H200, runs estimated at 94% and 98% of "
        "the card ran out of memory. Longer samples or another process on the GPU can tip it over too.",
    fix="Keep some margin: a smaller micro batch with more gradient accumulation, or gradient checkpointing.",
    source="dsdoctor estimate against NVML on an H200 (benchmarks/results/memory-loops/calibration-fit.txt)")
MEM503 = rule(
    "MEM503", "info", "offload is not needed",
    what="The run fits on the GPU without the configured CPU/NVMe offload.",
    why="Offload moves the optimizer step to the CPU and adds PCIe traffic every step: often 1.5-3x slower.",
    fix='Drop "offload_optimizer"/"offload_param" (or set "device": "none").',
    source="ZeRO-Offload (Ren et al. 2021) section 6; deepspeed/runtime/zero/stage_1_and_2.py cpu_offload")
MEM504 = rule(
    "MEM504", "warning", "needs more host RAM than this node has",
    what="Loading the model on every rank plus the pinned memory offload needs per node is above this node's RAM.",
    why="The kernel's OOM killer ends the process (the launcher reports exit code -9) while the model loads or "
        "when the offloaded states are allocated, with no Python error.",
    fix="Offload fewer states (offload_optimizer only), NVMe offload, more nodes, fewer ranks per node, or load "
        "the model under ZeRO-3's zero.Init.",
    source="deepspeed/runtime/zero/stage_1_and_2.py (pinned fp32 partitions); seen on an H200 host with 128 GiB: a 7B "
           "full fine-tune with ZeRO-2 optimizer offload was killed")
MEM505 = rule(
    "MEM505", "warning", "sequence longer than the model's context",
    what="--seq-len is above the model's max_position_embeddings / seq_length.",
    why="Positions past the trained context give poor results (and some models refuse them).",
    fix="Use a --seq-len within the model's context, or a long-context variant of the model.",
    source="the model's config.json")
MEM506 = rule(
    "MEM506", "info", "the logits dominate the peak",
    what="The loss's logits (micro batch x sequence x vocabulary, in fp32 copies) are over a third of the peak.",
    why="Large vocabularies (130k-150k for ChatGLM, Qwen, GLM-4) make the logits, not the weights, the "
        "limit; gradient checkpointing does not reduce them.",
    fix="A smaller micro batch with more gradient accumulation, or shorter sequences.",
    source="transformers loss/loss_utils.py ForCausalLMLoss (logits.float() before cross_entropy)")
MEM507 = rule(
    "MEM507", "error", "P-Tuning (prefix tuning) with gradient checkpointing",
    what="--method ptuning together with gradient checkpointing.",
    why="The run fails at the first forward. peft refuses it ('PREFIX_TUNING does not work with gradient "
        "checkpointing') when checkpointing is on before get_peft_model. When it is turned on after, transformers' "
        "attention mask leaves out the virtual tokens and SDPA fails instead: 'The expanded size of the tensor "
        "(2048) must match the existing size (2064)', with 16 virtual tokens at sequence 2048.",
    fix="Use --no-grad-ckpt with ptuning (and budget the activations), or LoRA.",
    source="peft/peft_model.py (PeftModel refuses prefix tuning under gradient checkpointing), seen with peft 0.21; "
           "the SDPA error seen on an H200 with Qwen3-8B (benchmarks/results/memory-loops/points-r7)")
MEM508 = rule(
    "MEM508", "warning", "world size assumed",
    what="Neither --gpus nor NVML gave the number of GPUs, so the estimate is for the world size it states (1 GPU "
         "per node unless --gpus says otherwise).",
    why="ZeRO partitions the model states over the world size: the per-GPU memory (and whether it fits) on the "
        "machine that will train can be several times smaller or larger than the figure shown.",
    fix="Give --gpus N (and --nodes M) of the machine that will train.",
    source="ZeRO paper section 3 (model states / N); dsdoctor estimate (issue 12)")
MEM509 = rule(
    "MEM509", "warning", "the training loop keeps the logits through backward",
    what="In the DeepSpeed engine loop `outputs = engine(**batch); engine.backward(outputs.loss)`, `outputs` holds "
         "the logits (micro batch x sequence x vocabulary, 16-bit) until the next forward returns; here they cost "
         "more than 1 GiB per GPU.",
    why="The HuggingFace Trainer keeps only the loss. With a 150k vocabulary at micro batch 8 and sequence 2048 the "
        "held logits are 4.6 GiB, enough to turn a fit into an out-of-memory error.",
    fix="Keep only the loss: `loss = engine(**batch).loss; engine.backward(loss)` (or `del outputs` before "
        "engine.backward), then estimate with --launch engine-loss. If you launch with the Trainer, give --launch "
        "trainer.",
    source="transformers modeling_outputs.py CausalLMOutputWithPast; trainer.py training_step; measured on an H200 "
           "(issue 13)")
MEM510 = rule(
    "MEM510", "warning", "peft has no default LoRA targets for this architecture",
    what="--method lora without --lora-targets, for a model type whose LoRA targets peft does not know "
         "(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has no entry), so the count takes the reference "
         "trainer's fallback targets, named in the evidence (q_proj,v_proj where the model has them; Phi-3's "
         "qkv_proj).",
    why="A LoraConfig without target_modules raises at get_peft_model for this model type: 'Please specify "
        "`target_modules` or `target_parameters` in `peft_config`'. The run stops before training, and the "
        "trainable count (and the memory) depends on the targets your LoraConfig gives.",
    fix="Give target_modules in your LoraConfig (for example the attention projections, or 'all-linear'), and the "
        "same to --lora-targets.",
    source="peft/tuners/lora/model.py _prepare_adapter_config; peft/utils/constants.py; seen with Qwen1.5-MoE "
           "(qwen2_moe) on an H200 (benchmarks/results/memory-loops/points-r7)")
MEM511 = rule(
    "MEM511", "info", "does not fit on the smaller common cards",
    what="No GPU was seen or given, so the estimate is shown for common cards side by side; it fits some of them "
         "as configured and not the smaller ones.",
    why="Whether the run fits depends on the card it will train on, which dsdoctor was not told: not a fault of the "
        "setup, but on a smaller card it stops with CUDA out of memory after the model has loaded.",
    fix="Give --gpu NAME (as nvidia-smi names it) or --gpu-mem GiB of the card that will train; for a smaller card "
        "the table gives the fastest setup that fits it.",
    source="dsdoctor estimate (the common-cards table); NVML's memory totals of each card")
MEM512 = rule(
    "MEM512", "warning", "fits only if the cached blocks do not fragment",
    what="--replay: the bytes the run allocates at once stay more than 8% below the GPU's memory, but the replayed "
         "caching allocator runs out of memory: after releasing its free segments it has no block left of the size "
         "a request asks for.",
    why="Whether the real run fits then depends on the order in which it frees memory, which the replay does not "
        "know to the byte: on an H200, Qwen3-14B LoRA at micro batch 18 (115 GiB allocated at most) trained at 94% "
        "of the card where its replay ran out of memory at the third backward.",
    fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in every rank's environment (segments that grow, so "
        "freed memory serves a request of any size), or a smaller micro batch with more gradient accumulation.",
    source="c10/cuda/CUDACachingAllocator.cpp (release_cached_blocks before an out-of-memory; expandable_segments); "
           "benchmarks/results/memory-loops/README.md, round 11")
MEM513 = rule(
    "MEM513", "warning", "the model's weights are quantized: counted at 16 bits",
    what="config.json has a quantization_config (bitsandbytes 4/8-bit, FP8, AWQ, GPTQ): the weights load in fewer "
         "bits than the 16 the estimate counts for them.",
    why="dsdoctor estimates 16-bit weights (what DeepSpeed's engine holds after its bf16/fp16 cast); a quantized "
        "checkpoint loaded as quantized (QLoRA) holds its linear layers in 4 or 8 bits plus their scales, so the "
        "weights take up to 4x less; ZeRO-3 does not partition bitsandbytes' 4-bit weights. The estimate is then an "
        "upper bound for the weights, and the other terms are unchanged.",
    fix="Read the weights' term as an upper bound (the evidence gives the quantized size). To train in 16 bits from "
        "this checkpoint, load it with the quantization removed (a 16-bit copy of the model); for QLoRA use ZeRO-2 "
        "or none (ZeRO-3 with 4-bit bitsandbytes needs bnb_4bit_quant_storage set to the compute dtype).",
    source="transformers' quantizers (quantization_config in config.json); peft's QLoRA with DeepSpeed "
           "documentation (bnb_4bit_quant_storage)")
MEM500 = rule(
    "MEM500", "ok", "fits",
    what="The estimated peak fits the GPU with headroom.",
    why="", fix="", source="dsdoctor estimate")
