"""The mix stage's decisions, made from per-document numbers only (hash keys, character and token counts).

Documents are rows of flat numpy arrays (one entry per document, in clean-shard order); no text and no token
array is needed here, so the plan for a corpus of N documents costs a few dozen bytes per document.

Every choice is an order of 8-byte blake2b hashes of (purpose, seed, document id, epoch) -- no RNG state, no
Python hash() -- so it depends only on the records, the spec and run.seed, never on shard layout or worker count.
Ordering by the 64-bit key refines ordering by `hash_unit` (the key / 2**64 as a float), which the stage used when
it held the corpus in memory: the outcome is the same unless two keys share a float (p ~ N² / 2**54).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

KEY_PERSON = b"forgeline-mix"


def hash_key(*parts: object) -> int:
    """A stable 64-bit integer from `parts` (same on every machine and Python run)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8, person=KEY_PERSON).digest()
    return int.from_bytes(digest, "big")


def hash_unit(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) from `parts`."""
    return hash_key(*parts) / 2**64


def hash_keys(ids: list[str], *parts: object, suffix: tuple = ()) -> np.ndarray:
    """uint64 `hash_key(*parts, id, *suffix)` for every id ([len(ids)])."""
    return np.fromiter((hash_key(*parts, i, *suffix) for i in ids), dtype=np.uint64, count=len(ids))


def as_unit(keys: np.ndarray) -> np.ndarray:
    """keys / 2**64 as float64: equal to `hash_unit` of the same parts (both round the key once to a double)."""
    return keys.astype(np.float64) / 2.0**64


def split_val(val_keys: np.ndarray, val_fraction: float, min_val_docs: int) -> np.ndarray:
    """Boolean [n]: which documents of one source go to val.

    val = keys below val_fraction, topped up to min_val_docs (never more than half the source) with the smallest
    keys. Thresholding (not ranking) keeps the split stable: adding documents never moves old ones; the top-up
    too only changes when a new document hashes lower.
    """
    in_val = as_unit(val_keys) < val_fraction
    floor = min(min_val_docs, len(val_keys) // 2)
    if int(in_val.sum()) < floor:
        in_val[np.argsort(val_keys, kind="stable")[:floor]] = True
    return in_val


def tokenizer_quota(chars: np.ndarray, keys: np.ndarray, quota: float) -> tuple[np.ndarray, np.ndarray]:
    """Which documents of one source feed the tokenizer and how many characters of each: documents in key order,
    each taking min(its length, what is left of `quota`), until the quota is spent. Returns (positions into
    `chars`, character limits), in sample order."""
    taken, limits = [], []
    for pos in np.argsort(keys, kind="stable"):
        if quota <= 0:
            break
        n = int(min(int(chars[pos]), quota))
        taken.append(int(pos))
        limits.append(n)
        quota -= n
    return np.asarray(taken, dtype=np.int64), np.asarray(limits, dtype=np.int64)


def plan_tokens(shares: dict[str, float], avail: dict[str, int], token_budget: int | None, max_repetition: float,
                on_shortfall: str) -> tuple[dict[str, float], dict[str, float], int]:
    """Nominal target and planned tokens per source, and the budget used.

    The plan never exceeds max_repetition x available tokens. With on_shortfall=redistribute the tokens a
    capped source cannot give go to the uncapped ones by weight (water-filling, repeated as they cap too).
    """
    limit = {s: max_repetition * avail[s] for s in shares}
    budget = token_budget
    if budget is None:  # the largest mix at these weights that uses no source more than once
        budget = round(min(avail[s] / w for s, w in shares.items() if w > 0))
    targets = {s: w * budget for s, w in shares.items()}
    if on_shortfall == "shrink":
        return targets, {s: min(targets[s], limit[s]) for s in shares}, budget
    planned = {s: 0.0 for s in shares}
    active, remaining = {s for s, w in shares.items() if w > 0}, float(budget)
    while active:
        wsum = sum(shares[s] for s in active)
        over = sorted(s for s in active if remaining * shares[s] / wsum > limit[s])
        if not over:
            planned.update({s: remaining * shares[s] / wsum for s in active})
            break
        for s in over:
            planned[s], remaining = limit[s], remaining - limit[s]
            active.discard(s)
    return targets, planned, budget


def take_documents(lengths: np.ndarray, epoch_keys: Callable[[int], np.ndarray], target: float, cap: float,
                   need_order: bool = True) -> list[tuple[np.ndarray, int]]:
    """Whole documents of one source summing as close to `target` tokens as possible without exceeding `cap`.

    Epoch e walks the documents in the order of `epoch_keys(e)` (a fresh hash order, so a partial epoch is a
    random subset) and stops at the document boundary nearest the target: before the first document whose
    tokens would break the cap or land farther from the target than stopping. Returns (positions into
    `lengths` in walk order, epoch) per epoch. `need_order=False`: the caller reorders the picks anyway, so an
    epoch that is certain to be taken whole skips hashing its order.
    """
    taken: list[tuple[np.ndarray, int]] = []
    total, epoch, n = 0, 0, len(lengths)
    avail = int(lengths.sum())
    while total < target and n:
        whole = total + avail <= cap and total + avail - int(lengths.min()) / 2 < target
        if whole and not need_order:  # no document of this epoch can trigger a stop, whatever the order
            taken.append((np.arange(n, dtype=np.int64), epoch))
            total += avail
            epoch += 1
            continue
        order = np.argsort(epoch_keys(epoch), kind="stable")
        steps = lengths[order]
        before = total + np.concatenate([[0], np.cumsum(steps)[:-1]])  # [n] tokens taken before each document
        stop = (before + steps > cap) | (before + steps / 2 >= target)
        if stop.any():
            k = int(np.argmax(stop))
            taken.append((order[:k], epoch))
            return taken
        taken.append((order, epoch))
        total += avail
        epoch += 1
    return taken
