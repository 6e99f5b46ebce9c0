"""Per-GPU memory of a DeepSpeed fine-tuning run, term by term, and the MEM5xx rules on it.

Pure arithmetic (no torch, no DeepSpeed import). Every term is bytes per GPU. The peak is the largest of three
moments of a training step, after the first optimizer step has created the optimizer states:

- ``loss``: the forward pass is done and the loss backward starts: all saved activations and the logits'
  float copies are alive, gradients are not yet produced;
- ``backward``: the end of the backward pass: every gradient (or its partition) exists, plus the recompute
  working set of one layer when gradient checkpointing is on;
- ``step``: the optimizer step: gradients plus the fp32 gradient copies DeepSpeed makes for the update.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, section 3: 2Ψ 16-bit weights, 2Ψ 16-bit gradients,
12Ψ Adam states with fp32 master weights and two moments), counted over the trainable parameters only; frozen
weights are 2Ψ and partitioned only by ZeRO-3. Activations follow Korthikanti et al. 2022 (section 4.1), rewritten
per saved tensor for the architectures we cover (see :func:`activation_bytes_per_token`). The constants that only
a GPU can tell (CUDA context, allocator slack, the loss's working copies) are in :data:`CALIBRATION`, each with
the measurements it came from.

To rank what could be changed when a setup does not fit, :func:`step_time` estimates the seconds of a step (compute,
recomputation, collectives, PCIe copies of offload, the CPU's Adam step) and :func:`search` goes through every
stage, offload, checkpointing and micro batch that keeps the global batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from dsdoctor.checks.zero3 import gathered_at_loss
from dsdoctor.rules import rule

if TYPE_CHECKING:  # annotations only: `check` imports this module for communication_buffer_bytes
    from dsdoctor.models import Arch

GIB = 2 ** 30


@dataclass(frozen=True)
class Calibration:
    """The constants only a GPU can tell, fitted on real runs on an H200 (torch 2.11 + CUDA 13, DeepSpeed 0.19.8):
    ``benchmarks/memory_loops.py`` (the tutorials' engine loop, that loop keeping only the loss, and the HF Trainer,
    NVML polled over the whole run). ``benchmarks/fit_calibration.py`` fits the slack on rounds 2-6 (75 points that
    trained) and reports the held-out ones apart: rounds 7-10 (26, median 2.4%, max 7.2%) and round 1 of
    ``benchmarks/memory_accuracy.py`` (32, another harness) (``benchmarks/results/memory-loops/calibration-fit.txt``).
    Bytes unless said otherwise.

    - ``cuda_context_bytes``: NVML "used" minus the caching allocator's reserved bytes in a DeepSpeed engine loop
      at ZeRO-0 to 2: the CUDA context, cuBLAS workspaces and NCCL's buffers (1.29-1.30 GiB on every such run);
    - ``cuda_context_zero3_bytes``: the same under ZeRO-3 (1.67-1.68 GiB on every ZeRO-3 run);
    - ``cuda_context_trainer_bytes``: the same under the HF Trainer, at every stage (1.68 GiB: accelerate's own
      CUDA state);
    - ``slack_<feature>``: the caching allocator's slack (reserved minus peak allocated) is the sum of these
      coefficients times :func:`slack_features` (least squares on the fit points that did not run out of memory);
    - ``offload_gpu_bytes``: what ZeRO-Offload keeps allocated on the GPU beside the 16-bit weights (0.5 GiB on the
      first offload run).
    """

    cuda_context_bytes: int = int(1.30 * GIB)
    cuda_context_zero3_bytes: int = int(1.68 * GIB)
    cuda_context_trainer_bytes: int = int(1.68 * GIB)
    slack_base: float = 1.650 * GIB
    slack_logits: float = 0.450
    slack_held_logits: float = 0.582
    slack_moments: float = 0.338
    slack_offload: float = 0.911
    slack_param_offload: float = 0.754
    offload_gpu_bytes: int = int(0.5 * GIB)


CALIBRATION = Calibration()

#: Bytes per logit element alive at the start of the backward pass: transformers' ``ForCausalLMLoss``
#: (``loss/loss_utils.py``) upcasts the 16-bit logits to fp32 and calls ``cross_entropy``; when the loss returns,
#: the 16-bit logits and the fp32 copy are free (the loss keeps neither), the log-softmax output (4 bytes) is saved,
#: and its backward adds the incoming and the outgoing gradient (4 + 4). Measured on the H200 to within 1%.
LOGITS_BYTES_PER_ELEMENT = 12

#: Host RAM per byte of offloaded state: DeepSpeed's own estimators use ``additional_buffer_factor=1.5``
#: (``estimate_zero2/3_model_states_mem_needs``); two real runs agree with it and not with 1.0: a 7B full fine-tune
#: with ZeRO-2 optimizer offload was killed on a 128 GiB host (shared/FACTS.md; 100 GiB of states x 1.5 plus the
#: loaded model exceeds it), and GLM-4-9B with ZeRO-3 offload of parameters and optimizer filled 252 GB
#: (LlamaFactory issue 4629; 158 GiB x 1.5 = 237 GiB plus the model).
HOST_BUFFER_FACTOR = 1.5

#: The allocated terms of every moment of a step, in report order.
ALLOCATED_TERMS = ("weights", "gradients", "optimizer_states", "optimizer_step", "activations", "checkpoint_recompute",
                   "logits_and_loss", "held_logits", "deepspeed_buffers")

#: Bytes per logit element that Gemma-2's final softcapping keeps for the backward: ``logits / cap``, ``tanh``,
#: ``* cap`` (``models/gemma2/modeling_gemma2.py`` Gemma2ForCausalLM.forward): tanh saves its 16-bit output.
SOFTCAP_BYTES_PER_ELEMENT = 2


def held_logits_bytes(setup: "Setup") -> int:
    """The 16-bit logits the training loop keeps alive through backward and the step, bytes per GPU: 0 under the
    HuggingFace Trainer (``Trainer.compute_loss`` returns the loss only, and ``training_step`` drops the outputs
    before ``accelerator.backward``), micro x seq x vocabulary x 2 bytes (4 in fp32) in the DeepSpeed engine loop as
    the tutorials write it: ``outputs = engine(**batch); engine.backward(outputs.loss); engine.step()``, where
    ``outputs`` (a ``CausalLMOutputWithPast``) holds ``logits`` until the next forward has returned. Measured on one
    H200 (issue 13: a Qwen3-8B shape, LoRA r=8, ZeRO-2, micro 2, seq 2048): 24.73 GiB peak allocated in that loop,
    23.57 GiB in the Trainer; the difference is exactly 2 x 2048 x 151,936 x 2 bytes."""
    if setup.launch != "engine":
        return 0
    return setup.micro_batch * setup.seq_len * setup.arch.vocab_size * (4 if setup.precision == "fp32" else 2)

#: Names of the attention output projection in the families of :mod:`dsdoctor.models`.
_ATTENTION_OUT = {"o_proj", "wo", "dense", "c_proj", "out_proj"}


@dataclass(frozen=True)
class Setup:
    """What is being estimated. Counts are elements, sizes bytes. ``gpus`` is per node; the data-parallel world
    size is ``gpus * nodes``. ``reduce_bucket_size`` etc. are DeepSpeed's element counts (its defaults,
    ``deepspeed/runtime/zero/config.py``). ``total_params`` includes the method's added parameters (LoRA
    matrices, the prefix encoder)."""

    arch: Arch
    total_params: int
    trainable_params: int
    method: str = "lora"
    zero_stage: int = 2
    offload_optimizer: str = "none"
    offload_param: str = "none"
    gpus: int = 1
    nodes: int = 1
    micro_batch: int = 1
    seq_len: int = 1024
    grad_ckpt: bool = True
    precision: str = "bf16"
    reduce_bucket_size: int = 500_000_000
    overlap_comm: bool | None = None
    contiguous_gradients: bool = True
    prefetch_bucket_size: int = 50_000_000
    max_live_parameters: int = 1_000_000_000
    max_reuse_distance: int = 1_000_000_000
    sub_group_size: int = 1_000_000_000
    lora_targets: tuple[str, ...] = ()
    lora_dropout: float = 0.05
    freeze_last: int = 2
    grad_accum: int = 1
    # the training loop: "engine" (DeepSpeed's engine loop as the tutorials write it: its outputs keep the logits),
    # "engine-loss" (that loop keeping only the loss: `loss = engine(**batch).loss`) or "trainer" (HF Trainer)
    launch: str = "engine"

    @property
    def world_size(self) -> int:
        return self.gpus * self.nodes

    @property
    def weight_bytes(self) -> int:
        """Bytes per weight element in the engine: DeepSpeed casts the module to 16 bits for fp16/bf16."""
        return 4 if self.precision == "fp32" else 2

    @property
    def overlap(self) -> bool:
        """DeepSpeed's default: ``overlap_comm`` is on for ZeRO-3 only (``zero/config.py``, overlap_comm_valid)."""
        return self.zero_stage == 3 if self.overlap_comm is None else self.overlap_comm

    @property
    def offloaded(self) -> bool:
        return self.offload_optimizer != "none" and self.zero_stage >= 1


@dataclass
class Estimate:
    """Per-GPU bytes by term, the three moments of a step, and host RAM per node.

    ``terms``: what is alive at the peak moment, plus the allocator's slack and the CUDA context (they sum to
    ``total``); ``phase_terms``: the allocated terms at each moment (``loss``, ``backward``, ``step``), so a term
    that is 0 at the peak (the activations, when the peak is the optimizer step) is seen where it is not;
    ``phases``: their sums."""

    terms: dict[str, int]
    phases: dict[str, int]
    peak_phase: str
    allocated: int
    reserved: int
    total: int
    host: dict[str, int]
    phase_terms: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def layer_activation_bytes_per_token(arch: Arch, setup: Setup, trainable: bool) -> int:
    """Saved activations of one decoder layer, bytes per token, with SDPA (flash or memory-efficient) attention.

    Korthikanti et al. 2022 (section 4.1) count sbh(34 + 5as/h) for a GPT layer with all weights trained. We count
    the tensors autograd really saves, which depend on what is trained: PyTorch saves a linear's input only when
    its weight needs a gradient, so a frozen layer keeps much less.

    - RMSNorm (transformers' ``LlamaRMSNorm``) saves its fp32 upcast (4h), and the normalised 16-bit tensor (2h)
      when its weight trains; LayerNorm its input (2h);
    - the input of each group of linears (the attention input, the MLP input, the MLP product) once, when one
      of them trains;
    - attention: q, k and v as SDPA saves them (2 q_dim + 2 x 2 kv_dim; k and v widened to q_dim when a mask
      stops SDPA's grouped-query path, as prefix tuning's does) and its output (2 q_dim, which ``o_proj`` reads
      without a copy);
    - a SwiGLU MLP saves the gate output, its activation and the up output (3 x 2I); a GeLU MLP the
      pre-activation (2I);
    - LoRA with dropout: each wrapped linear keeps its dropped input and the mask (3 in_features);
    - the attention's log-sum-exp (4 bytes per head).

    Measured on the H200 (no checkpointing): full fine-tuning of Qwen2.5-1.5B 103,900 bytes per token and layer
    against 103,424 here; LoRA on Llama-2-7B 156,400 against 156,160.
    """
    h, kv, inter = arch.hidden_size, arch.kv_dim, arch.intermediate_size
    q_dim = arch.attention_width
    names = [lin.name for lin in arch.linears]
    if any(lin.role for lin in arch.linears):  # read off transformers' model: each linear's role and input known
        inputs: dict[str, list[str]] = {}  # the linears reading one tensor save it once (GPT-J: attention and MLP)
        for lin in arch.linears:
            if lin.role in ("attn_in", "mlp_in"):
                inputs.setdefault(lin.reads or lin.role, []).append(lin.name)
        in_groups = list(inputs.values())
        mlp_outs = [lin.name for lin in arch.linears if lin.role == "mlp_out"]
    else:
        out_index = next((i for i, n in enumerate(names) if n in _ATTENTION_OUT), 1)
        attn_in, mlp_in, mlp_outs = names[:out_index], names[out_index + 1:-1], names[-1:]
        if arch.family == "gptj":  # parallel block: the MLP reads the same normalised input as the attention
            attn_in, mlp_in = attn_in + mlp_in, []
        in_groups = [g for g in (attn_in, mlp_in) if g]
    lora = setup.method == "lora"
    wrapped = set(setup.lora_targets) if lora else set()

    def is_wrapped(name: str) -> bool:
        return name in wrapped or name.split(".")[-1] in wrapped

    def group(members: list[str], width: int) -> int:
        saved = 2 * width if (trainable or (lora and setup.lora_dropout == 0 and any(map(is_wrapped, members)))) \
            else 0
        if lora and setup.lora_dropout > 0:
            saved += sum(3 * width for m in members if is_wrapped(m))
        return saved

    def norm_bytes(width: int) -> int:
        return 2 * width if arch.layer_norm else (6 * width if trainable else 4 * width)

    if arch.norm_widths is not None:
        norms = sum(norm_bytes(width) for width in arch.norm_widths)
    else:
        norms = norm_bytes(h) * (1 if arch.family == "gptj" else 2)
    kv_saved = q_dim if (setup.method == "ptuning" or arch.eager_attention) else kv
    attention = 4 * q_dim + 4 * kv_saved
    if arch.eager_attention:
        # transformers' eager_attention_forward (models/gemma2/modeling_gemma2.py): the fp32 softmax output and its
        # 16-bit copy (the second matmul's input) per head and key position, and tanh's output under softcapping
        attention += arch.num_heads * setup.seq_len * (4 + 2 + (2 if arch.attn_softcap else 0))
    else:
        attention += 4 * arch.num_heads  # SDPA's log-sum-exp
    mlp = (6 if arch.mlp_gated else 2) * inter
    if arch.experts:
        # per token, each of its top_k experts (transformers 5 fused *Experts.forward, e.g. qwen3_moe): the
        # gate/up output and the activation (6 I of a gated expert), the routing weight's product (2h); with the
        # experts trained, their input rows and the product before down_proj (2h + 2I); the router's fp32 softmax
        width = arch.expert_intermediate
        per_expert = (6 if arch.expert_gated else 2) * width + 2 * h + ((2 * h + 2 * width) if trainable else 0)
        mlp += arch.top_k * per_expert + 4 * arch.experts
    mlp_out_width = inter if inter else 0
    per_token = norms + sum(group(members, h) for members in in_groups) + attention + mlp \
        + (group(mlp_outs, mlp_out_width) if mlp_outs else 0)
    return per_token * (2 if setup.precision == "fp32" else 1)


def activation_bytes(setup: Setup) -> int:
    """Activations alive when the backward pass starts, per GPU, bytes.

    With gradient checkpointing (non-reentrant, as transformers enables it) each layer keeps only its input
    (2h per token); without, every layer through which a gradient flows keeps
    :func:`layer_activation_bytes_per_token`. Under ``freeze`` without checkpointing no gradient flows into
    the frozen layers below the trained ones, so they keep nothing.
    """
    arch, tokens = setup.arch, setup.micro_batch * setup.seq_len
    width = 4 if setup.precision == "fp32" else 2
    if setup.grad_ckpt:
        return arch.num_layers * width * arch.hidden_size * tokens
    if setup.method == "full":
        layers = [(arch.num_layers, True)]
    elif setup.method == "freeze":
        layers = [(setup.freeze_last, True)]
    else:
        layers = [(arch.num_layers, False)]
    return sum(n * layer_activation_bytes_per_token(arch, setup, trainable) * tokens for n, trainable in layers)


def communication_buffer_bytes(stage: int, world_size: int, element_bytes: int, reduce_bucket_size: int,
                               overlap_comm: bool, contiguous_gradients: bool = True, trainable: bool = True,
                               prefetch_bucket_size: int = 50_000_000, max_live_parameters: int = 1_000_000_000,
                               layer_params: int = 0, offload_optimizer: bool = False,
                               offload_param: bool = False, arch: "Arch | None" = None,
                               max_reuse_distance: int = 1_000_000_000, grad_ckpt: bool = True) -> dict[str, int]:
    """GPU bytes of DeepSpeed's communication buffers, by kind, as DeepSpeed 0.19.8 allocates them. Counts are
    elements (the ds_config's values), ``element_bytes`` the bytes of one gradient or weight element (2 for
    fp16/bf16, 4 for fp32: the model dtype, which is the reduction buffers' dtype unless ZeRO-1 accumulates in a
    separate ``data_types.grad_accum_dtype``).

    - ``reduce_buckets`` (ZeRO-1 and 2, alive during the backward pass): ``stage_1_and_2.py``
      ``DeepSpeedZeroOptimizer.setup_buckets`` (lines 3256-3280), called by ``process_gradients`` (line 2287) at
      the first gradient of every backward, whatever the world size: with ``contiguous_gradients`` (forced on by
      CPU offload, line 300) one buffer of ``reduce_bucket_size`` elements per communication dtype, and a second
      one with ``overlap_comm`` ("double buffers to avoid data access conflict"); ``_release_ipg_buffers``
      (line 924) frees them after the reduction;
    - ``reduce_bucket`` (ZeRO-3, kept from ``__init__`` on): ``stage3.py`` lines 779-784, one buffer of
      ``reduce_bucket_size`` elements per dtype when ``contiguous_gradients`` and something trains;
    - ``gathered_parameters`` (ZeRO-3 with N > 1 or parameter offload): the layer being computed plus what the
      prefetcher gathers ahead, ``stage3_prefetch_bucket_size``, up to ``stage3_max_live_parameters``
      (``partitioned_param_coordinator.py`` lines 452-454; ``layer_params``: the layer's parameters, 0 when
      unknown);
    - ``gathered_at_loss`` (the same ZeRO-3 cases, with the model's ``arch``): what the coordinator keeps gathered
      beyond that when the forward pass has returned, because ``stage3_max_reuse_distance`` says it will be reused
      soon (:func:`dsdoctor.checks.zero3.gathered_at_loss`); alive from the end of the forward into the backward.

    ``allgather_bucket_size`` allocates nothing: ``all_gather_dp_groups`` (``runtime/utils.py`` lines 1020-1055)
    only splits the all-gather of the updated partitions into shards of that many elements, gathered in place into
    the existing 16-bit partitions (``narrow`` views). So the "4.5 x (reduce_bucket_size + allgather_bucket_size)
    x 2 bytes" of older documentation over-counts 4.5-fold for the 5e8 defaults with overlap_comm (8.4 GiB against
    1.86 GiB).
    """
    out = {"reduce_buckets": 0, "reduce_bucket": 0, "gathered_parameters": 0, "gathered_at_loss": 0}
    if stage in (1, 2) and (contiguous_gradients or offload_optimizer):
        out["reduce_buckets"] = element_bytes * reduce_bucket_size * (2 if overlap_comm else 1)
    if stage == 3:
        if contiguous_gradients and trainable:
            out["reduce_bucket"] = element_bytes * reduce_bucket_size
        if world_size > 1 or offload_param:
            out["gathered_parameters"] = element_bytes * min(max_live_parameters, prefetch_bucket_size + layer_params)
            if arch is not None:
                out["gathered_at_loss"] = max(0, element_bytes * gathered_at_loss(arch, max_reuse_distance, grad_ckpt)
                                              - out["gathered_parameters"])
    return out


def model_state_bytes(setup: Setup, cal: Calibration = CALIBRATION) -> dict[str, int]:
    """Weights, gradients and optimizer states on one GPU, and what offload puts on the host (per rank), bytes.

    ZeRO paper section 3 (Ψ parameters, N data-parallel ranks): 16-bit weights 2Ψ (partitioned by ZeRO-3
    only), 16-bit gradients 2Ψ_trainable (partitioned from ZeRO-2), Adam states 12Ψ_trainable (fp32 master, first
    and second moment; partitioned from ZeRO-1). DeepSpeed's specifics, each seen on the H200:

    - the step converts the rank's gradient partition to fp32 and writes the updated 16-bit partition back:
      ZeRO-1/2 ``stage_1_and_2.py`` (``single_partition_of_fp32_groups[i].grad``): +4Ψ_t/N fp32 gradients and a
      2Ψ_t/N copy during the step; ZeRO-3 (``stage3.py``) the same per sub-group: +6 x min(Ψ_t/N,
      ``sub_group_size``) (5.59 GiB measured for both a 1.5B and an 8B model); bf16 at ZeRO-0
      (``bf16_optimizer.py``, fp32 accumulators): +8Ψ_t;
    - ZeRO-3 keeps its gradient partitions (2Ψ_t/N) and its reduction bucket between steps, and ZeRO-1/2 hold
      their reduction buckets during the backward pass (:func:`communication_buffer_bytes`, shared with
      ``dsdoctor check``'s DS144);
    - fp32 training has no separate master copy: Adam holds 8Ψ_t of moments;
    - ``offload_optimizer`` moves the fp32 master, the moments and the fp32 gradients to the host; ``offload_param``
      (ZeRO-3) the 16-bit weights.
    """
    n, stage = setup.world_size, setup.zero_stage
    psi, psi_t = setup.total_params, setup.trainable_params
    w = setup.weight_bytes
    fp32 = setup.precision == "fp32"
    weights = w * psi if stage < 3 else (0 if setup.offload_param != "none" else w * psi // n)
    optimizer = (8 if fp32 else 12) * psi_t // (n if stage >= 1 else 1)
    grads = w * psi_t // (n if stage >= 2 else 1)
    persistent_grads = grads if stage == 3 else 0
    buffers = communication_buffer_bytes(
        stage, n, w, setup.reduce_bucket_size, setup.overlap, setup.contiguous_gradients, trainable=psi_t > 0,
        prefetch_bucket_size=setup.prefetch_bucket_size, max_live_parameters=setup.max_live_parameters,
        layer_params=setup.arch.layer_params, offload_optimizer=setup.offloaded,
        offload_param=setup.offload_param != "none", arch=setup.arch, max_reuse_distance=setup.max_reuse_distance,
        grad_ckpt=setup.grad_ckpt)
    bucket = buffers["reduce_bucket"] + buffers["gathered_parameters"]  # ZeRO-3, between steps too
    loss_gathered = buffers["gathered_at_loss"]  # ZeRO-3: from the end of the forward pass (checks/zero3.py)
    backward_buckets = buffers["reduce_buckets"]  # ZeRO-1/2, during the backward pass
    if stage == 0:
        step_extra = 8 * psi_t if setup.precision == "bf16" else 4 * psi_t
    elif stage < 3:
        step_extra = 6 * psi_t // n
    else:  # ZeRO-3 steps one sub-group at a time (stage3.py, sub_group_size): fp32 gradients + 16-bit copy
        step_extra = 6 * min(psi_t // n, setup.sub_group_size)
    host_optimizer = 0
    if setup.offloaded:  # fp32 gradients, master and moments live on the host; ZeRO-3 keeps its reduce bucket
        host_optimizer = optimizer + 4 * psi_t // n
        optimizer, step_extra, grads, persistent_grads = 0, 0, 0, 0
        bucket = (bucket if stage == 3 else 0) + cal.offload_gpu_bytes
    host_params = w * psi // n if (stage == 3 and setup.offload_param != "none") else 0
    return {"weights": weights, "optimizer_states": optimizer, "gradients": grads,
            "persistent_gradients": persistent_grads, "deepspeed_buffers": bucket, "step_extra": step_extra,
            "backward_buckets": backward_buckets, "loss_gathered": loss_gathered,
            "host_optimizer": host_optimizer, "host_params": host_params}


def slack_features(setup: Setup) -> dict[str, float]:
    """What the caching allocator's slack (reserved minus peak allocated) grows with, by :class:`Calibration`
    coefficient name (``slack_<name>``); bytes, except ``base`` (1: the coefficient is bytes). Each is the size of
    blocks that later requests can only partly reuse:

    - ``logits``: the fp32 logits (4 x micro x seq x vocabulary), the loss's largest blocks, in every loop;
    - ``held_logits``: the same again in the engine loop whose ``outputs`` keep the previous step's logits
      (:func:`held_logits_bytes`): the new step's logits and their fp32 copies cannot reuse the held blocks;
    - ``moments``: the Adam moments a full fine-tune creates at its first step (8 Ψ_t / N on the GPU, per
      sub-group under ZeRO-3), on top of the cached activation blocks;
    - ``offload``: the 16-bit gradient partition ZeRO-Offload stages for the copy to the host (Ψ_t / N elements,
      per sub-group under ZeRO-3);
    - ``param_offload``: the 16-bit weight partitions ZeRO-3 copies from the host to the GPU, module by module,
      before each all-gather (Ψ / N elements per rank). Fitted on the seven parameter-offload runs of rounds 2-6
      (N = 1): 1.3-11.9% under on them, 2.3% under on the held-out one of round 8
      (benchmarks/results/memory-loops/calibration-fit.txt).
    """
    tokens = setup.micro_batch * setup.seq_len
    fp32_logits = 4 * tokens * setup.arch.vocab_size
    out = {"base": 1.0, "logits": float(fp32_logits),
           "held_logits": float(fp32_logits if setup.launch == "engine" else 0), "moments": 0.0, "offload": 0.0,
           "param_offload": 0.0}
    per_rank = setup.trainable_params // (setup.world_size if setup.zero_stage else 1)
    if setup.zero_stage == 3:  # ZeRO-3 creates states and moves gradients one sub-group at a time
        per_rank = min(per_rank, setup.sub_group_size)
    if setup.method == "full" and not setup.offloaded:
        out["moments"] = float(8 * per_rank)
    if setup.offloaded:
        out["offload"] = float(setup.weight_bytes * per_rank)
    if setup.zero_stage == 3 and setup.offload_param != "none":
        out["param_offload"] = float(setup.weight_bytes * setup.total_params // setup.world_size)
    return out


def cuda_context_bytes(setup: Setup, cal: Calibration = CALIBRATION) -> int:
    """NVML "used" beyond the caching allocator's reserved bytes (:class:`Calibration`): the CUDA context, cuBLAS
    workspaces and NCCL's buffers; more under ZeRO-3 and under the HF Trainer (accelerate's state)."""
    if setup.launch == "trainer":
        return cal.cuda_context_trainer_bytes
    return cal.cuda_context_zero3_bytes if setup.zero_stage == 3 else cal.cuda_context_bytes


def estimate(setup: Setup, cal: Calibration = CALIBRATION) -> Estimate:
    """The per-GPU memory of ``setup``: the terms alive at the peak (they sum to ``total``), the three moments of
    a step (see the module docstring), peak allocated, reserved (allocated plus the caching allocator's slack,
    :class:`Calibration`) and total: what ``nvidia-smi`` shows, reserved plus the CUDA context. Host RAM per node.

    DeepSpeed's communication buffers (:func:`communication_buffer_bytes`: ZeRO-1/2's reduction buckets, ZeRO-3's
    reduction bucket and gathered parameters with N > 1) follow DeepSpeed's code and are not calibrated.
    """
    arch = setup.arch
    tokens = setup.micro_batch * setup.seq_len
    states = model_state_bytes(setup, cal)
    activations = activation_bytes(setup)
    logits = tokens * arch.vocab_size * (LOGITS_BYTES_PER_ELEMENT
                                         + (SOFTCAP_BYTES_PER_ELEMENT if arch.final_softcap else 0))
    held = held_logits_bytes(setup)
    hidden = (4 if setup.precision == "fp32" else 2) * arch.hidden_size * tokens
    trainable_layer = setup.method in ("full", "freeze")
    recompute = layer_activation_bytes_per_token(arch, setup, trainable_layer) * tokens if setup.grad_ckpt else 0
    grads_live = 0 if setup.zero_stage == 3 else states["gradients"]
    base = {"weights": states["weights"], "optimizer_states": states["optimizer_states"],
            "gradients": states["persistent_gradients"], "deepspeed_buffers": states["deepspeed_buffers"],
            "held_logits": held}
    moments = {
        "loss": {**base, "activations": activations + 4 * hidden, "logits_and_loss": logits,
                 "deepspeed_buffers": base["deepspeed_buffers"] + states["loss_gathered"]},
        "backward": {**base, "gradients": base["gradients"] + grads_live, "checkpoint_recompute": recompute,
                     "deepspeed_buffers": base["deepspeed_buffers"] + states["backward_buckets"],
                     "activations": (activations if setup.grad_ckpt else 0) + 4 * hidden},
        "step": {**base, "gradients": base["gradients"] + grads_live, "optimizer_step": states["step_extra"]},
    }
    phases = {name: sum(parts.values()) for name, parts in moments.items()}
    peak_phase = max(phases, key=phases.get)
    allocated = phases[peak_phase]
    slack = sum(getattr(cal, "slack_" + name) * value for name, value in slack_features(setup).items())
    reserved = allocated + int(slack)
    context = cuda_context_bytes(setup, cal)
    total = reserved + context
    zeros = {key: 0 for key in ALLOCATED_TERMS}
    phase_terms = {name: {**zeros, **parts} for name, parts in moments.items()}
    terms = dict(phase_terms[peak_phase])
    terms["allocator_slack"] = reserved - allocated
    terms["cuda_context"] = context
    offload_node = (states["host_optimizer"] + states["host_params"]) * setup.gpus
    # each rank loads the whole model on the CPU before deepspeed.initialize; under ZeRO-3 the HF Trainer creates
    # it inside deepspeed.zero.Init, which partitions while loading: about one copy per node
    load_node = setup.weight_bytes * setup.total_params * (1 if setup.zero_stage == 3 else setup.gpus)
    host = {"optimizer_offload_per_rank": states["host_optimizer"], "param_offload_per_rank": states["host_params"],
            "offload_per_node": offload_node, "model_load_per_node": load_node,
            "needed_per_node": int(HOST_BUFFER_FACTOR * offload_node) + load_node}
    return Estimate(terms=terms, phases=phases, peak_phase=peak_phase, allocated=allocated, reserved=reserved,
                    total=total, host=host, phase_terms=phase_terms)


def max_micro_batch(setup: Setup, gpu_bytes: int, cal: Calibration = CALIBRATION, limit: int = 4096) -> int:
    """The largest micro batch whose estimate fits ``gpu_bytes`` (0 when not even 1 fits); memory grows
    monotonically with the micro batch, so a binary search over [1, limit]."""
    if estimate(replace(setup, micro_batch=1), cal).total > gpu_bytes:
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(replace(setup, micro_batch=mid), cal).total <= gpu_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --- step time: to rank the setups that fit ------------------------------------------------------------------------

@dataclass(frozen=True)
class Rates:
    """The rates the step-time model divides by, each with where it comes from. Bytes/s, FLOP/s, parameters/s.

    - ``gpu_flops``: the GPU's dense 16-bit tensor-core peak (``dsdoctor.checks.training.PEAK_FLOPS``, NVIDIA's
      datasheets); an A100's 312e12 when the GPU is not known;
    - ``mfu``: the fraction of that peak a fine-tuning step reaches on its matrix products: 0.45, what the H200
      gave for the ChatGLM-6B shape with LoRA (shared/FACTS.md: 11,686 tokens/s x 3.8e10 FLOPs a token with the
      recomputation = 45% of 989e12);
    - ``pcie_bytes_per_s``: host <-> GPU copies, PCIe Gen4 x16 (31.5 GB/s per direction, PCI-SIG; see
      ``dsdoctor.checks.network.LINK_PEAK``) at the 88% that pinned copies reached on this project's H200 (PCIe Gen5
      x16: 55.4 of 63.0 GB/s both ways, 1 GiB copies, 2026-12-01; pageable ones 18.6 GB/s): 27e9. DeepSpeed's offload
      pins its buffers (``pin_memory`` defaults to true in ``runtime/zero/offload_config.py``);
    - ``intra_node_bus_bytes_per_s``: NCCL's bus bandwidth between the GPUs of a node, taken as PCIe Gen4 x16 too
      (25e9: the 2-8 GPU boxes without NVLink this tool is for; NVLink is faster, which only shrinks the
      communication terms); ``inter_node_bus_bytes_per_s``: between nodes, a 100 Gb/s NIC (12.5e9);
    - ``cpu_adam_params_per_s``: DeepSpeedCPUAdam's update rate per node, 1.5e9 parameters/s: DeepSpeed PR 7474
      measured 2.38 s a step for Qwen2.5-3B (3.09 B parameters, optimizer offload, 2 A100, a 128-core host),
      most of it in CPUAdam; the ZeRO-Offload tutorial gives CPUAdam as 5-7x PyTorch's CPU Adam.
    """

    gpu_flops: float = 312e12
    mfu: float = 0.45
    pcie_bytes_per_s: float = 27e9
    intra_node_bus_bytes_per_s: float = 25e9
    inter_node_bus_bytes_per_s: float = 12.5e9
    cpu_adam_params_per_s: float = 1.5e9


def step_time(setup: Setup, rates: Rates = Rates()) -> dict[str, float]:
    """Estimated seconds of one optimizer step (``micro_batch`` x ``grad_accum`` samples per GPU), by term, to rank
    setups against each other; it is not a prediction of the wall time. Nothing overlaps in this sum (DeepSpeed
    overlaps some communication with compute, so the real step is shorter; the order of the options is what counts).

    - ``compute``: model FLOPs of the step's tokens, as ``dsdoctor.checks.training.model_flops_per_token`` counts
      them (forward 2Ψ, activation gradients 2Ψ, weight gradients 2Ψ_trainable: 6Ψ for full fine-tuning, less for
      LoRA, P-Tuning and freeze; attention 12·L·h·s), at ``gpu_flops`` x ``mfu`` (fp32 at half that: TF32 runs at
      half the 16-bit rate on Ampere and later, NVIDIA A100/H100 datasheets);
    - ``recompute``: gradient checkpointing runs one more forward (2Ψ + 4·L·h·s a token; Chen et al. 2016);
    - ``communication``: NCCL collectives at the bus bandwidth (nccl-tests doc/PERFORMANCE.md: an all-gather or
      reduce-scatter of S bytes moves S·(N-1)/N per rank, an all-reduce twice that), as DeepSpeed issues them:
      ZeRO-0 all-reduces the gradients once a step (``engine.allreduce_gradients``); ZeRO-1 reduces them at the
      accumulation boundary and all-gathers the updated weights; ZeRO-2 reduce-scatters at every micro step
      (``stage_1_and_2.py``: ``reduce_ready_partitions_and_remove_grads`` when ``partition_gradients``) and
      all-gathers once; ZeRO-3 all-gathers every weight (frozen ones too) for the forward and again for the
      backward of every micro step and reduce-scatters the gradients (``stage3.py``; the ZeRO paper, section 7:
      3Ψ against ZeRO-2's 2Ψ);
    - ``pcie``: what offload copies over PCIe: ``offload_optimizer`` sends the rank's gradient partition to the host
      at every micro step and, with accumulation, back for the sum (``async_accumulate_grad_in_cpu_via_gpu``), and
      brings the updated 16-bit partition back after the step; ``offload_param`` fetches the rank's weight
      partition for the forward and for the backward of every micro step;
    - ``cpu_optimizer``: the Adam step of the node's trainable parameters on the host (``cpu_adam_params_per_s``).

    Returns seconds by term and ``total``.
    """
    arch, n = setup.arch, setup.world_size
    micro_steps = max(1, setup.grad_accum)
    tokens = setup.micro_batch * setup.seq_len * micro_steps
    psi, psi_t = setup.total_params, setup.trainable_params
    active = psi - (arch.total_params - arch.active_params)  # a mixture of experts runs top_k of E per token
    w = setup.weight_bytes
    attention = 12 * arch.num_layers * arch.hidden_size * setup.seq_len
    flops_per_s = rates.gpu_flops * rates.mfu * (0.5 if setup.precision == "fp32" else 1.0)
    compute = tokens * (4 * active + 2 * min(psi_t, active) + attention) / flops_per_s
    recompute = tokens * (2 * active + attention / 3) / flops_per_s if setup.grad_ckpt else 0.0
    share = (n - 1) / n
    bus = rates.intra_node_bus_bytes_per_s if setup.nodes == 1 else rates.inter_node_bus_bytes_per_s
    grads, weights = w * psi_t, w * psi
    stage = setup.zero_stage
    if n == 1:
        wire = 0.0
    elif stage == 0:
        wire = 2 * share * grads
    elif stage == 1:
        wire = 2 * share * grads
    elif stage == 2:
        wire = share * grads * micro_steps + share * grads
    else:
        wire = (2 * share * weights + share * grads) * micro_steps
    pcie_bytes = 0.0
    if setup.offloaded:
        partition = grads / n
        pcie_bytes += partition * micro_steps + partition * (micro_steps - 1) * (stage < 3)
        if not (stage == 3 and setup.offload_param != "none"):
            pcie_bytes += partition
    if stage == 3 and setup.offload_param != "none":
        pcie_bytes += 2 * (weights / n) * micro_steps
    cpu = psi_t / setup.nodes / rates.cpu_adam_params_per_s if setup.offloaded else 0.0
    out = {"compute": compute, "recompute": recompute, "communication": wire / bus,
           "pcie": pcie_bytes / rates.pcie_bytes_per_s, "cpu_optimizer": cpu}
    out["total"] = sum(out.values())
    return out


def deepspeed_estimator_bytes(setup: Setup) -> int:
    """What DeepSpeed's own estimator prints per GPU for this model (``estimate_zero2_model_states_mem_needs``
    in ``runtime/zero/stage_1_and_2.py`` for stages 0-2, ``estimate_zero3_model_states_mem_needs`` in
    ``runtime/zero/stage3.py`` for stage 3). Its ``_all_live`` variants count every parameter of the model as
    trained (a LoRA model's frozen weights too) and leave out activations, logits and buffers."""
    psi, n = setup.total_params, setup.world_size
    offload = setup.offload_optimizer != "none"
    if setup.zero_stage < 3:
        return 2 * psi if offload else 2 * psi + int(18 * psi / n)
    largest = 4 * setup.arch.largest_layer_params
    if offload:
        return largest if setup.offload_param != "none" else largest + int(2 * psi / n)
    return largest + int(18 * psi / n)


def accelerate_estimator_bytes(setup: Setup) -> int:
    """``accelerate estimate-memory``'s "Training using Adam" for the model (``accelerate/commands/estimate.py``,
    ``estimate_training_usage``): the largest of model, gradients, optimizer and step for a batch of 1, from the
    fp32 size (4Ψ): 8Ψ in 16-bit mixed precision, 16Ψ in fp32. No ZeRO, no activations."""
    fp32_size = 4 * setup.total_params
    return 4 * fp32_size if setup.precision == "fp32" else 2 * fp32_size


# --- what to change: every setup that trains the same way, ranked by step time --------------------------------------

#: What a change that alters the training itself costs; these rows come after every setup that trains the same way.
TRAINING_CHANGES = {
    "seq_len": "truncates longer samples: changes what the model learns",
    "method": "trains an adapter instead of every weight: changes the method",
}

#: Headroom below which a fitting setup is tight (MEM502): the estimate's largest |error| against NVML's peak on
#: the fit points (7.1%, ``benchmarks/results/memory-loops/calibration-fit.txt``), rounded up. Near the limit the
#: caching allocator's fragmentation decides: two held-out runs at 94% and 98% of the card's estimate ran out of memory.
TIGHT = 0.08


def verdict(total: int, gpu_bytes: int) -> str:
    """The estimate's verdict for ``total`` bytes on a GPU of ``gpu_bytes``: "tight" within :data:`TIGHT` of the
    card on either side (MEM502: within the estimate's own error, it may or may not fit), else "fits" or "no"
    (MEM501)."""
    if abs(gpu_bytes - total) < TIGHT * gpu_bytes:
        return "tight"
    return "fits" if total < gpu_bytes else "no"


def replay_verdict(replayed, context: int, gpu_bytes: int) -> str:
    """The verdict of ``estimate --replay`` ("fits", "tight" or "no", as :func:`verdict`) for ``replayed``
    (:class:`dsdoctor.checks.step_trace.Replayed` of a run given ``gpu_bytes - context`` bytes). A replay that fits is
    judged by its reserved peak plus the CUDA context ``context`` (bytes) in :func:`verdict`'s band. One that ran out of
    memory is "no" when the bytes allocated at once (``unbounded_allocated``, the same events replayed with no limit)
    plus the context come within :data:`TIGHT` of the card or past it. Below that it is "tight" (MEM512): the
    allocations leave room, and the order in which the run frees blocks, which the replay does not know to the byte,
    decides whether the caching allocator finds a block after releasing its free segments
    (``c10/cuda/CUDACachingAllocator.cpp``). Seen on the H200: Qwen3-14B LoRA with allocations at 83% of the card
    trained where its replay ran out; Qwen3-8B LoRA at sequence 4096, micro batch 13, with allocations at 98%, ran out
    as its replay did (``benchmarks/results/memory-loops/README.md``)."""
    if replayed.reserved is not None:
        return verdict(replayed.reserved + context, gpu_bytes)
    if replayed.unbounded_allocated is None:  # nothing replayed: the model states alone do not fit
        return "no"
    return "tight" if replayed.unbounded_allocated + context < (1 - TIGHT) * gpu_bytes else "no"


def _divisors(n: int, limit: int = 4096) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidates(setup) -> list:
    """Every DeepSpeed setup that trains ``setup``'s model the same way on the same GPUs with the same global batch
    (micro batch x gradient accumulation x world size): each ZeRO stage; offload of the optimizer (stage 1 and up) and
    of the parameters (stage 3) to the CPU; gradient checkpointing on and off (always off under P-Tuning, which peft
    refuses with checkpointing); and each micro batch that divides the samples a GPU takes per step."""
    samples = setup.micro_batch * setup.grad_accum
    micro = _divisors(samples) or [setup.micro_batch]
    out = []
    offloads = [("none", "none"), ("cpu", "none")]
    for stage in (0, 1, 2, 3):
        for opt, par in offloads + ([("cpu", "cpu"), ("none", "cpu")] if stage == 3 else []):
            if stage == 0 and opt != "none":
                continue
            for ckpt in ((False,) if setup.method == "ptuning" else (True, False)):
                base = replace(setup, zero_stage=stage, offload_optimizer=opt, offload_param=par, grad_ckpt=ckpt)
                out.append((base, micro))
    return out


def _describe(current, changed) -> tuple[str, dict]:
    """The change from ``current`` to ``changed`` in words, and the ds_config values to set for it."""
    parts = []
    if changed.zero_stage != current.zero_stage:
        parts.append(f"ZeRO-{changed.zero_stage}")
    for key in ("offload_optimizer", "offload_param"):
        before, after = getattr(current, key), getattr(changed, key)
        if before != after:
            parts.append(f"{key} {after}" if after != "none" else f"no {key}")
    if changed.grad_ckpt != current.grad_ckpt:
        parts.append("gradient checkpointing " + ("on" if changed.grad_ckpt else "off"))
    if changed.micro_batch != current.micro_batch:
        parts.append(f"micro batch {changed.micro_batch} x gradient_accumulation_steps {changed.grad_accum}")
    zero: dict = {"stage": changed.zero_stage}
    if changed.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": changed.offload_optimizer}
    if changed.offload_param != "none":
        zero["offload_param"] = {"device": changed.offload_param}
    config = {"zero_optimization": zero, "train_micro_batch_size_per_gpu": changed.micro_batch,
              "gradient_accumulation_steps": changed.grad_accum}
    return ", ".join(parts), config


def search(setup, gpu_bytes: int, rates, limit: int = 8, cache: dict | None = None,
           host_bytes: int | None = None) -> list[dict]:
    """The setups of :func:`candidates` that fit ``gpu_bytes``, ranked by estimated step time
    (:func:`step_time`): those with 8% headroom (TIGHT) or more first, then the tight ones; for each
    stage/offload/checkpointing combination the largest micro batch that fits (memory grows with the micro batch, a
    binary search over the divisors; fewer micro steps mean fewer per-micro-step collectives and copies). When none
    fits, the closest ones. ``cache`` (bytes by setup) is shared across GPUs of different memory. ``host_bytes``
    (the node's RAM, when known): an offload that needs more host RAM than that (MEM504) is not proposed.

    Each row: ``change`` (words), ``deepspeed`` (the ds_config values), ``total_bytes``, ``fits``, ``tight``,
    ``step_time_s`` (terms and total), ``vs_current`` (step time / the current setup's).
    """
    cache = {} if cache is None else cache

    def measured(s) -> tuple[int, int]:
        if s not in cache:
            e = estimate(s)
            cache[s] = (e.total, e.host["needed_per_node"])
        return cache[s]

    def total(s) -> int:
        return measured(s)[0]

    def host_ok(s) -> bool:
        return host_bytes is None or measured(s)[1] <= host_bytes

    samples = setup.micro_batch * setup.grad_accum
    current_time = step_time(setup, rates)["total"]
    rows, closest = [], []
    for base, micros in candidates(setup):
        lo, hi, best = 0, len(micros) - 1, None
        while lo <= hi:  # the largest micro batch that fits
            mid = (lo + hi) // 2
            s = replace(base, micro_batch=micros[mid], grad_accum=samples // micros[mid])
            if total(s) <= gpu_bytes:
                best, lo = s, mid + 1
            else:
                hi = mid - 1
        if best is not None and not host_ok(best):
            continue  # its offload needs more host RAM than the node has
        if best is None:
            smallest = replace(base, micro_batch=micros[0], grad_accum=samples // micros[0])
            if host_ok(smallest):
                closest.append(smallest)
            continue
        if (best.zero_stage, best.offload_optimizer, best.offload_param, best.grad_ckpt, best.micro_batch) == \
                (setup.zero_stage, setup.offload_optimizer, setup.offload_param, setup.grad_ckpt, setup.micro_batch):
            continue  # the current setup itself is not a change
        rows.append(best)

    def row(s) -> dict:
        times = step_time(s, rates)
        text, config = _describe(setup, s)
        used = total(s)
        return {"change": text, "deepspeed": config, "total_bytes": used, "fits": used <= gpu_bytes,
                "_parts": (text.count(",") + 1, -s.zero_stage), "tight": verdict(used, gpu_bytes) == "tight",
                "step_time_s": {k: round(v, 4) for k, v in times.items()},
                "vs_current": round(times["total"] / current_time, 3) if current_time else None}

    ranked = sorted((row(s) for s in rows),
                    key=lambda r: (r["tight"], r["step_time_s"]["total"], r["total_bytes"], r["_parts"]))
    if not ranked:
        ranked = sorted((row(s) for s in closest), key=lambda r: (r["total_bytes"], r["_parts"]))[:3]
    out, seen = [], set()
    for r in ranked:  # ZeRO-1 and ZeRO-2 with the optimizer offloaded come out the same: keep the smaller change
        same = (r["total_bytes"], r["step_time_s"]["total"])
        if same not in seen:
            seen.add(same)
            r.pop("_parts")
            out.append(r)
    return out[:limit]


def training_changes(setup, gpu_bytes: int) -> list[dict]:
    """Changes to what is trained, for when no setup of :func:`search` fits: LoRA instead of full fine-tuning,
    half the sequence length; each with its memory and what it costs (:data:`TRAINING_CHANGES`)."""
    options = []
    if setup.method == "full":
        from dsdoctor.models import default_lora_targets, trainable_params
        from dsdoctor.report import DsdoctorError

        try:
            targets = default_lora_targets(setup.arch)
        except DsdoctorError:  # no default for this architecture (DeepSeek-V2): peft's own "all-linear"
            targets = ("all-linear",)
        lora_t = trainable_params(setup.arch, "lora", lora_targets=targets)
        options.append(("method", f"LoRA r=8 on {','.join(targets)}",
                        replace(setup, method="lora", trainable_params=lora_t, lora_targets=targets,
                                total_params=setup.total_params + lora_t)))
    if setup.seq_len > 256:
        options.append(("seq_len", f"--seq-len {setup.seq_len // 2}", replace(setup, seq_len=setup.seq_len // 2)))
    rows = []
    for key, text, changed in options:
        used = estimate(changed).total
        rows.append({"change": text, "total_bytes": used, "fits": used <= gpu_bytes, "cost": TRAINING_CHANGES[key]})
    return rows


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
MEM500 = rule(
    "MEM500", "ok", "fits",
    what="The estimated peak fits the GPU with headroom.",
    why="", fix="", source="dsdoctor estimate")
