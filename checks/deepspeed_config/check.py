"""The entry point: :func:`check_config` runs every pass in DeepSpeed's order, then builds the effective config."""

from __future__ import annotations

from .autos import _section_of, check_autos_engine
from .batch import check_batch, check_world_size
from .fix import mark_training_changes
from .keys import _field_index, check_keys, check_syntax
from .optimizer import check_optimizer
from .precision import check_precision
from .result import CheckContext, CheckResult, compact_findings
from .schema import load_schema
from .values import BATCH_KEYS, MISSING, get_path, is_auto
from .zero import check_zero


def effective_config(config: dict, ctx: CheckContext, out: CheckResult) -> dict:
    """The config as DeepSpeed will see it: the batch triple derived, and the main sections with DeepSpeed's
    defaults for every field not given ("auto" in a validated section becomes the default, as
    DeepSpeedConfigModel does). It shares the values it does not change with ``config``: read it, do not edit it."""
    schema = ctx.schema
    eff = dict(config)  # the sections rebuilt below are new dicts; the rest is only read (JSON, the table)
    for key, value in out.batch.items():
        if key in BATCH_KEYS and value is not None:
            eff[key] = value
    for key in ("gradient_clipping", "steps_per_print", "prescale_gradients", "zero_allow_untested_optimizer",
                "zero_force_ds_cpu_optimizer"):
        if key not in eff:
            eff[key] = schema["top_level"].get(key)
    for section in ("zero_optimization", "fp16", "bf16"):
        body = eff.get(section)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            continue
        spec = schema["sections"][section]
        index = _field_index(spec)
        filled = {}
        for key, value in body.items():
            name = index.get(key, key)
            if not is_auto(value) or ctx.launch == "trainer":
                filled[name] = value
        for name, field_spec in spec["fields"].items():
            if field_spec.get("deprecated") or name in filled:
                continue
            if section == "zero_optimization" and field_spec.get("kind") == "model":
                continue
            filled[name] = field_spec.get("default")
        eff[section] = filled
    return eff


# ---------------------------------------------------------------------------------------------- entry

def check_config(config: dict, ctx: CheckContext) -> CheckResult:
    """Run every DS1xx check (and, with ``ctx.launch == "trainer"``, the HF2xx ones) on a parsed ds_config.

    Args:
        config: the ds_config's top-level object (never modified).
        ctx: what is known about the run; ``ctx.schema`` defaults to the installed DeepSpeed's key schema.
    Returns:
        a :class:`CheckResult` whose ``changes`` make ``fixed_config`` and whose ``effective`` is the config
        after the Trainer's fills (trainer) and DeepSpeed's derivation and defaults.
    """
    if ctx.schema is None:
        ctx.schema, ctx.schema_note = load_schema()
    out = CheckResult(original=config, launch=ctx.launch)
    origin: dict[str, str] = {}
    working = config
    check_syntax(ctx, out)
    check_keys(config, ctx, out)
    if ctx.launch == "trainer":
        from dsdoctor.checks.hf_trainer import check_trainer

        working, origin = check_trainer(config, ctx, out)
    else:
        check_autos_engine(config, ctx, out)
    if any(c.rule == "HF201" and c.path in BATCH_KEYS for c in out.changes):
        pass  # the Trainer refuses the batch mismatch (HF201) before DeepSpeed sees the triple
    else:
        check_batch(working, ctx, out, origin)
    check_world_size(working, config, ctx, out)
    check_precision(working, ctx, out)
    check_optimizer(working, ctx, out)
    check_zero(working, ctx, out)
    for key in ("fp16.enabled", "bf16.enabled", "gradient_clipping", "optimizer.params.lr",
                "zero_optimization.stage"):
        value = get_path(config, key)
        if key in origin:
            out.provenance[key] = origin[key]
        elif value is MISSING:
            out.provenance[key] = "default"
        elif is_auto(value):
            section = _section_of(key, ctx.schema)
            if ctx.launch == "trainer":
                out.provenance[key] = "auto (unfilled)"
            elif section and ctx.schema["sections"][section].get("strict"):
                out.provenance[key] = "auto: DeepSpeed's default"
            else:
                out.provenance[key] = 'auto: DeepSpeed receives the string "auto" (TypeError)'
        else:
            out.provenance[key] = "user"
    out.filled = working
    out.effective = effective_config(working, ctx, out)
    for c in out.changes:  # "now" is what the file says, not a filled value
        c.old = get_path(config, c.path)
    mark_training_changes(config, out.changes, ctx.launch)
    out.findings = compact_findings(out.findings)
    return out
