"""Issue 14's score: `dsdoctor explain` on real logs from public threads (cases/threads/*/log.txt, as the reporters
pasted them), against the cause each thread established (meta.json's ``expected``: the rule whose meaning is that
cause, and where the decisive message was raised).

    python benchmarks/explain_threads.py > benchmarks/results/explain-threads.md

A case is **right** when explain's first finding is one of the expected rules (and its evidence holds the expected
text, where one is given, or points at the log line that holds it: :func:`evidence_holds`), or when the origin explain reports (``result.origin``: the message catalogue's template, or
the traceback's innermost frame) is the expected package (and file, where given). **Wrong rule**: the first finding
is a rule that names a cause (not LOG800/LOG805/LOG806/LOG809/LOG810/LOG811) and not an expected one. **Exit 0 on a
failure**: explain exited 0 where the thread shows a failure (every case but those whose ``expected.exit_code`` is 0).

Splits (meta.json ``split``, by thread): ``tuning``, the threads the recogniser was written against; ``held-out``, the
threads collected by others and scored before any change made for them (each case's ``seen`` says when that did not
hold).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the rules that name no cause: nothing found, a rank that failed with its error not in the log, an unnamed Python
#: error, a library's own message or warning, an inconclusive failure
UNNAMED = {"LOG800", "LOG806", "LOG805", "LOG809", "LOG810", "LOG811"}

#: the splits, in the order they were collected
SPLITS = ("tuning", "held-out", "held-out-2", "held-out-3", "held-out-4", "held-out-5", "held-out-6", "held-out-7",
          "held-out-8", "held-out-9", "held-out-10", "held-out-11", "held-out-12", "held-out-13", "held-out-14",
          "held-out-15", "held-out-16", "held-out-17", "held-out-18")


def rules_of(expected: dict) -> list[str]:
    rule = expected.get("rule")
    return [] if rule is None else [rule] if isinstance(rule, str) else list(rule)


def origin_right(expected: dict, origin: dict | None) -> bool:
    want = expected.get("origin") or {}
    if not want or not origin or not want.get("package"):
        return False
    # a package under its other names, on both sides: ms-swift's, and LLaMA-Factory's before 0.8 (llmtuner)
    package, reported = _alias(want["package"]), _alias(origin.get("package") or "")
    # a label that describes its package names it in its parentheses ("InternVL2 remote code (transformers_modules,
    # from the OpenGVLab/InternVL2-8B model repo)"): any word there; never a label that says it is unknown
    text = str(want["package"])
    named = {_alias(w) for inner in re.findall(r"\(([^()]*)\)", text) for w in re.findall(r"[\w.-]+", inner)}
    if package != reported and (text.lower().startswith("unknown") or reported not in named):
        return False
    file = want.get("file")
    if file:  # a label may give the path in the repository (src/transformers/..., deepspeed/runtime/...,
        # src/llmtuner/...): the path inside the package is what explain reports
        file = str(file).split(" ")[0]
        file = file[4:] if file.startswith("src/") else file
        tops = {str(want["package"]).lower().replace("-", "_"), str(origin.get("package") or "").lower()}
        top = next((t for t in tops if t and file.lower().startswith(t + "/")), None)
        file = file[len(top) + 1:] if top else file
    return not file or str(origin.get("file") or "").endswith(file)


def _alias(package: str) -> str:
    """A package's one name: lower case, no '-' or '_'; ms-swift is swift, llmtuner (LLaMA-Factory before 0.8) is
    llamafactory."""
    name = str(package).lower().replace("-", "").replace("_", "").replace("msswift", "swift")
    return "llamafactory" if name == "llmtuner" else name


def _flat(text: str) -> str:
    return " ".join(text.split())


def evidence_holds(want: str | None, evidence: str, log: str) -> bool:
    """Whether a finding's evidence shows the collector's decisive text ``want`` (raw log text): in the evidence
    itself, or in the log lines the evidence points at (its ``line N``, and the next four: a message wrapped or
    split over lines), whitespace collapsed on both sides. Explain restates what it read (``loss_scale_window = 100
    (int): Extra inputs are not permitted``); the line it cites is what the collector quoted."""
    if not want:
        return True
    want = _flat(want)
    if want in _flat(evidence):
        return True
    lines = log.splitlines()
    for match in re.finditer(r"\blines? (\d+)", evidence):
        n = int(match.group(1))
        if want in _flat(" ".join(lines[max(n - 1, 0):n + 4])):
            return True
    return False


def score(case: Path) -> dict:
    """Explain's answer on one case, judged."""
    from click.testing import CliRunner

    from dsdoctor.cli import cli

    meta = json.loads((case / "meta.json").read_text())
    expected = meta.get("expected") or {}
    start = time.perf_counter()
    out = CliRunner().invoke(cli, ["explain", "--format", "json", str(case / "log.txt")])
    seconds = time.perf_counter() - start
    try:
        data = json.loads(out.output)
    except ValueError:
        return {"case": case.name, "split": meta.get("split", "held-out"), "error": out.output[-300:], "right": False,
                "wrong_rule": False, "exit0": False, "first": None, "code": out.exit_code}
    first = data["findings"][0] if data["findings"] else {}
    origin = data["result"].get("origin")
    rules = rules_of(expected)
    by_rule = first.get("id") in rules and evidence_holds(expected.get("evidence"), first.get("evidence", ""),
                                                          (case / "log.txt").read_text(errors="replace"))
    by_origin = origin_right(expected, origin)
    failure = expected.get("exit_code", 1) != 0
    return {"case": case.name, "split": meta.get("split", "held-out"), "url": meta.get("url"),
            "expected": ", ".join(rules) or "-", "expected_origin": (expected.get("origin") or {}).get("package"),
            "first": first.get("id"), "origin": origin and f"{origin.get('package')}/{origin.get('file')}",
            "right": bool(by_rule or by_origin), "how": "rule" if by_rule else "origin" if by_origin else "",
            "wrong_rule": first.get("id") not in UNNAMED and first.get("id") not in rules,
            "exit0": failure and out.exit_code == 0, "code": out.exit_code, "seconds": seconds,
            "seen": meta.get("seen")}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--split", choices=SPLITS,
                        help="score one split only (by default tuning and held-out: a later batch is scored only when "
                             "asked, once, so that nothing is tuned on it before)")
    parser.add_argument("--all", action="store_true", help="score every split listed in SPLITS (each one already "
                                                               "scored once on its own)")
    args = parser.parse_args()
    cases = sorted(p for p in (ROOT / "cases" / "threads").iterdir() if (p / "meta.json").exists())
    wanted = SPLITS if args.all else (args.split,) if args.split else ("tuning", "held-out")
    cases = [c for c in cases if json.loads((c / "meta.json").read_text()).get("split", "held-out") in wanted]
    rows = [score(c) for c in cases]
    print("# python benchmarks/explain_threads.py" + (" --all" if args.all else f" --split {args.split}" if args.split
                                                       else ""))
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {len(rows)} threads\n")
    print("| case | split | expected rule | expected origin | explain's first finding | origin reported | right | "
          "exit |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['split']} | {r.get('expected', '')} | {r.get('expected_origin') or '-'} | "
              f"{r['first']} | {r.get('origin') or '-'} | {'yes (' + r['how'] + ')' if r['right'] else 'no'}"
              f"{' WRONG RULE' if r['wrong_rule'] else ''} | {r['code']}{' (failure, exit 0)' if r['exit0'] else ''}"
              f" |")
    print()
    for split in SPLITS:
        part = [r for r in rows if r["split"] == split]
        if not part:
            continue
        right = sum(r["right"] for r in part)
        print(f"{split}: {right}/{len(part)} right ({100 * right / len(part):.0f}%), "
              f"{sum(r['wrong_rule'] for r in part)} with a wrong rule, "
              f"{sum(r['exit0'] for r in part)} failures answered with exit 0; "
              f"median {statistics.median(r.get('seconds', 0) for r in part) * 1000:.0f} ms a log in-process")


if __name__ == "__main__":
    main()
