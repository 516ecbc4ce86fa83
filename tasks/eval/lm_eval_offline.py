"""lm-eval without the network: the Hugging Face libraries told they are offline, their caches inside the project,
every outside connection refused, and task definitions checked for what would reach the Hub before any loads.

Why each piece (the known leaks): `datasets.load_dataset(<hub id>)` downloads unless HF_DATASETS_OFFLINE is set, and
the libraries read these variables once, at import, so a library imported earlier in the process is switched by
its module constant too; a metric name lm-eval does not register falls back to `evaluate.load(name)`, a Hub
download (refused here by name, before anything runs); a group such as lm-eval's MMLU names Hub datasets in its
subtasks (every leaf task of a group or tag is checked); and anything still trying to open a socket to another
host fails with `OutsideConnection` naming the host, so a leak is an error, never a silent download.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_EVALUATE_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}
# Module constants the libraries computed from the environment at import: (module, attribute, offline value).
OFFLINE_CONSTANTS = (("huggingface_hub.constants", "HF_HUB_OFFLINE", True), ("datasets.config", "HF_HUB_OFFLINE", True),
                     ("datasets.config", "HF_DATASETS_OFFLINE", True), ("evaluate.config", "HF_EVALUATE_OFFLINE", True))
# dataset_path values that read local files with a `datasets` builder shipped inside the package.
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


class OutsideConnection(ConnectionError):
    """Something tried to reach a host other than this machine while benchmarks ran offline."""


def _is_loopback(host: Any) -> bool:
    """True for this machine: no host (a local bind), a loopback name or a loopback address."""
    if host in (None, ""):
        return True
    if not isinstance(host, str):
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _host(address: Any) -> Any:
    """The host of a socket address; None for a Unix socket path (a file on this machine)."""
    if isinstance(address, (str, bytes)):
        return None
    return address[0] if isinstance(address, tuple) and address else address


@contextlib.contextmanager
def no_outside_connections() -> Iterator[list[str]]:
    """Within the block, connecting a socket or resolving a name anywhere but this machine raises
    OutsideConnection; the block yields the list of refused hosts, and if a library swallowed the error the block
    still fails on exit, so an attempt is never silent."""
    real = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
    attempts: list[str] = []

    def refuse(host: Any) -> None:
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        if not _is_loopback(host):
            attempts.append(str(host))
            raise OutsideConnection(f"benchmark: an outside connection to {host!r} was attempted while running "
                                    "offline (a task, metric or model reached for the network; use local files)")

    def connect(sock: socket.socket, address: Any) -> Any:
        refuse(_host(address))
        return real[0](sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> Any:
        refuse(_host(address))
        return real[1](sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        refuse(host)
        return real[2](host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
    try:
        yield attempts
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = real
    if attempts:  # reached only when the block itself finished: a library caught the refusal and went on
        raise OutsideConnection(f"benchmark: outside connections were attempted (and refused) to "
                                f"{', '.join(sorted(set(attempts)))}")


@contextlib.contextmanager
def offline(hf_home: Path) -> Iterator[None]:
    """The block runs with the Hugging Face libraries offline (environment and already-imported module
    constants), HF_HOME under `hf_home`, and no outside connections; everything is restored afterwards."""
    env = {**OFFLINE_ENV, "HF_HOME": str(hf_home), "HF_DATASETS_CACHE": str(hf_home / "datasets")}
    before_env = {k: os.environ.get(k) for k in env}
    before_consts = [(m, a, getattr(sys.modules[m], a)) for m, a, _ in OFFLINE_CONSTANTS
                     if m in sys.modules and hasattr(sys.modules[m], a)]
    os.environ.update(env)
    for module, attr, _ in before_consts:
        setattr(sys.modules[module], attr, True)
    try:
        with no_outside_connections():
            yield
    finally:
        for key, value in before_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for module, attr, value in before_consts:
            setattr(sys.modules[module], attr, value)


def _leaves(name: str, index: dict[str, Any], seen: set[str]) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(task name, its config) of every leaf task `name` stands for: itself, a group's members, a tag's tasks."""
    if name in seen:
        return
    seen.add(name)
    entry = index.get(name)
    if entry is None:
        yield name, None
        return
    kind = entry.kind.name
    if kind == "GROUP":
        members = (entry.cfg or {}).get("task") or []
        for member in members if isinstance(members, list) else [members]:
            if isinstance(member, str):
                yield from _leaves(member, index, seen)
            elif isinstance(member, dict):  # an inline task inside the group file
                yield str(member.get("task", name)), member
    elif kind == "TAG":
        for other, e in index.items():
            if name in e.tags:
                yield from _leaves(other, index, seen)
    else:
        yield name, entry.cfg


def _data_files(kwargs: dict[str, Any]) -> list[str]:
    files = kwargs.get("data_files") or []
    if isinstance(files, dict):
        files = [f for v in files.values() for f in (v if isinstance(v, list) else [v])]
    return [str(f) for f in (files if isinstance(files, list) else [files])]


def task_problems(cfg: dict[str, Any], root: Path, metric_names: set[str]) -> list[str]:
    """Why one task config could reach the network (empty: it reads local files only)."""
    problems = []
    path, kwargs = cfg.get("dataset_path"), cfg.get("dataset_kwargs") or {}
    if cfg.get("class"):
        problems.append("a Python task class: its data source cannot be checked (write it as YAML over local files)")
    elif path not in LOCAL_BUILDERS and not (isinstance(path, str) and (root / path).is_dir()):
        problems.append(f"dataset_path {path!r} is a Hugging Face Hub dataset: use `dataset_path: json` (or csv, "
                        "parquet) with `dataset_kwargs: {data_files: ...}` pointing at files you downloaded")
    for f in _data_files(kwargs):
        if "://" in f:
            problems.append(f"data file {f!r} is a URL: download it and name the local file")
        elif not (root / f).exists():
            problems.append(f"data file {f} does not exist")
    for m in cfg.get("metric_list") or []:
        name = m.get("metric") if isinstance(m, dict) else None
        if isinstance(m, dict) and m.get("hf_evaluate"):
            problems.append(f"metric {name!r} asks for Hugging Face `evaluate` (a Hub download)")
        elif isinstance(name, str) and name not in metric_names:
            problems.append(f"metric {name!r} is not one of lm-eval's own (it would be fetched from the Hub)")
    return problems


def offline_problems(names: list[str], index: dict[str, Any], root: Path) -> list[str]:
    """One line per requested task (or leaf of a group/tag) that is unknown or would reach the network."""
    import lm_eval.api.metrics  # noqa: F401  (fills the metric registry)
    from lm_eval.api.registry import metric_registry

    metric_names = set(metric_registry)
    lines = []
    for name in names:
        for leaf, cfg in _leaves(name, index, set()):
            if cfg is None:
                lines.append(f"{leaf}: no such task in the shipped tasks, benchmark.files or benchmark.include_path")
                continue
            lines += [f"{leaf}{'' if leaf == name else f' (in {name})'}: {p}" for p in task_problems(cfg, root,
                                                                                                   metric_names)]
    return lines
