"""Stage `validate`: the data-quality gate between ingest and everything that trains on its records.

The declared expectations run as Great Expectations suites, one per source (`source:<name>`), on the ingest
records, streamed from the shards in batches of `batch_rows` rows: GX validates each batch, and the counts
are summed into corpus-wide results (tasks/data/validation/tally.py). `unique` is corpus-wide and is counted from 8-byte
hashes of the values, so memory is bounded by one batch plus 8 bytes per row and per suite that checks
uniqueness. Outputs: `verdict.json` (when the records may go on: passed or failures reported only, the
record count and the ingest manifest checked; the stages after the gate depend on it alone), `results.json`
(deterministic summary: per suite and expectation, counts and example failing record ids) and, when asked, its HTML rendering `reports/validate/data_docs/index.html`: one
self-contained page (inline CSS, no script, no outside request), so it renders fully offline.

GX's own Data Docs are not built: they would show one page per batch rather than the corpus, and their
pages load CSS/JS from outside CDNs (unstyled, with empty tables, offline). The page is not part of the DVC
out: the versioned truth is `results.json`; the page is its rendering, rebuilt on every run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa

from specs.results import StageResult
from specs.validate import ExpectationSpec, ValidateSpec
from tasks.core.files import write_json_atomic, write_text_atomic
from tasks.core.runner import MANIFEST, StagePaths
from tasks.data.validation import expectations as ex
from tasks.data.records import iter_record_batches
from tasks.data.validation.report_html import render_report
from tasks.data.validation.tally import RowTally, UniqueTally
from tasks.data.validation.verdict import VERDICT, write_verdict

RESULTS = "results.json"
DOCS = "data_docs"
INDEX = "index.html"
ALL_SUITE = "all"
NO_SOURCE = "(no source)"  # grouping key for records whose source is null (the not_null check reports them)
MAX_LISTED_FAILURES = 20   # bullets in the markdown summary; results.json always has every expectation
MEDIA_CACHE = 100_000      # media paths whose existence is remembered (bounded: a corpus may hold millions)


class SuiteRun:
    """One suite fed batch by batch: GX runs its row-wise expectations, `unique` is tallied from hashes."""

    def __init__(self, context: Any, name: str, source: str | None, specs: list[ExpectationSpec],
                 examples: int) -> None:
        self.name, self.source, self.rows = name, source, 0
        self.specs = ex.distinct(specs)
        failing = max(2 * examples, 1)
        self.tallies = [UniqueTally(s, failing) if s.expect == "unique" else RowTally(s, failing)
                        for s in self.specs]
        row_wise = [s for s in self.specs if s.expect != "unique"]
        self.gx = ex.BatchSuite(context, name, row_wise, examples) if row_wise else None

    def add(self, frame: pd.DataFrame) -> None:
        self.rows += len(frame)
        parts = iter(self.gx.run(frame)) if self.gx is not None else iter(())
        for tally in self.tallies:
            if isinstance(tally, UniqueTally):
                tally.add(frame[ex.gx_column(tally.spec)])
            else:
                tally.add(next(parts))


def run(spec: ValidateSpec, paths: StagePaths) -> StageResult:
    """Validate the ingest records against the declared suites; not ok when a suite fails and the gate is on."""
    out = paths.out
    out.mkdir(parents=True, exist_ok=True)
    # An earlier run's verdict and pages must not outlive it, should this run stop half-way.
    for name in (RESULTS, VERDICT):
        (out / name).unlink(missing_ok=True)
    docs = paths.reports / DOCS
    shutil.rmtree(docs, ignore_errors=True)

    every_spec = [*spec.expectations, *(e for extra in spec.per_source.values() for e in extra)]
    context = ex.new_context()
    runs: dict[str, SuiteRun] = {}
    # Row-wise checks (not_null, in_set, length_between, media_exist) need no all-rows suite: when every
    # source passes, the union passes too (a weighted mean of pass fractions ≥ mostly is ≥ mostly). `unique`
    # does not decompose: ids repeated *across* sources pass every per-source suite. So an `all` suite re-runs
    # the global `unique` expectations on all rows; with a single source it would only repeat that source's.
    global_unique = [e for e in spec.expectations if e.expect == "unique"]
    everything = SuiteRun(context, ALL_SUITE, None, global_unique, spec.examples) if global_unique else None
    records = 0
    for frame in _frames(paths, every_spec, spec.batch_rows):
        records += len(frame)
        for source, rows in _by_source(frame):
            if source not in runs:
                specs = [*spec.expectations, *spec.per_source.get(source, [])]
                runs[source] = SuiteRun(context, f"source:{source}", source, specs, spec.examples)
            runs[source].add(rows)
        if everything is not None:
            everything.add(frame)
    if records == 0:
        return _no_records(spec, paths)

    plan = [runs[s] for s in sorted(runs)] + ([everything] if everything is not None and len(runs) > 1 else [])
    suites = _finish(plan, paths, spec)
    report = {
        "success": all(s["success"] for s in suites),
        "records": records,
        "fail_on_error": spec.fail_on_error,
        "suites": suites,
        # A per_source key that matches no source is most likely a typo; say so rather than ignore it.
        "unused_per_source": sorted(set(spec.per_source) - set(runs)),
    }
    write_json_atomic(out / RESULTS, report)
    if spec.data_docs:
        docs.mkdir(parents=True, exist_ok=True)
        write_text_atomic(docs / INDEX, render_report(report))
    result = _stage_result(spec, report, sorted(runs))
    if result.ok:  # the records may go on: the one file the gated stages depend on
        write_verdict(out, paths.root, report["success"], records, paths.input("ingest") / MANIFEST)
    return result


def _frames(paths: StagePaths, specs: list[ExpectationSpec], batch_rows: int) -> Iterator[pd.DataFrame]:
    """The records as dataframes of `batch_rows` rows, with only the columns the expectations need (plus id
    and source)."""
    needed = {"id", "source"} | {s.column for s in specs if s.expect != "media_exist"}
    check_files = any(s.expect == "media_exist" for s in specs)
    columns = [c for c in ("id", "text", "source", "lang", "origin", "media")
               if c in needed or (c == "media" and check_files)]
    seen: dict[str, bool] = {}
    for table in iter_record_batches(paths.input("ingest"), columns, batch_rows):
        yield _records_frame(table, paths.root, needed, check_files, seen)


def _by_source(frame: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    keys = frame["source"].fillna(NO_SOURCE).astype(str)
    for source in sorted(keys.unique()):
        yield source, frame[keys == source]


def _records_frame(table: pa.Table, root: Path, needed: set[str], check_files: bool,
                   seen: dict[str, bool]) -> pd.DataFrame:
    """One batch as a dataframe GX can check (media as JSON text, plus the missing-media count)."""
    frame = table.select([c for c in table.column_names if c in needed and c != "media"]).to_pandas()
    media = table.column("media").to_pylist() if "media" in table.column_names else []
    if "media" in needed:
        # GX's value checks need scalars: a plain check on `media` sees each record's paths as a JSON list
        # (length_between then measures that string; media_exist is the meaningful check on this column).
        frame["media"] = [None if refs is None else json.dumps([(m or {}).get("path") for m in refs])
                          for refs in media]
    if check_files:
        frame[ex.MEDIA_MISSING] = _missing_media(media, root, seen)
    return frame


def _missing_media(media: list[Any], root: Path, seen: dict[str, bool]) -> list[int]:
    """Per record, how many referenced media files are not regular files (relative paths are root-relative)."""
    def exists(path: str) -> bool:
        if path not in seen:
            if len(seen) >= MEDIA_CACHE:
                seen.clear()
            p = Path(path)
            # An empty path would resolve to the root folder itself; it references nothing, so it is missing.
            seen[path] = bool(path) and (p if p.is_absolute() else root / p).is_file()
        return seen[path]

    return [sum(not exists((m or {}).get("path") or "") for m in refs or []) for refs in media]


def _finish(plan: list[SuiteRun], paths: StagePaths, spec: ValidateSpec) -> list[dict[str, Any]]:
    """Every suite's results.json entry; the ids of rows failing `unique` come from a second pass over the id
    and source columns (only when some suite found repeats: the hashes do not say which ids they were)."""
    uniques = [(run, t) for run in plan for t in run.tallies if isinstance(t, UniqueTally)]
    for _, tally in uniques:
        tally.close()
    wanted = {(run.name, id(t)): t.failing_positions.tolist() for run, t in uniques if len(t.failing_positions)}
    found = _ids_at(plan, wanted, paths, spec.batch_rows) if wanted else {}
    suites = []
    for run in plan:
        entries = [t.finish(found.get((run.name, id(t)), []), spec.examples) if isinstance(t, UniqueTally)
                   else t.finish(spec.examples) for t in run.tallies]
        suites.append({"name": run.name, "source": run.source, "success": all(e["success"] for e in entries),
                       "rows": run.rows, "expectations": entries})
    return suites


def _ids_at(plan: list[SuiteRun], wanted: dict[tuple[str, int], list[int]], paths: StagePaths,
            batch_rows: int) -> dict[tuple[str, int], list[str | None]]:
    """The record ids at the given row numbers of each suite (row numbers count the suite's own rows)."""
    by_name = {run.name: run for run in plan}
    found: dict[tuple[str, int], list[str | None]] = {key: [] for key in wanted}
    offsets = dict.fromkeys(by_name, 0)
    for table in iter_record_batches(paths.input("ingest"), ["id", "source"], batch_rows):
        frame = table.to_pandas()
        parts = dict(_by_source(frame))
        for name, run in by_name.items():
            rows = frame if run.source is None else parts.get(run.source)
            if rows is None:
                continue
            start, ids = offsets[name], rows["id"].tolist()
            for (suite, key), positions in wanted.items():
                if suite == name:
                    found[(suite, key)] += [ids[p - start] for p in positions if start <= p < start + len(ids)]
            offsets[name] = start + len(ids)
    return found


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
