"""`python -m tasks check` beside a Hugging Face checkpoint reads its config.json as mix and sft will: a chosen
sequence length past the checkpoint's positions passed `check` and stopped mix after DVC had removed its outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def check(folder, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tasks", "check", "--set", "model.init.kind=hf",
                           f"model.init.path={folder}", *overrides], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("override,key", [("mix.seq_len=2048", "mix.seq_len"), ("sft.seq_len=4096", "sft.seq_len")])
def test_a_chosen_length_past_the_checkpoints_positions_fails_check(tiny_hf_folder, override, key):
    limit = json.loads((tiny_hf_folder / "config.json").read_text())["max_position_embeddings"]
    assert int(override.partition("=")[2]) > limit
    proc = check(tiny_hf_folder, override)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{key}: {override.partition('=')[2]} is longer than the checkpoint's max_position_embeddings {limit}" \
        in proc.stderr


def test_a_length_that_fits_passes_and_a_missing_checkpoint_is_named(tiny_hf_folder, tmp_path):
    proc = check(tiny_hf_folder, "mix.seq_len=64")
    assert proc.returncode == 0, proc.stderr
    proc = check(tmp_path / "not-downloaded-yet")
    assert proc.returncode == 2 and "not-downloaded-yet/config.json" in proc.stderr, proc.stderr


@pytest.mark.parametrize("change,said", [({"model_type": "gpt2"}, "model_type `gpt2` is not supported"),
                                         ({"num_attention_heads": 5, "num_key_value_heads": 2}, "not a multiple")])
def test_a_shape_pretrain_would_refuse_fails_check(tiny_hf_folder, tmp_path, change, said):
    # check passed these and mix ran before pretrain refused the checkpoint (a hostile probe)
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_hf_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    proc = check(folder)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr


@pytest.mark.parametrize("seq_len,limit,refused", [
    (None, 1024, False), (1024, 1024, False), (512, None, False), (1025, 1024, True), (4096, 2048, True)])
def test_sft_stage_and_check_share_one_seq_len_rule(seq_len, limit, refused):
    # one wording for `check` and the sft stage (tasks/train/objectives/sft.py raises it); the length is refused,
    # never cut, when the user chose it past the checkpoint's positions
    from specs.init import sft_seq_len_problem

    problem = sft_seq_len_problem(seq_len, limit)
    assert (problem is not None) == refused
    if refused:
        assert problem.startswith(f"sft.seq_len: {seq_len} is longer than") and f"at most {limit}" in problem
