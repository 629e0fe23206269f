"""Headless Chromium for the tests that click through JupyterLab (formgrader, the student's lab).

Debian's ``chromium`` (``.ci/run`` installs it) driven by Playwright (requirements.txt). Without a
browser the tests skip and say why, except where ``LAS_REQUIRE_BROWSER=1`` (CI): there a missing
browser is a failure, so the browser tests cannot silently stop running.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
#: Chromium's flags on a machine with no network and no screen (as root, hence --no-sandbox)
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
REQUIRED = os.environ.get("LAS_REQUIRE_BROWSER") == "1"
NO_BROWSER = "no Chromium on this machine: `apt-get install chromium` (.ci/run does) to run the browser tests"


def playwright_or_skip():
    """The ``playwright.sync_api`` module; skips the calling test module when there is no browser."""
    if REQUIRED:
        assert CHROMIUM is not None, NO_BROWSER
        import playwright.sync_api as api
        return api
    if CHROMIUM is None:
        pytest.skip(NO_BROWSER, allow_module_level=True)
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements.txt)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_settings(folder: Path) -> Path:
    """A JupyterLab user-settings folder without the "get notified about Jupyter news?" pop-up."""
    news = folder / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text('{"fetchNews": "false"}', encoding="utf-8")
    return folder


class Server:
    """A Jupyter server started by ``cmd`` (logging to ``log``), stopped with its process group."""

    def __init__(self, cmd: list[str], *, cwd: Path, env: dict, log: Path, port: int, token: str,
                 timeout_s: float = 120):
        self.port, self.token, self.log = port, token, log
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            assert self.proc.poll() is None, "the Jupyter server exited:\n" + self.tail()
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={token}", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise AssertionError(f"the Jupyter server did not answer in {timeout_s:.0f} s:\n" + self.tail())

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-n:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
