"""The preference losses on per-sequence log-probabilities (policy and reference, chosen and rejected answers).

With Δ = (log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l)), per pair:

    sigmoid   −(1 − ε)·log σ(β·Δ) − ε·log σ(−β·Δ)     DPO (Rafailov et al. 2023); ε > 0 is conservative DPO
                                                       (labels flipped with probability ε; ε = 0: plain DPO)
    ipo       (Δ_w/n_w − Δ_l/n_l − 1/(2β))²            IPO (Azar et al. 2023), each log-ratio averaged over its
                                                       answer's n tokens, as TRL computes it (the IPO authors'
                                                       normalised form; TRL's `loss_type="ipo"`)

Implicit rewards r = β·(log π − log π_ref) for each answer; margin r_w − r_l. At the start (π = π_ref) every Δ is
0, so the sigmoid loss is ln 2 whatever β and ε are: tests/test_dpo_loss.py holds the packed rows to that.
Everything is summed over pairs here; the objective divides by the step's pair count (a mean over the global
batch, what TRL's `.mean()` gives for one batch).

A pair counts as preferred (reward accuracy) only when its margin exceeds the float32 rounding of its four
log-probs: they are sums over hundreds of tokens, and a reference computed in another process (prefer_ref) can
differ from the same model's policy in the last bits; a strict `>` then read that noise as a preference at step 0
(0.35 instead of 0, seen once in a fresh clone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PairScores:
    """Per pair [P]: the loss and the implicit rewards of the two answers."""

    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor
    rounding: torch.Tensor
    """The size a margin can reach by float32 rounding alone: β · `ROUNDING` · Σ |log-probs| of the pair."""

    @property
    def preferred(self) -> torch.Tensor:
        """[P] bool: the chosen answer's reward exceeds the rejected one's by more than rounding."""
        return (self.chosen_rewards - self.rejected_rewards) > self.rounding


ROUNDING = 64 * float(torch.finfo(torch.float32).eps)
"""Relative float32 rounding of a summed log-prob (≈ 7.6e-6): the one deviation seen was ~1e-6 of the sum."""


def preference_losses(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                      ref_rejected: torch.Tensor, beta: float, kind: str = "sigmoid", label_smoothing: float = 0.0,
                      chosen_tokens: torch.Tensor | None = None, rejected_tokens: torch.Tensor | None = None
                      ) -> PairScores:
    """The loss of each pair from summed log-probs [P] (fp32 or fp64). IPO needs the answers' token counts."""
    chosen_ratio = policy_chosen - ref_chosen                                       # [P]
    rejected_ratio = policy_rejected - ref_rejected                                 # [P]
    if kind == "sigmoid":
        z = beta * (chosen_ratio - rejected_ratio)
        losses = -(1.0 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    elif kind == "ipo":
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("ipo: the answers' token counts are needed (log-ratios are averaged per token)")
        delta = chosen_ratio / chosen_tokens.clamp(min=1) - rejected_ratio / rejected_tokens.clamp(min=1)
        losses = (delta - 1.0 / (2.0 * beta)) ** 2
    else:
        raise ValueError(f"unknown preference loss {kind!r} (sigmoid, ipo)")
    magnitude = (policy_chosen.abs() + policy_rejected.abs() + ref_chosen.abs() + ref_rejected.abs()).detach()
    return PairScores(losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach(),
                      abs(beta) * ROUNDING * magnitude)


def preference_metrics(policy: np.ndarray, ref: np.ndarray, tokens: np.ndarray, beta: float, kind: str = "sigmoid",
                       label_smoothing: float = 0.0) -> dict[str, Any]:
    """What the held-out split says of a policy, from [P, 2] (chosen, rejected) summed log-probs of the policy
    and the reference and the answers' token counts (README, "prefer", defines each)."""
    if not len(policy):
        return {"pairs": 0}
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))  # noqa: E731
    s = preference_losses(t(policy[:, 0]), t(policy[:, 1]), t(ref[:, 0]), t(ref[:, 1]), beta, kind,
                          label_smoothing, t(tokens[:, 0]), t(tokens[:, 1]))
    per_token = policy / np.maximum(tokens, 1)
    mean = lambda x: float(np.mean(x))  # noqa: E731
    return {"pairs": int(len(policy)), "loss": float(s.losses.mean()),
            "reward_chosen": float(s.chosen_rewards.mean()), "reward_rejected": float(s.rejected_rewards.mean()),
            "margin": float((s.chosen_rewards - s.rejected_rewards).mean()),
            "reward_accuracy": float(s.preferred.double().mean()),
            "accuracy": mean(policy[:, 0] > policy[:, 1]),
            "accuracy_per_token": mean(per_token[:, 0] > per_token[:, 1]),
            "chosen_logp_per_token": float(policy[:, 0].sum() / max(tokens[:, 0].sum(), 1)),
            "rejected_logp_per_token": float(policy[:, 1].sum() / max(tokens[:, 1].sum(), 1))}
