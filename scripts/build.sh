#!/usr/bin/env bash
# Configures and builds the Release tree in build/ (the flatcake tool, the library, the tests and
# the Python module).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
