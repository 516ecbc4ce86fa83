#!/usr/bin/env bash
# What tests/test_browser.py needs: Debian's chromium (no browser download: playwright only drives it) and the
# playwright Python package in the project's virtualenv.
#   bash scripts/setup-browser.sh            (as root, or with sudo available, when chromium is missing)
# PLAYWRIGHT_SPEC overrides the pinned package; FORGELINE_VENV / VIRTUAL_ENV pick the venv as in setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

chromium="${FORGELINE_CHROMIUM:-/usr/bin/chromium}"
if [[ ! -x "$chromium" ]]; then
  sudo=""
  [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq chromium >/dev/null
fi
"$chromium" --version

if [[ -n "${VIRTUAL_ENV:-}" ]]; then
  py="$VIRTUAL_ENV/bin/python"
else
  py="${FORGELINE_VENV:-.venv}/bin/python"
fi
[[ -x "$py" ]] || { echo "no virtualenv at $py: run scripts/setup.sh first" >&2; exit 1; }
# Never `playwright install`: it downloads its own browser build, which this setup does not need or allow.
"$py" -m pip install --disable-pip-version-check -q "${PLAYWRIGHT_SPEC:-playwright==1.65.2}"
"$py" -c "import playwright.sync_api; print('playwright', __import__('importlib.metadata').metadata.version('playwright'))"
