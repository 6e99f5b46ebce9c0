"""Produce the corpus's real logs: each failure made for real, with the real DeepSpeed, torch, transformers and peft on
this machine's CPU (two ranks where the failure is distributed), launched the way users launch them, and the
combined output kept as ``cases/logs/<name>/log.txt`` with this machine's details replaced (paths, host name, user).

    python cases/logs/produce.py [NAME ...]     # all of them by default; about two minutes (one op build)
    python cases/logs/produce.py build-lock-stale   # dsdoctor smoke twice, about three minutes (see below)

The logs that need a GPU or a situation this machine cannot make (an NCCL watchdog timeout after 30 minutes, a CUDA
out-of-memory, a V100) are written by hand from the public reports and the exact message formats of the code that
prints them; their expected.json says so (``"made": "by hand"``) and names its sources.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from dsdoctor.checks.network import free_port  # noqa: E402
from dsdoctor.launch import launcher_command  # noqa: E402

MODEL = """
import torch, deepspeed
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
"""

SCRIPTS = {
    # DeepSpeed's batch assertion: a config written for one rank (16 = 2 x 8 on 8 GPUs was meant) run on 2
    "batch-assertion": (MODEL + """
import json, sys
config = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
""", "deepspeed"),
    # an HF Trainer template's "auto" values in a plain engine loop
    "auto-in-engine-loop": (MODEL + """
config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "gradient_clipping": "auto", "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
          "zero_optimization": {"stage": 2}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for step in range(2):
    loss = engine(torch.randn(4, 8)).pow(2).mean()
    engine.backward(loss)
    engine.step()
""", "deepspeed"),
    # a rank killed by the kernel (as the OOM killer does) while the others train
    "rank-sigkill": (MODEL + """
import os, signal, time
config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for step in range(1000):
    loss = engine(torch.randn(2, 8)).pow(2).mean()
    engine.backward(loss)
    engine.step()
    if step == 3 and int(os.environ["RANK"]) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
""", "deepspeed"),
    # the Trainer integration's mismatch list (transformers' own trainer_config_process/finalize)
    "trainer-mismatches": ("""
import torch
from transformers import TrainingArguments
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
          "fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}
args = TrainingArguments(output_dir="out", per_device_train_batch_size=16, gradient_accumulation_steps=1,
                         learning_rate=5e-5, report_to=[])
hf = HfTrainerDeepSpeedConfig(config)
hf.trainer_config_process(args)
hf.trainer_config_finalize(args, torch.nn.Linear(4, 4), 100)
""", "torchrun"),
    # LLaMA-style LoRA targets on a model with a fused attention projection
    "lora-targets-absent": ("""
from transformers import AutoConfig, AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
config = AutoConfig.for_model("gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=100)
model = AutoModelForCausalLM.from_config(config)
model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=8, target_modules=["q_proj", "v_proj"]))
""", "torchrun"),
    # a repository with its own modeling code, loaded without trust_remote_code in a job with no terminal
    "remote-code-prompt": ("""
import json, os, tempfile
from transformers import AutoModelForCausalLM
folder = tempfile.mkdtemp()
json.dump({"model_type": "chatglm", "architectures": ["ChatGLMModel"],
           "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                        "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration"}},
          open(os.path.join(folder, "config.json"), "w"))
model = AutoModelForCausalLM.from_pretrained(folder)
""", "torchrun"),
    # fp16 weights fed fp32 activations (a model loaded in half precision outside the engine's autocast)
    "dtype-mismatch": ("""
import torch
layer = torch.nn.Linear(8, 8).half()
print(layer(torch.randn(2, 8)))
""", "torchrun"),
    # a bf16 model's layer left in bf16 while the run computes in fp16 (an fp16 config for bf16 weights)
    "dtype-fp16-config-bf16-weights": ("""
import torch
layer = torch.nn.Linear(8, 8).to(torch.bfloat16)   # the checkpoint's dtype
print(layer(torch.randn(2, 8).half()))             # activations of an fp16 run
""", "torchrun"),
    # code written for another transformers version
    "import-error": ("""
from transformers import ChatGLMForConditionalGeneration
""", "torchrun"),
    # ZeRO-3 weights saved without gathering: empty placeholders loaded back
    "zero3-empty-weights": ("""
import torch
model = torch.nn.Linear(8, 8)
saved = {"weight": torch.empty(0), "bias": torch.empty(0)}
model.load_state_dict(saved)
""", "torchrun"),
    # the H200 image's TORCH_CUDA_ARCH_LIST=9.0a reaching DeepSpeed's op builder
    "arch-list-suffix": ("""
import os
os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
print("TORCH_CUDA_ARCH_LIST=" + os.environ["TORCH_CUDA_ARCH_LIST"])
from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder  # the CUDA builder, as on a GPU machine
builder = FusedAdamBuilder()
builder.jit_mode = True  # building at the first step, as FusedAdam does
builder.compute_capability_args()
""", "torchrun"),
    # rank 0 preprocesses longer than the process group's timeout while rank 1 waits in a collective (report 12's
    # pitfall; on the CPU the gloo backend's timeout stands in for NCCL's watchdog)
    "collective-timeout-gloo": ("""
import datetime, os, time
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
if dist.get_rank() == 0:
    for pct in range(0, 100, 20):
        print(f"Running tokenizer on dataset: {pct}%", flush=True)
        time.sleep(2)
dist.all_reduce(torch.ones(4))
""", "torchrun"),
    # the second node of two, whose MASTER_ADDR has no route from it (a network namespace with only loopback: run
    # as root; the store client retries until torchrun's rendezvous timeout, 10 s here)
    "rendezvous-unreachable": ("""
import torch.distributed as dist
dist.init_process_group("gloo")
""", "torchrun-node1-unreachable"),
    # the HF Trainer at a learning rate that blows the weights up: the loss turns NaN after the first step
    # (transformers 5 logs it as '0' with grad_norm 'nan'), and the run "finishes"
    "nan-loss-hf-trainer": ("""
import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments
torch.manual_seed(0)
config = AutoConfig.for_model("gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=100)
model = AutoModelForCausalLM.from_config(config)
data = [{"input_ids": torch.randint(0, 100, (16,)), "labels": torch.randint(0, 100, (16,))} for _ in range(64)]
args = TrainingArguments(output_dir="out", learning_rate=1e6, max_steps=8, logging_steps=1, use_cpu=True,
                         per_device_train_batch_size=4, report_to=[], save_strategy="no", max_grad_norm=0.0,
                         disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data).train()
""", "python"),
    # a zero_optimization key DeepSpeed's pydantic model refuses (a misspelled bucket size)
    "ds-config-invalid": (MODEL + """
config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
          "zero_optimization": {"stage": 2, "reduce_bucket_sise": 500000000}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
""", "deepspeed"),
    # a second job on a port another job's store holds (the runner holds it)
    "port-in-use": (MODEL + """
import torch.distributed as dist
dist.init_process_group("gloo")
""", "torchrun"),
    # an op JIT-built with no working compiler
    "op-build-failure": ("""
import os
os.environ["CXX"] = "/usr/bin/no-such-c++"
from deepspeed.ops.op_builder import CPUAdamBuilder
CPUAdamBuilder().load()
""", "python"),
}


def sanitize(text: str, work: str) -> str:
    """This machine's paths, host name, user and addresses replaced by neutral ones."""
    home = os.path.expanduser("~")
    sites = [p for p in sys.path if p.endswith("site-packages")]  # a venv's and the system's (--system-site-packages)
    for old, new in ((work, "/workspace/job"), (str(HERE.parents[1]), "/workspace/repo"),
                     *((site, "/opt/conda/lib/python3.11/site-packages") for site in sites),
                     (sys.prefix, "/opt/conda"), (home, "/home/user"), (tempfile.gettempdir(), "/tmp")):
        text = text.replace(old, new)
    text = re.sub(rf"\b{re.escape(socket.gethostname())}\b", "node0", text)
    text = re.sub(r"\b(?!127\.0\.0\.1)(?:\d{1,3}\.){3}\d{1,3}\b", "10.0.0.1", text)
    text = re.sub(r"/tmp/tmp\w+", "/tmp/job", text)
    return text


def produce(name: str) -> None:
    source, launcher = SCRIPTS[name]
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "train.py"
        script.write_text(textwrap.dedent(source))
        holder = socket.socket()
        holder.bind(("", 0))
        holder.listen(1)
        port = holder.getsockname()[1] if name == "port-in-use" else free_port()
        if name != "port-in-use":
            holder.close()
        if launcher == "python":
            cmd = [sys.executable, str(script)]
        elif launcher == "torchrun-node1-unreachable":
            cmd = ["unshare", "-n", "bash", "-c", f"ip link set lo up; exec {sys.executable} -m torch.distributed.run "
                   f"--nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 10.77.0.9 --master-port {port} "
                   f"--rdzv-conf timeout=10 {script}"]
        else:
            cmd = launcher_command(launcher, 2, port, script, [])
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
               "TORCH_EXTENSIONS_DIR": str(Path(work) / "ext")}
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        shown = " ".join(["deepspeed --num_gpus 2" if launcher == "deepspeed" else
                          "torchrun --nproc_per_node 2" if launcher == "torchrun" else
                          "torchrun --nnodes 2 --node_rank 1 --nproc_per_node 1 --master_addr 10.0.0.1 "
                          "--master_port 29500" if launcher.startswith("torchrun-") else "python", "train.py"])
        holder.close()
        log = f"$ {shown}\n" + sanitize(proc.stdout + proc.stderr, work).replace(str(port), "29500")
    folder = HERE / name
    folder.mkdir(exist_ok=True)
    (folder / "log.txt").write_text(log, encoding="utf-8")
    print(f"{name}: exit {proc.returncode}, {len(log.splitlines())} lines")


def produce_build_lock(name: str = "build-lock-stale") -> None:
    """The stale-build-lock hang (issue 12), for real: ``dsdoctor smoke`` once with a private TORCH_EXTENSIONS_DIR so
    that DeepSpeed JIT-builds its op (the CPU accelerator's deepspeed_shm_comm), then the lock a Ctrl-C during that
    build leaves behind (torch's FileBaton: ``<TORCH_EXTENSIONS_DIR>/<op>/lock``; with TORCH_EXTENSIONS_DIR set there
    is no ``py3X_cpu`` level), then smoke again with ``--timeout 40``: its ranks wait on the lock, silently, until
    smoke stops them. Keeps that run's ``train.log`` (log.txt) and its report as a user pipes it (``2>&1``:
    smoke-report.txt)."""
    with tempfile.TemporaryDirectory() as work:
        ext = Path(work) / "ext"
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext), "PYTHONUNBUFFERED": "1"}
        env.pop("MASTER_PORT", None)
        smoke = [sys.executable, "-m", "dsdoctor", "smoke", "--steps", "5"]
        first = subprocess.run(smoke + ["--out", str(Path(work) / "first")], env=env, cwd=work, capture_output=True,
                               text=True, timeout=1200)
        ops = sorted(p for p in ext.iterdir() if p.is_dir()) if ext.is_dir() else []
        if first.returncode != 0 or not ops:
            raise SystemExit(f"{name}: the first smoke did not build an op (exit {first.returncode})")
        for op in ops:
            (op / "lock").touch()  # what an interrupted build leaves behind
        out = Path(work) / "dsdoctor-smoke"
        second = subprocess.run(smoke + ["--timeout", "40", "--out", str(out)], env=env, cwd=work,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        log = (out / "train.log").read_text(encoding="utf-8", errors="replace")
        if "SignalException" not in log:
            raise SystemExit(f"{name}: the second smoke's log has no SignalException (exit {second.returncode})")
        folder = HERE / name
        folder.mkdir(exist_ok=True)
        (folder / "log.txt").write_text("$ TORCH_EXTENSIONS_DIR=$D dsdoctor smoke --steps 5 --timeout 40\n"
                                        + sanitize(log, work), encoding="utf-8")
        (folder / "smoke-report.txt").write_text(sanitize(second.stdout, work), encoding="utf-8")
    print(f"{name}: ops {[op.name for op in ops]}, second smoke exit {second.returncode}, "
          f"{len(log.splitlines())} lines")


if __name__ == "__main__":
    for name in sys.argv[1:] or [*SCRIPTS, "build-lock-stale"]:
        produce_build_lock(name) if name == "build-lock-stale" else produce(name)
