"""`python -m tasks reports`: the human-facing reports (`reports/`: GX Data Docs, loss-curve PNGs, ...) over HTTP
on 127.0.0.1, so the Prefect UI's links open in a browser (which refuses `file://` links from an http page).

With FORGELINE_REPORTS_URL set to this server's address in the flow's environment (`serve`/worker/`run`),
the flow's link artifacts point here instead of at local files. Read-only static files (the standard library's
handler: no listing outside `reports/`, no uploads).
"""

from __future__ import annotations

import functools
import os
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tasks.core import graph

ENV = "FORGELINE_REPORTS_URL"


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the base class's name)
        pass  # one line per request on stderr would drown the terminal; errors still raise


def reports_server(root: Path, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A server (not yet serving: call serve_forever) for `<root>/reports`; port 0 picks a free one."""
    folder = root / graph.REPORTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return ThreadingHTTPServer((host, port), functools.partial(_QuietHandler, directory=str(folder)))


def report_url(root: Path, path: Path) -> tuple[str, str]:
    """(url, kind of link) for a file under reports/: on the reports server when FORGELINE_REPORTS_URL is set,
    else the local file."""
    base = os.environ.get(ENV, "").rstrip("/")
    if base:
        return f"{base}/{path.resolve().relative_to((root / graph.REPORTS_DIR).resolve()).as_posix()}", "served"
    return path.resolve().as_uri(), "local file"
