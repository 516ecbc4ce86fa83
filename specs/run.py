"""The `run` section: settings shared by every stage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specs.base import StrictModel


class ExecutorSpec(StrictModel):
    """Where a data stage runs its independent per-shard work (`tasks/core/executors.py`). Outputs are
    byte-identical whichever is chosen: every shard writes its own file and the stage combines them in shard
    order."""

    kind: Literal["local", "dask"] = Field(
        "local",
        description="`local`: a pool of `workers` processes on this machine (`workers: 1`: shard after shard in "
        "the stage's own process, no pool). `dask`: `dask.distributed` futures, on a local cluster of `workers` "
        "processes bound to 127.0.0.1 or on the scheduler at `address`.",
    )
    workers: int | None = Field(
        None, ge=1, le=1024,
        description="Worker processes of the local pool or the local Dask cluster (ignored with `address`). None: "
        "the cores this process may use (`os.sched_getaffinity`). 1 with `local` runs in-process (tests, "
        "debugging).",
    )
    threads_per_worker: int = Field(1, ge=1, le=256, description="`dask` only: threads per local Dask worker. The "
                                    "shard work is mostly pure Python, so processes, not threads, bring the "
                                    "speed-up.")
    address: str | None = Field(
        None, pattern=r"^(tcp|tls|ucx|inproc)://\S+$",
        description="`dask` only: an existing Dask scheduler (e.g. `tcp://10.0.0.5:8786` from `dask scheduler`, "
        "dask-jobqueue or dask-kubernetes); its workers need this project installed and the same data folder. "
        "None starts a local cluster bound to 127.0.0.1.",
    )
    retries: int = Field(1, ge=0, le=10, description="`dask` only: retries of a failed shard (a lost worker, a "
                         "flaky node); shard work writes atomically, so a retry never sees half of an earlier "
                         "attempt. A `local` shard that fails fails the stage; a re-run resumes after the "
                         "finished shards.")


class RunSpec(StrictModel):
    """Identity and randomness of the whole run."""

    name: str = Field(
        "forgeline-demo",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Human name of the run; appears in manifests, Prefect flow runs and model cards.",
    )
    seed: int = Field(
        1234,
        ge=0,
        le=2**32 - 1,
        description="Master seed. Every stage derives its own randomness from it, so reruns are identical.",
    )
    executor: ExecutorSpec = Field(
        default_factory=ExecutorSpec,
        description="Where data stages run their per-shard work (clean's filtering, signatures, dedup buckets and "
        "verification; mix's scan and tokenization). "
        "It never changes a result, so it is not a DVC param of any stage.",
    )
