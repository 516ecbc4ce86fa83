"""Hostile params.yaml and chat templates, second round: scalars YAML 1.1 (PyYAML) and YAML 1.2 (DVC's ruamel)
read differently, params.yaml that is not a regular file or is huge, and `lipsum` in a chat template. Each is a
ParamsError (or a TemplateError) naming the file or key, in bounded time, before the work."""

from __future__ import annotations

import os
import time

import pytest
from jinja2.exceptions import TemplateError

from specs import ParamsError, load_params
from specs.params import MAX_PARAMS_BYTES, read_params_file
from tasks.train.inputs.chat import render_jinja
from tests.conftest import REPO

SHIPPED = (REPO / "params.yaml").read_text(encoding="utf-8")


def write(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def replaced(old: str, new: str) -> str:
    assert SHIPPED.count(old) >= 1, old
    return SHIPPED.replace(old, new, 1)


# ------------------------------------------------------------------------------------------------ F9: YAML 1.1/1.2
@pytest.mark.parametrize("old,new,key,readings", [
    ("seed: 1234", "seed: 010", "run.seed", ("8", "10")),
    ("seed: 1234", "seed: 1:20:00", "run.seed", ("4800", "'1:20:00'")),
    ("seed: 1234", "seed: 0o17", "run.seed", ("'0o17'", "15")),
])
def test_a_scalar_yaml_1_1_and_dvc_read_differently_is_refused_naming_both(tmp_path, old, new, key, readings):
    with pytest.raises(ParamsError) as err:
        load_params(write(tmp_path, replaced(old, new)))
    [problem] = err.value.problems
    assert problem.startswith(f"{key}: ") and all(r in problem for r in readings), problem


def test_yes_is_refused_where_dvc_reads_a_string(tmp_path):
    text = SHIPPED.replace("\nrun:\n", "\nrun:\n  zz_flag: yes\n", 1)
    assert text != SHIPPED
    with pytest.raises(ParamsError) as err:
        read_params_file(write(tmp_path, text))
    assert err.value.problems == ["run.zz_flag: YAML 1.1 reads True, DVC (YAML 1.2) reads 'yes': quote it "
                                  "or write the value as DVC reads it"], err.value.problems


def test_the_readings_are_compared_without_walking_alias_bombs(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, 010]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    start = time.perf_counter()
    with pytest.raises(ParamsError) as err:
        read_params_file(write(tmp_path, "\n".join(levels) + "\n" + SHIPPED))
    assert time.perf_counter() - start < 5
    assert err.value.problems[0].startswith("a0.9: YAML 1.1 reads 8, DVC (YAML 1.2) reads 10"), err.value.problems


def test_a_file_dvc_cannot_parse_is_refused(tmp_path):
    # libyaml stops every DVC command on `c:,` in a flow mapping, where PyYAML reads null
    with pytest.raises(ParamsError) as err:
        read_params_file(write(tmp_path, "a: {b: 1, c:,}\n" + SHIPPED))
    assert err.value.problems == ["line 1, column 12: DVC's YAML reader (ruamel) cannot read it: found unexpected "
                                  "':'"], err.value.problems


@pytest.mark.parametrize("text", ["", "# only a comment\n", "~\n"])
def test_an_empty_file_is_still_an_empty_mapping(tmp_path, text):
    assert read_params_file(write(tmp_path, text)) == {}


def test_the_shipped_params_read_the_same_both_ways():
    assert read_params_file(REPO / "params.yaml")["run"]["seed"] == 1234


# ------------------------------------------------------------------------------------------------ F10: not a file
def test_a_link_to_dev_zero_is_refused_before_reading(tmp_path):
    path = tmp_path / "params.yaml"
    path.symlink_to("/dev/zero")
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert err.value.problems == [f"{path}: not a regular file (a character device)"]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "params.yaml"
    os.mkfifo(path)
    start = time.perf_counter()
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert time.perf_counter() - start < 5
    assert err.value.problems == [f"{path}: not a regular file (a FIFO)"]


def test_a_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "params.yaml"
    with open(path, "wb") as f:   # sparse: its size, not its bytes, is what is refused
        f.truncate(300 * 2**20)
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert err.value.problems == [f"{path}: {300 * 2**20:,} bytes, over the {MAX_PARAMS_BYTES:,} allowed"]


def test_a_directory_is_still_refused(tmp_path):
    with pytest.raises(ParamsError, match="not a regular file|cannot be read"):
        load_params(tmp_path)


# ------------------------------------------------------------------------------------------------ F8: lipsum
@pytest.mark.parametrize("template", ["{{ lipsum(100000) }}", "{% if lipsum(1000000) %}x{% endif %}",
                                      "{{ lipsum(10, false, 1000000, 1000000) }}"])
def test_lipsum_is_refused_before_the_work(template):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    start = time.perf_counter()
    with pytest.raises(TemplateError):
        render_jinja(template, msgs)
    assert time.perf_counter() - start < 1


def test_a_number_yaml_1_1_reads_as_a_string_is_read_as_dvc_reads_it(tmp_path):
    # `1e-4` (no dot) is a string in YAML 1.1 and the float DVC reads in 1.2: the same number, not refused
    assert "lr: 0.003" in SHIPPED
    assert load_params(write(tmp_path, replaced("lr: 0.003", "lr: 3e-3"))).pretrain.optim.lr == 0.003
    with pytest.raises(ParamsError) as err:   # a string field gets DVC's float, and says so
        load_params(write(tmp_path, replaced("name: forgeline-demo", "name: 1e3")))
    assert any(p.startswith("run.name: ") for p in err.value.problems), err.value.problems


# ------------------------------------------------------------------------------------------------ F11: huge ints
def test_an_integer_past_pythons_digit_limit_names_its_key(tmp_path):
    with pytest.raises(ParamsError) as err:
        load_params(write(tmp_path, replaced("seed: 1234", "seed: " + "9" * 5000)))
    assert err.value.problems == ["run.seed (line 4, column 9): an integer of 5,000 digits: must fit in 64 bits "
                                  "(|n| < 2^63)"], err.value.problems


# ------------------------------------------------------------------------------------------------ F12: !!binary
def test_binary_is_refused_where_a_string_is_expected(tmp_path):
    # no key takes bytes; pydantic decoded `!!binary aGVsbG8=` into the run name 'hello'
    with pytest.raises(ParamsError) as err:
        load_params(write(tmp_path, replaced("name: forgeline-demo", "name: !!binary aGVsbG8=")))
    assert err.value.problems == ["line 3, column 9: could not determine a constructor for the tag "
                                  "'tag:yaml.org,2002:binary'"], err.value.problems
