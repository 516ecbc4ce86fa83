"""Shared building blocks for every spec: strict models, stable hashing, readable errors."""

from __future__ import annotations

import difflib
import hashlib
import json
import reprlib
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class StrictModel(BaseModel):
    """Base of every params section: unknown keys are errors, values are re-validated on assignment.

    Numbers must be finite (`.inf`/`.nan` in YAML are rejected: `rope_theta: .inf` would otherwise pass a
    `gt=0` bound), a boolean is not a number (pydantic would read `tp: yes` as 1), and an integer must fit in
    64 bits (`steps: 1e100` written out passed validation and overflowed later in torch, numpy or Arrow). A
    quoted number is not a number either (`steps: '200'`: pydantic's lax mode read it as 200 while DVC's params
    diff and `dvc exp show` carry the string).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_as_number(cls, data: Any) -> Any:
        # A model-level check because pydantic forbids field "before" validators on union discriminators
        # (`kind`); each message starts with the key path inside the section, which describe_errors prefixes.
        if isinstance(data, dict):
            bad = [where for key, value in data.items() if (field := _field_named(cls, str(key))) is not None
                   and (where := _bool_as_number(field.annotation, value, str(key))) is not None]
            if bad:
                raise ValueError("; ".join(f"{where}: input should be a number, not a "
                                           f"{'boolean' if isinstance(flag, bool) else 'string'}, got {flag!r}"
                                           for where, flag in bad))
        return data

    @model_validator(mode="after")
    def _ints_fit_64_bits(self) -> "StrictModel":
        # After the fields' own bounds, which name a tighter limit (`must be ≤ 256`) where a field has one; an
        # int given to a float field is a float by now (1e30 is a fine float).
        # Only fields whose type can hold an int: validated copies of an aliased list share no identity, and
        # 3,000 keys aliasing one 3,000-string list were 9 M items walked here (20 s).
        fields = type(self).model_fields
        huge = [found for name in fields if can_hold_int(fields[name].annotation)
                if (found := _huge_int(getattr(self, name), fields[name].alias or name, set()))]
        if huge:
            raise ValueError("; ".join(f"{where}: must fit in 64 bits (|n| < 2^63), got an integer of {digits} "
                                       "digits" for where, digits in huge))
        return self


def _bool_as_number(annotation: Any, value: Any, where: str,
                    seen: set[tuple[int, int]] | None = None) -> tuple[str, bool | str] | None:
    """(key path, the value) of the first bool in `value` standing where `annotation` wants an int/float, or a
    string where it wants only numbers (also inside lists, tuples and dicts), or None. A container is walked
    once per annotation (`seen`): 3,000 keys aliasing one 3,000-item list took 44 s walked per reference."""
    if isinstance(value, (list, tuple, dict)):
        seen = set() if seen is None else seen
        if (id(value), id(annotation)) in seen:
            return None
        seen.add((id(value), id(annotation)))
    if isinstance(value, bool):
        arms = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
        return (where, value) if bool not in arms and any(a in (int, float) for a in arms) else None
    if isinstance(value, str) and _reads_as_number(value):
        # only where every arm is a number (or None): `int | Literal["auto"]` and `str | int` take strings; a
        # string that is no number at all keeps pydantic's own message (`input should be a valid integer`)
        arms = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
        numbers = [a for a in arms if a is not type(None)]
        return (where, value) if numbers and all(a in (int, float) for a in numbers) else None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if _is_union(annotation):
        return next((found for a in args if a is not type(None)
                     if (found := _bool_as_number(a, value, where, seen)) is not None), None)
    if origin in (list, tuple) and isinstance(value, (list, tuple)) and args:
        elements = args[:1] * len(value) if origin is list or args[-1] is Ellipsis else args
        return next((found for i, (a, v) in enumerate(zip(elements, value))
                     if (found := _bool_as_number(a, v, f"{where}.{i}", seen)) is not None), None)
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return next((found for k, v in value.items()
                     if (found := _bool_as_number(args[1], v, f"{where}.{k}", seen)) is not None), None)
    return None


def can_hold_int(annotation: Any) -> bool:
    """Whether a value of `annotation` may hold an int anywhere inside (Any, a model or an unknown type: yes)."""
    if annotation in (str, bool, float, type(None)) or typing.get_origin(annotation) is typing.Literal:
        return False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (list, tuple, dict, set, frozenset) or _is_union(annotation):
        return any(can_hold_int(a) for a in args if a is not Ellipsis) if args else True
    return True


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


INT64_LIMIT = 2**63


def _huge_int(value: Any, where: str, seen: set[int]) -> tuple[str, int] | None:
    """(key path, digit count) of the first integer in `value` that does not fit in int64, or None. Lists and
    dicts are walked once each by identity (shared values are not re-walked). Nested sections check themselves
    (each a StrictModel)."""
    if isinstance(value, int) and not isinstance(value, bool):
        # digits from the bit length: str() of an int past 4,300 digits raises (a hex literal can be one)
        return (where, int(abs(value).bit_length() * 0.30102999566398120) + 1) if abs(value) >= INT64_LIMIT else None
    if not isinstance(value, (list, tuple, dict)) or id(value) in seen:
        return None
    seen.add(id(value))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return next((found for k, v in items if (found := _huge_int(v, f"{where}.{k}", seen)) is not None), None)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


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


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxother = 3, 80, 80


def _allowed_keys(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """Walk `model` along `loc` (minus the last element) and list the field names allowed there.

    List indices, dict keys and union tags in `loc` are not fields: they keep the models reached so far (a
    tag such as `embedded` narrows them to the union member whose `kind` default it is).
    """
    current = [model] if model is not None else []
    for part in loc[:-1]:
        fields = [f for m in current if (f := _field_named(m, str(part))) is not None]
        if fields:
            current = [m for f in fields for m in _models_in(f.annotation)]
            continue
        tagged = [m for m in current if any(f.default == part for f in m.model_fields.values())]
        current = tagged or current
    return list(dict.fromkeys(f.alias or name for m in current for name, f in m.model_fields.items()))


def _field_named(model: type[BaseModel], key: str):
    """A model's field by name or by alias (params use aliases where a name would shadow pydantic's API)."""
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation such as `Foo`, `Foo | None`, `list[Foo]`, `list[A | B]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in (getattr(annotation, "__args__", ()) or ()) for m in _models_in(arg)]


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
            # A cross-field check on a whole section: its message already names the keys and values, either
            # relative to the section (`tp: ...`, `weights.code: ...`: starts with a field name) or as full
            # paths (`parallel.tp: ...`).
            for part in err["msg"].removeprefix("Value error, ").split("; "):
                key, sep, rest = part.partition(": ")
                if sep and " " not in key and key.split(".")[0] in _allowed_keys(model, loc + ("",)):
                    lines.append(f"{path}.{key}: {rest}" if loc else f"{key}: {rest}")
                elif sep and "." in key and " " not in key:
                    lines.append(f"{key}: {rest}")
                else:
                    lines.append(f"{path}: {part}")
            continue
        if kind in _BOUND_PHRASES:
            ctx_key, phrase = _BOUND_PHRASES[kind]
            reason = phrase.format(err.get("ctx", {}).get(ctx_key))
        else:
            reason = err["msg"][0].lower() + err["msg"][1:]
            reason = reason.removeprefix("value error, ")
        # reprlib bounds the work: a YAML alias bomb expands to ~10^8 items that a plain repr would walk.
        try:
            shown = _SHORT_REPR.repr(got)
        except ValueError:  # an int past Python's 4,300-digit str() limit (`seed: 0xfff…`: hex has no limit)
            shown = f"an integer of {int(got.bit_length() * 0.30102999566398120) + 1:,} digits"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{path}: {reason}, got {shown}")
    return lines


def require_unique(values: list[str], what: str, show: int = 20) -> None:
    """Raise ValueError naming the repeated values (for validators of lists keyed by a name or id)."""
    dupes = sorted({v for v in values if values.count(v) > 1})
    if dupes:
        raise ValueError(f"{what} must be unique; repeated: {', '.join(dupes[:show])}")


def line_cap_field() -> Any:
    """The `max_line_bytes` field of a jsonl files source (instruct, prefer_data, multimodal): the readers' memory
    bound per line, as ingest's `max_record_bytes` is ingest's."""
    return Field(64 * 1024 * 1024, ge=16, description="Memory bound of the reader: a jsonl line longer than this "
                 "many (decompressed) bytes, or a Parquet row whose values decode to more, is one dropped row "
                 "(`record_too_large`), skipped without being held.")
