"""The one table benchmarks/gpu/run.sh prints: a markdown row per part from <parts>/<name>.status ("rc seconds
limit", or "absent"/"skipped"), its JSON and the tail of its log.

    python benchmarks/gpu/report.py <parts folder> [--total-s N] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PARTS = ("setup", "tput-124m", "tput-350m", "pretrain", "ckpt-stall", "telemetry")
LABELS = {"engine": "engine", "plain": "(a) plain", "nanogpt": "(b) nanoGPT"}


def status(folder: Path, name: str) -> tuple[str, str]:
    """(status word, seconds) of a part."""
    file = folder / f"{name}.status"
    if not file.exists():
        return "not run", "-"
    words = file.read_text().split()
    if words[0] in ("absent", "skipped"):
        return words[0], "-"
    rc, seconds, limit = (int(w) for w in words[:3])
    word = "ok" if rc == 0 else f"timed out ({limit} s)" if rc in (124, 137) else f"failed (exit {rc})"
    return word, str(seconds)


def last_line(folder: Path, name: str) -> str:
    log = folder / f"{name}.log"
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()] if log.exists() else []
    return lines[-1][:160] if lines else ""


def load(folder: Path, name: str) -> dict | None:
    file = folder / f"{name}.json"
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        return None


def throughput(data: dict) -> str:
    a = data["args"]
    runs = {r["run"]: r for r in data["results"]}
    cells = [f"{a['shape']} seq {a['seq']} × {a['batch']}, {a['precision']}, {a['device']}"]
    for key, label in LABELS.items():
        if key in runs:
            r = runs[key]
            mfu = "" if r.get("mfu") is None else f", MFU {r['mfu']:.1%}"
            cells.append(f"{label} {r['tokens_per_s']:,.0f} tok/s{mfu}, {r['peak_bytes'] / 2**30:.1f} GiB")
    if "engine" in runs:
        for ref in ("plain", "nanogpt"):
            if ref in runs:
                ratio = runs["engine"]["tokens_per_s"] / runs[ref]["tokens_per_s"]
                cells.append(f"engine/{LABELS[ref].split()[0]} {ratio:.2f}×")
    return "; ".join(cells)


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
        if data and name.startswith("tput-"):
            return throughput(data)
        if data and name == "pretrain":
            return pretrain(data)
        if data and name == "telemetry":
            return telemetry(data)
    except (KeyError, TypeError, ValueError) as exc:
        return f"unreadable result ({type(exc).__name__}: {exc})"
    return last_line(folder, name).replace("|", "/")


def table(folder: Path, total_s: int | None, dry_run: bool) -> str:
    lines = ["| part | status | s | result |", "|---|---|---:|---|"]
    for name in PARTS:
        word, seconds = status(folder, name)
        text = "benchmarks/checkpoint_stall.py not in this tree" if word == "absent" else result(folder, name)
        lines.append(f"| {name} | {word} | {seconds} | {text} |")
    note = " (dry run: tiny shapes on CPU, not GPU figures)" if dry_run else ""
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
