"""Great Expectations glue for the validate stage: ExpectationSpec → GX expectation, one suite run → plain dict.

`great_expectations` takes seconds to import, so it is imported inside these functions only; importing this
module is cheap. Everything returned here is plain JSON-able data with no GX objects, ids or timestamps, so the
stage can write it as deterministic bytes.
"""

from __future__ import annotations

import os
from pathlib import Path
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


def _to_gx(spec: ExpectationSpec) -> Any:
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


def new_context(docs_dir: Path | None) -> Any:
    """An in-memory GX context with no analytics, no progress bars and, optionally, a local Data Docs site."""
    # Analytics would be the only network traffic; the env var is read when GX initializes its context.
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig, InMemoryStoreBackendDefaults, ProgressBarsConfig,
    )

    sites = {}
    if docs_dir is not None:
        sites["local"] = {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        data_docs_sites=sites,
    )
    context = gx.get_context(project_config=config, mode="ephemeral")
    context.data_sources.add_pandas("records")
    return context


def run_suite(context: Any, name: str, frame: pd.DataFrame, specs: list[ExpectationSpec],
              examples: int) -> dict[str, Any]:
    """Validate `frame` (must have an `id` column) against `specs` as GX suite `name`; return a plain summary.

    Each expectation's entry carries up to `examples` ids of failing records, in record order.
    """
    import great_expectations as gx

    asset = context.data_sources.get("records").add_dataframe_asset(name)
    batch = asset.add_batch_definition_whole_dataframe("all rows")
    suite = context.suites.add(gx.ExpectationSuite(name=name))
    # GX silently drops an expectation equal to one already in the suite (the returned copy has no id), so
    # repeated specs (e.g. the same one global and per-source) are dropped here, keeping the first.
    unique_specs: list[ExpectationSpec] = []
    for spec in specs:
        if spec not in unique_specs:
            unique_specs.append(spec)
    gx_ids = [suite.add_expectation(_to_gx(spec)).id for spec in unique_specs]
    definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    # SUMMARY, not COMPLETE: COMPLETE also returns every failing *value* (whole documents for a text check),
    # which costs memory and bloats Data Docs; the first few failing row indexes are all the report needs.
    # Twice `examples` rows, because a failed `unique` lists each repeated id at least twice.
    result_format = {"result_format": "SUMMARY", "partial_unexpected_count": max(2 * examples, 1)}
    outcome = definition.run(batch_parameters={"dataframe": frame}, result_format=result_format)

    by_id = {r.expectation_config.id: r for r in outcome.results}
    entries = []
    for spec, gx_id in zip(unique_specs, gx_ids):
        res = by_id[gx_id]
        info = res.result or {}
        entry = {
            "spec": spec_dict(spec),
            "gx": res.expectation_config.type,
            "success": bool(res.success),
            "element_count": int(info.get("element_count") or 0),
            "unexpected_count": int(info.get("unexpected_count") or 0),
            # GX's percent: of non-null values for every check but not_null (nulls are "missing", not failed).
            "unexpected_percent": round(float(info.get("unexpected_percent") or 0.0), 4),
            "examples": _example_ids(frame, info.get("partial_unexpected_index_list") or [], examples),
        }
        if res.exception_info and res.exception_info.get("raised_exception"):
            entry["success"] = False
            entry["error"] = str(res.exception_info.get("exception_message"))
        entries.append(entry)
    return {"success": all(e["success"] for e in entries), "rows": len(frame), "expectations": entries}


def _example_ids(frame: pd.DataFrame, index: list[Any], limit: int) -> list[str | None]:
    """Record ids (not row indexes) of the failing rows GX reported, first occurrence order, at most `limit`."""
    ids: list[str | None] = []
    for label_ in index:
        value = frame.at[label_, "id"]
        rid = None if pd.isna(value) else str(value)
        if rid not in ids:
            ids.append(rid)
    return ids[:limit]

