"""The `run` section: settings shared by every stage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specs.base import StrictModel


class ExecutorSpec(StrictModel):
    """How a data stage runs its independent per-shard work. Outputs are byte-identical whichever is chosen:
    every shard writes its own file and the stage combines them in shard order."""

    kind: Literal["local", "dask"] = Field(
        "local",
        description="`local`: shards one after another in the stage's own process. `dask`: one Prefect task per "
        "shard through prefect-dask's DaskTaskRunner, on a local cluster of `workers` processes or on the "
        "scheduler at `address`; the task runs show in the Prefect UI under the flow `forgeline-shards`.",
    )
    workers: int = Field(2, ge=1, le=1024, description="Worker processes of the local Dask cluster (with no "
                         "`address`); one per core is the usual choice.")
    threads_per_worker: int = Field(1, ge=1, le=256, description="Threads per local Dask worker. The shard work "
                                    "is mostly pure Python, so processes, not threads, bring the speed-up.")
    address: str | None = Field(
        None, pattern=r"^(tcp|tls|ucx|inproc)://\S+$",
        description="An existing Dask scheduler (e.g. `tcp://10.0.0.5:8786` from `dask scheduler`, dask-jobqueue "
        "or dask-kubernetes); its workers need this project installed and the same data folder. None starts a "
        "local cluster bound to 127.0.0.1.",
    )
    retries: int = Field(1, ge=0, le=10, description="Retries of a failed shard task (shard work writes "
                         "atomically, so a retry never sees half of an earlier attempt).")


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
        description="Where data stages run their per-shard work (clean's filtering and MinHash signatures). "
        "It never changes a result, so it is not a DVC param of any stage.",
    )
