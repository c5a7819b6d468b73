#!/usr/bin/env bash
# One fuzz target's short run, as ctest runs it (fuzz/CMakeLists.txt):
#   short-run.sh FUZZER WORKDIR RUNS CORPUS [REGRESSIONS]
# Runs every input of CORPUS and REGRESSIONS, then RUNS mutations from a fixed seed. What the run
# adds to the corpus goes to WORKDIR (emptied first, so that every run starts from the same
# inputs), a crashing input to WORKDIR/crash-*. Non-zero on any crash, leak or sanitizer report.
set -euo pipefail
fuzzer=$1 work=$2 runs=$3
shift 3
dirs=()
for d in "$@"; do [[ -d $d ]] && dirs+=("$d"); done
rm -rf "$work"
mkdir -p "$work/new"
exec "$fuzzer" -seed=1 -runs="$runs" -max_len=8192 -artifact_prefix="$work/" \
  -print_final_stats=1 "$work/new" "${dirs[@]}"
