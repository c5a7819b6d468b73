#!/usr/bin/env bash
# Installs the dependencies, builds, and runs FlatCake's main job on its built-in default
# workload. Extra arguments are passed to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec ./build/flatcake replay "$@"
