"""Write the message catalogues ``dsdoctor explain`` names a library's own messages with: ``<package>.json`` beside
this file, one per package, each template with the versions it appears in.

    python -m dsdoctor.messages.generate                       # add the installed versions of every package
    python -m dsdoctor.messages.generate --source deepspeed=/tmp/deepspeed-0.9.5/deepspeed@0.9.5 \\
        --source transformers=/tmp/tf-4.38.2/transformers@4.38.2 --nccl /tmp/nccl/src@2.28.9

Sources: a package's own directory (``site-packages/deepspeed``, or an unpacked sdist's ``deepspeed/``; a
DeepSpeed sdist's top-level ``op_builder/`` and ``csrc/`` are read as ``ops/op_builder/`` and ``ops/csrc/``, where the
wheel installs them: the C++ ops' own checks, :func:`dsdoctor.messages.mine.mine_cpp`), or NVIDIA/nccl's ``src/``. ``pip download --no-deps --no-binary :all: deepspeed==X`` (or ``--only-binary :all:`` for a pure-Python
wheel) fetches a version's source; keep only the generated catalogue, never the sources. A version already in a
catalogue is mined again and replaces its old entries. Mining is :mod:`dsdoctor.messages.mine`.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

from dsdoctor.messages.mine import Template, _is_script, mine_binary, mine_cpp, mine_nccl, mine_python

HERE = Path(__file__).parent

#: What is mined of each package (paths relative to the package's directory; a prefix ending in "/" is a folder):
#: the parts a DeepSpeed fine-tuning run goes through (issue 14's list, and the modules beside them that raise into a
#: run: accelerator selection, communication, checkpoints, MoE, pipeline).
SCOPE = {
    "deepspeed": ("runtime/", "ops/op_builder/", "ops/adam/", "launcher/", "utils/", "comm/", "accelerator/",
                  "checkpoint/", "elasticity/", "moe/", "pipe/", "__init__.py", "env_report.py"),
    # deepspeed.py: the integration's place before transformers 4.32 (integrations/deepspeed.py since)
    "transformers": ("integrations/deepspeed.py", "deepspeed.py", "trainer.py", "modeling_utils.py",
                     "training_args.py",
                     "dynamic_module_utils.py", "integrations/peft.py", "trainer_utils.py", "trainer_pt_utils.py",
                     "utils/import_utils.py", "modeling_flash_attention_utils.py", "data/data_collator.py",
                     "configuration_utils.py", "tokenization_utils_base.py", "hf_argparser.py", "utils/versions.py",
                     # the Auto classes: a model type or class the installed transformers does not know
                     "models/auto/"),
    "peft": ("",),
    "accelerate": ("accelerator.py", "state.py", "utils/", "commands/launch.py", "commands/config/", "data_loader.py",
                   "checkpointing.py", "big_modeling.py"),
    "torch": ("distributed/", "utils/cpp_extension.py", "cuda/__init__.py", "cuda/memory.py",
              "nn/parallel/distributed.py", "utils/checkpoint.py", "utils/data/dataloader.py", "nn/modules/module.py",
              "nn/functional.py",
              # torch.load: a checkpoint refused by weights_only (the default since torch 2.6)
              "serialization.py", "_weights_only_unpickler.py",
              # mixed precision: the gradient scaler of every fp16 run under torch's AMP (the Trainer's fp16 without
              # DeepSpeed), cuda/amp/ where torch < 2.3 had it
              "amp/", "cuda/amp/"),
}
#: The training tools our users launch DeepSpeed through (the brief: LLaMA-Factory, axolotl; ms-swift, TRL and
#: OpenRLHF in their threads), mined from a downloaded wheel (``pip download --no-deps llamafactory``; not installed,
#: not a dependency), so that their own refusals ("DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized
#: models.") are named by their origin too. Only the parts that configure and run training.
TOOLS = {
    "llamafactory": ("",),
    "swift": ("arguments/", "cli/", "trainers/", "rlhf_trainers/", "tuners/", "model/", "utils/", "dataset/",
              "template/", "megatron/", "sequence_parallel/", "loss/", "optimizers/"),
    "trl": ("",),
    "openrlhf": ("",),
    "axolotl": ("",),
    # the repositories' own training frameworks users run DeepSpeed (or their GPUs) through in the threads: InternLM's
    # xtuner, FastChat (fschat), unsloth and its unsloth_zoo, verl
    "xtuner": ("",),
    "fastchat": ("train/", "model/", "data/", "conversation.py", "utils.py", "constants.py"),
    "unsloth": ("",),
    "unsloth_zoo": ("",),
    "verl": ("",),
}


def _version_key(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def mine_source(package: str, root: Path, classes: dict[str, str] | None = None,
                scripts: set[str] | None = None) -> tuple[list[Template], int, int]:
    """(templates, dynamic, files) of ``package`` at ``root`` (see the module docstring); ``classes`` receives the
    module-level classes of the files mined: {name: file}; ``scripts`` the package's files that run as scripts (of
    the whole package, not only the files mined)."""
    if package == "nccl":
        return mine_nccl(root)
    only = {**SCOPE, **TOOLS}[package]
    templates, dynamic, files = mine_python(root, package, () if only == ("",) else only, classes)
    if scripts is not None:
        for path in sorted(root.rglob("*.py")):
            try:
                if _is_script(ast.parse(path.read_text(encoding="utf-8", errors="replace"))):
                    scripts.add(path.relative_to(root).as_posix())
            except (SyntaxError, ValueError):
                continue
    csrc = root / "ops" / "csrc"  # DeepSpeed's C++/CUDA ops: installed under ops/csrc/, an sdist's top-level csrc/
    csrc = csrc if csrc.is_dir() and not csrc.is_symlink() else root.parent / "csrc"
    if package == "deepspeed" and csrc.is_dir():
        more, d, f = mine_cpp(csrc, package, "ops/csrc/")
        templates, dynamic, files = templates + more, dynamic + d, files + f
    builder = root / "ops" / "op_builder"
    top = root.parent / "op_builder"
    if package == "deepspeed" and (not builder.is_dir() or builder.is_symlink()) and top.is_dir():
        more, d, f = mine_python(top, package)
        for t in more:
            t.file = f"ops/op_builder/{t.file}"
        templates, dynamic, files = templates + more, dynamic + d, files + f
    return templates, dynamic, files


def config_pydantic(package: str, root: Path) -> int | None:
    """The pydantic API DeepSpeed's config models use in the source at ``root`` (``runtime/config_utils.py``): 2 where
    it imports ``ConfigDict`` (pydantic 2's model config), else 1 (``deepspeed.pydantic_v1`` or pydantic < 2); None for
    another package. A float for an int field is an error under 2 (``int_from_float``) and truncated under 1."""
    path = root / "runtime" / "config_utils.py"
    if package != "deepspeed" or not path.exists():
        return None
    return 2 if "ConfigDict" in path.read_text(encoding="utf-8", errors="replace") else 1


def merge(package: str, version: str, templates: list[Template], dynamic: int, files: int,
          extra: dict | None = None, classes: dict[str, str] | None = None, scripts: set[str] | None = None) -> dict:
    """The catalogue of ``package`` with ``version``'s ``templates`` added (or replacing that version's), written to
    ``<package>.json``; returns it."""
    path = HERE / f"{package}.json"
    data = json.loads(path.read_text()) if path.exists() else {"package": package, "versions": [], "stats": {},
                                                                 "templates": []}
    entries: dict[tuple, dict] = {}
    for t in data["templates"]:
        t["versions"] = [v for v in t["versions"] if v != version]
        if t["versions"]:
            entries[(t["kind"], t.get("exception", ""), json.dumps(t["parts"]))] = t
    newest = not data["versions"] or _version_key(version) >= max(map(_version_key, data["versions"]))
    seen = set()
    for t in templates:
        key = (t.kind, t.exception, json.dumps(t.parts))
        if key in seen:
            continue
        seen.add(key)
        entry = entries.get(key)
        if entry is None:
            entries[key] = entry = {"kind": t.kind, "exception": t.exception, "parts": t.parts, "file": t.file,
                                    "line": t.line, "function": t.function, "versions": []}
        elif newest:  # file, line and function of the newest version
            entry.update(file=t.file, line=t.line, function=t.function)
        entry["versions"] = sorted(set(entry["versions"]) | {version}, key=_version_key)
    known = data.get("classes", {})  # class name -> {"file": in the newest version defining it, "versions": [...]}
    for name in list(known):
        known[name]["versions"] = [v for v in known[name]["versions"] if v != version]
        if not known[name]["versions"]:
            del known[name]
    for name, file in (classes or {}).items():
        entry = known.setdefault(name, {"file": file, "versions": []})
        if newest:
            entry["file"] = file
        entry["versions"] = sorted(set(entry["versions"]) | {version}, key=_version_key)
    if known:
        data["classes"] = dict(sorted(known.items()))
    if scripts:  # the package's files that run as scripts, of every version mined
        data["scripts"] = sorted(set(data.get("scripts", [])) | scripts)
    data["versions"] = sorted(set(data["versions"]) | {version}, key=_version_key)
    data["stats"][version] = {"files": files, "templates": len(seen), "dynamic_skipped": dynamic, **(extra or {})}
    data["stats"] = dict(sorted(data["stats"].items(), key=lambda kv: _version_key(kv[0])))
    data["templates"] = sorted(entries.values(), key=lambda e: (e["file"], e["line"], e["kind"]))
    data["generated_by"] = "python -m dsdoctor.messages.generate (dsdoctor/messages/mine.py)"
    path.write_text(json.dumps(data, indent=0, ensure_ascii=False) + "\n")
    return data


def installed(package: str) -> tuple[Path, str] | None:
    """(the installed ``package``'s directory, its version), or None."""
    from importlib.metadata import PackageNotFoundError, version

    from dsdoctor.files import installed_package_dir

    root = installed_package_dir(package)
    if root is None:
        return None
    try:
        return root, version(package).split("+")[0]  # 2.13.0+cpu: 2.13.0
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dsdoctor.messages.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--source", action="append", default=[], metavar="PKG=DIR@VERSION")
    parser.add_argument("--nccl", action="append", default=[], metavar="SRC_DIR@VERSION")
    parser.add_argument("--no-installed", action="store_true", help="only the sources given")
    args = parser.parse_args(argv)
    jobs: list[tuple[str, Path, str]] = []
    if not args.no_installed:
        for package in SCOPE:
            found = installed(package)
            if found:
                jobs.append((package, *found))
    for spec in args.source:
        package, _, rest = spec.partition("=")
        where, _, version = rest.rpartition("@")
        if package not in {**SCOPE, **TOOLS} or not where or not version:
            parser.error(f"--source {spec!r}: give PKG=DIR@VERSION with PKG one of {', '.join({**SCOPE, **TOOLS})}")
        jobs.append((package, Path(where), version))
    for spec in args.nccl:
        where, _, version = spec.rpartition("@")
        jobs.append(("nccl", Path(where), version))
    for package, root, version in jobs:
        if not root.is_dir():
            sys.exit(f"{root}: not a directory")
        classes: dict[str, str] = {}
        scripts: set[str] = set()
        templates, dynamic, files = mine_source(package, root, classes, scripts)
        api = config_pydantic(package, root)
        data = merge(package, version, templates, dynamic, files, {"config_pydantic": api} if api else None, classes,
                     scripts)
        kinds = Counter(t.kind for t in templates)
        print(f"{package} {version}: {len(templates)} templates from {files} files ({dynamic} dynamic skipped; "
              f"{dict(kinds)}); catalogue now {len(data['templates'])} templates over {data['versions']}")
        if package == "torch" and not args.no_installed and installed("torch") == (root, version):
            cpp = write_torch_cpp(root, version)
            print(f"torch {version} C++: " + ", ".join(f"{n} {len(v)} messages" for n, v in cpp["libraries"].items()))


#: torch's compiled libraries whose C++ messages are mined (:func:`mine.mine_binary`), those of the installed build
TORCH_LIBRARIES = ("libtorch_cpu.so", "libc10.so", "libtorch_python.so", "libtorch_cuda.so", "libc10_cuda.so")


def write_torch_cpp(root: Path, version: str) -> dict:
    """``torch_cpp.json``: the C++ messages of the installed torch's libraries (``root``: the package's directory),
    ``{"package": "torch", "versions": [version], "libraries": {name: [sentence, ...]}}``; replaces the file (one
    version: the libraries of other versions are not at hand)."""
    libs = [root / "lib" / name for name in TORCH_LIBRARIES if (root / "lib" / name).exists()]
    data = {"package": "torch", "kind": "cpp", "versions": [version], "libraries": mine_binary(libs),
            "generated_by": "python -m dsdoctor.messages.generate (dsdoctor/messages/mine.py mine_binary)"}
    (HERE / "torch_cpp.json").write_text(json.dumps(data, indent=0, ensure_ascii=False) + "\n")
    return data


if __name__ == "__main__":
    main()
