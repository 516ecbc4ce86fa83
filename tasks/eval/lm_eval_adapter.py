"""lm-eval's `LM` interface over forgeline's own model: any consolidated checkpoint (data/pretrain, data/sft, every
architecture the importer knows, a TP-trained run's merged weights) is scored without an export.

`ForgelineLM` subclasses lm-eval's `TemplateLM` (itself an `lm_eval.api.model.LM`), which turns (context,
continuation) strings into token ids the way lm-eval's Hugging Face backend does (trailing context spaces move to
the continuation, an empty context becomes the prefix token). What is left here mirrors `HFLM` step for step, so
the two give the same scores on an exported model (tests/test_benchmark_parity.py):
- `_loglikelihood_tokens`: the input is (context + continuation)[-(max_length + 1):][:-1], right-padded in a batch
  (causal attention: padding after a row's last token never changes its logits); log-softmax in fp32; the
  continuation's log-probability and whether greedy decoding would have produced it;
- `loglikelihood_rolling`: lm-eval's own disjoint rolling windows (prefix token first, max_length tokens each);
- `generate_until`: contexts left-truncated to max_length - max_gen_toks, decoded with forgeline's KV cache
  (tasks/eval/generate.py), stopped at the end token, cut at the first stop string as `HFLM` cuts.
`max_length` is the context an exported config states (max_position_embeddings).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text

from specs.evaluate import SamplingSpec
from tasks.eval.generate import generate_batch, prompt_seed
from tasks.train.modeling.model import Transformer

DEFAULT_MAX_GEN_TOKS = 256  # HFLM.max_gen_toks: a task that states none generates this many at most


class ForgelineLM(TemplateLM):
    """Scores lm-eval requests with a forgeline `Transformer` and a `tokenizers.Tokenizer`.

    `prefix_id` conditions an empty context and starts every rolling window (HFLM: the tokenizer's BOS, else its
    EOS; forgeline's own runs: the end-of-document token, which precedes every document in the packed stream).
    `eot_id` ends a generation. `seed` seeds sampled generations (a request's generator from the seed and its
    position), greedy ones need none."""

    backend = "causal"

    def __init__(self, model: Transformer, tokenizer: Any, *, prefix_id: int, eot_id: int, batch_size: int = 8,
                 seed: int = 0):
        super().__init__()
        self.model, self.tokenizer = model.eval(), tokenizer
        self._prefix_id, self._eot_id = prefix_id, eot_id
        self.batch_size, self.seed = batch_size, seed
        self._device = next(model.parameters()).device

    @property
    def eot_token_id(self) -> int:
        return self._eot_id

    @property
    def prefix_token_id(self) -> int:
        return self._prefix_id

    @property
    def max_length(self) -> int:
        # What export states as max_position_embeddings (a checkpoint's own context, else the trained length), so
        # rolling windows and truncation match lm-eval's HF backend on the exported folder.
        return max(self.model.cfg.max_positions or 0, self.model.cfg.seq_len)

    @property
    def tokenizer_name(self) -> str:
        return "forgeline"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        # Plain text ids: forgeline's tokenizers add no BOS, as HFLM's encode of the exported tokenizer adds none.
        return self.tokenizer.encode(string, add_special_tokens=False).ids

    def tok_decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def _hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """The final hidden states [B, T, d] of Transformer.forward's plain causal path, without its output head:
        the head then runs only at the positions a continuation is scored on (the [B, T, V] logits of every
        position cost as much as the rest of a small model; tests check the logits equal forward's)."""
        x = ids                                                                           # [B, T]
        for layer in self.model.layers[:-1]:
            x = layer(x)                                                                  # ... -> [B, T, d]
        return x

    @torch.inference_mode()
    def _loglikelihood_tokens(self, requests: list[tuple[Any, list[int], list[int]]], disable_tqdm: bool = False,
                              **kwargs: Any) -> list[tuple[float, bool]]:
        """(log P(continuation | context), greedy?) per (key, context ids, continuation ids), in request order.
        Longest first, so a batch's padding stays small; the answer never depends on the batch."""
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1]) - len(requests[i][2]))
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        L, head = self.max_length, self.model.layers[-1]
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            inps = [(requests[i][1] + requests[i][2])[-(L + 1):][:-1] for i in batch]
            ids = torch.zeros(len(batch), max(map(len, inps)), dtype=torch.long, device=self._device)  # [B, T]
            for b, inp in enumerate(inps):
                ids[b, :len(inp)] = torch.tensor(inp, dtype=torch.long)
            hidden = self._hidden(ids)                                                    # [B, T, d]
            for b, i in enumerate(batch):
                cont, end = requests[i][2], len(inps[b])
                logp = F.log_softmax(head(hidden[b, end - len(cont):end]).float(), dim=-1)  # [C, V]
                want = torch.tensor(cont, dtype=torch.long, device=self._device)          # [C]
                greedy = bool((logp.argmax(dim=-1) == want).all())
                results[i] = (float(logp.gather(1, want[:, None]).sum()), greedy)
        return results  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """The whole string's log-likelihood, scored in lm-eval's disjoint windows of max_length tokens."""
        windows, owners = [], []
        for n, (string,) in enumerate(req.args for req in requests):
            for ctx, cont in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((None, ctx, cont))
                owners.append(n)
        totals = [0.0] * len(requests)
        for n, (ll, _) in zip(owners, self._loglikelihood_tokens(windows)):
            totals[n] += ll
        return totals

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Continuations cut at the task's stop strings (and the end token), batched per set of gen_kwargs."""
        out: list[str | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for n, req in enumerate(requests):
            groups.setdefault(repr(sorted(req.args[1].items())), []).append(n)
        for members in groups.values():
            kwargs = normalize_gen_kwargs(requests[members[0]].args[1], DEFAULT_MAX_GEN_TOKS)
            until = handle_stop_sequences(kwargs.pop("until", None),
                                          eos=self.tok_decode([self.eot_token_id], skip_special_tokens=False))
            max_gen = kwargs["max_gen_toks"]
            if max_gen >= self.max_length:
                raise ValueError(f"a task asks for {max_gen} generated tokens but the model's context is "
                                 f"{self.max_length}: set generation_kwargs.max_gen_toks in the task below that")
            temperature = float(kwargs.get("temperature") or 0.0) if kwargs.get("do_sample") else 0.0
            sampling = SamplingSpec(temperature=temperature, top_k=None, top_p=1.0, max_new_tokens=max_gen,
                                    stop_at_eos=True)
            for start in range(0, len(members), self.batch_size):
                chunk = members[start:start + self.batch_size]
                ctx = self.max_length - max_gen
                prompts = [self.tok_encode(requests[n].args[0])[-ctx:] or [self.prefix_token_id] for n in chunk]
                gens = [torch.Generator().manual_seed(prompt_seed(self.seed, str(n))) for n in chunk]
                for n, (new, _) in zip(chunk, generate_batch(self.model, prompts, sampling, gens, self.eot_token_id)):
                    out[n] = postprocess_generated_text(self.tok_decode(new), stop=until, think_end_token=None)
        return out  # type: ignore[return-value]
