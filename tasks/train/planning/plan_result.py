"""The planner's answer as data: one priced recipe per row (`PlanRow`), the ranking and the choice (`Plan`), and
the params keys a recipe sets (`RECIPE_KEYS`). The search is tasks/train/planning/planner.py; how a plan is shown,
tasks/train/planning/plan_render.py (both read this module; neither imports the other's types back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specs.architecture import ParamCounts
from tasks.train.planning.cluster import ClusterSpec
from tasks.train.planning.plan_cost import StepCost
from tasks.train.planning.plan_memory import GIB, MemoryEstimate

# params key of each recipe field the planner chooses; `--fix KEY` keeps the params' value of one.
RECIPE_KEYS = {"parallel.dp": "dp", "parallel.tp": "tp", "parallel.pp": "pp",
               "parallel.zero_stage": "zero_stage", "parallel.sequence_parallel": "sequence_parallel",
               "pretrain.micro_batch_size": "micro_batch", "pretrain.grad_accum": "grad_accum",
               "pretrain.activation_checkpointing": "checkpointing"}

# the engine's bf16 mode: part of a recipe only when the planner had to leave the engine's default (`search`)
MIXED_PRECISION_KEY = "pretrain.speed.mixed_precision"


@dataclass
class PlanRow:
    """One priced recipe, or one layout rejected before memory (then `zero_stage` and the recipe are None)."""

    dp: int
    tp: int
    pp: int
    zero_stage: int | None          # None: rejected before memory (any stage)
    memory: MemoryEstimate | None
    fits: bool
    reasons: list[str] = field(default_factory=list)
    cost: StepCost | None = None    # None: rejected, or no peak FLOP/s known for the device
    within_margin: bool = False     # fits with MEMORY_SAFETY headroom: eligible for the speed ranking
    grad_accum: int | None = None   # micro-batches per step per replica
    micro_batch: int | None = None  # sequences per micro-batch per replica
    checkpointing: str | None = None  # a plan_cost.CHECKPOINTING mode
    sequence_parallel: bool = False
    mixed_precision: str | None = None  # set: the recipe names the bf16 mode (the planner's fallback, `search`)

    @property
    def bubble_share(self) -> float:
        """Share of the estimated step the pipeline idles (fill and drain); 0 without an estimate."""
        return self.cost.bubble_s / self.cost.step_s if self.cost and self.cost.step_s else 0.0

    def recipe(self) -> dict[str, Any]:
        """The params keys of this recipe and their values (`activation_checkpointing` as the params' bool)."""
        values = {name: getattr(self, name) for name in RECIPE_KEYS.values()}
        if values["checkpointing"] in ("off", "full"):
            values["checkpointing"] = values["checkpointing"] == "full"
        recipe = {key: values[name] for key, name in RECIPE_KEYS.items()}
        if self.mixed_precision is not None:
            recipe[MIXED_PRECISION_KEY] = self.mixed_precision
        return recipe

    def to_dict(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "zero_stage": self.zero_stage, "fits": self.fits,
                "within_margin": self.within_margin, "grad_accum": self.grad_accum,
                "micro_batch": self.micro_batch, "activation_checkpointing": self.checkpointing,
                "sequence_parallel": self.sequence_parallel, "mixed_precision": self.mixed_precision,
                # the script-facing names: GiB like --memory-gb, seconds per optimizer step
                "memory_gb_per_device": round(self.memory.total / GIB, 3) if self.memory else None,
                "step_time_s": round(self.cost.step_s, 6) if self.cost else None,
                "bubble_share": round(self.bubble_share, 4),
                "memory_gib": self.memory.breakdown_gib() if self.memory else None,
                "estimate": self.cost.as_dict() if self.cost else None, "reasons": list(self.reasons)}


@dataclass
class Plan:
    """Every priced recipe, the ranking and the choice, for one model, cluster and global batch."""

    model_name: str
    params: ParamCounts
    cluster: ClusterSpec
    rows: list[PlanRow]
    chosen: PlanRow | None
    why: str
    ranked: list[PlanRow] = field(default_factory=list)  # eligible rows by estimated time per token, best first
    cost_basis: str = ""                                  # the FLOP/s the times assume, or why there are none
    global_batch: int | None = None                       # sequences per step; None: each layout keeps its own
    fixed: dict[str, Any] = field(default_factory=dict)   # recipe fields the search kept (RECIPE_KEYS names)
