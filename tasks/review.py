"""Stage `review`: the gate between evaluate and SFT. Writes data/review/decision.json or stops the pipeline.

Modes (`review.mode`):
  auto      approve when the gated stage's report and sample pass every check of tasks/eval/gate_policy.py
            (perplexity against a baseline, flagged and repetitive generations, flagged kept documents,
            disputed drops; thresholds in params); reviewer "auto", no time (the
            decision is a DVC output and must be byte-identical on rerun; runs/review.json has the wall clock).
  terminal  read the human decision committed at `reviews/<target>.json` (written by `review_cli`, i.e.
  prefect   `python -m tasks review`, or by the Prefect form in flows/review.py). It must carry the sha256 of
            the current data/evaluate/spotcheck.jsonl; missing or stale, the stage fails and says what to do.
  off       approve without looking (conversions, CI): reviewer "nobody", `reviewed: false`; the model card says
            "not reviewed".
A reject fails the stage as a gate (`ok=False`, the reviewer's notes in the summary): not retried, and nothing
downstream runs. The decision file is still written, so the verdict on record is the one that stopped the run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specs.results import StageResult
from specs.review import LABELS, GateReport, ReviewDecision, ReviewSpec
from tasks.core.files import sha256_file, write_json_atomic
from tasks.core.runner import StagePaths
from tasks.eval.review_gate import (
    AWAITING,
    auto_decision,
    decision_problems,
    default_reviewer,
    read_review,
    review_path,
    review_spec,
    review_terminal,
    unreviewed_decision,
    write_review,
)
from tasks.eval.spotcheck import read_sample

DECISION = "decision.json"


def run(spec: ReviewSpec, paths: StagePaths) -> StageResult:
    from tasks.core import graph

    # The stage under review is the gate's one upstream: evaluate (before SFT) or sft (before export).
    evaluate = paths.input(graph.stage(paths.stage).upstream[0])
    sample_file = evaluate / "spotcheck.jsonl"
    for needed in (sample_file, evaluate / "report.json"):
        if not needed.exists():
            raise FileNotFoundError(f"review: {needed} not found (run the evaluate stage first)")
    sha = sha256_file(sample_file)
    items = read_sample(sample_file)
    (paths.out / DECISION).unlink(missing_ok=True)  # an old verdict must not outlive a failed check

    if spec.mode == "off" or switched_off(evaluate):
        decision = unreviewed_decision(sha)
    elif spec.mode == "auto":
        report_file = evaluate / "report.json"
        try:
            report = GateReport.model_validate_json(report_file.read_text())
        except ValidationError as exc:
            raise ValueError(f"review: {report_file} lacks what the gate reads: {exc}") from exc
        decision = auto_decision(spec, report, items, sha)
    else:
        where = review_path(paths.root, spec.target).relative_to(paths.root).as_posix()
        try:
            decision = read_review(paths.root, spec.target)
        except ValueError as exc:
            return _refused(spec, paths.stage, f"{exc}; fix or delete it and review again")
        if decision is None:
            return _refused(spec, paths.stage, f"{AWAITING} (no decision at {where})")
        problems = decision_problems(decision, sha, items)
        if problems:
            return _refused(spec, paths.stage, f"{'; '.join(problems)} ({where})")

    write_json_atomic(paths.out / DECISION, decision.model_dump(mode="json"))
    counts = _counts(decision, len(items))
    return StageResult(stage=paths.stage, ok=decision.decision == "approve", counts=counts,
                       summary=_summary(decision, len(items)),
                       table=[{"id": i.id, "label": i.label, "note": i.note} for i in decision.items])


def switched_off(stage_dir: Path) -> bool:
    """The gated stage is off in params (`prefer.enabled: false` writes report.json `{"enabled": false}`): there
    is nothing to judge, so the gate passes it on, on record as not reviewed."""
    report = stage_dir / "report.json"
    return report.is_file() and json.loads(report.read_text()).get("enabled") is False


def _refused(spec: ReviewSpec, stage: str, message: str) -> StageResult:
    """No usable decision: the gate stays closed (a human has to act; retrying cannot help)."""
    return StageResult(stage=stage, ok=False, counts={"decision": None, "mode": spec.mode},
                       summary=f"**review ({spec.mode})**: {message}")


def _counts(decision: ReviewDecision, n_items: int) -> dict[str, Any]:
    labels = Counter(i.label for i in decision.items)
    return {"decision": decision.decision, "mode": decision.mode, "reviewer": decision.reviewer,
            "items": n_items, "labelled": len(decision.items),
            "labels": {label: labels.get(label, 0) for label in LABELS}}


def _summary(decision: ReviewDecision, n_items: int) -> str:
    labels = Counter(i.label for i in decision.items)
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(labels.items())) or "none"
    if not decision.reviewed:
        return f"**review (off)**: **not reviewed**; approved without looking at the {n_items} items."
    verdict = "approved" if decision.decision == "approve" else "**REJECTED**"
    who = decision.reviewer + (f" at {decision.time}" if decision.time else "")
    lines = [f"**review ({decision.mode})**: {verdict} by {who}; {len(decision.items)} of {n_items} items "
             f"labelled ({shown})."
             + (" The pipeline stops here." if decision.decision == "reject" else ""),
             "", _notes(decision)]
    problems = [i for i in decision.items if i.label != "ok"]
    if problems:
        lines += ["", "| item | label | note |", "|---|---|---|"]
        lines += [f"| {i.id} | {i.label} | {i.note.replace('|', '/')} |" for i in problems[:50]]
    return "\n".join(lines)


def _notes(decision: ReviewDecision) -> str:
    if decision.mode == "auto":  # one check per line: which one failed must be visible at a glance
        return "Checks:\n- " + decision.notes.removeprefix("automatic policy: ").replace("; ", "\n- ")
    return f"Notes: {decision.notes or '(none)'}"


def review_cli(root: Path, *, target: str | None = None, reviewer: str | None = None, params_file: str = "params.yaml",
               input_fn: Callable[[str], str] = input, print_fn: Callable[..., None] = print) -> int:
    """The interactive review (`python -m tasks review`): walk data/evaluate/spotcheck.jsonl in the terminal and
    write `reviews/<target>.json`. Returns a process exit code."""
    root = Path(root).resolve()
    target = target or review_spec(root, params_file).target
    # The sample of what is reviewed: evaluate's for the pretrained model, the sft stage's for the finetuned one.
    sample_file = root / "data" / ("evaluate" if target == "pretrain" else target) / "spotcheck.jsonl"
    if not sample_file.exists():
        print_fn(f"no spot-check sample at {sample_file}: run the evaluate stage first (`dvc repro evaluate`)")
        return 1
    sha = sha256_file(sample_file)
    try:
        existing = read_review(root, target)
    except ValueError as exc:
        print_fn(f"note: {exc}; it will be replaced")
        existing = None
    if existing is not None and existing.sample_sha256 == sha:
        print_fn(f"this sample was already reviewed by {existing.reviewer} ({existing.decision}); "
                 "reviewing again replaces that decision")
    try:
        decision = review_terminal(read_sample(sample_file), reviewer=reviewer or default_reviewer(root),
                                   input_fn=input_fn, print_fn=print_fn, sample_sha=sha)
    except (EOFError, KeyboardInterrupt):
        print_fn("\nreview aborted; nothing was written")
        return 1
    path = write_review(root, target, decision)
    rel = path.relative_to(root).as_posix()
    print_fn(f"wrote {rel} ({decision.decision}). Commit it (`git add {rel} && git commit`) and run `dvc repro`.")
    return 0
