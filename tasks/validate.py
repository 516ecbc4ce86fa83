"""Stage `validate`: the data-quality gate between ingest and everything that trains on its records.

The declared expectations run as Great Expectations suites, one per source (`source:<name>`), on the ingest
records. Outputs: `results.json` (deterministic summary: per suite and expectation, counts and example failing
record ids) and, when asked, the GX Data Docs HTML site under `reports/validate/data_docs/`.

The site is deliberately not part of the DVC out: GX renders random element ids and timestamps into every
page, so versioning it would make every rerun (and every Prefect run) look like a different result. The
versioned truth is `results.json`; the site is its rendering, rebuilt on every run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from specs.results import StageResult
from specs.validate import ExpectationSpec, ValidateSpec
from tasks.core.files import TEMP_MARK, write_json_atomic
from tasks.core.runner import StagePaths
from tasks.data import expectations as ex
from tasks.data.records import read_all_records

RESULTS = "results.json"
DOCS = "data_docs"
ALL_SUITE = "all"
NO_SOURCE = "(no source)"  # grouping key for records whose source is null (the not_null check reports them)
MAX_LISTED_FAILURES = 20   # bullets in the markdown summary; results.json always has every expectation


def run(spec: ValidateSpec, paths: StagePaths) -> StageResult:
    """Validate the ingest records against the declared suites; not ok when a suite fails and the gate is on."""
    out = paths.out
    out.mkdir(parents=True, exist_ok=True)
    # An earlier run's verdict and pages must not outlive it, should this run stop half-way.
    (out / RESULTS).unlink(missing_ok=True)
    docs = paths.reports / DOCS
    shutil.rmtree(docs, ignore_errors=True)

    table = read_all_records(paths.input("ingest"))
    if table.num_rows == 0:
        return _no_records(spec, paths)

    every_spec = [*spec.expectations, *(e for extra in spec.per_source.values() for e in extra)]
    frame = _records_frame(table, paths.root, every_spec)
    plan = _suite_plan(spec, frame)

    if spec.data_docs:
        docs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{DOCS}{TEMP_MARK}", dir=docs.parent)) if spec.data_docs else None
    try:
        context = ex.new_context(staging)
        suites = [
            {"name": name, "source": source, **ex.run_suite(context, name, rows, specs, spec.examples)}
            for name, source, rows, specs in plan
        ]
        if staging is not None:
            # Built beside its final place and renamed into it, so the site is either complete or absent.
            context.build_data_docs()
            staging.rename(docs)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)

    sources = sorted({s for _, s, _, _ in plan if s is not None})
    report = {
        "success": all(s["success"] for s in suites),
        "records": len(frame),
        "fail_on_error": spec.fail_on_error,
        "suites": suites,
        # A per_source key that matches no source is most likely a typo; say so rather than ignore it.
        "unused_per_source": sorted(set(spec.per_source) - set(sources)),
    }
    write_json_atomic(out / RESULTS, report)
    return _stage_result(spec, report, sources)


def _records_frame(table: pa.Table, root: Path, specs: list[ExpectationSpec]) -> pd.DataFrame:
    """The records as a dataframe with only the columns the expectations need (plus id and source)."""
    needed = {"id", "source"} | {s.column for s in specs if s.expect != "media_exist"}
    check_files = any(s.expect == "media_exist" for s in specs)
    frame = table.select([c for c in table.column_names if c in needed and c != "media"]).to_pandas()
    media = table.column("media").to_pylist() if "media" in needed or check_files else []
    if "media" in needed:
        # GX's value checks need scalars: a plain check on `media` sees each record's paths as a JSON list
        # (length_between then measures that string; media_exist is the meaningful check on this column).
        frame["media"] = [None if refs is None else json.dumps([(m or {}).get("path") for m in refs])
                          for refs in media]
    if check_files:
        frame[ex.MEDIA_MISSING] = _missing_media(media, root)
    return frame


def _missing_media(media: list[Any], root: Path) -> list[int]:
    """Per record, how many referenced media files are not regular files (relative paths are root-relative)."""
    seen: dict[str, bool] = {}

    def exists(path: str) -> bool:
        if path not in seen:
            p = Path(path)
            # An empty path would resolve to the root folder itself; it references nothing, so it is missing.
            seen[path] = bool(path) and (p if p.is_absolute() else root / p).is_file()
        return seen[path]

    return [sum(not exists((m or {}).get("path") or "") for m in refs or []) for refs in media]


def _suite_plan(spec: ValidateSpec, frame: pd.DataFrame) -> list[tuple[str, str | None, pd.DataFrame, list]]:
    """(suite name, source, rows, expectations) for every suite to run, in a fixed order."""
    keys = frame["source"].fillna(NO_SOURCE).astype(str)
    plan: list[tuple[str, str | None, pd.DataFrame, list]] = []
    for source in sorted(keys.unique()):
        specs = [*spec.expectations, *spec.per_source.get(source, [])]
        plan.append((f"source:{source}", source, frame[keys == source], specs))
    # Row-wise checks (not_null, in_set, length_between, media_exist) need no all-rows suite: when every
    # source passes, the union passes too (a weighted mean of pass fractions ≥ mostly is ≥ mostly). `unique`
    # does not decompose: ids repeated *across* sources pass every per-source suite. So an `all` suite re-runs
    # the global `unique` expectations on all rows; with a single source it would only repeat that source's.
    global_unique = [e for e in spec.expectations if e.expect == "unique"]
    if global_unique and len(plan) > 1:
        plan.append((ALL_SUITE, None, frame, global_unique))
    return plan


def _no_records(spec: ValidateSpec, paths: StagePaths) -> StageResult:
    """An empty dataset fails the gate whatever `fail_on_error` says: there is nothing to vouch for."""
    message = f"no records found in {paths.input('ingest').relative_to(paths.root).as_posix()}/shards"
    report = {"success": False, "records": 0, "fail_on_error": spec.fail_on_error, "suites": [],
              "unused_per_source": sorted(spec.per_source), "error": message}
    write_json_atomic(paths.out / RESULTS, report)
    counts = {"records": 0, "sources": 0, "suites": 0, "expectations": 0, "failed_expectations": 0,
              "by_source": {}}
    return StageResult(stage="validate", ok=False, counts=counts,
                       summary=f"**validate failed**: {message}; an empty dataset does not pass the gate.")


def _stage_result(spec: ValidateSpec, report: dict[str, Any], sources: list[str]) -> StageResult:
    suites = report["suites"]
    failures = [(s, e) for s in suites for e in s["expectations"] if not e["success"]]
    n_expectations = sum(len(s["expectations"]) for s in suites)
    counts = {
        "records": report["records"],
        "sources": len(sources),
        "suites": len(suites),
        "expectations": n_expectations,
        "failed_expectations": len(failures),
        "by_source": {
            s["source"]: {"rows": s["rows"], "failed_expectations": sum(not e["success"] for e in s["expectations"])}
            for s in suites if s["source"] is not None
        },
    }
    table = [
        {"suite": s["name"], "expectation": ex.label(e["spec"]), "success": e["success"],
         "rows": e["element_count"], "failed": e["unexpected_count"], "failed_pct": e["unexpected_percent"]}
        for s in suites for e in s["expectations"]
    ]
    ok = report["success"] or not spec.fail_on_error
    return StageResult(stage="validate", ok=ok, counts=counts, table=table,
                       summary=_summary(spec, report, failures, n_expectations, len(sources)))


def _summary(spec: ValidateSpec, report: dict[str, Any], failures: list[tuple[dict, dict]],
             n_expectations: int, n_sources: int) -> str:
    data = (f"{len(report['suites'])} suites on {report['records']:,} records "
            f"from {n_sources} source{'s' if n_sources != 1 else ''}")
    unused = report["unused_per_source"]
    note = f"\n\nNote: `per_source` names sources with no records: {', '.join(unused)}." if unused else ""
    if not failures:
        return f"validate passed: {n_expectations} expectations in {data}.{note}"
    verdict = "the gate fails" if spec.fail_on_error else "reported only: fail_on_error is false"
    lines = [f"**validate: {len(failures)} of {n_expectations} expectations failed** ({verdict}) in {data}.", ""]
    for suite, entry in failures[:MAX_LISTED_FAILURES]:
        where = f"source `{suite['source']}`" if suite["source"] is not None else "all sources"
        what = f"{entry['unexpected_count']:,} of {entry['element_count']:,} rows failed " \
               f"({entry['unexpected_percent']:.2f}%)"
        if "error" in entry:
            what = f"error: {entry['error']}"
        examples = ", ".join(f"`{i}`" for i in entry["examples"])
        lines.append(f"- `{ex.label(entry['spec'])}` on {where} (suite `{suite['name']}`): {what}"
                     + (f"; e.g. {examples}" if examples else ""))
    if len(failures) > MAX_LISTED_FAILURES:
        lines.append(f"- … and {len(failures) - MAX_LISTED_FAILURES} more (see results.json)")
    return "\n".join(lines) + note
