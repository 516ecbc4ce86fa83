"""benchmarks/gpu/: the one-script GPU run, checked without a GPU — shell syntax, every Python entry it calls exists
and takes the flags it passes, the time plan (a hanging part cannot starve the later ones), the stage timing's
clock and job (the stage's own defaults), the table built from known parts, and (slow) the whole script in its
CPU dry run inside a Python that has only the GPU box's packages."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / "benchmarks" / "gpu"
sys.path.insert(0, str(REPO))

from benchmarks.gpu import report  # noqa: E402  (benchmarks is no installed package)
from benchmarks.gpu.stage_steps import (TIMING_SETTINGS, StepClock, StopTiming, apply_overrides,  # noqa: E402
                                        parse_sets)

RUN_SH = (GPU / "run.sh").read_text()


def calls(script: str) -> dict[str, set[str]]:
    """Python entry -> the flags run.sh passes it (continuation lines joined; the TPUT arrays go to the
    throughput benchmark and the STALL arrays to the checkpoint-stall one, whose every call expands them)."""
    text = script.replace("\\\n", " ")
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        for m in re.finditer(r'"\$PY" (benchmarks/[\w/]+\.py)([^;\n]*)', line):
            found.setdefault(m.group(1), set()).update(re.findall(r"(?<![\w-])--[a-z][\w-]*", m.group(2)))
    for array, entry in (("TPUT", "benchmarks/pretrain_throughput.py"), ("STALL", "benchmarks/checkpoint_stall.py")):
        bodies = re.findall(rf"^\s*{array}=\((.*?)\)", script, re.M | re.S)
        found[entry].update(f for b in bodies for f in re.findall(r"--[a-z][\w-]*", b))
    return found


def test_scripts_parse_and_every_entry_takes_its_flags():
    for name in ("run.sh", "prepare_wheels.sh"):
        proc = subprocess.run(["bash", "-n", str(GPU / name)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    entries = calls(RUN_SH)
    assert {"benchmarks/pretrain_throughput.py", "benchmarks/gpu/pretrain_smoke.py", "benchmarks/gpu/snapshot.py",
            "benchmarks/gpu/report.py", "benchmarks/checkpoint_stall.py"} <= set(entries)
    assert {"--shape", "--device", "--json", "--runs", "--zero", "--set", "--compile-backend", "--seq"} <= \
        entries["benchmarks/pretrain_throughput.py"]
    assert {"--shape", "--every", "--json"} <= entries["benchmarks/checkpoint_stall.py"]
    for entry, flags in entries.items():
        proc = subprocess.run([sys.executable, entry, "--help"], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"{entry}: {proc.stderr[-1500:]}"
        missing = {f for f in flags if not re.search(rf"{re.escape(f)}\b", proc.stdout)}
        assert not missing, f"{entry} does not take {sorted(missing)}"


def test_the_flag_check_catches_a_wrong_flag():
    """The extraction above sees what a typo would break, in a call and in an array."""
    script = RUN_SH.replace("--out \"$PARTS/pretrain.json\"", "--output \"$PARTS/p.json\"")
    assert "--output" in calls(script)["benchmarks/gpu/pretrain_smoke.py"]
    script = RUN_SH.replace("STALL=(--shape tiny", "STALL=(--shapes tiny")
    assert "--shapes" in calls(script)["benchmarks/checkpoint_stall.py"]


def plan() -> tuple[list[tuple[str, int]], int, int]:
    entries = re.search(r"^PLAN=\((.*)\)", RUN_SH, re.M).group(1).split()
    budget = int(re.search(r"^BUDGET_S=(\d+)", RUN_SH, re.M).group(1))
    reserve = int(re.search(r"^RESERVE_S=(\d+)", RUN_SH, re.M).group(1))
    return [(e.split(":")[0], int(e.split(":")[1])) for e in entries], budget, reserve


def test_the_plan_fills_the_budget_with_the_reported_parts_in_order():
    shares, budget, reserve = plan()
    assert sum(s for _, s in shares) == budget - reserve and budget == report.BUDGET_S == 480
    assert tuple(n for n, _ in shares) == report.PARTS
    called = re.findall(r"^part ([\w-]+) ", RUN_SH, re.M)
    assert called == list(report.PARTS)


def test_a_hanging_part_cannot_take_the_later_parts_shares(tmp_path):
    """run.sh's own `later_shares` and `part`, on a plan of 6 + 6 + 6 s in a 20 s budget: the first part hangs
    and is stopped at its share; the second finishes early; the third gets its share plus what the second left."""
    funcs = "\n".join(m.group(0) for m in re.finditer(r"^(later_shares|part)\(\) \{.*?^\}", RUN_SH, re.M | re.S))
    harness = (f'PARTS="{tmp_path}"; BUDGET_S=20; RESERVE_S=2; PLAN=(a:6 b:6 c:6); START=$SECONDS\n{funcs}\n'
               "part a sleep 30\npart b true\npart c true\n")
    proc = subprocess.run(["bash", "-c", harness], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    status = {n: (tmp_path / f"{n}.status").read_text().split() for n in "abc"}
    assert status["a"] == ["124", "6", "6"]
    assert status["b"][0] == "0" and int(status["b"][2]) == 6
    assert status["c"][0] == "0" and int(status["c"][2]) >= 11  # 18 s less what a and b used


def test_only_runs_the_selected_parts_with_the_whole_budget(tmp_path):
    """`run.sh --only b`: a and c are recorded as unselected (the table says "not selected", not a failure)
    and b may use the whole budget, since no later part keeps a share."""
    funcs = "\n".join(m.group(0) for m in re.finditer(r"^(keep_only|later_shares|part)\(\) \{.*?^\}", RUN_SH,
                                                         re.M | re.S))
    harness = (f'PARTS="{tmp_path}"; BUDGET_S=20; RESERVE_S=2; PLAN=(a:6 b:6 c:6); ONLY="setup,b"; START=$SECONDS\n'
               f"{funcs}\nkeep_only\npart a sleep 30\npart b true\npart c sleep 30\n")
    proc = subprocess.run(["bash", "-c", harness], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    status = {n: (tmp_path / f"{n}.status").read_text().split() for n in "abc"}
    assert status["a"] == status["c"] == ["unselected", "0", "0"]
    assert status["b"][0] == "0" and int(status["b"][2]) >= 17
    assert report.status(tmp_path, "a") == ("not selected", "-")
    unselected = {p: "not selected" for p in report.PARTS}
    assert report.missing_rows(tmp_path, unselected) == []  # no row is owed by a part that was not asked
    assert [m.split(":")[0] for m in report.missing_rows(tmp_path, {**unselected, "sft": "not run"})] == ["- sft"]


def test_a_dry_run_skips_wheels_built_for_another_python(tmp_path):
    """The README runs prepare_wheels.sh (cp312 for the box) and then the dry run here: setup tried to install
    those wheels on this python and the table said `setup failed`. A dry run now skips wheels of another tag and
    says so; a real run still installs them (and fails loudly on a wrong box)."""
    setup = re.search(r"^setup\(\) \{.*?^\}", RUN_SH, re.M | re.S).group(0)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "requirements.txt").write_text("foo==1.0\n")
    (wheels / "foo-1.0-cp27-cp27mu-linux_x86_64.whl").write_bytes(b"not a zip")
    out = {}
    for dry in (1, 0):
        harness = f'PY="{sys.executable}"; WHEELS="{wheels}"; SITE="{tmp_path}/site"; DRY={dry}\n{setup}\nsetup\n'
        out[dry] = subprocess.run(["bash", "-c", harness], capture_output=True, text=True, timeout=120)
    assert out[1].returncode == 0 and "not for this python" in out[1].stdout, out[1].stdout + out[1].stderr
    assert out[0].returncode != 0  # a real run installs what was carried: a wheel it cannot install fails setup


def test_traced_steps_follow_the_timed_ones_and_stay_out_of_the_timing():
    """StepClock with a trace: the timed span ends at the last timed step, the profiler starts there and stops
    after `trace_steps` more, then the loop is stopped; the report lists the trace with its idle share."""
    class FakeTrace:
        def __init__(self):
            self.calls = []

        def start(self):
            self.calls.append(("start", len(clock.ends)))

        def stop(self, steps):
            self.calls.append(("stop", len(clock.ends), steps))
            return {"file": "t.txt", "steps": steps, "wall_s": 0.5, "device_busy_s": 0.4, "device_idle_share": 0.2}

    trace = FakeTrace()
    clock = StepClock("pretrain", warmup=1, steps=2, cuda=False, trace=trace, trace_steps=3)
    clock.step_start(0)
    for _ in range(5):
        clock.point("pretrain.step_done")
    assert trace.calls == [("start", 3)]  # after the third end: warm-up 1 + timed 2
    with pytest.raises(StopTiming):
        clock.point("pretrain.step_done")
    assert trace.calls[-1] == ("stop", 6, 3)
    r = clock.result()
    assert r["seconds"] == clock.ends[2] - clock.ends[0] and r["trace"]["device_idle_share"] == 0.2


def test_step_trace_writes_the_top_ops(tmp_path):
    """benchmarks/gpu/trace.py on CPU: the table of what ran between start and stop, no device figures."""
    from benchmarks.gpu.trace import StepTrace

    trace = StepTrace(tmp_path / "t.trace.txt", cuda=False)
    trace.start()
    a = torch.randn(64, 64)
    for _ in range(3):
        a = torch.tanh(a @ a)
    out = trace.stop(3)
    text = (tmp_path / "t.trace.txt").read_text()
    assert out["steps"] == 3 and out["device_busy_s"] is None and out["wall_s"] > 0
    assert "aten::mm" in text and "aten::tanh" in text and text.startswith("3 profiled steps")


def test_the_report_lists_traced_runs(tmp_path):
    engine = {"run": "engine", "tokens_per_s": 1.0, "first_step_s": 1.0, "warmup_s": 1.0, "peak_bytes": 1,
              "config": {"zero": 0}, "trace": {"file": "tput-124m.engine.trace.txt", "steps": 3, "wall_s": 0.25,
                                                "device_busy_s": 0.2, "device_idle_share": 0.2}}
    (tmp_path / "tput-124m.json").write_text(json.dumps({"args": {"shape": "gpt2-124m"}, "results": [engine]}))
    assert report.traces(tmp_path) == ["- tput-124m: engine (pretrain stage) ZeRO-0 — 3 steps, 0.250 s, device idle "
                                       "20.0%: `tput-124m.engine.trace.txt`"]


def test_step_clock_times_after_the_warmup_and_stops_the_loop():
    clock = StepClock("pretrain", warmup=2, steps=3, cuda=False)
    assert clock.step_start(1) == 1.0
    for _ in range(4):
        clock.point("pretrain.checkpoint_write")  # other fault points pass through
        clock.point("pretrain.step_done")
    with pytest.raises(RuntimeError, match="after 4 of 5 steps"):
        clock.result()
    with pytest.raises(StopTiming):
        clock.point("pretrain.step_done")
    r = clock.result()
    assert len(clock.ends) == 5 and r["seconds"] == clock.ends[4] - clock.ends[1]
    assert 0 <= r["first_step_s"] <= r["warmup_s"]


def test_overrides_are_dotted_yaml_values():
    data = apply_overrides({"train": {"steps": 3}}, parse_sets(["train.speed.compile=true", "parallel.zero_stage=3",
                                                                "train.speed.mixed_precision=torch_autocast"]))
    assert data == {"train": {"steps": 3, "speed": {"compile": True, "mixed_precision": "torch_autocast"}},
                    "parallel": {"zero_stage": 3}}
    with pytest.raises(ValueError, match="expected key=value"):
        parse_sets(["train.steps"])


def test_the_engine_and_sft_runs_train_the_stages_own_defaults(tmp_path):
    """What is timed is the spec's default job: only the shape, micro-batch, steps, device, the timing settings
    (no save or evaluation inside the run) and explicit --set values differ from a default PretrainJob/SFTJob."""
    from benchmarks.gpu.sft_inputs import sft_run
    from benchmarks.gpu.stage_steps import pretrain_run
    from specs.pretrain import PretrainSpec
    from specs.sft import SFTSpec
    from specs.architecture import ModelConfig
    from specs.pretrain import ModelSpec

    job = pretrain_run(tmp_path / "p", "tiny", 32, 2, 256, None, "cpu", 5, {"train.optim.lr": "0.001"})
    expected = apply_overrides(PretrainSpec().model_dump(mode="json"), {k.removeprefix("train."): v for k, v in
                                                                         TIMING_SETTINGS.items()})
    expected.update(steps=5, micro_batch_size=2)
    expected["optim"]["lr"] = 0.001
    assert job.spec.train.model_dump(mode="json") == expected
    assert job.spec.parallel.zero_stage == 0 and job.spec.parallel.accelerator == "cpu"
    cfg = ModelConfig.from_spec(ModelSpec(flavor="tiny"), 256, 32)
    sft = sft_run(tmp_path / "s", cfg, 2, "cpu", 5, {})
    expected = apply_overrides(SFTSpec().model_dump(mode="json"), {k.removeprefix("train."): v for k, v in
                                                                    TIMING_SETTINGS.items()})
    assert sft.spec.train.model_dump(mode="json") == {**expected, "steps": 5, "micro_batch_size": 2}
    rows = [json.loads(x) for x in (Path(sft.instruct_dir) / "train.jsonl").read_text().splitlines()]
    assert rows and [m["role"] for m in rows[0]["messages"]] == ["user", "assistant"]


def write_parts(folder: Path) -> None:
    (folder / "setup.status").write_text("0 12 25")
    (folder / "setup.log").write_text('noise\n{"python": "3.12.3", "cuda": "13.0", "gpus": 1, "found": '
                                      '{"torch": "2.11.0", "deepspeed": "0.19.8"}, "missing": []}\n')
    engine = {"precision": "bf16", "ds_mode": "bf16 section", "zero": 0, "compile": True, "fused_adamw": "auto",
              "stability": True}

    def run(name, tps, mfu=None, config=None):
        return {"run": name, "tokens_per_s": tps, "mfu": mfu, "peak_bytes": 3 * 2**30, "first_step_s": 20.0,
                "warmup_s": 21.5, "config": config or {"precision": "bf16", "compile": "whole model (inductor)"}}

    def tput(part, shape, runs, errors=()):
        (folder / f"{part}.status").write_text("0 80 105")
        (folder / f"{part}.json").write_text(json.dumps({"args": {"shape": shape, "seq": 1024, "batch": 16,
                                                                  "device": "cuda"}, "results": runs,
                                                         "errors": list(errors)}))
    tput("tput-124m", "gpt2-124m", [run("engine", 550_000.0, 0.48, engine), run("nanogpt-compiled", 500_000.0, 0.43),
                                    run("plain", 560_000.0)])
    tput("tput-350m", "350m", [run("engine", 200_000.0, 0.49, engine)], ["nanogpt-compiled: CUDA out of memory"])
    tput("tput-1b", "1b", [run("engine", 60_000.0, 0.5, engine), run("engine", 54_000.0, 0.45, {**engine, "zero": 3})])
    (folder / "sft.status").write_text("124 50 50")
    (folder / "sft.log").write_text("step 3\nstill compiling | slowly\n")
    (folder / "pretrain.status").write_text("1 30 45")
    (folder / "pretrain.json").write_text(json.dumps({
        "device": "NVIDIA H200", "flavor": "gpt2-124m", "param_count": 124e6, "seq_len": 1024, "micro_batch": 16,
        "precision": "bf16", "steps": 2, "losses": [9.1234, 9.0], "peak_gib": 4.5, "wall_s": 20.5,
        "checks": {"finite": True, "checkpoint": False}}))
    (folder / "ckpt-stall.status").write_text("0 35 40")
    (folder / "ckpt-stall.json").write_text(json.dumps([
        {"mode": "sync", "params": 124e6, "stalls": [2.0, 4.0], "checkpoint_bytes": 3 * 2**30},
        {"mode": "async", "params": 124e6, "stalls": [0.5, 0.2], "checkpoint_bytes": 3 * 2**30}]))


def test_table_from_parts(tmp_path):
    write_parts(tmp_path)
    rows = report.table(tmp_path, 450, dry_run=False).splitlines()
    assert rows[2] == "| setup | ok | 12 / 25 | python 3.12.3, torch 2.11.0 (CUDA 13.0), 1 GPUs, deepspeed 0.19.8 |"
    assert rows[3] == ("| tput-124m | ok | 80 / 105 | gpt2-124m seq 1024 × 16, cuda: engine ZeRO-0 550,000 tok/s; "
                       "(b′) 500,000 tok/s; (a) 560,000 tok/s |")
    assert rows[8].endswith("engine ZeRO-0 200,000 tok/s; failed: nanogpt-compiled: CUDA out of memory |")
    assert rows[4] == "| sft | timed out (50 s) | 50 / 50 | still compiling / slowly |"
    assert "checks 1/2 (failed: checkpoint)" in rows[5]
    assert rows[6].endswith("async: 3.00 GiB, blocked 0.50, 0.20 s; later saves async/sync 5.0% (goal < 10 %) |")
    assert rows[9] == "| telemetry | not run | - |  |"
    text = "\n".join(rows)
    assert ("| tput-124m | gpt2-124m | engine (pretrain stage) | bf16 (bf16 section), ZeRO-0, compile on, fused AdamW "
            "auto, guard on | 550,000 | 48.0% | 3.0 | 20.0 | 21.5 | engine ZeRO-0/(b′) 1.10×; engine ZeRO-0/(a) "
            "0.98× |") in text
    assert "ZeRO-3/ZeRO-0 0.90×" in text
    assert "- engine/(b′) ≥ 1.10× at 124M: 1.10× met" in text
    assert "- engine/(b′) ≥ 1.10× at 350M: unmeasured" in text
    assert "- engine MFU ≥ 50 % at 350M: 49.0% MISSED" in text
    assert "- ZeRO-3/ZeRO-0 ≥ 0.95 at 1B: 0.90× MISSED" in text
    assert "- every part ok: MISSED (sft, pretrain, telemetry)" in text
    assert ("Rows not returned:\n- sft: sft at gpt2-124m — the part timed out at 50 s\n"
            "- tput-350m: (b′) at 350m — CUDA out of memory\n\nTargets") in text
    assert rows[-1] == "whole script 450 s"


def test_missing_rows_follow_what_each_part_was_asked_for(tmp_path):
    """A part cut short names the rows it did not return: the runs its JSON's arguments asked for (ZeRO stages
    apart), or the script's plan where it left no JSON, and the ckpt-stall modes that did not finish."""
    (tmp_path / "tput-1b.status").write_text("124 82 82")
    (tmp_path / "tput-1b.json").write_text(json.dumps({
        "args": {"shape": "1b", "seq": 1024, "batch": 16, "device": "cuda", "runs": "engine", "zero": "0,3"},
        "results": [{"run": "engine", "config": {"zero": 0}, "tokens_per_s": 1.0}], "errors": []}))
    (tmp_path / "tput-124m.status").write_text("skipped 0 0")
    (tmp_path / "ckpt-stall.status").write_text("137 50 50")
    (tmp_path / "ckpt-stall.json").write_text(json.dumps([{"mode": "sync", "stalls": [4.0, 3.9]}]))
    for name in ("sft", "tput-350m"):
        (tmp_path / f"{name}.status").write_text("0 40 47")
        (tmp_path / f"{name}.json").write_text(json.dumps({"args": {"shape": "x", "runs": "sft"}, "results": [
            {"run": "sft", "config": {"zero": 0}}]}))
    words = {p: report.status(tmp_path, p)[0] for p in report.PARTS}
    assert report.missing_rows(tmp_path, words) == [
        "- tput-124m: engine at gpt2-124m — the part was skipped (budget spent)",
        "- tput-124m: (b′) at gpt2-124m — the part was skipped (budget spent)",
        "- tput-124m: (a) at gpt2-124m — the part was skipped (budget spent)",
        "- tput-1b: engine ZeRO-3 at 1b — the part timed out at 82 s",
        "- ckpt-stall: async mode — the part timed out at 50 s"]


@pytest.mark.slow
def test_dry_run_on_cpu_with_only_the_box_packages(tmp_path):
    """The whole script with tiny shapes on CPU, in a Python that has only what the GPU box has (no wheels: the
    box Python links this venv's deepspeed and pydantic, which the wheels carry there), and no WANDB_MODE: every
    part runs, the one table reports it, and <out> holds the two files a device run can bring back."""
    from benchmarks.gpu.box_env import box_python

    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout missing")
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(out), "TMPDIR": str(tmp_path),
           "PYTHON": str(box_python(tmp_path / "box")), "GPU_WHEELS": str(tmp_path / "no-wheels")}
    proc = subprocess.run(["bash", str(GPU / "run.sh"), "--dry-run"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["parts.tar.gz", "table.md"]
    assert (out / "table.md").read_text().strip() == proc.stdout[proc.stdout.index("| part |"):].strip()
    parts = proc.stdout[proc.stdout.index("| part |"):].split("\n\n")[0]  # the parts table, before the runs'
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ") for r in parts.splitlines()}
    assert {k: rows[k][1] for k in report.PARTS} == {k: "ok" for k in report.PARTS}
    assert "engine ZeRO-0" in rows["tput-124m"][3] and "(b′)" in rows["tput-124m"][3]
    assert "engine ZeRO-3" in rows["tput-1b"][3] and "sft" in rows["sft"][3]
    assert "checks 4/4" in rows["pretrain"][3] and "async" in rows["ckpt-stall"][3]
    with tarfile.open(out / "parts.tar.gz") as tar:
        smoke = json.load(tar.extractfile("forgeline-gpu-parts/pretrain.json"))
    assert smoke["ok"] is True
    assert "ZeRO-3/ZeRO-0" in proc.stdout and "every part ok: met" in proc.stdout
    assert "dry run: tiny shapes on CPU" in proc.stdout
