#!/usr/bin/env bash
# Wheels for benchmarks/gpu/run.sh on a GPU box that has torch with CUDA (and DeepSpeed's other needs: numpy,
# psutil, packaging, tqdm, einops, msgpack, ninja, py-cpuinfo — /work/shared/FACTS.md) but no package registry.
# Run here, where a registry answers:
#
#   bash benchmarks/gpu/prepare_wheels.sh              # the box's Python: PY_VERSION=3.12 (default: the lent H200 box) / 3.11 / 3.10
#
# Writes benchmarks/gpu/wheels/ (git-ignored; carry it to the box with the tree) and its requirements.txt, pinned
# to the versions this project's venv runs, so the box runs what the tests ran:
#   built here   deepspeed (pip wheel --no-deps --no-build-isolation: pure Python, ops JIT-built on the box)
#   pure Python  hjson, pydantic, annotated-types, typing-inspection, nvidia-ml-py (NVML for the telemetry part)
#   binary       pydantic-core, PyYAML (tasks.core), safetensors (weights), tokenizers (tasks.data), pyarrow
#                (tasks.data.mixing.packing, the stage's data path) for PY_VERSION, manylinux x86_64
# pyarrow's wheel (55 MB) alone would use the whole carry budget: its Flight and S3 libraries, C++ headers and
# test module — nothing forgeline imports — are dropped from the wheel (and its RECORD), ~38 MB left. The total
# must stay ≤ 60 MB (checked).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="${GPU_WHEELS:-$ROOT/benchmarks/gpu/wheels}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
PY_VERSION="${PY_VERSION:-3.12}"
LIMIT_MB=60
PURE=(hjson pydantic annotated-types typing-inspection)
BINARY=(pydantic-core PyYAML safetensors tokenizers pyarrow)
NVML_VERSION="${NVML_VERSION:-13.615.71}"

version() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

rm -rf "$DEST"
mkdir -p "$DEST"
: > "$DEST/requirements.txt"
DS="$(version deepspeed)"
"$PY" -m pip wheel --quiet "deepspeed==$DS" --no-deps --no-build-isolation -w "$DEST"
echo "deepspeed==$DS" >> "$DEST/requirements.txt"
for name in "${PURE[@]}"; do
  pin="$name==$(version "$name")"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST" "$pin"
  echo "$pin" >> "$DEST/requirements.txt"
done
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST" "nvidia-ml-py==$NVML_VERSION"
echo "nvidia-ml-py==$NVML_VERSION" >> "$DEST/requirements.txt"
for name in "${BINARY[@]}"; do
  pin="$name==$(version "$name")"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DEST" "$pin"
  echo "$pin" >> "$DEST/requirements.txt"
done

# pyarrow without what forgeline never loads (each dropped file is a library or module only pyarrow.flight,
# pyarrow.fs's S3 filesystem, the C++ headers or pyarrow's own tests use)
"$PY" - "$DEST" <<'EOF'
import re, sys, zipfile
from pathlib import Path

DROP = re.compile(r"^pyarrow/(include/|tests/|src/|libarrow_flight|libarrow_python_flight|_flight\.|flight\.py|"
                  r"libarrow_s3|_s3fs\.|_pyarrow_cpp_tests\.)")
for wheel in Path(sys.argv[1]).glob("pyarrow-*.whl"):
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if DROP.match(info.filename):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                rows = [r for r in data.decode().splitlines() if r and not DROP.match(r.split(",")[0])]
                data = ("\n".join(rows) + "\n").encode()
            dst.writestr(info, data)
    before, after = wheel.stat().st_size, slim.stat().st_size
    slim.replace(wheel)
    print(f"{wheel.name}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
EOF

total=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
ls -l "$DEST"
echo "total $(( total / 1000000 )) MB in $DEST (limit $LIMIT_MB MB)"
(( total <= LIMIT_MB * 1000000 )) || { echo "over the carry budget" >&2; exit 1; }
