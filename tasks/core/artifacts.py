"""What the Prefect UI shows for each stage, built from the files the stages leave behind.

The flow (flows/pipeline.py) only publishes these `UIArtifact`s; everything they say is computed here from
`data/<stage>/` (stats.json, report.json, results.json, metrics.jsonl) and `reports/<stage>/`, so the same
content can be tested without a Prefect server and rebuilt for any finished run.

- the data funnel per source: read → quarantined → dropped by reason → kept → tokens (after ingest, clean, mix),
  with a check that the counts add up (nothing lost silently);
- validate: a link to the GX Data Docs;
- clean: the near-dedup report (banding, candidate pairs, verified precision, the LSH S-curve);
- pretrain: the loss curve as a PNG (reports/pretrain/loss.png, shown as an image) and throughput;
- export: the model card, rendered as markdown;
- progress: a percentage parsed from a stage's log lines where it prints `i/n`.
Keys get their stage's position and tables are fitted to the screen when published (tasks/core/ui_layout.py).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tasks.core import graph
from tasks.core.files import atomic_path
from tasks.core.reports_server import report_url

LOSS_PNG = "loss.png"
DATA_DOCS = "data_docs/index.html"


class UIArtifact(BaseModel):
    """One artifact to publish: the flow maps `kind` onto Prefect's create_*_artifact functions."""

    kind: Literal["markdown", "table", "image", "link"] = Field(..., description="Prefect artifact type.")
    key: str = Field(..., pattern=r"^[a-z0-9-]+$", description="Artifact key (lowercase, digits, dashes).")
    description: str = Field("", description="Shown under the artifact in the UI.")
    markdown: str | None = Field(None, description="Body of a markdown artifact.")
    table: list[dict[str, Any]] | None = Field(None, description="Rows of a table artifact.")
    url: str | None = Field(None, description="Image URL (may be a data: URI) or link target.")
    link_text: str | None = Field(None, description="Text of a link artifact.")


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _out(root: Path, stage: str) -> Path:
    return root / graph.stage(stage).out_dir


def _reports(root: Path, stage: str) -> Path:
    return root / graph.REPORTS_DIR / stage


# ----------------------------------------------------------------------------------------------- data funnel

def data_funnel(root: Path) -> list[dict[str, Any]]:
    """One row per source (plus `total`): how many records each data stage read, set aside and kept.

    Columns appear as the stages that fill them have run: ingest (read, quarantined + reasons, kept), clean
    (dropped:<reason>, kept), mix (train/val tokens). `accounted` is False when a stage's counts do not add up.
    """
    ingest = _read_json(_out(root, "ingest") / "stats.json")
    clean = _read_json(_out(root, "clean") / "report.json") if "clean" in graph.STAGE_NAMES else None
    mix = _read_json(_out(root, "mix") / "report.json") if "mix" in graph.STAGE_NAMES else None
    if ingest is None:
        return []
    sources = list(ingest.get("by_source", {}))
    drop_reasons = sorted({k.split(":", 1)[1] for s in (clean or {}).get("by_source", {}).values()
                           for k in s if k.startswith("dropped:")})
    rows = []
    for src in sources:
        ing = ingest["by_source"][src]
        row: dict[str, Any] = {
            "source": src, "read": ing["read"], "quarantined": ing["quarantined"],
            "quarantine reasons": _reasons(ing.get("by_reason", {})), "ingested": ing["kept"],
        }
        ok = ing["read"] == ing["kept"] + ing["quarantined"]
        if clean is not None:
            cl = clean.get("by_source", {}).get(src, {"in": 0, "kept": 0})
            for reason in drop_reasons:
                row[f"dropped: {reason}"] = cl.get(f"dropped:{reason}", 0)
            row["kept"] = cl.get("kept", 0)  # a source whose every document was dropped has no `kept`
            dropped = sum(v for k, v in cl.items() if k.startswith("dropped:"))
            ok = ok and cl["in"] == ing["kept"] and cl["in"] == row["kept"] + dropped
        if mix is not None:
            mx = mix.get("sources", {}).get(src, {})
            row["train tokens"] = mx.get("realized_tokens", 0)
            row["val tokens"] = mx.get("val_tokens", 0)
        row["accounted"] = ok
        rows.append(row)
    total: dict[str, Any] = {"source": "total"}
    for key in rows[0] if rows else ():
        if key == "source":
            continue
        values = [r[key] for r in rows]
        if key == "accounted":
            total[key] = all(values)
        elif key == "quarantine reasons":
            total[key] = _reasons(ingest.get("by_reason") or _sum_reasons(ingest))
        else:
            total[key] = sum(values)
    return rows + [total]


def _reasons(by_reason: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(by_reason.items())) or "none"


def _sum_reasons(ingest: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in ingest.get("by_source", {}).values():
        for k, v in s.get("by_reason", {}).items():
            out[k] = out.get(k, 0) + v
    return out


# -------------------------------------------------------------------------------------------- stage specifics

def data_docs_artifacts(root: Path) -> list[UIArtifact]:
    """Where the Great Expectations Data Docs of the last validate run are: on `python -m tasks reports` when
    FORGELINE_REPORTS_URL names it, else the local file."""
    index = _reports(root, "validate") / DATA_DOCS
    if not index.exists():
        return [UIArtifact(kind="markdown", key="validate-data-docs", description="validate: GX Data Docs",
                           markdown="No Data Docs were written (`validate.data_docs: false`); the results are "
                                    f"in `{graph.stage('validate').out_dir}/results.json`.")]
    url, where = report_url(root, index)
    return [UIArtifact(kind="link", key="validate-data-docs", description=f"validate: GX Data Docs ({where})",
                       url=url, link_text=str(index.relative_to(root)))]


def dedup_markdown(root: Path) -> str | None:
    """The near-dedup report of clean: what was dropped, how the LSH was banded, how precise it measured."""
    report = _read_json(_out(root, "clean") / "report.json")
    if report is None or "dedup" not in report:
        return None
    d, detail = report["dedup"], report.get("dedup_detail", {})
    lines = ["## Deduplication", "", "| measure | value |", "|---|---:|"]
    for key in ("exact_dropped", "near_dropped", "bands", "rows", "candidate_pairs", "verified_pairs",
                "clusters", "precision", "recall", "f1", "audit_pairs", "residual"):
        if key in d:
            lines.append(f"| {key.replace('_', ' ')} | {d[key]} |")
    audit = detail.get("audit") or {}
    if audit:
        lines += ["", (f"Audit: exact Jaccard of all {audit.get('audit_pairs', 0):,} pairs of "
                       f"{audit.get('audit_docs', 0):,} sampled documents; {audit.get('true_pairs')} true pairs, "
                       f"{audit.get('predicted_pairs')} predicted, {audit.get('residual')} left with both kept; "
                       f"P(candidate) at the threshold {audit.get('p_candidate_at_threshold')}.")]
    curve = detail.get("s_curve") or []
    if curve:
        lines += ["", "LSH S-curve (probability that a pair of this Jaccard similarity becomes a candidate):", "",
                  "| Jaccard | P(candidate) |", "|---:|---:|"]
        lines += [f"| {j:.2f} | {p:.4f} |" for j, p in curve[::2]]
    return "\n".join(lines)


def quality_curve_markdown(root: Path) -> str | None:
    """clean's threshold curve: documents (and words) the quality filter alone would keep at each threshold, in
    total and per source — the trade-off a user picks `clean.quality.threshold` from."""
    report = _read_json(_out(root, "clean") / "report.json")
    rows = (report or {}).get("quality_curve") or []
    if not rows:
        return None
    sources = sorted({r["source"] for r in rows if r["source"] != "all"})
    by = {(r["threshold"], r["source"]): r for r in rows}
    lines = ["## Quality threshold curve", "", "Documents kept by the quality filter alone (share of words kept in "
             "total):", "", "| threshold | all | words | " + " | ".join(sources) + " |",
             "|---:|---:|---:|" + "---:|" * len(sources)]
    for t in sorted({r["threshold"] for r in rows}):
        total = by.get((t, "all"), {})
        cells = [f"{by[(t, s)]['docs']:,}" if (t, s) in by else "—" for s in sources]
        lines.append(f"| {t:.1f} | {total.get('docs', 0):,} | {total.get('words_share', 0):.1%} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def loss_curve_png(root: Path, stage: str = "pretrain") -> Path | None:
    """Plot a training stage's train/val loss from data/<stage>/metrics.jsonl into reports/<stage>/loss.png
    (pretrain and sft write the same rows)."""
    rows = _jsonl(_out(root, stage) / "metrics.jsonl")
    train = [(r["step"], r["loss"]) for r in rows if r.get("kind") == "train" and r.get("loss") is not None]
    val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    if not train and not val:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and workers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    try:
        if train:
            ax.plot(*zip(*train), label="train loss", color="tab:blue")
        if val:
            ax.plot(*zip(*val), "o-", label="val loss", color="tab:orange")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(f"{stage} loss")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        out = _reports(root, stage) / LOSS_PNG
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            # No "Software" stamp: the same curve gives the same bytes across matplotlib builds.
            fig.savefig(tmp, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return out


def png_data_uri(path: Path) -> str:
    """A data: URI: the UI renders the image without any file server (a tiny curve is a few tens of kB)."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


# Wall-clock columns of pretrain's telemetry rows worth a table (the full rows also carry losses and memory).
THROUGHPUT_COLUMNS = ("step", "tokens_per_s", "step_time_s", "s_per_step", "mfu")


def throughput_table(root: Path) -> list[dict[str, Any]]:
    """Tokens/s, step time and MFU per logged step of the last pretrain launch (reports/, not a DVC out).

    Read from `telemetry.jsonl` (or `throughput.jsonl`, which earlier versions of the loop wrote).
    """
    for name in ("telemetry.jsonl", "throughput.jsonl"):
        rows = _jsonl(_reports(root, "pretrain") / name)
        if rows:
            return [{k: r[k] for k in THROUGHPUT_COLUMNS if k in r} for r in rows if r.get("tokens_per_s")]
    return []


def throughput_markdown(rows: list[dict[str, Any]]) -> str:
    tps = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
    if not tps:
        return "No throughput rows were logged."
    return (f"## Throughput\n\n{len(tps)} logged intervals: mean {sum(tps) / len(tps):,.0f} tokens/s, "
            f"min {min(tps):,.0f}, max {max(tps):,.0f}, last {tps[-1]:,.0f}.")


# ----------------------------------------------------------------------------------------------- per stage

def stage_artifacts(root: Path, stage: str) -> list[UIArtifact]:
    """Every artifact beyond the stage's own summary/table that the UI should show after `stage`."""
    out: list[UIArtifact] = []
    if stage in ("ingest", "clean", "mix"):
        rows = data_funnel(root)
        if rows:
            out.append(UIArtifact(kind="table", key="data-funnel", table=rows,
                                  description=f"Data funnel per source after {stage}: read → quarantined → "
                                              "dropped by reason → kept → tokens"))
    if stage == "validate":
        out += data_docs_artifacts(root)
    if stage == "clean":
        md = dedup_markdown(root)
        if md:
            out.append(UIArtifact(kind="markdown", key="clean-dedup", markdown=md, description="clean: dedup"))
        curve = quality_curve_markdown(root)
        if curve:
            out.append(UIArtifact(kind="markdown", key="clean-quality-curve", markdown=curve,
                                  description="clean: documents kept per quality threshold"))
    if stage in ("pretrain", "sft", "prefer"):
        png = loss_curve_png(root, stage)
        if png is not None:
            out.append(UIArtifact(kind="image", key=f"{stage}-loss", url=png_data_uri(png),
                                  description=f"{stage}: loss curve ({png.relative_to(root)})"))
    if stage == "pretrain":
        rows = throughput_table(root)
        if rows:
            out.append(UIArtifact(kind="table", key="pretrain-throughput", table=rows,
                                  description="pretrain: throughput per logged step"))
            out.append(UIArtifact(kind="markdown", key="pretrain-throughput-summary",
                                  markdown=throughput_markdown(rows), description="pretrain: throughput"))
    if stage == "export":
        card = model_card_markdown(root)
        if card:
            out.append(UIArtifact(kind="markdown", key="export-model-card", markdown=card,
                                  description="export: the model card (data/export/hf/README.md)"))
    return out


def model_card_markdown(root: Path) -> str | None:
    """The exported model card as the UI should render it: its YAML front matter (Hub metadata) as a code block
    instead of a stray rule and paragraph, then the card itself."""
    path = root / graph.DATA_DIR / "export" / "hf" / "README.md"
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    if text.startswith("---\n") and "\n---\n" in text[4:]:
        meta, body = text[4:].split("\n---\n", 1)
        return f"{body.lstrip()}\n\n**Hub metadata** (front matter):\n\n```yaml\n{meta}\n```\n"
    return text


# ------------------------------------------------------------------------------------------------- progress

# Log lines that say how far a stage is: (stage or None for any, pattern with groups done/total).
_PROGRESS = (
    ("pretrain", re.compile(r"\bstep (\d+)/(\d+)\b")),
    ("sft", re.compile(r"\bstep (\d+)/(\d+)\b")),  # the same trainer logs sft's steps
    ("prefer", re.compile(r"\bstep (\d+)/(\d+)\b")),  # and prefer's
    ("clean", re.compile(r"\bshard (\d+)/(\d+)\b")),
    (None, re.compile(r"\btokenize \w+: (\d+)/(\d+)\b")),
)


def progress_from_line(stage: str, line: str) -> float | None:
    """Percent done (0-100) if `line` of `stage`'s log reports `i/n` progress, else None."""
    for only, pattern in _PROGRESS:
        if only not in (None, stage):
            continue
        m = pattern.search(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            if total > 0:
                return round(min(100.0, 100.0 * done / total), 1)
    return None
