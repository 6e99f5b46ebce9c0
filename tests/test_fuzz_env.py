"""Fuzz `dsdoctor env --from REPORT.json` (issue 12): saved reports of every shape, from a real one mutated to
hostile ones. The promises of tests/fuzzing.py hold for each: no traceback, no internal error, exit 0/1/2, one line
on exit 2, the input unchanged."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import EXAMPLES, budget, run

SECTIONS = ["versions", "toolchain", "gpu", "host", "network", "deep"]
KEYS = ["torch", "torch_cuda", "deepspeed", "deepspeed_prebuilt_ops", "deepspeed_built_with", "nvcc_cuda", "gcc",
        "ninja", "TORCH_CUDA_ARCH_LIST", "build_locks", "gpus", "driver_cuda", "topology", "dev_shm", "memlock",
        "output_dir_free", "MASTER_ADDR", "MASTER_PORT", "addresses", "interfaces", "route_to_master", "euid",
        "capability", "name", "index", "processes", "memory_total", "throttle_reasons", "ecc_uncorrected",
        "nvlinks_active", "cuda_available", "deepspeed_accelerator", "deepspeed_ops_compatible", "stale", "path"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                    st.text(max_size=30), st.sampled_from(["9.0a", "12.4", "2.5.1+cu124", "0.14.0", "sm_90", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
                      max_leaves=12)
facts = st.dictionaries(st.sampled_from(SECTIONS), st.one_of(values, st.dictionaries(st.sampled_from(KEYS), values,
                                                                                      max_size=8)), max_size=6)
documents = st.one_of(
    st.builds(lambda f: {"command": "env", "result": {"facts": f}}, facts),
    st.builds(lambda f: {"result": f}, values),
    values,
)


@budget()
@given(doc=documents)
def test_env_from_never_crashes(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("env") / "r.json"
    path.write_text(json.dumps(doc))
    run(["env", "--from", path, "--format", "json"], inputs=[path])


@budget(max(20, EXAMPLES // 5))
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_env_from_bytes_never_crash(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("env") / "r.json"
    path.write_bytes(raw)
    run(["env", "--from", path], inputs=[path])
