"""How much of each package's message catalogue ``dsdoctor explain`` names with a rule: each template's text (every
placeholder filled with ``0``, which fits a number, a name or a word of a pattern) is run through explain's
signatures (:data:`dsdoctor.checks.logs.SIGNATURES`); the rule of the first that matches is the template's rule, and
its prefix the family (DS: the DeepSpeed config, HF: the Trainer, ENV: the environment and op builds, NET: the network,
MEM: memory, TRN: training, DATA: the data, LOG: run-time failures no preflight can catch). A template no signature
matches is still named by its origin (LOG809).

    python -m dsdoctor.messages.coverage > benchmarks/results/message-coverage.txt
"""

from __future__ import annotations

from collections import Counter

from dsdoctor.messages.catalogue import NAMES, catalogues

#: what fills a placeholder
FILL = "0"


def rule_of(text: str) -> str | None:
    """The rule of the first of explain's signatures that matches ``text`` (one line), or None."""
    from dsdoctor.checks.logs.signatures import candidates

    for signature in candidates(text):
        if signature.pattern.search(text):
            return signature.rule_id
    return None


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
