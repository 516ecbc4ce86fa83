"""`python -m tasks reports` serves reports/ read-only on loopback, and the UI's Data Docs link follows it."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tasks.core.artifacts import data_docs_artifacts
from tasks.core.reports_server import ENV, reports_server


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    index = tmp_path / "reports/validate/data_docs/index.html"
    index.parent.mkdir(parents=True)
    index.write_text("<html>expectations: 4 passed</html>")
    (tmp_path / "params.yaml").write_text("secret: outside reports/\n")
    return tmp_path


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def test_serves_reports_only_on_loopback(reports):
    server = reports_server(reports, port=0)
    host, port = server.server_address[:2]
    assert host == "127.0.0.1"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        status, body = get(f"http://127.0.0.1:{port}/validate/data_docs/index.html")
        assert status == 200 and b"4 passed" in body
        assert get(f"http://127.0.0.1:{port}/../params.yaml")[0] == 404  # nothing outside reports/
        assert get(f"http://127.0.0.1:{port}/%2e%2e/params.yaml")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_data_docs_link_points_at_the_server_when_named(reports, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    (local,) = data_docs_artifacts(reports)
    assert local.url.startswith("file://") and "local file" in local.description
    monkeypatch.setenv(ENV, "http://127.0.0.1:8765/")
    (served,) = data_docs_artifacts(reports)
    assert served.url == "http://127.0.0.1:8765/validate/data_docs/index.html"


def test_cli_starts_and_stops(reports):
    proc = subprocess.Popen([sys.executable, "-m", "tasks", "--root", str(reports), "reports", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"Serving {reports / 'reports'} on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].split("/ ", 1)[0]
        assert get(f"{url}/validate/data_docs/index.html")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
