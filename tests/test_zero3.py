"""ZeRO-3's gathered parameters (checks/zero3.py) against the real engine: 2 CPU ranks over gloo, a tiny Llama,
the parameters DeepSpeed holds gathered when the forward pass has returned, for reuse distances from 0 to past the
model, with and without gradient checkpointing, tied and untied."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor.checks.zero3 import gathered_at_loss
from dsdoctor.models import arch_of_config

SETTINGS = [[0, True, False], [3_000_000, True, False], [5_000_000, True, False], [5_000_000, False, False],
            [4_000_000, True, True], [1_000_000_000, True, True]]
CONFIG = dict(model_type="llama", vocab_size=8000, hidden_size=256, intermediate_size=688, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=4)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_gathered_at_loss_matches_deepspeed_on_two_ranks(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_port()), str(Path(__file__).with_name("zero3_residency_rank.py")),
                           json.dumps(SETTINGS)], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(SETTINGS)
    for row in rows:
        arch = arch_of_config({**CONFIG, "tie_word_embeddings": row["tied"]}, "tiny", "test")
        first, *later = row["gathered"]
        assert first == 0  # the first step records the trace and releases every module after use
        assert later[0] == later[1]
        predicted = gathered_at_loss(arch, row["reuse"], row["ckpt"])
        # norms (256 elements each) are spread over the linears in the model; everything else is exact
        assert abs(predicted - later[0]) <= 17 * 256, (row, predicted)
    by_setting = {(r["reuse"], r["ckpt"], r["tied"]): r["gathered"][1] for r in rows}
    assert by_setting[(0, True, False)] == 0
    assert by_setting[(3_000_000, True, False)] == 8000 * 256  # only the output projection, reused at once
    assert by_setting[(1_000_000_000, True, True)] > 8_000_000  # the whole model stays gathered


def test_gathered_at_loss_grows_with_the_reuse_distance_up_to_the_model():
    from dsdoctor.models import resolve_arch

    arch = resolve_arch("qwen3-8b")
    values = [gathered_at_loss(arch, r) for r in (0, 10**8, 5 * 10**8, 10**9, 10**10, 10**11)]
    assert values == sorted(values) and values[0] == 0
    assert values[-1] >= arch.total_params - 10**7  # everything but the norms, once past the model
    # the default 1e9: the untied output projection only (622 M), reused at once; the last layer is 2 x 622 M away
    assert values[1] == values[3] == arch.lm_head_params == 151936 * 4096
    tied = resolve_arch("qwen3-1.7b")  # tied: the embedding plus the last layers within 1e9 of their reuse
    assert abs(gathered_at_loss(tied) - tied.embedding_params - 3 * tied.layer_params) < 10**5
