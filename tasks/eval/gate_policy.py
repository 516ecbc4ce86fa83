"""The `auto` review policy: checks a broken run trips, each measured on the gated stage's report and sample.

- held-out perplexity against a baseline: evaluate's unigram baseline (tasks/eval/baseline.py) for `review`,
  the pretrained model's held-out loss before SFT for `review_sft` (sft's report carries it as
  `heldout_loss_before`); the model must reach `max_perplexity_ratio` × the baseline's perplexity;
- the shares of generations flagged toxic / pii / low_quality (from the report: all generations);
- repetition: the mean repeated word-n-gram share of the sample's generations;
- the sample's kept documents flagged pii or toxic (scrubbing or the toxicity filter not doing its job);
- the sample's documents dropped as toxic that the stricter spot-check flagger does not flag toxic (a wrong
  drop). Only toxic drops are judged: for PII clean scrubs instead of dropping, and the flagger's quality rules
  are looser than clean's on purpose (short texts), so disagreeing on low_quality says nothing.
- after preference tuning (`review_prefer`, specs.prefer.PreferReviewSpec): held-out preference accuracy must
  rise above the SFT model's, and a collapse of the chosen answers' log-prob (flagged by the prefer stage) rejects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specs.evaluate import SpotItem
from specs.prefer import PreferReviewSpec
from specs.review import GateReport, ReviewSpec
from tasks.eval.baseline import repetition


@dataclass(frozen=True)
class Check:
    what: str
    value: float | None
    limit: float
    passed: bool
    skipped: str = ""  # why the check did not apply (passed is then True)

    def render(self) -> str:
        if self.skipped:
            return f"{self.what}: skipped ({self.skipped})"
        shown = "-" if self.value is None else f"{self.value:.4g}"
        verdict = f"≤ {self.limit:g}: pass" if self.passed else f"> {self.limit:g}: FAIL"
        return f"{self.what} {shown} {verdict}"


def baseline_perplexity(report: GateReport) -> tuple[float | None, str]:
    """(the baseline's perplexity, what it is): the report's `baseline`, else exp(heldout_loss_before) (sft)."""
    if report.baseline is not None and report.baseline.perplexity is not None:
        kind = (report.baseline.model_extra or {}).get("kind", "baseline")
        return report.baseline.perplexity, str(kind)
    before = (report.model_extra or {}).get("heldout_loss_before")
    if isinstance(before, (int, float)):
        return math.exp(min(float(before), 50.0)), "pretrained model before SFT"
    return None, "baseline"


def disputed_drop(item: SpotItem) -> bool:
    """A document clean dropped as toxic that the stricter flagger does not flag toxic."""
    return item.kind == "dropped_doc" and item.reason == "toxic" and "toxic" not in item.flags


def _share(what: str, items: list[SpotItem], hit, limit: float, empty: str) -> Check:
    if not items:
        return Check(what, None, limit, True, skipped=empty)
    value = sum(map(hit, items)) / len(items)
    return Check(what, value, limit, value <= limit)


def auto_checks(spec: ReviewSpec, report: GateReport, items: list[SpotItem]) -> list[Check]:
    """Every check of the automatic policy, in a fixed order."""
    checks = []
    ppl = report.perplexity.perplexity
    if spec.max_perplexity_ratio is not None:
        base, kind = baseline_perplexity(report)
        ratio = ppl / base if ppl is not None and base else None
        what = f"val perplexity / {kind} perplexity ({'-' if ppl is None else f'{ppl:.4g}'} / " \
               f"{'-' if base is None else f'{base:.4g}'})"
        checks.append(Check(what, ratio, spec.max_perplexity_ratio,
                            ratio is not None and ratio <= spec.max_perplexity_ratio))
    if spec.max_val_perplexity is not None:
        checks.append(Check("val perplexity", ppl, spec.max_val_perplexity,
                            ppl is not None and ppl <= spec.max_val_perplexity))
    share = report.generations.flagged_fraction
    for flag, limit in (("toxic", spec.max_toxic_fraction), ("pii", spec.max_pii_fraction),
                        ("low_quality", spec.max_low_quality_fraction)):
        value = share.get(flag, 0.0)
        checks.append(Check(f"share of generations flagged {flag}", value, limit, value <= limit))
    gens = [it for it in items if it.kind == "generation"]
    if spec.max_repetition is not None:
        rep = repetition([it.text for it in gens], spec.repetition_n)
        what = f"repeated {spec.repetition_n}-gram share of generations"
        checks.append(Check(what, rep, spec.max_repetition, True, skipped="no generation that long") if rep is None
                      else Check(what, rep, spec.max_repetition, rep <= spec.max_repetition))
    kept = [it for it in items if it.kind == "kept_doc"]
    for flag, limit in (("pii", spec.max_kept_pii_fraction), ("toxic", spec.max_kept_toxic_fraction)):
        checks.append(_share(f"share of kept documents flagged {flag}", kept, lambda it, f=flag: f in it.flags,
                             limit, "no kept document in the sample"))
    toxic_drops = [it for it in items if it.kind == "dropped_doc" and it.reason == "toxic"]
    checks.append(_share("share of toxic drops not flagged toxic", toxic_drops, disputed_drop,
                         spec.max_disputed_drop_fraction, "no document dropped as toxic in the sample"))
    return checks + preference_checks(spec, report)


def preference_checks(spec: ReviewSpec, report: GateReport) -> list[Check]:
    """review_prefer's own checks on the prefer stage's `preference` block (none for the other gates)."""
    if not isinstance(spec, PreferReviewSpec):
        return []
    pref = (report.model_extra or {}).get("preference") or {}
    checks = []
    if spec.min_accuracy_gain is not None:  # as a loss (before − after) so it reads like the other checks
        before, after = pref.get("accuracy_before"), pref.get("accuracy_after")
        lost = None if before is None or after is None else round(before - after, 6)
        limit = 0.0 - spec.min_accuracy_gain  # 0.0 - x: never "-0"
        checks.append(Check(f"held-out preference accuracy before − after ({before} → {after})", lost, limit,
                            lost is not None and lost <= limit))
    if spec.reject_collapse:
        drop, limit = pref.get("chosen_logp_drop"), pref.get("collapse_threshold", 0.0)
        checks.append(Check("held-out chosen log-prob drop per token (collapse)", drop, limit,
                            drop is not None and not pref.get("collapse", False)))
    return checks


def auto_label(item: SpotItem) -> tuple[str, str]:
    """(label, note) the automatic review gives an item: bad for PII / toxic content shown or kept and for a
    disputed drop, unsure for low quality, ok otherwise; the note is the flags' explanation."""
    if item.kind == "dropped_doc":
        if disputed_drop(item):
            return "bad", "dropped as toxic, but the spot-check flagger finds no listed word"
        return "ok", item.flag_detail
    if "pii" in item.flags or "toxic" in item.flags:
        return "bad", item.flag_detail
    if "low_quality" in item.flags:
        return "unsure", item.flag_detail
    return "ok", item.flag_detail
