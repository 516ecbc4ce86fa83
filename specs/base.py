"""Shared building blocks for every spec: strict models, stable hashing, readable errors."""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Base of every params section: unknown keys are errors, values are re-validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal specs always serialize to equal bytes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def spec_hash(spec: BaseModel) -> str:
    """sha256 of the spec's canonical JSON: the identity of a stage's configuration in its manifest."""
    return hashlib.sha256(canonical_json(spec.model_dump(mode="json")).encode()).hexdigest()


class ParamsError(ValueError):
    """A params file or override is invalid. `problems` holds one `key.path: reason` line per error."""

    def __init__(self, problems: list[str], source: str = "params"):
        self.problems = problems
        self.source = source
        super().__init__(f"{source} is invalid:\n" + "\n".join(f"  {p}" for p in problems))


# Pydantic error types rewritten into short phrases a user reads at a glance.
_BOUND_PHRASES = {
    "less_than_equal": ("le", "must be ≤ {}"),
    "less_than": ("lt", "must be < {}"),
    "greater_than_equal": ("ge", "must be ≥ {}"),
    "greater_than": ("gt", "must be > {}"),
    "too_short": ("min_length", "must have at least {} item(s)"),
    "too_long": ("max_length", "must have at most {} item(s)"),
    "string_too_short": ("min_length", "must be at least {} character(s)"),
    "string_too_long": ("max_length", "must be at most {} character(s)"),
}


def _allowed_keys(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """Walk `model` along `loc` (minus the last element) and list the field names allowed there."""
    current: Any = model
    for part in loc[:-1]:
        if current is None or not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = _field_named(current, str(part))
        if field is None:
            return []
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _field_named(model: type[BaseModel], key: str):
    """A model's field by name or by alias (params use aliases where a name would shadow pydantic's API)."""
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `Foo`, `Foo | None`, `list[Foo]`, `dict[str, Foo]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def describe_errors(exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Turn a ValidationError into `key.path: reason, got value` lines (one per error)."""
    lines = []
    for err in exc.errors(include_url=False):
        # Discriminated unions add the tag to loc (e.g. `sources.0.files.path`); keep user keys only.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = ".".join(str(p) for p in ((prefix,) if prefix else ()) + loc) or "<root>"
        kind = err["type"]
        got = err.get("input")
        if kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc)
            hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            reason = "unknown key"
            if hint:
                reason += f" (did you mean '{hint[0]}'?)"
            elif allowed:
                reason += f" (allowed: {', '.join(allowed)})"
            lines.append(f"{path}: {reason}")
            continue
        if kind == "missing":
            lines.append(f"{path}: required key is missing")
            continue
        if kind == "value_error" and (isinstance(got, dict) or not loc):
            # A cross-field check on a whole section: its message already names the keys and values.
            for part in err["msg"].removeprefix("Value error, ").split("; "):
                key, sep, rest = part.partition(": ")
                named = sep and "." in key and " " not in key
                lines.append(f"{key}: {rest}" if named else f"{path}: {part}")
            continue
        if kind in _BOUND_PHRASES:
            ctx_key, phrase = _BOUND_PHRASES[kind]
            reason = phrase.format(err.get("ctx", {}).get(ctx_key))
        else:
            reason = err["msg"][0].lower() + err["msg"][1:]
            reason = reason.removeprefix("value error, ")
        shown = repr(got)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{path}: {reason}, got {shown}")
    return lines
