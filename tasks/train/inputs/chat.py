"""The chat template: role markers as special tokens, rendering with an assistant-only loss mask, the same template
as Jinja (for the exported HF `tokenizer_config.json`), and growing a pretrained model's embeddings for new tokens.

Rendered text of a conversation (markers are single special tokens; `<|endoftext|>` starts it, as every
pretraining document followed one in the packed stream, so the model begins in a familiar state):

    <|endoftext|><|system|>{system}<|end|>\\n<|user|>{user}<|end|>\\n<|assistant|>{reply}<|end|>\\n ...

No separator sits between a marker and its content: the tokenizer splits on special tokens before anything else,
so each content string is tokenized on its own exactly as in `render`, and encoding the Jinja text yields the
same ids (a separator such as "\\n" could merge with content that starts with whitespace). Loss mask: 1 on the
assistant's content tokens and its `<|end|>` (the model must learn to stop), 0 on the start token, role markers,
system/user text and the "\\n" between turns. A generation prompt ends with `<|assistant|>`; stop at `<|end|>`.

Content is encoded with `encode_special_tokens = True` (as in pretraining), so user text containing
"<|assistant|>" stays plain text and cannot forge a turn. An HF tokenizer encoding the Jinja text would split such
a forged marker as a special token: the only case where the two differ.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from tokenizers import AddedToken, Tokenizer

from tasks.train.modeling.model import ModelConfig, head_index
from tasks.train.modeling.model import init_normal

ROLES = ("system", "user", "assistant")
RESERVED = re.compile(r"^<\|reserved_(\d+)\|>$")
NEW_ROW_NOISE = 0.01  # new rows = mean + N(0, (1% of the rows' std)²): breaks ties between new tokens, barely moves them


@dataclass(frozen=True)
class ChatFormat:
    """The marker strings. `start` must already be a special token of the pretrain tokenizer (its document end)."""

    system: str = "<|system|>"
    user: str = "<|user|>"
    assistant: str = "<|assistant|>"
    end: str = "<|end|>"
    start: str = "<|endoftext|>"
    turn_sep: str = "\n"  # after each <|end|>: readability only, never trained

    def marker(self, role: str) -> str:
        return {"system": self.system, "user": self.user, "assistant": self.assistant}[role]

    @property
    def new_tokens(self) -> tuple[str, ...]:
        """The tokens the chat format adds to a pretrain tokenizer, in id order."""
        return (self.system, self.user, self.assistant, self.end)


DEFAULT_FORMAT = ChatFormat()


# ------------------------------------------------------------------------------------------------ the tokenizer
def extend_tokenizer(tok: Tokenizer, fmt: ChatFormat = DEFAULT_FORMAT) -> tuple[Tokenizer, dict[str, int]]:
    """A copy of `tok` with the chat markers as special tokens, and their ids.

    Markers first claim the pretrain tokenizer's `<|reserved_N|>` placeholders (lowest N first; the vocab size
    is unchanged, the embedding needs no resize); any left over are appended as new ids (vocab grows: call
    `resize_embeddings`). Existing special tokens are kept. Idempotent: markers already present keep their ids.
    """
    if tok.token_to_id(fmt.start) is None:
        raise ValueError(f"the tokenizer has no {fmt.start!r} token to start conversations with")
    data = json.loads(tok.to_str())
    present = {t["content"] for t in data["added_tokens"]}
    missing = [m for m in fmt.new_tokens if m not in present]
    reserved = sorted((int(RESERVED.match(t["content"]).group(1)), t) for t in data["added_tokens"]
                      if RESERVED.match(t["content"]))
    vocab = data["model"].get("vocab")  # BPE keeps special tokens in its vocab too; rename them there as well
    for marker, (_, entry) in zip(missing, reserved):
        if isinstance(vocab, dict) and entry["content"] in vocab:
            vocab[marker] = vocab.pop(entry["content"])
        entry["content"] = marker
    out = Tokenizer.from_str(json.dumps(data))
    appended = missing[len(reserved):]
    if appended:  # ids after the current vocabulary, in format order
        out.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in appended])
    ids = {m: out.token_to_id(m) for m in fmt.new_tokens}
    assert all(i is not None for i in ids.values()), ids
    return out, ids


def vocab_size(tok: Tokenizer) -> int:
    """Rows the embedding needs: one past the largest id (added tokens included)."""
    return tok.get_vocab_size(with_added_tokens=True)


# ------------------------------------------------------------------------------------------------- rendering
def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Roles in ROLES, string contents, a system message only first. Raises ValueError naming the message."""
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ROLES:
            raise ValueError(f"message {i}: role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"message {i}: content must be a string")
        if role == "system" and i > 0:
            raise ValueError(f"message {i}: a system message may only come first")


def _plain_encode(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of texts with special-token strings inside them kept as plain text (no forged markers).

    Flips the tokenizer's flag for the call (not thread-safe: give each thread its own tokenizer).
    """
    before = tok.encode_special_tokens
    tok.encode_special_tokens = True
    try:
        return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)] if texts else []
    finally:
        tok.encode_special_tokens = before


def render(messages: Sequence[Mapping[str, Any]], tok: Tokenizer, fmt: ChatFormat = DEFAULT_FORMAT,
           add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) of a conversation; mask 1 exactly on assistant content tokens and their `<|end|>`."""
    check_messages(messages)
    special = {m: tok.token_to_id(m) for m in (fmt.start, *fmt.new_tokens)}
    if None in special.values():
        raise ValueError("the tokenizer lacks the chat markers: build it with extend_tokenizer()")
    # one batched encode of every content string plus the turn separator
    encoded = _plain_encode(tok, [m["content"] for m in messages] + [fmt.turn_sep])
    sep = encoded.pop()
    ids, mask = [special[fmt.start]], [0]
    for m, content in zip(messages, encoded):
        train = 1 if m["role"] == "assistant" else 0
        ids += [special[fmt.marker(m["role"])], *content, special[fmt.end], *sep]
        mask += [0, *[train] * len(content), train, *[0] * len(sep)]
    if add_generation_prompt:
        ids.append(special[fmt.assistant])
        mask.append(0)
    return ids, mask


def render_text(messages: Sequence[Mapping[str, Any]], fmt: ChatFormat = DEFAULT_FORMAT,
                add_generation_prompt: bool = False) -> str:
    """The conversation as text (what `render` tokenizes and the Jinja template prints)."""
    check_messages(messages)
    body = "".join(f"{fmt.marker(m['role'])}{m['content']}{fmt.end}{fmt.turn_sep}" for m in messages)
    return fmt.start + body + (fmt.assistant if add_generation_prompt else "")


def jinja_template(fmt: ChatFormat = DEFAULT_FORMAT) -> str:
    """The template as a Jinja string for HF `tokenizer_config.json` "chat_template" (renders `render_text`).

    Written for transformers' environment (trim_blocks, lstrip_blocks): every block tag uses `-` so no
    template whitespace reaches the output, and the markers are string literals (json-quoted, which Jinja
    string literals accept) so the template does not depend on `bos_token` being configured.
    """
    q = json.dumps
    return (
        "{{- " + q(fmt.start) + " -}}"
        "{%- for message in messages -%}"
        "{%- if message['role'] == 'system' -%}"
        "{%- if not loop.first -%}{{- raise_exception('a system message may only come first') -}}{%- endif -%}"
        "{{- " + q(fmt.system) + " -}}"
        "{%- elif message['role'] == 'user' -%}{{- " + q(fmt.user) + " -}}"
        "{%- elif message['role'] == 'assistant' -%}{{- " + q(fmt.assistant) + " -}}"
        "{%- else -%}{{- raise_exception('role must be system, user or assistant') -}}{%- endif -%}"
        "{{- message['content'] -}}{{- " + q(fmt.end + fmt.turn_sep) + " -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- " + q(fmt.assistant) + " -}}{%- endif -%}"
    )


def render_jinja(template: str, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = False,
                 **extra: Any) -> str:
    """Render a chat template the way transformers does (sandboxed, trim_blocks + lstrip_blocks, loopcontrols,
    `raise_exception`, `tojson`), so export can check the template without importing transformers. A template is
    untrusted (it comes with a downloaded checkpoint): the render is bounded in size, work and loop steps by its
    input (`template_sandbox`), and whatever goes wrong — `raise_exception`, a budget, recursion — is a jinja2
    TemplateError."""
    from jinja2.exceptions import TemplateError

    from tasks.train.inputs.template_sandbox import render_bounded

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    context = {**extra, "messages": list(messages), "add_generation_prompt": add_generation_prompt}
    return render_bounded(template, context, raise_exception)


# ------------------------------------------------------------------------------------------ growing the model
def grown_keys(cfg: ModelConfig) -> list[str]:
    """The tensors with a row per token: the table and, when untied, the head (a tied head is the table)."""
    return ["layers.0.weight"] + ([] if cfg.tie_embeddings else [f"layers.{head_index(cfg)}.weight"])


def resize_embeddings(state: Mapping[str, torch.Tensor], cfg: ModelConfig, new_vocab: int, seed: int,
                      reinit: Sequence[int] = ()) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    """Grow the embedding (and an untied head) of a plain-model state dict to `new_vocab` rows.

    New rows (and rows listed in `reinit`, e.g. claimed `<|reserved_N|>` placeholders that pretraining never
    fed as input and only pushed down as outputs) become the mean of the other old rows plus tiny seeded noise
    (each row's noise a function of (seed, row id) only). The mean keeps a new token's logit near the average
    logit instead of a random one that could dominate the softmax. Old rows are copied unchanged, so logits of
    old tokens are unchanged. A tied head has no key (it is the embedding); an untied head grows the same way.
    """
    out = dict(state)
    for key in grown_keys(cfg):
        out[key] = grow_rows(state[key], key, cfg, new_vocab, seed, reinit)
    return out, ModelConfig.from_dict({**cfg.to_dict(), "vocab_size": new_vocab})


def grow_rows(w: torch.Tensor, key: str, cfg: ModelConfig, new_vocab: int, seed: int,
              reinit: Sequence[int] = ()) -> torch.Tensor:
    """One table `w` [V_old, d] grown to [new_vocab, d] as `resize_embeddings` says."""
    if new_vocab < cfg.vocab_size:
        raise ValueError(f"new_vocab {new_vocab} < current {cfg.vocab_size}: shrinking is not supported")
    old_v = cfg.vocab_size
    bad = [i for i in reinit if not 0 <= i < old_v]
    if bad:
        raise ValueError(f"reinit ids outside the old vocabulary: {bad}")
    keep = torch.ones(old_v, dtype=torch.bool, device=w.device)
    keep[list(reinit)] = False
    ref = w[keep].double()                                                         # [V_keep, d]
    mean, std = ref.mean(0), ref.std(0)                                            # [d]
    grown = torch.empty(new_vocab, w.size(1), dtype=w.dtype, device=w.device)
    grown[:old_v] = w
    for row in [*reinit, *range(old_v, new_vocab)]:
        noise = init_normal((w.size(1),), 1.0, seed, f"chat.new_row.{key}.{row}").to(w.device).double()
        grown[row] = (mean + NEW_ROW_NOISE * std * noise).to(w.dtype)
    return grown


class GrownTableSource:
    """A starting-weights source (`init_weights.WeightSource`) whose token table (and untied head) are grown
    to the chat vocabulary on the fly: every other tensor is `base`'s slice as it is; a grown one is read whole
    (one tensor, not the model), grown by `grow_rows` and sliced — the same values `resize_embeddings` gives."""

    # base: an init_weights.WeightSource, left Any: naming it, even under TYPE_CHECKING, would make the workplace's
    # structure check count checkpointing/ as code of export and prefer_data, which import this module only
    def __init__(self, base: Any, cfg: ModelConfig, new_vocab: int, seed: int, reinit: Sequence[int] = ()):
        self.base, self.old, self.new_vocab, self.seed, self.reinit = base, cfg, new_vocab, seed, list(reinit)
        self.cfg = ModelConfig.from_dict({**cfg.to_dict(), "vocab_size": new_vocab})
        if new_vocab < cfg.vocab_size:  # refused now, not at the first read on some rank
            raise ValueError(f"new_vocab {new_vocab} < current {cfg.vocab_size}: shrinking is not supported")

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        if key not in grown_keys(self.old):
            return self.base.read(key, dim, part, parts)
        grown = grow_rows(self.base.read(key, None, 0, 1), key, self.old, self.new_vocab, self.seed, self.reinit)
        if dim is None:
            return grown
        step = grown.size(dim) // parts
        if grown.size(dim) % parts:
            raise ValueError(f"`{key}`: size {grown.size(dim)} does not split into {parts} tensor-parallel slices")
        return grown.narrow(dim, part * step, step).clone()

    def whole_state(self) -> dict[str, torch.Tensor]:
        """Every tensor whole (one process's full model: the stage's side-by-side generations)."""
        return {key: self.read(key, None, 0, 1) for key in self.base.keys}

    def fingerprint(self) -> str:
        return self.base.fingerprint()
