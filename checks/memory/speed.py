"""The seconds of a training step, to rank the setups that fit, and DeepSpeed's and accelerate's own estimators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsdoctor.checks.memory.terms import Setup

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


