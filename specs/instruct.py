"""The `instruct` section: curate instruction conversations for SFT (sources, filters, dedup, decontamination,
quality cap and a held-out slice), and `InstructJob`, what the stage's `run()` receives."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from specs.base import line_cap_field, require_unique, StrictModel
from specs.clean import DedupSpec

SOURCE_NAME = r"^[a-z][a-z0-9_]{0,31}$"  # same rule as ingest source names


class _InstructSourceBase(StrictModel):
    name: str = Field(..., pattern=SOURCE_NAME, description="Source label carried by every conversation.")
    max_pairs: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Take at most this many conversations from the source (null = all), chosen by a seeded "
        "stable hash of their ids; the rest are counted as `not_taken` in the report, not ledgered.",
    )


class EmbeddedInstructSource(_InstructSourceBase):
    """Instruction data that ships with installed packages (nothing is downloaded at run time)."""

    kind: Literal["embedded"] = Field("embedded", description="Discriminator: an embedded source.")
    corpus: Literal["chatterbot", "docstrings", "pydoc_topics"] = Field(
        ...,
        description="chatterbot: English conversations of `chatterbot-corpus==1.3.3` (BSD-3; each YAML "
        "conversation becomes alternating user/assistant turns); docstrings: public stdlib functions, classes "
        "and methods as \"What does `module.func` do?\" -> their docstring; pydoc_topics: sections of "
        "`pydoc_data.topics` as \"Explain X in Python.\" -> the section text.",
    )


class InstructFieldMap(StrictModel):
    """Field names in a user's jsonl lines. A line holds either a chat (`messages`) or a single pair."""

    messages: str = Field("messages", description="Field with a list of {role, content} turns (chat format).")
    prompt: str = Field("prompt", description="Field with the user prompt (pair format).")
    response: str = Field("response", description="Field with the assistant response (pair format).")
    system: str | None = Field("system", description="Optional field with a system message (pair format).")
    id: str | None = Field(
        None, description="Field with a stable id; when null, ids are derived from file and line number."
    )


class FilesInstructSource(_InstructSourceBase):
    """User jsonl files: paths, directories or globs relative to the project root."""

    kind: Literal["files"] = Field("files", description="Discriminator: jsonl files on disk.")
    paths: list[str] = Field(..., min_length=1, description="Files, directories (read recursively) or globs.")
    fields: InstructFieldMap = Field(default_factory=InstructFieldMap, description="Field names in each line.")
    max_line_bytes: int = line_cap_field()


InstructSource = Annotated[EmbeddedInstructSource | FilesInstructSource, Field(discriminator="kind")]


def _default_sources() -> list:
    return [EmbeddedInstructSource(name="chatterbot", corpus="chatterbot"),
            EmbeddedInstructSource(name="docstrings", corpus="docstrings", max_pairs=1200),
            EmbeddedInstructSource(name="pydoc_topics", corpus="pydoc_topics")]


class FilterSpec(StrictModel):
    """Length, echo, symbol/word-ratio, language and format rules; a conversation failing one is ledgered.

    "Prompt" is the user turns joined, "response" the assistant turns joined. Ratio rules look at prose only:
    fenced code blocks (```) and `inline code` are left out, so code is not judged as if it were prose."""

    min_prompt_chars: int = Field(2, ge=0, description="Shorter prompts are dropped (`length`).")
    max_prompt_chars: int = Field(4_000, ge=1, description="Longer prompts are dropped (`length`).")
    min_response_chars: int = Field(2, ge=0, description="Shorter responses are dropped (`length`).")
    max_response_chars: int = Field(4_000, ge=1, description="Longer responses are dropped (`length`).")
    max_messages: int = Field(
        24, ge=2, le=1_000, description="Most user + assistant turns a conversation may have (`format`)."
    )
    max_echo_overlap: float = Field(
        0.8, gt=0, le=1,
        description="Drop (`echo`) when an assistant turn is its user turn verbatim, or at least this share of "
        "its words already occur in that user turn (the response only parrots the prompt).",
    )
    max_symbol_ratio: float = Field(
        0.15, ge=0, le=1,
        description="Most symbols (characters that are neither alphanumeric nor ordinary punctuation: `#`, "
        "`$`, `<`, `{`, `_`, ...) per non-space character in the prompt or the response prose (`symbols`).",
    )
    min_alpha_word_ratio: float = Field(
        0.6, ge=0, le=1,
        description="Least share of whitespace tokens holding a letter, in a prompt or response prose of at "
        "least 4 tokens (`symbols`; short answers such as a year are not judged).",
    )
    min_stopword_ratio: float = Field(
        0.12, ge=0, le=1,
        description="English check (`language`): least share of common English function words among the "
        "words of prompt + response prose, applied when there are at least 8 words (English prose sits at "
        "0.25–0.55).",
    )
    min_ascii_letter_ratio: float = Field(
        0.9, ge=0, le=1, description="English check (`language`): least share of letters that are ASCII."
    )

    @model_validator(mode="after")
    def _ranges(self) -> FilterSpec:
        for what in ("prompt", "response"):
            lo, hi = getattr(self, f"min_{what}_chars"), getattr(self, f"max_{what}_chars")
            if lo > hi:
                raise ValueError(f"min_{what}_chars ({lo}) exceeds max_{what}_chars ({hi})")
        return self


class DecontaminationSpec(StrictModel):
    """Word n-gram overlap with the evaluation prompts (lowercase `\\w+` words)."""

    enabled: bool = Field(True, description="Drop conversations that overlap an eval prompt (`decontamination`).")
    ngram: int = Field(
        5, ge=1, le=64,
        description="n-gram length in words. An eval prompt shorter than this is one n-gram (its whole word "
        "sequence); a prompt/response shorter than this is only compared for equality with an eval prompt.",
    )
    mode: Literal["fraction", "any"] = Field(
        "fraction",
        description="fraction: drop when prompt or response and an eval prompt share ≥ `threshold` of the "
        "n-grams of the smaller of the two (containment either way); any: drop on a single shared n-gram.",
    )
    threshold: float = Field(0.5, gt=0, le=1, description="Shared n-gram share that drops (mode `fraction`).")


class InstructSpec(StrictModel):
    """Read instruction conversations, filter, deduplicate, decontaminate, hold out a slice and keep the best."""

    sources: list[InstructSource] = Field(
        default_factory=_default_sources, min_length=1, description="Instruction sources, in order."
    )
    filters: FilterSpec = Field(default_factory=FilterSpec, description="Format, length and quality rules.")
    dedup: DedupSpec = Field(
        default_factory=lambda: DedupSpec(shingle_size=3, threshold=0.7),
        description="Exact dedup (normalized prompt + response) and MinHash-LSH near dedup, keeping the "
        "best-scored conversation of each cluster. Word 3-grams: instruction turns are short.",
    )
    decontamination: DecontaminationSpec = Field(
        default_factory=DecontaminationSpec, description="Overlap check against the evaluation prompts."
    )
    min_score: float = Field(
        0.0, ge=0, le=1, description="Drop (`min_score`) conversations whose quality score is below this."
    )
    max_train_pairs: int | None = Field(
        1_500, ge=1, description="Keep the best-scored this many for training (null = all); the rest are "
        "ledgered as `quality_cap`."
    )
    heldout_fraction: float = Field(
        0.05, ge=0, le=0.5, description="Share of the surviving conversations held out for instruction eval."
    )
    heldout_count: int | None = Field(
        None, ge=0, description="Exact held-out size; when set it overrides `heldout_fraction`."
    )

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list) -> list:
        require_unique([s.name for s in sources], "source names")
        return sources


class InstructJob(StrictModel):
    """What `tasks.instruct.run` receives: its section plus the evaluate stage's prompts to decontaminate."""

    instruct: InstructSpec = Field(default_factory=InstructSpec, description="The `instruct` section.")
    eval_prompts: list[str] = Field(
        default_factory=list, description="Evaluation prompts (the evaluate stage's); overlapping pairs are dropped."
    )
