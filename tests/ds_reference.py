"""The source of truth for the differential test: real ``deepspeed.initialize`` and one training step on a tiny
model, on the CPU, in this process (gloo, world size 1).

``run_real(config, client_optimizer)`` returns ``None`` when DeepSpeed trains a step with the config, else
``"<ExceptionType>: <message>"``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import socket

_READY = False


def _init_once() -> None:
    global _READY
    if _READY:
        return
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    import deepspeed

    with contextlib.redirect_stdout(io.StringIO()):
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    for name in ("DeepSpeed", "deepspeed", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    from deepspeed.utils import logger

    logger.setLevel(logging.CRITICAL)
    _READY = True


def tiny_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def run_real(config: dict, client_optimizer: bool = False) -> str | None:
    """``deepspeed.initialize``, then one optimizer step (gradient_accumulation_steps micro batches of forward,
    ``engine.backward``, ``engine.step``, as a training loop does); the exception raised, or None."""
    _init_once()
    import deepspeed
    import torch

    model = tiny_model()
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs = {"model": model, "model_parameters": params, "config": copy.deepcopy(config)}
    if client_optimizer:
        kwargs["optimizer"] = torch.optim.AdamW(params, lr=1e-3)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            engine, *_ = deepspeed.initialize(**kwargs)
            dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
            for _ in range(engine.gradient_accumulation_steps()):  # one whole optimizer step
                x = torch.randn(engine.train_micro_batch_size_per_gpu(), 16, dtype=dtype)
                loss = engine(x).float().pow(2).mean()
                engine.backward(loss)
                engine.step()
    except BaseException as exc:  # AssertionError, TypeError, pydantic ValidationError, SystemExit ...
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    finally:
        with contextlib.suppress(Exception):
            engine.destroy()
    return None
