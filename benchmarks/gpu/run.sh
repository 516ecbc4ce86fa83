#!/usr/bin/env bash
# One script for one GPU box that has torch with CUDA but no package registry (issue #13's "GPU in one script").
#
#   bash benchmarks/gpu/prepare_wheels.sh        # here, with a registry: wheels into benchmarks/gpu/wheels/
#   bash benchmarks/gpu/run.sh                   # there, from the project root (the wheels folder carried along)
#   bash benchmarks/gpu/run.sh --dry-run         # anywhere: the same parts, tiny shapes on CPU
#
# Parts, each under its own timeout so one that hangs or fails cannot eat the others' time (≤ 8 minutes in all):
#   setup         the carried wheels (pip --no-index --no-deps --target, first on PYTHONPATH; the box's torch)
#   tput-124m     benchmarks/pretrain_throughput.py --shape gpt2-124m (engine vs plain loop vs nanoGPT-style)
#   tput-350m     the same at the 350m shape
#   pretrain      benchmarks/gpu/pretrain_smoke.py: tasks.pretrain.run, 2 steps, bf16 on CUDA
#   ckpt-stall    benchmarks/checkpoint_stall.py, when that file exists
#   telemetry     benchmarks/gpu/snapshot.py: NVML (forgeline's reader) and nvidia-smi
# then ONE markdown table (benchmarks/gpu/report.py), also written to <out>/table.md.
# Environment: OUT (results folder; default benchmarks/gpu/out), PYTHON (the box's python with CUDA torch;
# default python3), GPU_WHEELS (default benchmarks/gpu/wheels), GPU_SITE (where the wheels go; default
# $TMPDIR/forgeline-gpu-site, outside <out> so it does not travel back with the results), CKPT_STALL_ARGS (extra
# flags for checkpoint_stall.py), TPUT_ARGS (extra flags for the throughput runs, e.g. --compile).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
OUT_DIR="${OUT:-$ROOT/benchmarks/gpu/out}"
PARTS="$OUT_DIR/parts"
WHEELS="${GPU_WHEELS:-$ROOT/benchmarks/gpu/wheels}"
PY="${PYTHON:-python3}"
BUDGET_S=480          # the whole script, setup included
RESERVE_S=15          # kept back for the table
START=$SECONDS
mkdir -p "$PARTS"
rm -f "$PARTS"/*

# part NAME SECONDS COMMAND...: run COMMAND under `timeout` (its share, or what is left of the budget), log to
# <parts>/NAME.log, and record "rc seconds limit" in <parts>/NAME.status (rc 124: timed out).
part() {
  local name="$1" limit="$2"; shift 2
  local left=$(( BUDGET_S - RESERVE_S - (SECONDS - START) ))
  (( limit > left )) && limit=$left
  if (( limit < 5 )); then
    echo "skipped 0 0" > "$PARTS/$name.status"; echo "== $name: skipped (budget spent)"; return
  fi
  echo "== $name (≤ ${limit} s): $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$PARTS/$name.log" 2>&1
  local rc=$?
  echo "$rc $(( SECONDS - t0 )) $limit" > "$PARTS/$name.status"
  tail -n 3 "$PARTS/$name.log" | sed 's/^/    /'  # indented: the one table at the end is all that starts with "| "
}

setup() {
  if compgen -G "$WHEELS/*.whl" > /dev/null; then
    # Into a folder put first on PYTHONPATH rather than a --system-site-packages venv: a venv made from a venv's
    # python would lose that venv's torch. --no-deps: exactly the pinned wheels. No pip: a wheel is a zip whose
    # contents are what an install puts in site-packages.
    rm -rf "$SITE" && mkdir -p "$SITE"
    if "$PY" -m pip --version > /dev/null 2>&1; then
      "$PY" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" -r "$WHEELS/requirements.txt" \
        --target "$SITE" || return 1
    else
      for whl in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$whl" "$SITE" || return 1; done
    fi
  fi
  "$PY" - <<'EOF'
import importlib, json, platform, sys
need = ["torch", "deepspeed", "pydantic", "numpy", "pyarrow", "yaml", "safetensors", "tokenizers", "pynvml"]
found, missing = {}, []
for name in need:
    try:
        found[name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as exc:  # noqa: BLE001
        missing.append(f"{name} ({type(exc).__name__})")
import torch
print(json.dumps({"python": platform.python_version(), "cuda": torch.version.cuda,
                  "gpus": torch.cuda.device_count(), "found": found, "missing": missing}))
sys.exit(1 if [m for m in missing if not m.startswith("pynvml")] else 0)
EOF
}

export -f setup
SITE="${GPU_SITE:-${TMPDIR:-/tmp}/forgeline-gpu-site}"
export PY WHEELS SITE
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
compgen -G "$WHEELS/*.whl" > /dev/null && PYTHONPATH="$SITE:$PYTHONPATH"
part setup 90 bash -c 'setup'

if (( DRY )); then
  export DS_ACCELERATOR=cpu
  TPUT=(--device cpu --shape tiny --seq 64 --batch 2 --steps 2 --warmup 1 --precision fp32)
  STALL=(--shape tiny --seq 64 --batch 2 --steps 4 --every 2)
  DEVICE=cpu
else
  TPUT=(--device cuda --precision bf16)
  STALL=(--steps 4 --every 2)  # its default shape (350m), the stage's real save path
  DEVICE=cuda
fi
# shellcheck disable=SC2206  # word-splitting the user's extra flags is the point
EXTRA_TPUT=(${TPUT_ARGS:-})
part tput-124m 140 "$PY" benchmarks/pretrain_throughput.py --shape gpt2-124m "${TPUT[@]}" "${EXTRA_TPUT[@]}" \
  --json "$PARTS/tput-124m.json"
part tput-350m 150 "$PY" benchmarks/pretrain_throughput.py --shape 350m "${TPUT[@]}" "${EXTRA_TPUT[@]}" \
  --json "$PARTS/tput-350m.json"
part pretrain 110 "$PY" benchmarks/gpu/pretrain_smoke.py --device "$DEVICE" --out "$PARTS/pretrain.json"
if [[ -f benchmarks/checkpoint_stall.py ]]; then
  # shellcheck disable=SC2206
  EXTRA_STALL=(${CKPT_STALL_ARGS:-})
  part ckpt-stall 70 "$PY" benchmarks/checkpoint_stall.py "${STALL[@]}" "${EXTRA_STALL[@]}"
else
  echo "absent 0 0" > "$PARTS/ckpt-stall.status"
fi
part telemetry 20 "$PY" benchmarks/gpu/snapshot.py --out "$PARTS/telemetry.json"

DRY_FLAG=()
(( DRY )) && DRY_FLAG=(--dry-run)
"$PY" benchmarks/gpu/report.py "$PARTS" --total-s $(( SECONDS - START )) "${DRY_FLAG[@]}" | tee "$OUT_DIR/table.md"
