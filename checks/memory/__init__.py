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


from dsdoctor.checks.memory.rules import *  # noqa: F401,F403
from dsdoctor.checks.memory.search import *  # noqa: F401,F403
from dsdoctor.checks.memory.speed import *  # noqa: F401,F403
from dsdoctor.checks.memory.terms import *  # noqa: F401,F403
