"""The `clean` section: normalization, quality, toxicity, PII scrubbing and deduplication."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from specs.base import StrictModel
from specs.dedup import DedupSpec, LineDedupSpec  # noqa: F401 — part of the clean section's contract

PIIKind = Literal["email", "phone", "ipv4", "ipv6", "credit_card", "iban", "ssn", "secret", "dob", "passport"]
PII_KINDS: tuple[str, ...] = get_args(PIIKind)
# Address classes that name no person (a machine's own, a LAN's, an example's or a group's address); see PIISpec.
ADDRESS_CLASSES = ("loopback", "private", "link_local", "unspecified", "documentation", "multicast")


class QualityRules(StrictModel):
    """Gopher + C4 heuristics for one text profile (defaults: the published thresholds, Gopher's Table A1 and
    C4's line rules, as in datatrove's GopherQualityFilter / GopherRepetitionFilter / C4QualityFilter). Each
    rule yields a sub-score in [0, 1] (1 inside the limit, falling linearly past it); the quality score is
    their product and a document scoring below `threshold` is dropped (reason `low_quality`). A limit that
    cannot be violated (a maximum of 1, a minimum of 0) disables its rule."""

    min_words: int = Field(50, ge=0, description="Gopher: fewer words than this scores 0 on the length rule.")
    max_words: int = Field(100_000, ge=1, description="Gopher: more words than this scores 0 on the length rule.")
    mean_word_length: tuple[float, float] = Field(
        (3.0, 10.0), description="Gopher: allowed range of mean word length (characters)."
    )
    max_hash_ratio: float = Field(0.1, ge=0, le=1, description="Gopher: max `#` per word (1 disables).")
    max_ellipsis_ratio: float = Field(0.1, ge=0, le=1, description="Gopher: max `...`/`…` per word (1 disables).")
    max_bullet_lines: float = Field(0.9, ge=0, le=1, description="Gopher: max share of lines starting with a "
                                    "bullet (•, ‣, -, *, …).")
    max_ellipsis_lines: float = Field(0.3, ge=0, le=1, description="Gopher: max share of lines ending in an "
                                      "ellipsis.")
    min_stop_words: int = Field(2, ge=0, description="Gopher: min occurrences of the, be, to, of, and, that, "
                                "have, with (0 disables).")
    min_alpha_words: float = Field(0.8, ge=0, le=1, description="Gopher: min share of words holding a letter.")
    max_dup_lines: float = Field(
        0.3, ge=0, le=1, description="Gopher: max share of lines repeating an earlier line, counted over lines "
        "of at least `min_words_per_line` words (a play's speaker names, code's `else:` are not counted)."
    )
    max_dup_line_chars: float = Field(0.2, ge=0, le=1, description="Gopher: max share of line characters in "
                                      "repeated lines.")
    max_dup_paragraphs: float = Field(0.3, ge=0, le=1, description="Gopher: max share of paragraphs (blank-line "
                                      "separated) repeating an earlier one.")
    max_dup_paragraph_chars: float = Field(0.2, ge=0, le=1, description="Gopher: max share of paragraph "
                                           "characters in repeated paragraphs.")
    max_top_ngram: tuple[float, float, float] = Field(
        (0.2, 0.18, 0.16), description="Gopher: max character share of the most frequent repeated 2-, 3-, 4-gram."
    )
    max_dup_ngram: tuple[float, float, float, float, float, float] = Field(
        (0.15, 0.14, 0.13, 0.12, 0.11, 0.10),
        description="Gopher: max character share of words covered by repeated 5-, 6-, …, 10-grams.",
    )
    min_words_per_line: int = Field(3, ge=1, description="C4: a line needs this many words to count as kept text.")
    min_c4_lines: float = Field(
        0.1, ge=0, le=1, description="C4: min share of characters in lines C4 would keep (terminal punctuation, "
        "≥ `min_words_per_line` words, no javascript/policy phrase; lines are blank-line paragraphs with their "
        "hard wraps joined, as plays and help texts are hard-wrapped); 0 disables."
    )
    max_boilerplate_lines: float = Field(0.2, ge=0, le=1, description="C4: max share of lines mentioning "
                                         "javascript or a cookie/terms/privacy policy.")
    max_curly_lines: float = Field(0.1, ge=0, le=1, description="C4 (which drops any `{`): max share of lines "
                                   "holding a curly brace.")
    lorem_ipsum: bool = Field(True, description="C4: 'lorem ipsum' anywhere scores 0.")
    threshold: float = Field(0.5, ge=0, le=1, description="Documents scoring below this are dropped.")


CODE_RULES = dict(
    min_words=5, mean_word_length=(1.5, 20.0), max_hash_ratio=1.0, max_ellipsis_ratio=1.0, max_bullet_lines=1.0,
    max_ellipsis_lines=1.0, min_stop_words=0, min_alpha_words=0.2, max_dup_line_chars=0.5, max_dup_lines=0.5,
    max_dup_paragraphs=0.5, max_dup_paragraph_chars=0.5, max_top_ngram=(0.5, 0.5, 0.5),
    max_dup_ngram=(0.6, 0.6, 0.6, 0.6, 0.6, 0.6), min_c4_lines=0.0, max_boilerplate_lines=1.0,
    max_curly_lines=1.0, lorem_ipsum=False, threshold=0.5,
)


class QualitySpec(StrictModel):
    """Quality filtering, with a rule profile per source (code is judged by code rules, not prose rules)."""

    enabled: bool = Field(True, description="Run the quality filter.")
    prose: QualityRules = Field(default_factory=QualityRules, description="Rules for natural-language text.")
    code: QualityRules = Field(
        default_factory=lambda: QualityRules(**CODE_RULES),
        description="Rules for source code: the prose rules (stop words, bullets, C4 lines, braces, symbols) "
        "off, repetition limits loose.",
    )
    profiles: dict[str, Literal["prose", "code"]] = Field(
        default_factory=dict, description="Profile per source name; unlisted sources use `prose`."
    )
    curve: list[float] = Field(
        default_factory=lambda: [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
        description="Thresholds the clean report's quality curve counts kept documents and words at.",
    )


class LanguageSpec(StrictModel):
    """Language identification (py3langid, whose model ships in its wheel) on the first `sample_chars`
    characters; a document whose detected language is not allowed for its source, or is detected with less
    than `min_confidence`, is dropped (reason `language`). The detected language and confidence are written to
    the record's meta (`lang_detected`, `lang_confidence`)."""

    enabled: bool = Field(True, description="Run language identification.")
    allowed: dict[str, list[str]] = Field(
        default_factory=dict, description="Allowed ISO 639-1 codes per source; an unlisted source allows its "
        "records' declared `lang` tag (ingest's `lang`), an empty list allows anything."
    )
    min_confidence: float = Field(0.65, ge=0, le=1, description="Min probability of the detected language "
                                  "(datatrove's default 0.65).")
    exempt_code: bool = Field(True, description="Skip sources judged by the `code` quality profile.")
    sample_chars: int = Field(2_000, ge=100, description="Characters read from the start of each document "
                              "(detection cost grows with length; 2 KB is plenty for a confident guess).")


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
    kinds: list[PIIKind] = Field(
        default_factory=lambda: list(PII_KINDS), description="Kinds of PII to scrub."
    )
    keep_addresses: list[Literal["loopback", "private", "link_local", "unspecified", "documentation",
                                 "multicast"]] = Field(
        default_factory=lambda: list(ADDRESS_CLASSES),
        description="IP address classes left in the text because they identify no person, and redacting them "
        "breaks technical text: `loopback` (127.0.0.0/8, ::1), `private` (10/8, 172.16/12, 192.168/16, the "
        "carrier-shared 100.64/10, fc00::/7), `link_local` (169.254/16, fe80::/10), `unspecified` (0.0.0.0/8, "
        "::), `documentation` (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32), `multicast` (224/4, "
        "ff00::/8). Remove a class to redact its addresses as `<IP_ADDRESS>` too. Netmasks and CIDR networks "
        "(`10.0.0.0/8`) are always kept; a `/32` or `/128` is one host and is treated as an address.",
    )


class DecontaminationSpec(StrictModel):
    """Drop (reason `contaminated`) a pretraining document sharing a word n-gram (lowercase `\\w+` words, so
    case and punctuation never hide an overlap) with a text the model will be judged on: the evaluate stage's
    prompts (`evaluate.prompts`), SFT's held-out conversations (`data/instruct/heldout.jsonl`, the instruct
    stage's output) and the texts of `benchmark_files`. 13-grams as in GPT-3 and OLMo's decontamination."""

    enabled: bool = Field(True, description="Run the `decontamination` filter (place it in `clean.filters`).")
    ngram: int = Field(
        13, ge=1, le=64, description="n-gram length in words (named as instruct's). A benchmark text shorter than "
        "this is one n-gram (its whole word sequence), so a short prompt quoted whole still counts."
    )
    mode: Literal["any", "fraction"] = Field(
        "any", description="any: drop on a single shared n-gram (GPT-3's rule); fraction: drop when the shared "
        "n-grams are ≥ `threshold` of the n-grams of the smaller of document and benchmark text."
    )
    threshold: float = Field(0.5, gt=0, le=1, description="Shared n-gram share that drops (mode `fraction`).")
    min_words: int = Field(
        8, ge=1, description="Texts with fewer words are not indexed (counted in the report as `short`): shorter "
        "than `ngram`, a text is one n-gram of its whole, and a few-word prompt is common phrasing across a "
        "corpus, not a leak (GPT-3's floor was 8 words)."
    )
    heldout: bool = Field(True, description="Index SFT's held-out conversations (`data/instruct/heldout.jsonl`).")
    benchmark_files: list[str] = Field(
        default_factory=list, description="Benchmark task files (paths relative to the project root) whose texts "
        "are indexed: `.jsonl` (one item a line: its `text` field, else all its string values) or `.txt` (one "
        "item a non-blank line). Each is a DVC dep of clean (tasks/core/datadeps.py): an edited file re-runs clean; "
        "after changing the list, `python -m tasks graph --write`."
    )


class CleanSpec(StrictModel):
    """Normalize, filter, scrub and deduplicate the validated records; every drop is written to a ledger."""

    normalization: Literal["NFC", "NFKC", "none"] = Field(
        "NFC", description="Unicode normalization form applied first (whitespace is normalized too)."
    )
    quality: QualitySpec = Field(default_factory=QualitySpec, description="Quality heuristics.")
    toxicity: ToxicitySpec = Field(default_factory=ToxicitySpec, description="Toxicity filter.")
    language: LanguageSpec = Field(default_factory=LanguageSpec, description="Language identification.")
    decontamination: DecontaminationSpec = Field(
        default_factory=DecontaminationSpec, description="n-gram overlap with eval, held-out and benchmark texts."
    )
    filters: list[Literal["quality", "language", "toxicity", "decontamination"]] = Field(
        default_factory=lambda: ["quality", "language", "toxicity", "decontamination"],
        description="Order of the per-document filters; the first that drops a document decides its reason.",
    )

    @model_validator(mode="after")
    def _filters_once(self) -> "CleanSpec":
        repeated = sorted({f for f in self.filters if self.filters.count(f) > 1})
        if repeated:
            raise ValueError(f"clean.filters lists {', '.join(repeated)} more than once")
        return self
    pii: PIISpec = Field(default_factory=PIISpec, description="PII scrubbing.")
    dedup: DedupSpec = Field(default_factory=DedupSpec, description="Exact and near deduplication.")
    lines: LineDedupSpec = Field(default_factory=LineDedupSpec, description="Repeated-line removal after "
                                 "document dedup (off by default).")
    shard_records: int = Field(2_000, ge=1, description="Records per output shard.")
    shard_bytes: int = Field(
        128 * 1024 * 1024, ge=1, description="An output shard is also cut once its texts hold this many UTF-8 "
        "bytes (the record that reaches it is the shard's last): a reader of one shard (mix) then holds about this "
        "plus one document, not `shard_records` × the document size (2,000 books of 5 MB = 10 GB). 128 MiB, as "
        "ingest's shards: the default run's shards are cut by `shard_records` alone.")
    memory_gb: float = Field(
        2.0, gt=0, le=65_536, description="Resident memory (GiB) the corpus-wide phase may use, shared by the "
        "dedup tasks that run at once (local pool or Dask workers): it sets the number of band buckets on disk, "
        "the candidate ranges verified per task and the merge chunks. Beyond that the stage holds ~12 B per "
        "document (ranks and flags; ~40 B more while exact dedup sorts) and 24 B per dropped one. Results "
        "never depend on it."
    )


class CleanJob(StrictModel):
    """What `tasks.clean.run` receives: its section plus the evaluate stage's prompts to decontaminate against."""

    clean: CleanSpec = Field(default_factory=CleanSpec, description="The `clean` section.")
    eval_prompts: dict[str, str] = Field(
        default_factory=dict, description="Evaluation prompts by id (`evaluate.prompts`); documents sharing an "
        "n-gram with one are dropped as `contaminated`."
    )
