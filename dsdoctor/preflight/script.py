"""What a training script says with literal values, read with Python's ``ast`` (the script is never imported or run).

Both tutorials' scripts hard-code their setup: ``TrainingArguments(per_device_train_batch_size=4, ...,
deepspeed="./ds_config.json")``, ``LoraConfig(r=8, target_modules=["query_key_value"])``,
``AutoModel.from_pretrained(<model id>, torch_dtype=torch.bfloat16)`` (read as text: nothing is loaded),
``deepspeed.initialize(..., config="ds_config.json")``. Scripts that take flags declare their defaults in
``argparse`` (``add_argument("--lora_rank", default=8)``) or in ``HfArgumentParser`` dataclasses
(``model_name_or_path: str = field(default="...")``): those are read as defaults, below what the line gives.

Only literals are read (``ast.literal_eval``, and names bound once at module level to a literal); anything computed
is left out, never guessed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

#: calls whose keyword arguments are TrainingArguments fields (transformers, and TRL's subclasses of it)
TRAINING_ARGUMENT_CALLS = {"TrainingArguments", "Seq2SeqTrainingArguments", "SFTConfig", "DPOConfig", "ORPOConfig",
                           "KTOConfig", "RewardConfig", "GRPOConfig"}
#: classes whose use means the HF Trainer builds the DeepSpeed engine (``--launch trainer``)
TRAINER_CLASSES = {"Trainer", "Seq2SeqTrainer", "SFTTrainer", "DPOTrainer", "ORPOTrainer", "KTOTrainer",
                   "RewardTrainer", "GRPOTrainer"}
#: peft configs and the method each means
PEFT_CONFIGS = {"LoraConfig": "lora", "AdaLoraConfig": "lora", "PrefixTuningConfig": "ptuning",
                "PromptEncoderConfig": "ptuning", "PromptTuningConfig": "ptuning", "IA3Config": None}
MAX_SCRIPT_BYTES = 4 << 20


#: transformers' collators that pad each batch to its longest sample unless told otherwise
#: (data/data_collator.py: ``padding=True`` by default)
DYNAMIC_COLLATORS = {"DataCollatorForSeq2Seq", "DataCollatorWithPadding", "DataCollatorForTokenClassification",
                     "DataCollatorForLanguageModeling"}


@dataclass
class ScriptFacts:
    """Literal values a script sets, each with its line.

    Attributes:
        values: setting name -> (value, "path:line what"): TrainingArguments keywords under their own names,
            ``model`` (from_pretrained's first argument), ``torch_dtype``, ``lora_rank``, ``lora_target``,
            ``lora_dropout``, ``method``, ``deepspeed`` (a path or a dict given to ``deepspeed.initialize``),
            ``gradient_checkpointing``, ``max_length`` (a tokenizer call with ``truncation=True``), ``data``
            (``load_dataset("json", data_files=...)``), ``padding`` ("dynamic" from one of
            :data:`DYNAMIC_COLLATORS`, "max_length" from a tokenizer call or collator that pads every sample).
        defaults: argument name -> (default, "path:line"), from ``add_argument`` and dataclass fields.
        conditional: values set inside a branch (``if``, ``try``, a loop): shown, never used.
        launch: "trainer" when a Trainer class is used, "engine" when ``deepspeed.initialize`` is called, else None.
        trust_remote_code: a ``from_pretrained(..., trust_remote_code=True)`` line, or "".
        notes: what could not be read.
    """

    values: dict[str, tuple[object, str]] = field(default_factory=dict)
    defaults: dict[str, tuple[object, str]] = field(default_factory=dict)
    conditional: dict[str, tuple[object, str]] = field(default_factory=dict)
    launch: str | None = None
    trust_remote_code: str = ""
    client_optimizer: str = ""  # where deepspeed.initialize(optimizer=...) is given one
    #: argument name -> (int or float or None, the choices or None, "path:line add_argument(...)"): what argparse
    #: converts and checks a value of the line against
    arguments: dict[str, tuple[object, object, str]] = field(default_factory=dict)
    argv_positional: str = ""  # where the script reads sys.argv[1] (or later) itself: "path:line sys.argv[1]"
    syntax_error: str = ""  # why the script does not parse (the run would stop at once)
    rank0_save: str = ""  # where save_checkpoint / save_16bit_model is called inside a rank-0-only branch
    notes: list[str] = field(default_factory=list)


def _name(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _dotted(func: ast.AST) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


_UNREAD = object()


#: an `if` test only rank 0 passes: ``engine.global_rank == 0``, ``args.local_rank in [-1, 0]``,
#: ``dist.get_rank() == 0``, ``accelerator.is_main_process``, ``trainer.is_world_process_zero()``
RANK0_TEST = re.compile(r"(?:\b(?:global_rank|local_rank|rank|process_index)|get_rank\(\))\s*(?:==\s*0\b|in\s*[\[(]"
                        r"\s*-1\s*,\s*0\s*[\])]|in\s*[\[(]\s*0\s*,\s*-1\s*[\])])|\bis_(?:local_)?main_process\b|"
                        r"\bis_world_process_zero\b|^0\s*==\s*\w")
#: the engine's saves that every rank must call (deepspeed/runtime/engine.py: barriers, ZeRO-3's gathers)
COLLECTIVE_SAVES = {"save_checkpoint", "save_16bit_model"}


class _Reader(ast.NodeVisitor):
    def __init__(self, label: str):
        self.label = label
        self.facts = ScriptFacts()
        self.constants: dict[str, object] = {}
        self.assigned_twice: set[str] = set()
        self.branch = 0  # inside an if/else, try/except or loop body: what is set there may not run
        self.rank0 = 0  # inside the body of an `if` only rank 0 enters

    def literal(self, node: ast.AST):
        if isinstance(node, ast.Name) and node.id in self.constants and node.id not in self.assigned_twice:
            return self.constants[node.id]
        if isinstance(node, ast.Attribute) and _dotted(node).startswith("torch."):
            return _dotted(node)  # torch.bfloat16
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return _UNREAD

    def where(self, node: ast.AST, what: str) -> str:
        return f"{self.label}:{getattr(node, 'lineno', '?')} {what}"

    def set(self, key: str, value, node: ast.AST, what: str) -> None:
        if value is _UNREAD:
            return
        if self.branch:  # `if args.method == "ptuning": PrefixTuningConfig(...)`: one branch of several
            self.facts.conditional.setdefault(key, (value, self.where(node, what + " (inside a branch)")))
        else:
            self.facts.values[key] = (value, self.where(node, what))

    def _branch(self, node: ast.AST) -> None:
        self.branch += 1
        self.generic_visit(node)
        self.branch -= 1

    visit_Try = visit_For = visit_While = visit_IfExp = _branch

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        guard = RANK0_TEST.search(test) is not None and not test.startswith("not ") and "!=" not in test
        self.branch += 1
        self.visit(node.test)
        self.rank0 += guard
        for child in node.body:
            self.visit(child)
        self.rank0 -= guard
        for child in node.orelse:
            self.visit(child)
        self.branch -= 1

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if any(_name(base) in TRAINER_CLASSES for base in node.bases):
            self.facts.launch = "trainer"
        if any(_name(d.func if isinstance(d, ast.Call) else d) == "dataclass" for d in node.decorator_list):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    value = item.value
                    if isinstance(value, ast.Call) and _name(value.func) == "field":
                        value = next((k.value for k in value.keywords if k.arg == "default"), None)
                    if value is not None:
                        default = self.literal(value)
                        if default is not _UNREAD:
                            self.facts.defaults[item.target.id] = (default, self.where(item, f"{node.name} field"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name, dotted = _name(node.func), _dotted(node.func)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if self.rank0 and name in COLLECTIVE_SAVES and isinstance(node.func, ast.Attribute) and \
                not self.facts.rank0_save:
            self.facts.rank0_save = self.where(node, f"{ast.unparse(node.func)}(...) under a rank-0 branch")
        if name in TRAINING_ARGUMENT_CALLS:
            for key, value in keywords.items():
                self.set(key, self.literal(value), value, f"{name}({key}=...)")
        elif name in TRAINER_CLASSES:
            self.facts.launch = "trainer"
            if "model" in keywords and isinstance(self.literal(keywords["model"]), str):  # SFTTrainer(model="id")
                self.set("model", self.literal(keywords["model"]), keywords["model"], f"{name}(model=...)")
        elif name in PEFT_CONFIGS:
            method = PEFT_CONFIGS[name]
            if method:
                self.set("method", method, node, f"{name}(...)")
            for key, target in (("r", "lora_rank"), ("target_modules", "lora_target"),
                                ("lora_dropout", "lora_dropout"), ("num_virtual_tokens", "pre_seq_len")):
                if key in keywords:
                    self.set(target, self.literal(keywords[key]), keywords[key], f"{name}({key}=...)")
        elif name == "from_pretrained" and node.args and "Tokenizer" not in dotted and "Config" not in dotted:
            self.set("model", self.literal(node.args[0]), node, f"{dotted}(...)")
            for key in ("torch_dtype", "dtype"):
                if key in keywords:
                    self.set("torch_dtype", self.literal(keywords[key]), keywords[key], f"from_pretrained({key}=...)")
            for key in ("load_in_4bit", "load_in_8bit"):
                if key in keywords and self.literal(keywords[key]) is True:
                    self.set(key, True, keywords[key], f"from_pretrained({key}=True)")
            if "trust_remote_code" in keywords and self.literal(keywords["trust_remote_code"]) is True:
                self.facts.trust_remote_code = self.where(node, "from_pretrained(trust_remote_code=True)")
        elif dotted in ("deepspeed.initialize",) or (name == "initialize" and dotted.endswith("deepspeed.initialize")):
            self.facts.launch = self.facts.launch or "engine"
            if "optimizer" in keywords and not (isinstance(keywords["optimizer"], ast.Constant)
                                                and keywords["optimizer"].value is None):
                self.facts.client_optimizer = self.where(node, "deepspeed.initialize(optimizer=...)")
            for key in ("config", "config_params"):
                if key in keywords:
                    value = self.literal(keywords[key])
                    if value is _UNREAD:
                        self.facts.notes.append(self.where(keywords[key], f"deepspeed.initialize({key}=...) is "
                                                           "computed: not read"))
                    self.set("deepspeed", value, keywords[key], f"deepspeed.initialize({key}=...)")
        elif name == "gradient_checkpointing_enable":
            self.set("gradient_checkpointing", True, node, "gradient_checkpointing_enable()")
        elif name == "add_argument" and node.args:
            self.add_argument(node, keywords)
        elif name == "load_dataset" and "data_files" in keywords:
            self.set("data", self.literal(keywords["data_files"]), keywords["data_files"], "load_dataset(data_files=...)")
        elif name in DYNAMIC_COLLATORS:
            padding = self.literal(keywords["padding"]) if "padding" in keywords else True
            if padding is not _UNREAD:
                self.set("padding", "max_length" if padding in ("max_length", "MAX_LENGTH") else "dynamic"
                         if padding in (True, "longest", "LONGEST") else "none", node, f"{name}(padding=...)")
        if name not in DYNAMIC_COLLATORS and "padding" in keywords and \
                self.literal(keywords["padding"]) in ("max_length", "MAX_LENGTH"):  # a tokenizer call pads each sample
            self.set("padding", "max_length", keywords["padding"], f"{dotted or 'call'}(padding='max_length')")
        if "max_length" in keywords and "truncation" in keywords and self.literal(keywords["truncation"]) is True:
            self.set("max_length", self.literal(keywords["max_length"]), keywords["max_length"],
                     f"{dotted or 'call'}(truncation=True, max_length=...)")
        self.generic_visit(node)

    def add_argument(self, node: ast.Call, keywords: dict) -> None:
        strings = [self.literal(a) for a in node.args]
        strings = [s for s in strings if isinstance(s, str)]
        longs = [s for s in strings if s.startswith("--")] or [s for s in strings if s.startswith("-")]
        if "dest" in keywords and isinstance(self.literal(keywords["dest"]), str):
            dest = self.literal(keywords["dest"])
        elif longs:
            dest = longs[0].lstrip("-").replace("-", "_")
        else:
            return
        action = self.literal(keywords["action"]) if "action" in keywords else None
        kind = keywords.get("type")
        kind = {"int": int, "float": float}.get(kind.id) if isinstance(kind, ast.Name) else None
        choices = self.literal(keywords["choices"]) if "choices" in keywords else None
        choices = list(choices) if isinstance(choices, (list, tuple)) else None
        if kind is not None or choices is not None:
            self.facts.arguments[dest] = (kind, choices, self.where(node, f"add_argument({strings[0]!r})"))
        if "default" in keywords:
            default = self.literal(keywords["default"])
            if default is not _UNREAD:
                self.facts.defaults[dest] = (default, self.where(node, f"add_argument({strings[0]!r})"))
        elif action == "store_true":
            self.facts.defaults[dest] = (False, self.where(node, f"add_argument({strings[0]!r}, store_true)"))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        """``sys.argv[1]`` (or a later index, or a slice from 1): the script reads its arguments by position."""
        value, index = node.value, node.slice
        if isinstance(value, ast.Attribute) and value.attr == "argv" and isinstance(value.value, ast.Name) and \
                value.value.id == "sys" and not self.facts.argv_positional:
            first = index.lower if isinstance(index, ast.Slice) else index
            if isinstance(first, ast.Constant) and isinstance(first.value, int) and first.value >= 1:
                self.facts.argv_positional = self.where(node, f"sys.argv[{first.value}]")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        """``NAME = literal`` anywhere (a module constant, ``model_name = "..."`` in ``train()``), usable by a later
        call that names it; a name bound twice is never used (which binding a call sees needs the control flow)."""
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target in self.constants:
                self.assigned_twice.add(target)
            value = self.literal(node.value)
            if value is not _UNREAD:
                self.constants[target] = value
        self.generic_visit(node)


def read_script(path: Path, label: str | None = None) -> ScriptFacts:
    """The literal settings of the Python script at ``path`` (see the module docstring).

    Raises:
        DsdoctorError: the file cannot be read. A script that does not parse gives a note, not an error (the
            line may run it with another Python)."""
    from dsdoctor.files import read_input

    raw = read_input(str(path), "the training script", MAX_SCRIPT_BYTES, what="Python script")
    reader = _Reader(label or str(path))
    try:
        tree = ast.parse(raw.decode("utf-8", errors="replace"), filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        reader.facts.syntax_error = f"{type(exc).__name__}{where}: {getattr(exc, 'msg', None) or exc}"[:200]
        reader.facts.notes.append(f"{label or path}: not read ({reader.facts.syntax_error})")
        return reader.facts
    try:
        reader.visit(tree)
    except RecursionError:
        reader.facts.notes.append(f"{label or path}: nested too deeply to read")
    return reader.facts


def module_file(module: str, search: list[Path]) -> Path | None:
    """The source file of ``module`` (``axolotl.cli.train``) under one of the ``search`` directories, or None.
    Installed packages are not imported."""
    parts = module.split(".")
    for base in search:
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__main__.py")):
            if candidate.is_file():
                return candidate
    return None
