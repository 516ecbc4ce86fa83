#!/usr/bin/env bash
# One script for one GPU box that has torch with CUDA but no package registry (issues #13, #29): a full table in
# ≤ 8 minutes, whatever fails.
#
#   bash benchmarks/gpu/prepare_wheels.sh        # here, with a registry: wheels into benchmarks/gpu/wheels/
#   bash benchmarks/gpu/run.sh                   # there, from the project root (the wheels folder carried along)
#   bash benchmarks/gpu/run.sh --dry-run         # anywhere: the same parts, tiny shapes on CPU
#   TPUT_ARGS="--set train.speed.compile_scope=model --runs engine,plain" \
#     bash benchmarks/gpu/run.sh --only tput-124m,tput-350m   # a second, shorter call: some parts, other flags
#   TPUT_ARGS="--runs engine,plain --trace-steps 3" bash benchmarks/gpu/run.sh --only tput-124m   # + profiles
#
# Parts, in order, each with a share of the 480 s (seconds below). A part may use what earlier parts left unused,
# never the shares of the parts after it, so one that hangs or overruns cannot starve the rest. On the GPU a part
# costs mostly process start-up and torch.compile (the first step of each compiled run); the timed steps
# themselves take seconds. The shares come from the H200 run of 2026-12-04 (benchmarks/gpu/results/
# h200-2026-12-04*, its JSONs' startup_s / first_step_s / warmup_s / seconds), cold inductor cache:
#   P = 6 s per Python process (start, imports, exit): sft's part took 43 s of which its child measured 30.6
#       (16.9 start-up + 12.5 warm-up + 1.2 timed), so parent + child cost 12.4; the smoke took 36 s for 28.7 wall
#   setup       15  measured 12
#   tput-124m  125  P + engine (P + 12.1 + 15.4 + 0.7 for 10 timed steps = 34) + (b′) (P + 27.7 compile + 0.3
#                   = 34) + (a) (P + 2 build + ≤ 26 compile + 0.7 = 35; on 12-04 it did not finish in the ~40 s
#                   left to it, so its compile is bounded by the engine's cold 15.4 plus 70 %) = 110 → +14 %
#   sft         47  measured 43 (its compile is its own: no cache hit), 0.4 s less at 10 timed steps → +10 %
#   pretrain    40  measured 36 (gpt2-124m: its block graph is in the inductor cache from tput-124m) → +11 %
#   ckpt-stall  50  P + two modes of P + ~15 (DeepSpeed start, 4 eager steps, 2 saves of ~4 s, final weights) =
#                   ~48; on 12-04 sync alone took ~30 s of 56 with compile on and 6 steps → +4 %, plus the slack
#   tput-1b     82  P + ZeRO-0 (P + 12.9 + 10.7 + 1.2 = 31) + ZeRO-3 (P + ~20 partitioned start-up + ~11
#                   compile: the ZeRO-0 block graph from the cache, hooks eager since 1f1fe99 + ~2 for 6 steps
#                   = 39) = 76 → +8 %
#   tput-350m  103  P + engine (P + 12.7 + 12.0 + 1.4 = 32) + (b′) (P + 2 + 2 × 27.7: the whole model compiled
#                   at 24 layers, twice 124m's 12, an upper bound since identical blocks share kernels + 0.7 =
#                   64) = 102 → +1 % of its own, but it runs last of the heavy parts: the ~34 s the estimates of
#                   the parts before it leave (~325 of their 359) flow to it, 137 s for 102: +34 % in all
#   telemetry    8  measured 4
#   RESERVE     10  the table (report.py, no torch) and the tar: ~1 s
# Levers: every part shares one inductor cache (<parts>/inductor-cache: FX graph and AOT autograd caches), so a
# block graph compiled at one shape is loaded, not recompiled, by the next process of that shape ((a) after the
# engine, the smoke after tput-124m, ZeRO-3 after ZeRO-0; not sft, whose packed rows make another graph). On CPU
# (tiny shape, inductor's C++; pretrain_throughput.py --device cpu --shape tiny --runs engine,plain --set
# train.speed.compile=on, TORCHINDUCTOR_CACHE_DIR shared): the engine's cold first step 58.7 s, (a) in the next
# process 4.5 s, a rerun of the engine 4.7 s; sft after them 42.0 s. 2 warm-up steps, not 3 (the second step,
# after the compile, was 0.1-0.4 s); 10 timed steps at 124m/350m (the timed steps are ~1-2 s, so this is for the
# shape of the table, not the budget); the uncertain parts (ZeRO-3, (b′) at 350m, never finished on a GPU) last
# so the others' slack reaches them; ckpt-stall eager (its subject is the save, not the step) and 4 steps.
#   setup       the carried wheels (pip --no-index --no-deps --target, first on PYTHONPATH; the box's torch)
#   tput-124m   benchmarks/pretrain_throughput.py at gpt2-124m: the pretrain stage's loop (its own defaults
#               resolved for CUDA), (b′) nanoGPT compiled, (a) the same model in a plain loop
#   sft         the sft stage's loop on packed conversations, assistant-only loss, gpt2-124m
#   pretrain    benchmarks/gpu/pretrain_smoke.py: tasks.pretrain.run, 2 steps (checkpoint, weights, checks)
#   ckpt-stall  benchmarks/checkpoint_stall.py: sync vs async save stall, gpt2-124m, 4 steps, a save every 2
#   tput-1b     the stage's loop at the 1b shape, ZeRO-0 then ZeRO-3, 6 timed steps
#   tput-350m   the same as tput-124m at 350m, without (a) (the engine's overhead over a plain loop is read at 124m)
#   telemetry   benchmarks/gpu/snapshot.py: NVML (forgeline's reader) and nvidia-smi, after the load
# then ONE markdown table (benchmarks/gpu/report.py) into <out>/table.md, and the parts folder (logs, JSON) as
# <out>/parts.tar.gz: two files, what a device run can bring back.
# Environment: OUT (results folder; default benchmarks/gpu/out), PYTHON (the box's python with CUDA torch;
# default python3), GPU_WHEELS (default benchmarks/gpu/wheels), GPU_SITE (where the wheels go) and GPU_PARTS (the
# parts folder), both under $TMPDIR by default so they do not travel back; TPUT_ARGS (extra flags for every
# throughput part, e.g. "--set train.speed.mixed_precision=torch_autocast"), CKPT_STALL_ARGS (for ckpt-stall).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
DRY=0
ONLY=""  # --only NAME[,NAME...]: run these parts (and setup) alone, each with its share plus what the others left
while (( $# )); do
  case "$1" in
    --dry-run) DRY=1 ;;
    --only) ONLY="setup,${2:?--only takes a comma-separated list of parts}"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
OUT_DIR="${OUT:-$ROOT/benchmarks/gpu/out}"
PARTS="${GPU_PARTS:-${TMPDIR:-/tmp}/forgeline-gpu-parts}"
WHEELS="${GPU_WHEELS:-$ROOT/benchmarks/gpu/wheels}"
PY="${PYTHON:-python3}"
BUDGET_S=480          # the whole script, setup included
RESERVE_S=10          # kept back for the table and the tar
PLAN=(setup:15 tput-124m:125 sft:47 pretrain:40 ckpt-stall:50 tput-1b:82 tput-350m:103 telemetry:8)
# --only: the plan keeps the selected parts alone, so their shares and the budget are all theirs.
keep_only() {
  [[ -z "$ONLY" ]] && return
  local kept=() entry
  for entry in "${PLAN[@]}"; do
    [[ ",$ONLY," == *",${entry%%:*},"* ]] && kept+=("$entry")
  done
  PLAN=("${kept[@]}")
}
keep_only
START=$SECONDS
mkdir -p "$PARTS" "$OUT_DIR"
rm -rf "$PARTS/inductor-cache"
rm -f "$PARTS"/*
# One inductor cache for every part (not the per-user default under /tmp, which a box may not keep or share):
# the same block graph at the same shape is compiled once and loaded by later processes. Emptied first so every
# run starts cold, the case the shares are sized for, and first-step figures compare run to run; kept out of
# the tar.
export TORCHINDUCTOR_CACHE_DIR="$PARTS/inductor-cache" TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1

# The seconds the parts after NAME have reserved.
later_shares() {
  local name="$1" seen=0 sum=0 entry
  for entry in "${PLAN[@]}"; do
    (( seen )) && sum=$(( sum + ${entry#*:} ))
    [[ "${entry%%:*}" == "$name" ]] && seen=1
  done
  echo "$sum"
}

# part NAME COMMAND...: run COMMAND under `timeout` (what is left of the budget less the later parts' shares),
# log to <parts>/NAME.log, and record "rc seconds limit" in <parts>/NAME.status (rc 124: timed out).
part() {
  local name="$1"; shift
  if [[ -n "$ONLY" && ",$ONLY," != *",$name,"* ]]; then
    echo "unselected 0 0" > "$PARTS/$name.status"; return
  fi
  local limit=$(( BUDGET_S - RESERVE_S - (SECONDS - START) - $(later_shares "$name") ))
  if (( limit < 5 )); then
    echo "skipped 0 0" > "$PARTS/$name.status"; echo "== $name: skipped (budget spent)"; return
  fi
  echo "== $name (≤ ${limit} s): $*"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$PARTS/$name.log" 2>&1
  local rc=$?
  echo "$rc $(( SECONDS - t0 )) $limit" > "$PARTS/$name.status"
  tail -n 4 "$PARTS/$name.log" | cut -c1-240 | sed 's/^/    /'  # indented: only the table's lines start with "| "
}

setup() {
  # prepare_wheels.sh builds for the box's python (PY_VERSION, default 3.12): on another python a dry run uses this
  # environment's packages instead of failing on a wheel it cannot install; a real run still installs (and fails).
  local tag; tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null)
  if (( DRY )) && compgen -G "$WHEELS/*-cp[0-9]*.whl" > /dev/null && ! compgen -G "$WHEELS/*-$tag-*.whl" > /dev/null; then
    echo "carried wheels are not for this python ($tag): the dry run uses its own packages"
  elif compgen -G "$WHEELS/*.whl" > /dev/null; then
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
export PY WHEELS SITE DRY PYTHONUNBUFFERED=1  # unbuffered: a part cut short still leaves its progress in its log
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
compgen -G "$WHEELS/*.whl" > /dev/null && PYTHONPATH="$SITE:$PYTHONPATH"
part setup bash -c 'setup'

if (( DRY )); then
  export DS_ACCELERATOR=cpu
  # one torch thread per in-process rank (the stage's default of 2 oversubscribes a shared CI box)
  TPUT=(--device cpu --shape tiny --seq 64 --batch 2 --steps 2 --warmup 1 --compile-backend aot_eager
        --set train.cpu_threads=1)
  STEPS_1B=2
  STALL=(--shape tiny --seq 64 --batch 2 --steps 4 --every 2)
  DEVICE=cpu
else
  TPUT=(--device cuda --steps 10 --warmup 2)  # seq 1024 × micro-batch 16 (the script's defaults)
  STEPS_1B=6
  # the stage's real save path at 124M (1.9 GiB a checkpoint with the layout-free copy), two saves a mode, eager:
  # compiling cost each mode ~10-15 s that say nothing about a save's stall
  STALL=(--shape gpt2-124m --seq 512 --batch 8 --steps 4 --every 2 --compile off)
  DEVICE=cuda
fi
# shellcheck disable=SC2206  # word-splitting the user's extra flags is the point
EXTRA_TPUT=(${TPUT_ARGS:-})
part tput-124m "$PY" benchmarks/pretrain_throughput.py --shape gpt2-124m "${TPUT[@]}" "${EXTRA_TPUT[@]}" \
  --json "$PARTS/tput-124m.json"
part sft "$PY" benchmarks/pretrain_throughput.py --shape gpt2-124m --runs sft "${TPUT[@]}" "${EXTRA_TPUT[@]}" \
  --json "$PARTS/sft.json"
part pretrain "$PY" benchmarks/gpu/pretrain_smoke.py --device "$DEVICE" --out "$PARTS/pretrain.json"
# shellcheck disable=SC2206
EXTRA_STALL=(${CKPT_STALL_ARGS:-})
part ckpt-stall "$PY" benchmarks/checkpoint_stall.py "${STALL[@]}" "${EXTRA_STALL[@]}" --json "$PARTS/ckpt-stall.json"
part tput-1b "$PY" benchmarks/pretrain_throughput.py --shape 1b --runs engine --zero 0,3 "${TPUT[@]}" \
  --steps "$STEPS_1B" "${EXTRA_TPUT[@]}" --json "$PARTS/tput-1b.json"
part tput-350m "$PY" benchmarks/pretrain_throughput.py --shape 350m --runs engine,nanogpt-compiled "${TPUT[@]}" \
  "${EXTRA_TPUT[@]}" --json "$PARTS/tput-350m.json"
part telemetry "$PY" benchmarks/gpu/snapshot.py --out "$PARTS/telemetry.json"

DRY_FLAG=()
(( DRY )) && DRY_FLAG=(--dry-run)
"$PY" benchmarks/gpu/report.py "$PARTS" --total-s $(( SECONDS - START )) "${DRY_FLAG[@]}" > "$OUT_DIR/table.md"
tar -czf "$OUT_DIR/parts.tar.gz" --exclude=inductor-cache -C "$(dirname "$PARTS")" "$(basename "$PARTS")"
cat "$OUT_DIR/table.md"
