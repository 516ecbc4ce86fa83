"""The one table benchmarks/gpu/run.sh prints: a row per part (status from <parts>/<name>.status, "rc seconds
limit" or "absent"/"skipped", and a one-line result from its JSON or the last line of its log), then every
throughput run side by side with the ratios the issue's targets are stated in, then the rows a part cut short
did not return and why, then the targets themselves.

    python benchmarks/gpu/report.py <parts folder> [--total-s N] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PARTS = ("setup", "tput-124m", "sft", "pretrain", "ckpt-stall", "tput-1b", "tput-350m", "telemetry")
TPUT_PARTS = ("tput-124m", "sft", "tput-1b", "tput-350m")
# The runs each throughput part is asked for when its JSON does not say (it is written after the first run):
# (run, ZeRO stage or None) as benchmarks/pretrain_throughput.py's --runs and --zero expand them.
EXPECTED = {"tput-124m": [("engine", None), ("nanogpt-compiled", None), ("plain", None)], "sft": [("sft", None)],
            "tput-1b": [("engine", "0"), ("engine", "3")], "tput-350m": [("engine", None), ("nanogpt-compiled", None)]}
SHAPES = {"tput-124m": "gpt2-124m", "sft": "gpt2-124m", "tput-1b": "1b", "tput-350m": "350m"}
STALL_MODES = ("sync", "async")  # checkpoint_stall.py's default --modes
LABELS = {"engine": "engine (pretrain stage)", "sft": "sft stage (packed, assistant-only loss)",
          "plain": "(a) plain loop, same model", "nanogpt": "(b) nanoGPT eager",
          "nanogpt-compiled": "(b′) nanoGPT compiled"}
SHORT = {"engine": "engine", "sft": "sft", "plain": "(a)", "nanogpt": "(b)", "nanogpt-compiled": "(b′)"}
BUDGET_S = 480


def status(folder: Path, name: str) -> tuple[str, str]:
    """(status word, seconds) of a part."""
    file = folder / f"{name}.status"
    if not file.exists():
        return "not run", "-"
    words = file.read_text().split()
    if words[0] in ("absent", "skipped"):
        return words[0], "-"
    if words[0] == "unselected":  # run.sh --only left it out
        return "not selected", "-"
    rc, seconds, limit = (int(w) for w in words[:3])
    word = "ok" if rc == 0 else f"timed out ({limit} s)" if rc in (124, 137) else f"failed (exit {rc})"
    return word, f"{seconds} / {limit}"


def last_line(folder: Path, name: str) -> str:
    log = folder / f"{name}.log"
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()] if log.exists() else []
    return lines[-1][:200] if lines else ""


def load(folder: Path, name: str):
    try:
        return json.loads((folder / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def key(r: dict) -> str:
    """A run's name in ratios: engine runs of several ZeRO stages carry theirs."""
    return SHORT[r["run"]] + (f" ZeRO-{r['config']['zero']}" if r["run"] == "engine" else "")


def tput_summary(data: dict) -> str:
    a = data["args"]
    cells = [f"{key(r)} {r['tokens_per_s']:,.0f} tok/s" for r in data["results"]]
    errors = [f"failed: {e}" for e in data.get("errors", [])]
    return f"{a['shape']} seq {a['seq']} × {a['batch']}, {a['device']}: " + "; ".join(cells + errors)


def expected_runs(part: str, data: dict | None) -> list[tuple[str, str | None]]:
    """The (run, ZeRO) pairs a throughput part was asked for: from its JSON's arguments, else EXPECTED."""
    if not data or "runs" not in data.get("args", {}):
        return list(EXPECTED.get(part, []))
    a = data["args"]
    return [(run, z) for run in a["runs"].split(",")
            for z in (str(a["zero"]).split(",") if run == "engine" and a.get("zero") is not None else [None])]


def why(word: str) -> str:
    """Why a part's row is absent, from the part's status word."""
    if word.startswith("timed out"):
        return "the part " + word.replace("(", "at ").rstrip(")")
    if word.startswith("failed"):
        return "the part " + word
    return {"skipped": "the part was skipped (budget spent)", "not run": "the part did not run",
            "absent": "the part's script is not in this tree"}.get(word, "not reported")


def missing_rows(folder: Path, words: dict[str, str]) -> list[str]:
    """One line per row a part was asked for and did not return, with the run's own error or the part's fate."""
    out = []
    for part in TPUT_PARTS:
        if words.get(part) == "not selected":
            continue
        data = load(folder, part)
        results = list((data or {}).get("results") or [])
        errors = {e.split(":")[0]: e.split(":", 1)[1].strip() for e in (data or {}).get("errors", []) if ":" in e}
        shape = (data or {}).get("args", {}).get("shape") or SHAPES[part]
        for run, zero in expected_runs(part, data):
            hit = next((r for r in results if r["run"] == run and (zero is None or
                                                                   str(r["config"].get("zero")) == zero)), None)
            if hit is not None:
                results.remove(hit)
                continue
            label = SHORT[run] + (f" ZeRO-{zero}" if zero is not None else "")
            out.append(f"- {part}: {label} at {shape} — {errors.get(run) or why(words.get(part, 'not run'))}")
    if words.get("ckpt-stall") not in ("absent", "not selected"):
        done = {r.get("mode") for r in (load(folder, "ckpt-stall") or []) if isinstance(r, dict)}
        out += [f"- ckpt-stall: {m} mode — {why(words.get('ckpt-stall', 'not run'))}" for m in STALL_MODES
                if m not in done]
    return out


def pretrain(data: dict) -> str:
    checks = data["checks"]
    passed = sum(bool(v) for v in checks.values())
    failed = [k for k, v in checks.items() if not v]
    losses = " → ".join(f"{x:.3f}" for x in data["losses"])
    peak = "" if data.get("peak_gib") is None else f", peak {data['peak_gib']} GiB"
    return (f"{data['device']}: tasks.pretrain.run, {data['flavor']} ({data['param_count'] / 1e6:.0f}M) seq "
            f"{data['seq_len']} × {data['micro_batch']}, {data['precision']}, {data['steps']} steps, loss {losses}"
            f"{peak}, {data['wall_s']} s; checks {passed}/{len(checks)}" + (f" (failed: {', '.join(failed)})"
                                                                            if failed else ""))


def stall(rows: list) -> str:
    cells = []
    for r in rows:
        stalls = ", ".join(f"{x:.2f}" for x in r["stalls"])
        cells.append(f"{r['mode']}: {r['checkpoint_bytes'] / 2**30:.2f} GiB, blocked {stalls} s")
    by = {r["mode"]: r["stalls"] for r in rows}
    if len(by.get("sync", [])) > 1 and len(by.get("async", [])) > 1:
        cells.append(f"later saves async/sync {by['async'][-1] / by['sync'][-1]:.1%} (goal < 10 %)")
    return f"{rows[0]['params'] / 1e6:.0f}M params; " + "; ".join(cells) if rows else "no mode finished"


def telemetry(data: dict) -> str:
    nv = data.get("nvml")
    if isinstance(nv, list) and nv:
        return "; ".join(
            f"GPU {g.get('gpu_index')} {g.get('gpu_name', '?')}: {g.get('temperature_c', '?')} °C, "
            f"{g.get('power_w', 0):.0f}/{g.get('power_limit_w', 0):.0f} W, SM {g.get('sm_clock_mhz', '?')}/"
            f"{g.get('sm_clock_max_mhz', '?')} MHz, {g.get('memory_used_gib', 0):.1f}/"
            f"{g.get('memory_total_gib', 0):.0f} GiB, throttle {', '.join(g.get('throttle_reasons') or ['none'])}"
            + (f" ⚠ {g['alert']}" if g.get("alert") else "") for g in nv)
    smi = data.get("nvidia_smi")
    if isinstance(smi, list) and smi:
        return "; ".join(", ".join(f"{k} {v}" for k, v in row.items()) for row in smi)
    return f"{data.get('cuda_devices', 0)} CUDA devices; {nv}; {smi}"


def setup(folder: Path) -> str:
    for line in reversed((folder / "setup.log").read_text().splitlines() if (folder / "setup.log").exists() else []):
        if line.startswith("{"):
            d = json.loads(line)
            missing = f"; missing {', '.join(d['missing'])}" if d["missing"] else ""
            return (f"python {d['python']}, torch {d['found'].get('torch', '?')} (CUDA {d['cuda']}), {d['gpus']} "
                    f"GPUs, deepspeed {d['found'].get('deepspeed', 'missing')}{missing}")
    return last_line(folder, "setup")


def result(folder: Path, name: str) -> str:
    """The part's figures, or the last line of its log when it left none."""
    data = load(folder, name)
    try:
        if name == "setup":
            return setup(folder)
        if data and name in TPUT_PARTS:
            return tput_summary(data)
        if data and name == "pretrain":
            return pretrain(data)
        if data is not None and name == "ckpt-stall":
            return stall(data)
        if data and name == "telemetry":
            return telemetry(data)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        return f"unreadable result ({type(exc).__name__}: {exc})"
    return last_line(folder, name)


def compile_words(value: object) -> str:
    """A run's `compile`: False, the scope it compiled ("blocks"/"model"), or True from JSONs before scopes."""
    return {False: "off", True: "on"}.get(value, f"on ({value})") if isinstance(value, bool) else f"on ({value})"


def configured(r: dict) -> str:
    c = r["config"]
    if r["run"] in ("engine", "sft"):
        return (f"{c['precision']} ({c['ds_mode']}), ZeRO-{c['zero']}, compile {compile_words(c['compile'])}, "
                f"fused AdamW {c['fused_adamw']}, guard {'on' if c['stability'] else 'off'}")
    return f"{c['precision']}, compile {c['compile']}"


def ratios(shape: str, runs: list[dict], engine_124m: float | None) -> str:
    by = {key(r): r["tokens_per_s"] for r in runs}
    out = []
    engines = [k for k in by if k.startswith("engine")]
    for e in engines:
        out += [f"{e}/{ref} {by[e] / by[ref]:.2f}×" for ref in ("(b′)", "(a)", "(b)") if ref in by]
    if "engine ZeRO-0" in by and "engine ZeRO-3" in by:
        out.append(f"ZeRO-3/ZeRO-0 {by['engine ZeRO-3'] / by['engine ZeRO-0']:.2f}×")
    if "sft" in by and engine_124m and shape == "gpt2-124m":
        out.append(f"sft/engine {by['sft'] / engine_124m:.2f}×")
    return "; ".join(out)


def runs_table(folder: Path) -> tuple[list[str], dict[str, dict]]:
    """The throughput rows of every part, and per (shape, run key) the row itself (for the targets)."""
    lines = ["| part | shape | run | as configured | tok/s | MFU | peak GiB | first step s | warm-up s | ratios |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    found: dict[str, dict] = {}
    datas = [(p, d) for p, d in ((p, load(folder, p)) for p in TPUT_PARTS) if d and d.get("results")]
    e124 = next((r["tokens_per_s"] for _, d in datas if d["args"]["shape"] == "gpt2-124m" for r in d["results"]
                 if r["run"] == "engine"), None)
    for part, d in datas:
        a = d["args"]
        text = ratios(a["shape"], d["results"], e124)
        for i, r in enumerate(d["results"]):
            found[f"{a['shape']} {key(r)}"] = r
            found.setdefault(f"{a['shape']} {r['run']}", r)  # the shape's first engine run, whatever its ZeRO
            mfu = "unknown" if r.get("mfu") is None else f"{r['mfu']:.1%}"
            lines.append(f"| {part} | {a['shape']} | {LABELS[r['run']]} | {configured(r)} | {r['tokens_per_s']:,.0f} | "
                         f"{mfu} | {r['peak_bytes'] / 2**30:.1f} | {r['first_step_s']:.1f} | {r['warmup_s']:.1f} | "
                         f"{text if i == 0 else ''} |")
    return (lines if len(lines) > 2 else []), found


def traces(folder: Path) -> list[str]:
    """One line per run that traced steps after its timed ones (pretrain_throughput.py --trace-steps): the
    device's idle share in them and the file with the top ops (in parts.tar.gz)."""
    out = []
    for part in TPUT_PARTS:
        for r in (load(folder, part) or {}).get("results") or []:
            t = r.get("trace")
            if t:
                idle = "n/a (CPU)" if t["device_idle_share"] is None else f"{t['device_idle_share']:.1%}"
                zero = f" ZeRO-{r['config']['zero']}" if "zero" in r["config"] else ""
                out.append(f"- {part}: {LABELS[r['run']]}{zero} — {t['steps']} steps, {t['wall_s']:.3f} s, "
                           f"device idle {idle}: `{t['file']}`")
    return out


def targets(found: dict[str, dict], words: dict[str, str], total_s: int | None) -> list[str]:
    """Issue #29's bar, each met, missed or unmeasured."""
    def tps(k: str) -> float | None:
        return found[k]["tokens_per_s"] if k in found else None

    def verdict(value: float | None, goal: float, fmt: str) -> str:
        return "unmeasured" if value is None else f"{fmt.format(value)} {'met' if value >= goal else 'MISSED'}"

    def ratio(a: str, b: str) -> float | None:
        x, y = tps(a), tps(b)
        return None if x is None or y is None else x / y

    mfu350 = found.get("350m engine", {}).get("mfu")
    ok = [p for p in PARTS if words.get(p) not in ("ok", "not selected")]  # --only: the parts it ran
    return [f"- engine/(b′) ≥ 1.10× at 124M: {verdict(ratio('gpt2-124m engine', 'gpt2-124m (b′)'), 1.10, '{:.2f}×')}",
            f"- engine/(b′) ≥ 1.10× at 350M: {verdict(ratio('350m engine', '350m (b′)'), 1.10, '{:.2f}×')}",
            f"- engine MFU ≥ 50 % at 350M: {verdict(mfu350, 0.50, '{:.1%}')}",
            f"- ZeRO-3/ZeRO-0 ≥ 0.95 at 1B: {verdict(ratio('1b engine ZeRO-3', '1b engine ZeRO-0'), 0.95, '{:.2f}×')}",
            f"- every part ok: {'met' if not ok else 'MISSED (' + ', '.join(ok) + ')'}",
            f"- whole script ≤ {BUDGET_S} s: " + ("unmeasured" if total_s is None else
                                                  f"{total_s} s {'met' if total_s <= BUDGET_S else 'MISSED'}")]


def table(folder: Path, total_s: int | None, dry_run: bool) -> str:
    lines = ["| part | status | s / limit | result |", "|---|---|---:|---|"]
    words = {}
    for name in PARTS:
        word, seconds = status(folder, name)
        words[name] = word
        text = "benchmarks/checkpoint_stall.py not in this tree" if word == "absent" else result(folder, name)
        lines.append(f"| {name} | {word} | {seconds} | {text.replace('|', '/')} |")
    rows, found = runs_table(folder)
    if rows:
        lines += ["", *rows]
    traced = traces(folder)
    if traced:
        lines += ["", "Traced steps (torch.profiler, after the timed ones; top ops in each file):", *traced]
    missing = missing_rows(folder, words)
    if missing:
        lines += ["", "Rows not returned:", *missing]
    note = " (dry run: tiny shapes on CPU, not GPU figures)" if dry_run else ""
    lines += ["", f"Targets (issue #29){note}:", *targets(found, words, total_s)]
    if total_s is not None:
        lines.append(f"\nwhole script {total_s} s{note}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("parts", type=Path)
    p.add_argument("--total-s", type=int, default=None)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    print(table(args.parts, args.total_s, args.dry_run))


if __name__ == "__main__":
    main()
