"""The tensor allocations of a training step, recorded on the meta device, to replay through the caching allocator
model (:mod:`dsdoctor.checks.allocator`).

The model is transformers' own, built from its config on the meta device (no memory, no weights) with the method
applied by peft, and run forward and backward under a ``TorchDispatchMode`` that sees every aten op the autograd
engine runs, the recomputation of gradient checkpointing and the loss included. Each op's output storage is an
allocation of ``storage.nbytes()``; it is freed when the last tensor on it dies (a weakref on every tensor; PyTorch
keeps a tensor's Python object alive while C++ holds it, e.g. saved for backward, so the weakref fires when the
storage's last user is gone). What the meta device cannot run the way CUDA does is substituted:

- attention: the flash kernel the GPU runs (``aten._scaled_dot_product_flash_attention``) instead of the math
  fallback the meta device would pick (which materialises b x heads x s x s scores). Its backward gives dq, dk, dv
  and, for the kernel's own workspace, one transient block of b x heads x s x (head_dim + 1) x 4 bytes (dq in
  fp32, softmax's row sums), 2 head_dim + 1 with grouped-query attention (dk and dv at the query's heads too), as
  measured on an H200 (torch 2.11; benchmarks/results/memory-loops/trace-t5 to t7: Qwen3-8B, Qwen3-4B, Llama-3.2-3B
  and Gemma-2-2B with grouped-query attention, Phi-3 without: 48.5 MiB at b=2, 32 heads of 96, s=2048). A boolean
  mask (a sliding window) is converted to the query's dtype for each call, forward and backward (a transient of
  the mask's shape);
- dropout: CUDA's ``native_dropout``, which keeps a bool mask (off CUDA, ``F.dropout`` decomposes into a mask of
  the input's dtype and a multiply);
- a data-dependent branch (``Tensor.item()``) reads 1 / True: transformers asks only whether a mask or a packed
  sequence is needed, and with no attention mask it is not;
- the scratch blocks CUDA kernels take from the caching allocator (:mod:`dsdoctor.checks.cuda_workspace`): a
  reduction's staging buffer (a weight's gradient summed over the tokens) and each thread's cuBLAS workspace;
- the autograd engine's sum of two gradients of one tensor, in place where the engine would add in place with no
  dispatch mode running (:func:`_accumulates_in_place`): under a mode every tensor has a Python object, so the
  engine never sees itself as the last holder and would allocate a new block for every such sum.

Imports torch, transformers and peft: the slow path (seconds), not the default estimate.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field


@dataclass
class Recorder:
    """Events in order: ``("a", key, bytes)`` / ``("f", key, bytes)`` / ``("e", 0, 0)`` (``empty_cache``);
    synthetic blocks from :meth:`alloc` / :meth:`free` (DeepSpeed's buffers, the weights) share the sequence. A block
    allocated on a stream other than the default one has its stream id in ``streams``."""

    events: list[tuple[str, int, int]] = field(default_factory=list)
    #: (index into events, phase name): where each phase (``stepN:forward`` / ``:backward`` / ``:step``) begins
    marks: list[tuple[int, str]] = field(default_factory=list)
    _live: dict[int, list[int]] = field(default_factory=dict)  # storage key -> [bytes, tensors alive on it]
    streams: dict[int, int] = field(default_factory=dict)  # key -> stream id, for blocks not on the default stream
    _synthetic: dict[int, int] = field(default_factory=dict)  # key -> bytes of a block made by alloc, not freed
    _external: set[int] = field(default_factory=set)  # storages made before the recording
    _next: int = -1
    _cublas: set[str] = field(default_factory=set)  # the threads whose cuBLAS handle has its workspace

    def phase(self) -> str:
        """The phase being recorded: the last :meth:`mark`, or ``build``."""
        return self.marks[-1][1] if self.marks else "build"

    def mark(self, name: str) -> None:
        self.marks.append((len(self.events), name))

    def alloc(self, nbytes: int, stream: int = 0) -> int:
        """A synthetic block of ``nbytes`` on ``stream`` (0: the default stream); its key (negative, never a
        storage's)."""
        key = self._next
        self._next -= 1
        self._synthetic[key] = int(nbytes)
        if stream:
            self.streams[key] = stream
        self.events.append(("a", key, int(nbytes)))
        return key

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` at this point."""
        self.events.append(("e", 0, 0))

    def free(self, key: int) -> None:
        """Free a block :meth:`alloc` made. Raises KeyError for one not made or already freed."""
        self.events.append(("f", key, self._synthetic.pop(key)))

    def external(self, tensor) -> None:
        """A tensor made before the recording (a weight, a buffer): views of it are not allocations."""
        self._external.add(tensor.untyped_storage()._cdata)

    def track(self, tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._external:
            return
        entry = self._live.get(key)
        if entry is None:
            entry = self._live[key] = [int(storage.nbytes()), 0]
            if entry[0]:
                self.events.append(("a", key, entry[0]))
        entry[1] += 1
        weakref.finalize(tensor, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self._live[key]
            if entry[0]:
                self.events.append(("f", key, entry[0]))


def _mode(recorder: Recorder):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from dsdoctor.checks import cuda_workspace as cw

    device = cw.H200  # the GPU every calibration run used; the scratch sizes depend on its SM count
    aten = torch.ops.aten
    gemms = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.addbmm.default}
    reductions = {aten.sum.dim_IntList, aten.mean.dim}

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is aten._local_scalar_dense.default:
                return True if args[0].dtype == torch.bool else 1
            made = None  # the outputs in the order the GPU's kernel allocates them, where not their own order
            if func is aten.native_dropout.default:
                # CUDA's kernel: a bool mask, then the output, in that order (aten/src/ATen/native/cuda/Dropout.cu
                # dropout_cuda: `Tensor mask = at::empty_like(self, ...bool)` before `Tensor ret =
                # at::empty_like(self)`); the order decides which cached block each takes (trace-t8)
                out = (torch.empty_like(args[0]), torch.empty_like(args[0], dtype=torch.bool))
                made = [out[1], out[0]]
            elif func is aten.add.Tensor and _accumulates_in_place(args, kwargs):
                out = aten.add_.Tensor(args[0], args[1])  # the autograd engine's in-place accumulation
            else:
                out = func(*args, **(kwargs or {}))
            for t in made or tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type == "meta":
                    recorder.track(t)
            if func in gemms:
                # the first GEMM of a thread, once its output is allocated: its cuBLAS handle's workspace, kept
                # (the backward runs on the autograd engine's device thread, with a handle of its own)
                thread = "backward" if recorder.phase().endswith(":backward") else "main"
                if thread not in recorder._cublas:
                    recorder._cublas.add(thread)
                    recorder.alloc(cw.cublas_workspace_bytes(device))
            if func in reductions and isinstance(args[0], torch.Tensor) and args[0].dtype.is_floating_point:
                x = args[0]
                # sum.dim_IntList / mean.dim: a list of dimensions; None or [] reduces them all
                dims = [d % x.dim() for d in args[1]] if len(args) > 1 and args[1] else list(range(x.dim()))
                staging, semaphores = cw.reduce_staging_bytes(
                    tuple(x.shape), tuple(x.stride()), dims, x.element_size(),
                    8 if x.dtype == torch.float64 else 4, device)
                if staging:  # gpu_reduce_kernel's buffer and semaphores, for the one kernel
                    keys = (recorder.alloc(staging), recorder.alloc(semaphores))
                    recorder.free(keys[1])
                    recorder.free(keys[0])
            return out

    return Mode()


def _accumulates_in_place(args, kwargs) -> bool:
    """Whether an ``aten.add.Tensor`` is the autograd engine summing two gradients of one tensor that it would sum
    in place when no Python dispatch mode runs: ``accumulate`` in ``torch/csrc/autograd/input_buffer.cpp`` adds in
    place (``old_var.add_(var)``) when grad mode is off and it holds the last reference to ``old_var`` and its
    storage (``can_accumulate_inplace``: non-overlapping and dense, storage use count 1). Under a dispatch mode
    every tensor has a Python object, so the engine never finds itself the last holder and always allocates
    ``old_var + var``. Here the storage's use count is read from C++, less the Python storage object made to read
    it; a gradient that another function still holds (the one an addition's backward hands to both of its inputs)
    counts more, and is added out of place, as on the GPU. Checked against torch's profiler on the CPU (no mode):
    ``aten::add_`` exactly where this says so (tests/test_cuda_workspace.py)."""
    import torch
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    if torch.is_grad_enabled() or kwargs or len(args) != 2:
        return False
    old, new = args
    if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)) or old.shape != new.shape \
            or old.dtype != new.dtype or not dense(old):
        return False
    return torch._C._storage_Use_Count(old.untyped_storage()._cdata) == 2


@contextlib.contextmanager
def cuda_kernels():
    """``torch.nn.functional.scaled_dot_product_attention`` and ``dropout`` as the GPU's kernels allocate (module
    docstring)."""
    import torch

    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, is_causal, scale, mask_shape):
            # a boolean mask becomes an additive one in the query's dtype for the kernel, for the call only
            # (``convert_boolean_attn_mask``, aten/src/ATen/native/transformers/attention.cpp), in the forward and
            # again in the backward
            ctx.mask_shape = mask_shape
            converted = torch.empty(mask_shape, dtype=q.dtype, device=q.device) if mask_shape else None
            # the output has the values' head size (DeepSeek-V2's MLA: queries and keys 192, values 128)
            out = q.new_empty((*q.shape[:-1], v.shape[-1]))
            lse = torch.empty(q.shape[0], q.shape[1], q.shape[2], dtype=torch.float32, device=q.device)
            del converted
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad):
            q, k, v, _, _ = ctx.saved_tensors
            converted = torch.empty(ctx.mask_shape, dtype=q.dtype, device=q.device) if ctx.mask_shape else None
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            b, h, s, d = q.shape
            # the kernel's scratch: dq accumulated in fp32 and softmax's row sums (d + 1 floats a row), and, when
            # the key/value heads are fewer (grouped-query attention), dk and dv at the query's heads in 16 bits
            # before they are summed down (d floats' worth more), and 256 bytes more: the H200 traces of four such
            # models all show them
            gqa = k.shape[1] != h
            nbytes = b * h * s * (2 * d + 1 if gqa else d + 1) * 4 + (256 if gqa else 0)
            workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
            del workspace, converted
            return dq, dk, dv, None, None, None

    original = torch.nn.functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        # with a mask (a sliding window, a prefix) the GPU runs the memory-efficient kernel: the same outputs and
        # saved tensors; the mask itself is transformers' tensor, allocated before
        boolean = attn_mask is not None and attn_mask.dtype == torch.bool
        return Flash.apply(query, key, value, is_causal, scale, tuple(attn_mask.shape) if boolean else ())

    original_dropout = torch.nn.functional.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return input
        return torch.ops.aten.native_dropout(input, p, True)[0]  # what CUDA runs (aten/native/Dropout.cpp)

    torch.nn.functional.scaled_dot_product_attention = sdpa
    torch.nn.functional.dropout = dropout
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
        torch.nn.functional.dropout = original_dropout


def trace_steps(model, micro_batch: int, seq_len: int, steps: int = 3, loop: str = "engine",
                recorder: Recorder | None = None, between_steps=None, grad_hook=None) -> Recorder:
    """Record ``steps`` training steps of ``model`` (built on the meta device) on random token ids of shape
    (micro_batch, seq_len), labels = inputs, in ``loop``:

    - ``engine``: ``outputs = model(...); backward(outputs.loss)``, ``outputs`` alive until the next forward has
      returned (the tutorials' DeepSpeed loop);
    - ``engine-loss`` / ``trainer``: only the loss is kept.

    ``between_steps(recorder, step)`` runs after each backward (the optimizer step's allocations);
    ``grad_hook(recorder, param)`` runs when a parameter's gradient is accumulated (``register_post_accumulate_
    grad_hook``; DeepSpeed's ZeRO-1/2 copy it into a bucket and drop it)."""
    import torch

    recorder = recorder or Recorder()
    hooks = []
    if grad_hook is not None:
        for p in model.parameters():
            if p.requires_grad:
                hooks.append(p.register_post_accumulate_grad_hook(lambda p: grad_hook(recorder, p)))
    for tensor in list(model.parameters()) + list(model.buffers()):
        recorder.external(tensor)
    ids = torch.zeros(micro_batch, seq_len, dtype=torch.long, device="meta")
    held = None
    try:
        with cuda_kernels(), _mode(recorder):
            for step in range(steps):
                recorder.mark(f"step{step + 1}:forward")
                outputs = model(input_ids=ids, labels=ids)
                loss = outputs.loss
                if loop == "engine":
                    held = outputs  # the previous step's outputs die only now
                del outputs
                recorder.mark(f"step{step + 1}:backward")
                loss.backward()
                del loss
                recorder.mark(f"step{step + 1}:step")
                if between_steps is not None:
                    between_steps(recorder, step)
            del held
    finally:
        for h in hooks:
            h.remove()
    return recorder


# --- a whole run: the weights, DeepSpeed's ZeRO buffers, the steps ----------------------------------------

def build_for(setup, attn: str | None = None, lora_r: int = 8, prefix_tokens: int = 16):
    """The model on the meta device with ``setup``'s method applied and cast to its precision, as DeepSpeed's
    ``initialize`` casts it. ``attn``: an attention implementation to run instead of the
    model's own (what another transformers version ran), set past transformers' check; its softcapping dropped for
    SDPA, as transformers 5.17's SDPA path did.

    Raises:
        DsdoctorError: transformers cannot build the config (:func:`dsdoctor.models.structure.build_meta`), or peft
            refuses the method (:func:`dsdoctor.meta_count.apply_method`)."""
    import torch

    from dsdoctor.models.structure import build_meta

    model, _ = build_meta(dict(setup.arch.config))
    if attn:
        for module in model.modules():
            if getattr(module, "config", None) is not None and hasattr(module.config, "_attn_implementation"):
                module.config._attn_implementation_internal = attn
            if attn == "sdpa" and getattr(module, "attn_logit_softcapping", None) is not None:
                module.attn_logit_softcapping = None
    from dsdoctor.meta_count import apply_method

    model = apply_method(model, setup.method, lora_r=lora_r, lora_targets=setup.lora_targets,
                         lora_dropout=setup.lora_dropout, freeze_last=setup.freeze_last, prefix_tokens=prefix_tokens)
    model.to({"bf16": torch.bfloat16, "fp16": torch.float16}.get(setup.precision, torch.float32))
    if setup.grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if setup.method != "full":
            model.enable_input_require_grads()
    model.config.use_cache = False
    return model


def run_program(setup, attn: str | None = None, steps: int = 3, lora_r: int = 8, prefix_tokens: int = 16) -> Recorder:
    """The allocations of ``setup``'s whole run on one GPU, in order: the weights (one block per parameter, as
    ``from_config`` on the GPU makes them), DeepSpeed's ``initialize``, then ``steps`` steps in ``setup.launch``.

    DeepSpeed's blocks, mirrored from ``deepspeed/runtime/zero/stage_1_and_2.py`` (ZeRO-1/2) and
    ``runtime/fp16/fused_optimizer.py`` (ZeRO-0 with bf16/fp16), Ψ_t the trainable parameters, N the world size
    (checked against six H200 runs' own allocator traces, benchmarks/results/memory-loops/trace-t5):

    - the weights: one block per parameter; a tied output projection's own weight made and freed (``tie_weights``);
    - ``initialize``: ZeRO-1/2 empty the cache (``empty_cache()`` before flattening a group); the flat 16-bit copy
      of the trainable parameters (2Ψ_t; ZeRO-0 flattens clones of them); the parameters become views of it, their
      own blocks freed; a 16-bit clone of the partition turned into the fp32 master (4Ψ_t/N) and a zero fp32
      gradient (``initialize_optimizer_states``, freed); ZeRO-0 also makes Adam's moments there (2 x 4Ψ_t:
      FP16_Optimizer steps once at construction);
    - each backward: the reduction bucket (``reduce_bucket_size`` elements x 2 bytes, ``setup_buckets``) at the first
      gradient; each gradient copied into it and its own block freed (one larger than the bucket is kept to the next
      flush); a full bucket flushed into the gradient partition (2Ψ_t/N, ``copy_grads_in_partition``, made at the
      first flush). ZeRO-2 does this in the gradient hooks, ZeRO-1 at the end of backward in the group's order;
      the bucket is released at the end. ZeRO-0 keeps the gradients and allreduces them in buckets
      (``engine.allreduce_bucket``: transient flat copies);
    - each step: ZeRO-1/2 take each gradient of the partition in fp64 for the global norm, one at a time
      (``get_grad_norm_direct``, 8 bytes an element, freed), flatten the partition's gradients (2Ψ_t/N) and cast
      them to fp32 (4Ψ_t/N), freeing the 16-bit ones; ZeRO-0 casts each gradient to fp32, then flattens them
      (4Ψ_t); the first step of ZeRO-1/2 creates Adam's moments (2 x 4Ψ_t/N, FusedAdam's lazy state); the fp32
      gradient is freed.

    With ``offload_optimizer`` (ZeRO-1/2): the fp32 master is made on the host from a 16-bit clone of the
    partition (freed); ``temp_grad_buffer_for_gpu_offload`` (the largest trainable parameter, 16-bit) is kept; each
    flushed gradient's norm is taken in fp64 (``set_norm_for_param_grad_in_gpu``, 8 bytes an element) and it is cast
    to fp32 for the host (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``), both transient; no gradient
    partition, no fp32 gradient and no moments on the GPU. ZeRO-3: :mod:`dsdoctor.checks.zero3_program`.

    Raises:
        DsdoctorError: offload to NVMe (not modelled), or a config transformers cannot build."""
    from dsdoctor.report import DsdoctorError

    if "nvme" in (setup.offload_optimizer, setup.offload_param):
        raise DsdoctorError("the allocator replay models offload to the CPU, not to NVMe; NVMe offload is estimated "
                            "by the calibrated formulas only")
    model = build_for(setup, attn, lora_r, prefix_tokens)
    rec = Recorder()
    blocks = {}
    # ZeRO-3 under the HF Trainer: from_pretrained runs under zero.Init (transformers' is_deepspeed_zero3_enabled,
    # HfDeepSpeedConfig), so each weight is made as its partition and initialize moves nothing (DeepSpeed's engine
    # skips module.to(device) for a zero.Init model). At N = 1 a partition is the whole weight, and the replay keeps
    # the order of the H200 runs it is checked against (the model built before TrainingArguments, rounds 3-12)
    zero_init = setup.zero_stage == 3 and setup.launch == "trainer" and setup.world_size > 1
    params = {id(p) for p in model.parameters()}
    for p in list(model.parameters()) + list(model.buffers()):
        if id(p) not in blocks:
            blocks[id(p)] = (zero3_partition_block(setup, p, rec) if zero_init and id(p) in params
                             else rec.alloc(p.numel() * p.element_size()))
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and embed is not None and head.weight is embed.weight:
        # tied: the output projection's own weight, made by its nn.Linear, is freed when tie_weights() shares it
        rec.free(rec.alloc(head.weight.numel() * head.weight.element_size()))
    loop = "engine" if setup.launch == "engine" else "engine-loss"
    if setup.zero_stage == 3:
        return _run_zero3(setup, model, rec, blocks, steps, loop)
    trainable_params = [p for p in model.parameters() if p.requires_grad]
    offload = setup.offloaded
    n_world = setup.world_size if setup.zero_stage else 1
    psi = sum(p.numel() for p in trainable_params)
    part = -(-psi // n_world)
    wb = setup.weight_bytes
    rec.mark("initialize")
    if setup.zero_stage:  # stage_1_and_2.py __init__: empty_cache() before flattening each group
        rec.empty_cache()
    # the flat 16-bit copy; FP16_Optimizer (ZeRO-0) flattens clones of the parameters
    # (_flatten_dense_tensors([p.clone().detach() ...])), ZeRO-1/2 the parameters themselves
    clones = [rec.alloc(p.numel() * p.element_size()) for p in trainable_params] if not setup.zero_stage else []
    rec.alloc(wb * psi)
    for key in clones:
        rec.free(key)
    for p in trainable_params:  # the parameters become views of the flat copy
        rec.free(blocks[id(p)])
    clone = rec.alloc(wb * part)
    if not offload:
        rec.alloc(4 * part)  # fp32 master (partition); under offload it is made on the host from the clone
    rec.free(clone)
    if offload:  # temp_grad_buffer_for_gpu_offload: the largest parameter, kept
        rec.alloc(wb * max((p.numel() for p in trainable_params), default=0))
    else:
        zero_grad = rec.alloc(4 * part)  # initialize_optimizer_states
        if not setup.zero_stage:  # FP16_Optimizer steps once at construction: FusedAdam creates its moments
            rec.alloc(4 * part)
            rec.alloc(4 * part)
        rec.free(zero_grad)
    rbs = setup.reduce_bucket_size
    state = {"bucket": None, "partition": None, "first": True, "grads": [], "in_bucket": 0, "large": [], "sizes": []}

    def flush(r):  # reduce_ipg_grads: the bucket's gradients copied into the partition (copy_grads_in_partition)
        if offload:  # copy_grads_in_partition, per gradient: its norm in fp64 (set_norm_for_param_grad_in_gpu),
            # then a cast to fp32 copied to the host (async_inplace_copy_grad_to_fp32_buffer_from_gpu)
            for numel in state["sizes"]:
                r.free(r.alloc(8 * -(-numel // n_world)))
                r.free(r.alloc(4 * -(-numel // n_world)))
            state["sizes"].clear()
        elif state["in_bucket"] and state["partition"] is None:
            state["partition"] = r.alloc(wb * part)
        for p in state["large"]:
            p.grad = None
        state["large"].clear()
        state["in_bucket"] = 0

    def reduce_param(r, p):  # reduce_independent_p_g_buckets_and_remove_grads
        if state["bucket"] is None:  # setup_buckets: at the first gradient
            state["bucket"] = r.alloc(2 * rbs)
        if state["in_bucket"] + p.numel() > rbs:
            flush(r)
        if p.numel() > rbs:  # an oversized gradient bypasses the bucket: kept to the next flush
            state["large"].append(p)
        else:  # copied into the bucket, its own block freed
            p.grad = None
        state["in_bucket"] += p.numel()
        state["sizes"].append(p.numel())

    def grad_hook(r, p):
        if setup.zero_stage == 2:  # as each gradient is accumulated
            reduce_param(r, p)
        else:
            state["grads"].append(p)

    def between(r, step):
        if setup.zero_stage == 1:  # reduce_gradients at the end of backward, in the group's order
            with_grads = {id(p) for p in state["grads"]}
            for p in trainable_params:
                if id(p) in with_grads:
                    reduce_param(r, p)
            state["grads"].clear()
        if setup.zero_stage in (1, 2) and state["bucket"] is not None:  # the epilogue, then _release_ipg_buffers
            flush(r)
            r.free(state["bucket"])
            state["bucket"] = None
        elif not setup.zero_stage:  # the engine's allreduce of the gradients, in buckets (allreduce_bucket)
            filled = 0
            for p in state["grads"]:
                filled += p.numel()
                if filled >= rbs:
                    r.free(r.alloc(wb * filled))
                    filled = 0
            if filled:
                r.free(r.alloc(wb * filled))
        if offload:  # the host's Adam; the updated 16-bit partition is copied back into the flat buffer
            fp32 = None
        elif setup.zero_stage:
            # scaled_global_norm -> get_grad_norm_direct: each gradient of the partition in fp64 for its norm
            # (get_norm_dtype), one at a time, in the group's order
            offset = 0
            for p in trainable_params:
                share = max(0, min(offset + p.numel(), part) - offset)
                offset += p.numel()
                if share:
                    r.free(r.alloc(8 * share))
            flat = r.alloc(wb * part)
            fp32 = r.alloc(4 * part)
            r.free(flat)
        else:  # FP16_Optimizer.step: each gradient in fp32, then flattened (fused_optimizer.py)
            with_grads = {id(p) for p in state["grads"]}
            singles = [r.alloc(4 * p.numel()) for p in trainable_params if id(p) in with_grads]  # in group order
            fp32 = r.alloc(4 * part)
            for key in singles:
                r.free(key)
        if state["partition"] is not None:
            r.free(state["partition"])
            state["partition"] = None
        for p in state["grads"]:
            p.grad = None
        state["grads"].clear()
        if state["first"] and setup.zero_stage and not offload:  # FusedAdam's lazy state at the first step
            r.alloc(4 * part)
            r.alloc(4 * part)
        state["first"] = False
        if fp32 is not None:
            r.free(fp32)

    return trace_steps(model, setup.micro_batch, setup.seq_len, steps=steps, loop=loop,
                       recorder=rec, between_steps=between, grad_hook=grad_hook)


def zero3_partition_block(setup, p, rec: Recorder):
    """The block of ``p`` made under ``zero.Init`` (``partition_parameters.py`` ``_partition_param``): its partition of
    ceil(numel/N) elements on the GPU, none under parameter offload for a parameter above the persistence threshold
    (its partition is on the host); a persistent one is also gathered whole at N > 1. The key, or None."""
    from dsdoctor.checks import zero3_program as z3

    persistent = p.numel() <= z3.PERSISTENCE_THRESHOLD
    if setup.offload_param != "none" and not persistent:
        return None
    key = rec.alloc(p.element_size() * z3._ceil(p.numel(), setup.world_size))
    if persistent and setup.world_size > 1:
        rec.alloc(p.element_size() * p.numel())
    return key


def _run_zero3(setup, model, rec: Recorder, blocks: dict, steps: int, loop: str) -> Recorder:
    """ZeRO-3's run (:mod:`dsdoctor.checks.zero3_program`) around the recorded steps."""
    from dsdoctor.checks import zero3_program as z3

    state = z3.initialize(setup, model, rec, blocks, zero_init=setup.launch == "trainer" and setup.world_size > 1)
    gatherer, handles = None, []
    if setup.world_size > 1 or setup.offload_param != "none":
        gatherer = z3.Gatherer(rec, setup.world_size, setup.weight_bytes, setup.prefetch_bucket_size,
                               setup.max_live_parameters, setup.max_reuse_distance)
        handles = z3.install_gather_hooks(model, gatherer)
    try:
        with z3.zero3_linear():
            return trace_steps(model, setup.micro_batch, setup.seq_len, steps=steps, loop=loop, recorder=rec,
                               between_steps=lambda r, step: z3.step(setup, state, r, gatherer),
                               grad_hook=z3.grad_hook(setup, state))
    finally:
        for h in handles:
            h.remove()


def replay(recorder: Recorder, capacity: int | None = None):
    """(the :class:`dsdoctor.checks.allocator.CachingAllocator` after ``recorder``'s events: its peaks in bytes, the
    phase in which its allocated peak fell).

    Raises:
        dsdoctor.checks.allocator.OutOfMemory: the run does not fit in ``capacity`` bytes; its ``phase`` attribute
            names the phase (``initialize``, ``step1:backward``, ...) of the request that failed."""
    from dsdoctor.checks.allocator import CachingAllocator, OutOfMemory

    sim = CachingAllocator(capacity)
    handles: dict[int, int] = {}
    marks = dict(recorder.marks)
    phase = peak_phase = "build"
    for i, (action, key, nbytes) in enumerate(recorder.events):
        phase = marks.get(i, phase)
        try:
            if action == "a":
                handles[key] = sim.malloc(nbytes, recorder.streams.get(key, 0))
                if sim.allocated == sim.peak_allocated:
                    peak_phase = phase
            elif action == "e":
                sim.empty_cache()
            elif key in handles:
                sim.free(handles.pop(key))
        except OutOfMemory as exc:
            exc.phase = phase
            raise
    return sim, peak_phase


@dataclass
class Replayed:
    """What :func:`replay_setup` found: peak reserved and allocated bytes on one GPU (None when it ran out of
    memory), the phase that ran out, the events replayed, the seconds it took, the phase of the allocated peak.
    When it ran out of memory, ``unbounded_reserved`` / ``unbounded_allocated``: the peaks of the same events
    replayed with no capacity (bytes), so that a caller can tell an out-of-memory that the allocations themselves
    cause (``unbounded_allocated`` past the capacity) from one that the cached blocks' fragmentation causes."""

    reserved: int | None
    allocated: int | None
    oom_phase: str | None
    events: int
    seconds: float
    peak_phase: str | None = None
    unbounded_reserved: int | None = None
    unbounded_allocated: int | None = None


def replay_setup(setup, capacity: int | None = None, attn: str | None = None, lora_r: int = 8,
                 prefix_tokens: int = 16) -> Replayed:
    """:func:`run_program` of ``setup`` replayed through the allocator model with ``capacity`` bytes for the
    caching allocator (the GPU's memory less the CUDA context; None: unlimited).

    Raises:
        DsdoctorError: what :func:`run_program` refuses."""
    import time

    from dsdoctor.checks.allocator import OutOfMemory
    from dsdoctor.meta_count import _quiet

    start = time.time()
    with _quiet():
        recorder = run_program(setup, attn=attn, lora_r=lora_r, prefix_tokens=prefix_tokens)
    try:
        sim, peak_phase = replay(recorder, capacity)
    except OutOfMemory as exc:
        free, free_phase = replay(recorder, None)
        return Replayed(None, None, exc.phase, len(recorder.events), time.time() - start, free_phase,
                        free.peak_reserved, free.peak_allocated)
    return Replayed(sim.peak_reserved, sim.peak_allocated, None, len(recorder.events), time.time() - start,
                    peak_phase)
