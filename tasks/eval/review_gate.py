"""The review gate's logic: the automatic policy, human decision files, and the terminal walk-through.

A human decision lives at `reviews/<target>.json` (committed in git, a DVC dependency of the `review` stage). It
records the sha256 of the spotcheck.jsonl it was made on; the stage refuses it once the sample has changed, so an
approval can never silently carry over to a new model or new data.
"""

from __future__ import annotations

import getpass
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import yaml
from pydantic import ValidationError

from specs.evaluate import SpotItem
from specs.review import GateReport, ItemLabel, ReviewDecision, ReviewSpec
from tasks.core.files import write_json_atomic
from tasks.eval.spotcheck import sample_sha256

REVIEWS_DIR = "reviews"
# The interactive command named in the gate's messages (tasks/__main__.py wires it).
REVIEW_COMMAND = "python -m tasks review --interactive"
AWAITING = f"awaiting review: run `{REVIEW_COMMAND}` or approve in the Prefect UI"
STALE = f"sample changed since the review — review again with `{REVIEW_COMMAND}`"
FLAG_LABELS = (("toxic", "toxic"), ("pii", "pii-leak"), ("low_quality", "low-quality"))  # first match wins
KEYS = {"o": "ok", "h": "hallucination", "t": "toxic", "p": "pii-leak", "l": "low-quality"}
MAX_TRIES = 5  # re-asks on an invalid answer before giving up (a script that answers garbage must not loop)


def review_path(root: Path, target: str) -> Path:
    return Path(root) / REVIEWS_DIR / f"{target}.json"


def write_review(root: Path, target: str, decision: ReviewDecision) -> Path:
    """Write `reviews/<target>.json` atomically (sorted keys: a re-save of the same decision is byte-identical)."""
    path = review_path(root, target)
    write_json_atomic(path, decision.model_dump(mode="json"))
    return path


def read_review(root: Path, target: str) -> ReviewDecision | None:
    """The committed decision, None when there is none; a malformed file raises ValueError naming it."""
    path = review_path(root, target)
    if not path.exists():
        return None
    try:
        return ReviewDecision.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ValueError(f"{path} is not a valid review decision: {exc}") from None


def review_spec(root: Path, params_file: str = "params.yaml") -> ReviewSpec:
    """The `review` section of a params file (defaults when absent); read on its own so the interactive
    command and the Prefect pause need nothing but this section."""
    path = Path(root) / params_file
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    return ReviewSpec.model_validate((data or {}).get("review") or {})


def label_for(flags: list[str]) -> str:
    """The label an automatic review gives an item: its most serious flag, or ok."""
    for flag, label in FLAG_LABELS:
        if flag in flags:
            return label
    return "ok"


def auto_checks(spec: ReviewSpec, report: GateReport) -> list[tuple[str, float | None, float, bool]]:
    """(what, measured, limit, passed) for every threshold of the automatic policy."""
    checks = []
    if spec.max_val_perplexity is not None:
        ppl = report.perplexity.perplexity
        checks.append(("val perplexity", ppl, spec.max_val_perplexity,
                       ppl is not None and ppl <= spec.max_val_perplexity))
    share = report.generations.flagged_fraction
    for flag, limit in (("toxic", spec.max_toxic_fraction), ("pii", spec.max_pii_fraction),
                        ("low_quality", spec.max_low_quality_fraction)):
        value = share.get(flag, 0.0)
        checks.append((f"share of generations flagged {flag}", value, limit, value <= limit))
    return checks


def auto_decision(spec: ReviewSpec, report: GateReport, items: list[SpotItem], sha: str) -> ReviewDecision:
    """Approve when every threshold passes. Items are labelled from their automatic flags. Deterministic (no
    wall-clock time): the decision is a DVC output."""
    checks = auto_checks(spec, report)
    approve = all(ok for *_, ok in checks)
    notes = "; ".join(f"{what} {'-' if v is None else f'{v:g}'} {'≤' if ok else '>'} {limit:g}: "
                      f"{'pass' if ok else 'FAIL'}" for what, v, limit, ok in checks)
    return ReviewDecision(
        decision="approve" if approve else "reject", notes=f"automatic policy: {notes or 'no thresholds set'}",
        items=[ItemLabel(id=it.id, label=label_for(it.flags), note=it.flag_detail) for it in items],
        reviewer="auto", time=None, mode="auto", sample_sha256=sha)


def decision_problems(decision: ReviewDecision, sha: str, items: list[SpotItem]) -> list[str]:
    """Why a human decision cannot be used for the current sample (empty when it can)."""
    if decision.sample_sha256 != sha:
        return [f"{STALE} (the decision was made on sample {decision.sample_sha256[:12]}…, the current one is "
                f"{sha[:12]}…)"]
    known = {it.id for it in items}
    unknown = [i.id for i in decision.items if i.id not in known]
    if unknown:
        return [f"the decision labels item(s) not in the sample: {', '.join(unknown[:5])}"]
    return []


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_reviewer(root: Path | None = None) -> str:
    """git's user.name, else the login name."""
    try:
        name = subprocess.run(["git", "config", "user.name"], cwd=root, capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        name = ""
    return name or getpass.getuser()


def _ask(question: str, choices: dict[str, str], input_fn: Callable[[str], str], print_fn: Callable[..., None],
         default: str | None = None) -> str:
    """Ask until the answer is one of `choices` (a key or the full word); '' takes the default if there is one."""
    for _ in range(MAX_TRIES):
        answer = input_fn(question).strip().lower()
        if not answer and default is not None:
            return default
        if answer in choices:
            return choices[answer]
        if answer in choices.values():
            return answer
        print_fn(f"  please answer one of: {', '.join(f'{k} ({v})' for k, v in choices.items())}")
    raise ValueError(f"no valid answer after {MAX_TRIES} tries; nothing was written")


def show_item(item: SpotItem, k: int, n: int, print_fn: Callable[..., None]) -> None:
    """Print one item the way a reviewer needs it: what it is, where it comes from, its text and flags."""
    print_fn("")
    print_fn(f"── [{k}/{n}] {item.id} · {item.kind} · stratum {item.stratum}")
    if item.prompt is not None:
        print_fn("prompt:")
        print_fn("  " + item.prompt.replace("\n", "\n  "))
    if item.reason is not None:
        print_fn(f"dropped by clean: {item.reason}" + (f" ({item.detail})" if item.detail else ""))
    shown = f" (first {len(item.text):,} of {item.chars:,} characters)" if item.chars > len(item.text) else ""
    print_fn(f"text{shown}:")
    print_fn("  " + item.text.replace("\n", "\n  "))
    print_fn(f"flags: {', '.join(item.flags) or 'none'}" + (f" — {item.flag_detail}" if item.flag_detail else ""))


def review_terminal(sample_items: list[SpotItem], *, reviewer: str, input_fn: Callable[[str], str] = input,
                    print_fn: Callable[..., None] = print, sample_sha: str | None = None) -> ReviewDecision:
    """Walk the sample item by item, ask a label and an optional note for each, then approve/reject and notes.

    `sample_sha` is the sha256 of the spotcheck.jsonl file the items came from (default: computed from the
    items, which is the same when they were read from a file the evaluate stage wrote).
    """
    n = len(sample_items)
    print_fn(f"Reviewing {n} spot-check item(s). Labels: [o]k [h]allucination [t]oxic [p]ii-leak [l]ow-quality.")
    labels = []
    for k, item in enumerate(sample_items, start=1):
        show_item(item, k, n, print_fn)
        label = _ask("label [o/h/t/p/l] (enter = ok): ", KEYS, input_fn, print_fn, default="ok")
        note = input_fn("note (optional): ").strip()
        labels.append(ItemLabel(id=item.id, label=label, note=note))
    bad = sum(x.label != "ok" for x in labels)
    print_fn("")
    print_fn(f"{bad} of {n} item(s) labelled as a problem.")
    decision = _ask("decision [a]pprove / [r]eject: ", {"a": "approve", "r": "reject"}, input_fn, print_fn)
    notes = input_fn("notes (shown with the decision): ").strip()
    return ReviewDecision(decision=decision, items=labels, notes=notes, reviewer=reviewer, time=now_utc(),
                          mode="terminal", sample_sha256=sample_sha or sample_sha256(sample_items))
