"""Shared fixtures. Run as: PYTHONPATH=<build>/python /usr/bin/python3 -m pytest python/tests"""

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # host_pool.py


@pytest.fixture
def ssd_dir(tmp_path):
    d = tmp_path / "ssd"
    d.mkdir()
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)  # pool files are large; pytest keeps old tmp dirs
