"""The per-GPU bytes of a run, term by term (see :mod:`dsdoctor.checks.memory`): model states, activations, logits,
DeepSpeed's buffers, the calibrated allocator slack and CUDA context, and the estimate at each moment of a step."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from dsdoctor.checks.zero3 import gathered_at_loss

if TYPE_CHECKING:  # annotations only: `check` imports this package for communication_buffer_bytes
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
    if setup.zero_stage == 3 and setup.world_size > 1 and setup.launch != "trainer":
        # deepspeed.initialize of a model built without zero.Init (the engine loops' from_pretrained): the engine moves
        # the whole module to the GPU (engine.py _configure_distributed_model, module.to(device)) before ZeRO-3
        # partitions it, so every GPU holds all 16-bit weights once; the Trainer's from_pretrained runs under zero.Init
        # (is_zero_init_model: nothing is moved)
        moments = {"initialize": {"weights": setup.weight_bytes * setup.total_params}, **moments}
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
    # NVMe offload keeps the states on the NVMe device, not in host RAM (its pinned staging buffers, aio's
    # buffer_count x buffer_size, are not counted here)
    on_host = {"optimizer": states["host_optimizer"] if setup.offload_optimizer == "cpu" else 0,
               "params": states["host_params"] if setup.offload_param == "cpu" else 0}
    offload_node = (on_host["optimizer"] + on_host["params"]) * setup.gpus
    nvme_node = (states["host_optimizer"] + states["host_params"]) * setup.gpus - offload_node
    # each rank loads the whole model on the CPU before deepspeed.initialize; under ZeRO-3 the HF Trainer creates
    # it inside deepspeed.zero.Init, which partitions while loading: about one copy per node
    zero_init = setup.zero_stage == 3 and setup.launch == "trainer"
    load_node = setup.weight_bytes * setup.total_params * (1 if zero_init else setup.gpus)
    host = {"optimizer_offload_per_rank": states["host_optimizer"], "param_offload_per_rank": states["host_params"],
            "offload_per_node": offload_node, "nvme_per_node": nvme_node, "model_load_per_node": load_node,
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


