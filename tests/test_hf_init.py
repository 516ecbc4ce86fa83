"""`model.init.kind: hf` through the pipeline's own stages: mix encodes with the checkpoint's tokenizer (none
trained), pretrain starts from the checkpoint's weights in any layout — each rank reading only its own slices
— and `steps: 0` is a conversion that writes exactly the checkpoint's weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from specs.init import ModelInitSpec
from specs.mix import MixJob
from specs.pretrain import ModelSpec, PretrainJob
from specs.export import ExportSpec
from tasks import export, mix, pretrain
from tasks.eval.generate import torch_threads
from tasks.core.runner import StagePaths
from tasks.train.inputs.data import TrainData
from tasks.train.hf.hf_import import hf_model_config, load_hf_state
from tasks.train.checkpointing.weights import load_weights
from tests.helpers.hf import CHATML, corpus_texts, make_checkpoint
from tests.helpers.sft import conversations, decide, run_sft, write_jsonl
from tests.helpers.killed import run_killed
from tests.helpers.pretrain import SEED, run_stage, write_clean_shards

TRAIN = {"micro_batch_size": 4, "log_every": 1, "eval_every": 2, "eval_batches": 2, "checkpoint_every": 2,
         "optim": {"warmup_steps": 1, "lr": 1e-3}}


@pytest.fixture(scope="module")
def hf_project(tmp_path_factory) -> Path:
    """A project root with clean shards, a checkpoint under ckpt/ and mix run with `model.init.kind: hf`."""
    root = tmp_path_factory.mktemp("hf-project")
    write_clean_shards(root)
    make_checkpoint(root / "ckpt", corpus_texts(root))
    paths = StagePaths(root=root, stage="mix", seed=SEED)
    paths.out.mkdir(parents=True)
    job = MixJob(tokenizer={"vocab_size": 512}, seq_len=32, val_fraction=0.1,
                 model_init=ModelInitSpec(kind="hf", path="ckpt"))
    mix.run(job, paths)
    return root


def run_pretrain(root: Path, dest: Path, steps: int, **parallel) -> Path:
    shutil.copytree(root / "data" / "mix", dest / "data" / "mix")
    paths = StagePaths(root=dest, stage="pretrain", seed=SEED)
    paths.out.mkdir(parents=True)
    spec = PretrainJob(model=ModelSpec(init={"kind": "hf", "path": str(root / "ckpt")}), parallel=parallel,
                       train={**TRAIN, "steps": steps})
    pretrain.run(spec, paths)
    return paths.out


def test_mix_uses_the_checkpoints_tokenizer_byte_for_byte(hf_project):
    out = hf_project / "data" / "mix"
    assert (out / "tokenizer.json").read_bytes() == (hf_project / "ckpt" / "tokenizer.json").read_bytes()
    report = json.loads((out / "report.json").read_text())
    assert report["tokenizer"]["source"] == "checkpoint" and report["tokenizer"]["trained"] is False
    layout = json.loads((out / "packing.json").read_text())
    assert layout["eos_id"] == 0 and layout["special_ids"]["<|pad|>"] == 1


@pytest.mark.parametrize("parallel", [{}, {"tp": 2}, {"pp": 2}, {"dp": 2, "zero_stage": 2},
                                      {"dp": 2, "zero_stage": 3}],
                         ids=["tp1", "tp2", "pp2", "dp2-zero2", "dp2-zero3"])
def test_zero_steps_writes_exactly_the_checkpoints_weights(hf_project, tmp_path, parallel):
    out = run_pretrain(hf_project, tmp_path, steps=0, **parallel)
    cfg = hf_model_config(hf_project / "ckpt", seq_len=32)
    expected = load_hf_state(hf_project / "ckpt", cfg)
    got = load_weights(out)
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert torch.equal(got[k], v.float()), k
    report = json.loads((out / "report.json").read_text())
    assert report["steps"] == 0 and report["model"]["vocab_size"] == cfg.vocab_size


CONTINUED_STEPS = 4  # checkpoints at 0 and 2, the kill after step 3


@pytest.fixture(scope="module")
def continued_tp2(hf_project, tmp_path_factory) -> Path:
    """Continued pretraining from the checkpoint on 2 TP ranks, uninterrupted: the out folder (the tp 1 run and
    the killed-and-resumed run are both compared with it)."""
    return run_pretrain(hf_project, tmp_path_factory.mktemp("continued-tp2"), steps=CONTINUED_STEPS, tp=2)


def test_continued_pretraining_is_the_same_with_tensor_parallelism(hf_project, continued_tp2, tmp_path):
    one = run_pretrain(hf_project, tmp_path / "tp1", steps=CONTINUED_STEPS)
    two = continued_tp2
    rows = [[json.loads(x) for x in (o / "metrics.jsonl").read_text().splitlines()] for o in (one, two)]
    losses = [[r["loss"] for r in rs if r["kind"] == "train"] for rs in rows]
    assert len(losses[0]) == CONTINUED_STEPS and losses[0] == pytest.approx(losses[1], abs=1e-4)
    # it started from the checkpoint: step 1's loss is what transformers' model gives on step 1's batch
    x, y = TrainData(hf_project / "data" / "mix", SEED, TRAIN["micro_batch_size"], 1, 1).micro_batches(0, 0)[0]
    hf = AutoModelForCausalLM.from_pretrained(hf_project / "ckpt", local_files_only=True,
                                              attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        ref = F.cross_entropy(hf(x).logits.flatten(0, 1), y.flatten()).item()
    assert losses[0][0] == pytest.approx(ref, abs=1e-4)
    a, b = load_weights(one), load_weights(two)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-4, msg=k)


def test_continued_pretraining_killed_and_resumed_ends_byte_identical(hf_project, continued_tp2, tmp_path):
    """Continued pretraining from the checkpoint on 2 TP ranks, SIGKILLed after step 3 (checkpoints every 2):
    the rerun resumes from step 2 and writes exactly the bytes of an uninterrupted run."""
    steps, ref = CONTINUED_STEPS, continued_tp2
    root = tmp_path / "killed"
    shutil.copytree(hf_project / "data" / "mix", root / "data" / "mix")
    spec = {"model": {"init": {"kind": "hf", "path": str(hf_project / "ckpt")}}, "parallel": {"tp": 2},
            "train": {**TRAIN, "steps": steps}}
    code, out = run_killed(run_stage, root, spec, fault="pretrain.step_done=3", timeout=600)
    # the ranks are SIGKILLed after step 3; the launching process reports their death and fails
    assert code != 0 and "terminated with signal SIGKILL" in out, out[-2000:]
    names = sorted(p.name for p in (root / "checkpoints" / "pretrain").glob("step*"))
    assert names[-1] == "step000002", names
    paths = StagePaths(root=root, stage="pretrain", seed=SEED)
    shutil.rmtree(paths.out)
    paths.out.mkdir(parents=True)
    result = pretrain.run(PretrainJob.model_validate(spec), paths)
    assert "resumed from checkpoint step000002" in result.summary
    for name in ("model.safetensors", "metrics.jsonl", "report.json", "config.json"):
        assert (paths.out / name).read_bytes() == (ref / name).read_bytes(), name


def test_a_conflicting_shape_key_and_a_pickle_checkpoint_are_refused(hf_project, tmp_path):
    with pytest.raises(ValueError, match=r"model\.d_model: 64 is set here, but .* the checkpoint's config.json"):
        ModelSpec(init={"kind": "hf", "path": "ckpt"}, d_model=64)
    with pytest.raises(ValueError, match=r"model\.init\.path: required with kind: hf"):
        ModelSpec(init={"kind": "hf"})
    pickled = tmp_path / "pickled"
    shutil.copytree(hf_project / "ckpt", pickled)
    (pickled / "model.safetensors").unlink()
    torch.save({}, pickled / "pytorch_model.bin")
    shutil.copytree(hf_project / "data" / "mix", tmp_path / "p" / "data" / "mix")
    paths = StagePaths(root=tmp_path / "p", stage="pretrain", seed=SEED)
    paths.out.mkdir(parents=True)
    spec = PretrainJob(model=ModelSpec(init={"kind": "hf", "path": str(pickled)}), parallel={},
                       train={**TRAIN, "steps": 0})
    with pytest.raises(ValueError, match=r"pytorch_model.bin: pickle checkpoints are refused"):
        pretrain.run(spec, paths)


def test_hf_to_forgeline_to_hf_with_zero_steps_is_the_same_model(tmp_path):
    """pretrain and sft at steps 0 through the real stages: the exported folder is the checkpoint again — the
    same logits, its own chat template (ChatML) kept, SFT's conversations rendered with it."""
    root = tmp_path / "p"
    write_clean_shards(root)
    hf = make_checkpoint(root / "ckpt", corpus_texts(root), tied=True, chat_template=CHATML)
    # Llama 3.1 Instruct's way: config.json and generation_config.json list several stop ids (here <|endoftext|>
    # and a reserved token standing for <|eom_id|>), the latter with sampling defaults
    stops, generation = [0, 4], {"do_sample": True, "eos_token_id": [0, 4], "temperature": 0.6, "top_p": 0.9,
                                 "transformers_version": "4.42.3"}
    config = json.loads((root / "ckpt" / "config.json").read_text())
    (root / "ckpt" / "config.json").write_text(json.dumps({**config, "eos_token_id": stops}))
    (root / "ckpt" / "generation_config.json").write_text(json.dumps(generation))
    mix_paths = StagePaths(root=root, stage="mix", seed=SEED)
    mix_paths.out.mkdir(parents=True)
    mix.run(MixJob(seq_len=32, val_fraction=0.1, model_init=ModelInitSpec(kind="hf", path="ckpt")), mix_paths)
    pre = StagePaths(root=root, stage="pretrain", seed=SEED)
    pre.out.mkdir(parents=True)
    pretrain.run(PretrainJob(model=ModelSpec(init={"kind": "hf", "path": "ckpt"}), parallel={},
                             train={**TRAIN, "steps": 0}), pre)
    write_jsonl(root / "data" / "instruct" / "train.jsonl", conversations(12))
    write_jsonl(root / "data" / "instruct" / "heldout.jsonl", conversations(4, offset=100))
    decide(root, "approve")
    run_sft(root, steps=0, compare_prompts=1, seq_len=96)  # ChatML turns are long in a 300-token vocabulary
    chat = json.loads((root / "data" / "sft" / "chat.json").read_text())
    assert chat["template"] == "checkpoint" and (root / "data" / "sft" / "chat_template.jinja").read_text() == CHATML
    with torch_threads(1):
        export.run(ExportSpec(), StagePaths(root=root, stage="export", seed=SEED))
    out = root / "data" / "export" / "hf"
    back = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, dtype=torch.float32).eval()
    ids = torch.randint(0, hf.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float((back(ids).logits - hf(ids).logits).abs().max()) < 1e-5
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    talk = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert tok.apply_chat_template(talk, tokenize=False) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>"  # a chat model stops at the turn's end
    # the checkpoint's context, not the 32 tokens mix packed for this run (specs/init.py's rule)
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == \
        hf.config.max_position_embeddings == 1024
    # its stop ids and generation settings as it stated them, plus the end of turn SFT taught (<|im_end|>, id 3);
    # its embedding rows padded past the tokenizer kept (8 rows no token reaches)
    written = json.loads((out / "config.json").read_text())
    assert written["eos_token_id"] == [0, 4, 3] and written["vocab_size"] == hf.config.vocab_size == len(tok) + 8
    assert json.loads((out / "generation_config.json").read_text()) == {**generation, "eos_token_id": [0, 4, 3]}


def test_the_tiny_checkpoint_loads_in_transformers_as_written(hf_project):
    """The checkpoint `python -m tasks tiny-checkpoint` writes is one transformers itself loads (lm-eval's HF
    backend scores it as the benchmark's `before` model): its dict-form special token carries `__type`."""
    tok = AutoTokenizer.from_pretrained(hf_project / "ckpt")
    assert tok.eos_token == "<|endoftext|>" and tok.convert_tokens_to_ids("<|endoftext|>") == tok.eos_token_id
    assert isinstance(json.loads((hf_project / "ckpt" / "tokenizer_config.json").read_text())["eos_token"], dict)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_transformers_tokenizes_the_tiny_checkpoint_as_the_tokenizers_library_does(tmp_path, family):
    """transformers 5 picks a tokenizer class from the model type (Qwen2Tokenizer for qwen2/qwen3, with its own
    pre-tokenizer, whatever tokenizer.json says): the tiny checkpoint of each family carries what that class
    applies, so the text forgeline trains on and the text an exported model is given split the same way (export
    verifies it; a newline before spaces split differently broke the Qwen recipe)."""
    from tasks.train.hf.tiny_checkpoint import embedded_texts, make_checkpoint as make_family
    from tokenizers import Tokenizer

    make_family(tmp_path / "ckpt", embedded_texts(30), vocab=400, family=family)
    hf, raw = AutoTokenizer.from_pretrained(tmp_path / "ckpt"), Tokenizer.from_file(str(tmp_path / "ckpt" / "tokenizer.json"))
    for text in ("<|im_start|>user\n  And then?<|im_end|>\n", "x\n\n   y\t z", "cafe\u0301 it's 2024"):
        assert hf(text, add_special_tokens=False)["input_ids"] == raw.encode(text).ids, (family, text)
