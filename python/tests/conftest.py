"""Shared fixtures. The suite tests the installed package and tool (scripts/test-install.sh makes
a virtual environment with the wheel in it and runs the suite from there):

    pip install --no-build-isolation .          # into the environment, then from anywhere:
    python -m pytest -q <repo>/python/tests     # `flatcake` on PATH, or FLATCAKE_BIN=<path>
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # host_pool.py, hybrid_pools.py, sglang_util.py
# The suite runs as if SGLang were installed: flatcake.sglang binds the stand-in's interface
# (SGLang 8905cbd's modules and types; see sglang_standin/README.md). test_sglang_v2.py checks
# the fallback used without SGLang in a subprocess.
sys.path.insert(0, os.path.join(HERE, "sglang_standin"))
# Likewise vLLM: flatcake.vllm subclasses the stand-in's KVConnectorBase_V1 (vLLM 00f4240e; see
# vllm_standin/README.md); test_vllm_connector.py checks the fallback in a subprocess.
sys.path.insert(0, os.path.join(HERE, "vllm_standin"))
REPO = os.path.dirname(os.path.dirname(HERE))
# The tool under test: FLATCAKE_BIN, else the `flatcake` the package installed on PATH.
FLATCAKE_BIN = os.environ.get("FLATCAKE_BIN") or shutil.which("flatcake") or ""


def flatcake_bin() -> str:
    """FLATCAKE_BIN, failing the calling test clearly when there is none."""
    assert FLATCAKE_BIN and os.access(FLATCAKE_BIN, os.X_OK), (
        "no `flatcake` executable: install the package (pip install .) into this environment "
        f"or set FLATCAKE_BIN (found {FLATCAKE_BIN!r})")
    return FLATCAKE_BIN


def pytest_report_header(config):
    import flatcake  # noqa: PLC0415 (after the stand-ins' paths above)
    return [f"flatcake {flatcake.__version__}: package {os.path.dirname(flatcake.__file__)}, "
            f"tool {FLATCAKE_BIN or '(none on PATH)'}"]


@pytest.fixture
def ssd_dir(tmp_path):
    d = tmp_path / "ssd"
    d.mkdir()
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)  # pool files are large; pytest keeps old tmp dirs


@pytest.fixture
def daemon(tmp_path):
    """A `flatcake serve` on a temporary socket and pool; yields the socket path."""
    ssd = tmp_path / "pool"
    ssd.mkdir()
    sock = str(tmp_path / "flatcake.sock")
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([flatcake_bin(), "serve", "--socket", sock, "--dram-bytes", "32M",
                             "--ssd-dir", str(ssd), "--ssd-bytes", "128M", "--ssd-file-bytes",
                             "16M"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while not os.path.exists(sock):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            log.close()
            raise AssertionError("flatcake serve did not start: " +
                                 (tmp_path / "serve.log").read_text())
        time.sleep(0.05)
    yield sock
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()
    log.close()
