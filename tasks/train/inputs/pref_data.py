"""Preference pairs as packed rows: each pair's chosen and rejected conversations rendered through SFT's chat
template, cut to fit one row together, packed by SFT's packer (tasks/train/inputs/sft_data.py, `groups`: the two
sequences of a pair share a row, each its own segment, so block-diagonal attention and per-sample positions keep
them apart), and the per-sequence log-probability sums the DPO loss is made of.

A pair record (prefer_data's `train.jsonl` / `heldout.jsonl`): {"id", "source", "prompt": [messages ending in a
user turn], "chosen": str, "rejected": str}. Its two samples are `prompt + [assistant answer]` rendered whole; the
mask keeps only the answer's tokens and its end marker (a multi-turn prompt's earlier assistant turns carry no
loss: they are context, the same in both). Sample 2i is pair i's chosen, 2i + 1 its rejected.

Fitting (`fit_pair`): a pair must fit one row of seq_len + 1 tokens. When the two are longer together, the shorter
keeps its length if it fits in half a row and the longer is cut to the rest; otherwise both are cut to half a row
(the start is kept, TRL's `keep_start`). A pair left with an answer of no token, or with two equal token
sequences, is refused with its reason. The reference pass (tasks/prefer_ref.py) and training (objectives/dpo.py)
both go through `prepare_pairs`, so they score the same tokens; the reference file records each sequence's
answer-token count and training checks them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from tasks.train.inputs.chat import render
from tasks.train.inputs.chat_template import TemplateChat
from tasks.train.inputs.sft_data import Packed, Sample, pack_samples

SIDES = ("chosen", "rejected")
# (input_ids, targets, *, segment_ids, position_ids, per_token=True) -> [m, T] token log-probs: a `Transformer`'s
# forward or the engine's
LogProbForward = Callable[..., torch.Tensor]


def sft_chat(sft_dir: Path) -> tuple[Any, TemplateChat | None, int]:
    """(tokenizer, the checkpoint's template or None for forgeline's markers, pad id) of SFT's output folder:
    the tokenizer SFT trained with (`tokenizer.json`, chat markers included) and its `chat.json`."""
    from tasks.data.mixing.tokenizer import load_tokenizer

    tok = load_tokenizer(sft_dir / "tokenizer.json")
    facts_file = sft_dir / "chat.json"
    facts = json.loads(facts_file.read_text()) if facts_file.is_file() else {"template": "forgeline"}
    if facts.get("template") != "checkpoint":
        pad = tok.token_to_id("<|pad|>")
        if pad is None:
            raise ValueError(f"{sft_dir / 'tokenizer.json'} has no <|pad|> token")
        return tok, None, pad
    specials = dict(facts.get("special_tokens") or {})
    chat = TemplateChat((sft_dir / "chat_template.jinja").read_text(encoding="utf-8"), tok, specials)
    pad_text = specials.get("pad_token") or specials.get("eos_token")
    pad = tok.token_to_id(pad_text) if pad_text else chat.stop_ids()[0]  # padding carries no loss
    return tok, chat, pad


def read_pairs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def render_answer(prompt: list[dict[str, str]], answer: str, tok: Tokenizer, chat: TemplateChat | None) -> Sample:
    """(ids, mask) of `prompt + [assistant answer]`, the mask on the answer (and its end marker) only."""
    full = [*prompt, {"role": "assistant", "content": answer}]
    ids, mask = chat.render(full) if chat is not None else render(full, tok)
    head, _ = chat.render(prompt) if chat is not None else render(prompt, tok)
    if ids[:len(head)] != head:
        raise ValueError("the chat template does not render the prompt as a prefix of the conversation")
    return ids, [0] * len(head) + list(mask[len(head):])


def fit_pair(chosen: Sample, rejected: Sample, cap: int, longest: int | None = None) -> tuple[Sample, Sample] | str:
    """The two samples cut to fit one row of `cap` tokens together (module docstring), each first to `longest`
    tokens (the model's context: positions restart per sample), or why they cannot."""
    if longest is not None:
        chosen, rejected = (chosen[0][:longest], chosen[1][:longest]), (rejected[0][:longest], rejected[1][:longest])
    lc, lr = len(chosen[0]), len(rejected[0])
    if lc + lr > cap:
        half = cap // 2
        short = min(lc, lr)
        keep_c, keep_r = (lc, cap - lc) if lc == short and lc <= half else \
            (cap - lr, lr) if lr <= half else (half, cap - half)
        chosen, rejected = (chosen[0][:keep_c], chosen[1][:keep_c]), (rejected[0][:keep_r], rejected[1][:keep_r])
    for side, (_, mask) in zip(SIDES, (chosen, rejected)):
        if sum(mask[1:]) <= 0:
            return f"no_answer_tokens: the {side} answer keeps no token in a row of {cap} (a prompt too long)"
    if list(chosen[0]) == list(rejected[0]):
        return "identical_tokens: chosen and rejected are the same token sequence in a row"
    return chosen, rejected


@dataclass
class PairRows:
    """Packed rows of preference pairs plus where each pair's sequences went."""

    packed: Packed
    ids: list[str]                 # pair ids, pair index order
    seq: np.ndarray                # [N, T] int64: sample index (2·pair + side) of each loss target, else -1
    tokens: np.ndarray             # [P, 2] answer tokens (targets carrying loss) of chosen, rejected
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (pair id, reason)

    def batch(self, rows: Sequence[int], device: torch.device | str = "cpu") -> tuple[dict[str, torch.Tensor], np.ndarray]:
        """Tensors of `rows` (as `Packed.batch`, plus `seq`: each loss target's sequence in this batch's own
        numbering 2·j + side, -1 elsewhere) and the pair indexes j = 0.. stand for."""
        idx = np.asarray(rows, dtype=np.int64)
        b = self.packed.batch(idx, device)
        pairs = np.array([k // 2 for r in idx.tolist() for k in self.packed.rows[r][::2]], dtype=np.int64)
        local = np.full(2 * len(self.ids) + 1, -1, dtype=np.int64)           # global sample -> batch sample
        local[np.concatenate([2 * pairs, 2 * pairs + 1])] = np.concatenate(
            [2 * np.arange(len(pairs)), 2 * np.arange(len(pairs)) + 1])
        b["seq"] = torch.from_numpy(local[self.seq[idx]]).to(b["input_ids"].device)   # -1 stays -1
        return b, pairs

    def pairs_in(self, rows: Sequence[int]) -> int:
        return sum(len(self.packed.rows[int(r)]) // 2 for r in rows)


def prepare_pairs(records: list[dict[str, Any]], tok: Tokenizer, chat: TemplateChat | None, seq_len: int, pad: int,
                  seed: int, longest: int | None = None) -> PairRows:
    """Render, fit and pack `records` into rows of seq_len + 1 tokens, each answer's sequence at most `longest`
    tokens (pair index = position among the kept ones, in file order)."""
    pairs: list[tuple[Sample, Sample]] = []
    ids: list[str] = []
    dropped: list[tuple[str, str]] = []
    for rec in records:
        try:
            pair = fit_pair(render_answer(rec["prompt"], rec["chosen"], tok, chat),
                            render_answer(rec["prompt"], rec["rejected"], tok, chat), seq_len + 1, longest)
        except (KeyError, TypeError, ValueError) as err:  # a malformed record is reported, not fatal
            pair = f"render: {err}"
        if isinstance(pair, str):
            dropped.append((str(rec.get("id")), pair))
        else:
            ids.append(str(rec["id"]))
            pairs.append(pair)
    return pack_pairs(pairs, ids, seq_len, pad, seed, dropped)


def pack_pairs(pairs: Sequence[tuple[Sample, Sample]], ids: list[str], seq_len: int, pad: int, seed: int,
               dropped: list[tuple[str, str]] | None = None) -> PairRows:
    """Pack fitted (chosen, rejected) samples — sample 2i, 2i + 1 — into rows, each pair's two in one row."""
    samples = [s for pair in pairs for s in pair]
    packed = pack_samples(samples, seq_len, pad, seed, overflow="drop",
                          groups=[[2 * i, 2 * i + 1] for i in range(len(pairs))])
    if packed.dropped:  # fit_pair made every pair fit a row: the packer has nothing left to refuse
        raise ValueError(f"preference pairs that do not fit a row of {seq_len + 1} tokens: {packed.dropped[:3]}")
    seq = np.full(packed.weights.shape, -1, dtype=np.int64)                  # [N, T]
    for r, members in enumerate(packed.rows):
        segs = packed.segment_ids[r]
        for j, k in enumerate(members):
            seq[r][(segs == j) & (packed.weights[r] > 0)] = k
    tokens = np.bincount(seq[seq >= 0], minlength=2 * len(pairs)).reshape(-1, 2)
    return PairRows(packed, list(ids), seq, tokens, list(dropped or []))


def sequence_logps(token_logps: torch.Tensor, seq: torch.Tensor, n_seq: int) -> torch.Tensor:
    """Σ of each sequence's token log-probs: token_logps [m, T] fp32, seq [m, T] (−1: no loss) -> [n_seq]."""
    flat, where = token_logps.reshape(-1), seq.reshape(-1)
    keep = where >= 0
    out = torch.zeros(n_seq, dtype=flat.dtype, device=flat.device)
    return out.index_add(0, where[keep], flat[keep])


def pair_logps(forward: LogProbForward, rows: PairRows, idx: Sequence[int], device: torch.device | str = "cpu"
               ) -> tuple[torch.Tensor, np.ndarray]:
    """([p, 2] summed answer log-probs (chosen, rejected) of the pairs in rows `idx`, their pair indexes).
    `forward`: a `Transformer` or the engine's forward (the same signature; `per_token` log-probs)."""
    b, pairs = rows.batch(idx, device)
    tok = forward(b["input_ids"], b["targets"], segment_ids=b["segment_ids"], position_ids=b["position_ids"],
                  per_token=True)                                                  # [m, T] fp32
    return sequence_logps(tok, b["seq"], 2 * len(pairs)).view(-1, 2), pairs


def all_pair_logps(forward: LogProbForward, rows: PairRows, batch_rows: int, device: torch.device | str = "cpu"
                   ) -> np.ndarray:
    """[P, 2] float64 of every pair (call under no_grad / eval mode), in pair order."""
    out = np.zeros((len(rows.ids), 2), dtype=np.float64)
    n = len(rows.packed.rows)
    for lo in range(0, n, batch_rows):
        logps, pairs = pair_logps(forward, rows, range(lo, min(lo + batch_rows, n)), device)
        out[pairs] = logps.double().cpu().numpy()
    return out


# ------------------------------------------------------------------------------------- both stages' inputs
REF_FILE = "logprobs.parquet"  # prefer_ref's artifact: per pair and split, the frozen SFT model's log-probs
SPLITS = ("train", "heldout")


@dataclass
class PairSets:
    """What the reference pass and training both build from SFT's folder and prefer_data's pairs."""

    tokenizer: Tokenizer
    chat: TemplateChat | None
    model: dict[str, Any]          # SFT's model config (config.json's `model`)
    row_len: int                   # packed row length (tokens per row, the +1 target aside)
    splits: dict[str, PairRows]


def load_pair_sets(sft_dir: Path, data_dir: Path, row_len: int | None, seed: int) -> PairSets:
    """SFT's tokenizer and template, and both splits of prefer_data's pairs as packed rows: rows of `row_len`
    (None: twice the SFT model's seq_len), each answer's sequence cut to the model's seq_len."""
    tok, chat, pad = sft_chat(sft_dir)
    model = json.loads((sft_dir / "config.json").read_text())["model"]
    row = row_len or 2 * int(model["seq_len"])
    splits = {s: prepare_pairs(read_pairs(data_dir / f"{s}.jsonl"), tok, chat, row, pad, seed,
                               longest=int(model["seq_len"])) for s in SPLITS}
    return PairSets(tok, chat, model, row, splits)


def write_reference(path: Path, sets: PairSets, logps: dict[str, np.ndarray]) -> None:
    """The reference file: one row per (split, pair) with the two sums (float64) and the answers' token counts,
    which training compares with its own to be sure it scores the same tokens."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {k: [] for k in ("split", "id", "chosen_logp", "rejected_logp", "chosen_tokens",
                                                  "rejected_tokens")}
    for split, rows in sets.splits.items():
        cols["split"] += [split] * len(rows.ids)
        cols["id"] += rows.ids
        cols["chosen_logp"] += logps[split][:, 0].tolist()
        cols["rejected_logp"] += logps[split][:, 1].tolist()
        cols["chosen_tokens"] += rows.tokens[:, 0].tolist()
        cols["rejected_tokens"] += rows.tokens[:, 1].tolist()
    pq.write_table(pa.table(cols), path, compression="zstd")


def reference_row_len(ref_dir: Path) -> int:
    """The row length the reference pass fitted the pairs to (its report.json): training must fit them alike."""
    report = ref_dir / "report.json"
    if not report.is_file():
        raise FileNotFoundError(f"prefer: {report} not found (run the prefer_ref stage first)")
    return int(json.loads(report.read_text())["row_len"])


def read_reference(ref_dir: Path, sets: PairSets) -> dict[str, np.ndarray]:
    """Per split [P, 2] float64 (chosen, rejected) in pair order; refuses a file made for other pairs or tokens."""
    import pyarrow.parquet as pq

    path = ref_dir / REF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"prefer: {path} not found (run the prefer_ref stage first)")
    table = pq.read_table(path).to_pydict()
    got = {(s, i): k for k, (s, i) in enumerate(zip(table["split"], table["id"]))}
    out = {}
    for split, rows in sets.splits.items():
        where = [got.get((split, i)) for i in rows.ids]
        if None in where or len(where) != sum(s == split for s in table["split"]):
            raise ValueError(f"prefer: {path} holds log-probs of other {split} pairs than prefer_data's: run "
                             "`dvc repro prefer_ref` (or python -m tasks prefer_ref) again")
        tokens = np.array([[table["chosen_tokens"][k], table["rejected_tokens"][k]] for k in where])
        if not np.array_equal(tokens.reshape(rows.tokens.shape), rows.tokens):
            raise ValueError(f"prefer: {path} scored other tokens than this run's {split} pairs (another tokenizer "
                             "or prefer_ref.row_len?): run prefer_ref again")
        out[split] = np.array([[table["chosen_logp"][k], table["rejected_logp"][k]] for k in where],
                              dtype=np.float64).reshape(-1, 2)
    return out
