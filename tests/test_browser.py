"""The Prefect UI, seen by a real browser: a local server on 127.0.0.1, the tiny flow until validate, then
headless Chromium (Debian's, driven by playwright) opens the flow run and checks that every stage completed
and the artifacts are listed and render. Also validate's HTML report, opened as a file with every outside
request blocked (and counted as a failure). Screenshots go to test-artifacts/ (git-ignored).

Needs `bash scripts/setup-browser.sh` (chromium + playwright). Skipped when they are absent, except under
CI=true, where a missing browser is a failure: CI must not go green without having looked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tasks.core.ui_layout import artifact_key
from tests.conftest import REPO, make_project

pytestmark = [pytest.mark.slow]

CHROMIUM = os.environ.get("FORGELINE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = REPO / "test-artifacts"
STAGES = ("ingest", "validate")


def _browser_or_skip():
    missing = []
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing.append(f"chromium ({CHROMIUM})")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if missing:
        why = f"{' and '.join(missing)} missing: run `bash scripts/setup-browser.sh`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser test: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    """A local Prefect server this process talks to: (API URL, its home folder)."""
    _browser_or_skip()
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import local_server

    base = tmp_path_factory.mktemp("browser")
    with local_server(base / "prefect-home") as api_url, temporary_settings(updates={PREFECT_API_URL: api_url}):
        yield api_url, base
        from tests.conftest import drain_prefect_workers

        drain_prefect_workers()  # before the server stops


@pytest.fixture(scope="module")
def ui_run(ui_server):
    """One finished flow run on the server: (UI base URL, flow run id, project)."""
    from flows.server import prefect_env

    api_url, base = ui_server
    project = make_project(base / "proj")
    proc = subprocess.run([sys.executable, "-m", "flows", "--until", STAGES[-1]], cwd=project,
                          env=prefect_env(api_url, base / "prefect-home"), capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    run_id = re.search(r"/runs/flow-run/([0-9a-f-]{36})", out).group(1)
    return api_url.removesuffix("/api"), run_id, project


def launch(p):
    return p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)


@pytest.mark.prefect
def test_flow_run_page_shows_every_stage_completed_and_the_artifacts(ui_run):
    from playwright.sync_api import expect, sync_playwright

    ui, run_id, _ = ui_run
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)  # a busy 2-core machine renders slowly
            page.goto(f"{ui}/runs/flow-run/{run_id}")
            expect(page.get_by_text(f"{len(STAGES)} Task runs")).to_be_visible()
            # The run's own state badge, beside its name in the header.
            expect(page.locator(".p-tabs").first).to_be_visible()
            assert "Completed" in page.inner_text("body")

            page.locator("li.p-tab#task-runs").click()
            panel = page.locator("#task-runs-content")
            expect(panel.get_by_text(f"({len(STAGES)} Completed)", exact=False)).to_be_visible()
            items = panel.locator(".state-list-item")  # one row per task run: name, flow, state, duration
            expect(items).to_have_count(len(STAGES))
            rows = [item.inner_text().split("\n") for item in items.all()]
            assert {r[0] for r in rows} == set(STAGES), rows
            assert all("Completed" in r for r in rows), rows
            page.screenshot(path=str(SHOTS / "flow-run.png"), full_page=True)

            page.locator("li.p-tab#artifacts").click()
            panel = page.locator("#artifacts-content")
            for key in ("01-ingest-report", "01-ingest-counts", "01-data-funnel", "02-validate-report",
                        "02-validate-counts", "02-validate-data-docs"):
                expect(panel.get_by_text(key, exact=True).first).to_be_visible()
            page.screenshot(path=str(SHOTS / "flow-run-artifacts.png"), full_page=True)

            # The data funnel renders as a table with a row per source and the counts of ingest.
            panel.get_by_text("01-data-funnel", exact=True).first.click()
            expect(page.get_by_text("quarantine reasons").first).to_be_visible()
            table = page.locator("table").first
            for source in ("docs", "literature", "notes", "total"):
                expect(table.get_by_text(source, exact=True).first).to_be_visible()
            expect(table.get_by_text("invalid_json: 1").first).to_be_visible()  # the tiny project's bad line
            page.screenshot(path=str(SHOTS / "data-funnel.png"), full_page=True)
        finally:
            browser.close()
    assert (SHOTS / "flow-run.png").stat().st_size > 10_000


@pytest.mark.prefect
def test_the_loss_curve_artifact_renders_as_an_image(ui_run, tmp_path):
    """pretrain's loss curve travels as a data: URI in an image artifact; the UI must draw it (no file server)."""
    import json
    import math

    from playwright.sync_api import expect, sync_playwright
    from prefect import flow

    from flows.pipeline import _publish
    from tasks.core.dvcrun import StageOutcome

    ui, _, _ = ui_run
    out = tmp_path / "data" / "pretrain"
    out.mkdir(parents=True)
    rows = [{"kind": "train", "step": s, "loss": round(8 * math.exp(-s / 30) + 2, 4)} for s in range(1, 61)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    @flow(name="publish-pretrain-artifacts")
    def publish() -> None:  # the flow's own publishing code, on files a pretrain run would leave
        _publish(StageOutcome(stage="pretrain", ran=True), tmp_path)

    publish()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        (art,) = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key("pretrain", "pretrain-loss")])))
    assert art.type == "image" and (tmp_path / "reports" / "pretrain" / "loss.png").exists()
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{ui}/artifacts/artifact/{art.id}")
            img = page.locator("img[src^='data:image/png']")
            expect(img).to_have_count(1)
            page.wait_for_function("() => document.querySelector(\"img[src^='data:image/png']\").naturalWidth > 0")
            page.screenshot(path=str(SHOTS / "loss-curve.png"), full_page=True)
        finally:
            browser.close()


@pytest.mark.prefect
def test_the_review_form_shows_each_item_next_to_its_label(ui_server, tmp_path):
    """The paused run's form, as a reviewer sees it: every item's text and flags above its label, and a link
    to the sample artifact. Answered through the UI's own form, the decision file says what was clicked."""
    import contextvars
    import json
    import threading

    from playwright.sync_api import expect, sync_playwright
    from prefect import flow

    from flows.review import ask_review
    from specs.evaluate import SpotItem
    from tests.helpers.review import ITEMS, paused_run_id, write_evaluate

    api_url, _ = ui_server
    ui = api_url.removesuffix("/api")
    code = SpotItem(id="kept:code/f", kind="kept_doc", stratum="kept_doc:code", source="code", chars=37,
                    text="def f(x):\n    return x * 2  # *twice*")
    wide = ITEMS[0].model_copy(update={"id": "gen:wide", "text": "a long line of words " * 30, "chars": 630})
    write_evaluate(tmp_path, items=[*ITEMS, code, wide])

    @flow(name="review-in-the-browser")
    def review_flow(root: str) -> str:
        return ask_review(root, "pretrain", timeout_s=300, poll_interval_s=1).decision

    box: dict = {}
    ctx = contextvars.copy_context()  # a thread starts with an empty context: hand it the server's settings
    worker = threading.Thread(target=lambda: box.update(out=ctx.run(review_flow, str(tmp_path))), daemon=True)
    worker.start()
    run_id = paused_run_id("review-in-the-browser", timeout=120)
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        (items_table,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key("review", "review-pretrain-items")])))
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{ui}/runs/flow-run/{run_id}")
            page.get_by_role("button", name="Resume").first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("1. gen:p1").first).to_be_visible()
            page.screenshot(path=str(SHOTS / "review-form.png"), full_page=True)
            for text in ("1. gen:p1", "upon a", "2. gen:p2", "a shit time", "toxic: 1 hit(s): shit",
                         "Mail a@b.org", "Dropped by clean: low_quality (prose score 0.4; failed: length)"):
                expect(dialog.get_by_text(text, exact=False).first).to_be_visible()
            body = dialog.inner_text()
            # each item's content comes right before its own label field, in sample order
            marks = [body.index(t) for t in ("1. gen:p1", "upon a", "Label", "2. gen:p2", "a shit time")]
            assert marks == sorted(marks), body[:2000]
            # lines stay lines, indentation and markup characters as written
            # (the browser collapses runs of plain spaces, as HTML does)
            assert re.search(r"def f\(x\):\n[\u00a0 ]{4,}return x \* 2 # \*twice\*", body), body[-800:]
            link = page.get_by_role("link", name=f"the {artifact_key('review', 'review-pretrain-sample')} artifact")
            expect(link).to_be_visible()
            assert "/artifacts/artifact/" in link.get_attribute("href")
            dialog.screenshot(path=str(SHOTS / "review-form-dialog.png"))
            # The linked sample and the items table fit the screen: nothing scrolls sideways.
            for url, shot in ((link.get_attribute("href"), "review-sample.png"),
                              (f"{ui}/artifacts/artifact/{items_table.id}", "review-items.png")):
                page.goto(url)
                expect(page.get_by_text("a shit time").first).to_be_visible()
                expect(page.get_by_text("def f(x):").first).to_be_visible()
                page.screenshot(path=str(SHOTS / shot), full_page=True)
                assert page.evaluate("document.documentElement.scrollWidth") <= 1440, shot
        finally:
            browser.close()
    from prefect.flow_runs import resume_flow_run

    resume_flow_run(run_id, run_input={"decision": "approve", "reviewer": "ada", "item_002": {"label": "bad"}})
    worker.join(60)
    saved = json.loads((tmp_path / "reviews" / "pretrain.json").read_text())
    assert box["out"] == "approve" and [i["label"] for i in saved["items"]] == ["ok", "bad", "ok", "ok", "ok", "ok"]


LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def block_outside(page) -> list[str]:
    """Abort every request of `page` that is not for a file, inline data or a local host; return the list
    of the URLs it refused (the test fails on any)."""
    refused: list[str] = []

    def guard(route) -> None:
        url = urlsplit(route.request.url)
        if url.scheme in ("file", "data", "about", "blob") or url.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    return refused


def test_validate_report_renders_offline_with_filled_tables(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    from tasks.validate import run
    from tests.helpers.validate import project, record, spec

    _browser_or_skip()
    rows = [record("literature", i) for i in range(6)] + [record("code", i) for i in range(3)]
    rows[1]["id"] = "literature/0"  # one failed expectation, so the page shows a count and an example
    paths = project(tmp_path / "proj", rows)
    assert not run(spec(), paths).ok
    index = paths.reports / "data_docs" / "index.html"
    probe = tmp_path / "probe.html"  # the guard must see what a CDN-styled page (GX's Data Docs) asks for
    probe.write_text('<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/x.css"><p>probe</p>')
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            refused = block_outside(page)
            page.goto(probe.as_uri())
            page.wait_for_load_state("networkidle")
            assert refused == ["https://cdn.jsdelivr.net/npm/x.css"]
            refused.clear()

            page.goto(index.as_uri())
            page.wait_for_load_state("networkidle")
            assert refused == [], f"the report tried to reach outside hosts: {refused}"
            page.screenshot(path=str(SHOTS / "validate-report.png"), full_page=True)
            expect(page.locator("h1")).to_contain_text("failed")
            suites = page.locator("#suites tbody tr")
            expect(suites).to_have_count(3)  # source:code, source:literature, all
            row = page.locator("#suite-source-literature + p + table tr", has_text="unique(id)")
            expect(row).to_be_visible()
            cells = row.locator("td").all_inner_texts()
            assert cells[2:6] == ["fail", "6", "2", "33.33"], cells
            assert "literature/0" in cells[6]
            # The inline stylesheet applied (no CDN needed): header cells are shaded, failures red.
            shade = page.eval_on_selector("th", "e => getComputedStyle(e).backgroundColor")
            assert shade == "rgb(243, 245, 247)", shade
            red = row.locator("td.fail").evaluate("e => getComputedStyle(e).color")
            assert red == "rgb(179, 38, 30)", red
        finally:
            browser.close()
    assert (SHOTS / "validate-report.png").stat().st_size > 10_000
