"""The model card's preference-tuning sections, from the prefer stage's report.json (export renders them). A module
of its own, importing nothing of the training code, so export's code deps stay what export runs."""

from __future__ import annotations

from typing import Any


def card_sections(report: dict[str, Any]) -> dict[str, Any]:
    """The card's "Preference tuning" and "Preference tuning metrics" sections (none when prefer was off)."""
    if not report.get("enabled"):
        return {}
    pref = report.get("preference") or {}
    pairs = ((report.get("data") or {}).get("train") or {}).get("pairs")
    held = {f"heldout {k} ({when})": (pref.get(when) or {}).get(k) for when in ("before", "after")
            for k in ("accuracy", "reward_accuracy", "margin", "chosen_logp_per_token")}
    flags = {k: pref.get(k) for k in ("collapse", "chosen_logp_drop", "generation_length_ratio", "start_loss")}
    return {"preference_tuning": f"After SFT, {pref.get('loss')} preference tuning (β {pref.get('beta')}) on {pairs} "
                                 "curated pairs, against the SFT model's log-probs as the reference (before = the "
                                 "SFT model). forgeline's README, stage `prefer`, says what each metric means.",
            "preference_tuning_metrics": {**held, **flags}}
