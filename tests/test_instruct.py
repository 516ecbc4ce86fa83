"""Stage `instruct`: each filter keeps and drops what it should, near duplicates and eval-prompt paraphrases are
caught, every input is accounted for, the held-out slice is disjoint from train, and reruns are byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specs.instruct import DecontaminationSpec, EmbeddedInstructSource, FilterSpec, InstructJob, InstructSpec
from tasks import instruct
from tasks.core.runner import StagePaths
from tasks.data.filtering.decontaminate import EvalIndex
from tasks.data.filtering.filters import first_drop, run_filters
from tasks.data.curation.instruct_filters import instruct_filters
from tasks.data.curation.instructions import Turns, check_format
from tasks.data.cleanup.normalize import exact_key

OUTPUTS = ("train.jsonl", "heldout.jsonl", "dropped.parquet", "report.json")


def turns(prompt: str, response: str) -> Turns:
    got = check_format([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
                       FilterSpec())
    assert isinstance(got, Turns), got
    return got


def first_failure(prompt: str, response: str, **rules) -> str | None:
    """Name of the first filter that drops the pair under FilterSpec(**rules), or None when all keep it."""
    dropped = first_drop(run_filters(instruct_filters(FilterSpec(**rules)), turns(prompt, response)))
    return dropped[0] if dropped else None


GOOD = "A prime number is a whole number greater than one that has no divisors other than one and itself."


# --- filters on constructed cases ---------------------------------------------------------------------------

@pytest.mark.parametrize("messages, problem", [
    ([{"role": "user", "content": "Hi there"}, {"role": "bot", "content": "Hello!"}], "role 'bot'"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}],
     "alternate"),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "?"}],
     "end on the answer"),
    ([{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be nice"}, {"role": "assistant",
                                                                                   "content": "Hello"}], "alternate"),
    ([{"role": "user", "content": "   "}, {"role": "assistant", "content": "Hello"}], "empty"),
    ([{"role": "user", "content": 42}, {"role": "assistant", "content": "Hello"}], "not text"),
    ([{"role": "user"}, {"role": "assistant", "content": "Hello"}], "not a {role, content}"),
    ("just a string", "no turns"),
    ([{"role": r, "content": "x y"} for r in ("user", "assistant") * 13], "exceed max_messages"),
])
def test_format_drops_invalid_roles_and_turns(messages, problem):
    reason = check_format(messages, FilterSpec())
    assert isinstance(reason, str) and problem in reason


def test_format_keeps_a_system_turn_first_and_normalizes_text():
    got = check_format([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\r\n"},
                        {"role": "assistant", "content": "Hello\u200b there."}], FilterSpec())
    assert isinstance(got, Turns)
    assert [m["role"] for m in got.messages] == ["system", "user", "assistant"]
    assert got.prompt == "Hi" and got.response == "Hello there."  # zero-width space removed


def test_length_filter():
    assert first_failure("What is a prime?", GOOD) is None
    assert first_failure("What is a prime?", "k") == "length"                          # response too short
    assert first_failure("What is a prime? " * 40, GOOD, max_prompt_chars=200) == "length"
    assert first_failure("What is a prime?", GOOD, max_response_chars=50) == "length"
    assert first_failure("Hi", GOOD, min_prompt_chars=3) == "length"


def test_echo_filter():
    assert first_failure("Tell me about tides and the moon.", "Tell me about tides and the moon!") == "echo"
    assert first_failure("Is the moon made of rock and dust?", "The moon made of rock and dust.") == "echo"
    assert first_failure("Is the moon made of rock and dust?", "Mostly rock: a crust, a mantle and a small "
                         "iron core, covered in fine dust called regolith.") is None
    # the threshold is a parameter: 6 of 7 answer words come from the prompt
    assert first_failure("Is the moon made of rock and dust?", "The moon is made of rock, mainly.",
                         max_echo_overlap=0.95) is None


def test_symbol_and_word_ratio_filters():
    assert first_failure("What is this?", "$$$ ### @@@ {{{ }}} <<< >>> ^^^ ~~~") == "symbols"
    assert first_failure("Add them up:", "1 2 3 4 5 6 7 8 9 10") == "symbols"         # no words with letters
    assert first_failure("Are you sapient?", "No.") is None                            # punctuation is no noise
    assert first_failure("What year did the war end?", "1945") is None                # too short to judge
    code = "Here is one:\n\n```python\ndef add(a, b):\n    return {'sum': a + b}\n```\n\nIt returns a dict."
    assert first_failure("Write a Python function that adds two numbers.", code) is None   # fences are skipped


def test_language_filter():
    english = "The tide rises and falls twice a day because the moon pulls on the oceans of the earth."
    german = "Es ist drei Uhr am Nachmittag, und die Sonne scheint noch hell über der alten Stadt am Fluss."
    russian = "Сейчас три часа дня, и солнце всё ещё ярко светит над старым городом у реки."
    assert first_failure("Why are there tides?", english) is None
    assert first_failure("Wie spät ist es jetzt bitte?", german) == "language"         # too few English stopwords
    assert first_failure("Который час?", russian) == "language"                        # letters are not ASCII
    assert first_failure("Wie spät ist es jetzt bitte?", german, min_stopword_ratio=0.0) is None


def test_quality_score_prefers_substantive_clean_answers():
    short = instruct.quality_score(turns("What is a prime number?", "a number"))
    full = instruct.quality_score(turns("What is a prime number?", GOOD + " Two, three and five are primes."))
    noisy = instruct.quality_score(turns("What is a prime number?", GOOD.replace(" ", " ## ")))
    repetitive = instruct.quality_score(turns("What is a prime number?", "prime " * 40))
    assert full > short and full > noisy and full > repetitive
    assert all(0.0 <= s <= 1.0 for s in (short, full, noisy, repetitive))


# --- decontamination ----------------------------------------------------------------------------------------

EVAL = ["Explain how a transformer language model predicts the next token in a sentence.",
        "Write a haiku about autumn leaves falling."]


def test_decontamination_catches_paraphrase_and_containment_keeps_unrelated():
    index = EvalIndex(EVAL, DecontaminationSpec())
    paraphrase = index.check("Can you explain how a transformer language model predicts the next word?")
    assert paraphrase is not None and paraphrase.eval_index == 0 and paraphrase.share >= 0.5
    quoted = index.check("Here is an exercise: write a haiku about autumn leaves falling, then rewrite it as a "
                         "single long sentence and compare how the two versions feel when read aloud.")
    assert quoted is not None and quoted.eval_index == 1       # eval prompt inside a long text: containment
    assert index.check("How does a steam engine turn heat into motion?") is None
    assert index.check("A language model is trained on text.") is None   # shares words, not 5-grams
    assert "eval prompt #0" in index.describe("prompt", paraphrase)


def test_decontamination_modes_and_short_eval_prompts():
    text = "We will explain how a transformer language works in detail, layer by layer, with pictures."
    assert EvalIndex(EVAL, DecontaminationSpec(mode="fraction")).check(text) is None   # 1 shared 5-gram
    hit = EvalIndex(EVAL, DecontaminationSpec(mode="any")).check(text)
    assert hit is not None and hit.shared == 1
    short = EvalIndex(["once upon a time"], DecontaminationSpec(ngram=8))
    assert short.check("The story begins: once upon a time there lived a miller.") is not None
    assert short.check("Upon a time once.") is None
    assert short.check("Once upon a time!") is not None   # equal word for word


# --- the stage end to end on user files ---------------------------------------------------------------------

GOOD_PAIRS = [
    ("How does a steam engine turn heat into motion?", "Burning fuel boils water in a closed boiler. The expanding "
     "steam pushes a piston back and forth, and a crank turns that motion into the rotation of a wheel."),
    ("Why is the sky blue during the day?", "Sunlight is scattered by the molecules of the air, and short blue "
     "wavelengths are scattered much more strongly than red ones, so blue light reaches us from everywhere."),
    ("What causes the seasons on Earth?", "The axis of the Earth is tilted by about 23 degrees. As the planet "
     "orbits the Sun, each hemisphere leans towards it for part of the year and gets more direct sunlight."),
    ("How do bees make honey?", "Worker bees collect nectar from flowers and carry it back to the hive, where "
     "they add enzymes and fan it with their wings until most of the water has evaporated."),
    ("What is a prime number?", GOOD + " Two, three, five and seven are the first few primes."),
    ("Give me a tip for learning a new language.", "Practise a little every day instead of a lot once a week. "
     "Short daily sessions with phrases you will actually use are remembered far better than long word lists."),
    ("How should I store fresh bread?", "Keep it in a paper bag or a bread box at room temperature for a day or "
     "two. For longer storage, slice it and freeze it; the refrigerator makes bread stale faster."),
    ("What does a compiler do?", "A compiler translates a program written in a high-level language into machine "
     "code, checking it for errors on the way, so that the computer can run it directly."),
    ("Why do cats purr?", "Cats purr when they are content, but also when they are stressed or hurt. The "
     "vibration may help them calm down, and it might even help their bones heal."),
    ("How can I make my code easier to read?", "Choose descriptive names, keep functions short and focused on one "
     "task, and write comments that explain why the code does something rather than what it does."),
    ("What is the difference between weather and climate?", "Weather is the state of the atmosphere at a given "
     "time and place, such as rain this afternoon. Climate is the average pattern of weather over many years."),
    ("How do plants get energy?", "Plants capture sunlight with chlorophyll and use its energy to turn carbon "
     "dioxide and water into sugars, releasing oxygen. This process is called photosynthesis."),
    ("Write a Python function that adds two numbers.", "Here is a simple version:\n\n```python\ndef add(a, b):\n"
     "    return a + b\n```\n\nIt works for integers, floats and anything else that supports the plus operator."),
]
# planted id -> (prompt, response, the filter expected to drop it)
PLANTED = {
    "z-exact": ("what is a PRIME   number?", GOOD_PAIRS[4][1].replace(". ", ".   "), "exact_duplicate"),
    "z-near": (GOOD_PAIRS[0][0], GOOD_PAIRS[0][1].replace("fuel", "coal"), "near_duplicate"),
    "z-echo": ("Tell me about the ocean tides and the moon.", "Tell me about the ocean tides and the moon.", "echo"),
    "z-short": ("What is the answer?", "k", "length"),
    "z-long": ("Summarize this: " + "words and more words " * 60, "It is a list of words.", "length"),
    "z-junk": ("What is this?", "$$$ ### @@@ {{{ }}} <<< >>> ^^^ ~~~", "symbols"),
    "z-german": ("Wie spät ist es jetzt bitte?", "Es ist drei Uhr am Nachmittag, und die Sonne scheint noch hell "
                 "über der alten Stadt am Fluss.", "language"),
    "z-paraphrase": ("Can you explain how a transformer language model predicts the next word?",
                     "It turns the text into vectors, mixes them with attention and scores every word of the "
                     "vocabulary, then picks a likely one.", "decontamination"),
    "z-quote": ("Give me a creative writing exercise.", "Here is one: write a haiku about autumn leaves falling, "
                "then rewrite it as a single long sentence and compare the two versions.", "decontamination"),
}
BAD_PAIR_LINES = {  # line text -> problem named in the ledger reason
    "{not json": "invalid JSON",
    "[1, 2]": "expected a JSON object",
    json.dumps({"uid": "q1", "question": "What?", "answer": "That."}): "needs 'messages' or both",
    json.dumps({"prompt": "No id here?", "response": "Indeed, none at all."}): "id field 'uid'",
    json.dumps({"uid": "p00", "prompt": "Same id again?", "response": "Yes, a repeated id."}): "duplicate id",
}
CHATS = [  # (messages, expected filter or None)
    ([{"role": "system", "content": "You are a helpful cooking assistant."},
      {"role": "user", "content": "How long should I boil an egg?"},
      {"role": "assistant", "content": "For a soft yolk boil it for about six minutes; for a firm one, ten."},
      {"role": "user", "content": "And how do I stop it from cracking?"},
      {"role": "assistant", "content": "Let it reach room temperature first and lower it gently into the water "
                                       "with a spoon."}], None),
    ([{"role": "user", "content": "Hi there"}, {"role": "bot", "content": "Hello!"}], "format"),
    ([{"role": "user", "content": "One"}, {"role": "user", "content": "Two"},
      {"role": "assistant", "content": "Three"}], "format"),
    ({"role": "user"}, "parse"),
]


def write_inputs(root: Path) -> dict[str, str | None]:
    """User files with good, planted and broken lines; returns conversation id -> expected filter (None = kept)."""
    expected: dict[str, str | None] = {}
    lines = []
    for k, (p, r) in enumerate(GOOD_PAIRS):
        lines.append(json.dumps({"uid": f"p{k:02d}", "prompt": p, "response": r}))
        expected[f"pairs/p{k:02d}"] = None
    for key, (p, r, why) in PLANTED.items():
        lines.append(json.dumps({"uid": key, "prompt": p, "response": r}))
        expected[f"pairs/{key}"] = why
    bad_start = len(lines) + 1
    lines += list(BAD_PAIR_LINES)
    for n in range(bad_start, len(lines) + 1):
        expected[f"pairs/inputs/pairs.jsonl:{n}"] = "parse"
    (root / "inputs").mkdir(parents=True, exist_ok=True)
    (root / "inputs/pairs.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"uid": "\xff\xfe"}\n\n')
    expected[f"pairs/inputs/pairs.jsonl:{len(lines) + 1}"] = "parse"   # invalid UTF-8
    chat_lines = [json.dumps({"messages": m}) for m, _ in CHATS]
    (root / "inputs/chats.jsonl").write_text("\n".join(chat_lines) + "\n")
    for n, (_, why) in enumerate(CHATS, start=1):
        expected[f"chats/inputs/chats.jsonl:{n}"] = why
    return expected


def job(**overrides) -> InstructJob:
    sources = [{"name": "pairs", "kind": "files", "paths": ["inputs/pairs.jsonl"], "fields": {"id": "uid"}},
               {"name": "chats", "kind": "files", "paths": ["inputs/chat*.jsonl"]}]
    spec = {"sources": sources, "filters": {"max_prompt_chars": 600}, "heldout_count": 3,
            "max_train_pairs": None, **overrides}
    return InstructJob(instruct=InstructSpec.model_validate(spec), eval_prompts=EVAL)


def run_stage(root: Path, spec: InstructJob, seed: int = 7):
    result = instruct.run(spec, StagePaths(root=root, stage="instruct", seed=seed))
    out = root / "data" / "instruct"
    train, heldout = ([json.loads(x) for x in (out / name).read_text().splitlines()]
                      for name in ("train.jsonl", "heldout.jsonl"))
    return result, train, heldout, pq.read_table(out / "dropped.parquet").to_pylist()


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = tmp_path_factory.mktemp("instruct")
    expected = write_inputs(root)
    return root, expected, *run_stage(root, job())


def test_every_filter_drops_its_planted_case_and_keeps_the_good_ones(staged):
    _, expected, _, train, heldout, ledger = staged
    outcome = {r["id"]: r["filter"] for r in ledger}
    kept = {r["id"] for r in train + heldout}
    for cid, why in expected.items():
        if why is None:
            assert cid in kept, f"{cid} should be kept, was dropped: {outcome.get(cid)}"
        else:
            assert outcome.get(cid) == why, f"{cid}: expected {why}, got {outcome.get(cid, 'kept')}"
    reasons = {r["id"]: r["reason"] for r in ledger}
    assert "pairs/p04" in reasons["pairs/z-exact"] and "pairs/p00" in reasons["pairs/z-near"]
    assert "eval prompt #0" in reasons["pairs/z-paraphrase"] and "eval prompt #1" in reasons["pairs/z-quote"]


def test_bad_lines_are_ledgered_with_their_line_numbers(staged):
    _, _, _, _, _, ledger = staged
    parse = {r["id"]: r["reason"] for r in ledger if r["filter"] == "parse"}
    first = len(GOOD_PAIRS) + len(PLANTED) + 1
    for n, problem in enumerate(BAD_PAIR_LINES.values(), start=first):
        assert f"line {n} of inputs/pairs.jsonl" in parse[f"pairs/inputs/pairs.jsonl:{n}"]
        assert problem in parse[f"pairs/inputs/pairs.jsonl:{n}"]
    utf8 = first + len(BAD_PAIR_LINES)
    assert "invalid UTF-8" in parse[f"pairs/inputs/pairs.jsonl:{utf8}"]
    assert "must be a list of turns" in parse["chats/inputs/chats.jsonl:4"]


def test_ledger_accounts_for_every_input(staged):
    _, expected, result, train, heldout, ledger = staged
    ids = [r["id"] for r in train + heldout + ledger]
    assert sorted(ids) == sorted(expected) and len(ids) == len(set(ids))   # each input exactly once
    c = result.counts
    assert c["read"] == len(expected) == c["train"] + c["heldout"] + c["dropped"]
    assert c["dropped"] == len(ledger) == sum(c["dropped_by_filter"].values())
    report = json.loads((staged[0] / "data/instruct/report.json").read_text())
    for name, s in c["by_source"].items():
        assert s["read"] == s["train"] + s["heldout"] + s["dropped"]
        funnel = report["funnel"][name]
        assert [f["step"] for f in funnel] == list(instruct.STEPS)
        assert funnel[-1]["remaining"] == s["train"] == sum(r["source"] == name for r in train)
        assert sum(f["left"] for f in funnel) == s["read"] - s["train"]
    assert report["by_source"] == c["by_source"] and report["decontamination"]["dropped"] == 2
    assert "| decontamination |" in result.summary and result.table[0]["source"] == "pairs"


def test_heldout_is_seeded_and_disjoint_from_train(staged, tmp_path):
    _, _, _, train, heldout, _ = staged
    assert len(heldout) == 3
    assert not {r["id"] for r in train} & {r["id"] for r in heldout}
    def key(r: dict) -> str:
        return exact_key("\n".join(m["content"] for m in r["messages"] if m["role"] != "system"))
    assert not {key(r) for r in train} & {key(r) for r in heldout}
    for r in train + heldout:  # the output format SFT reads
        assert list(r) == ["id", "source", "messages", "score"]
        assert r["messages"][-1]["role"] == "assistant" and 0 <= r["score"] <= 1
    assert [r["score"] for r in train] == sorted((r["score"] for r in train), reverse=True)
    write_inputs(tmp_path)
    picks = {tuple(r["id"] for r in run_stage(tmp_path, job(), seed=s)[2]) for s in (1, 2, 3, 4)}
    assert len(picks) > 1                                                  # the seed chooses the slice


def test_rerun_is_byte_identical(staged, tmp_path):
    root = staged[0]
    write_inputs(tmp_path)
    run_stage(tmp_path, job())
    for name in OUTPUTS:
        assert (tmp_path / "data/instruct" / name).read_bytes() == (root / "data/instruct" / name).read_bytes(), name


def test_quality_cap_keeps_the_best_and_ledgers_the_rest(tmp_path):
    write_inputs(tmp_path)
    _, everything, _, _ = run_stage(tmp_path, job(heldout_count=0))
    result, train, heldout, ledger = run_stage(tmp_path, job(max_train_pairs=4, heldout_count=0))
    capped = [r for r in ledger if r["filter"] == "quality_cap"]
    assert not heldout and len(everything) == len(GOOD_PAIRS) + 1           # the good pairs and the good chat
    assert [r["id"] for r in train] == [r["id"] for r in everything[:4]]    # the 4 best by score
    assert sorted(r["id"] for r in capped) == sorted(r["id"] for r in everything[4:])
    assert max(r["score"] for r in everything[4:]) <= min(r["score"] for r in train)
    assert all(r["reason"].startswith("below quality cap") for r in capped)
    assert result.counts["dropped_by_filter"]["quality_cap"] == len(capped)


def test_max_pairs_takes_a_seeded_subset(tmp_path):
    write_inputs(tmp_path)
    spec = job()
    spec.instruct.sources[0].max_pairs = 5
    result, *_ = run_stage(tmp_path, spec)
    s = result.counts["by_source"]["pairs"]
    assert s["available"] == len(GOOD_PAIRS) + len(PLANTED) and s["not_taken"] == s["available"] - 5
    assert s["read"] == 5 + len(BAD_PAIR_LINES) + 1               # bad lines are always read and ledgered
    assert s["read"] == s["train"] + s["heldout"] + s["dropped"]


# --- embedded sources (the reading of each: tests/test_instruct_sources.py) ---------------------------------

def test_default_embedded_run_is_capped_and_conserved(tmp_path):
    spec = InstructJob(instruct=InstructSpec(
        sources=[EmbeddedInstructSource(name="chatterbot", corpus="chatterbot", max_pairs=300),
                 EmbeddedInstructSource(name="docstrings", corpus="docstrings", max_pairs=150),
                 EmbeddedInstructSource(name="pydoc_topics", corpus="pydoc_topics")],
        max_train_pairs=200), eval_prompts=['The "with" statement\n********************\n\nThe '])
    result, train, heldout, ledger = run_stage(tmp_path, spec)
    assert len(train) == 200 and {r["source"] for r in train} == {"chatterbot", "docstrings", "pydoc_topics"}
    parse = result.counts["dropped_by_filter"].get("parse", 0)     # bad YAML items are read whatever the cap
    topics = result.counts["by_source"]["pydoc_topics"]["read"]
    assert result.counts["read"] == 450 + topics + parse == len(train) + len(heldout) + len(ledger)
    assert result.counts["dropped_by_filter"]["exact_duplicate"] > 0    # chatterbot repeats itself a lot
    # the evaluate stage's default docs prompt is the start of pydoc's "with" topic: that section must go
    decontaminated = {r["id"] for r in ledger if r["filter"] == "decontamination"}
    assert "pydoc_topics/with#1" in decontaminated
