"""Hostile params beyond the fuzz suite (tests/faults/test_params_fuzz.py): integers past 64 bits at every integer
key, alias bombs where a list is accepted or inside a `--set` value, control characters in names. Each is a
ParamsError naming the key, in bounded time, never a later overflow in torch, numpy or Arrow."""

from __future__ import annotations

import time

import pytest

from specs import ParamsError, load_params
from specs.params import parse_override, validate_params
from tests.conftest import REPO
from tests.faults.test_params_fuzz import mutate

DEFAULTS = load_params(REPO / "params.yaml").dump()
UNION_TAGS = {"embedded", "files"}


def int_leaves(node, path=()):
    """Every integer (not boolean) leaf of the default params, as a key path."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from int_leaves(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from int_leaves(value, path + (i,))
    elif isinstance(node, int) and not isinstance(node, bool):
        yield path


def keys_named(problems):
    """The key path of each problem line, union tags (`sources.0.embedded.x`) dropped."""
    return {".".join(p for p in line.partition(": ")[0].split(".") if p not in UNION_TAGS) for line in problems}


INT_LEAVES = list(int_leaves(DEFAULTS))


def test_an_integer_past_64_bits_is_refused_at_every_integer_key():
    assert len(INT_LEAVES) > 30  # the walk found the tree's integers (steps, seeds, sizes, budgets...)
    unnamed = []
    for i, path in enumerate(INT_LEAVES):
        value = 10**100 if i % 2 else -(10**30)  # both signs, one validation per key (~200 keys, ~8 s)
        with pytest.raises(ParamsError) as err:
            validate_params(mutate(DEFAULTS, path, value))
        if ".".join(map(str, path)) not in keys_named(err.value.problems):
            unnamed.append((path, value, err.value.problems))
    assert not unnamed, unnamed[:3]


def test_the_64_bit_rule_names_itself_where_no_tighter_bound_applies():
    with pytest.raises(ParamsError) as err:
        load_params(REPO / "params.yaml", [f"pretrain.steps={10**100}"])
    assert err.value.problems == ["pretrain.steps: must fit in 64 bits (|n| < 2^63), got an integer of 101 digits"]
    # the largest int64 is a (long) run, not an error; a bounded key keeps its own, tighter message
    assert load_params(REPO / "params.yaml", [f"pretrain.steps={2**63 - 1}"]).pretrain.steps == 2**63 - 1
    with pytest.raises(ParamsError, match=r"model.n_layers: must be ≤ 256"):
        load_params(REPO / "params.yaml", [f"model.n_layers={10**100}"])


def bomb(levels: int) -> str:
    """A YAML flow list whose aliases stand for 10^(levels+1) strings (the "billion laughs" shape)."""
    anchors = ["&a0 [x,x,x,x,x,x,x,x,x,x]"] + [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]"
                                               for i in range(1, levels + 1)]
    return "[" + ",".join(anchors) + "]"


@pytest.mark.parametrize("key", ["ingest.sources.0.paths", "run.name", "mix.weights", "zz_unknown"])
def test_an_alias_bomb_in_an_override_is_refused_quickly(key):
    source = ["ingest.sources.0={name: literature, kind: files, paths: [a.txt]}"] if "sources" in key else []
    start = time.perf_counter()
    with pytest.raises(ParamsError) as err:
        load_params(REPO / "params.yaml", source + [f"{key}={bomb(7)}"])  # 10^8 strings by reference
    assert time.perf_counter() - start < 5
    assert all(len(p) < 300 for p in err.value.problems), err.value.problems


def test_an_alias_bomb_in_a_list_field_of_the_file_is_refused_quickly(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    text = text.replace("  sources:\n", "  sources:\n  - {name: notes, kind: files, paths: *a7}\n", 1)
    path = tmp_path / "params.yaml"
    path.write_text("\n".join(levels) + "\n" + text, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert time.perf_counter() - start < 5
    assert any(p.startswith("ingest.sources.0.files.paths.0: input should be a valid string") and len(p) < 300
               for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("item", ["run.name=demo\u202egnp", "ingest.sources.0.name=lit\u0000x",
                                  "ingest.sources.0.name=lit\u200bx", "run.name=a\nb"])
def test_control_and_bidi_characters_in_names_are_refused(item):
    # names become file names, wandb/Prefect run names and model-card text: a pattern keeps them plain
    key = item.partition("=")[0]
    try:
        parse_override(item)
    except ParamsError as err:  # YAML itself refuses some (NUL): still a ParamsError naming the key
        assert err.problems[0].startswith(key)
        return
    with pytest.raises(ParamsError) as err:
        load_params(REPO / "params.yaml", [item])
    assert key in keys_named(err.value.problems), err.value.problems
