"""From a read launch line to the run it starts: world size and nodes, the script's kind of loop, the files it names,
and the values ``check``, ``estimate`` and the data audit take (:class:`Plan`).

World size follows each launcher's own rules:

- ``deepspeed`` (``deepspeed/launcher/runner.py`` ``main``): a hostfile (``--hostfile``, default ``/job/hostfile``)
  gives the nodes and their slots; without one, this node's GPUs; ``--num_gpus`` / ``--include localhost:0,1``
  select; ``CUDA_VISIBLE_DEVICES`` is honoured only when none of ``--include/--exclude/--num_gpus/--num_nodes``
  is given; ``--num_nodes`` > 1 without a hostfile and ``--num_gpus`` with ``--include`` are refused
  (ValueError) before any rank starts.
- ``torchrun`` (``torch/distributed/run.py``): ``--nproc_per_node`` (an integer, or ``gpu``/``auto``: this node's
  GPUs) times ``--nnodes`` (``MIN:MAX``: the maximum).
- ``accelerate launch``: ``--num_processes`` (all nodes together) or its ``--config_file``'s ``num_processes``;
  ``--num_machines``.
- ``python``: one process, whatever the GPUs.
- ``llamafactory-cli train``: torchrun over this node's GPUs (``NPROC_PER_NODE``, ``NNODES`` override it; older
  versions need ``FORCE_TORCHRUN=1`` for more than one GPU: LLaMA-Factory ``cli.py``); ``axolotl train``: accelerate
  over this node's GPUs.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from dsdoctor.preflight.cmdline import Launch
from dsdoctor.preflight.script import ScriptFacts, read_script
from dsdoctor.preflight.settings import Settings, as_bool, classify, parse_script_args
from dsdoctor.report import DsdoctorError, Finding

DEFAULT_HOSTFILE = "/job/hostfile"  # deepspeed/launcher/constants.py DLTS_HOSTFILE


@dataclass
class Plan:
    """The run a launch line starts, as far as the line, its files and the script's literals say.

    Attributes:
        world_size: processes in all (None when it depends on GPUs this machine cannot see).
        nodes: machines; gpus_per_node: processes per machine.
        kind: "trainer" (the HF Trainer builds the engine: the script uses a Trainer class, or the tool is
            LLaMA-Factory or axolotl) or "engine" (``deepspeed.initialize`` in the script, or unknown: the worse case).
        deepspeed: the DeepSpeed config's path (resolved against ``workdir``), or None.
        problems: findings about the line itself (a refused launcher option, a file that does not exist).
    """

    launch: Launch
    settings: Settings
    workdir: Path
    script_path: Path | None = None
    script: ScriptFacts | None = None
    world_size: int | None = None
    world_source: str = ""
    nodes: int = 1
    gpus_per_node: int | None = None
    kind: str = "engine"
    kind_source: str = "unknown: the engine loop assumed (the worse case for memory)"
    deepspeed: str | None = None
    deepspeed_source: str = ""
    problems: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def deepspeed_has(self, key: str) -> bool:
        """Whether the run's DeepSpeed config sets ``key`` to a number (not "auto")."""
        config = loaded_json(self.deepspeed) if self.deepspeed else None
        return isinstance(config, dict) and isinstance(config.get(key), (int, float)) and \
            not isinstance(config.get(key), bool)

    def to_dict(self) -> dict:
        shown = {name: {"value": s.value, "source": s.source} for name, s in self.settings.given.items()}
        return {"launch": self.launch.to_dict(), "workdir": str(self.workdir),
                "script": str(self.script_path) if self.script_path else None, "world_size": self.world_size,
                "world_size_source": self.world_source, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                "loop": self.kind, "loop_source": self.kind_source, "deepspeed": self.deepspeed,
                "deepspeed_source": self.deepspeed_source, "settings": shown, "unknown": self.settings.unknown,
                "notes": self.notes}


def _resolve(path: str, workdir: Path, also: Path | None = None) -> tuple[Path | None, str]:
    """``path`` against ``workdir`` (where the launch runs: DeepSpeed and the Trainer open it from there), then
    against ``also`` (the script's directory). (found path or None, how)."""
    candidate = Path(os.path.expanduser(path))
    if candidate.is_absolute():
        return (candidate if candidate.exists() else None), ""
    if (workdir / candidate).exists():
        return workdir / candidate, ""
    if also is not None and (also / candidate).exists():
        return also / candidate, f"found beside the script ({also}), not in {workdir} where the launch runs"
    return None, ""


def _read_mapping(path: Path) -> dict:
    """A YAML or JSON mapping (a tool's config file), as ``yaml.safe_load``. Raises DsdoctorError."""
    from dsdoctor.configfile import read_hf_args

    return read_hf_args(str(path), option="the config file")


def _gpus_here() -> int | None:
    from dsdoctor.hardware import visible_gpus

    seen = visible_gpus()
    return len(seen) if seen else None


def _int(value) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number


def _hostfile_slots(path: Path) -> dict[str, int] | None:
    """``host slots=N`` lines of a DeepSpeed hostfile (``runner.py`` ``_parse_hostfile``), or None when unreadable."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    slots = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"^(\S+)\s+slots\s*=\s*(\d+)$", line)
        if match:
            slots[match.group(1)] = int(match.group(2))
    return slots


def _visible_count(visible: str | None) -> int | None:
    """GPUs a CUDA_VISIBLE_DEVICES value leaves (``0,1,2,3`` -> 4); None when unset or empty."""
    if not visible or not visible.strip():
        return None
    return len([d for d in visible.split(",") if d.strip()])


def _world(plan: Plan, gpus: int | None, rules) -> None:
    """Fill world_size, nodes, gpus_per_node and the launcher's refusals (see the module docstring)."""
    launch, opts = plan.launch, plan.launch.options
    here = gpus if gpus is not None else _gpus_here()
    here_note = "" if gpus is not None or here is not None else "no GPU visible here: give --gpus N"
    every = f"every GPU of a node: --gpus {gpus}" if gpus is not None else "every GPU visible here"
    visible = launch.env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if launch.launcher == "deepspeed":
        num_gpus, num_nodes = _int(opts.get("num_gpus", -1)), _int(opts.get("num_nodes", -1))
        include, exclude = str(opts.get("include") or ""), str(opts.get("exclude") or "")
        hostfile = opts.get("hostfile") or DEFAULT_HOSTFILE
        resolved, _ = _resolve(str(hostfile), plan.workdir)
        pool = _hostfile_slots(resolved) if resolved else None
        if opts.get("hostfile") and resolved is None:
            plan.problems.append(rules.PRE014.finding(f"--hostfile {hostfile}: no such file",
                                                      title="The hostfile the line names does not exist"))
        if (num_gpus is not None and num_gpus >= 0 or num_nodes is not None and num_nodes >= 0) and (include or exclude):
            plan.problems.append(rules.PRE012.finding(
                f"--num_gpus/--num_nodes with --include/--exclude ({' '.join(launch.line[:8])})"))
        if not pool and num_nodes is not None and num_nodes > 1:
            plan.problems.append(rules.PRE011.finding(
                f"--num_nodes {num_nodes} and no hostfile ({hostfile} does not exist here)"))
        same = (not include and not exclude and num_gpus and visible is not None and
                [d.strip() for d in visible.split(",")] == [str(i) for i in range(num_gpus)])  # GPUs 0..N-1 anyway
        if visible is not None and not pool and not same and \
                (include or exclude or (num_gpus or -1) > 0 or (num_nodes or -1) > 1):
            given = " ".join(f"--{k} {v}" for k, v in opts.items() if k in ("num_gpus", "num_nodes", "include",
                                                                              "exclude"))
            plan.problems.append(rules.PRE013.finding(
                f"CUDA_VISIBLE_DEVICES={visible} with {given}: the launcher takes GPUs 0..N-1 instead",
                fix=f"Select those GPUs with --include localhost:{visible.replace(' ', '')} instead of "
                    "CUDA_VISIBLE_DEVICES and --num_gpus/--num_nodes."))
        if pool:
            per_node = list(pool.values())
            if num_nodes and num_nodes > 0:
                per_node = per_node[:num_nodes]
            if num_gpus and num_gpus > 0:
                per_node = [min(n, num_gpus) for n in per_node]
            plan.nodes, plan.gpus_per_node = len(per_node), max(per_node)
            plan.world_size, plan.world_source = sum(per_node), f"hostfile {resolved}: {pool}"
            return
        count = None
        if include.startswith("localhost:"):
            count, source = len(include.split(":", 1)[1].split(",")), f"--include {include}"
        elif num_gpus is not None and num_gpus > 0:
            count, source = num_gpus, f"--num_gpus {num_gpus}"
        elif visible is not None and not include and not exclude:
            count, source = len([d for d in visible.split(",") if d.strip()]), f"CUDA_VISIBLE_DEVICES={visible}"
        else:
            count, source = here, f"{every} (deepspeed's default)" if here else here_note
        if opts.get("hostfile") and not pool:  # the nodes are in a hostfile this machine does not have
            count, source = None, f"--hostfile {hostfile}: not readable here, so the nodes are not known"
        plan.nodes, plan.gpus_per_node = 1, count
        plan.world_size, plan.world_source = count, source
        if num_nodes is not None and num_nodes > 1:
            plan.nodes = num_nodes
            plan.world_size = None if count is None else count * num_nodes
        return
    if launch.launcher == "torchrun":
        nproc = str(opts.get("nproc_per_node", "1"))
        nnodes = str(opts.get("nnodes", "1"))
        nodes = _int(nnodes.split(":")[-1])
        per = _int(nproc) if nproc not in ("gpu", "auto", "cuda") else here
        if per is not None and per < 1:
            raise DsdoctorError(f"torchrun --nproc_per_node {nproc}: torchrun starts no process with it "
                                "(give a count, or gpu)")
        plan.nodes, plan.gpus_per_node = nodes or 1, per
        plan.world_size = None if per is None or nodes is None or opts.get("unexpanded") else per * nodes
        plan.world_source = (f"--nproc_per_node {nproc} x --nnodes {nnodes}" + (f" ({here_note})" if per is None else "")
                             + (f"; launcher options in {opts['unexpanded']} are not known here"
                                if opts.get("unexpanded") else ""))
        return
    if launch.launcher == "accelerate":
        config = {}
        if opts.get("config_file"):
            found, _ = _resolve(str(opts["config_file"]), plan.workdir)
            if found is None:
                plan.problems.append(rules.PRE014.finding(f"--config_file {opts['config_file']}: no such file",
                                                          title="The accelerate config the line names does not exist"))
            else:
                config = _read_mapping(found)
                plan.notes.append(f"accelerate config {found}")
                ds = config.get("deepspeed_config") if isinstance(config.get("deepspeed_config"), dict) else {}
                if ds.get("deepspeed_config_file"):
                    plan.settings.put("deepspeed_config_file", ds["deepspeed_config_file"], f"{found} deepspeed_config")
                if config.get("mixed_precision") in ("bf16", "fp16"):
                    plan.settings.put(config["mixed_precision"], True, f"{found} mixed_precision")
                if not ds.get("deepspeed_config_file"):  # accelerate builds the DeepSpeed config from these
                    for key in ("zero_stage", "gradient_accumulation_steps"):
                        if isinstance(ds.get(key), int):
                            plan.settings.put(key, ds[key], f"{found} deepspeed_config.{key}")
                    if ds:
                        plan.notes.append(f"{found}: accelerate builds the DeepSpeed config from its deepspeed_config "
                                          "fields (no file to check)")
        for option, name in (("deepspeed_config_file", "deepspeed_config_file"), ("zero_stage", "zero_stage"),
                             ("gradient_accumulation_steps", "gradient_accumulation_steps")):
            if opts.get(option) is not None:  # accelerate's own DeepSpeed options on the line
                from dsdoctor.preflight.settings import coerce

                plan.settings.put(name, coerce(opts[option]), f"line --{option}")
        if opts.get("mixed_precision") in ("bf16", "fp16"):
            plan.settings.put(opts["mixed_precision"], True, "line --mixed_precision")
        processes = _int(opts.get("num_processes", config.get("num_processes", 0))) or None
        machines = _int(opts.get("num_machines", config.get("num_machines", 1))) or 1
        if processes is None and not opts.get("config_file"):  # no config: every visible GPU (launch.py
            processes = _visible_count(visible) or here  # _validate_launch_command, multi_gpu when several)
        plan.nodes = machines
        plan.world_size, plan.world_source = processes, (
            "--num_processes" if opts.get("num_processes") else "the accelerate config's num_processes"
            if config.get("num_processes") else f"CUDA_VISIBLE_DEVICES={visible}" if _visible_count(visible)
            else every if here else here_note)
        plan.gpus_per_node = None if processes is None else max(1, processes // machines)
        return
    if launch.launcher in ("llamafactory", "axolotl"):
        env = launch.env
        per = _int(env.get("NPROC_PER_NODE")) or _visible_count(visible) or here
        nodes = _int(env.get("NNODES")) or 1
        plan.nodes, plan.gpus_per_node = nodes, per
        plan.world_size = None if per is None else per * nodes
        plan.world_source = ("NPROC_PER_NODE" if env.get("NPROC_PER_NODE") else f"CUDA_VISIBLE_DEVICES={visible}"
                             if _visible_count(visible) else every if here else here_note)
        return
    plan.nodes, plan.gpus_per_node, plan.world_size = 1, 1, 1
    plan.world_source = "python starts one process"
    if here and here > 1 or (gpus and gpus > 1):
        plan.problems.append(rules.PRE016.finding(f"`{' '.join(launch.line[:3])}` on a machine with "
                                                  f"{here or gpus} GPUs: world size 1"))


#: keys only a DeepSpeed config has at its top
DEEPSPEED_KEYS = {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu"}


def _argparse_refuses(script, name: str, value: object) -> str:
    """Why the script's own argparse would refuse ``--name value`` (its ``add_argument(type=..., choices=...)``),
    or "": argparse converts the string with the type, then checks the result against the choices
    (``argparse.py`` ``_get_value``, ``_check_value``)."""
    declared = script.arguments.get(name) if script is not None else None
    if declared is None or value is None:
        return ""
    kind, choices, where = declared
    text = "true" if value is True else "false" if value is False else str(value)
    if kind is not None:
        try:
            value = kind(text)
        except ValueError:
            return f"invalid {kind.__name__} value: {text!r} ({where}); argparse exits with status 2"
    if choices is not None and value not in choices and text not in choices:
        return (f"invalid choice: {text!r} (choose from {', '.join(repr(c) for c in choices[:8])}) ({where}); "
                "argparse exits with status 2")
    return ""


def build_plan(launch: Launch, workdir: Path, sets: list[tuple[str, object]], gpus: int | None, rules) -> Plan:
    """The :class:`Plan` of ``launch`` run from ``workdir``, with ``sets`` (``--set``) over everything, and ``gpus``
    GPUs per node when given (else NVML's count here). Raises DsdoctorError for a script or config file that
    cannot be read at all (a missing file is a finding, PRE014, not an error)."""
    from dsdoctor.checks.deepspeed_config import load_schema

    settings = Settings()
    if launch.cd and launch.cd != ".":  # the text's own `cd` before the launch
        moved = Path(os.path.expanduser(launch.cd))
        workdir = moved if moved.is_absolute() else workdir / moved
    plan = Plan(launch=launch, settings=settings, workdir=workdir)
    if launch.cd and launch.cd != ".":
        plan.notes.append(f"the launch runs in {workdir} (the `cd {launch.cd}` before it)")
    script_dir = None
    if launch.script and not launch.module and launch.launcher != "llamafactory":
        found, how = _resolve(launch.script, workdir)
        if found is None:
            plan.problems.append(rules.PRE014.finding(f"{launch.script}: no such file in {workdir}",
                                                      title="The script the line runs does not exist"))
        elif found.suffix == ".py" or found.is_file():
            plan.script_path, script_dir = found, found.parent
            plan.script = read_script(found, label=launch.script)
            plan.notes.extend(plan.script.notes)
            if plan.script.syntax_error:
                plan.problems.append(rules.PRE019.finding(f"{launch.script}: {plan.script.syntax_error}",
                                                          title="The training script does not parse"))
            for name in ("lora_rank", "lora_target", "lora_dropout"):  # a peft config built in a branch only
                if name in plan.script.conditional and name not in plan.script.values:
                    value, where = plan.script.conditional[name]
                    settings.put(name, value, where)
            for name, (value, where) in plan.script.defaults.items():
                settings.put(name, value, f"default {where}")
            for name, (value, where) in plan.script.values.items():
                settings.put(name, value, where)
            if plan.script.launch:
                plan.kind, plan.kind_source = plan.script.launch, (
                    "the script uses a Trainer class" if plan.script.launch == "trainer"
                    else "the script calls deepspeed.initialize (its own engine loop)")
    if launch.tool_config:
        found, how = _resolve(launch.tool_config, workdir, script_dir)
        if found is None:
            plan.problems.append(rules.PRE014.finding(f"{launch.tool_config}: no such file in {workdir}",
                                                      title="The config file the line names does not exist"))
        else:
            values = _read_mapping(found)
            if launch.tool is None and set(values) & DEEPSPEED_KEYS:
                # a plain script given a DeepSpeed config as its argument (json.load(open(sys.argv[1])))
                plan.deepspeed = str(found)
                plan.deepspeed_source = f"{launch.tool_config} (the script's argument: a DeepSpeed config)"
            else:
                _check_tool_yaml(launch, values, found)
                for name, value in values.items():
                    settings.put(name, value, f"{launch.tool_config} {name}")
            if how:
                plan.notes.append(f"{launch.tool_config}: {how}")
    if plan.script is not None and plan.script.argv_positional and launch.launcher == "deepspeed" and \
            "local_rank" not in plan.script.defaults and "local_rank" not in plan.script.arguments:
        from dsdoctor.checks.environment.rules import ENV331

        args = " ".join(([launch.tool_config] if launch.tool_config else []) + launch.script_args)[:80]
        plan.problems.append(ENV331.finding(
            f"{plan.script.argv_positional}, and the deepspeed launcher starts each rank as `python -u "
            f"{launch.script} --local_rank=N {args}`: sys.argv[1] is '--local_rank=N'",
            fix="Read the arguments with argparse and declare --local_rank (parser.add_argument('--local_rank', "
                "type=int, default=-1)), or launch with torchrun, which passes LOCAL_RANK in the environment."))
    if launch.tool in ("llamafactory", "axolotl"):
        plan.kind, plan.kind_source = "trainer", f"{launch.tool} trains through the HF Trainer"
    pairs, loose = parse_script_args(launch.script_args)
    for name, value in pairs:
        settings.put(name, value, f"line --{name}")
        refused = _argparse_refuses(plan.script, name, value)
        if refused:
            plan.problems.append(rules.PRE021.finding(f"line --{name} {value}: {refused}"))
    for override in launch.overrides:
        name, value = override.split("=", 1)
        from dsdoctor.preflight.settings import coerce

        settings.put(name, coerce(value), f"line {name}=")
    for name, value in sets:
        settings.put(name, value, "--set")
    if loose:
        plan.notes.append(f"words on the line not read as settings: {' '.join(loose)[:160]}")
    _world(plan, gpus, rules)
    schema = load_schema()[0]
    from dsdoctor.checks.hf_trainer import FIELD_VERSIONS

    # a field of another transformers version (warmup_ratio, gone in 5.2) is read: check's HF205 judges it
    classify(settings, set((schema.get("training_arguments") or {}).get("fields", [])) | set(FIELD_VERSIONS),
             launch.tool)
    ds = settings.get("deepspeed")
    if ds is not None and isinstance(ds.value, str) and ds.value.strip():
        found, how = _resolve(ds.value, workdir, script_dir)
        if found is None:
            plan.problems.append(rules.PRE014.finding(
                f"{ds.value} (from {ds.source}): no such file in {workdir}",
                title="The DeepSpeed config the run opens does not exist"))
        else:
            plan.deepspeed, plan.deepspeed_source = str(found), ds.source
            if how:  # DeepSpeed and the Trainer open it from the launch directory, not the script's
                plan.problems.append(rules.PRE014.finding(
                    f"{ds.value} (from {ds.source}): not in {workdir}, where the launch runs; {how}",
                    title="The DeepSpeed config is not where the run opens it",
                    fix=f"Launch from {found.parent} (or --workdir {found.parent} if you do), or give the path from "
                        f"where you launch ({found})."))
    elif ds is not None and isinstance(ds.value, dict):
        # the script's literal dict, written to a file of its own so that every section reads it as the run's
        # config (check, estimate, env's op builds and host RAM, the batch checks)
        import hashlib
        import tempfile

        text = json.dumps(ds.value, indent=2, default=str)
        path = Path(tempfile.gettempdir()) / f"dsdoctor-preflight-{hashlib.sha1(text.encode()).hexdigest()[:12]}.json"
        try:
            path.write_text(text)
            plan.deepspeed = str(path)
        except OSError:
            pass
        plan.deepspeed_source = ds.source
        plan.notes.append(f"the DeepSpeed config is a dict literal ({ds.source})"
                          + (f", read from {path}" if plan.deepspeed else ""))
    return plan


def _check_tool_yaml(launch: Launch, values: dict, path: Path) -> None:
    """Refuse a config file that is not the tool's: an axolotl YAML has ``base_model`` (and ``datasets``), a
    LLaMA-Factory YAML ``model_name_or_path`` (``stage``, ``finetuning_type``); a DeepSpeed JSON given in its
    place has ``zero_optimization`` or ``train_batch_size``. Raises DsdoctorError."""
    ds_keys = {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu"}

    def what(other: str) -> str:
        if "base_model" in values:
            return "an axolotl config"
        if "model_name_or_path" in values and ("finetuning_type" in values or "stage" in values):
            return "a LLaMA-Factory config"
        if ds_keys & set(values):
            return "a DeepSpeed config"
        return f"not {other} config"

    if launch.tool == "axolotl" and "base_model" not in values:
        raise DsdoctorError(f"{path}: {what('an axolotl')} (an axolotl YAML names base_model)")
    if launch.tool == "llamafactory" and "model_name_or_path" not in values:
        raise DsdoctorError(f"{path}: {what('a LLaMA-Factory')} (a LLaMA-Factory YAML names model_name_or_path)")


def loaded_json(path: str) -> dict | None:
    """The JSON object in ``path``, or None (unreadable, not JSON, not an object). The sections ask for the run's
    DeepSpeed config many times: it is read once while the file is unchanged (its size and mtime). Do not modify
    what it returns."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return _loaded_json(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _loaded_json(path: str, mtime_ns: int, size: int) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def flag(settings: Settings, key: str) -> bool | None:
    return as_bool(settings.value(key))
