"""Stage `prefer_ref`: the reference log-probs of every preference pair, computed once with the frozen SFT model.

DPO compares the policy's log-probs of each answer with the reference model's. The reference never changes while
tuning, so its numbers are computed here, once, and versioned as a DVC artifact: the `prefer` stage reads them and
never holds a second model (with LoRA the reference is the adapter switched off, i.e. these same numbers).
Changing the pairs or the SFT model re-runs this stage; changing only DPO's knobs (β, loss, steps) does not.

Inputs: data/sft/ (weights, config, tokenizer, chat template), data/prefer_data/{train,heldout}.jsonl. The pairs
are rendered, fitted and packed exactly as training does (tasks/train/inputs/pref_data.py `load_pair_sets`, the same
`prefer_ref.row_len` and seed). Outputs (data/prefer_ref/): `logprobs.parquet` (split, id, chosen_logp, rejected_logp
— float64 sums over each answer's tokens —, chosen_tokens, rejected_tokens) and `report.json` (the SFT model's
preference accuracy and answer log-probs per split, and the pass's cost: seconds, tokens/s).
The model is built whole in this process (as evaluate's and sft's comparisons are), on the GPU when one is seen.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from specs.prefer import PreferRefJob
from specs.results import StageResult
from tasks.core.files import atomic_path, write_json_atomic
from tasks.core.runner import StagePaths
from tasks.eval.generate import torch_threads
from specs.architecture import ModelConfig
from tasks.train.inputs.pref_data import REF_FILE, SPLITS, all_pair_logps, load_pair_sets, write_reference
from tasks.train.checkpointing.weights import load_weights, model_from_state, weight_files

log = logging.getLogger("forgeline.prefer_ref")


def run(job: PreferRefJob, paths: StagePaths) -> StageResult:
    sft, data = paths.input("sft"), paths.input("prefer_data")
    paths.out.mkdir(parents=True, exist_ok=True)
    if not job.enabled:
        write_json_atomic(paths.out / "report.json", {"enabled": False})
        return StageResult(stage="prefer_ref", counts={"enabled": False}, table=[{"enabled": False}],
                           summary="**prefer_ref**: preference tuning is off (`prefer.enabled: false`).")
    weight_files(sft)  # raises, naming the folder, when sft has not finished
    sets = load_pair_sets(sft, data, job.ref.row_len, paths.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    cfg = ModelConfig.from_dict({**sets.model, "dropout": 0.0})
    logps = {}
    with torch_threads(job.ref.cpu_threads), torch.no_grad():
        model = model_from_state(cfg, load_weights(sft), device=device)
        t_loaded = time.perf_counter()
        for split in SPLITS:
            logps[split] = all_pair_logps(model, sets.splits[split], job.ref.batch_rows, device)
    t_done = time.perf_counter()
    with atomic_path(paths.out / REF_FILE) as tmp:
        write_reference(tmp, sets, logps)
    tokens = sum(len(r.packed.rows) for r in sets.splits.values()) * (sets.row_len + 1)
    cost = {"load_s": round(t_loaded - t0, 3), "forward_s": round(t_done - t_loaded, 3),
            "row_tokens": tokens, "tokens_per_s": round(tokens / max(t_done - t_loaded, 1e-9), 1), "device": device}
    per_split = {s: split_report(logps[s], sets.splits[s].tokens, len(sets.splits[s].dropped)) for s in SPLITS}
    # timings vary between runs: the DVC-tracked report holds the counts, runs/ and the summary the seconds
    write_json_atomic(paths.out / "report.json", {"enabled": True, "row_len": sets.row_len, "splits": per_split})
    log.info("prefer_ref: %d pairs scored in %.1f s (%.0f tokens/s, %s)",
             sum(p["pairs"] for p in per_split.values()), cost["forward_s"], cost["tokens_per_s"], device)
    counts = {"pairs": {s: per_split[s]["pairs"] for s in SPLITS},
              "heldout_accuracy": per_split["heldout"]["accuracy"],
              "heldout_chosen_logp_per_token": per_split["heldout"]["chosen_logp_per_token"]}
    return StageResult(stage="prefer_ref", counts=counts, summary=_summary(per_split, cost),
                       table=[{"split": s, **r} for s, r in per_split.items()])


def split_report(logps: np.ndarray, tokens: np.ndarray, dropped: int) -> dict[str, float | int | None]:
    """The SFT model's own preference on a split: how often it gives the chosen answer the higher log-prob."""
    if not len(logps):
        return {"pairs": 0, "dropped": dropped, "accuracy": None, "chosen_logp_per_token": None}
    return {"pairs": int(len(logps)), "dropped": dropped, "answer_tokens": int(tokens.sum()),
            "accuracy": round(float(np.mean(logps[:, 0] > logps[:, 1])), 6),
            "chosen_logp_per_token": round(float(logps[:, 0].sum() / max(tokens[:, 0].sum(), 1)), 6),
            "rejected_logp_per_token": round(float(logps[:, 1].sum() / max(tokens[:, 1].sum(), 1)), 6)}


def _summary(per_split: dict, cost: dict) -> str:
    lines = [f"**prefer_ref**: the SFT model's log-probs of every answer, once ({cost['forward_s']} s of forward "
             f"passes on {cost['device']}, {cost['tokens_per_s']:,.0f} row tokens/s; loading {cost['load_s']} s).",
             "", "| split | pairs | SFT prefers chosen | chosen log-prob/token | rejected log-prob/token |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {s} | {r['pairs']} | {r['accuracy']} | {r['chosen_logp_per_token']} | "
              f"{r.get('rejected_logp_per_token')} |" for s, r in per_split.items()]
    return "\n".join(lines)
