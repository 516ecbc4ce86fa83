"""What crosses the process boundary of a training launch: the typed job every rank receives (one model per
objective, a discriminated union on `objective`), the explicit run context, and each rank's typed result.

The job travels as JSON (spawn arguments, `job.json` for the DeepSpeed launcher / torchrun) and is validated again
on every rank; results come back as `rank-NNNNN.json` markers validated by the launcher. Errors cross as typed
`RankError` records (exception type, message, whether it is a refusal), never rebuilt from message text.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field

from specs.base import StrictModel
from specs.prefer import PreferJob
from specs.pretrain import PretrainJob
from specs.sft import SFTJob

# What a rank job's `spec` is. Each has `train` (a `specs.train.TrainLoopSpec`: the loop knobs every objective
# shares) and `parallel` (a `specs.pretrain.ParallelSpec`), which is all the engine and DeepSpeed config read.
JobSpec = PretrainJob | SFTJob | PreferJob


class RunContext(StrictModel):
    """How this launch runs, as opposed to what it trains: rendezvous, comm options, test fault plans.

    Filled by the launcher (and, for the test-only fields, from the environment once by the CLI's stage entry);
    nothing below the trainer reads an environment variable for these."""

    init_file: str | None = Field(None, description="File rendezvous for local ranks (no TCP store listening "
                                  "on every interface); None: env:// from MASTER_ADDR/MASTER_PORT (torchrun, "
                                  "the DeepSpeed launcher).")
    allow_shm: bool = Field(False, description="Let DeepSpeed JIT-build its shared-memory comm op (30-77 s once; "
                            "faster CPU all-reduce afterwards).")
    loss_faults: dict[int, str] = Field(
        default_factory=dict, description="Tests: data batch (1-based, as in incidents.jsonl) -> factor the "
        "training loss of that batch is multiplied by, as text so `nan` and `inf` survive JSON; it drives the "
        "stability guard through real ranks.")


class _RankJobBase(StrictModel):
    """Where a rank reads and writes (absolute paths: ranks may start in other working directories)."""

    mix_dir: str = Field(..., description="mix's output folder (packed shards, tokenizer.json).")
    out_dir: str = Field(..., description="The stage's output folder (DVC out).")
    ckpt_dir: str = Field(..., description="Checkpoint folder (a persist out, survives reruns).")
    reports_dir: str = Field(..., description="Telemetry and wandb files (not versioned).")
    marker_dir: str = Field(..., description="Per-rank result markers `rank-NNNNN.json`. The launcher points "
                            "it at a fresh `launch-<id>/` folder inside the given one for each launch, so a "
                            "rank that outlived an earlier launch never writes over this launch's results.")
    seed: int = Field(..., description="The run's seed (init, data order).")
    objective_ref: str = Field(..., description="The objective class the ranks run, `module:Class` under "
                               "tasks.train.objectives (tasks/train/objectives/__init__.py: `reference`, "
                               "`resolve`, which refuses any other module). The stage building the job imports "
                               "that class, so the stage's code deps hold its objective and no other.")
    context: RunContext = Field(default_factory=RunContext, description="How the launch runs.")


class PretrainRun(_RankJobBase):
    """A pretraining job: mix's shards -> weights (PretrainObjective)."""

    objective: Literal["pretrain"] = "pretrain"
    spec: PretrainJob


class SFTRun(_RankJobBase):
    """A finetuning job: the pretrained weights + instruct's conversations -> weights (SFTObjective)."""

    objective: Literal["sft"] = "sft"
    spec: SFTJob
    pretrain_dir: str = Field(..., description="pretrain's output folder (model.safetensors, config.json).")
    instruct_dir: str = Field(..., description="instruct's output folder (train/heldout.jsonl).")
    pretrain_fingerprint: str = Field(..., description="Hash prefix of the starting weights: a checkpoint "
                                      "trained from other weights is not resumed.")


class PreferRun(_RankJobBase):
    """A preference-tuning job: SFT's weights + curated pairs + the reference log-probs -> weights (DPOObjective)."""

    objective: Literal["prefer"] = "prefer"
    spec: PreferJob
    sft_dir: str = Field(..., description="sft's output folder (weights, config.json, tokenizer, chat template).")
    data_dir: str = Field(..., description="prefer_data's output folder (train/heldout.jsonl pairs).")
    ref_dir: str = Field(..., description="prefer_ref's output folder (logprobs.parquet).")
    sft_fingerprint: str = Field(..., description="Hash prefix of the starting weights (checkpoint identity).")


RankJob = Annotated[Union[PretrainRun, SFTRun, PreferRun], Field(discriminator="objective")]


class JobFile(StrictModel):
    """The job as one JSON document (the union needs a field to live in)."""

    job: RankJob

    @classmethod
    def dumps(cls, job: PretrainRun | SFTRun | PreferRun) -> str:
        return cls(job=job).model_dump_json()

    @classmethod
    def loads(cls, text: str) -> PretrainRun | SFTRun | PreferRun:
        return cls.model_validate_json(text).job


class RankError(StrictModel):
    """An exception that ended a rank, as data."""

    type: str = Field(..., description="Exception class name.")
    message: str
    refusal: bool = Field(False, description="A ValueError: the run refused its inputs (the same on every "
                          "rank; the launcher re-raises it as a ValueError, not a crash).")


class Timing(StrictModel):
    startup_s: float
    train_s: float
    wall_s: float
    s_per_step: float | None = None
    tokens_per_s: float | None = None


class TrainResult(StrictModel):
    """Rank 0's account of a finished run (other ranks return an empty one: `rank0` false)."""

    rank0: bool = True
    objective: str = ""
    start_step: int = 0
    resumed_from: str | None = None
    losses: list[float | None] = Field(default_factory=list, description="Train loss of every step run by this "
                                       "launch (None where it was not finite: a skipped step).")
    rows: list[dict[str, Any]] = Field(default_factory=list, description="The metric rows (metrics.jsonl).")
    incidents: int = 0
    rollbacks: int = 0
    telemetry: dict[str, Any] = Field(default_factory=dict)
    timing: Timing | None = None
    outputs: dict[str, Any] = Field(default_factory=dict, description="The objective's own results (pretrain: "
                                    "report, adaptive_mix; sft: data stats, held-out loss before/after).")


class RankResult(StrictModel):
    """One rank's marker file."""

    rank: int
    ok: bool
    result: TrainResult | None = None
    error: RankError | None = None
