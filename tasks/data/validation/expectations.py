"""Great Expectations glue for the validate stage: ExpectationSpec → GX expectation, one batch run → plain dict.

GX is the engine for every row-wise expectation, run batch by batch (`BatchSuite`); the stage sums the
per-batch counts (tasks/data/validation/tally.py). `great_expectations` takes seconds to import, so it is imported inside
these functions only; importing this module is cheap. Everything returned here is plain JSON-able data with
no GX objects, ids or timestamps, so the stage can write it as deterministic bytes.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from specs.validate import ExpectationSpec

# media_exist is checked on a column derived from `media`: how many referenced files are missing per record.
MEDIA_MISSING = "media_missing"


def spec_dict(spec: ExpectationSpec) -> dict[str, Any]:
    """The spec as reported in results.json: expect, column, the arguments it uses, mostly."""
    args = {k: v for k, v in (("min", spec.min), ("max", spec.max), ("values", spec.values)) if v is not None}
    return {"expect": spec.expect, "column": spec.column, "args": args, "mostly": spec.mostly}


def label(spec: dict[str, Any]) -> str:
    """A short human name for a `spec_dict`, e.g. `length_between(text, min=200, mostly=0.95)`."""
    parts = [spec["column"], *(f"{k}={v}" for k, v in spec["args"].items())]
    if spec["mostly"] < 1.0:
        parts.append(f"mostly={spec['mostly']}")
    return f"{spec['expect']}({', '.join(str(p) for p in parts)})"


def gx_column(spec: ExpectationSpec) -> str:
    """The dataframe column a spec is checked on (media_exist uses the derived count)."""
    return MEDIA_MISSING if spec.expect == "media_exist" else spec.column


def distinct(specs: list[ExpectationSpec]) -> list[ExpectationSpec]:
    """`specs` without repeats, first kept: GX silently drops an expectation equal to one already in a suite
    (the returned copy has no id), so repeated specs (e.g. the same one global and per-source) count once."""
    out: list[ExpectationSpec] = []
    for spec in specs:
        if spec not in out:
            out.append(spec)
    return out


def to_gx(spec: ExpectationSpec) -> Any:
    """The GX 1.x expectation a spec stands for."""
    import great_expectations.expectations as gxe

    column, mostly = gx_column(spec), spec.mostly
    if spec.expect == "not_null":
        return gxe.ExpectColumnValuesToNotBeNull(column=column, mostly=mostly)
    if spec.expect == "unique":
        return gxe.ExpectColumnValuesToBeUnique(column=column, mostly=mostly)
    if spec.expect == "in_set":
        return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=list(spec.values or []), mostly=mostly)
    if spec.expect == "length_between":
        return gxe.ExpectColumnValueLengthsToBeBetween(
            column=column, min_value=spec.min, max_value=spec.max, mostly=mostly
        )
    if spec.expect == "media_exist":
        return gxe.ExpectColumnValuesToBeInSet(
            column=column, value_set=[0], mostly=mostly,
            notes=f"forgeline media_exist: `{MEDIA_MISSING}` counts the record's media files that do not exist",
        )
    raise ValueError(f"unknown expectation {spec.expect!r}")


def gx_type(spec: ExpectationSpec) -> str:
    """GX's name for the expectation, e.g. `expect_column_values_to_be_unique`."""
    return str(to_gx(spec).expectation_type)


def new_context() -> Any:
    """An in-memory GX context with no analytics, no progress bars and no Data Docs site."""
    # Analytics would be the only network traffic; the env var is read when GX initializes its context.
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig, InMemoryStoreBackendDefaults, ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        data_docs_sites={},
    )
    context = gx.get_context(project_config=config, mode="ephemeral")
    context.data_sources.add_pandas("records")
    return context


class BatchSuite:
    """One GX suite and validation definition, built once and run on many dataframes (one per batch)."""

    def __init__(self, context: Any, name: str, specs: list[ExpectationSpec], examples: int) -> None:
        import great_expectations as gx

        self.specs = distinct(specs)
        # Twice `examples` failing rows per batch: the stage keeps the first 2×examples failing rows overall and
        # lists their distinct ids (a failed `unique` lists each repeated id at least twice).
        self.failing_rows = max(2 * examples, 1)
        self._results_store = context.validation_results_store
        asset = context.data_sources.get("records").add_dataframe_asset(name)
        batch = asset.add_batch_definition_whole_dataframe("batch")
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        self._ids = [suite.add_expectation(to_gx(spec)).id for spec in self.specs]
        self._definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite))

    def run(self, frame: pd.DataFrame) -> list[dict[str, Any]]:
        """Per spec, GX's counts on `frame` (must have an `id` column) and the ids of its first failing rows.

        `missing_count` is None where GX counts nulls as failures (not_null), else the nulls GX left out.
        """
        # SUMMARY without values: the failing *values* would be whole documents for a text check; the first
        # few failing row indexes are all the report needs.
        result_format = {"result_format": "SUMMARY", "partial_unexpected_count": self.failing_rows,
                         "exclude_unexpected_values": True}
        outcome = self._definition.run(batch_parameters={"dataframe": frame}, result_format=result_format)
        # GX keeps every run's result in the context's (in-memory) results store: one per batch, so memory would
        # grow with the corpus. The summary below is all that is kept.
        for key in self._results_store.list_keys():
            self._results_store.remove_key(key)
        by_id = {r.expectation_config.id: r for r in outcome.results}
        out = []
        for gx_id in self._ids:
            res = by_id[gx_id]
            info = res.result or {}
            missing = info.get("missing_count")
            part = {
                "element_count": int(info.get("element_count") or 0),
                "missing_count": None if missing is None else int(missing),
                "unexpected_count": int(info.get("unexpected_count") or 0),
                "failing_ids": [_record_id(frame.at[i, "id"])
                                for i in (info.get("partial_unexpected_index_list") or [])],
                "error": None,
            }
            if res.exception_info and res.exception_info.get("raised_exception"):
                part["error"] = str(res.exception_info.get("exception_message"))
            out.append(part)
        return out


def _record_id(value: Any) -> str | None:
    return None if pd.isna(value) else str(value)
