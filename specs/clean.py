"""The `clean` section: normalization, quality, toxicity, PII scrubbing and deduplication."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specs.base import StrictModel

PII_KINDS = ("email", "phone", "ipv4", "ipv6", "credit_card", "secret")


class QualityRules(StrictModel):
    """Gopher/C4-style heuristics for one text profile. Each rule yields a sub-score in [0, 1]; the quality
    score is their mean. A document is dropped (reason `low_quality`) when the score is below `threshold` or
    any single rule scores 0 (a hard failure that a good mean must not hide)."""

    min_words: int = Field(50, ge=0, description="Fewer words than this scores 0 on the length rule.")
    max_words: int = Field(100_000, ge=1, description="More words than this scores 0 on the length rule.")
    mean_word_length: tuple[float, float] = Field(
        (3.0, 10.0), description="Allowed range of mean word length (characters)."
    )
    max_symbol_ratio: float = Field(
        0.1, ge=0, le=1, description="Max ratio of `#` and `...` symbols to words (1.0 disables the rule)."
    )
    max_non_alpha_words: float = Field(
        0.2, ge=0, le=1, description="Max fraction of words without any alphabetic character."
    )
    max_duplicate_line_fraction: float = Field(
        0.3, ge=0, le=1, description="Max fraction of characters in repeated lines (Gopher's weighting, so "
        "repeated short speaker names in plays do not count like repeated paragraphs)."
    )
    max_top_ngram_fraction: float = Field(
        0.2, ge=0, le=1, description="Max fraction of characters covered by the most frequent word 2-gram."
    )
    min_punctuated_lines: float = Field(
        0.1, ge=0, le=1, description="Min fraction of lines ending in terminal punctuation (0 disables)."
    )
    threshold: float = Field(0.7, ge=0, le=1, description="Documents scoring below this are dropped.")


class QualitySpec(StrictModel):
    """Quality filtering, with a rule profile per source (code is judged by code rules, not prose rules)."""

    enabled: bool = Field(True, description="Run the quality filter.")
    prose: QualityRules = Field(default_factory=QualityRules, description="Rules for natural-language text.")
    code: QualityRules = Field(
        default_factory=lambda: QualityRules(
            min_words=5, mean_word_length=(1.5, 20.0), max_symbol_ratio=1.0, max_non_alpha_words=0.8,
            max_top_ngram_fraction=0.5, min_punctuated_lines=0.0, threshold=0.6,
        ),
        description="Rules for source code.",
    )
    profiles: dict[str, Literal["prose", "code"]] = Field(
        default_factory=dict, description="Profile per source name; unlisted sources use `prose`."
    )


class ToxicitySpec(StrictModel):
    """Word/phrase-list toxicity filter."""

    enabled: bool = Field(True, description="Run the toxicity filter.")
    wordlist: str | None = Field(
        None, description="Path (relative to the project root) of a list with one word/phrase per line; "
        "null uses the list bundled with forgeline."
    )
    max_ratio: float = Field(
        0.01, ge=0, le=1, description="Drop (reason `toxic`) when listed words/phrases exceed this share of words."
    )
    min_hits: int = Field(3, ge=1, description="...and at least this many listed words/phrases occur.")


class PIISpec(StrictModel):
    """PII scrubbing: matches are replaced by typed placeholders such as `<EMAIL>` and counted by kind."""

    enabled: bool = Field(True, description="Scrub PII before anything downstream sees the text.")
    kinds: list[Literal["email", "phone", "ipv4", "ipv6", "credit_card", "secret"]] = Field(
        default_factory=lambda: list(PII_KINDS), description="Kinds of PII to scrub."
    )


class DedupSpec(StrictModel):
    """Exact dedup on normalized text, then MinHash-LSH near dedup: documents are visited best-first and each
    kept one removes the undecided documents within `threshold` of itself (no transitive chains).

    Signatures are bit-identical to datasketch's MinHash; the LSH index is a numpy sort per band (same
    candidate pairs as datasketch's MinHashLSH, ~35× faster). Permutations are seeded by `run.seed`. Every
    run audits the decision on the exact Jaccard of all pairs of a seeded document sample."""

    exact: bool = Field(True, description="Drop exact duplicates of normalized text (reason `exact_duplicate`).")
    near: bool = Field(True, description="Drop near duplicates (reason `near_duplicate`).")
    shingle: Literal["word", "char"] = Field("word", description="Shingle unit.")
    shingle_size: int = Field(5, ge=1, le=32, description="Shingle length in units (word 5-grams by default).")
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    threshold: float = Field(0.8, gt=0, lt=1, description="Jaccard similarity that counts as a near duplicate.")
    bands: int | None = Field(None, ge=1, description="LSH bands; with `rows`, overrides the banding chosen "
                              "from the threshold (16×8 at 0.8, 128 perms). bands × rows ≤ num_perm.")
    rows: int | None = Field(None, ge=1, description="LSH rows per band (see `bands`).")
    verify: bool = Field(
        True, description="Judge LSH candidate pairs by exact shingle-set Jaccard ≥ threshold; false judges "
        "them by the signature estimate (noisier near the threshold)."
    )
    audit_sample: int = Field(
        2000, ge=0, description="Documents drawn (seeded) for the audit: the exact Jaccard of all their pairs "
        "gives the pair precision, recall and F1 of the near-dedup decision."
    )
    precision_sample: int = Field(
        200, ge=0, description="LSH candidate pairs whose two documents also join the audit sample, so that it "
        "holds duplicate pairs to measure on even when the corpus is much larger than `audit_sample`."
    )

    @model_validator(mode="after")
    def _banding(self) -> "DedupSpec":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both `bands` and `rows`, or neither")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands × rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        return self


class CleanSpec(StrictModel):
    """Normalize, filter, scrub and deduplicate the validated records; every drop is written to a ledger."""

    normalization: Literal["NFC", "NFKC", "none"] = Field(
        "NFC", description="Unicode normalization form applied first (whitespace is normalized too)."
    )
    quality: QualitySpec = Field(default_factory=QualitySpec, description="Quality heuristics.")
    toxicity: ToxicitySpec = Field(default_factory=ToxicitySpec, description="Toxicity filter.")
    pii: PIISpec = Field(default_factory=PIISpec, description="PII scrubbing.")
    dedup: DedupSpec = Field(default_factory=DedupSpec, description="Exact and near deduplication.")
    shard_records: int = Field(2_000, ge=1, description="Records per output shard.")
