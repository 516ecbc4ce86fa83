"""The `validate` section: Great Expectations suites declared as data."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specs.base import StrictModel

RECORD_COLUMNS = ("id", "text", "source", "lang", "origin", "media")


class ExpectationSpec(StrictModel):
    """One expectation on one column of the ingested records, translated to a GX 1.x expectation."""

    expect: Literal["not_null", "length_between", "unique", "in_set", "media_exist"] = Field(
        ...,
        description="not_null: values present; length_between: string length within [min, max]; unique: no "
        "repeated values; in_set: values among `values`; media_exist: every referenced media file exists.",
    )
    column: Literal["id", "text", "source", "lang", "origin", "media"] = Field(
        ..., description="Record column the expectation applies to."
    )
    min: int | None = Field(None, ge=0, description="length_between: smallest allowed length.")
    max: int | None = Field(None, ge=1, description="length_between: largest allowed length.")
    values: list[str] | None = Field(None, min_length=1, description="in_set: the allowed values.")
    mostly: float = Field(
        1.0, gt=0.0, le=1.0, description="Fraction of rows that must pass (GX `mostly`); 1.0 = every row."
    )

    @model_validator(mode="after")
    def _arguments_fit(self) -> "ExpectationSpec":
        if self.expect == "length_between":
            if self.min is None and self.max is None:
                raise ValueError("length_between needs `min` and/or `max`")
            if self.min is not None and self.max is not None and self.min > self.max:
                raise ValueError(f"min ({self.min}) must be ≤ max ({self.max})")
        if self.expect == "in_set" and not self.values:
            raise ValueError("in_set needs `values`")
        if self.expect == "media_exist" and self.column != "media":
            raise ValueError("media_exist applies to the `media` column")
        return self


class ValidateSpec(StrictModel):
    """Check ingested records against expectation suites; a failed suite stops the pipeline."""

    expectations: list[ExpectationSpec] = Field(
        default_factory=list, description="Suite applied to the records of every source."
    )
    per_source: dict[str, list[ExpectationSpec]] = Field(
        default_factory=dict, description="Extra expectations for one source, keyed by source name."
    )
    fail_on_error: bool = Field(
        True, description="Exit non-zero when any expectation fails (the gate); false only reports."
    )
    data_docs: bool = Field(
        True, description="Write the HTML report of the results (reports/validate/data_docs/index.html): one "
        "self-contained page that renders offline.")
    examples: int = Field(5, ge=0, le=100, description="Example record ids shown per failed expectation.")
    batch_rows: int = Field(
        20_000, ge=1, le=10_000_000,
        description="Records per batch GX validates at once: memory holds one batch of the checked columns "
        "(texts included), whatever the corpus size; larger batches spend less time in GX's per-run overhead.")
