"""Shared fixtures. Run as: PYTHONPATH=<build>/python /usr/bin/python3 -m pytest python/tests"""

import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # host_pool.py, hybrid_pools.py, sglang_util.py
# The suite runs as if SGLang were installed: flatcake.sglang binds the stand-in's interface
# (SGLang 8905cbd's modules and types; see sglang_standin/README.md). test_sglang_v2.py checks
# the fallback used without SGLang in a subprocess.
sys.path.insert(0, os.path.join(HERE, "sglang_standin"))


@pytest.fixture
def ssd_dir(tmp_path):
    d = tmp_path / "ssd"
    d.mkdir()
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)  # pool files are large; pytest keeps old tmp dirs
