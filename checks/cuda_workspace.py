"""Scratch blocks that CUDA kernels take from PyTorch's caching allocator, which the meta device never makes.

Two kinds show in an H200 run's own allocator trace and not in a meta-device recording
(benchmarks/results/memory-loops/trace-t6, Qwen3-4B full fine-tuning, ZeRO-3, micro batch 4, sequence 2048):

- **A reduction's staging buffer.** ``gpu_reduce_kernel`` (``aten/src/ATen/native/cuda/Reduce.cuh``) reduces
  across thread blocks when one output needs many inputs: a weight's gradient summed over the b x s tokens
  (``sum_to_size`` in a norm's or a bias's backward) is such a reduction. It allocates
  ``ReduceConfig::global_memory_size()`` bytes and ``semaphore_size()`` bytes, for the one kernel. In that trace
  each RMSNorm weight of width 2,560 over 8,192 tokens took a 132.5 MiB block, and Qwen3's per-head ``q_norm``
  (width 128, over 262,144 rows) took 132.0 MiB. :func:`reduce_staging_bytes` mirrors ``setReduceConfig`` of torch
  2.13, and gives both sizes to the byte.
- **cuBLAS's workspace.** One block per (cuBLAS handle, stream) is allocated at the first GEMM and kept
  (``cublas_handle_stream_to_workspace`` in ``aten/src/ATen/cuda/CublasHandlePool.cpp``). Handles are per thread,
  so the forward (the main thread) gets one and the backward (the autograd engine's device thread) gets another.
  The size is :func:`cublas_workspace_bytes`: 32 MiB on an H200, twice in that trace, one in each pass.

The kernel's launch shape depends on the GPU. :class:`KernelDevice` holds the two figures it reads; by default they
are those of the H100/H200 (SXM) that the calibration runs used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelDevice:
    """What ``setReduceConfig`` and the cuBLAS workspace read off ``cudaDeviceProp``. The defaults are an H100 SXM or
    H200's: 132 SMs, 2,048 threads per SM, compute capability 9.0. An A100 has 108 SMs and 2,048 threads; sm_86 and
    sm_89 cards have 1,536 threads per SM."""

    multiprocessors: int = 132
    max_threads_per_multiprocessor: int = 2048
    major: int = 9


H200 = KernelDevice()


def cublas_workspace_bytes(device: KernelDevice = H200) -> int:
    """Bytes of the workspace torch gives each (cuBLAS handle, stream), allocated through the caching allocator at
    the handle's first GEMM. This is the default of ``getChosenWorkspaceSize`` in
    ``aten/src/ATen/cuda/CublasHandlePool.cpp``, with no ``CUBLAS_WORKSPACE_CONFIG`` set: ``:4096:8`` (8 x 4 MiB =
    32 MiB) on compute capability 9.0 and up, which is what an H200 trace shows. Earlier GPUs get ``:4096:2:16:8``,
    that is 2 x 4 MiB + 8 x 16 KiB = 8,320 KiB."""
    return 8 * 4096 * 1024 if device.major >= 9 else 2 * 4096 * 1024 + 8 * 16 * 1024


def _last_pow2(n: int) -> int:
    """``last_pow2`` of Reduce.cuh: the largest power of two <= n, at least 1."""
    return max(1, 1 << (max(int(n), 1).bit_length() - 1))


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _iterator_layout(shape, strides, reduce_dims, out_elem: int, in_elem: int):
    """The (shape, output strides, input strides) in bytes that TensorIterator gives a reduction of a tensor of
    ``shape`` / ``strides`` (elements) over ``reduce_dims``. Dimensions are ordered fastest first, with the reduced
    ones in front (``reorder_dimensions``: the output's zero strides move the reduced dimensions to the front; then
    the strides, ascending). Adjacent dimensions are then merged where every operand allows it
    (``coalesce_dimensions``). Dimensions of size 1 are dropped first, as coalescing would merge them anyway."""
    reduce = set(reduce_dims)
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    out_strides, step = {}, out_elem
    for d in reversed(range(len(shape))):  # the output: contiguous over the kept dimensions
        if d in reduce:
            out_strides[d] = 0
        else:
            out_strides[d] = step
            step *= shape[d]
    ops = [out_strides, {d: strides[d] * in_elem for d in range(len(shape))}]

    def should_swap(d0: int, d1: int) -> int:
        for i, st in enumerate(ops):
            s0, s1 = st[d0], st[d1]
            if i == 0 and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(reversed(keep))
    for i in range(1, len(perm)):  # TensorIteratorBase::reorder_dimensions' insertion sort
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    dims = [[shape[d], ops[0][d], ops[1][d]] for d in perm]
    merged: list[list[int]] = []
    for size, so, si in dims:
        if merged and merged[-1][1] * merged[-1][0] == so and merged[-1][2] * merged[-1][0] == si:
            merged[-1][0] *= size
        else:
            merged.append([size, so, si])
    return merged


def reduce_staging_bytes(shape, strides, reduce_dims, in_elem: int, acc_elem: int = 4,
                         device: KernelDevice = H200) -> tuple[int, int]:
    """(staging buffer, semaphores) in bytes that ``gpu_reduce_kernel`` allocates to reduce a tensor of ``shape``
    with element ``strides``, over the dimensions ``reduce_dims``. The element is ``in_elem`` bytes (the output's
    too), and the accumulator ``acc_elem`` bytes (float for a sum or mean of bf16, fp16 or fp32). Both are (0, 0)
    when the reduction stays within one thread block.

    This mirrors ``setReduceConfig``, ``ReduceConfig::global_memory_size`` and ``semaphore_size`` of
    ``aten/src/ATen/native/cuda/Reduce.cuh`` (torch 2.13), for a 32-bit-indexable input (numel < 2^31; a larger one
    is split into sub-iterators, which is not mirrored: (0, 0)). The input is taken as aligned to 16 bytes, as the
    caching allocator's blocks are (``get_output_vec_size`` also reads the address)."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0 or numel >= 2 ** 31:
        return 0, 0
    dims = _iterator_layout(shape, strides, reduce_dims, in_elem, in_elem)
    n_reduce = sum(1 for _, so, _ in dims if so == 0)
    num_outputs = 1
    for size, so, _ in dims:
        if so != 0:
            num_outputs *= size
    inputs_per_output = numel // num_outputs
    input_vec_size = 4  # vt0, the vector width of a vectorised input
    if dims:
        on_fastest = n_reduce == len(dims) or dims[0][2] < dims[n_reduce][2]
        if on_fastest:
            dim0, dim1, fastest = inputs_per_output, num_outputs, dims[0][2]
        else:
            dim0, dim1, fastest = num_outputs, inputs_per_output, dims[n_reduce][2]
    else:
        on_fastest, dim0, dim1, fastest = True, 1, 1, in_elem
    output_vec_size = 1
    if fastest == in_elem:
        if on_fastest and dim0 >= 128 and n_reduce == 1:
            dim0 //= input_vec_size  # vectorize_input
        elif not on_fastest:
            vec = 4  # get_output_vec_size: the first output dimension and every other input stride divisible
            for n in [dims[n_reduce][0]] + [si // in_elem for j, (_, _, si) in enumerate(dims) if j != n_reduce]:
                while n % vec:
                    vec //= 2
            output_vec_size = vec
            dim0 //= output_vec_size
    max_threads = 512 // output_vec_size  # mnt_wrapper<T>::MAX_NUM_THREADS for every real dtype
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    block_width = min(dim0_pow2, 32)
    block_height = min(dim1_pow2, max_threads // block_width)
    block_width = min(dim0_pow2, max_threads // block_height)
    num_threads = block_width * block_height
    step_input = step_output = 1
    input_mult = [0, 0, 0]
    if not dims or on_fastest:
        input_mult[0], step_input = step_input, step_input * block_width
    else:
        step_output *= block_width
    values_per_thread = _div_up(inputs_per_output, step_input)
    min_values_per_thread, max_values_per_thread = 16, 256
    if values_per_thread >= min(block_height * 16, max_values_per_thread):  # split_across_warps
        input_mult[1], step_input = step_input, step_input * block_height
    else:
        step_output *= block_height
    target_grid = device.multiprocessors * (device.max_threads_per_multiprocessor // num_threads)
    grid_x = _div_up(num_outputs // output_vec_size, step_output)
    values_per_thread = _div_up(inputs_per_output, step_input)
    ctas = 1
    if input_mult[1] != 0 and values_per_thread >= max_values_per_thread and grid_x <= target_grid:
        ctas = max(min(_div_up(target_grid, grid_x), _div_up(values_per_thread, min_values_per_thread)),
                   _div_up(values_per_thread, max_values_per_thread))
    if ctas <= 1:
        return 0, 0
    staging = acc_elem * num_outputs * ctas
    if input_mult[0] == 0:  # no block-x reduce: each lane keeps its own partial
        staging *= block_width * output_vec_size
    return staging, 4 * grid_x
