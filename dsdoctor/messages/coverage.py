"""How much of each package's message catalogue ``dsdoctor explain`` names with a rule: each template's text (every
placeholder filled with ``0``, which fits a number, a name or a word of a pattern) is run through explain's
signatures (:data:`dsdoctor.checks.logs.SIGNATURES`); the rule of the first that matches is the template's rule, and
its prefix the family (DS: the DeepSpeed config, HF: the Trainer, ENV: the environment and op builds, NET: the network,
MEM: memory, TRN: training, DATA: the data, LOG: run-time failures no preflight can catch). A template no signature
matches is still named by its origin (LOG809).

    python -m dsdoctor.messages.coverage > benchmarks/results/message-coverage.txt
"""

from __future__ import annotations

import functools
from collections import Counter

from dsdoctor.messages.catalogue import NAMES, catalogues

#: what fills a placeholder
FILL = "0"


def rule_of(text: str) -> str | None:
    """The rule of the first of explain's signatures that matches ``text`` (one line), else the one rule whose own
    documentation quotes the message (:func:`quoted_messages`), or None."""
    from dsdoctor.checks.logs.signatures import candidates

    for signature in candidates(text):
        if signature.pattern.search(text):
            return signature.rule_id
    return next((rule for piece, rule in quoted_messages().items() if piece in text), None)


#: a quoted message in a rule's documentation is read in pieces cut at "...", a placeholder ({x}, <x>); a piece
#: shorter than this says too little to name a message
MIN_QUOTED = 30


@functools.lru_cache(maxsize=1)
def quoted_messages() -> dict[str, str]:
    """{a piece of a message quoted in a rule's ``what`` or ``why``: that rule}, for the pieces one rule alone quotes
    (DS123's why quotes DeepSpeed's "You are using an untested ZeRO Optimizer. Please add <...>"): a catalogue template
    that holds the piece is that rule's message, where no signature names it. A piece two rules quote (the fp16 loss
    scale's floor: DS113 and DS114) maps to neither, nor do pieces of two rules where one holds the other (DS118's
    "__init__() got an unexpected keyword argument" and DS126's "got an unexpected keyword argument")."""
    import re

    from dsdoctor.rules import catalogue

    seen: dict[str, set[str]] = {}
    for rule_id, rule in catalogue().items():
        text = " ".join(str(getattr(rule, key, "") or "") for key in ("what", "why"))
        for double, single in re.findall(r'"([^"]{24,400})"|\'([^\']{24,400})\'', text):
            for piece in re.split(r"\.\.\.|\u2026|\{[^}]*\}|<[^>]*>", double or single):
                piece = piece.strip(" .,:;")
                if len(piece) >= MIN_QUOTED:
                    seen.setdefault(piece, set()).add(rule_id)
    alone = {piece: next(iter(rules)) for piece, rules in seen.items() if len(rules) == 1}
    return {piece: rule for piece, rule in alone.items()  # nor one that another rule's quote holds or is held by
            if not any(other != rule and (piece in text or text in piece) for text, other in alone.items()
                       if text != piece)}


def coverage() -> dict[str, dict]:
    """{package: {"templates", "versions", "by_kind": {kind: n}, "mapped", "by_family": {prefix: n},
    "rules": {rule: n}}} over the shipped catalogues."""
    out = {}
    for package, data in catalogues().items():
        kinds, families, rules = Counter(), Counter(), Counter()
        for t in data["templates"]:
            kinds[t["kind"]] += 1
            rule = rule_of("".join(FILL if p is None else p for p in t["parts"]))
            if rule:
                rules[rule] += 1
                families["".join(c for c in rule if c.isalpha())] += 1
        out[package] = {"templates": len(data["templates"]), "versions": data["versions"], "by_kind": dict(kinds),
                        "mapped": sum(rules.values()), "by_family": dict(families), "rules": dict(rules)}
    return out


def main() -> None:
    table = coverage()
    print("# python -m dsdoctor.messages.coverage")
    print("| package | versions mined | templates | raise / assert / log / warn / print (NCCL: WARN / INFO) | "
          "mapped to a rule | by family | rules |")
    print("|---|---|---|---|---|---|---|")
    for package, row in table.items():
        k = row["by_kind"]
        kinds = (f"{k.get('nccl-warn', 0)} / {k.get('nccl-info', 0)}" if package == "nccl" else
                 " / ".join(str(k.get(x, 0)) for x in ("raise", "assert", "log", "warn", "print")))
        print(f"| {NAMES.get(package, package)} | {', '.join(row['versions'])} | {row['templates']:,} | {kinds} | "
              f"{row['mapped']} ({100 * row['mapped'] / max(1, row['templates']):.1f}%) | "
              f"{', '.join(f'{f} {n}' for f, n in sorted(row['by_family'].items()))} | "
              f"{', '.join(f'{r} {n}' for r, n in sorted(row['rules'].items()))} |")
    total = sum(r["templates"] for r in table.values())
    mapped = sum(r["mapped"] for r in table.values())
    print(f"\n{total:,} templates in all; {mapped} map to a rule ({100 * mapped / total:.1f}%); every other is named by "
          f"its origin (LOG809, LOG811).")


if __name__ == "__main__":
    main()
