"""Stage `sft` end to end on a real (tiny) pretrain output: outputs and the held-out loss falling, byte-identical
rerun, kill-and-resume equal to an uninterrupted run, the review gate's rejection, and two ZeRO-2 ranks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import kill_point, seed_note
from tests.helpers.killed import run_killed
from tests.helpers.sft import conversations, decide, run_sft, write_jsonl
from tasks.train.checkpointing.weights import load_weights

OUTPUTS = ("model.safetensors", "metrics.jsonl", "report.json", "comparisons.jsonl", "spotcheck.jsonl", "tokenizer.json",
           "config.json")
@pytest.fixture(scope="module")
def pretrained(pretrained_run, tmp_path_factory) -> Path:
    """A root with data/mix, data/pretrain (6 tiny steps), data/instruct and an approving review: a copy of the
    session's pretrain run (tests/conftest.py `pretrained_run`, test_pretrain's reference), which stays as it was."""
    root = tmp_path_factory.mktemp("sft")
    shutil.copytree(pretrained_run[0], root, dirs_exist_ok=True)
    write_jsonl(root / "data" / "instruct" / "train.jsonl", conversations(40))
    write_jsonl(root / "data" / "instruct" / "heldout.jsonl", conversations(6, offset=100))
    decide(root, "approve")
    return root


def copy_inputs(src: Path, dest: Path) -> Path:
    for name in ("mix", "pretrain", "instruct", "review"):
        shutil.copytree(src / "data" / name, dest / "data" / name)
    return dest


def outputs(root: Path) -> dict[str, bytes]:
    return {n: (root / "data" / "sft" / n).read_bytes() for n in OUTPUTS}


@pytest.fixture(scope="module")
def reference(pretrained, tmp_path_factory):
    root = copy_inputs(pretrained, tmp_path_factory.mktemp("sft-ref"))
    result = run_sft(root)
    return root, outputs(root), result


def test_outputs_loss_falls_and_rerun_is_byte_identical(reference, pretrained, tmp_path):
    root, ref, result = reference
    report = json.loads(ref["report.json"])
    assert report["heldout_loss_after"] < report["heldout_loss_before"]
    assert result.counts["train_rows"] > 0 and result.counts["train_loss_tokens"] > 0
    comparisons = [json.loads(x) for x in ref["comparisons.jsonl"].decode().splitlines()]
    assert [c["id"] for c in comparisons] == ["c100", "c101", "c102"]
    assert all({"prompt", "reference", "pretrained", "finetuned"} <= c.keys() for c in comparisons)
    items = [json.loads(x) for x in ref["spotcheck.jsonl"].decode().splitlines()]
    assert items and all(i["kind"] == "generation" and i["id"].split(":", 1)[1] in {"c100", "c101", "c102"}
                         for i in items)
    tok = json.loads(ref["tokenizer.json"])
    assert {"<|user|>", "<|assistant|>", "<|end|>"} <= {t["content"] for t in tok["added_tokens"]}
    assert "<|assistant|>" in (root / "data" / "sft" / "chat_template.jinja").read_text()
    assert "| prompt | pretrained | finetuned |" in result.summary
    other = copy_inputs(pretrained, tmp_path / "other")
    run_sft(other)
    assert outputs(other) == ref


def kill_cases() -> list[tuple[str, str | None]]:
    """(fault, checkpoint the re-run resumes from) at points drawn from the session's fault seed. SFT saves
    step 0, then every 2 of 6 steps, each before the step's fault point; a tag killed mid-write (no manifest)
    is skipped, so the re-run resumes from the one before it (none before step 0's)."""
    step = kill_point("sft-step", 1, 6)
    write = kill_point("sft-checkpoint-write", 1, 4)  # the n-th checkpoint: step 0, 2, 4, 6
    return [(f"sft.step_done={step}", f"step{2 * (step // 2):06d}"),
            (f"sft.checkpoint_write={write}", f"step{2 * (write - 2):06d}" if write > 1 else None)]


@pytest.mark.parametrize("fault, resumes_from", kill_cases(), ids=["mid-step", "mid-checkpoint-write"])
def test_killed_sft_resumes_to_the_same_end(reference, pretrained, tmp_path, fault, resumes_from):
    _, ref, _ = reference
    root = copy_inputs(pretrained, tmp_path / "p")
    code, out = run_killed(run_sft, root, fault=fault, timeout=300)
    assert code == -9, (fault, seed_note(), out[-2000:])
    result = run_sft(root)
    if resumes_from is None:
        assert "resumed from" not in result.summary, (fault, seed_note())
    else:
        assert f"resumed from checkpoint {resumes_from}" in result.summary, (fault, seed_note(), result.summary)
    assert outputs(root) == ref, (fault, seed_note())


def test_rejected_review_stops_sft(pretrained, tmp_path):
    root = copy_inputs(pretrained, tmp_path / "p")
    decide(root, "reject")
    with pytest.raises(ValueError, match="rejected the pretrained model.*answers are made up"):
        run_sft(root)
    assert not (root / "checkpoints" / "sft").exists()


def test_malformed_decision_is_refused_by_name(pretrained, tmp_path):
    """A hand-edited decision.json without the fields the gate writes is refused, not read as a rejection."""
    root = copy_inputs(pretrained, tmp_path / "p")
    (root / "data" / "review" / "decision.json").write_text(json.dumps({"decision": "approve"}))
    with pytest.raises(ValueError, match=r"(?s)decision.json is not a valid review decision.*reviewer"):
        run_sft(root)
    assert not (root / "checkpoints" / "sft").exists()


def test_two_zero2_ranks_train(pretrained, tmp_path):
    root = copy_inputs(pretrained, tmp_path / "p")
    run_sft(root, dp=2, zero_stage=2, micro_batch_size=2, steps=4)
    report = json.loads((root / "data" / "sft" / "report.json").read_text())
    assert report["heldout_loss_after"] < report["heldout_loss_before"]
    state = load_weights(root / "data" / "sft")
    assert all(torch.isfinite(t).all() for t in state.values())


LORA_ALL = {"kind": "lora", "r": 4, "alpha": 8.0, "targets": ["q", "k", "v", "o", "gate", "up", "down"]}


@pytest.mark.parametrize("tp2", [{}, {"sequence_parallel": True}, {"sequence_parallel": True, "adapter": LORA_ALL}],
                         ids=["tp2", "tp2-sp", "tp2-sp-lora"])
def test_tensor_parallel_sft_equals_tp1(pretrained, tmp_path, tp2):
    """tp = 2 (starting from the pretrained weights sliced per rank) follows tp = 1 step for step (dropout off:
    attention dropout draws per-rank masks over a different head split, so only dropout-free runs can match);
    so does it with `sft.sequence_parallel` (T/2 tokens per rank outside the TP regions), and with LoRA on every
    linear there: the column-parallel targets are not called as modules under sequence parallelism, so their
    update must be added by the gathered projections (a missed one stays B = 0 and its run diverges)."""
    adapter = tp2.get("adapter", {})
    roots = [copy_inputs(pretrained, tmp_path / f"tp{tp}") for tp in (1, 2)]
    for root, extra in zip(roots, ({"adapter": adapter} if adapter else {}, {"tp": 2, **tp2})):
        run_sft(root, steps=3, eval_every=3, dropout=0.0, **extra)
    rows = [[json.loads(x) for x in (r / "data" / "sft" / "metrics.jsonl").read_text().splitlines()] for r in roots]
    losses = [[(r["loss"], r["grad_norm"]) for r in rs if r["kind"] == "train"] for rs in rows]
    assert len(losses[0]) == 3
    for (l1, g1), (l2, g2) in zip(*losses):
        assert l1 == pytest.approx(l2, abs=1e-4) and g1 == pytest.approx(g2, rel=1e-4)
    folders = [""] + (["adapter"] if adapter else [])
    for folder in folders:
        a, b = (load_weights(r / "data" / "sft" / folder) for r in roots)
        assert set(a) == set(b)
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-4, msg=k)
    if adapter:  # A and B of 7 linears in 2 layers, all trained (B off zero): the equality above is not vacuous
        lora = load_weights(roots[1] / "data" / "sft" / "adapter")
        assert len(lora) == 2 * 7 * 2 and all(float(t.abs().sum()) > 0 for k, t in lora.items() if k.endswith(".B"))


def test_tensor_parallel_peers_stay_identical_with_dropout(pretrained, tmp_path):
    """With dropout on (the default), TP peers draw the same masks on the activations they hold replicated: the
    end-of-run check that their replicated parameters are equal passes (it raises when they diverge)."""
    root = copy_inputs(pretrained, tmp_path / "p")
    run_sft(root, tp=2, steps=3, eval_every=3)
    report = json.loads((root / "data" / "sft" / "report.json").read_text())
    assert report["heldout_loss_after"] < report["heldout_loss_before"]


def test_zero_steps_keeps_the_pretrained_weights(pretrained, tmp_path):
    root = copy_inputs(pretrained, tmp_path / "p")
    run_sft(root, steps=0)
    report = json.loads((root / "data" / "sft" / "report.json").read_text())
    assert report["heldout_loss_after"] == report["heldout_loss_before"]
    ft, pre = load_weights(root / "data" / "sft"), load_weights(root / "data" / "pretrain")
    # SFT's tokenizer claims reserved rows (re-initialised at the mean): every other tensor is untouched
    assert all(torch.equal(ft[k], pre[k]) for k in pre if k != "layers.0.weight")


def test_zero3_with_tensor_parallelism_is_refused(pretrained, tmp_path):
    with pytest.raises(ValueError, match=r"sft.zero_stage: 3 with sft.tp = 2"):
        run_sft(copy_inputs(pretrained, tmp_path / "p"), tp=2, zero_stage=3)


@pytest.mark.parametrize("layout", [{"dp": 2, "zero_stage": 3}, {"tp": 2, "zero_stage": 1}], ids=["dp2-zero3", "tp2"])
def test_lora_trains_only_the_adapters_and_merges_them(pretrained, tmp_path, layout):
    """LoRA on 2 ranks: the base weights stay the pretrained ones in the adapter's frame (merged − ΔW), only the
    adapters hold optimizer state, the saved adapter is not empty (ZeRO-3 partitions it), and the merged model is
    base + scale·B·A exactly as written."""
    root = copy_inputs(pretrained, tmp_path / "p")
    adapter = {"kind": "lora", "r": 4, "alpha": 8.0, "targets": ["q", "v", "down"]}
    run_sft(root, steps=3, eval_every=3, micro_batch_size=2, dropout=0.0, adapter=adapter, **layout)
    out = root / "data" / "sft"
    merged, lora = load_weights(out), load_weights(out / "adapter")
    start = load_weights(root / "data" / "pretrain")
    assert sorted({k.rsplit(".lora.", 1)[0] for k in lora}) == [
        f"layers.{i}.{m}" for i in (1, 2) for m in ("attn.wq", "attn.wv", "mlp.w2")]
    assert all(float(t.abs().sum()) > 0 for k, t in lora.items() if k.endswith(".B"))  # trained, not empty
    for key, w in merged.items():
        linear = key[: -len(".weight")]
        if f"{linear}.lora.A" in lora:
            delta = (lora[f"{linear}.lora.B"].double() @ lora[f"{linear}.lora.A"].double() * 2.0).float()
            torch.testing.assert_close(w - delta, start[key], rtol=0, atol=1e-5, msg=key)
        elif key != "layers.0.weight":  # the embedding's claimed reserved rows are re-initialised by SFT
            assert torch.equal(w, start[key]), f"{key} changed but is not adapted"
    assert json.loads((out / "adapter" / "adapter.json").read_text())["r"] == 4


def test_lora_export_loads_with_peft_and_equals_the_merged_model(pretrained, tmp_path):
    """ZeRO-3 on 2 ranks, then export: PEFT's own loader puts the adapter on the exported base and gives the
    merged export's logits; the adapter files are PEFT's, the base differs from the merged model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from specs.export import ExportSpec
    from tasks import export
    from tasks.core.runner import StagePaths
    from tasks.eval.generate import torch_threads

    root = copy_inputs(pretrained, tmp_path / "p")
    run_sft(root, steps=3, micro_batch_size=2, dp=2, zero_stage=3, adapter={"kind": "lora", "r": 4, "alpha": 16.0})
    with torch_threads(1):
        report = export.run(ExportSpec(), StagePaths(root=root, stage="export", seed=11)).counts
    out = root / "data" / "export"
    assert {p.name for p in (out / "adapter").iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
    cfg = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 16.0 and "q_proj" in cfg["target_modules"]
    load = lambda p: AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=torch.float32).eval()  # noqa: E731
    merged, base = load(out / "hf"), load(out / "base")
    adapted = PeftModel.from_pretrained(base, out / "adapter").eval()
    ids = torch.randint(0, merged.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert float((adapted(input_ids=ids).logits - merged(input_ids=ids).logits).abs().max()) < 1e-4
        assert float((load(out / "base")(input_ids=ids).logits - merged(input_ids=ids).logits).abs().max()) > 1e-3
    assert report["param_count"] > 0


def test_accumulation_pre_pass_skips_a_nan_step_on_two_ranks(pretrained, tmp_path, monkeypatch):
    """SFT with 2 micro-batches on each of 2 ZeRO-2 ranks: the guard's forward pre-pass reduces each micro-batch's
    per-token loss over the ranks and skips step 3 (NaN) before any backward; the other steps train."""
    monkeypatch.setenv("FORGELINE_INJECT_LOSS", "3:nan")
    root = copy_inputs(pretrained, tmp_path / "p")
    run_sft(root, dp=2, zero_stage=2, micro_batch_size=2, grad_accum=2, steps=4)
    sft_dir = root / "data" / "sft"
    incidents = [json.loads(line) for line in (sft_dir / "incidents.jsonl").read_text().splitlines()]
    assert [(i["step"], i["action"], i["micro_losses"]) for i in incidents] == [(3, "skip", ["nan", "nan"])]
    rows = [json.loads(line) for line in (sft_dir / "metrics.jsonl").read_text().splitlines()]
    norms = {r["step"]: r["grad_norm"] for r in rows if r["kind"] == "train"}
    assert norms[3] is None and all(norms[s] > 0 for s in (1, 2, 4))
    assert all(torch.isfinite(t).all() for t in load_weights(sft_dir).values())
