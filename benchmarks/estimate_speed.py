"""Wall time of `dsdoctor estimate` (the installed console script, a fresh process each time, as a user or CI runs
it). Goals (issue 4): a registry model <= 0.3 s (no torch import on that path); --model PATH of a known
architecture <= 3 s. A local config.json is counted analytically when every key is modeled or proven neutral
(dsdoctor.models.unmodeled_keys); one with another key is counted by transformers on the meta device (peft applied),
cached per config.json: both paths are timed, cold (empty cache) and cached. Issue 13: any other architecture
transformers implements is read off its model on the meta device (dsdoctor.models.structure), cached per
config.json; goals: a registry name <= 0.3 s, that meta path <= 6 s cold and <= 0.3 s cached.

    python benchmarks/estimate_speed.py --repeat 5 > benchmarks/results/estimate-speed.txt
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dsdoctor.models import REGISTRY  # noqa: E402


def timed(argv: list[str], repeat: int, env: dict | None = None) -> list[float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})})
        runs.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr}")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only-local", action="store_true", help="only the local config.json cases")
    args = parser.parse_args()
    exe = shutil.which("dsdoctor")
    if args.only_local:
        return local_cases(exe, args)
    registry = []
    for name in REGISTRY:
        # DeepSeek-V2's low-rank attention has no q/v pair and peft no default for it: name the targets
        targets = ["--lora-targets", "q_proj,o_proj"] if REGISTRY[name][1]["model_type"] == "deepseek_v2" else []
        registry += timed([exe, "estimate", "--model", name, "--method", "lora", *targets, "--gpu-mem", "80",
                           "--compare", "--json", "-"], args.repeat)
    # full fine-tuning with no GPU given or seen: the common cards side by side, each with the search for the fastest
    # setup that fits it (every stage, offload, checkpointing and each micro batch that divides 16)
    searched = []
    for name in REGISTRY:
        searched += timed([exe, "estimate", "--model", name, "--micro-batch", "16", "--json", "-"],
                          args.repeat, {"CUDA_VISIBLE_DEVICES": ""})
    print(f"$ python benchmarks/estimate_speed.py --repeat {args.repeat}")
    print(f"registry models ({len(REGISTRY)} x {args.repeat}, --method lora --compare): median "
          f"{statistics.median(registry):.3f} s, max {max(registry):.3f} s (goal <= 0.3 s)")
    print(f"registry models ({len(REGISTRY)} x {args.repeat}, full, no GPU: the common cards, each searched): median "
          f"{statistics.median(searched):.3f} s, max {max(searched):.3f} s (goal <= 0.3 s)")
    # what a saved config.json carries besides the sizes (as in the Qwen2.5 and Llama 3 repositories)
    saved = {"architectures": ["ForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
             "initializer_range": 0.02, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
             "rope_scaling": None, "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("qwen2.5-7b", "llama-3-8b"):
            for label, extra in (("as saved", {}), ("with an unmodeled key", {"num_experts": 4})):
                folder = Path(tmp) / f"{name}-{len(extra)}"
                folder.mkdir()
                (folder / "config.json").write_text(json.dumps({**saved, **REGISTRY[name][1], **extra}))
                for method in ("full", "lora"):
                    argv = [exe, "estimate", "--model", str(folder), "--method", method, "--gpu-mem", "80",
                            "--json", "-"]
                    cold = []
                    for _ in range(args.repeat):  # an empty parameter-count cache each time
                        env_cache = Path(tmp) / "cache"
                        shutil.rmtree(env_cache, ignore_errors=True)
                        cold += timed(argv, 1, {"XDG_CACHE_HOME": str(env_cache)})
                    warm = timed(argv, args.repeat, {"XDG_CACHE_HOME": str(Path(tmp) / "cache")})
                    counting = json.loads(subprocess.run(argv, capture_output=True, text=True).stdout)["result"][
                        "counting"].split(":")[0]
                    print(f"--model PATH ({name} config.json {label}, {method}; counting: {counting}): cold median "
                          f"{statistics.median(cold):.3f} s, max {max(cold):.3f} s; cached median "
                          f"{statistics.median(warm):.3f} s, max {max(warm):.3f} s (goal <= 3 s)")

    local_cases(exe, args)


#: architectures transformers implements that no registry row has: their config class's default template
#: (dsdoctor/models/template.py default_templates); with a flag the template does not cover, the meta path itself.
#: Sizes after the hub configs named (for timing: the structure is read off whatever the sizes are).
UNSHIPPED = {
    "olmo2 (sizes after allenai/OLMo-2-1124-7B)": {
        "model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "granite (sizes after ibm-granite/granite-3.1-8b-instruct)": {
        "model_type": "granite", "hidden_size": 4096, "intermediate_size": 12800, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49155, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
    "starcoder2 (sizes after bigcode/starcoder2-7b)": {
        "model_type": "starcoder2", "hidden_size": 4608, "intermediate_size": 18432, "num_hidden_layers": 32,
        "num_attention_heads": 36, "num_key_value_heads": 4, "vocab_size": 49152, "max_position_embeddings": 16384,
        "torch_dtype": "bfloat16"},
}


def local_cases(exe: str, args) -> None:
    """Issue 13: a local config.json of architectures outside the analytic families: a registry row as saved (the
    shipped structure), tokens added and a layer fewer, another MLP width and fewer key/value heads (the row's shape
    template, dsdoctor.models.template), and architectures no row has (transformers' model built on the meta
    device)."""
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for name in ("qwen3-8b", "gemma-2-9b", "qwen3-30b-a3b", "phi-3-mini-4k-instruct", "glm-4-9b-chat-hf"):
            row = REGISTRY[name][1]
            cases += [(name, "as saved, = the registry row: shipped structure", row, 0.3),
                      (name, "with 64 tokens added and a layer fewer: shipped structure rewritten",
                       {**row, "vocab_size": row["vocab_size"] + 64,
                        "num_hidden_layers": row["num_hidden_layers"] - 1}, 0.3),
                      (name, "another MLP width and half the key/value heads: shape template",
                       {**row, "intermediate_size": row["intermediate_size"] - 256,
                        "num_key_value_heads": row["num_key_value_heads"] // 2}, 0.3)]
        cases += [(name, "no registry row: its class's default template", config, 0.3)
                  for name, config in UNSHIPPED.items()]
        cases += [(name, "with attention biases (a flag no template covers): structure read off the meta model",
                   {**config, "attention_bias": True}, 6) for name, config in UNSHIPPED.items() if name.startswith("olmo2")]
        for number, (name, label, config, goal) in enumerate(cases):
            folder = Path(tmp) / f"case-{number}"
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(config))
            argv = [exe, "estimate", "--model", str(folder), "--method", "lora", "--gpu-mem", "80", "--json", "-"]
            cold = []
            for _ in range(args.repeat):
                env_cache = Path(tmp) / "cache"
                shutil.rmtree(env_cache, ignore_errors=True)
                cold += timed(argv, 1, {"XDG_CACHE_HOME": str(env_cache)})
            warm = timed(argv, args.repeat, {"XDG_CACHE_HOME": str(Path(tmp) / "cache")})
            print(f"--model PATH ({name} config.json {label}, lora): cold median "
                  f"{statistics.median(cold):.3f} s, max {max(cold):.3f} s (goal <= {goal} s); cached median "
                  f"{statistics.median(warm):.3f} s, max {max(warm):.3f} s (goal <= 0.3 s)", flush=True)


if __name__ == "__main__":
    main()
