"""A local Prefect server and the processes around it (serve, worker), started and stopped cleanly.

Used by `python -m flows server`, the deployment tests and the browser test: nothing here talks to any cloud.
The server binds to 127.0.0.1 only; its state (SQLite) lives in the PREFECT_HOME given.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_env(api_url: str | None = None, home: Path | None = None, **extra: str) -> dict[str, str]:
    """Environment for a child that talks to the server at `api_url` (or starts one in `home`)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("DVC_NO_ANALYTICS", "1")
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    if api_url is not None:
        env["PREFECT_API_URL"] = api_url
    env.update(extra)
    return env


def wait_healthy(api_url: str, timeout: float = 90.0, proc: subprocess.Popen | None = None) -> float:
    """Poll `<api_url>/health` until it answers 200; return the seconds waited. Fails early if `proc` died."""
    t0 = time.monotonic()
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the Prefect server exited with code {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"the Prefect server at {api_url} was not healthy after {timeout:g} s")
        time.sleep(0.25)


def stop(proc: subprocess.Popen, grace: float = 15.0) -> int | None:
    """Stop a server, `serve` or worker process: SIGTERM, then SIGINT (a worker needs both), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        if proc.poll() is not None:
            break
        proc.send_signal(sig)
        try:
            proc.wait(timeout=grace if sig != signal.SIGKILL else None)
        except subprocess.TimeoutExpired:
            continue
    return proc.returncode


@contextlib.contextmanager
def local_server(home: Path, port: int | None = None, log_file: Path | None = None,
                 timeout: float = 90.0) -> Iterator[str]:
    """Run `prefect server start --host 127.0.0.1` with state in `home`; yield its API URL, stop it on exit."""
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log = open(log_file or home / "server.log", "ab")
    # The UI asks its browser to call the API at server.ui.api_url, derived from these settings (not from the
    # --port flag): without them the pages would call the default port 4200.
    env = prefect_env(home=home, PREFECT_SERVER_API_HOST="127.0.0.1", PREFECT_SERVER_API_PORT=str(port),
                      PREFECT_UI_API_URL=api_url)
    env.pop("PREFECT_API_URL", None)  # the server must not try to reach another server
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(api_url, timeout, proc)
        yield api_url
    finally:
        stop(proc)
        log.close()


def drain_prefect_workers(timeout: float = 30.0) -> None:
    """Flush and drop Prefect's process-wide log and event workers while their server is still up: call it before
    stopping a server this process talked to, or a later drain (at exit, or a test harness's) waits on a dead one."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        try:
            worker.drain_all(timeout=timeout)
        except Exception:  # nothing started, or already drained: nothing to flush
            pass
