"""Stage `instruct`'s embedded sources (docstrings, pydoc topics, chatterbot) read into pairs and conversations,
and its spec's validation; the stage end to end is tests/test_instruct.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from specs.instruct import EmbeddedInstructSource, FilterSpec, InstructJob, InstructSpec
from tasks.data.curation import instructions
from tasks.data.curation.instructions import Turns, check_format, read_source, topic_sections


def test_embedded_sources_build_pairs_from_real_text():
    by_id = {c.id: c for c in read_source(EmbeddedInstructSource(name="d", corpus="docstrings"), Path("."))}
    dumps = by_id["d/json.dumps"].messages
    assert dumps[0]["content"] == "What does `json.dumps` do?" and dumps[1]["content"].startswith("Serialize")
    assert not any(cid.split("/", 1)[1].split(".")[-1].startswith("_") for cid in by_id)
    topics = {c.id: c for c in read_source(EmbeddedInstructSource(name="t", corpus="pydoc_topics"), Path("."))}
    assert topics["t/assert#1"].messages[0]["content"] == "Explain the `assert` statement in Python."
    assert "```\nassert_stmt ::=" in topics["t/assert#1"].messages[1]["content"]   # grammar is fenced as code
    chats = [c for c in read_source(EmbeddedInstructSource(name="c", corpus="chatterbot"), Path("."))
             if isinstance(c, instructions.Conversation)]
    assert len(chats) > 2000 and len({c.id for c in chats}) == len(chats)
    good = [c for c in chats if isinstance(check_format(c.messages, FilterSpec(max_messages=1000)), Turns)]
    assert len(good) >= 0.99 * len(chats)


def test_topic_sections_follow_underline_levels():
    text = "Top\n***\n\nIntro.\n\nSub one\n=======\n\nBody one.\n\nSub two\n=======\n\nBody two."
    assert topic_sections(text) == [(["Top"], "Intro."), (["Top", "Sub one"], "Body one."),
                                    (["Top", "Sub two"], "Body two.")]


def test_missing_chatterbot_package_names_the_pin(monkeypatch):
    monkeypatch.setattr(instructions.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="chatterbot-corpus==1.3.3"):
        list(read_source(EmbeddedInstructSource(name="c", corpus="chatterbot"), Path(".")))


# --- spec -------------------------------------------------------------------------------------------------

def test_spec_rejects_bad_values():
    with pytest.raises(ValidationError, match="min_prompt_chars"):
        FilterSpec(min_prompt_chars=50, max_prompt_chars=10)
    with pytest.raises(ValidationError, match="repeated: a"):
        InstructSpec(sources=[EmbeddedInstructSource(name="a", corpus="chatterbot"),
                              EmbeddedInstructSource(name="a", corpus="docstrings")])
    with pytest.raises(ValidationError):
        InstructSpec.model_validate({"heldout_fraction": 0.9})
    with pytest.raises(ValidationError):
        InstructJob.model_validate({"instruct": {}, "eval_prompts": [], "extra": 1})
    assert InstructJob().instruct.max_train_pairs == 1500
