"""The `evaluate` section (held-out perplexity, generations, spot-check sample) and the spot-check item contract.

The review gate's own section, `ReviewSpec`, and the decision file's model live in `specs/review.py` (each stage
has its own spec module, see tasks/core/graph.py `code_deps`); they are re-exported here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from specs.base import require_unique, StrictModel
from specs.clean import CODE_RULES, PII_KINDS, PIIKind, QualityRules, QualitySpec, ToxicitySpec
from specs.review import ItemLabel, ReviewDecision, ReviewSpec  # re-exported: the review gate's contracts

NAME = r"^[a-z][a-z0-9_-]{0,63}$"  # prompt ids and categories: short, lower case, stable in file names
FLAGS = ("toxic", "pii", "low_quality")


class PromptSpec(StrictModel):
    """One fixed prompt the model continues; the same prompts are used on every run so outputs compare."""

    id: str = Field(..., pattern=NAME, description="Stable identifier (also seeds the prompt's sampling).")
    category: str = Field(..., pattern=NAME, description="Stratum of the spot-check sample (prose, code, ...).")
    text: str = Field(..., min_length=1, max_length=4000, description="The prompt text the model continues.")


DEFAULT_PROMPTS: tuple[dict[str, str], ...] = (
    {"id": "prose-palace", "category": "prose",
     "text": "ACT I, SCENE I. A room in the palace.\n\n[Enter the KING and his COUNSELLOR]\n\nKING:\n"},
    {"id": "prose-night", "category": "prose", "text": "The night was cold, and the old man walked slowly towards"},
    {"id": "code-fibonacci", "category": "code",
     "text": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
    {"id": "code-stack", "category": "code", "text": "class Stack:\n    def __init__(self):\n"},
    {"id": "encyclopedia-paris", "category": "encyclopedia", "text": "Paris is the capital and largest city of"},
    {"id": "encyclopedia-einstein", "category": "encyclopedia", "text": "Albert Einstein was a physicist who"},
    {"id": "docs-with", "category": "docs", "text": "The \"with\" statement\n********************\n\nThe "},
    {"id": "docs-list", "category": "docs", "text": "A list comprehension provides a concise way to"},
)


class SamplingSpec(StrictModel):
    """How continuations are sampled. Each prompt gets its own `torch.Generator`, seeded from run.seed and the
    prompt id, so a prompt's output depends neither on the order of the prompts nor on the others."""

    temperature: float = Field(
        0.8, ge=0.0, le=10.0, description="Softmax temperature; 0 means greedy decoding (argmax)."
    )
    top_k: int | None = Field(
        50, ge=1, le=1_000_000, description="Sample among the k most likely tokens only; null = no limit (1 = greedy)."
    )
    top_p: float = Field(
        0.95, gt=0.0, le=1.0, description="Nucleus sampling: the smallest set of tokens whose probability "
        "reaches top_p (1.0 = off). Applied after top_k."
    )
    max_new_tokens: int = Field(64, ge=1, le=8192, description="Tokens generated per prompt at most.")
    stop_at_eos: bool = Field(True, description="Stop a continuation at the end-of-document token.")


class FlagSpec(StrictModel):
    """Automatic flags attached to every spot-check item and generation, from the project's own detectors
    (tasks/data/privacy/pii.py, toxicity.py, quality.py). Thresholds are stricter than clean's on purpose: a flag asks a
    reviewer to look, it drops nothing."""

    pii_kinds: list[PIIKind] = Field(
        default_factory=lambda: list(PII_KINDS), description="PII kinds whose presence flags an item `pii`."
    )
    toxicity: ToxicitySpec = Field(
        default_factory=lambda: ToxicitySpec(max_ratio=0.0, min_hits=1),
        description="Word-list settings for the `toxic` flag on generations and dropped documents (default: any "
        "listed word or phrase).",
    )
    kept_toxicity: ToxicitySpec = Field(
        default_factory=ToxicitySpec,
        description="Word-list settings for the `toxic` flag on clean's kept documents: clean's own defaults "
        "(`clean.toxicity`: more than 1 % listed words and at least 3), so a kept document is flagged exactly "
        "when clean's filter would have dropped it — never a play's occasional oath, which clean keeps on "
        "purpose; the review gate's max_kept_toxic_fraction counts these.",
    )
    quality: QualitySpec = Field(
        default_factory=lambda: QualitySpec(
            prose=QualityRules(min_words=10),
            code=QualityRules(**{**CODE_RULES, "min_words": 3}),
            profiles={"code": "code"},
        ),
        description="Rules for the `low_quality` flag; `profiles` maps a source or prompt category to prose/code "
        "rules. Minimum lengths are lower than clean's: a continuation is short by design.",
    )


class SpotcheckSpec(StrictModel):
    """The seeded, stratified sample a reviewer judges: generations per prompt category, kept documents per
    source, dropped documents per source (or drop reason). Items are drawn by a stable hash of (run.seed, item
    id), so adding documents never reshuffles the rest of a stratum."""

    per_stratum: int = Field(2, ge=0, le=1000, description="Items drawn from each stratum (fewer if it is smaller).")
    generations: bool = Field(True, description="Sample generations, one stratum per prompt category.")
    kept_docs: bool = Field(True, description="Sample clean's kept documents, one stratum per source.")
    dropped_docs: bool = Field(True, description="Sample clean's drop ledger (with reasons).")
    media: bool = Field(True, description="Sample the multimodal stage's spot-check: records it kept (per media "
                        "kind) and quarantined (per check), each with its thumbnail or audio clip beside its text.")
    dropped_strata: Literal["source", "reason", "source_reason"] = Field(
        "source", description="How dropped documents are stratified: per source, per drop reason, or both."
    )
    max_chars: int = Field(
        1200, ge=50, le=1_000_000, description="Item text is truncated to this many characters (flags are computed "
        "on the full text)."
    )
    flags: FlagSpec = Field(default_factory=FlagSpec, description="Automatic flags per item.")


class EvaluateSpec(StrictModel):
    """Evaluate the pretrained model: held-out perplexity per source, generations for fixed prompts, and the
    spot-check sample for the review gate."""

    batch_size: int = Field(8, ge=1, le=4096, description="Validation sequences per forward pass.")
    perplexity_batches: int | None = Field(
        64, ge=1, description="Validation batches for perplexity, spread evenly over mix's val split (more than "
        "pretrain's `eval_batches`); null = every val sequence (up to a multiple of batch_size)."
    )
    prompts: list[PromptSpec] = Field(
        default_factory=lambda: [PromptSpec(**p) for p in DEFAULT_PROMPTS], max_length=1000,
        description="Fixed prompts, each with an id, a category (spot-check stratum) and text.",
    )
    sampling: SamplingSpec = Field(default_factory=SamplingSpec, description="Sampling of the continuations.")
    spotcheck: SpotcheckSpec = Field(default_factory=SpotcheckSpec, description="The sample for human review.")
    threads: int = Field(
        1, ge=1, le=1024, description="CPU threads while evaluating. Fixed (not 'all cores') so a rerun on another "
        "machine reduces in the same order and writes the same bytes."
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="Device for the forward passes. Sampling always happens on the CPU from the logits, "
        "so the draws only depend on them; outputs are byte-identical on CPU only."
    )

    @field_validator("prompts")
    @classmethod
    def _unique_ids(cls, prompts: list[PromptSpec]) -> list[PromptSpec]:
        require_unique([p.id for p in prompts], "prompt ids")
        return prompts


class SpotItem(StrictModel):
    """One line of `spotcheck.jsonl`: something a reviewer labels."""

    id: str = Field(..., description="`gen:<prompt id>`, `kept:<doc id>` or `dropped:<doc id>`; unique in a sample.")
    kind: Literal["generation", "kept_doc", "dropped_doc", "media"] = Field(..., description="What the item is.")
    stratum: str = Field(..., description="`<kind>:<category or source[/reason]>`, the group it was drawn from.")
    source: str = Field(..., description="Document source, or the prompt category for a generation.")
    prompt: str | None = Field(None, description="The prompt, for a generation.")
    text: str = Field(..., description="The continuation or document text, truncated to `spotcheck.max_chars`.")
    chars: int = Field(..., ge=0, description="Length of the full text (before truncation).")
    reason: str | None = Field(None, description="Drop reason (dropped documents only).")
    detail: str | None = Field(None, description="Drop detail from clean's ledger (dropped documents only).")
    flags: list[Literal["toxic", "pii", "low_quality"]] = Field(
        default_factory=list, description="Automatic flags raised on the full text."
    )
    flag_detail: str = Field("", description="Why each flag was raised (PII kinds, matched words, failed rules).")
    media_kind: Literal["image", "audio", "video"] | None = Field(None, description="Media items: the kind of media.")
    media_file: str | None = Field(None, description="Media items: the thumbnail (PNG) or audio clip to look at, "
                                   "root-relative; null when the media cannot be shown (its reason says why).")


__all__ = ["EvaluateSpec", "FlagSpec", "ItemLabel", "PromptSpec", "ReviewDecision", "ReviewSpec", "SamplingSpec",
           "SpotItem", "SpotcheckSpec"]
