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
from tasks.eval.gate_policy import auto_checks, auto_label
from tasks.eval.spotcheck import sample_sha256

REVIEWS_DIR = "reviews"
# The interactive command named in the gate's messages (tasks/__main__.py wires it).
REVIEW_COMMAND = "python -m tasks review --interactive"
AWAITING = f"awaiting review: run `{REVIEW_COMMAND}` or approve in the Prefect UI"
STALE = f"sample changed since the review — review again with `{REVIEW_COMMAND}`"
KEYS = {"o": "ok", "b": "bad", "u": "unsure"}
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


def auto_decision(spec: ReviewSpec, report: GateReport, items: list[SpotItem], sha: str) -> ReviewDecision:
    """Approve when every check of the automatic policy passes (tasks/eval/gate_policy.py); items are labelled
    from their flags. Deterministic (no wall-clock time): the decision is a DVC output."""
    checks = auto_checks(spec, report, items)
    approve = all(c.passed for c in checks)
    notes = "; ".join(c.render() for c in checks)
    labels = [ItemLabel(id=it.id, label=label, note=note) for it in items for label, note in [auto_label(it)]]
    return ReviewDecision(
        decision="approve" if approve else "reject", notes=f"automatic policy: {notes or 'no checks set'}",
        items=labels, reviewer="auto", time=None, mode="auto", sample_sha256=sha)


def unreviewed_decision(sha: str) -> ReviewDecision:
    """Mode off: let the run continue, on record as not reviewed (no labels, nobody)."""
    return ReviewDecision(decision="approve", reviewed=False, reviewer="nobody", time=None, mode="off",
                          sample_sha256=sha, notes="not reviewed (review.mode: off): nobody looked at the sample")


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


def item_lines(item: SpotItem) -> list[str]:
    """What a reviewer needs to judge one item, as plain lines: where it comes from, the prompt or the drop
    reason, the (possibly truncated) text and the automatic flags. The terminal and the Prefect form show this."""
    what = {"generation": "the model's continuation of a fixed prompt", "kept_doc": "a document clean kept",
            "dropped_doc": "a document clean dropped",
            "media": f"a multimodal record ({item.media_kind}) the multimodal stage "
                     f"{'quarantined' if item.reason else 'kept'}"}[item.kind]
    lines = [f"{item.id} · {what} · stratum {item.stratum}"]
    if item.prompt is not None:
        lines += ["prompt:", "  " + item.prompt.replace("\n", "\n  ")]
    if item.reason is not None:
        by = "quarantined by multimodal" if item.kind == "media" else "dropped by clean"
        lines.append(f"{by}: {item.reason}" + (f" ({item.detail})" if item.detail else ""))
    if item.kind == "media":
        lines.append(f"{item.media_kind}: {item.media_file or '(cannot be shown: see the reason)'}")
    shown = f" (first {len(item.text):,} of {item.chars:,} characters)" if item.chars > len(item.text) else ""
    lines += [("generation" if item.kind == "generation" else "text") + f"{shown}:",
              "  " + item.text.replace("\n", "\n  ")]
    lines.append(f"flags: {', '.join(item.flags) or 'none'}" + (f" — {item.flag_detail}" if item.flag_detail else ""))
    return lines


def show_item(item: SpotItem, k: int, n: int, print_fn: Callable[..., None]) -> None:
    """Print one item the way a reviewer needs it."""
    first, *rest = item_lines(item)
    print_fn("")
    print_fn(f"── [{k}/{n}] {first}")
    for line in rest:
        print_fn(line)


def review_terminal(sample_items: list[SpotItem], *, reviewer: str, input_fn: Callable[[str], str] = input,
                    print_fn: Callable[..., None] = print, sample_sha: str | None = None) -> ReviewDecision:
    """Walk the sample item by item, ask a label and an optional note for each, then approve/reject and notes.

    `sample_sha` is the sha256 of the spotcheck.jsonl file the items came from (default: computed from the
    items, which is the same when they were read from a file the evaluate stage wrote).
    """
    n = len(sample_items)
    print_fn(f"Reviewing {n} spot-check item(s). Labels: [o]k, [b]ad (a problem; on a dropped document: the drop "
             "was wrong), [u]nsure; a note says why.")
    labels = []
    for k, item in enumerate(sample_items, start=1):
        show_item(item, k, n, print_fn)
        label = _ask("label [o/b/u] (enter = ok): ", KEYS, input_fn, print_fn, default="ok")
        note = input_fn("note (optional): ").strip()
        labels.append(ItemLabel(id=item.id, label=label, note=note))
    bad, unsure = sum(x.label == "bad" for x in labels), sum(x.label == "unsure" for x in labels)
    print_fn("")
    print_fn(f"{bad} of {n} item(s) labelled bad, {unsure} unsure.")
    decision = _ask("decision [a]pprove / [r]eject: ", {"a": "approve", "r": "reject"}, input_fn, print_fn)
    notes = input_fn("notes (shown with the decision): ").strip()
    return ReviewDecision(decision=decision, items=labels, notes=notes, reviewer=reviewer, time=now_utc(),
                          mode="terminal", sample_sha256=sample_sha or sample_sha256(sample_items))
