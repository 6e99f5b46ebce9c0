"""Where the run's training data is, and how many samples it holds (for the step count of the ETA), without
tokenizing: a JSON lines file, a JSON array (or ``{"data": [...]}``), or LLaMA-Factory's dataset names looked up
in ``dataset_dir/dataset_info.json`` (``file_name``; ``data/`` by default, as LLaMA-Factory's ``DataArguments``)."""

from __future__ import annotations

import json
from pathlib import Path

from dsdoctor.preflight.plan import Plan, _resolve

MAX_COUNT_BYTES = 2 << 30


def dataset_files(plan: Plan) -> tuple[list[Path], list[str], list[str]]:
    """(the local data files the run reads, notes on the names that are not local files here (hub datasets),
    the names that are missing: a LLaMA-Factory name its dataset_info.json does not define ("Undefined dataset ... in
    dataset_info.json", LLaMA-Factory's data/parser.py), a file it names that is not there, a path with a data
    file's extension that does not exist). LLaMA-Factory names (``dataset: alpaca_en_demo,identity``) go through
    ``dataset_info.json``."""
    found = plan.settings.get("data")
    missing: list[str] = []
    if found is None:
        return [], ["no dataset named on the line, in its config file or in the script's literals"], missing
    value = found.value
    names = value if isinstance(value, list) else str(value).split(",") if plan.launch.tool == "llamafactory" \
        else [value]
    files, notes = [], []
    info, info_path = None, None
    if plan.launch.tool == "llamafactory":
        base = Path(str(plan.settings.value("dataset_dir", "data")))
        info_path, _ = _resolve(str(base / "dataset_info.json"), plan.workdir,
                                plan.script_path.parent if plan.script_path else None)
        if info_path is not None:
            try:
                info = json.loads(info_path.read_text())
            except (OSError, ValueError):
                notes.append(f"{info_path}: not readable JSON")
            base = info_path.parent
    for name in names:
        if isinstance(name, dict):  # axolotl: datasets: [{path: ..., type: alpaca}]
            name = name.get("path")
        if not isinstance(name, str) or not name.strip():
            continue
        name = name.strip()
        if isinstance(info, dict) and isinstance(info.get(name), dict):
            entry = info[name]
            if entry.get("file_name"):
                path, _ = _resolve(str(entry["file_name"]), base)
                if path is None:
                    missing.append(f"dataset {name}: {entry['file_name']} not found under {base}")
                else:
                    files.append(path)
            else:
                notes.append(f"dataset {name}: from the hub ({entry.get('hf_hub_url') or entry.get('ms_hub_url')}),"
                             " not read here")
            continue
        if isinstance(info, dict) and "/" not in name and not name.endswith((".json", ".jsonl")):
            missing.append(f"dataset {name} ({found.source}): not defined in {info_path} (LLaMA-Factory stops: "
                           f"\"Undefined dataset {name} in dataset_info.json\")")
            continue
        path, how = _resolve(name, plan.workdir, plan.script_path.parent if plan.script_path else None)
        if path is not None and how:  # the run opens it from the launch directory, not the script's
            missing.append(f"dataset {name} ({found.source}): not in {plan.workdir}, where the launch runs; {how}")
            continue
        if path is None and name.endswith((".json", ".jsonl", ".parquet", ".csv")):
            missing.append(f"dataset {name} ({found.source}): no such file in {plan.workdir}")
        elif path is None:
            notes.append(f"dataset {name} ({found.source}): not a local file here (a hub dataset, or missing)")
        elif path.is_file():
            files.append(path)
        else:
            notes.append(f"dataset {name}: a directory; not counted")
    return files, notes, missing


def count_samples(path: Path) -> int | None:
    """Samples in a JSON lines file (non-blank lines) or a JSON array (``{"data": [...]}`` too); None when the file
    is neither, or larger than 2 GiB."""
    try:
        if path.stat().st_size > MAX_COUNT_BYTES:
            return None
        with path.open("rb") as f:
            head = f.read(4096).lstrip()
            if head.startswith(b"["):
                f.seek(0)
                data = json.load(f)
                return len(data) if isinstance(data, list) else None
            if head.startswith(b"{") and path.suffix == ".json":
                f.seek(0)
                try:
                    data = json.load(f)
                except ValueError:
                    data = None
                if isinstance(data, dict) and isinstance(data.get("data"), list):
                    return len(data["data"])
            f.seek(0)
            return sum(1 for line in f if line.strip())
    except (OSError, ValueError, RecursionError):
        return None
