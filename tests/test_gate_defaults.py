"""The `auto` review gate's shipped defaults against the failures they exist for, on the real clean stage's
output: each cleaning step switched off (or misconfigured) in turn, the spot-check sample drawn and flagged by
evaluate's own code, and the review stage deciding with the defaults of params.yaml. Only the model's numbers
are stand-ins (a passing perplexity, no flagged generation): the checks here are about the data.

A run whose kept sample holds one document with an e-mail address in seven was approved before (0.14 ≤ the old
0.15), and so was one whose toxicity filter was off (one in eight, 0.125 ≤ 0.25); an article's lone listed word,
which clean keeps on purpose, must not trip the stricter default."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from specs import Params
from specs.evaluate import EvaluateSpec
from specs.review import ReviewSpec
from tasks import review
from tasks.core.runner import StagePaths, run_stage
from tasks.data.embedded import read_embedded
from tasks.data.records import RECORD_SCHEMA, Doc, write_table
from tasks.eval.spotcheck import Flagger, build_sample
from tests.helpers.clean import record, toxic_words
from tests.conftest import REPO
from tests.helpers.review import write_evaluate

SEED = 5
SOURCES = ("alpha", "beta", "gamma", "delta")
OLD_DEFAULTS = {"max_kept_pii_fraction": 0.15, "max_kept_toxic_fraction": 0.25, "max_disputed_drop_fraction": 0.5}


def shipped(gate: str) -> ReviewSpec:
    """The `review` section of the params.yaml that ships (not the spec's defaults: the file a user runs)."""
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    return ReviewSpec.model_validate(data[gate])


def corpus(root: Path) -> None:
    """Four sources of two encyclopedia articles each, so the sample (2 a source) holds every kept document. delta's
    first carries an e-mail address, gamma's first is made toxic (clean's rule drops it: > 1 % listed words, ≥ 3
    of them), beta's first holds one listed word (clean keeps it: below its share)."""
    docs = [d for d in itertools.islice(read_embedded("encyclopedia"), 12) if isinstance(d, Doc)]
    rows = []
    for n, source in enumerate(SOURCES):
        for k in range(2):
            text = docs[2 * n + k].text
            if (source, k) == ("delta", 0):
                text += "\nCorrections to the article: write to jane.doe@example.org."
            elif (source, k) == ("gamma", 0):  # ends on a sentence, so only the toxicity filter drops it
                words = " ".join(text.split()[:250]).rsplit(".", 1)[0] + "."
                text = "\n".join(f"You are a {w}." for w in toxic_words()) + "\n" + words
            elif (source, k) == ("beta", 0):
                text = text.replace(". ", ". Bollocks, said the editor. ", 1)
            rows.append(record(source, f"{k}", text))
    shards = root / "data" / "ingest" / "shards"
    shards.mkdir(parents=True)
    write_table(rows, RECORD_SCHEMA, shards / "all-00000.parquet")


def gate(tmp_path: Path, clean: dict) -> tuple[bool, str, list]:
    """clean with `clean` params on the corpus, evaluate's sample of its output, then the review stage with the
    shipped `review` section: (approved, the decision's notes, the sample)."""
    root = tmp_path / "p"
    corpus(root)
    params = {"run": {"seed": SEED, "executor": {"kind": "local", "workers": 1}},
              "ingest": {"sources": [{"name": s, "kind": "embedded", "corpus": "encyclopedia"} for s in SOURCES]},
              "clean": {"decontamination": {"heldout": False}, **clean}}
    run_stage("clean", Params.model_validate(params), root)
    spot = EvaluateSpec().spotcheck
    items = build_sample([], root / "data" / "clean", spot.model_copy(update={"generations": False}), SEED,
                         Flagger(spot.flags, root))
    write_evaluate(root, items=items, toxic=0.0)
    paths = StagePaths(root=root, stage="review", seed=SEED)
    paths.out.mkdir(parents=True, exist_ok=True)
    result = review.run(shipped("review"), paths)
    return result.ok, json.loads((paths.out / "decision.json").read_text())["notes"], items


def checks(notes: str) -> list[str]:
    """The checks of an automatic decision's notes (`automatic policy: a; b; ...`)."""
    return notes.split(": ", 1)[1].split("; ")


def failed(notes: str) -> list[str]:
    return [c for c in checks(notes) if c.endswith("FAIL")]


def value(notes: str, what: str) -> float:
    return float(next(c for c in checks(notes) if c.startswith(what + " ")).split()[-4])


def test_the_shipped_gates_are_protective():
    for section in ("review", "review_sft"):
        spec = shipped(section)
        assert (spec.max_kept_pii_fraction, spec.max_kept_toxic_fraction, spec.max_disputed_drop_fraction) == (
            0.0, 0.0, 0.0), section
    assert ReviewSpec().max_kept_pii_fraction == 0.0


def test_a_run_with_every_cleaning_step_on_is_approved(tmp_path):
    ok, notes, items = gate(tmp_path, {})
    assert ok, notes
    kept = {i.id: i for i in items if i.kind == "kept_doc"}
    assert "kept:beta/0" in kept and "toxic" not in kept["kept:beta/0"].flags  # the lone oath stays unflagged
    assert "kept:gamma/0" not in kept  # dropped as toxic, and the any-word flagger confirms the drop
    assert "share of toxic drops not flagged toxic 0 ≤ 0: pass" in notes


@pytest.mark.parametrize("step, clean, check", [
    ("pii", {"pii": {"enabled": False}}, "share of kept documents flagged pii"),
    ("toxicity", {"toxicity": {"enabled": False}}, "share of kept documents flagged toxic"),
], ids=["pii-off", "toxicity-off"])
def test_a_cleaning_step_switched_off_is_rejected(tmp_path, step, clean, check):
    ok, notes, _ = gate(tmp_path, clean)
    assert not ok
    fails = failed(notes)
    assert len(fails) == 1 and fails[0].startswith(check), notes
    share = value(notes, check)
    old = OLD_DEFAULTS[f"max_kept_{'pii' if step == 'pii' else 'toxic'}_fraction"]
    assert 0 < share <= old  # what the old default approved


def test_a_toxicity_filter_dropping_clean_text_is_rejected(tmp_path):
    """A word list of ordinary words (a misconfigured filter): its drops carry no listed word."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mylist.txt").write_text("the\nof\nand\nin\n")
    ok, notes, _ = gate(tmp_path, {"toxicity": {"wordlist": "mylist.txt"}})
    assert not ok and value(notes, "share of toxic drops not flagged toxic") > 0, notes
    assert [c.split(" 0")[0] for c in failed(notes)] == ["share of toxic drops not flagged toxic"], notes
