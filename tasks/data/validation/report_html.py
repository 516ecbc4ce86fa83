"""The validate results as one self-contained HTML page: inline CSS, no script, no image, no outside link.

It replaces GX's Data Docs site, whose pages load bootstrap/jquery/vega/font-awesome from CDNs and so render
unstyled, with empty tables, when opened offline (and make the browser call several outside hosts). Every
value is escaped; the page holds nothing but `results.json` (no timestamp), so equal results give equal bytes.
"""

from __future__ import annotations

from html import escape
from typing import Any

from tasks.data.validation.expectations import label

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem;color:#1d2329}
h1{font-size:1.5rem;margin:0 0 .5rem}h2{font-size:1.15rem;margin:2rem 0 .5rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;min-width:60%}
th,td{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f3f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#116329;font-weight:600}.fail{color:#b3261e;font-weight:600}
.verdict{display:inline-block;padding:.2rem .7rem;border-radius:.3rem;color:#fff}
.verdict.pass{background:#1a7f37}.verdict.fail{background:#b3261e}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f5f7;padding:0 .2rem}
.muted{color:#57606a}
""".strip()


def render_report(report: dict[str, Any]) -> str:
    """The page for a results.json `report` (as the validate stage writes it)."""
    ok = report["success"]
    verdict = "passed" if ok else "failed"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>forgeline validate: {verdict}</title>", f"<style>{STYLE}</style></head><body>",
        f'<h1>Validation <span class="verdict {_cls(ok)}">{verdict}</span></h1>',
        f'<p>{report["records"]:,} records; fail_on_error: {str(report["fail_on_error"]).lower()}. '
        '<span class="muted">Rendered from <code>data/validate/results.json</code>; each expectation ran '
        "in Great Expectations, batch by batch, with counts summed over the whole corpus.</span></p>",
    ]
    if report.get("error"):
        parts.append(f'<p class="fail">{escape(report["error"])}</p>')
    if report.get("unused_per_source"):
        names = ", ".join(f"<code>{escape(n)}</code>" for n in report["unused_per_source"])
        parts.append(f"<p>Note: <code>per_source</code> names sources with no records: {names}.</p>")
    parts += _overview(report["suites"])
    for suite in report["suites"]:
        parts += _suite(suite)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _cls(ok: bool) -> str:
    return "pass" if ok else "fail"


def _overview(suites: list[dict[str, Any]]) -> list[str]:
    rows = ["<h2>Suites</h2>", '<table id="suites"><thead><tr><th>suite</th><th>rows</th><th>expectations</th>'
            "<th>failed</th><th>result</th></tr></thead><tbody>"]
    for s in suites:
        failed = sum(not e["success"] for e in s["expectations"])
        rows.append(f'<tr><td><a href="#{_anchor(s["name"])}">{escape(s["name"])}</a></td>'
                    f'<td class="n">{s["rows"]:,}</td><td class="n">{len(s["expectations"])}</td>'
                    f'<td class="n">{failed}</td><td class="{_cls(s["success"])}">'
                    f'{"pass" if s["success"] else "fail"}</td></tr>')
    return rows + ["</tbody></table>"]


def _suite(suite: dict[str, Any]) -> list[str]:
    where = f"source <code>{escape(suite['source'])}</code>" if suite["source"] is not None else "all sources"
    rows = [f'<h2 id="{_anchor(suite["name"])}">{escape(suite["name"])}</h2>',
            f'<p>{where}, {suite["rows"]:,} rows.</p>',
            '<table class="expectations"><thead><tr><th>expectation</th><th>GX expectation</th><th>result</th>'
            "<th>rows</th><th>unexpected</th><th>unexpected %</th><th>example failing ids</th></tr></thead>"
            "<tbody>"]
    for e in suite["expectations"]:
        examples = " ".join(f"<code>{escape(str(i))}</code>" for i in e["examples"])
        if "error" in e:
            examples = f'<span class="fail">error: {escape(e["error"])}</span> {examples}'
        rows.append(f'<tr><td><code>{escape(label(e["spec"]))}</code></td><td>{escape(e["gx"])}</td>'
                    f'<td class="{_cls(e["success"])}">{"pass" if e["success"] else "fail"}</td>'
                    f'<td class="n">{e["element_count"]:,}</td><td class="n">{e["unexpected_count"]:,}</td>'
                    f'<td class="n">{e["unexpected_percent"]:.2f}</td><td>{examples}</td></tr>')
    return rows + ["</tbody></table>"]


def _anchor(name: str) -> str:
    return "suite-" + "".join(c if c.isalnum() else "-" for c in name)
