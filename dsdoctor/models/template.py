"""Shape templates: a registry row's structure as a function of its config's size keys, fitted on transformers'
own models, so that another size of a shipped architecture is counted without importing torch or transformers.

Building a model on the meta device costs 8-12 s cold on 2 cores, nearly all of it transformers' and torch's
imports (``benchmarks/results/estimate-speed.txt``). A fine-tuner's local checkpoint is usually one of the shipped
architectures at some size: Qwen3 with another MLP width, a Gemma-2 with fewer heads. For each row
:mod:`dsdoctor.models.structure` ships, :func:`fit` builds the model at many sizes and writes down how each integer
of :func:`dsdoctor.models.structure.describe`'s dict follows the size keys. No formula per family is written here:

1. **Which keys, and which integers they move.** Each integer-valued key of the row (not a
   :data:`~dsdoctor.models.matching.NEUTRAL_KEYS` one, nor the layer count) is changed alone to two other values
   (doubled and halved, else quadrupled, a quarter, 3 or 5 times: the first two that transformers builds and runs).
   A key whose change alters the *skeleton* (anything but the integers: module names, roles, biases, the layer kinds'
   pattern) or that transformers refuses is *fixed*: a config that differs there is built on the meta device. The
   integers that moved depend on the key.
2. **A polynomial per integer.** On random sizes (every free key times 2^e, e in -1..2), each integer is fitted
   over the monomials of the keys it depends on, with exponents -1 to 2, positive degree at most 2 and at most one
   divisor. This family holds what the modeling code computes: a width (``hidden_size``), a product
   (``num_attention_heads * head_dim``), a sum (Phi-3's fused qkv ``h + 2 * kv_heads * h / heads``, its head size
   being ``hidden_size // num_attention_heads``), a per-expert weight (``3 * h * moe_intermediate_size``). The
   sparsest polynomial that reproduces every probe exactly (integer arithmetic) is kept: sets of one, two and three
   monomials first, then the least squares over all, its coefficients turned into small fractions. The keys of an
   integer that fits no polynomial become fixed, and so do the other keys of any integer that depends on a fixed
   key.
3. **The sums, from their parts.** The degree-3 totals are not fitted but rebuilt, as ``describe`` counts them:
   a layer kind's parameters are its linears' ``in * out`` (plus ``out`` with a bias), its norms', experts', router's
   and other parameters; a fused experts entry is its count times the per-expert parameters; the model's total is
   the embedding, the output projection, the rest (final norm) and every layer's parameters.
4. **Checked.** Twelve more random sizes, never fitted, must give ``describe``'s dict exactly, or the row ships no
   template. ``tests/test_template.py`` builds more sizes on the meta device at test time and compares.

The same fit runs on each causal-LM config class of the installed transformers at its defaults
(:func:`fit_default`, ``python -m dsdoctor.models.template --write-defaults``, about 30 min on 2 cores; a type past
40 s is skipped): ``default_templates/<type>.json``, read by :func:`dsdoctor.models.matching.default_for` for an
architecture no registry row has. There a key the config omits takes the class default, as transformers does,
unless the class's ``__init__`` derives it from others (``num_key_value_heads=None``); a float or flag key the probes
found to change nothing (Granite's multipliers) may differ.

:func:`evaluate` returns None whenever an integer would not be a positive whole number (a head size that is not a
whole division), two layer kinds become equal, or a key outside the template differs: the caller then builds the
model on the meta device, which stays the reference.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import random
from fractions import Fraction
from pathlib import Path

#: version of the template format: a template of another version is ignored (the meta build is used)
FORMAT = 1
SHIPPED = Path(__file__).with_name("templates.json")
#: keys never fitted: the layer count and the layer pattern (:func:`dsdoctor.models.matching.scaled_for`
#: rewrites those), and the dict's own bookkeeping
_NOT_LEAVES = ("layers", "format", "versions")


@functools.cache
def shipped_templates() -> dict:
    """Registry name -> template, as ``templates.json`` ships them ({} when absent); read once per process."""
    try:
        return json.loads(SHIPPED.read_text())
    except (OSError, ValueError):
        return {}


# --- the dict's integers ---------------------------------------------------------------------------------------

def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _leaves(desc, path=()):
    """(path, value) of every integer of a structure dict but the layer pattern and bookkeeping, the derived
    totals excluded (``total_params``, each kind's ``params``, each experts entry's ``params``: :func:`_derive`)."""
    if isinstance(desc, dict):
        for key, value in desc.items():
            if not path and key in _NOT_LEAVES + ("total_params",):
                continue
            if key == "params" and len(path) >= 2 and path[-2] == "kinds":
                continue  # a kind's total
            if key == "params" and len(path) >= 2 and path[-2] == "experts":
                continue  # count x per_expert
            yield from _leaves(value, path + (key,))
    elif isinstance(desc, list):
        for i, value in enumerate(desc):
            yield from _leaves(value, path + (i,))
    elif _is_int(desc):
        yield path, desc


def _with_per_expert(desc: dict) -> dict:
    """``desc`` with each experts entry's ``per_expert`` parameters (``params / count``) added, the form that is
    fitted; None-free: an entry whose parameters do not divide by its count keeps ``per_expert`` absent."""
    desc = copy.deepcopy(desc)
    for kind in desc["kinds"]:
        for entry in kind["experts"]:
            if entry["count"] and entry["params"] % entry["count"] == 0:
                entry["per_expert"] = entry["params"] // entry["count"]
    return desc


def _skeleton(desc: dict) -> str:
    """Everything of ``desc`` but its integers (and the versions): equal skeletons differ only in sizes."""
    def strip(value, top=False):
        if isinstance(value, dict):
            return {k: (v if top and k == "layers" else strip(v)) for k, v in value.items()
                    if not (top and k in ("versions", "total_params"))}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return None if _is_int(value) else value
    return json.dumps(strip(desc, top=True), sort_keys=True)


def _derive(desc: dict) -> None:
    """Rebuild the totals of ``desc`` from their parts, in place, as :func:`dsdoctor.models.structure.describe`
    counts them: experts ``params = count x per_expert``; a kind's ``params`` = its linears (``in x out``, plus
    ``out`` with a bias; a linear inside a list of experts is counted by that list's entry instead), norms, experts,
    router and other parameters; ``total_params`` = embedding + output projection + the rest + every layer's."""
    for kind in desc["kinds"]:
        for entry in kind["experts"]:
            entry["params"] = entry["count"] * entry.pop("per_expert")
        linears = sum(lin["in"] * lin["out"] + (lin["out"] if lin["bias"] else 0) for lin in kind["linears"]
                      if lin["role"] != "expert")
        kind["params"] = (linears + sum(n["params"] for n in kind["norms"]) + sum(e["params"] for e in kind["experts"])
                          + kind["router"] + kind["other"])
    desc["total_params"] = (desc["embedding_params"] + desc["lm_head_params"] + desc["final_norm_params"]
                            + sum(desc["kinds"][i]["params"] for i in desc["layers"]))


def _identities_hold(desc: dict) -> bool:
    """Whether :func:`_derive` gives ``desc``'s own totals back (a layout whose totals are not those sums, e.g.
    experts kept as a list of MLP modules whose linears are listed too, ships no template)."""
    if any(e["count"] == 0 or e["params"] % e["count"] for k in desc["kinds"] for e in k["experts"]):
        return False
    again = _with_per_expert(desc)
    _derive(again)
    return again == desc


def _set(desc, path, value) -> None:
    for key in path[:-1]:
        desc = desc[key]
    desc[path[-1]] = value


# --- monomials ---------------------------------------------------------------------------------------------------

def _monomials(keys: list[str]) -> list[tuple[tuple[str, int], ...]]:
    """Exponent vectors over ``keys``: each exponent -1..2, positive degree <= 2, at most one divisor of power 1;
    the constant included. Sorted, as tuples of (key, exponent) with the zero exponents left out."""
    out = set()
    for exps in itertools.product((-1, 0, 1, 2), repeat=len(keys)):
        positive = sum(e for e in exps if e > 0)
        negative = [e for e in exps if e < 0]
        if positive <= 2 and len(negative) <= 1:
            out.add(tuple((k, e) for k, e in zip(keys, exps) if e))
    return sorted(out, key=lambda m: (sum(abs(e) for _, e in m), m))


def _value(monomial, sizes: dict) -> Fraction:
    v = Fraction(1)
    for key, exp in monomial:
        v = v * sizes[key] if exp == 1 else v * sizes[key] ** 2 if exp == 2 else v / sizes[key]
    return v


def _fit_leaf(keys: list[str], rows: list[tuple[dict, int]]):
    """[(numerator, denominator, monomial)] with ``sum(coef x monomial(sizes)) == value`` on every (sizes, value)
    of ``rows``, exactly; None when no polynomial of :func:`_monomials` does.

    The sparsest polynomial is taken: every set of one, two, then three monomials (simplest first) is tried before
    the least squares over all of them, so that a size probed at few distinct values (a head count that many sizes
    do not divide) still gets the one term the modeling code has, not a mixture that happens to agree."""
    import numpy as np

    monomials = _monomials(keys)
    x = np.array([[float(_value(m, sizes)) for m in monomials] for sizes, _ in rows])
    y = np.array([float(v) for _, v in rows])

    def exact(keep) -> list | None:
        sub = x[:, keep]
        scale = np.abs(sub).max(axis=0)
        scale[scale == 0] = 1
        coef = np.linalg.lstsq(sub / scale, y, rcond=None)[0] / scale
        if np.abs(sub @ coef - y).max() > 0.25:
            return None
        terms = []
        for c, i in zip(coef, keep):
            f = Fraction(float(c)).limit_denominator(64)
            if f:
                terms.append((f.numerator, f.denominator, monomials[i]))
        if all(sum(Fraction(n, d) * _value(m, sizes) for n, d, m in terms) == value for sizes, value in rows):
            return terms
        return None

    for size in (1, 2, 3):
        if len(rows) < size + 2:
            break
        for keep in itertools.combinations(range(len(monomials)), size):
            terms = exact(list(keep))
            if terms is not None:
                return terms
    if len(rows) < len(monomials) + 4:
        return None
    keep = np.arange(len(monomials))
    for _ in range(3):  # drop the terms that move no value by a thousandth (round-off of an ill-conditioned fit)
        sub = x[:, keep]
        scale = np.abs(sub).max(axis=0)
        scale[scale == 0] = 1
        coef = np.linalg.lstsq(sub / scale, y, rcond=None)[0] / scale
        contribution = np.abs(sub * coef).max(axis=0)
        if (contribution >= 1e-3).all():
            break
        keep = keep[contribution >= 1e-3]
    return exact(list(keep))


# --- fitting (python -m dsdoctor.models.structure --write) ----------------------------------------------------

def _candidate_keys(row: dict) -> list[str]:
    from dsdoctor.models.matching import NEUTRAL_KEYS

    return sorted(k for k, v in row.items() if _is_int(v) and v > 0 and k not in NEUTRAL_KEYS
                  and k not in ("num_hidden_layers",))


def fit(row: dict, describe_config, seed: int = 0, probes: int = 64, checks: int = 12) -> dict | None:
    """The template of registry row ``row`` (a config.json dict), fitted on ``describe_config`` (the meta build:
    :func:`dsdoctor.models.structure.describe_config`) as the module docstring says. None when the row's totals
    are not the sums :func:`_derive` rebuilds, or when a check size is not reproduced exactly.

    Takes 64 + 12 + 2 per key meta builds (about 0.15 s each once transformers is imported)."""
    if isinstance(row.get("text_config"), dict):
        return None  # a multimodal config: its sizes are the text_config's (scaled_for declines it)
    base = describe_config(row)
    if not _identities_hold(base):
        return None
    skeleton = _skeleton(base)
    keys = _candidate_keys(row)

    def probe(sizes: dict):
        try:
            desc = describe_config({**row, **sizes})
        except Exception:  # noqa: BLE001 - transformers refuses the sizes: not a usable probe
            return None
        if _skeleton(desc) != skeleton or not _identities_hold(desc):
            return None
        return _with_per_expert(desc)

    base_leaves = dict(_leaves(_with_per_expert(base)))
    depends: dict[tuple, set[str]] = {path: set() for path in base_leaves}
    fixed, free = [], []
    samples: list[tuple[dict, dict]] = [({k: row[k] for k in keys}, base_leaves)]
    for key in keys:
        seen = []
        for factor in (2, Fraction(1, 2), 4, Fraction(1, 4), 3, 5):  # the first two that transformers runs
            value = row[key] * factor
            if len(seen) == 2 or value.denominator != 1 or value < 1:
                continue
            sizes = {k: row[k] for k in keys} | {key: int(value)}
            desc = probe({key: sizes[key]})
            if desc is not None:
                seen.append((sizes, dict(_leaves(desc))))
        if len(seen) < 2:
            fixed.append(key)
            continue
        free.append(key)
        samples += seen
        for _, leaves in seen:
            for path, value in leaves.items():
                if value != base_leaves[path]:
                    depends[path].add(key)
    rng = random.Random(seed)

    def random_sizes() -> dict:
        sizes = {k: row[k] for k in keys}
        for k in free:
            low = -1 if row[k] % 2 == 0 else 0
            sizes[k] = int(row[k] * Fraction(2) ** rng.randint(low, low + 3))
        return sizes

    fitted = []
    for _ in range(probes):
        sizes = random_sizes()
        desc = probe({k: sizes[k] for k in free})
        if desc is not None:
            fitted.append((sizes, dict(_leaves(desc))))
    samples += fitted
    leaves = {}
    for path, deps in depends.items():
        if not deps:
            continue
        terms = _fit_leaf(sorted(deps), [(s, lv[path]) for s, lv in samples])
        if terms is None:
            fixed += sorted(deps - set(fixed))
            continue
        leaves[json.dumps(list(path))] = [[n, d, [list(kv) for kv in m]] for n, d, m in terms]
    # an integer that depends on a fixed key is not recomputed, so every key it depends on is fixed too
    fixed_set = set(fixed)
    while True:
        grown = fixed_set.union(*(deps for deps in depends.values() if deps & fixed_set))
        if grown == fixed_set:
            break
        fixed_set = grown
    fixed = sorted(fixed_set)
    free = [k for k in free if k not in fixed_set]
    leaves = {p: t for p, t in leaves.items() if not depends[tuple(json.loads(p))] & fixed_set}
    template = {"format": FORMAT, "free": free, "fixed": fixed, "leaves": leaves}
    for _ in range(checks):
        sizes = random_sizes()
        config = {**row, **{k: sizes[k] for k in free}}
        try:
            built = describe_config(config)
        except Exception:  # noqa: BLE001
            continue
        if _skeleton(built) != skeleton:
            continue
        if _strip_versions(evaluate(template, base, row, config)) != _strip_versions(built):
            return None
    return template


def _strip_versions(desc):
    return None if desc is None else {k: v for k, v in desc.items() if k != "versions"}


# --- evaluation (no torch, no transformers) -------------------------------------------------------------------

def evaluate(template: dict, desc: dict, row: dict, config: dict) -> dict | None:
    """The structure of ``config``, a config.json that equals registry row ``row`` (whose shipped structure is
    ``desc``) but for the template's free size keys: ``desc`` with every fitted integer recomputed from
    ``config``'s sizes and the totals rebuilt (:func:`_derive`). None when a fixed key differs, a size is not a
    positive integer (or null where the structure copies it: a sliding window), an integer comes out fractional or
    not positive, or two layer kinds come out equal (the meta build is then the answer)."""
    if template.get("format") != FORMAT:
        return None
    free = template["free"]
    for key in template["fixed"]:
        if config.get(key, row.get(key)) != row.get(key):
            return None
    sizes = {k: config.get(k, row.get(k)) for k in free}
    unset = {k for k, v in sizes.items() if v is None}  # e.g. Phi-4's "sliding_window": null
    leaves = template["leaves"]
    for key in unset:  # allowed only where the key is copied as it is (describe reads it off the config)
        if any(any(key == kv[0] for _, _, m in terms for kv in m) and terms != [[1, 1, [[key, 1]]]]
               for terms in leaves.values()):
            return None
    from dsdoctor.models.matching import _positive_int

    if not all(_positive_int(v) for k, v in sizes.items() if k not in unset):
        return None
    if all(sizes[k] == row.get(k) for k in free):
        return desc
    out = _with_per_expert(desc)
    for path, terms in leaves.items():
        if any(kv[0] in unset for _, _, m in terms for kv in m):
            _set(out, json.loads(path), None)
            continue
        value = sum(Fraction(n, d) * _value(tuple(tuple(kv) for kv in m), sizes) for n, d, m in terms)
        if value.denominator != 1 or value < 0 or (value == 0 and _get(desc, json.loads(path)) != 0):
            return None
        _set(out, json.loads(path), int(value))
    _derive(out)
    kinds = [json.dumps(k, sort_keys=True) for k in out["kinds"]]
    if len(set(kinds)) != len(kinds):
        return None
    return out


def _get(desc, path):
    for key in path:
        desc = desc[key]
    return desc


# --- every architecture transformers implements: templates of each config class's defaults ----------------------

#: one JSON file per model_type, so that a config reads only its own (a few KB) and the meta path's cached answer
#: stays fast
DEFAULTS_SHIPPED = Path(__file__).with_name("default_templates")
#: PretrainedConfig's own bookkeeping keys (output switches, labels, the problem type): no shape depends on them
_BASE_KEYS = frozenset({"output_hidden_states", "output_attentions", "return_dict", "chunk_size_feed_forward",
                        "is_encoder_decoder", "id2label", "label2id", "problem_type", "tokenizer_class", "prefix",
                        "task_specific_params", "is_decoder", "add_cross_attention", "cross_attention_hidden_size",
                        "finetuning_task", "sep_token_id", "decoder_start_token_id", "tf_legacy_loss",
                        "use_bfloat16", "torchscript", "pruned_heads", "num_labels"})


@functools.cache
def default_template(model_type: str) -> dict | None:
    """The shipped entry of ``model_type`` ({row, derived, neutral, desc, template}: ``default_templates/<type>.json``)
    or None; read only when no registry row matched."""
    if not isinstance(model_type, str) or not model_type.replace("_", "").replace("-", "").isalnum():
        return None
    try:
        return json.loads((DEFAULTS_SHIPPED / f"{model_type}.json").read_text())
    except (OSError, ValueError):
        return None


def default_templates() -> dict:
    """Every shipped default entry by model_type (tests and the writer)."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(DEFAULTS_SHIPPED.glob("*.json"))}


def _default_row(model_type: str) -> tuple[dict, list[str]]:
    """(config.json of ``model_type``'s config class at its defaults, the keys whose saved value its ``__init__``
    derives from others: ``num_key_value_heads=None`` becomes the head count, ``head_dim=None`` hidden / heads)."""
    import inspect

    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    signature = inspect.signature(type(config).__init__).parameters
    row = {}
    for key, value in config.to_dict().items():
        if key in _BASE_KEYS or key in ("transformers_version", "architectures", "_name_or_path", "dtype"):
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        row[key] = value
    from dsdoctor.models.matching import NEUTRAL_KEYS

    derived = sorted(k for k, p in signature.items() if k in row and p.default is None and row[k] is not None
                     and k not in NEUTRAL_KEYS)
    return row, derived


class _OutOfTime(BaseException):
    """Raised by SIGALRM when a default config's fit runs past its budget."""


def fit_default(model_type: str, describe_config, seed: int = 0, budget_s: int = 40) -> dict | None:
    """The shipped entry of ``model_type`` (:func:`default_templates`): the config class's defaults as a row, its
    structure and :func:`fit`'s template of it, and the keys of another type (a float, a flag) whose change leaves
    the structure as it is (each changed alone: ``neutral``). None when the defaults do not build or fit, or take
    more than ``budget_s`` seconds (SIGALRM; the fit is 32 + 8 + 2 per size key meta builds)."""
    import signal

    def out_of_time(signum, frame):
        raise _OutOfTime  # not an Exception: the probes' own handlers must not swallow it

    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(budget_s)  # a default config of hundreds of experts builds slowly: skipped, left to the meta build
    try:
        row, derived = _default_row(model_type)
        if isinstance(row.get("text_config"), dict) or not any(_is_int(v) for v in row.values()):
            return None
        desc = describe_config(row)
        template = fit(row, describe_config, seed=seed, probes=32, checks=8)
        if template is None:
            return None
        neutral = _neutral_keys(row, desc, describe_config)
    except (Exception, _OutOfTime):  # noqa: BLE001 - an architecture dsdoctor cannot read, or out of time
        return None
    finally:
        signal.alarm(0)
    return {"model_type": model_type, "row": row, "derived": derived, "neutral": neutral, "desc": desc,
            "template": template}


def _neutral_keys(row: dict, desc: dict, describe_config) -> list[str]:
    """The float and flag keys of ``row`` whose change alone (a flag flipped, a float doubled plus a half) leaves
    ``describe_config``'s structure as it is; dropout rates never (their masks are activations)."""
    from dsdoctor.models.matching import is_dropout

    plain = _strip_versions(desc)
    neutral = []
    for key, value in row.items():
        if is_dropout(key):
            continue  # only a rate of 0 is ignorable (matching._ignorable)
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, float):
            changed = value * 2 + 0.5
        else:
            continue
        try:
            same = _strip_versions(describe_config({**row, key: changed})) == plain
        except Exception:  # noqa: BLE001
            same = False
        if same:
            neutral.append(key)
    return neutral


def default_match(config: dict) -> tuple[dict, dict] | None:
    """(the shipped entry, the config.json as transformers completes it) when ``config`` is its model_type's
    default config but for sizes the entry's template frees, keys it found neutral, and keys that shape nothing
    (``ignorable``: :func:`dsdoctor.models.matching._ignorable`); a key the config omits takes the class default, as
    transformers does, unless transformers derives it from other keys (then None: the meta build decides)."""
    from dsdoctor.models.matching import SCALED_KEYS, _ignorable, _same

    entry = default_template(config.get("model_type"))
    if not isinstance(entry, dict) or entry.get("template", {}).get("format") != FORMAT:
        return None
    row, free = entry["row"], set(entry["template"]["free"]) | set(entry["neutral"]) | SCALED_KEYS
    for key, value in config.items():
        if _ignorable(key, value) or key in _BASE_KEYS or key in free:
            continue
        if key not in row or not _same(value, row[key]):
            return None
    if any(config.get(k) is None for k in entry["derived"]):
        return None
    return entry, {**row, **config}


def _write_defaults(model_types: list[str] | None = None, out_dir: Path = DEFAULTS_SHIPPED) -> None:
    """Fit and write ``default_templates/<type>.json``: every causal-LM model_type of the installed transformers
    that is not one of dsdoctor's analytic families (``python -m dsdoctor.models.template --write-defaults [TYPE ...]
    [--out DIR]``; two processes over halves of the types use both cores)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from dsdoctor.models.analytic import ANALYTIC_TYPES
    from dsdoctor.models.structure import describe_config

    out_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for model_type in sorted(model_types or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        if model_type in ANALYTIC_TYPES:
            continue
        entry = fit_default(model_type, describe_config)
        path = out_dir / f"{model_type}.json"
        path.unlink(missing_ok=True)
        if entry is not None:
            path.write_text(json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n")
            written += 1
        print(f"{model_type}: " + (f"template over {', '.join(entry['template']['free'])}" if entry else "none"),
              flush=True)
    default_template.cache_clear()
    print(f"wrote {written} model types into {out_dir}")


if __name__ == "__main__":  # python -m dsdoctor.models.template --write-defaults [TYPE ...] [--out DIR]
    import sys

    args = sys.argv[1:]
    if args[:1] == ["--write-defaults"]:
        target = DEFAULTS_SHIPPED
        if "--out" in args:  # another folder
            target = Path(args[args.index("--out") + 1])
            args = args[:args.index("--out")] + args[args.index("--out") + 2:]
        _write_defaults(args[1:] or None, target)
    else:
        print("usage: python -m dsdoctor.models.template --write-defaults [TYPE ...] [--out DIR]", file=sys.stderr)
        sys.exit(2)
