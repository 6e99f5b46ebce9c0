"""fp16 loss scaling in a log: the scale falling to its floor (DS114), and the NaN gradient norms of the steps the loss
scaler skipped on the way (not TRN602: the step was skipped, the weights were not touched).

What DeepSpeed prints, and where (the installed 0.19.8; older releases in the public reports):

- ZeRO 1-3 use ``deepspeed/runtime/fp16/loss_scaler.py`` ``DynamicLossScaler.update_scale``: on an overflow,
  ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768`` (``int()`` of the
  scales; ``... but hysteresis is 2. Reducing hysteresis to 1`` while ``delayed_shift`` lasts), and at the floor
  (``cur_scale == min_scale``) it raises ``Exception: Current loss scale already at minimum - cannot decrease scale
  anymore. Exiting run.``; with ``raise_error_at_min_scale`` off it logs ``Attempted loss scale: 1, reducing to 1``
  at every step instead. DeepSpeed 0.5 (2021) printed ``[deepscale] OVERFLOW!`` with float scales (stage2.py,
  stage3.py; transformers issue 14531: ``Attempted loss scale: 1, reducing to 1`` at every step).
- ZeRO 0 with fp16 uses ``runtime/fp16/fused_optimizer.py`` (FusedAdam) or ``unfused_optimizer.py``
  ``_update_scale``: ``Grad overflow on iteration 3`` then ``Reducing dynamic loss scale from 8.0 to 4.0``; at the
  floor the scale stays (``max(cur_scale / scale_factor, min_loss_scale)``: ``from 1.0 to 1.0``) and nothing is
  raised: every step is skipped and the run goes on, training nothing (DeepSpeed issue 697, where older releases
  also logged ``[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1, reducing to 1``).
- ``runtime/engine.py`` ``_take_model_step`` counts each skipped step and ``_report_progress`` prints ``step=N,
  skipped=M`` every ``steps_per_print``: ``skipped`` equal to ``step`` after 100 steps means no step was applied
  (the scale cannot start higher than 2^32: 32 halvings, 64 with hysteresis, reach any floor).
- The HF Trainer logs the engine's gradient norm (``transformers/trainer.py`` ``_get_grad_norm``): on a skipped step
  it is not finite (the installed ``stage_1_and_2.py`` sets ``_global_grad_norm`` to inf; the public reports show
  ``'grad_norm': nan``), while the loss of that step is finite. In an fp16 run under DeepSpeed's scaler, non-finite
  gradients are always a skipped step: the overflow check is what skips it.
"""

from __future__ import annotations

import re

from .lines import Line

#: a loss scale as DeepSpeed prints it (int() since 0.6; a float before); starts where the text before it ends
_SCALE = r"\d{1,20}(?:\.\d{1,12})?(?![\d.])"
#: every loss-scaler line that reports a skipped (overflowed) step
OVERFLOW = re.compile(
    r"OVERFLOW! (?:Rank \d{1,6} )?Skipping step\.(?: Attempted loss scale: (?P<a>" + _SCALE + r"), "
    r"(?:reducing to (?P<b>" + _SCALE + r")|but hysteresis is \d{1,6}))?|"
    r"Overflow detected\. Skipping step\. Attempted loss scale: (?P<a2>" + _SCALE + r"), reducing to (?P<b2>"
    + _SCALE + r")|"
    r"Reducing dynamic loss scale from (?P<a3>" + _SCALE + r") to (?P<b3>" + _SCALE + r")|"
    r"Grad overflow on iteration:? {0,2}\d{1,12}")
#: the substrings an :data:`OVERFLOW` line holds (tested before the pattern)
OVERFLOW_NEEDLES = ("OVERFLOW!", "Overflow detected", "Reducing dynamic loss scale", "Grad overflow on iteration")
#: the scale at its floor: loss_scaler.py's exception; the same scale before and after a reduction (the floor the
#: scalers clamp to: 1 by default, 0 once int() of a fractional floor)
FLOOR = (r"Current loss scale already at minimum|"
         r"Attempted loss scale: (?P<s>[01](?:\.0{1,6})?), reducing to (?P=s)(?![\d.])|"
         r"Reducing dynamic loss scale from (?P<f>" + _SCALE + r") to (?P=f)")
FLOOR_NEEDLES = ("Current loss scale already at minimum", "reducing to ", "Reducing dynamic loss scale from")
#: engine.py _report_progress: every one of at least 100 steps skipped. Its line is on every step print of
#: DeepSpeed: not a needle (it would send every such line through the table); :func:`stuck` tests it cheaply.
STUCK = r"(?<!\w)step=(?P<n>[1-9]\d{2,11}), skipped=(?P=n)(?!\d)"
_STUCK = re.compile(STUCK)


def stuck(text: str) -> re.Match | None:
    """The :data:`STUCK` match of a line whose skipped count has at least 3 digits (a substring test and a slice
    first: a healthy run's step lines cost no regular expression)."""
    at = text.find("skipped=")
    if at < 0 or not text[at + 8:at + 11].isdigit() or text[at + 8] == "0":
        return None
    return _STUCK.search(text)
#: DeepSpeed's config print of the loss scaler's arguments (config.py print: 'dynamic_loss_scale_args ...... {...}')
SCALER_ARGS = re.compile(r"dynamic_loss_scale_args\s{0,8}\.{3,}\s{0,8}(\{[^{}\n]{0,400}\})")
#: the loss on a Trainer log line ({'loss': 2.1, 'grad_norm': nan, ...}; transformers 5 quotes the values)
LOGGED_LOSS = re.compile(r"['\"]loss['\"]: '?(?P<loss>-?\d{1,12}(?:\.\d{1,12})?(?:e[+-]?\d{1,3})?|nan|inf)\b")


def overflow_line(text: str) -> re.Match | None:
    """The :data:`OVERFLOW` match of a log line, or None (a cheap substring test first)."""
    if not any(needle in text for needle in OVERFLOW_NEEDLES):
        return None
    return OVERFLOW.search(text)


def skipped_step(line: Line) -> bool:
    """Whether a Trainer log line with a NaN gradient norm is a step the loss scaler skipped, in a log that has
    shown the scaler's overflows before it: its loss is finite and not 0 (a NaN loss, or the 0 the Trainer logs for
    one, is a real NaN)."""
    found = LOGGED_LOSS.search(line.text)
    if not found or found.group("loss") in ("nan", "inf"):
        return False
    try:
        return float(found.group("loss")) != 0.0
    except ValueError:
        return False


def _scales(found: re.Match) -> tuple[str | None, str | None]:
    g = found.groupdict()
    return (g.get("a") or g.get("a2") or g.get("a3")), (g.get("b") or g.get("b2") or g.get("b3"))


def _short(scale: str) -> str:
    """'65536.0' as '65536'; other values as printed."""
    return scale[:-2] if scale.endswith(".0") else scale


def describe_floor(match, lines: list[Line]) -> tuple[str, str, dict]:
    """DS114 from a log: the fp16 loss scale fell to its floor. Evidence: how far it fell and over how many skipped
    steps (the first and last overflow lines), how long it stayed there, the scaler's arguments when DeepSpeed
    printed them, the exception that ended the run; the Trainer's NaN gradient norms, when there are, as those
    skipped steps. Returns (evidence, fix, {'title'})."""
    first = last = None
    before = after = grad_nan = 0
    after_last = stopped = args = None
    stuck = match.signature.name == "loss-scale-stuck"
    for index, line in enumerate(lines):
        text = line.text
        found = overflow_line(text)
        if found and index <= match.line_index:
            before += 1
            first = first or (line, found)
            last = (line, found)
        elif found:
            after += 1
            after_last = line
        elif "grad_norm" in text and "nan" in text and index < match.line_index:
            grad_nan += 1
        elif args is None and "dynamic_loss_scale_args" in text:
            args = SCALER_ARGS.search(text)
        if stopped is None and "Current loss scale already at minimum" in text and "Exception" in text:
            stopped = line
    where = f"rank {match.line.rank}: " if match.line.rank is not None else ""
    parts = []
    if stuck:
        parts.append(f"DeepSpeed skipped every optimizer step: step={match.groups.group('n')}, "
                     f"skipped={match.groups.group('n')}")
    if first:
        start, _ = _scales(first[1])
        _, end = _scales(last[1])
        span = first[0].at + (f" to {last[0].at}" if last[0] is not first[0] else "")
        fell = (f" from {_short(start)} to {_short(end)}" if start and end and start != end else
                f" to {_short(end)}" if end else "")
        parts.append(f"the fp16 loss scale fell{fell} in {before:,} overflowed (skipped) step(s) ({span})")
    elif not stuck:
        parts.append(f"at its floor: {match.line.text[match.groups.start():].strip()[:160]}")
    if after:
        parts.append(f"then stayed at its floor for {after:,} more skipped step(s) (to {after_last.at})")
    if args:
        parts.append(f"the scaler's arguments: {args.group(1)[:200]}")
    if stopped is not None:
        parts.append(f"DeepSpeed stopped the run ({stopped.at}): {stopped.text.strip()[:160]}")
    if grad_nan:
        parts.append(f"the {grad_nan:,} 'grad_norm': nan line(s) before it are those skipped steps, not the cause")
    fix = ("The scale is at its floor: the gradients overflow fp16 even unscaled, so no loss-scale setting helps. "
           "Train in bf16 on compute capability 8.0+ (\"bf16\": {\"enabled\": true} and fp16 off; the Trainer's "
           "--bf16): a model trained in bf16 (Llama, Qwen, ChatGLM3, Mistral) often overflows fp16 at once. On a GPU "
           "without bf16 (V100, T4): lower the learning rate, keep gradient clipping, and look for broken samples "
           "near the step it started. Before launch: `dsdoctor check ds_config.json --model MODEL` (fp16 on a bf16 "
           "model, DS113; loss-scale settings, DS114).")
    title = ("the fp16 loss scale fell to its floor: no step trained" if stuck else
             "the fp16 loss scale fell to its floor: every step overflowed")
    return where + "; ".join(parts), fix, {"title": title}
