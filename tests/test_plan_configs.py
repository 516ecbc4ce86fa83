"""Framework configs (tests/published_configs.py: torchtitan, Megatron-LM, NeMo, BigCode, BigScience,
llm-foundry) as a user translating them would write params.yaml: what we run is accepted as written, what needs a
feature we lack is refused naming the feature and what to write instead, and the runnable translation is priced.
The planner's soundness and no-slower checks run over these too (tests/test_plan_published.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from specs import ParamsError, load_params
from specs.pretrain import ModelSpec, ParallelSpec
from specs.pretrain import MODEL_KEYS, PARALLEL_KEYS
from tasks.train.planning.plan_cost import intra_bandwidth
from tasks.train.planning.planner import search
from tests.published_configs import CONFIG_RUNS

REPO = Path(__file__).resolve().parents[1]


def shape_overrides(run) -> list[str]:
    shape = run.model.model_dump(exclude_unset=True, exclude={"init"})
    return ([f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in shape.items()]
            + [f"mix.seq_len={run.seq_len}", f"mix.tokenizer.vocab_size={run.vocab_size}"])


@pytest.mark.parametrize("name", [run.name for run in CONFIG_RUNS if run.refused])
def test_a_source_recipe_needing_a_missing_feature_is_refused_naming_it(name):
    run = next(r for r in CONFIG_RUNS if r.name == name)
    as_written = [f"{k}={v}" for k, v in run.refused.items()]
    with pytest.raises(ParamsError) as exc:
        load_params(REPO / "params.yaml", shape_overrides(run) + as_written)
    text = str(exc.value)
    assert run.refusal in text
    assert "did you mean" not in text            # not a spelling hint pointing at a different feature
    # the published recipe, translated to what runs, is priced (unstated keys searched) and fits — in DeepSpeed's
    # bf16 section, as the sources held bf16 weights (torch_autocast's fp32 weights may not: the README's table)
    row = run.in_mode("sections").published_row()
    assert row is not None and row.fits and (row.dp, row.tp, row.pp) == tuple(run.published[k]
                                                                                 for k in ("dp", "tp", "pp"))


def test_every_foreign_key_names_the_feature_and_a_replacement():
    """Each refusal says what is missing and which of our keys to use instead (or to drop the key)."""
    for key, why in {**PARALLEL_KEYS, **MODEL_KEYS}.items():
        spec, section = (ModelSpec, "model") if key in MODEL_KEYS else (ParallelSpec, "parallel")
        with pytest.raises(ValidationError) as exc:
            spec.model_validate({key: 2})
        assert f"{section}.{key}: " in str(exc.value) and "did you mean" not in str(exc.value)
        assert "not implemented" in why or "not configurable" in why, key
        assert "parallel." in why or "model." in why or "drop the key" in why, key
    # through params.yaml, with Megatron/NeMo spellings (dashes, capitals) read as the same key
    with pytest.raises(ParamsError) as exc:
        load_params(REPO / "params.yaml", ["parallel.Context-Parallel-Size=2"])
    assert exc.value.problems == [f"parallel.Context-Parallel-Size: {PARALLEL_KEYS['context_parallel_size']}"]


def test_context_parallel_ranks_fold_into_dp_and_recomputation_carries_the_long_sequence():
    """NeMo's Llama 3 70B: tp 4 × pp 4 × cp 2 on 32 H100. Folding cp into dp doubles each rank's tokens: at
    8192 the same layout without recomputation no longer fits, with it it does."""
    run = next(r for r in CONFIG_RUNS if r.name == "Llama 3 70B (NeMo)")
    row = run.published_row()
    assert row.checkpointing == "full"
    off = search(run.model, run.cluster, vocab_size=run.vocab_size, seq_len=run.seq_len,
                 global_batch=run.global_batch, fixed={**run.published, "checkpointing": "off"}).rows
    assert off and not any(r.fits for r in off)


def test_megatron_sequence_parallel_flag_at_tp_1_is_accepted_as_a_no_op():
    """Megatron-LM's Llama 3 8B script passes --sequence-parallel at TP 1; the same params load."""
    run = next(r for r in CONFIG_RUNS if r.name == "Llama 3 8B (Megatron-LM)")
    params = load_params(REPO / "params.yaml", shape_overrides(run) + [
        "parallel.dp=8", "parallel.tp=1", "parallel.zero_stage=1", "parallel.sequence_parallel=true",
        "pretrain.micro_batch_size=1", "pretrain.grad_accum=16"])
    assert params.parallel.sequence_parallel and params.parallel.tp == 1


def test_v100_nvlink_is_priced_at_volta_bandwidth():
    """BLOOM-7B1 trained on V100s: NVLink 2 moves half an A100's NVLink 3, not a Hopper's (the old default)."""
    assert intra_bandwidth("nvlink", "Tesla V100-SXM2-32GB") == 150e9 < intra_bandwidth("nvlink", "a100")


def test_data_parallel_models_stay_data_parallel_where_the_sources_were():
    """The 7–8B runs whose sources used data parallelism alone on one node get no pipeline or recomputation in
    DeepSpeed's bf16 section, the sources' bf16 weights. Under torch_autocast Llama 3 8B at 8K tokens stays at
    dp 8 with ZeRO-3, which holds no bf16 weight copies (its linear saves the parameter:
    tests/test_plan_weight_copies.py); ZeRO-0–2 would hold 13 GiB of them. It split over tp 2 (ZeRO-2) while
    ZeRO-3 was priced with the copies, which took it past the margin."""
    for name in ("Llama 3 8B (Megatron-LM)", "Llama 3 8B (NeMo)", "MPT-7B (llm-foundry)"):
        c = next(r for r in CONFIG_RUNS if r.name == name).in_mode("sections").plan().chosen
        assert (c.tp, c.pp, c.checkpointing) == (1, 1, "off"), name
    c = next(r for r in CONFIG_RUNS if r.name == "MPT-7B (llm-foundry)").plan().chosen
    assert (c.tp, c.pp, c.checkpointing) == (1, 1, "off")
    c = next(r for r in CONFIG_RUNS if r.name == "Llama 3 8B (Megatron-LM)").plan().chosen
    assert (c.tp, c.pp, c.checkpointing, c.zero_stage) == (1, 1, "off", 3)
