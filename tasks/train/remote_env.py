"""What the DeepSpeed launcher's other hosts get of the stage's environment.

DeepSpeed's multi-node runner (pdsh, by default) starts each host's ranks over SSH with a command line that
exports only the variables named `PYTHON*`, `NCCL*`, `UCX*`, `MV2*`, `MLFLOW*` and the lines of a
`.deepspeed_env` file (read from the home folder, then the working directory; `DS_ENV_FILE` names another
file). Everything else the stage's process had — the CPU ranks' `DS_ACCELERATOR` / `OMP_NUM_THREADS`,
`GLOO_SOCKET_IFNAME`, the offline switches `HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`, `WANDB_MODE`,
forgeline's own `FORGELINE_*` knobs — would be missing on every host but the first, so ranks of one run would
not run alike. `write_env_file` writes one env file for the launch: these variables, then the user's own
`.deepspeed_env` lines (so what the user wrote for the remote hosts wins), and the launch points `DS_ENV_FILE`
at it.

Secrets are never forwarded: DeepSpeed prints the exports in its log line `cmd = ...` and they sit on every
host's process list. A name with a TOKEN, KEY, SECRET, PASSWORD or CREDENTIAL part (HF_TOKEN, WANDB_API_KEY)
is left out — log the hosts in (`wandb login`, `huggingface-cli login` on a shared home) or put it in your own
`.deepspeed_env` knowingly. Values DeepSpeed cannot quote safely (a `"`, `$`, backquote or backslash, or a
line break) are left out too, by name, with a warning.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Mapping

from tasks.core.files import write_text_atomic

log = logging.getLogger("forgeline.launch")

# Variables (by prefix, or whole names ending in no underscore) the ranks or the libraries they load read.
FORWARD = ("FORGELINE_", "WANDB_", "HF_", "TRANSFORMERS_", "TOKENIZERS_PARALLELISM", "TORCH_NCCL_",
           "TORCH_DISTRIBUTED_", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "PYTORCH_CUDA_ALLOC_CONF",
           "CUDA_DEVICE_MAX_CONNECTIONS", "DS_ACCELERATOR", "OMP_NUM_THREADS")
SECRET = re.compile(r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(_|$)")
UNSAFE = re.compile(r'["$`\\\n\r]')  # DeepSpeed wraps such a value in "..." on a shell command line
DEEPSPEED_NAME = ".deepspeed_env"


def forwarded(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` the other hosts' ranks get, in name order."""
    out, skipped = {}, []
    for name in sorted(environ):
        if not name.startswith(FORWARD) or SECRET.search(name.upper()):
            continue
        if UNSAFE.search(environ[name]):
            skipped.append(name)
            continue
        out[name] = environ[name]
    if skipped:
        log.warning("not forwarded to the other hosts (their values hold characters DeepSpeed cannot quote on a "
                    "command line): %s", ", ".join(skipped))
    return out


def user_lines(root: Path, environ: Mapping[str, str], home: Path | None = None) -> list[str]:
    """The lines of the user's own env files, in the order DeepSpeed reads them (home, then the project)."""
    name = environ.get("DS_ENV_FILE", DEEPSPEED_NAME)
    lines = []
    for folder in (home or Path.home(), root):
        path = folder / name
        if path.is_file():
            lines += [line for line in path.read_text().splitlines() if "=" in line]
    return lines


def write_env_file(path: Path, root: Path, environ: Mapping[str, str], home: Path | None = None) -> Path:
    """Write the launch's env file (the forwarded variables, then the user's lines) and return its absolute
    path, for `DS_ENV_FILE`."""
    lines = [f"{k}={v}" for k, v in forwarded(environ).items()] + user_lines(root, environ, home)
    path = Path(path).resolve()
    write_text_atomic(path, "".join(line + "\n" for line in lines))
    return path
