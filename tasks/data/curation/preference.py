"""Preference pairs: reading downloaded sets and building the embedded default from instruct's conversations.

Every source yields `Pair` (normalised: prompt messages ending in a user turn, two answer strings) or `Unread`
(a record that could not become one, with where and why), so nothing is lost silently.

Shapes read (the field names are `PreferenceFieldMap`'s), in jsonl lines or parquet rows:
- TRL's explicit prompt: `{"prompt": str | [messages], "chosen": str | [assistant message], "rejected": ...}`;
- the prompt as messages: `{"messages": [...], "chosen": ..., "rejected": ...}`;
- open-instruct's implicit prompt: `{"chosen": [whole conversation], "rejected": [whole conversation]}` — the
  prompt is the turns both share before the last assistant turn;
- UltraFeedback-binarized's: a `prompt` string beside whole conversations (`chosen`, `rejected`) that repeat it.
An answer must be one assistant turn (a multi-turn continuation is refused with its reason). The prompt must be a
conversation SFT's template can render: roles system/user/assistant, a system turn only first, user and assistant
alternating, ending on the user; every text must be storable as UTF-8 (a JSON "\ud800" escape is refused here,
not a crash of the stage's hashing or of prefer_ref's rendering downstream).

The embedded default (`embedded_pairs`): the prompt and the chosen answer are one of instruct's curated
conversations (up to its first assistant turn); the rejected answer is, by a seeded hash per pair, one of the
source's `rejected` kinds (specs/prefer.py). `sft_greedy` answers come from a callable the stage passes in (the
SFT model decoding greedily), so this module holds no model; an empty greedy answer (the model ended its turn at
once) makes that pair an `other_answer` one, recorded in its `kind`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specs.prefer import EmbeddedPreferenceSource, FilesPreferenceSource, PreferenceFieldMap
from tasks.data.curation.streaming import key_twice
from tasks.data.formats.parquet_rows import parquet_rows
from tasks.data.formats.paths import expand_paths
from tasks.data.formats.json_lines import PARSE_ISSUES, json_lines
from tasks.data.records import unicode_error, valid_unicode

EXCERPT_CHARS = 300
Messages = list[dict[str, str]]
Generate = Callable[[list[Messages]], list[str]]  # prompts -> the SFT model's greedy answers


@dataclass
class Pair:
    id: str
    source: str
    prompt: Messages
    chosen: str
    rejected: str
    split: str | None = None    # None: the held-out slice decides; "train" / "heldout": fixed by the source
    kind: str = "file"          # how the rejected answer was made (the embedded kinds) or "file"

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "prompt": self.prompt, "chosen": self.chosen,
                "rejected": self.rejected, "kind": self.kind}

    def excerpt(self) -> str:
        user = next((m["content"] for m in reversed(self.prompt) if m.get("role") == "user"), "")
        return f"prompt: {user} | chosen: {self.chosen} | rejected: {self.rejected}"[:EXCERPT_CHARS]


@dataclass
class Unread:
    id: str
    source: str
    reason: str
    excerpt: str = ""


def seeded_unit(*parts: object) -> float:
    """A stable number in [0, 1) from `parts` (the same on every machine and run)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8, person=b"forgeline-pref").digest()
    return int.from_bytes(digest, "big") / 2**64


# ----------------------------------------------------------------------------------------------- shapes
def _messages(value: Any, what: str) -> Messages:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what}: expected a string or a non-empty list of messages")
    for m in value:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ValueError(f"{what}: every message needs a string role and content")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _answer(value: Any, what: str) -> str | Messages:
    """An answer's text, or the messages of a whole conversation (the implicit-prompt shape)."""
    if isinstance(value, str):
        return value
    msgs = _messages(value, what)
    return msgs[0]["content"] if len(msgs) == 1 and msgs[0]["role"] == "assistant" else msgs


def _final_answer(answer: str | Messages, prompt: Messages) -> str | Messages:
    """A whole conversation that repeats the prompt's turns and ends in one assistant turn: that turn's text."""
    if isinstance(answer, list) and answer[:-1] == prompt and answer[-1]["role"] == "assistant":
        return answer[-1]["content"]
    return answer


def conversation_problem(prompt: Messages, chosen: str, rejected: str) -> str | None:
    """Why a parsed pair cannot be rendered and trained on (roles, turn order, text that is not valid Unicode),
    or None."""
    roles = [m["role"] for m in prompt]
    if bad := [r for r in roles if r not in ("system", "user", "assistant")]:
        return f"the prompt has role {bad[0]!r}; expected system, user or assistant"
    body = roles[1:] if roles[0] == "system" else roles
    if body != [("user", "assistant")[i % 2] for i in range(len(body))]:
        return (f"prompt turns must alternate user → assistant after an optional system turn, got "
                f"{' → '.join(roles)}"[:300])
    for what, text in [*((f"prompt turn {i + 1}", m["content"]) for i, m in enumerate(prompt)),
                       ("chosen", chosen), ("rejected", rejected)]:
        if (why := unicode_error(text)) is not None:
            return f"{what}: {why}"
    return None


def pair_fields(obj: Any, fields: PreferenceFieldMap) -> tuple[Messages, str, str] | str:
    """(prompt messages, chosen, rejected) of one record in any shape above, or why it has none."""
    if not isinstance(obj, dict):
        return f"expected an object, got {type(obj).__name__}"
    if fields.chosen not in obj or fields.rejected not in obj:
        return f"needs both {fields.chosen!r} and {fields.rejected!r}"
    try:
        chosen, rejected = _answer(obj[fields.chosen], "chosen"), _answer(obj[fields.rejected], "rejected")
        # a null prompt is no prompt: `{"prompt": null, "messages": [...]}` takes the messages (it hid them before)
        raw = obj.get(fields.prompt)
        raw = obj.get(fields.messages) if raw is None else raw
        if raw is None:  # implicit prompt: the turns both conversations share before their final answer
            if not (isinstance(chosen, list) and isinstance(rejected, list)):
                return "no prompt field, and chosen/rejected are not whole conversations"
            if chosen[:-1] != rejected[:-1] or {chosen[-1]["role"], rejected[-1]["role"]} != {"assistant"}:
                return "chosen and rejected conversations must share every turn but a final assistant answer"
            prompt, chosen, rejected = chosen[:-1], chosen[-1]["content"], rejected[-1]["content"]
        else:
            prompt = [{"role": "user", "content": raw}] if isinstance(raw, str) else _messages(raw, "prompt")
            # UltraFeedback-binarized: a prompt string beside whole conversations that repeat it
            chosen, rejected = (_final_answer(a, prompt) for a in (chosen, rejected))
    except ValueError as exc:
        return str(exc)
    for what, value in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(value, str):
            return f"{what}: the answer must be one assistant turn, got {len(value)} messages"
    if not prompt or prompt[-1]["role"] != "user":
        return "the prompt must end with a user turn"
    return conversation_problem(prompt, chosen, rejected) or (prompt, chosen, rejected)


# ------------------------------------------------------------------------------------------------ files
class ReadError(str):
    """Why a line is not a record (a JSON line holding a bare string is a record of the wrong shape, not this)."""


def _records(path: Path, shown: str, cap: int, knob: str, mapped: tuple[str | None, ...] = ()
             ) -> Iterator[tuple[str, Any, str]]:
    """(where, parsed object or a ReadError, raw excerpt) per jsonl line / parquet row; a file that cannot be
    opened (a Parquet file cut short has no footer, so none of its rows can be read) is one ReadError. Both are
    streamed: a jsonl file a line at a time (`json_lines`), a Parquet file a batch at a time (`parquet_rows`: a
    damaged row group is one ReadError); a line or row over `cap` bytes is one ReadError, never held; a jsonl
    object naming one of the `mapped` keys twice is one ReadError (a Parquet file's columns are unique)."""
    if path.suffix != ".parquet":
        yield from _lines(path, shown, cap, knob, mapped)
        return
    for r in parquet_rows(path, cap):
        where = f"{shown}:row{r.number}"
        if r.issue == "unreadable_file" and r.number == 0:
            yield shown, _unreadable(r.error, path, shown), ""
        elif r.issue == "unreadable_file":
            yield where, ReadError(f"rows {r.number}-{r.last} (row group {r.group}) could not be read "
                                   f"({type(r.error).__name__})"), ""
        elif r.issue == "record_too_large":
            yield where, ReadError(f"record_too_large: row of {r.size:,} bytes > the {cap:,}-byte cap ({knob}); "
                                   f"skipped unread{r.group_note}"), ""
        else:
            yield where, r.data, json.dumps(r.data, default=str)[:EXCERPT_CHARS]


def _lines(path: Path, shown: str, cap: int, knob: str, mapped: tuple[str | None, ...] = ()
           ) -> Iterator[tuple[str, Any, str]]:
    try:
        for entry in json_lines(path, cap, knob):
            where, text = f"{shown}:{entry.number}", entry.text[:EXCERPT_CHARS]
            if entry.issue in PARSE_ISSUES:
                yield where, ReadError(f"invalid JSON or UTF-8 ({type(entry.error).__name__})"), text
            elif entry.issue is not None:
                yield where, ReadError(f"{entry.issue}: {entry.detail}"), text
            elif isinstance(entry.value, dict) and (twice := key_twice(entry.data, mapped)):
                yield where, ReadError(f"invalid JSON: key {twice!r} appears more than once in the object"), text
            else:
                yield where, entry.value, text
    except OSError as exc:
        yield shown, _unreadable(exc, path, shown), ""


def _unreadable(exc: Exception, path: Path, shown: str) -> ReadError:
    message = str(exc).replace(str(path), shown)[:200]   # the root's location is not part of the output
    return ReadError(f"unreadable file ({type(exc).__name__}: {message})")


def file_pairs(src: FilesPreferenceSource, root: Path) -> Iterator[Pair | Unread]:
    """The pairs of a source's files (ingest's path rules: files, folders, globs; a Hugging Face dataset folder's
    metadata is left out), each file's unreadable records and unsupported files as `Unread`."""
    seen: set[str] = set()
    fixed = None if src.split == "auto" else src.split
    for listed in expand_paths(src.paths, root, src.name):
        path = listed.path
        try:
            shown = path.relative_to(root.resolve()).as_posix()
        except ValueError:
            shown = path.as_posix()
        shown = valid_unicode(shown)  # a file name that is not UTF-8 (bytes as surrogates): `\xNN`, a writable id
        if listed.refused or path.suffix not in (".jsonl", ".parquet"):
            why = listed.refused or "not a .jsonl or .parquet file"
            yield Unread(f"{src.name}/{shown}", src.name, f"{shown}: {why}")
            continue
        knob = f"max_line_bytes of prefer_data source {src.name!r}"
        f = src.fields
        mapped = (f.prompt, f.messages, f.chosen, f.rejected, f.id)
        for where, obj, excerpt in _records(path, shown, src.max_line_bytes, knob, mapped):
            parsed = obj if isinstance(obj, ReadError) else pair_fields(obj, src.fields)
            key = where
            if not isinstance(parsed, str) and src.fields.id is not None:
                value = obj.get(src.fields.id)
                if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
                    key = str(value).strip()
                    if (why := unicode_error(key)) is not None:   # {"id": "\ud800"}: ids are hashed and written
                        parsed = f"id field {src.fields.id!r} is {why}"
                else:
                    parsed = f"id field {src.fields.id!r} must be a non-empty string or integer"
            if not isinstance(parsed, str) and f"{src.name}/{key}" in seen:
                parsed = f"duplicate id {key!r}"
            if isinstance(parsed, str):
                yield Unread(f"{src.name}/{where}", src.name, f"{where}: {parsed}", excerpt)
                continue
            seen.add(f"{src.name}/{key}")
            yield Pair(f"{src.name}/{key}", src.name, *parsed, split=fixed)


# --------------------------------------------------------------------------------------------- embedded
def _conversations(path: Path, split: str) -> list[tuple[str, Messages, str, str, str]]:
    """(id, prompt up to the first assistant turn, that answer, split, source) of instruct's jsonl records, read a
    line at a time (instruct's own output: its lines are its length filters' size, and JSON escapes every line
    break inside a string, so a line is a record)."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                msgs = rec["messages"]
                first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
                out.append((str(rec["id"]), msgs[:first], msgs[first]["content"], split, rec.get("source", "")))
    return out


def embedded_pairs(src: EmbeddedPreferenceSource, instruct_dir: Path, seed: int, generate: Generate
                   ) -> tuple[list[Pair], int]:
    """Pairs from instruct's train (at most `max_pairs`, by a seeded hash) and held-out conversations, and how
    many train conversations were not taken."""
    train = _conversations(instruct_dir / "train.jsonl", "train")
    not_taken = 0
    if src.max_pairs is not None and len(train) > src.max_pairs:
        not_taken = len(train) - src.max_pairs
        train = sorted(train, key=lambda c: (seeded_unit("take", seed, c[0]), c[0]))[: src.max_pairs]
    convs = sorted(train, key=lambda c: c[0]) + _conversations(instruct_dir / "heldout.jsonl", "heldout")
    kinds = [src.rejected[int(seeded_unit("rejected", seed, c[0]) * len(src.rejected))] for c in convs]
    rejected = {}
    greedy = [k for k, kind in enumerate(kinds) if kind == "sft_greedy"]
    for k, answer in zip(greedy, generate([convs[k][1] for k in greedy]) if greedy else []):
        if answer.strip():
            rejected[k] = answer
        else:  # a model that ends its turn at once (a barely trained one) has no answer to move away from
            kinds[k] = "other_answer"
    groups: dict[tuple[str, str], list[int]] = {}  # another prompt's answer: same source and split
    for k, c in enumerate(convs):
        groups.setdefault((c[4], c[3]), []).append(k)
    for members in groups.values():
        ring = sorted(members, key=lambda k: (seeded_unit("other", seed, convs[k][0]), k))
        for j, k in enumerate(ring):
            if kinds[k] == "other_answer":
                rejected[k] = convs[ring[(j + 1) % len(ring)]][2]  # alone in its group: its own (then dropped)
    for k, kind in enumerate(kinds):
        if kind == "truncated":
            words = convs[k][2].split()
            rejected[k] = " ".join(words[: max(1, int(len(words) * src.truncate_fraction))])
    pairs = [Pair(f"{src.name}/{c[0]}", src.name, c[1], c[2], rejected[k], split=c[3], kind=kinds[k])
             for k, c in enumerate(convs)]
    return pairs, not_taken
