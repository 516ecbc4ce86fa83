"""Bad params are always refused up front with a ParamsError naming the key path, never another exception.

Mutations of the project's own params (every key written out, plus a `files` source so that section is covered
too): unknown keys at every level, wrong types and out-of-range numbers at every leaf, impossible parallel
layouts, and arbitrary garbage anywhere, through `validate_params`, `load_params` with `--set`-style overrides,
and (two cases) the `python -m tasks check` command.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any, Iterator

import annotated_types as at
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from specs import Params, ParamsError, load_params
from specs.params import parse_override, validate_params
from tasks.train.planning.planner import validate_layout
from specs.architecture import ffn_hidden_size
from tests.conftest import REPO

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
UNION_TAGS = {"embedded", "files"}  # pydantic puts a discriminated union's tag into error paths after the index
UNKNOWN = "zz_unknown_key"
# Keys that read a YAML boolean on purpose (older params wrote `compile: true`; it means "on"): a bool is not a
# wrong value there. Matched on the path's last two keys, wherever the section sits (pretrain, sft, prefer).
BOOL_READ_AS_LITERAL = {("speed", "compile")}


def base_params() -> dict[str, Any]:
    """The repo's params with every default written out, plus a user `files` source (all its keys set)."""
    data = load_params(REPO / "params.yaml").dump()
    data["ingest"]["sources"].append({"name": "notes", "kind": "files", "paths": ["notes/*.jsonl"],
                                      "fields": {"text": "body", "id": "uid", "meta": ["tag"], "media": "img"}})
    if data["mix"]["weights"]:
        data["mix"]["weights"]["notes"] = 0.0
    return Params.model_validate(data).dump()


BASE = base_params()


# ---------------------------------------------------------------------------------------------- the params tree
def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _arms(annotation: Any) -> tuple:
    """The alternatives of a union (Optional included), else the annotation itself."""
    annotation = _strip(annotation)
    args = typing.get_args(annotation)
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return tuple(_strip(a) for a in args) if is_union else (annotation,)


def _model_for(annotation: Any, value: Any) -> type[BaseModel] | None:
    """The model a dict value is validated as (a discriminated union picks the member whose tag matches)."""
    models = [a for a in _arms(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    for m in models:
        if len(models) == 1 or any(f.default == value.get("kind") for f in m.model_fields.values()):
            return m
    return None


def nodes(annotation: Any, value: Any, path: tuple = (), field: Any = None) -> Iterator[tuple]:
    """Every node of the params data: (path, declared annotation, FieldInfo or None, value)."""
    yield path, annotation, field, value
    model = _model_for(annotation, value) if isinstance(value, dict) else None
    if model is not None:
        for name, f in model.model_fields.items():
            key = f.alias or name
            if key in value:
                yield from nodes(f.annotation, value[key], path + (key,), f)
        return
    ann = next((a for a in _arms(annotation) if typing.get_origin(a) in (list, tuple, dict)), None)
    if ann is None:
        return
    args = typing.get_args(ann)
    if typing.get_origin(ann) is dict and isinstance(value, dict):
        for k, v in value.items():
            yield from nodes(args[1], v, path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from nodes(args[0] if len(args) != len(value) or args[-1] is Ellipsis else args[i], v, path + (i,))


NODES = list(nodes(Params, BASE))
DICT_NODES = [path for path, _, _, v in NODES if isinstance(v, dict)]
LEAVES = [(path, ann, f) for path, ann, f, v in NODES if path and not isinstance(v, (dict, list))]
CONTAINERS = [(path, ann, f) for path, ann, f, v in NODES if path and isinstance(v, (dict, list))]


def bounds(field: Any) -> list[tuple[str, float]]:
    """(kind, limit) for each numeric bound of a field: ge/gt/le/lt."""
    out = []
    for m in getattr(field, "metadata", []):
        for kind in ("ge", "gt", "le", "lt"):
            if isinstance(m, getattr(at, kind.capitalize())):
                out.append((kind, getattr(m, kind)))
    return out


def numeric(annotation: Any) -> bool:
    return bool(set(_arms(annotation)) & {int, float})


BOUNDED = [(path, ann, f) for path, ann, f in LEAVES if numeric(ann) and bounds(f)]


def mutate(data: dict, path: tuple, value: Any) -> dict:
    data = copy.deepcopy(data)
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def line_key(line: str) -> tuple[str, str]:
    """(key path without union tags, reason) of one problem line."""
    key, _, reason = line.partition(": ")
    parts = key.split(".")
    return ".".join(p for i, p in enumerate(parts) if not (p in UNION_TAGS and i and parts[i - 1].isdigit())), reason


def named(problems: list[str], path: tuple) -> bool:
    """Whether a problem line names `path`: exactly, a key inside it, or its section plus the key's name."""
    target, leaf = dotted(path), str(path[-1])
    for key, reason in map(line_key, problems):
        if key == target or key.startswith(target + ".") or (target.startswith(key + ".") and leaf in reason):
            return True
    return False


def refused(data: dict) -> list[str]:
    """The problems validate_params reports; any exception other than ParamsError fails the test."""
    with pytest.raises(ParamsError) as err:
        validate_params(data)
    assert err.value.problems and all(": " in p for p in err.value.problems), err.value.problems
    return err.value.problems


# ---------------------------------------------------------------------------------------------- mutations
@pytest.mark.parametrize("path", DICT_NODES, ids=[dotted(p) or "<root>" for p in DICT_NODES])
def test_unknown_key_at_every_level_is_named(path):
    problems = refused(mutate(BASE, path + (UNKNOWN,), [1]) if path else {**BASE, UNKNOWN: 1})
    assert named(problems, path + (UNKNOWN,)), problems


def wrong_values(annotation: Any) -> list[Any]:
    """Values no field of this declared type accepts (numeric strings, which pydantic converts, left out)."""
    arms = set(_arms(annotation))
    origins = {typing.get_origin(a) for a in arms}
    if arms & {int, float}:
        return ["seven", [1], {"a": 1}, True, math.inf] + ([2.5] if float not in arms else [math.nan])
    if bool in arms:
        return ["maybe", 2, [True], {"a": 1}, 0.5]
    if str in arms or typing.Literal in origins:
        return [7, 1.5, ["x"], {"a": 1}, True]
    if origins & {list, tuple}:
        return [7, "x", {"a": 1}]
    return [7, "x", [1]]  # a section or a dict-valued field


@pytest.mark.slow
def test_wrong_type_at_every_key_is_named():
    # Exhaustive (every leaf and section x every wrong value, ~1k validations; 61 s on a 2-core AVX2 machine, hence
    # slow): a sample misses most keys.
    unnamed = []
    for path, annotation, _ in LEAVES + CONTAINERS:
        for value in wrong_values(annotation):
            if isinstance(value, bool) and tuple(path[-2:]) in BOOL_READ_AS_LITERAL:
                continue
            problems = refused(mutate(BASE, path, value))
            if not named(problems, path):
                unnamed.append((dotted(path), value, problems))
    assert not unnamed, unnamed[:5]


def test_every_bound_is_enforced_at_its_edge():
    for path, annotation, field in BOUNDED:
        is_int = float not in _arms(annotation)
        for kind, limit in bounds(field):
            step = (1 if is_int else abs(limit) * 1e-9 or 1e-9) if kind in ("ge", "le") else 0
            outside = limit - step if kind in ("ge", "gt") else limit + step
            problems = refused(mutate(BASE, path, outside))
            assert any(key == dotted(path) and reason.startswith("must be")
                       for key, reason in map(line_key, problems)), (dotted(path), outside, problems)


@FUZZ
@given(data=st.data())
def test_out_of_range_number_is_named_with_its_bound(data):
    path, annotation, field = data.draw(st.sampled_from(BOUNDED), label="leaf")
    kind, limit = data.draw(st.sampled_from(bounds(field)), label="bound")
    is_int = float not in _arms(annotation)
    step = data.draw(st.integers(1, 10**30) if is_int else st.floats(1e-6, 1e30), label="step")
    if kind in ("gt", "lt"):  # an exclusive bound is itself outside
        step *= data.draw(st.sampled_from([0, 1]), label="at the bound")
    outside = limit - step if kind in ("ge", "gt") else limit + step
    problems = refused(mutate(BASE, path, outside))
    assert any(key == dotted(path) and reason.startswith("must be") for key, reason in map(line_key, problems)), \
        problems


@FUZZ
@given(layers=st.integers(1, 12), heads=st.sampled_from([1, 2, 4, 6, 8, 12]), kv_div=st.sampled_from([1, 2, 3, 4]),
       dp=st.integers(1, 4), tp=st.integers(1, 8), pp=st.integers(1, 8), zero=st.integers(0, 3),
       world=st.integers(1, 64))
def test_parallel_layouts_are_checked_both_ways(layers, heads, kv_div, dp, tp, pp, zero, world):
    assume(heads % kv_div == 0)
    model = {**BASE["model"], "n_layers": layers, "n_heads": heads, "n_kv_heads": heads // kv_div,
             "d_model": heads * 16}
    data = {**BASE, "model": model, "parallel": {**BASE["parallel"], "dp": dp, "tp": tp, "pp": pp, "zero_stage": zero}}
    ffn = ffn_hidden_size(heads * 16, model["ffn_multiple_of"])   # the SwiGLU width tp must divide too
    # pipeline stages need not divide the layers (DeepSpeed balances them), but each needs a block
    bad_tp, bad_pp, bad_zero = heads % tp or (heads // kv_div) % tp or ffn % tp, pp > layers, pp > 1 and zero > 1
    if not (bad_tp or bad_pp or bad_zero):
        params = validate_params(data)
        assert params.parallel.world_size == dp * tp * pp
        # The world size is not a params key: the launcher / planner compares dp·tp·pp with it.
        mismatch = [p for p in validate_layout(params.model, params.parallel, world) if "world size" in p]
        assert bool(mismatch) == (dp * tp * pp != world)
        assert all(p.startswith("parallel: dp × tp × pp") for p in mismatch)
        return
    problems = refused(data)
    if bad_zero:  # ParallelSpec refuses itself, so the cross-section layout check does not run
        assert any(p.startswith("parallel: zero_stage") for p in problems), problems
        return
    assert any(p.startswith("parallel.tp: must divide") for p in problems) == bool(bad_tp), problems
    assert any(p.startswith("parallel.pp: at most") for p in problems) == bool(bad_pp), problems


KEYS = st.one_of(st.text(max_size=8), st.integers(), st.none(), st.booleans(), st.sampled_from(["name", "kind", "tp"]))
GARBAGE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40), st.floats(), st.text(max_size=20),
              st.sampled_from(["\ud800", "", "2001-13-45", "1e-5", "files", "embedded", "tiny"])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=12)


@FUZZ
@given(data=st.data())
def test_garbage_anywhere_is_a_params_error_or_valid(data, tmp_path_factory):
    path = data.draw(st.sampled_from([p for p, *_ in NODES if p] + [p + (UNKNOWN,) for p in DICT_NODES]), label="path")
    value = data.draw(GARBAGE, label="value")
    try:
        params = validate_params(mutate(BASE, path, value))
    except ParamsError as exc:
        assert exc.problems and all(isinstance(p, str) and ": " in p for p in exc.problems)
        return
    # Some garbage is valid (a string where a string goes): written out as params.yaml is (see make_project),
    # it loads back as the same params.
    params_file = tmp_path_factory.getbasetemp() / "garbage-params.yaml"
    params_file.write_text(yaml.safe_dump(params.dump(), sort_keys=False, allow_unicode=True))
    assert load_params(params_file) == params, (path, value)


@FUZZ
@given(data=st.data())
def test_overrides_refuse_like_the_file(data, tmp_path_factory):
    path, annotation, _ = data.draw(st.sampled_from(LEAVES), label="leaf")
    value = data.draw(st.sampled_from(wrong_values(annotation)), label="value")
    params_file = tmp_path_factory.getbasetemp() / "params.yaml"
    if not params_file.exists():
        params_file.write_text(yaml.safe_dump(BASE, sort_keys=False, allow_unicode=True))
    with pytest.raises(ParamsError) as err:  # `--set key.path=<json>`: JSON is YAML for these values
        load_params(params_file, [f"{dotted(path)}={json.dumps(value)}"])
    assert err.value.source.endswith("(with overrides)")
    assert named(err.value.problems, path), err.value.problems


# ---------------------------------------------------------------------------------------------- hostile files
def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    path = tmp_path / "params.yaml"
    path.write_text("\n".join(levels) + "\nrun: {name: *a7}\n")  # 10^8 strings, all by reference
    start = time.perf_counter()
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert time.perf_counter() - start < 5  # a full repr of the value for the message took ~20 s
    problems = err.value.problems
    assert any(p.startswith("run.name: input should be a valid string") and len(p) < 200 for p in problems)



@pytest.mark.parametrize("content", [b"run:\n  name: caf\xe9\n", b"run: " + b"[" * 1_000, b"run: {seed: 2001-13-45}\n",
                                     b"run: {seed: !!int x}\n", b"run: {seed: 0x_}\n"],
                         ids=["latin1", "deep", "bad-date", "bad-int-tag", "bad-hex"])
def test_hostile_params_file_is_a_params_error(tmp_path, content):
    path = tmp_path / "params.yaml"
    path.write_bytes(content)
    with pytest.raises(ParamsError):
        load_params(path)


def test_params_path_that_is_a_directory_is_a_params_error(tmp_path):
    with pytest.raises(ParamsError):
        load_params(tmp_path)


def test_duplicate_key_in_params_file_is_named(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(BASE, sort_keys=False) + "run: {seed: 2}\n")  # a second `run` section
    with pytest.raises(ParamsError, match="duplicate key 'run'"):
        load_params(path)


@pytest.mark.parametrize("item", ["run.seed=2001-13-45", "run.seed=!!float x", "run.name=" + "[" * 1_000],
                         ids=["bad-date", "bad-float-tag", "deep"])
def test_hostile_override_value_is_a_params_error(item):
    with pytest.raises(ParamsError):
        parse_override(item)


# ---------------------------------------------------------------------------------------------- the CLI
def check(*args: str, params: Path | None = None) -> subprocess.CompletedProcess:
    where = ["--params", str(params)] if params else []  # a global option: before the command
    return subprocess.run([sys.executable, "-m", "tasks", *where, "check", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


def test_cli_check_names_bad_override_keys_without_traceback():
    proc = check("--set", "parallel.pp=2", "--set", "parallel.zero_stage=3", "--set", "ingest.sources.0.max_docs=0",
                 "--set", "model.dropout=true")
    assert proc.returncode == 2
    assert "parallel: zero_stage 3 is incompatible with pipeline parallelism" in proc.stderr
    assert "ingest.sources.0.embedded.max_docs: must be ≥ 1, got 0" in proc.stderr
    assert "model.dropout: input should be a number, not a boolean, got True" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_check_names_bad_file_keys_without_traceback(tmp_path):
    data = mutate(mutate(BASE, ("pretrain", "optim", "lrr"), 0.1), ("pretrain", "stability", "window"), "wide")
    data = mutate(data, ("model", "rope_theta"), math.inf)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    proc = check(params=path)
    assert proc.returncode == 2
    for expected in ("pretrain.optim.lrr: unknown key (did you mean 'lr'?)",
                     "pretrain.stability.window: input should be a valid integer",
                     "model.rope_theta: input should be a finite number, got inf"):
        assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
