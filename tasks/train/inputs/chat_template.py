"""A checkpoint's own chat template (`tokenizer_config.json` "chat_template"): rendering and the assistant-only mask.

A model finetuned from an open checkpoint must see conversations the way it will be prompted after export —
with the checkpoint's template (Llama 3's `<|start_header_id|>…<|eot_id|>`, ChatML's `<|im_start|>…<|im_end|>`),
not forgeline's markers. The template is rendered as transformers renders it (`chat.render_jinja`: sandboxed,
trim_blocks + lstrip_blocks) and the text tokenized with the checkpoint's tokenizer, special tokens parsed. The
template is untrusted code from a download: each render is bounded in size, work and steps by its input
(`template_sandbox`), and any failure is a TemplateError naming the file (`checkpoint_chat` renders a probe
conversation first, so a template that cannot render stops SFT before it starts).

The loss mask comes from the template itself, whatever its syntax: for each assistant message i, the text the
template prints for messages[:i] with the generation prompt is a prefix of its text for messages[:i+1]; the
characters between the two are what the model must produce for turn i — its content and whatever the template
closes the turn with (`<|eot_id|>`, `<|im_end|>\\n`), so the model learns to stop. A token is trained when it
starts inside such a span. A template that rewrites earlier turns when later ones follow (so no prefix holds) is
refused by name rather than masked wrongly. The end-of-turn token generation stops at is the last special token
inside a probe reply's span.

A message's content is data, not markup: where the text holds a special token's string inside a message's content
(a user pasting `<|im_start|>system ...` or `<|eot_id|>`), that content is re-encoded as plain text (the rest of
the text as before), so it cannot forge a turn or an end of turn. Text without such strings is encoded whole,
exactly as transformers' `apply_chat_template(tokenize=True)` encodes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2
from tokenizers import Tokenizer

from tasks.train.inputs.chat import check_messages, render_jinja

PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


class TemplateError(ValueError):
    """The checkpoint's chat template cannot give a loss mask; the message says why."""


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


@dataclass
class TemplateChat:
    """Render conversations with `template`; `specials`: the bos/eos/... strings the template may print."""

    template: str
    tok: Tokenizer
    specials: dict[str, str] = field(default_factory=dict)

    def text(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = False) -> str:
        """The rendered text; a template that fails on these messages (its `raise_exception`, a syntax error, a
        render budget of `template_sandbox`) raises TemplateError, a ValueError: SFT reports the record."""
        try:
            return render_jinja(self.template, messages, add_generation_prompt=add_generation_prompt,
                                **self.specials)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None

    def spans(self, messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
        """The conversation's text and the character spans of each assistant turn in it."""
        check_messages(messages)
        full = self.text(messages)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self.text(messages[:i], add_generation_prompt=True)
            upto = self.text(messages[: i + 1])
            if not (upto.startswith(before) and full.startswith(upto)):
                raise TemplateError(f"the chat template rewrites earlier turns (assistant message {i} is not "
                                    "rendered as a prefix of the conversation), so no assistant-only mask exists")
            spans.append((len(before), len(upto)))
        return full, spans

    def render(self, messages: Sequence[Mapping[str, Any]],
               add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
        """(ids, loss_mask): mask 1 on the tokens that start inside an assistant turn's span."""
        if add_generation_prompt:
            check_messages(messages)
            ids, _ = self.encode(self.text(messages, add_generation_prompt=True), messages)
            return ids, [0] * len(ids)
        text, spans = self.spans(messages)
        ids, offsets = self.encode(text, messages)
        mask = [int(any(lo <= start < hi for lo, hi in spans)) for start, _ in offsets]
        return ids, mask

    def encode(self, text: str, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and character offsets of `text`; a special token that would start inside a message's
        content makes the contents plain text (encoded on their own), the template's text around them as is."""
        enc = self.tok.encode(text, add_special_tokens=False)
        special = {i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}
        contents = content_spans(text, messages)
        if not any(i in special and any(lo <= s < hi for lo, hi in contents) for i, (s, _) in
                   zip(enc.ids, enc.offsets)):
            return list(enc.ids), list(enc.offsets)
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        cut = 0
        for lo, hi in [*contents, (len(text), len(text))]:
            for a, b, plain in ((cut, lo, False), (lo, hi, True)):
                if b > a:
                    piece = self._encode_piece(text[a:b], plain)
                    ids += piece.ids
                    offsets += [(x + a, y + a) for x, y in piece.offsets]
            cut = hi
        return ids, offsets

    def _encode_piece(self, text: str, plain: bool):
        before = self.tok.encode_special_tokens
        self.tok.encode_special_tokens = plain
        try:
            return self.tok.encode(text, add_special_tokens=False)
        finally:
            self.tok.encode_special_tokens = before

    def end_of_turn(self) -> str:
        """The special token closing an assistant turn (`<|eot_id|>`, `<|im_end|>`): a chat model's eos."""
        ids, mask = self.render(PROBE)
        special = self.tok.get_added_tokens_decoder()
        last = [i for i, m in zip(ids, mask) if m and i in special][-1:]
        return special[last[0]].content if last else self.specials.get("eos_token", "")

    def stop_ids(self) -> list[int]:
        """The token(s) that end an assistant turn: the last special token of the probe reply's span, plus eos."""
        ids, mask = self.render(PROBE)
        special = set(self.tok.get_added_tokens_decoder())
        stops = [i for i, m in zip(ids, mask) if m and i in special][-1:]
        eos = self.tok.token_to_id(self.specials.get("eos_token", "")) if self.specials.get("eos_token") else None
        return sorted(set(stops + ([eos] if eos is not None else [])))


def content_spans(text: str, messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Where each message's content (stripped: templates may trim it) sits in the rendered text, searched in
    message order; a content the template rewrote is not found and has no span."""
    spans, pos = [], 0
    for m in messages:
        content = m["content"].strip()
        at = text.find(content, pos) if content else -1
        if at >= 0:
            spans.append((at, at + len(content)))
            pos = at + len(content)
    return spans


def checkpoint_chat(folder: Path, tok: Tokenizer) -> TemplateChat | None:
    """The checkpoint's chat template as transformers picks it (None when it has none: forgeline's template is
    used): `chat_template.jinja` beside the config wins over tokenizer_config.json's "chat_template" (transformers
    ≥ 4.43 writes the file and reads it first; before, the config's won); a list of named templates uses the one
    named "default", and one without a default is refused naming them, as transformers' apply_chat_template
    refuses it."""
    cfg_file, jinja = folder / "tokenizer_config.json", folder / "chat_template.jinja"
    config = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
    template = jinja.read_text(encoding="utf-8") if jinja.is_file() else config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if "default" not in named:
            raise TemplateError(f"{cfg_file}: chat_template is a list of named templates {sorted(map(str, named))} "
                                "with none named `default`, the one transformers (and forgeline) would use: name "
                                "one `default`, or put the template to train with in chat_template.jinja")
        template = named["default"]
    if not template:
        return None
    specials = {k: t for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                if (t := _token_text(config.get(k))) is not None}
    chat = TemplateChat(template, tok, specials)
    try:
        chat.spans(PROBE)  # fails now, naming the template problem, rather than in the middle of SFT
    except TemplateError as exc:  # a syntax error, raise_exception, a render budget (template_sandbox), ...
        raise TemplateError(f"{jinja if jinja.is_file() else cfg_file}: {exc}") from None
    if not chat.stop_ids():
        raise TemplateError(f"{cfg_file}: the chat template's assistant turn has no end token and there is no "
                            "eos_token: generation could not stop")
    return chat
