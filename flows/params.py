"""Typed flow parameters: `ParamsOverride`, a partial mirror of `specs.Params` with every key optional.

Prefect publishes a flow's parameter types as JSON Schema and the server validates `--params` JSON against it
before a run is even created. Mirroring `Params` section by section (extra keys forbidden at every level,
the specs' bounds kept) means a typo or an out-of-range value in `{"params": {"ingest": {...}}}` is refused by
the server, and the UI shows a form with every knob. What the mirror cannot check (cross-field rules such as
"mix.weights names a known source") is checked again by `specs` when the override is written into params.yaml.

Merge rule: a key that is a section (a spec model) is merged key by key; any other value — a number, a string,
a list such as `ingest.sources`, a map such as `mix.weights` — replaces the value in params.yaml as a whole.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, create_model

from specs import Params
from tasks.core.graph import STAGE_NAMES

# The stages a run can be cut at, as a type: the server refuses `{"until": "valdiate"}` and the UI offers a list.
StageName = Literal[STAGE_NAMES]  # type: ignore[valid-type]


class OverrideModel(BaseModel):
    """Base of every generated override section: unknown keys are errors, aliases (`validate`) accepted."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The spec model when a field is a section (not optional, not a list/map of models)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def partial_model(model: type[BaseModel], name: str | None = None) -> type[OverrideModel]:
    """A model with the fields of `model`, each optional with default None, sections turned partial too.

    Field descriptions, aliases and bounds (ge, le, pattern, min_length...) are kept; model validators are
    not (a partial section cannot satisfy rules that span keys it does not set).
    """
    fields: dict[str, Any] = {}
    for fname, info in model.model_fields.items():
        section = _section_model(info.annotation)
        if section is not None:
            sub = partial_model(section)
            fields[fname] = (Optional[sub], _optional(info, keep_bounds=False))
        else:
            fields[fname] = (Optional[info.annotation], _optional(info, keep_bounds=True))
    doc = f"Optional overrides for `{model.__name__}`: set only the keys to change. " + (model.__doc__ or "")
    return create_model(name or f"{model.__name__}Override", __base__=OverrideModel, __doc__=doc.strip(), **fields)


def _optional(info, keep_bounds: bool):
    """A copy of a FieldInfo with default None (and no default factory), bounds optionally dropped."""
    new = copy.copy(info)
    new.default = None
    new.default_factory = None
    new.metadata = list(info.metadata) if keep_bounds else []
    return new


ParamsOverride = partial_model(Params, "ParamsOverride")
ParamsOverride.__doc__ = ("Overrides for params.yaml, section by section (only the keys you set change; "
                          "lists and maps are replaced whole). Validated by the server, then again by specs.")


def to_dotted(override: BaseModel | dict[str, Any] | None) -> dict[str, Any]:
    """Flatten an override into `{"section.key": value}` pairs for `write_overrides` (sections merged,
    values replaced whole). A dict is validated as a ParamsOverride first."""
    if override is None:
        return {}
    if isinstance(override, dict):
        override = ParamsOverride.model_validate(override)
    out: dict[str, Any] = {}
    _flatten(override, "", out)
    return out


def _flatten(node: BaseModel, prefix: str, out: dict[str, Any]) -> None:
    fields = type(node).model_fields
    for fname in sorted(node.model_fields_set, key=list(fields).index):  # declaration order: stable output
        info = fields[fname]
        key = prefix + (info.alias or fname)
        value = getattr(node, fname)
        if isinstance(value, OverrideModel):
            _flatten(value, key + ".", out)
        elif value is None and _is_override_section(info.annotation):
            continue  # `"mix": null` on a section means "no change", not "delete the section"
        else:
            out[key] = _jsonable(value)


def _is_override_section(annotation: Any) -> bool:
    return any(isinstance(a, type) and issubclass(a, OverrideModel)
               for a in (annotation, *(getattr(annotation, "__args__", ()) or ())))


def _jsonable(value: Any) -> Any:
    """Lists/maps may hold spec models (e.g. `ingest.sources`): write them as plain data, by alias."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=False)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value
