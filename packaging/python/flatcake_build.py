"""FlatCake's PEP 517 build backend (pyproject.toml names it): CMake builds the extension for the
interpreter that runs the build, and the `flatcake` tool beside it; their install component
`python` (python/CMakeLists.txt) is staged and written as a wheel.

The staging prefix has three folders, mapped onto the wheel as pip expects:
    platlib/  the wheel's root: the `flatcake` package (modules, extension, GPU kernels)
    scripts/  flatcake-V.data/scripts/: the C++ tool, which pip puts in the environment's bin/
    data/     flatcake-V.data/data/: lib/flatcake/ (kernels, profiles) under the same prefix

Settings (``pip ... --config-settings KEY=VALUE``, ``-C`` for short):
    build-dir=DIR          build in DIR and keep it (default: a temporary folder, removed after);
                           an existing tree keeps its own options (scripts/test.sh reuses build/)
    cmake.define.NAME=VAL  -DNAME=VAL for a new tree (e.g. cmake.define.FLATCAKE_CUDA=OFF)
    jobs=N                 parallel build jobs (default: the machine's cores)

Nothing here needs more than the standard library: a build without isolation
(``pip install --no-build-isolation .``) uses CMake, Ninja and pybind11 from the system
(Debian: cmake, ninja-build, pybind11-dev); an isolated build installs the requirements that
pyproject.toml declares.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

NAME = "flatcake"
SUMMARY = "FlatCake: a KV-cache store for LLM serving (DRAM and NVMe SSD as peers)"
REQUIRES_PYTHON = ">=3.9"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BuildError(RuntimeError):
    pass


def version() -> str:
    """The CMake project's version (CMakeLists.txt), the one home of FlatCake's version."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*flatcake\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise BuildError("CMakeLists.txt: no `project(flatcake VERSION x.y.z)`")
    return m.group(1)


def metadata_text() -> str:
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version()}\nSummary: {SUMMARY}\n"
            f"Requires-Python: {REQUIRES_PYTHON}\nLicense: Proprietary\n")


def wheel_tag() -> str:
    """cpXY-cpXY[t]-PLATFORM: the extension is built for this interpreter's ABI only."""
    if sys.implementation.name != "cpython":
        raise BuildError(f"FlatCake's extension is built for CPython, not {sys.implementation.name}")
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    abi = py + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{abi}-{platform}"


def _interpreter() -> str:
    """The interpreter to build for: in a virtual environment, the one it was made from (the
    same headers and ABI; a build tree configured for it is then reused as it is)."""
    if sys.prefix != sys.base_prefix and getattr(sys, "_base_executable", None):
        return sys._base_executable
    return sys.executable


def _run(cmd: list) -> None:
    print("flatcake_build:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc != 0:
        raise BuildError(f"`{' '.join(cmd)}` failed with status {rc}")


def _setting(settings: dict, key: str, default=None):
    value = (settings or {}).get(key, default)
    return value[-1] if isinstance(value, list) else value


def _cmake_defines(settings: dict) -> list:
    out = []
    for key, value in (settings or {}).items():
        if key.startswith("cmake.define."):
            for v in value if isinstance(value, list) else [value]:
                out.append(f"-D{key[len('cmake.define.'):]}={v}")
    return out


def _pybind11_hint() -> list:
    """pybind11's CMake folder when pybind11 is importable (the isolated build's requirement);
    otherwise CMake finds the system's (Debian pybind11-dev)."""
    try:
        import pybind11  # noqa: PLC0415
    except ImportError:
        return []
    return [f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"]


def _configure(build_dir: str, settings: dict) -> None:
    cmd = ["cmake", "-S", ROOT, "-B", build_dir, f"-DFLATCAKE_PYTHON_EXECUTABLE={_interpreter()}",
           "-DFLATCAKE_BUILD_PYTHON=ON"]
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        if shutil.which("ninja"):
            cmd += ["-G", "Ninja"]
        cmd += ["-DCMAKE_BUILD_TYPE=Release", "-DFLATCAKE_BUILD_TESTS=OFF"]
    cmd += _pybind11_hint() + _cmake_defines(settings)
    _run(cmd)


def _stage(settings: dict, staging: str) -> None:
    """Configures, builds the package's targets and installs the `python` component."""
    kept = _setting(settings, "build-dir")
    build_dir = os.path.abspath(kept) if kept else tempfile.mkdtemp(prefix="flatcake-build-")
    try:
        _configure(build_dir, settings)
        jobs = str(_setting(settings, "jobs", os.cpu_count() or 1))
        _run(["cmake", "--build", build_dir, "-j", jobs, "--target", "flatcake_py_core",
              "flatcake_cli"])
        _run(["cmake", "--install", build_dir, "--component", "python", "--prefix", staging])
    finally:
        if not kept:
            shutil.rmtree(build_dir, ignore_errors=True)
    package = os.path.join(staging, "platlib", NAME)
    built = os.listdir(package) if os.path.isdir(package) else []
    if not any(f.startswith("_core.") for f in built):
        raise BuildError("the build made no flatcake._core extension: is pybind11 installed "
                         "(Debian pybind11-dev, or pybind11 for this interpreter)? CMake's "
                         "warnings above say what it could not find")
    if not os.path.isfile(os.path.join(staging, "scripts", NAME)):
        raise BuildError("the build made no `flatcake` tool")


def _wheel_text(tag: str) -> str:
    return (f"Wheel-Version: 1.0\nGenerator: flatcake_build {version()}\nRoot-Is-Purelib: false\n"
            f"Tag: {tag}\n")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


class _WheelWriter:
    """A wheel's zip with its RECORD: every file written through add() is listed, so that
    `pip uninstall` removes every file it installed."""

    def __init__(self, path: str):
        self._zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self._record = []

    def add(self, arcname: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        # A regular file's full mode: installers set the executable bit only when both are there.
        info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self._zip.writestr(info, data)
        self._record.append((arcname, _record_hash(data), str(len(data))))

    def add_tree(self, folder: str, prefix: str) -> None:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, folder).replace(os.sep, "/")
                with open(path, "rb") as f:
                    executable = bool(os.stat(path).st_mode & 0o111)
                    self.add(prefix + rel, f.read(), executable=executable)

    def close(self, record_name: str) -> None:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(self._record)
        writer.writerow((record_name, "", ""))
        info = zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        self._zip.writestr(info, out.getvalue())
        self._zip.close()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    tag = wheel_tag()
    name = f"{NAME}-{version()}-{tag}.whl"
    dist_info = f"{NAME}-{version()}.dist-info"
    data = f"{NAME}-{version()}.data"
    with tempfile.TemporaryDirectory(prefix="flatcake-stage-") as staging:
        _stage(config_settings, staging)
        path = os.path.join(wheel_directory, name)
        wheel = _WheelWriter(path)
        try:
            wheel.add_tree(os.path.join(staging, "platlib"), "")
            wheel.add_tree(os.path.join(staging, "scripts"), f"{data}/scripts/")
            if os.path.isdir(os.path.join(staging, "data")):
                wheel.add_tree(os.path.join(staging, "data"), f"{data}/data/")
            wheel.add(f"{dist_info}/METADATA", metadata_text().encode())
            wheel.add(f"{dist_info}/WHEEL", _wheel_text(tag).encode())
            wheel.close(f"{dist_info}/RECORD")
        except BaseException:
            os.unlink(path)
            raise
    return name


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The metadata without a build: pip reads it before it builds the wheel."""
    dist_info = f"{NAME}-{version()}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for name, text in (("METADATA", metadata_text()), ("WHEEL", _wheel_text(wheel_tag()))):
        with open(os.path.join(metadata_directory, dist_info, name), "w", encoding="utf-8") as f:
            f.write(text)
    return dist_info


def get_requires_for_build_wheel(config_settings=None):
    return []  # pyproject.toml's build-system.requires are all


def get_requires_for_build_sdist(config_settings=None):
    return []


def _source_files() -> list:
    """The tracked files (git), or, outside a checkout, every file but build trees and caches."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout
        return sorted(p for p in out.decode().split("\0") if p)
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames
                           if not (d.startswith(("build", ".")) or d == "__pycache__")]
            files += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames]
        return sorted(files)


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{version()}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in _source_files():
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}", recursive=False)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        text = metadata_text().encode()
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))
    return name
