"""Which 16-bit parameters ZeRO-3 keeps gathered on a GPU, mirrored from DeepSpeed's parameter coordinator.

Pure arithmetic (no torch, no DeepSpeed import), shared by ``dsdoctor estimate`` and ``check``'s DS144.

DeepSpeed 0.19.8 ``runtime/zero/partitioned_param_coordinator.py``: once the first step has recorded the order in
which modules fetch their parameters (``record_module``; the trace is complete from the second step on),
``release_sub_module`` frees a module's gathered parameters after use only if ``__params_to_release`` does not see
them again in the modules that follow in the trace before ``stage3_max_reuse_distance`` parameters have been
traversed (default 1e9). With the default, most of a 7B model's layers stay gathered from the end of the forward
pass into the backward pass: up to about 1e9 parameters, 1.86 GiB in bf16, on every GPU. Measured on an H200 with
parameter offload at world size 1 (benchmarks/results/memory-loops): the allocated peak of the second and later
steps is 1.9 GiB above the first for Qwen2.5-1.5B and Qwen3-1.7B alike; on 2 CPU ranks (tests/test_zero3.py), the
parameters gathered at the loss follow this module for reuse distances from 0 to past the model's size.

At world size 1 without parameter offload a gathered parameter is its own partition: nothing is added.
"""

from __future__ import annotations

from bisect import bisect_left
from functools import lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsdoctor.models import Arch


def fetch_trace(arch: "Arch", grad_ckpt: bool) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The order in which the modules of ``arch`` fetch their parameters in one training step, as DeepSpeed's
    coordinator records it: (module id, parameters) per fetch. Forward: embedding, each decoder layer's linears,
    the output projection (the embedding's id when tied: one parameter); backward in reverse, each layer's linears
    fetched first by the recomputed forward when ``grad_ckpt`` (transformers' non-reentrant checkpointing reruns
    the layer's forward inside the backward pass), then by their backward. Returns (forward, backward). Norms are
    left out: below ``stage3_param_persistence_threshold`` (1e5 elements) they persist and are never released."""
    parts = [lin.params for lin in arch.linears] + [arch.moe_params_per_layer]
    each = arch.layer_params_each or (arch.layer_params,) * arch.num_layers
    layers = []
    for i, params in enumerate(each):
        scale = params / max(1, sum(parts))  # layers of another kind: the same modules, scaled to their size
        layers.append([(f"L{i}.{j}", int(p * scale)) for j, p in enumerate(parts) if p])
    embed = ("embed", arch.embedding_params)
    head = ("embed", arch.embedding_params) if arch.tied else ("head", arch.lm_head_params)
    forward = [embed] + [m for layer in layers for m in layer] + [head]
    backward = [head]
    for layer in reversed(layers):
        if grad_ckpt:
            backward.extend(layer)
        backward.extend(reversed(layer))
    backward.append(embed)
    return forward, backward


@lru_cache(maxsize=64)  # estimate's search asks once per candidate setup, mostly for one model
def gathered_at_loss(arch: "Arch", max_reuse_distance: int = 1_000_000_000, grad_ckpt: bool = True) -> int:
    """Parameters (elements) ZeRO-3 holds gathered when the forward pass has returned and the loss backward starts,
    in a step after the first: every module fetched so far whose parameters ``__params_to_release`` keeps because
    they come again within ``max_reuse_distance`` traversed parameters (``stage3_max_reuse_distance``). Multiply by
    the 16-bit element size for bytes. Raises nothing; 0 for a model without layers."""
    forward, backward = fetch_trace(arch, grad_ckpt)
    trace = forward + backward
    prefix = [0, *accumulate(numel for _, numel in trace)]  # prefix[j]: parameters of trace[:j]
    resident: dict[str, int] = {}
    positions: dict[str, list[int]] = {}
    for pos, (mid, _) in enumerate(trace):
        positions.setdefault(mid, []).append(pos)
    for t in range(len(forward)):
        mid, numel = trace[t]
        resident[mid] = numel
        later = positions[mid]
        k = bisect_left(later, t + 1)
        # released unless its next use j is reached before the scan has traversed max_reuse_distance parameters:
        # the scan over trace[t+1:] checks `traversed >= max` before each module, so j is seen iff
        # sum(trace[t+1:j]) < max_reuse_distance
        keep = k < len(later) and prefix[later[k]] - prefix[t + 1] < max_reuse_distance
        if not keep:
            resident.pop(mid, None)
    return sum(resident.values())
