"""The package as pip installed it (scripts/test-install.sh runs the suite from a virtual
environment with the wheel in it): the distribution's files, the `flatcake` tool it put on PATH,
and that both were built from the same FlatCake with the same parts."""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

import flatcake
from conftest import REPO, flatcake_bin

DIST = importlib.metadata.distribution("flatcake")


def installed_files():
    return {str(f): os.path.realpath(f.locate()) for f in DIST.files}


def test_the_package_comes_from_the_environment_not_the_source_tree():
    package = os.path.realpath(os.path.dirname(flatcake.__file__))
    assert not package.startswith(os.path.realpath(REPO) + os.sep), package
    assert DIST.version == flatcake.__version__
    assert package in {os.path.dirname(p) for p in installed_files().values()}


def test_every_recorded_file_is_there_and_the_tool_is_on_path():
    files = installed_files()
    missing = [name for name, path in files.items() if not os.path.exists(path)]
    assert not missing
    tools = [p for p in files.values() if os.path.basename(p) == "flatcake"
             and os.access(p, os.X_OK)]
    assert len(tools) == 1, tools
    assert os.path.realpath(flatcake_bin()) == tools[0]
    assert os.path.dirname(tools[0]) == os.path.realpath(os.path.join(sys.prefix, "bin"))


def test_the_tool_and_the_extension_report_the_same_build():
    out = subprocess.run([flatcake_bin(), "info", "--json", "--dram-bytes", "16M"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    tool = json.loads(out)["build"]
    ext = flatcake.build_info()
    for part in ("version", "io_uring", "cuda_kernels", "serve", "cluster", "metrics"):
        assert tool[part] == ext[part], part
    assert ext["serve"] == flatcake._core.has_daemon_client
    if ext["cuda_kernels"]:
        # Each finds the kernels the wheel put beside it, not the build tree's.
        files = set(installed_files().values())
        for who, path in (("tool", tool["gpu_kernels"]), ("extension", ext["gpu_kernels"])):
            assert os.path.realpath(path) in files, (who, path)
        assert os.path.dirname(ext["gpu_kernels"]) == os.path.dirname(flatcake.__file__)


def test_the_wheel_ships_the_simulator_profiles_beside_its_tool():
    shipped = [p for p in installed_files().values()
               if p.endswith(os.path.join("lib", "flatcake", "profiles", "local.json"))]
    assert len(shipped) == 1
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(flatcake_bin())))
    assert shipped[0] == os.path.join(prefix, "lib", "flatcake", "profiles", "local.json")


@pytest.mark.parametrize("where", ["lib/flatcake/profiles", "share/flatcake/profiles"])
def test_the_tool_finds_profiles_in_its_prefix(tmp_path, where):
    """Where the wheel (lib/) and `cmake --install` (share/) put them: a copy of the tool in a
    prefix of its own finds a profile that is nowhere else."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / where).mkdir(parents=True)
    tool = prefix / "bin" / "flatcake"
    with open(flatcake_bin(), "rb") as f:
        tool.write_bytes(f.read())
    tool.chmod(0o755)
    with open(os.path.join(os.path.dirname(os.path.realpath(flatcake_bin())), "..", "lib",
                           "flatcake", "profiles", "local.json")) as f:
        profile = json.load(f)
    profile["name"] = "only-in-this-prefix"
    with open(prefix / where / "only-in-this-prefix.json", "w") as f:
        json.dump(profile, f)
    env = {k: v for k, v in os.environ.items() if k != "FLATCAKE_PROFILES"}
    proc = subprocess.run([str(tool), "simulate", "--profile", "only-in-this-prefix", "--policy",
                           "flat", "--qps", "0.1", "--requests", "20", "--json"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["profile"] == "only-in-this-prefix"
