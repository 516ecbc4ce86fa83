"""ForgelineLM, lm-eval's LM interface over forgeline's own model: each request type against a direct computation
with the model's public forward, and generation against forgeline's greedy decoding."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM

from specs.evaluate import SamplingSpec
from tasks.eval.generate import generate
from tasks.eval.lm_eval_adapter import ForgelineLM
from tasks.eval.lm_eval_run import forgeline_lm
from tests.helpers.benchmark import checkpoint

EOS = 0  # <|endoftext|>: the first special token, mix's document end


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> ForgelineLM:
    folder = checkpoint(tmp_path_factory.mktemp("bench-adapter") / "ckpt")
    return forgeline_lm(folder, folder / "tokenizer.json", prefix_id=EOS, eot_id=EOS, batch_size=3, seed=1)


def _req(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def _logprob(lm: ForgelineLM, ids: list[int], start: int) -> tuple[float, bool]:
    """log P(ids[start:] | ids[:start]) and greedy-ness from the model's own forward over the whole sequence."""
    with torch.inference_mode():
        logp = F.log_softmax(lm.model(torch.tensor([ids]))[0].float(), dim=-1)       # [T, V]
    targets = torch.tensor(ids[start:])
    rows = logp[start - 1:len(ids) - 1]
    return float(rows.gather(1, targets[:, None]).sum()), bool((rows.argmax(-1) == targets).all())


def test_is_an_lm_eval_lm(lm):
    assert isinstance(lm, LM) and lm.max_length == 64 and lm.prefix_token_id == EOS


def test_loglikelihood_equals_the_forward_pass_and_does_not_depend_on_the_batch(lm):
    pairs = [("The mill by the river", " grinds grain"), ("Question: what is", " it?"),
             ("A", " very long continuation of words that goes on"), ("", "Starts with no context"),
             ("Trailing space ", "moves")]
    got = lm.loglikelihood([_req("loglikelihood", c, x) for c, x in pairs])
    for (context, cont), (ll, greedy) in zip(pairs, got):
        if context:
            # lm-eval moves a context's trailing spaces into the continuation before tokenizing
            spaces = len(context) - len(context.rstrip())
            context, cont = context[:len(context) - spaces], context[len(context) - spaces:] + cont
            whole, ctx = lm.tok_encode(context + cont), lm.tok_encode(context)
        else:
            whole, ctx = [EOS] + lm.tok_encode(cont), [EOS]
        want = _logprob(lm, whole, len(ctx))
        assert ll == pytest.approx(want[0], abs=1e-4) and greedy == want[1], (context, cont)
    lm.batch_size = 1
    try:
        alone = lm.loglikelihood([_req("loglikelihood", c, x) for c, x in pairs])
    finally:
        lm.batch_size = 3
    assert [a[0] for a in alone] == pytest.approx([g[0] for g in got], abs=1e-5)


def test_rolling_scores_every_token_once_in_windows_of_the_context(lm):
    text = "The mill by the river grinds grain for the town. " * 12  # > 64 tokens: several windows
    ids = lm.tok_encode(text)
    assert len(ids) > 2 * lm.max_length
    (total,) = lm.loglikelihood_rolling([_req("loglikelihood_rolling", text)])
    # The first window reads the prefix token then 63 tokens; later windows keep full context (lm-eval's rule).
    first, _ = _logprob(lm, [EOS] + ids[:63], 1)
    assert total < first < 0 and math.isfinite(total)
    short = "The mill grinds."
    (one,) = lm.loglikelihood_rolling([_req("loglikelihood_rolling", short)])
    assert one == pytest.approx(_logprob(lm, [EOS] + lm.tok_encode(short), 1)[0], abs=1e-4)


def test_generate_until_is_greedy_decoding_cut_at_the_first_stop_string(lm):
    context = "The mill by the river"
    sampling = SamplingSpec(temperature=0.0, top_k=None, top_p=1.0, max_new_tokens=12, stop_at_eos=True)
    new, _ = generate(lm.model, lm.tok_encode(context), sampling, torch.Generator(), EOS)
    full = lm.tok_decode(new)
    (plain,) = lm.generate_until([_req("generate_until", context, {"until": [], "max_gen_toks": 12})])
    assert plain == full
    stop = full.strip()[len(full.strip()) // 2:][:2]  # a stop string that occurs inside the continuation
    (cut,) = lm.generate_until([_req("generate_until", context, {"until": [stop], "max_gen_toks": 12})])
    assert cut == full.split(stop)[0] and len(cut) < len(full)


def test_generation_longer_than_the_context_is_refused_by_name(lm):
    with pytest.raises(ValueError, match="max_gen_toks"):
        lm.generate_until([_req("generate_until", "x", {"until": [], "max_gen_toks": 64})])


def test_hidden_states_plus_head_equal_the_models_forward(lm):
    ids = torch.tensor([lm.tok_encode("The mill by the river grinds grain.")])
    with torch.inference_mode():
        assert torch.allclose(lm.model.layers[-1](lm._hidden(ids)), lm.model(ids), atol=1e-6)
