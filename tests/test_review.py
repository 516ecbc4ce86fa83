"""The review gate: auto mode approves/rejects by thresholds, a scripted terminal review, stale and missing
decisions refused with their messages, a reject fails the gate with the notes, and the Prefect pause/resume
form through a test server's API."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from specs.evaluate import SpotItem
from specs.review import GateReport, ReviewDecision, ReviewSpec
from tasks import review
from tasks.core.runner import StagePaths
from tasks.core.ui_layout import artifact_key
from tasks.eval import review_gate
from tests.helpers.review import ITEMS, paused_run_id, write_evaluate


def run_review(root: Path, **spec):
    paths = StagePaths(root=root, stage="review", seed=0)
    paths.out.mkdir(parents=True, exist_ok=True)
    return review.run(ReviewSpec(**spec), paths)


def decision_file(root: Path) -> dict:
    return json.loads((root / "data" / "review" / "decision.json").read_text())


def test_auto_approves_when_thresholds_pass_and_is_byte_identical(tmp_path):
    sha = write_evaluate(tmp_path)
    # the sample's one kept document carries PII: allowed here (1 of 1 ≤ 1.0), the default is tested below
    result = run_review(tmp_path, mode="auto", max_toxic_fraction=0.5, max_kept_pii_fraction=1.0)
    assert result.ok and result.counts["decision"] == "approve"
    d = decision_file(tmp_path)
    assert (d["decision"], d["reviewer"], d["mode"], d["time"], d["sample_sha256"]) == (
        "approve", "auto", "auto", None, sha)
    assert {i["id"]: i["label"] for i in d["items"]} == {
        "gen:p1": "ok", "gen:p2": "bad", "kept:docs/a": "bad", "dropped:docs/b": "ok"}
    assert "val perplexity / unigram perplexity (120 / 400) 0.3 ≤ 0.8: pass" in d["notes"]
    assert "share of toxic drops not flagged toxic: skipped (no document dropped as toxic" in d["notes"]
    first = (tmp_path / "data" / "review" / "decision.json").read_bytes()
    run_review(tmp_path, mode="auto", max_toxic_fraction=0.5, max_kept_pii_fraction=1.0)
    assert (tmp_path / "data" / "review" / "decision.json").read_bytes() == first


LENIENT = {"max_toxic_fraction": 1.0, "max_kept_pii_fraction": 1.0}  # ITEMS trip these two by default


@pytest.mark.parametrize("spec, report, failing", [
    ({"max_val_perplexity": 100.0}, {}, "val perplexity 120 > 100: FAIL"),
    ({}, {"baseline": 140.0}, "val perplexity / unigram perplexity (120 / 140) 0.8571 > 0.8: FAIL"),
    ({}, {"baseline": None}, "val perplexity / baseline perplexity (120 / -) - > 0.8: FAIL"),
    ({"max_toxic_fraction": 0.25}, {"toxic": 0.5}, "share of generations flagged toxic 0.5 > 0.25: FAIL"),
    ({"max_pii_fraction": 0.0}, {"toxic": 0.0, "pii": 0.5}, "share of generations flagged pii 0.5 > 0: FAIL"),
    ({"max_kept_pii_fraction": 0.15}, {}, "share of kept documents flagged pii 1 > 0.15: FAIL"),
])
def test_auto_rejects_by_threshold(tmp_path, spec, report, failing):
    write_evaluate(tmp_path, **report)
    result = run_review(tmp_path, mode="auto", **{**LENIENT, **spec})
    assert not result.ok and result.error is None  # a gate, not a crash: the flow does not retry it
    assert "REJECTED" in result.summary and failing in result.summary
    assert sum("FAIL" in line for line in result.summary.splitlines()) == 1  # only the check planted to fail
    assert decision_file(tmp_path)["decision"] == "reject"


def test_auto_counts_repetition_kept_flags_and_disputed_drops(tmp_path):
    """Planted positives and their look-alikes: a looping generation vs a varied one, a kept document flagged
    toxic vs one flagged only low_quality, a toxic drop the flagger confirms vs one it does not."""
    loop = "the cat sat on the mat " * 6    # 36 words, 34 3-grams, 6 distinct (period 6): 28/34 repeat
    varied = "the cat sat on the mat and then the dog sat on a rug by the door"  # no 3-gram twice
    def doc(i, kind, **kw):
        return SpotItem(id=f"{kind}:{i}", kind=kind, stratum=f"{kind}:s", source="s", chars=9, text="t", **kw)
    items = [SpotItem(id="gen:loop", kind="generation", stratum="generation:p", source="p", prompt="x", text=loop,
                      chars=len(loop)),
             SpotItem(id="gen:ok", kind="generation", stratum="generation:p", source="p", prompt="x", text=varied,
                      chars=len(varied)),
             doc(1, "kept_doc", flags=["toxic"]), doc(2, "kept_doc", flags=["low_quality"]),
             doc(3, "kept_doc"), doc(4, "kept_doc"),
             doc(5, "dropped_doc", reason="toxic", flags=["toxic"]), doc(6, "dropped_doc", reason="toxic"),
             doc(7, "dropped_doc", reason="low_quality")]           # not a toxic drop: not judged
    write_evaluate(tmp_path, items=items, toxic=0.0)
    d = review_gate.auto_decision(ReviewSpec(max_disputed_drop_fraction=0.4, max_kept_toxic_fraction=0.2),
                                  GateReport.model_validate_json(
                                      (tmp_path / "data" / "evaluate" / "report.json").read_text()), items, "0" * 64)
    assert d.decision == "reject"
    assert f"repeated 3-gram share of generations {(28 / 34 + 0) / 2:.4g} > 0.3: FAIL" in d.notes
    assert "share of kept documents flagged toxic 0.25 > 0.2: FAIL" in d.notes
    assert "share of kept documents flagged pii 0 ≤ 0: pass" in d.notes
    assert "share of toxic drops not flagged toxic 0.5 > 0.4: FAIL" in d.notes
    assert {i.id: i.label for i in d.items} == {
        "gen:loop": "ok", "gen:ok": "ok", "kept_doc:1": "bad", "kept_doc:2": "unsure", "kept_doc:3": "ok",
        "kept_doc:4": "ok", "dropped_doc:5": "ok", "dropped_doc:6": "bad", "dropped_doc:7": "ok"}
    # the same sample passes once the limits sit above what it shows
    ok = review_gate.auto_decision(ReviewSpec(max_repetition=0.5, max_kept_toxic_fraction=0.25,
                                              max_disputed_drop_fraction=0.5), d_report(tmp_path), items, "0" * 64)
    assert ok.decision == "approve", ok.notes


def d_report(root: Path) -> GateReport:
    return GateReport.model_validate_json((root / "data" / "evaluate" / "report.json").read_text())


def test_sft_gate_uses_the_pretrained_model_as_its_baseline(tmp_path):
    """sft's report has no `baseline`; its held-out loss before SFT is the yardstick (exp(5) ≈ 148.4)."""
    report = GateReport.model_validate({"perplexity": {"perplexity": 100.0}, "heldout_loss_before": 5.0,
                                        "generations": {"count": 1, "flagged_fraction": {}}})
    items = [ITEMS[0]]
    d = review_gate.auto_decision(ReviewSpec(target="sft"), report, items, "0" * 64)
    assert d.decision == "approve"
    assert "val perplexity / pretrained model before SFT perplexity (100 / 148.4) 0.6738 ≤ 0.8: pass" in d.notes
    d = review_gate.auto_decision(ReviewSpec(target="sft", max_perplexity_ratio=0.6), report, items, "0" * 64)
    assert d.decision == "reject" and "0.6738 > 0.6: FAIL" in d.notes


def test_mode_off_approves_as_not_reviewed(tmp_path):
    sha = write_evaluate(tmp_path, perplexity=5000.0)  # would fail every auto check on perplexity
    result = run_review(tmp_path, mode="off")
    assert result.ok and "not reviewed" in result.summary
    d = decision_file(tmp_path)
    assert (d["decision"], d["reviewed"], d["reviewer"], d["mode"], d["items"], d["sample_sha256"]) == (
        "approve", False, "nobody", "off", [], sha)
    assert d["notes"].startswith("not reviewed")


def test_auto_refuses_a_report_without_what_the_gate_reads(tmp_path):
    """A report whose shape drifted fails naming the field, not as a 'no perplexity' rejection."""
    write_evaluate(tmp_path)
    report = tmp_path / "data" / "evaluate" / "report.json"
    report.write_text(json.dumps({"perplexity": {"perplexity": 120.0}, "generations": {"flagged_fraction": [0.1]}}))
    with pytest.raises(ValueError, match=r"(?s)report.json lacks what the gate reads.*generations.flagged_fraction"):
        run_review(tmp_path, mode="auto")
    report.write_text(json.dumps({"generations": {"count": 1}}))
    with pytest.raises(ValueError, match=r"(?s)lacks what the gate reads.*perplexity"):
        run_review(tmp_path, mode="auto")
    assert not (tmp_path / "data" / "review" / "decision.json").exists()


def scripted(answers: list[str]):
    feed = iter(answers)
    asked: list[str] = []

    def input_fn(prompt: str) -> str:
        asked.append(prompt)
        return next(feed)
    return input_fn, asked


def test_terminal_review_writes_the_decision_the_stage_accepts(tmp_path):
    sha = write_evaluate(tmp_path)
    # per item: label, note; "x" is refused and asked again; enter = ok; then decision and notes
    input_fn, asked = scripted(["", "", "x", "b", "slur in a generation", "bad", "", "u", "too short",
                                "maybe", "a", "fine for SFT"])
    shown: list[str] = []
    rc = review.review_cli(tmp_path, target="pretrain", reviewer="ada", input_fn=input_fn,
                           print_fn=lambda *a: shown.append(" ".join(map(str, a))))
    assert rc == 0
    saved = ReviewDecision.model_validate_json((tmp_path / "reviews" / "pretrain.json").read_text())
    assert (saved.decision, saved.reviewer, saved.mode, saved.notes, saved.sample_sha256) == (
        "approve", "ada", "terminal", "fine for SFT", sha)
    assert [(i.id, i.label, i.note) for i in saved.items] == [
        ("gen:p1", "ok", ""), ("gen:p2", "bad", "slur in a generation"), ("kept:docs/a", "bad", ""),
        ("dropped:docs/b", "unsure", "too short")]
    assert saved.time and saved.time.endswith("+00:00")
    text = "\n".join(shown)
    assert "a shit time" in text and "toxic: 1 hit(s): shit" in text and "dropped by clean: low_quality" in text
    assert "first 12 of 300 characters" in text and sum("please answer" in s for s in shown) == 2
    assert len(asked) == 12

    result = run_review(tmp_path, mode="terminal")
    assert result.ok and result.counts["labels"] == {"ok": 1, "bad": 2, "unsure": 1} and "ada" in result.summary
    assert decision_file(tmp_path) == json.loads((tmp_path / "reviews" / "pretrain.json").read_text())


def test_terminal_abort_writes_nothing(tmp_path):
    write_evaluate(tmp_path)

    def eof(_prompt: str) -> str:
        raise EOFError

    assert review.review_cli(tmp_path, target="pretrain", reviewer="ada", input_fn=eof, print_fn=lambda *a: None) == 1
    assert not (tmp_path / "reviews").exists()


def test_missing_decision_is_refused_with_the_message(tmp_path):
    write_evaluate(tmp_path)
    for mode in ("terminal", "prefect"):
        result = run_review(tmp_path, mode=mode, target="pretrain")
        assert not result.ok and result.error is None
        assert review_gate.AWAITING in result.summary and "reviews/pretrain.json" in result.summary
        assert "awaiting review: run `python -m tasks review --interactive` or approve in the Prefect UI" in result.summary
        assert not (tmp_path / "data" / "review" / "decision.json").exists()


def human(sha: str, decision: str = "approve", notes: str = "", ids=("gen:p1",)) -> ReviewDecision:
    return ReviewDecision(decision=decision, items=[{"id": i, "label": "bad"} for i in ids], notes=notes,
                          reviewer="grace", time="2026-11-02T10:00:00+00:00", mode="terminal", sample_sha256=sha)


def test_stale_sample_is_refused(tmp_path):
    sha = write_evaluate(tmp_path)
    review_gate.write_review(tmp_path, "pretrain", human(sha))
    assert run_review(tmp_path, mode="terminal").ok
    changed = [*ITEMS[:3], ITEMS[3].model_copy(update={"text": "another"})]
    write_evaluate(tmp_path, items=changed)  # e.g. evaluate re-ran on a new model
    result = run_review(tmp_path, mode="terminal")
    assert not result.ok
    assert "sample changed since the review — review again with `python -m tasks review --interactive`" in result.summary
    assert not (tmp_path / "data" / "review" / "decision.json").exists()  # the old verdict does not linger


def test_unknown_items_and_malformed_files_are_refused(tmp_path):
    sha = write_evaluate(tmp_path)
    review_gate.write_review(tmp_path, "pretrain", human(sha, ids=("gen:nope",)))
    result = run_review(tmp_path, mode="terminal")
    assert not result.ok and "not in the sample: gen:nope" in result.summary
    (tmp_path / "reviews" / "pretrain.json").write_text('{"decision": "maybe"}')
    result = run_review(tmp_path, mode="terminal")
    assert not result.ok and "is not a valid review decision" in result.summary


def test_rejection_fails_the_gate_with_the_notes(tmp_path):
    sha = write_evaluate(tmp_path)
    review_gate.write_review(tmp_path, "pretrain", human(sha, "reject", "invents facts about Paris"))
    result = run_review(tmp_path, mode="prefect")
    assert not result.ok and result.error is None
    assert "REJECTED" in result.summary and "invents facts about Paris" in result.summary
    assert "| gen:p1 | bad |" in result.summary
    assert decision_file(tmp_path)["decision"] == "reject"  # the verdict that stopped the run is on record


# ------------------------------------------------------------------------------------------------ Prefect mode
def test_the_form_shows_every_item_next_to_its_label():
    """The form's schema (what the UI renders): per item a field titled with its id, described by its content."""
    from flows.review import as_paragraphs, form_description, review_form

    props = review_form(ITEMS).model_json_schema()["properties"]
    assert list(props) == ["item_001", "item_002", "item_003", "item_004", "decision", "reviewer", "notes"]
    assert props["item_002"]["title"] == "2. gen:p2"
    assert props["item_002"]["description"] == (
        "The model's continuation of a fixed prompt, stratum `generation:prose`\n\n**Prompt:**\n\nTwice\n\n"
        "**Generation:**\n\na shit time\n\n**Flags:** toxic — toxic: 1 hit(s): shit")
    assert "**Dropped by clean:** low_quality (prose score 0.4; failed: length)" in props["item_004"]["description"]
    assert "**Text (first 12 of 300 characters):**\n\nMail a@b\\.org\n\n" in props["item_003"]["description"]
    # one paragraph per line (the UI folds single newlines), markup escaped, indentation kept
    assert as_paragraphs("def f(x):\n    return x*2\n\n# done") == [
        "def f\\(x\\):", "\u00a0" * 4 + "return x\\*2", "\\# done"]
    long = ITEMS[0].model_copy(update={"text": "w" * 700, "chars": 700})
    described = review_form([long]).model_json_schema()["properties"]["item_001"]["description"]
    assert "(first 600 of 700 characters):**\n\n" + "w" * 600 + "…\n\n" in described
    from prefect.settings import PREFECT_UI_URL, temporary_settings
    from uuid import UUID

    art = UUID(int=7)
    with temporary_settings(updates={PREFECT_UI_URL: "http://127.0.0.1:4200"}):
        text = form_description(ITEMS, "pretrain", "ab" * 32, art)
        sample_key = artifact_key("review", "review-pretrain-sample")  # numbered by the stage's position
        assert f"the `{sample_key}` artifact." in form_description(ITEMS, "pretrain", "ab" * 32)
    assert f"[the {sample_key} artifact](http://127.0.0.1:4200/artifacts/artifact/{art})" in text


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.mark.prefect
def test_prefect_form_pauses_the_flow_and_resume_writes_the_decision(tmp_path, prefect_server):
    from prefect import flow, get_client
    from prefect.flow_runs import resume_flow_run

    from flows.review import ask_review

    sha = write_evaluate(tmp_path)

    @flow(name="review-under-test")
    def review_flow(root: str) -> dict:
        return ask_review(root, "pretrain", timeout_s=120, poll_interval_s=1).model_dump(mode="json")

    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(out=review_flow(str(tmp_path))), daemon=True)
    worker.start()
    run_id = paused_run_id("review-under-test")

    with get_client(sync_client=True) as client:
        keys = {a.key for a in client.read_artifacts()}
    assert {artifact_key("review", "review-pretrain-sample"), artifact_key("review", "review-pretrain-items")} <= keys
    # The server validates the answers against the form's schema: an unknown label is refused, still paused.
    with pytest.raises(RuntimeError, match="Cannot resume"):
        resume_flow_run(run_id, run_input={"decision": "reject", "reviewer": "grace",
                                           "item_001": {"label": "great"}})
    resume_flow_run(run_id, run_input={
        "decision": "reject", "reviewer": "grace", "notes": "hallucinates capitals",
        "item_001": {"label": "bad", "note": "Paris is not in Spain"}, "item_002": {"label": "unsure"}})
    worker.join(60)
    assert not worker.is_alive() and box["out"]["decision"] == "reject"

    saved = json.loads((tmp_path / "reviews" / "pretrain.json").read_text())
    assert saved == box["out"]
    assert (saved["reviewer"], saved["mode"], saved["notes"], saved["sample_sha256"]) == (
        "grace", "prefect", "hallucinates capitals", sha)
    assert [(i["id"], i["label"], i["note"]) for i in saved["items"]] == [  # unanswered items: ok
        ("gen:p1", "bad", "Paris is not in Spain"), ("gen:p2", "unsure", ""), ("kept:docs/a", "ok", ""),
        ("dropped:docs/b", "ok", "")]
    result = run_review(tmp_path, mode="prefect")
    assert not result.ok and "hallucinates capitals" in result.summary

    # A decision on file for the current sample is returned without pausing again.
    assert review_flow(str(tmp_path)) == saved
