"""The scratch blocks CUDA kernels take from the caching allocator (checks/cuda_workspace.py) and the autograd
engine's in-place gradient sums (checks/step_trace.py), against what an H200 run's own allocator trace and torch's
profiler show."""

import collections
import gzip
import json
from pathlib import Path

import pytest

TRACE = (Path(__file__).parents[1] / "benchmarks/results/memory-loops/trace-t6"
         / "t6-q3-4b-full-z3-mb4-s2048-engine.json.gz")


@pytest.fixture(scope="module")
def transients():
    """{bytes: count} of the blocks the H200 run (Qwen3-4B full fine-tuning, ZeRO-3, micro batch 4, sequence
    2048) allocated and freed at once, with nothing in between."""
    rows = json.loads(gzip.open(TRACE).read())["large_pool_events"]["rows"]
    out = collections.Counter()
    for (_, a, addr, size, *_), (_, b, addr2, *_) in zip(rows, rows[1:]):
        if a == "a" and b == "f" and addr == addr2:
            out[size] += 1
    return out


def test_a_weight_gradients_reduction_over_the_tokens_takes_the_staging_buffer_the_h200_allocated(transients):
    """Qwen3-4B: hidden 2,560; 32 query and 8 key/value heads of 128; 4 x 2,048 tokens. The RMSNorm weights' gradient
    sums over the tokens (2 a layer and the final norm: 73 a step over 3 steps), ``q_norm``'s and ``k_norm``'s over
    tokens and heads (36 a step each)."""
    from dsdoctor.checks.cuda_workspace import reduce_staging_bytes

    norm, _ = reduce_staging_bytes((4, 2048, 2560), (2048 * 2560, 2560, 1), (0, 1), in_elem=2)
    q_norm, _ = reduce_staging_bytes((4, 2048, 32, 128), (2048 * 4096, 4096, 128, 1), (0, 1, 2), in_elem=2)
    k_norm, _ = reduce_staging_bytes((4, 2048, 8, 128), (2048 * 1024, 1024, 128, 1), (0, 1, 2), in_elem=2)
    assert (norm, q_norm, k_norm) == (138_936_320, 138_412_032, 67_108_864)
    assert transients[norm] == 3 * 73 and transients[q_norm] == 3 * 36
    assert transients[k_norm] >= 3 * 36  # 64 MiB is also the size of the query projection's output


def test_a_reduction_within_one_block_takes_no_staging_buffer():
    from dsdoctor.checks.cuda_workspace import KernelDevice, reduce_staging_bytes

    # RMSNorm's mean over the hidden size (the fastest dimension): one block a row
    assert reduce_staging_bytes((4, 2048, 2560), (2048 * 2560, 2560, 1), (2,), in_elem=4) == (0, 0)
    # a short reduction (64 tokens) fits in one block's threads
    assert reduce_staging_bytes((64, 2560), (2560, 1), (0,), in_elem=2) == (0, 0)
    # fewer SMs, fewer blocks a column: an A100 (108 SMs) stages less than an H200 (132)
    a100, _ = reduce_staging_bytes((8192, 2560), (2560, 1), (0,), 2, device=KernelDevice(multiprocessors=108))
    h200, _ = reduce_staging_bytes((8192, 2560), (2560, 1), (0,), 2)
    assert 0 < a100 < h200 == 138_936_320


def test_cublas_workspaces_are_one_per_thread_kept_as_the_h200_trace_shows():
    """32 MiB at the first GEMM of the forward and at the first of the backward (the autograd engine's thread), never
    freed: the H200 trace shows these two 32 MiB blocks in step 1 only."""
    from test_step_trace import _tiny_setup

    from dsdoctor.checks.cuda_workspace import cublas_workspace_bytes
    from dsdoctor.checks.step_trace import run_program

    rec = run_program(_tiny_setup(zero_stage=1))
    ws = cublas_workspace_bytes()
    assert ws == 32 * 2 ** 20
    freed = {k for a, k, _ in rec.events if a == "f"}
    marks = sorted(rec.marks)
    kept = []
    for i, (a, key, n) in enumerate(rec.events):
        if a == "a" and n == ws and key not in freed:
            kept.append(next(name for start, name in reversed(marks) if start <= i))
    assert kept == ["step1:forward", "step1:backward"]


CASES = {
    "one tensor read twice": lambda x: (lambda y: y.sin() + y.cos())(x * 2),
    "a residual": lambda x: (lambda h: h + h.sin() * 3)(x * 2),
    "two residuals": lambda x: (lambda h: (lambda h2: h2 + h2.exp())(h + h.sin()))(x * 2),
    "read three times": lambda x: (lambda y: y.sin() + y.cos() + y.exp())(x * 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gradient_sums_are_in_place_exactly_where_autograd_sums_in_place_without_a_dispatch_mode(case):
    """torch's profiler (no Python dispatch mode) sees the engine's sums in the backward on the CPU: ``aten::add_``
    where it held the last reference, ``aten::add`` where another function still held the gradient. The recording
    on the meta device decides the same for each, and makes no block for a sum in place."""
    import torch
    from torch.profiler import profile

    from dsdoctor.checks import step_trace

    f = CASES[case]
    x = torch.randn(32, 32, requires_grad=True)
    loss = f(x).sum()
    with profile() as prof:
        loss.backward()
    names = [e.name for e in prof.events()]
    expected = (names.count("aten::add_"), names.count("aten::add"))

    decisions = [0, 0]
    inner = step_trace._accumulates_in_place

    def spy(args, kwargs):
        decision = inner(args, kwargs)
        decisions[0 if decision else 1] += 1
        return decision

    def backward_blocks(rule) -> int:
        rec = step_trace.Recorder()
        x = torch.zeros(32, 32, device="meta", requires_grad=True)
        rec.external(x)
        step_trace._accumulates_in_place = rule
        try:
            with step_trace._mode(rec):
                loss = f(x).sum()
                decisions[:] = [0, 0]  # the forward's own additions are not sums of gradients
                start = len(rec.events)
                loss.backward()
        finally:
            step_trace._accumulates_in_place = inner
        return sum(1 for a, _, n in rec.events[start:] if a == "a" and n == 32 * 32 * 4)

    always_new = backward_blocks(lambda args, kwargs: False)
    assert backward_blocks(spy) == always_new - expected[0]
    assert tuple(decisions) == expected and sum(expected) >= 1


T7 = Path(__file__).parents[1] / "benchmarks/results/memory-loops/trace-t7"


def _phase_blocks(record: dict, phase: str) -> list[tuple[str, int]]:
    """(action, bytes) of the blocks over 1 MiB a GPU run allocated ("a") and freed ("f") in ``phase``."""
    import bisect

    marks = record["phase_marks_us"]
    starts = [m[0] for m in marks]
    out = []
    for t, action, _, size, *_ in record["large_pool_events"]["rows"]:
        k = bisect.bisect_right(starts, t)
        if k and marks[k - 1][1] == phase and action in "af" and size > 2 ** 20:
            out.append((action, size))
    return out


@pytest.mark.parametrize("shape, gqa, measured", [
    ((2, 32, 2048, 96), False, 50_855_936),  # Phi-3-mini: 32 query and 32 key/value heads (trace-t7)
    ((4, 32, 2048, 128), True, 269_484_288),  # Qwen3-4B: 32 query heads, 8 key/value heads (trace-t6)
])
def test_the_flash_backward_scratch_is_the_block_the_h200_allocated(shape, gqa, measured):
    """One transient block in attention's backward: dq in fp32 and the row sums, plus dk and dv at the query's
    heads under grouped-query attention. The sizes are those of the H200 runs' own traces."""
    import torch

    from dsdoctor.checks.step_trace import Recorder, _mode, cuda_kernels

    b, h, s, d = shape
    q = torch.zeros(b, h, s, d, dtype=torch.bfloat16, device="meta", requires_grad=True)
    k = torch.zeros(b, h // 4 if gqa else h, s, d, dtype=torch.bfloat16, device="meta", requires_grad=True)
    rec = Recorder()
    with cuda_kernels(), _mode(rec):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=gqa)
        start = len(rec.events)
        out.sum().backward()
    events = rec.events[start:]
    transient = [n for (a, key, n), (b, key2, _) in zip(events, events[1:]) if a + b == "af" and key == key2]
    assert measured in transient


def test_zero2s_step_makes_the_blocks_the_h200_made():
    """Gemma-2-2B full fine-tuning, ZeRO-2, one H200 (trace-t7): the step's blocks in order. Each gradient is taken
    in fp64 for the global norm (``get_grad_norm_direct``: 4,500 MiB for the 256k x 2,304 embedding, then each
    layer's), flattened, cast to fp32, stepped. The GPU run frees the bucket and the oversized embedding gradient
    at the end of its backward; the replay at the start of the step: those two frees are the only difference."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import memory_loops

    from dsdoctor.checks.step_trace import run_program

    record = json.loads(gzip.open(T7 / "t7-g2-2b-full-z2-mb4-engine.json.gz").read())
    measured = _phase_blocks(record, "step1:step")
    setup = memory_loops.setup_of(record["point"])
    rec = run_program(setup, attn="sdpa")
    start = next(i for i, name in rec.marks if name == "step1:step")
    stop = next(i for i, name in rec.marks if name == "step2:forward")
    replayed = [(a, n) for a, _, n in rec.events[start:stop] if a in "af" and n > 2 ** 20]
    # the oversized embedding gradient (256,000 x 2,304 in bf16), then the bucket (reduce_bucket_size x 2 bytes)
    assert replayed[:2] == [("f", 589_824_000 * 2), ("f", 500_000_000 * 2)]
    assert replayed[2:] == measured
    assert measured[0] == ("a", 589_824_000 * 8)  # the embedding's gradient in fp64


def test_a_boolean_attention_mask_is_converted_for_the_kernel_as_the_h200_did():
    """Phi-3's sliding window gives SDPA a boolean (b, 1, s, s) mask; aten converts it to the query's dtype for the
    kernel, for the call only: a 16 MiB transient per layer at micro batch 2 and sequence 2048, in the forward (the
    H200 run's trace-t7 holds 32 a step, one per layer)."""
    import torch

    from dsdoctor.checks.step_trace import Recorder, _mode, cuda_kernels

    record = json.loads(gzip.open(T7 / "t7-phi3-full-z3-offboth-mb2-engine.json.gz").read())
    size = 2 * 2048 * 2048 * 2
    assert _phase_blocks(record, "step2:forward").count(("a", size)) >= 32
    q = torch.zeros(2, 32, 2048, 96, dtype=torch.bfloat16, device="meta", requires_grad=True)
    mask = torch.zeros(2, 1, 2048, 2048, dtype=torch.bool, device="meta")
    rec = Recorder()
    with cuda_kernels(), _mode(rec):
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        made = [n for a, _, n in rec.events if a == "a"]
        freed = [n for a, _, n in rec.events if a == "f"]
        del out
    assert size in made and size in freed  # made and freed within the call
    # no boolean mask, no conversion
    rec = Recorder()
    with cuda_kernels(), _mode(rec):
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert size not in [n for a, _, n in rec.events if a == "a"]


def test_every_module_prefetches_under_parameter_offload_as_deepspeeds_coordinator_does():
    """DeepSpeed hooks every module, and each fetch prefetches up to prefetch_bucket_size elements, even for a module
    with nothing of its own to gather. At the start of step 2 of the Phi-3 run (trace-t7) the H200 had gathered the
    embedding and then five layer weights (o, qkv, gate_up, down and the next qkv: 141M elements, more than one
    50M bucket) before the first layer ran. The replay gathers the same five, by size, in the trace's order; the
    GPU's order within a prefetch is a Python set's."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import memory_loops

    from dsdoctor.checks.step_trace import run_program
    from dsdoctor.checks.zero3_program import ALLGATHER_STREAM

    record = json.loads(gzip.open(T7 / "t7-phi3-full-z3-offboth-mb2-engine.json.gz").read())
    measured = [size for a, size in _phase_blocks(record, "step2:forward")[:6]]
    rec = run_program(memory_loops.setup_of(record["point"]))
    start = next(i for i, name in rec.marks if name == "step2:forward")
    first = [(n, rec.streams.get(key, 0)) for a, key, n in rec.events[start:] if a == "a" and n > 2 ** 20][:6]
    # the first six blocks of the step are the gathers, before any activation (the default stream's)
    assert [stream for _, stream in first] == [ALLGATHER_STREAM] * 6
    assert sorted(n for n, _ in first) == sorted(measured)
    assert first[0][0] == measured[0] == 32064 * 3072 * 2  # the embedding first
