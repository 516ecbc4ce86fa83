"""Parity with TRL (a test-only dependency): on one tiny model and one batch, forgeline's DPO loss on packed rows
and its gradients equal TRL's `DPOTrainer.compute_loss` (trl 1.16: the loss is computed inside the trainer, so the
trainer itself is built, on CPU, with the policy and a reference model exported to Hugging Face's format).

TRL tokenizes the conversations with the exported chat template and pads chosen and rejected batches; forgeline
gets exactly TRL's token sequences and completion masks, packs several pairs per row (block-diagonal attention,
positions per sample) and scores them with its own model (tasks/train/modeling/model.py) on the same weights. The reference
log-probs come from the reference model scored the same way (what prefer_ref writes). Note the one difference of
*data* between the two, outside this test: TRL's completion also holds the turn separator after `<|end|>`, which
forgeline's SFT mask (and so its DPO mask) leaves out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tasks.data.mixing.tokenizer import save_tokenizer, train_tokenizer
from tasks.train.inputs.chat import extend_tokenizer, jinja_template, vocab_size
from specs.architecture import ModelConfig
from tasks.train.objectives.dpo_loss import preference_losses
from tasks.train.hf.hf_export import export_hf, to_hf_state_dict
from tasks.train.modeling.model import Transformer
from tasks.train.inputs.pref_data import all_pair_logps, pack_pairs, pair_logps
from tests.helpers.export import TEXTS, trained_like_state

trl = pytest.importorskip("trl", reason="trl is a test-only dependency (pip install -e '.[test]')")
TOL = 1e-5
BETA = 0.1


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(cfg, forgeline states {policy, ref}, folder): a tiny model and a reference near it, both exported."""
    base = tmp_path_factory.mktemp("trl")
    tok, _ = extend_tokenizer(train_tokenizer(TEXTS, vocab_size=300, min_frequency=2,
                                              special_tokens=["<|endoftext|>", "<|pad|>"]))
    save_tokenizer(tok, base / "tokenizer.json")
    cfg = ModelConfig(vocab_size=vocab_size(tok), d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=64,
                      ffn_hidden=48)
    policy = trained_like_state(cfg, seed=0)
    gen = torch.Generator().manual_seed(1)  # a reference near the policy: margins of a few nats, not saturated
    states = {"policy": policy, "ref": {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in policy.items()}}
    for name, state in states.items():
        export_hf(state, cfg, base / "tokenizer.json", base / name, card={"name": name},
                  chat_template=jinja_template(), special_tokens={"eos_token": "<|end|>", "pad_token": "<|pad|>"})
    return cfg, states, base


def trl_loss(base: Path, loss_type: str) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(TRL's loss, the policy's gradients by HF name, the collated batch) on four conversational pairs."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = AutoModelForCausalLM.from_pretrained(base / "policy", dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(base / "ref", dtype=torch.float32)
    rows = [{"prompt": [{"role": "user", "content": f"What does the mill grind {i}?"}],
             "chosen": [{"role": "assistant", "content": "Grain, by the river. " * (i % 3 + 1)}],
             "rejected": [{"role": "assistant", "content": f"def add(a, b): return {i}"}]} for i in range(4)]
    args = trl.DPOConfig(output_dir=str(base / f"out-{loss_type}"), beta=BETA, loss_type=[loss_type], report_to=[],
                         per_device_train_batch_size=4, use_cpu=True, precompute_ref_log_probs=False,
                         disable_dropout=True, bf16=False)  # fp32 (TRL defaults to bf16 autocast)
    trainer = trl.DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=AutoTokenizer.from_pretrained(base / "policy"))
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(rows))])
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, batch


def forgeline_loss(cfg: ModelConfig, states: dict, batch: dict, loss_type: str
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """forgeline's loss on TRL's sequences (packed several pairs per row) and its gradients by HF name."""
    ids, attn, comp = (batch[k] for k in ("input_ids", "attention_mask", "completion_mask"))
    half = ids.size(0) // 2  # TRL's batch: the chosen sequences, then the rejected ones
    sample = lambda i: (ids[i][attn[i] == 1].tolist(), comp[i][attn[i] == 1].tolist())  # noqa: E731
    pairs = [(sample(i), sample(half + i)) for i in range(half)]
    rows = pack_pairs(pairs, [str(i) for i in range(half)], 200, pad=1, seed=0)
    models = {}
    for name, state in states.items():
        models[name] = Transformer(cfg, seed=0)
        models[name].load_state_dict(state)
    with torch.no_grad():
        ref = torch.from_numpy(all_pair_logps(models["ref"].eval(), rows, 4)).float()
    logps, order = pair_logps(models["policy"], rows, range(len(rows.packed.rows)))
    n = torch.from_numpy(rows.tokens[order]).float()
    loss = preference_losses(logps[:, 0], logps[:, 1], ref[order, 0], ref[order, 1], BETA, loss_type,
                             chosen_tokens=n[:, 0], rejected_tokens=n[:, 1]).losses.sum() / half
    loss.backward()
    grads = {k: p.grad.detach() for k, p in models["policy"].named_parameters()}
    return loss.detach(), to_hf_state_dict(grads, cfg), max(len(r) // 2 for r in rows.packed.rows)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_loss_and_gradients_equal_trls(exported, loss_type):
    cfg, states, base = exported
    want, want_grads, batch = trl_loss(base, loss_type)
    got, got_grads, pairs_per_row = forgeline_loss(cfg, states, batch, loss_type)
    assert pairs_per_row >= 2, "the parity must hold on packed rows, not one pair per row"
    # relative to the loss: IPO's is ~29 here, where fp32 sums in another order differ by ~1e-6 of it (2.9e-5 on
    # an Intel Xeon with AVX-512, under 1e-5 elsewhere); sigmoid's ~0.7 keeps the absolute 1e-5
    assert abs(float(got) - float(want)) < TOL * max(1.0, abs(float(want))), (float(got), float(want))
    assert want_grads.keys() == got_grads.keys()
    worst = max(float((got_grads[k] - want_grads[k]).abs().max()) for k in want_grads)
    scale = max(float(g.abs().max()) for g in want_grads.values())
    assert worst < TOL * max(1.0, scale), (worst, scale)          # (likewise relative: IPO's reach ~16)
    assert scale > 1e-3  # the gradients compared are not all ~0
    print(f"{loss_type}: loss {float(want):.6f} (TRL) vs {float(got):.6f}, max |Δgrad| {worst:.2e} "
          f"of max |grad| {scale:.3g}")


def test_reference_margins_are_not_trivial(exported):
    """The comparison above means something only if the reference differs from the policy."""
    cfg, states, base = exported
    diff = max(float((states["policy"][k] - states["ref"][k]).abs().max()) for k in states["policy"])
    assert diff > 0.01 and np.isfinite(diff)
