"""Phi-3 checkpoints (`model_type: phi3`: Phi-3-mini/medium-4k, Phi-4) in and out: transformers' own tiny
Phi3ForCausalLM, saved with `save_pretrained`, imports with its logits (q/k/v and gate/up read as row ranges of the
fused `qkv_proj` / `gate_up_proj`), a tensor-parallel rank reads only its share of those rows, what Phi3Config
reads and forgeline cannot compute is refused naming the file and the field or tensor, export writes the fused
tensors back (bit for bit) and a LoRA adapter whose fused-module pairs PEFT applies with the merged model's
logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from specs.architecture import ModelConfig, param_count
from tasks.train.checkpointing.init_weights import HFSource
from tasks.train.hf.hf_export import ExportMismatch, check_hf, export_hf, hf_refs, to_hf_state_dict
from tasks.train.hf.hf_import import HFImportError, hf_model_config, load_hf_state
from tasks.train.modeling.model import Transformer
from tests.test_hf_import import SHAPE, T, logits_gap, save_hf

PARTS = ("attn.wq", "attn.wk", "attn.wv", "mlp.w1", "mlp.w3")


def phi3(**changes):
    from transformers import Phi3Config

    return Phi3Config(**{**SHAPE, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2, **changes})


VARIANTS = {"gqa, window, untied": dict(sliding_window=5), "mha, tied": dict(num_key_value_heads=4,
                                                                              tie_word_embeddings=True),
            "gqa, no window": {}, "mha, window, tied": dict(num_key_value_heads=None, sliding_window=7,
                                                           tie_word_embeddings=True)}


@pytest.fixture(scope="module")
def windowed(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    folder = tmp_path_factory.mktemp("phi3")
    return folder, save_hf(phi3(sliding_window=5), folder)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_phi3_imports_with_transformers_logits(name, tmp_path):
    hf = save_hf(phi3(**VARIANTS[name]), tmp_path)
    assert "model.layers.0.self_attn.qkv_proj.weight" in load_file(tmp_path / "model.safetensors")  # really fused
    cfg = hf_model_config(tmp_path)
    c = hf.config
    assert (cfg.hf_model_type, cfg.n_kv_heads, cfg.sliding_window, cfg.tie_embeddings, cfg.norm_eps) == (
        "phi3", c.num_key_value_heads, c.sliding_window, c.tie_word_embeddings, 1e-5)
    assert param_count(cfg) == sum(p.numel() for p in hf.parameters())
    assert logits_gap(tmp_path, hf) < 2e-5  # the plain model and the fused training one, both via the fused files


def test_the_window_and_the_split_order_matter(windowed):
    """Without the window, or with k and v swapped in the split, the logits differ: the parity is not vacuous."""
    folder, hf = windowed
    cfg = hf_model_config(folder)
    state = load_hf_state(folder, cfg)
    swapped = {**state, **{f"layers.{i}.attn.{a}.weight": state[f"layers.{i}.attn.{b}.weight"]
                           for i in (1, 2) for a, b in (("wk", "wv"), ("wv", "wk"))}}
    ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(2))
    for model_cfg, weights in ((ModelConfig.from_dict({**cfg.to_dict(), "sliding_window": None}), state),
                               (cfg, swapped)):
        model = Transformer(model_cfg, 0).eval()
        model.load_state_dict(weights)
        with torch.no_grad():
            assert float((model(ids) - hf(ids).logits).abs().max()) > 1e-3


def test_a_tensor_parallel_rank_reads_only_its_rows_of_the_fused_tensor(windowed, monkeypatch):
    import safetensors

    folder, _ = windowed
    cfg = hf_model_config(folder)
    full, refs = load_hf_state(folder, cfg), hf_refs(cfg)
    source = HFSource(folder, cfg)
    reads: list[tuple[str, object]] = []
    real_open = safetensors.safe_open

    class Spy:  # records the index each `get_slice(...)[...]` reads with
        def __init__(self, *args, **kwargs):
            self.inner = real_open(*args, **kwargs)

        def __enter__(self):
            self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def get_slice(self, name):
            piece = self.inner.get_slice(name)
            spy = type("Piece", (), {"get_shape": lambda _s: piece.get_shape(),
                                     "__getitem__": lambda _s, key: reads.append((name, key)) or piece[key]})
            return spy()

    monkeypatch.setattr(safetensors, "safe_open", Spy)
    for layer in (1, 2):
        for part in PARTS:
            key = f"layers.{layer}.{part}.weight"
            ref = refs[key]
            half = (ref.stop - ref.start) // 2
            for rank in range(2):
                reads.clear()
                got = source.read(key, 0, rank, 2)
                assert torch.equal(got, full[key].chunk(2, 0)[rank]), (key, rank)
                (name, index), = reads
                assert name == ref.name and name.endswith(("qkv_proj.weight", "gate_up_proj.weight"))
                lo = ref.start + rank * half
                assert index == slice(lo, lo + half), (key, rank, index)  # its rows only, never the whole tensor
            assert torch.equal(source.read(key, None, 0, 1), full[key])
        for key in (f"layers.{layer}.attn.wo.weight", f"layers.{layer}.mlp.w2.weight"):  # unfused, by columns
            assert torch.equal(source.read(key, 1, 1, 2), full[key].chunk(2, 1)[1])


REFUSED = {
    "longrope": ({"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}},
                 "rope_scaling's rope type `longrope` is longrope for phi3"),
    "su": ({"rope_scaling": {"type": "su", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}},
           "rope_scaling's rope type `su` is longrope for phi3"),
    "yarn (Phi3Config's longrope)": ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}},
                                     "rope_parameters's rope type `yarn` is longrope for phi3"),
    "linear": ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "`linear` is not supported for phi3"),
    "partial rotary": ({"partial_rotary_factor": 0.75}, "partial_rotary_factor 0.75 is not supported"),
    "resid_pdrop": ({"resid_pdrop": 0.1}, "resid_pdrop 0.1 is not supported"),
    "attention_dropout": ({"attention_dropout": 0.05}, "attention_dropout 0.05 is not supported"),
    "dropout as a string": ({"resid_pdrop": "0"}, "`resid_pdrop` must be a number"),
    "gelu": ({"hidden_act": "gelu_new"}, "hidden_act `gelu_new` is not supported"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_phi3_computes_and_forgeline_cannot_is_refused(name, tmp_path):
    changes, message = REFUSED[name]
    raw = {"model_type": "phi3", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
           "num_hidden_layers": 2, "num_attention_heads": 4, **changes}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(HFImportError, match=message) as err:
        hf_model_config(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value)


def test_a_missing_or_misshapen_fused_tensor_is_refused_naming_it(windowed, tmp_path):
    folder, _ = windowed
    cfg = hf_model_config(folder)
    tensors = load_file(folder / "model.safetensors")
    qkv, gate_up = "model.layers.1.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"
    for name, broken, message in (
            (qkv, None, f"weight `{qkv}` is missing"),
            (qkv, tensors[qkv][:-8], rf"`{qkv}` has shape \(56, 32\), config.json implies \(64, 32\) "
                                     r"\(rows of wq, wk, wv stacked\)"),
            (gate_up, tensors[gate_up][:, :-1], rf"`{gate_up}` has shape \(80, 31\), config.json implies \(80, 32\)")):
        case = tmp_path / f"{name.rsplit('.', 2)[-2]}-{broken is None}"
        case.mkdir()
        (case / "config.json").write_bytes((folder / "config.json").read_bytes())
        kept = {k: v for k, v in tensors.items() if k != name}
        save_file(kept if broken is None else {**kept, name: broken.contiguous()}, case / "model.safetensors")
        with pytest.raises(HFImportError, match=message):
            load_hf_state(case, cfg)
        if broken is not None:  # the tensor-parallel path checks the fused shape before reading any rows
            with pytest.raises(HFImportError, match=message.split(" config.json")[0]):
                HFSource(case, cfg).read("layers.2.attn.wq.weight" if name == qkv else "layers.1.mlp.w3.weight",
                                         0, 1, 2)
        else:
            with pytest.raises(HFImportError, match=message):
                HFSource(case, cfg)


def test_export_writes_the_fused_tensors_back_and_transformers_gives_the_logits(windowed, tmp_path):
    from tokenizers import Tokenizer, models

    folder, _ = windowed
    cfg = hf_model_config(folder)
    state = load_hf_state(folder, cfg)
    written = to_hf_state_dict(state, cfg)
    original = load_file(folder / "model.safetensors")
    assert set(written) == set(original) and all(torch.equal(written[k], original[k]) for k in original)
    Tokenizer(models.WordLevel({"a": 0, "<|endoftext|>": 1}, unk_token="a")).save(str(tmp_path / "tokenizer.json"))
    summary = export_hf(state, cfg, tmp_path / "tokenizer.json", tmp_path / "out", card={},
                        special_tokens={"eos_token": "<|endoftext|>"})
    config = summary["config"]
    assert (config["architectures"], config["model_type"], config["sliding_window"]) == (["Phi3ForCausalLM"],
                                                                                         "phi3", 5)
    assert check_hf(tmp_path / "out", state, cfg, seq=T, tol=2e-5) < 2e-5
    assert hf_model_config(tmp_path / "out") == cfg  # and forgeline reads its own export back as it was


@pytest.mark.parametrize("targets", [["down", "gate", "k", "o", "q", "up", "v"], ["q", "up", "v"]])
def test_a_lora_adapter_on_phi3_loads_in_peft_with_the_merged_logits(windowed, tmp_path, targets):
    """forgeline's per-part pairs become one pair per fused module (k untargeted: zero rows in B); PEFT's base +
    adapter gives the merged export's logits."""
    from tokenizers import Tokenizer, models

    from tasks.train.hf.peft_export import check_adapter, write_adapter
    from tasks.train.modeling.lora import TARGETS

    folder, _ = windowed
    cfg = hf_model_config(folder)
    base = load_hf_state(folder, cfg)
    r, alpha, gen = 2, 6.0, torch.Generator().manual_seed(4)
    lora: dict[str, torch.Tensor] = {}
    for layer in (1, 2):
        for t in targets:
            out_dim, in_dim = base[f"layers.{layer}.{TARGETS[t]}.weight"].shape
            lora[f"layers.{layer}.{TARGETS[t]}.lora.A"] = torch.randn(r, in_dim, generator=gen) * 0.3
            lora[f"layers.{layer}.{TARGETS[t]}.lora.B"] = torch.randn(out_dim, r, generator=gen) * 0.3
    merged = dict(base)
    for key in lora:
        if key.endswith(".A"):
            linear = key[: -len(".lora.A")]
            merged[f"{linear}.weight"] = base[f"{linear}.weight"] + alpha / r * lora[f"{linear}.lora.B"] @ lora[key]
    Tokenizer(models.WordLevel({"a": 0, "<|endoftext|>": 1}, unk_token="a")).save(str(tmp_path / "tokenizer.json"))
    for name, weights in (("base", base), ("merged", merged)):
        export_hf(weights, cfg, tmp_path / "tokenizer.json", tmp_path / name, card={},
                  special_tokens={"eos_token": "<|endoftext|>"})
    write_adapter(tmp_path / "base", lora, {"r": r, "alpha": alpha, "dropout": 0.0, "targets": targets}, cfg,
                  tmp_path / "adapter")
    written = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert "qkv_proj" in written["target_modules"] and "q_proj" not in written["target_modules"]
    assert written["rank_pattern"]["qkv_proj"] == r * len({"q", "k", "v"} & set(targets))
    assert check_adapter(tmp_path / "base", tmp_path / "adapter", tmp_path / "merged", tol=1e-4, seq=T) < 1e-4
    with pytest.raises(ExportMismatch):  # the adapter changes the logits: its parity is not vacuous
        check_hf(tmp_path / "base", merged, cfg, seq=T, tol=1e-3)


def test_the_tiny_checkpoint_cli_writes_a_phi3_folder(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from tokenizers import Tokenizer

    from tasks.__main__ import main

    assert main(["--root", str(tmp_path), "tiny-checkpoint", "ckpt", "--family", "phi3"]) == 0
    folder = tmp_path / "ckpt"
    cfg = hf_model_config(folder)
    assert (cfg.hf_model_type, cfg.n_kv_heads < cfg.n_heads, cfg.sliding_window) == ("phi3", True, 48)
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    assert type(hf).__name__ == "Phi3ForCausalLM" and logits_gap(folder, hf) < 2e-5
    tok, raw = AutoTokenizer.from_pretrained(folder), Tokenizer.from_file(str(folder / "tokenizer.json"))
    for text in ("<|im_start|>user\n  And then?<|im_end|>\n", "x\n\n   y\t z"):
        assert tok(text, add_special_tokens=False)["input_ids"] == raw.encode(text).ids


@pytest.mark.slow
def test_phi3_through_the_stages_at_tp2_with_a_lora_export(tmp_path):
    """mix → pretrain (steps 0 on 2 TP ranks: each rank reads its rows of the fused tensors; the written weights
    are exactly the checkpoint's) → LoRA SFT on 2 TP ranks → export, which checks the merged Phi-3 folder and
    PEFT's base + adapter against forgeline's logits."""
    from specs.export import ExportSpec
    from specs.init import ModelInitSpec
    from specs.mix import MixJob
    from specs.pretrain import ModelSpec, PretrainJob
    from tasks import export, mix, pretrain
    from tasks.core.runner import StagePaths
    from tasks.eval.generate import torch_threads
    from tasks.train.checkpointing.weights import load_weights
    from tasks.train.hf.tiny_checkpoint import CHATML, make_checkpoint
    from tests.helpers.hf import corpus_texts
    from tests.helpers.pretrain import SEED, write_clean_shards
    from tests.helpers.sft import conversations, decide, run_sft, write_jsonl

    root = tmp_path / "p"
    write_clean_shards(root)
    make_checkpoint(root / "ckpt", corpus_texts(root), vocab=300, d_model=32, ffn=40, family="phi3",
                    chat_template=CHATML)
    mix_paths = StagePaths(root=root, stage="mix", seed=SEED)
    mix_paths.out.mkdir(parents=True)
    mix.run(MixJob(seq_len=32, val_fraction=0.1, model_init=ModelInitSpec(kind="hf", path="ckpt")), mix_paths)
    pre = StagePaths(root=root, stage="pretrain", seed=SEED)
    pre.out.mkdir(parents=True)
    pretrain.run(PretrainJob(model=ModelSpec(init={"kind": "hf", "path": "ckpt"}), parallel={"tp": 2},
                             train={"micro_batch_size": 4, "steps": 0}), pre)
    cfg = hf_model_config(root / "ckpt", seq_len=32)
    expected, got = load_hf_state(root / "ckpt", cfg), load_weights(pre.out)
    assert set(got) == set(expected) and all(torch.equal(got[k], v.float()) for k, v in expected.items())
    write_jsonl(root / "data" / "instruct" / "train.jsonl", conversations(12))
    write_jsonl(root / "data" / "instruct" / "heldout.jsonl", conversations(4, offset=100))
    decide(root, "approve")
    run_sft(root, steps=2, compare_prompts=1, seq_len=96, tp=2,
            adapter={"kind": "lora", "r": 2, "alpha": 4.0, "targets": ["q", "k", "v", "o", "gate", "up", "down"]})
    with torch_threads(1):
        report = export.run(ExportSpec(), StagePaths(root=root, stage="export", seed=SEED)).counts
    out = root / "data" / "export"
    assert json.loads((out / "hf" / "config.json").read_text())["architectures"] == ["Phi3ForCausalLM"]
    assert "qkv_proj" in json.loads((out / "adapter" / "adapter_config.json").read_text())["target_modules"]
    assert report["max_logit_diff"] < 1e-4
