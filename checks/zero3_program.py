"""DeepSpeed ZeRO-3's own GPU blocks around a recorded training step, for the allocator replay
(:func:`dsdoctor.checks.step_trace.run_program`).

Mirrored from DeepSpeed 0.19.8 (``deepspeed/runtime/zero/stage3.py``, ``partition_parameters.py``,
``partitioned_param_coordinator.py``, ``utils.py`` ``defragment``), for a model that exists on the GPU before
``deepspeed.initialize`` (the tutorials' loops: ``from_pretrained`` and ``initialize``, which moves the module to the
GPU unless it was built under ``zero.Init``). N is the data-parallel world size, w the 16-bit element size, Ψ_t the
trainable elements, n_i a sub-group's (``sub_group_size`` elements each):

- ``initialize``: each parameter is partitioned (``_partition_param``): a partition of ceil(numel/N) elements is
  made (on the host under parameter offload, except for parameters at or below ``stage3_param_persistence_threshold``
  elements, which stay on the GPU and, at N > 1, gathered whole) and the full tensor freed;
  ``_create_fp16_partitions_with_defragmentation`` moves the trainable partitions to the host, frees them, empties
  the cache and copies them back as one flat buffer (w·Ψ_t/N; on the host under parameter offload);
  ``_create_fp32_partitions`` converts each sub-group to fp32 and clones it (4·n_i twice, the conversion freed once
  the next sub-group's is made; on the host under optimizer offload); ``initialize_optimizer_states`` a zero fp32
  gradient of the largest sub-group, freed; the reduction bucket (``reduce_bucket_size`` elements, w bytes each,
  kept) and the gradient partitions (w·Ψ_t/N, zeros; on the host under optimizer offload);
  ``create_reduce_and_remove_grad_hooks`` gathers each
  trainable parameter whole (``_allgather_params_sequential``) and partitions it again, one at a time;
- each backward: a gradient that fits is copied into the bucket and its own block freed
  (``__add_grad_to_ipg_bucket``); one that would overflow a non-empty bucket first flushes it into the partitions
  (``__reduce_and_partition_ipg_grads``); one larger than the bucket is kept to the next flush; the epilogue flushes
  the rest;
- each step: every gathered parameter released (``_partition_all_parameters``); each gradient partition's norm
  taken in fp64 (``get_grad_norm_direct``: ``.to(torch.double).norm()``, 8 bytes an element, transient); per
  sub-group the gradient partitions flattened (w·n_i) and cast to fp32 (4·n_i), the 16-bit copy freed, Adam's
  moments made at the first step (2 x 4·n_i, FusedAdam's lazy state), the fp32 gradient freed; under optimizer
  offload all of it is on the host;
- gathering (N > 1, or parameter offload): :class:`Gatherer`, DeepSpeed's parameter coordinator on the allgather
  stream.

At N = 1 without parameter offload a gathered parameter is its own partition (``_no_gather_coalesced``): nothing is
allocated for it.
"""

from __future__ import annotations

import contextlib
from collections import deque

#: ``stage3_param_persistence_threshold``'s default (``deepspeed/runtime/zero/config.py``): parameters of at most
#: this many elements are never partitioned away from the GPU.
PERSISTENCE_THRESHOLD = 100_000
#: the allocator stream ids of DeepSpeed's ``__allgather_stream`` and ``reduce_and_partition_stream``
#: (``overlap_comm``, on by default at ZeRO-3)
ALLGATHER_STREAM = 1
REDUCE_STREAM = 2


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class Gatherer:
    """DeepSpeed's ``PartitionedParameterCoordinator`` for the replay: which parameters are gathered on the GPU, when.

    Every module is hooked, as DeepSpeed hooks every one. A module's own parameters (``recurse=False``, none at or
    below the persistence threshold) are fetched before its forward and before its backward, one block of
    ceil(numel/N)·N·w bytes each on the allgather stream (``NoGatherHandle``'s ``.to(device)`` copy at N = 1; ``allgather_coalesced``'s output at N > 1). After each
    use they are released (``release_sub_module``) unless the step's recorded trace uses them again within
    ``max_reuse_distance`` parameters (``__params_to_release``); from the second step on (the trace complete), each
    fetch prefetches the parameters that follow in the trace, up to ``prefetch_bucket_size`` elements and
    ``max_live_parameters`` gathered. The fetch of a module with nothing to gather prefetches too, so the gathers run
    more than one bucket ahead (an H200 run shows five weights gathered before the first layer runs: trace-t7). The
    GPU takes a prefetch's parameters in a Python set's order; the replay takes them in the trace's order. The first
    step releases everything after use."""

    def __init__(self, rec, world: int, weight_bytes: int, prefetch: int, max_live: int, max_reuse: int):
        self.rec, self.world, self.w = rec, world, weight_bytes
        self.prefetch, self.max_live, self.max_reuse = prefetch, max_live, max_reuse
        self.live: dict[int, int] = {}  # id(param) -> block key
        self.numel: dict[int, int] = {}  # id(param) -> elements
        self.params: dict[int, list] = {}  # id(module) -> its gathered parameters
        self.available = 0  # elements gathered now
        self.trace: list[int] = []  # module ids fetched this step, in order
        self.complete: list[int] | None = None  # last step's trace
        self.position: dict[int, int] = {}  # module id -> its latest position in this step's trace
        self.queue: deque = deque()

    def register(self, module) -> None:
        """Every module takes part, as DeepSpeed hooks every one (``_register_deepspeed_module``): one without
        parameters to gather (a decoder layer, a norm whose weight persists) gathers nothing, but its fetch
        prefetches like any other (``fetch_sub_module``)."""
        params = [p for p in module.parameters(recurse=False) if p.numel() > PERSISTENCE_THRESHOLD]
        self.params[id(module)] = params
        for p in params:
            self.numel[id(p)] = p.numel()

    def _gather(self, p) -> None:
        if id(p) in self.live:
            return
        nbytes = _ceil(p.numel(), self.world) * self.world * self.w
        self.live[id(p)] = self.rec.alloc(nbytes, stream=ALLGATHER_STREAM)
        self.available += p.numel()

    def _release(self, pid: int) -> None:
        key = self.live.pop(pid, None)
        if key is not None:
            self.rec.free(key)
            self.available -= self.numel[pid]

    def fetch(self, module) -> None:
        mid = id(module)
        position = len(self.trace)
        self.trace.append(mid)
        self.position[mid] = position
        for p in self.params[mid]:
            self._gather(p)
        if self.complete is None:
            return
        # __param_queue: the trace's parameters after this module, consumed as they are passed or prefetched
        while self.queue and self.queue[0][0] <= position:
            self.queue.popleft()
        budget = min(self.max_live - self.available, self.prefetch)
        taken = 0
        while self.queue and taken < budget:
            _, p = self.queue.popleft()
            if id(p) not in self.live:
                self._gather(p)
                taken += p.numel()

    def release(self, module) -> None:
        mid = id(module)
        params = self.params[mid]
        if not params:  # nothing of its own gathered (a decoder layer, a norm that persists)
            return
        if self.complete is None:
            for p in params:
                self._release(id(p))
            return
        # kept if the trace uses it again before max_reuse_distance parameters have been traversed
        seen: set[int] = set()
        traversed = 0
        for later in self.complete[self.position.get(mid, len(self.complete)) + 1:]:
            if traversed >= self.max_reuse:
                break
            for p in self.params[later]:
                seen.add(id(p))
                traversed += p.numel()
        for p in params:
            if id(p) not in seen:
                self._release(id(p))

    def end_step(self) -> None:
        """``_partition_all_parameters`` at the optimizer step: everything gathered is released; the step's trace
        becomes the one the next step prefetches and releases by."""
        for pid in list(self.live):
            self._release(pid)
        self.complete, self.trace, self.position = self.trace, [], {}
        self.queue = deque((pos, p) for pos, mid in enumerate(self.complete) for p in self.params[mid])


@contextlib.contextmanager
def zero3_linear():
    """``torch.nn.functional.linear`` as ZeRO-3 runs it: ``zero.Init`` (entered by ``initialize`` for a model built
    without it) replaces it for the rest of the process with ``zero3_linear_wrap``
    (``deepspeed/runtime/zero/linear.py`` ``LinearFunctionForZeroStage3``): ``input.matmul(weight.t())`` saving the
    input and the weight, and a backward of ``grad_output.matmul(weight)`` and
    ``grad_output.reshape(-1, out).t().matmul(input.reshape(-1, in))``; its blocks differ from autograd's own."""
    import torch

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, weight, bias=None):
            ctx.save_for_backward(input, weight, bias)
            if input.dim() == 2 and bias is not None:
                return torch.addmm(bias, input, weight.t())
            output = input.matmul(weight.t())
            if bias is not None:
                output += bias
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            dim = grad_output.dim()
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.matmul(weight)
            if ctx.needs_input_grad[1]:
                if dim > 2:
                    grad_weight = grad_output.reshape(-1, grad_output.shape[-1]).t().matmul(
                        input.reshape(-1, input.shape[-1]))
                else:
                    grad_weight = grad_output.t().matmul(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum([i for i in range(dim - 1)]) if dim > 2 else grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    original = torch.nn.functional.linear
    torch.nn.functional.linear = lambda input, weight, bias=None: Linear.apply(input, weight, bias)
    try:
        yield
    finally:
        torch.nn.functional.linear = original


def install_gather_hooks(model, gatherer: Gatherer) -> list:
    """DeepSpeed's module hooks (``parameter_offload.py`` ``_register_deepspeed_module``): fetch before a module's
    forward and release after it; fetch before its backward (an identity autograd Function on its outputs) and
    release after it (one on its inputs; for a module whose inputs need no gradient, at the end of the step).
    Returns the hook handles."""
    import torch

    class OnBackward(torch.autograd.Function):  # PreBackwardFunctionForModule / PostBackwardFunctionModule
        """Identity; calls ``action(module)`` when the gradient passes through it."""

        @staticmethod
        def forward(ctx, action, module, x):
            ctx.action, ctx.module = action, module
            return x.detach()

        @staticmethod
        def backward(ctx, grad):
            ctx.action(ctx.module)
            return None, None, grad

    def pre_forward(module, args):
        gatherer.fetch(module)
        if torch.is_grad_enabled() and args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            return (OnBackward.apply(gatherer.release, module, args[0]), *args[1:])
        return None

    def post_forward(module, args, output):
        gatherer.release(module)
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad:
            return OnBackward.apply(gatherer.fetch, module, output)
        return None

    handles = []
    for module in model.modules():
        gatherer.register(module)
        handles.append(module.register_forward_pre_hook(pre_forward))
        handles.append(module.register_forward_hook(post_forward))
    return handles


def initialize(setup, model, rec, blocks: dict, zero_init: bool = False) -> dict:
    """The blocks ``deepspeed.initialize`` makes and frees at ZeRO-3 (module docstring), after the weights'
    ``blocks`` (id(param) -> key). ``zero_init``: the model was built under ``zero.Init`` (the HF Trainer's
    from_pretrained), so its ``blocks`` are the partitions already (:func:`dsdoctor.checks.step_trace.
    zero3_partition_block`), and nothing is partitioned here. Returns the state the steps use: sub-group sizes, the
    bucket."""
    world, w = setup.world_size, setup.weight_bytes
    offload_param = setup.offload_param != "none"
    offload_opt = setup.offload_optimizer != "none"
    params, seen = [], set()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params.append(p)
    trainable = [p for p in params if p.requires_grad]
    partitions: dict[int, int] = {}
    rec.mark("initialize")
    for p in params:  # _convert_to_zero_parameters -> _partition_param
        if zero_init:
            if blocks.get(id(p)) is not None:
                partitions[id(p)] = blocks[id(p)]
            continue
        persistent = p.numel() <= PERSISTENCE_THRESHOLD
        part = _ceil(p.numel(), world)
        if not offload_param or persistent:
            partitions[id(p)] = rec.alloc(w * part)
        rec.free(blocks[id(p)])
        if persistent and world > 1:  # persistent parameters stay gathered
            rec.alloc(w * p.numel())
    psi_part = sum(_ceil(p.numel(), world) for p in trainable)
    if not offload_param:  # defragment(): to the host, freed, empty_cache, back as one flat buffer
        for p in trainable:
            key = partitions.pop(id(p), None)
            if key is not None:
                rec.free(key)
        rec.empty_cache()
        rec.alloc(w * psi_part)
    groups, size = [], 0  # _create_fp16_sub_groups
    for p in trainable:
        size += _ceil(p.numel(), world)
        if size >= setup.sub_group_size:
            groups.append(size)
            size = 0
    if size:
        groups.append(size)
    parts = [_ceil(p.numel(), world) for p in trainable]
    if not offload_opt:
        converted = None
        for n in groups:  # _create_fp32_partitions: .to(device, fp32) then .clone(); the loop variable `converted`
            # holds the previous sub-group's conversion until the next one is made, the last one until the return
            previous, converted = converted, rec.alloc(4 * n)
            if previous is not None:
                rec.free(previous)
            rec.alloc(4 * n)
        if converted is not None:
            rec.free(converted)
        if groups:  # initialize_optimizer_states: a zero gradient of the largest sub-group
            rec.free(rec.alloc(4 * max(groups)))
    rec.alloc(w * setup.reduce_bucket_size)  # the ipg bucket (contiguous_gradients)
    if not offload_opt:
        rec.alloc(w * psi_part)  # grad_partitions_flat_buffer
    for p in trainable:  # create_reduce_and_remove_grad_hooks: param.all_gather() (a whole copy), param.partition()
        rec.free(rec.alloc(w * _ceil(p.numel(), world) * world))
    return {"groups": groups, "parts": parts, "elements": 0, "large": [], "sizes": [], "first": True,
            "offload_opt": offload_opt}


def grad_hook(setup, state: dict):
    """``reduce_independent_p_g_buckets_and_remove_grads`` as each gradient is accumulated (module docstring)."""
    rbs = setup.reduce_bucket_size

    def hook(rec, p):
        if state["elements"] + p.numel() > rbs and state["elements"] > 0:
            flush(setup, state, rec)
        if state["elements"] + p.numel() <= rbs:
            p.grad = None  # copied into the bucket
        else:
            state["large"].append(p)
        state["elements"] += p.numel()
        state["sizes"].append(p.numel())

    return hook


def flush(setup, state: dict, rec) -> None:
    """``__reduce_and_partition_ipg_grads``: the bucket's gradients into the partitions, an oversized one freed.
    Under optimizer offload ``partition_grads`` (on the reduce stream) copies each partition to the host and back
    (``grad_buffer.to(grad_partition.device)``, kept until the bucket is done), takes its norm in fp64 in parts of
    250M elements (``_constant_buffered_norm2``) and casts it to fp32 for the host's fp32 gradient."""
    if state["offload_opt"]:
        held = []
        for numel in state["sizes"]:
            n = _ceil(numel, setup.world_size)
            held.append(rec.alloc(setup.weight_bytes * n, stream=REDUCE_STREAM))
            rec.free(rec.alloc(8 * min(n, 250_000_000), stream=REDUCE_STREAM))
            rec.free(rec.alloc(4 * n, stream=REDUCE_STREAM))
        for key in held:
            rec.free(key)
    state["sizes"].clear()
    for p in state["large"]:
        p.grad = None
    state["large"].clear()
    state["elements"] = 0


def step(setup, state: dict, rec, gatherer: Gatherer | None) -> None:
    """The end of backward and the optimizer step (module docstring)."""
    flush(setup, state, rec)  # independent_gradient_partition_epilogue
    if gatherer is not None:
        gatherer.end_step()
    if not state["offload_opt"]:
        w = setup.weight_bytes
        for n in state["parts"]:  # _get_norm_groups -> get_grad_norm_direct: each gradient's norm in fp64
            rec.free(rec.alloc(8 * n))
        for n in state["groups"]:
            flat = rec.alloc(w * n)  # _prepare_fp32_grad_for_sub_group
            fp32 = rec.alloc(4 * n)
            rec.free(flat)
            if state["first"]:  # FusedAdam's state at its first step
                rec.alloc(4 * n)
                rec.alloc(4 * n)
            rec.free(fp32)
    state["first"] = False
