"""The `run` section: settings shared by every stage."""

from __future__ import annotations

from pydantic import Field

from specs.base import StrictModel


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
