#!/usr/bin/env bash
# The long fuzzing campaign (docs/reliability.md): every fuzz target, one after the other, for
# RUNS executions each (default 10^7), in one process at a time (no -jobs), from its seed corpus and
# regression inputs. Builds the targets first in BUILD (default build-fuzz: clang,
# FLATCAKE_FUZZ=ON, ASan + UBSan), then copies them, so that a rebuild during the campaign does
# not change what runs.
#   scripts/fuzz-long.sh [--runs N] [--build DIR] [--out DIR] [--no-build] [TARGET ...]
# TARGETs are the names after fuzz_ (options journal wire serve_config trace pool_recover); all
# but pool_recover (a store opened per execution: slow) by default.
# Each target's log, grown corpus and any crashing input (crash-*, leak-*, timeout-*) go to
# OUT/<target>/ (default build-fuzz/fuzz-long); the summary table goes to OUT/summary.txt.
# Exits non-zero when any target found a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=10000000 build=build-fuzz out="" do_build=1 targets=()
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz-long.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(options journal wire serve_config trace)  # pool_recover: when named
out=${out:-$build/fuzz-long}
if ((do_build)); then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFLATCAKE_THREAD_SAFETY=ON -DFLATCAKE_SANITIZE=address,undefined -DFLATCAKE_FUZZ=ON \
    -DFLATCAKE_BUILD_PYTHON=OFF -DFLATCAKE_CUDA=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
fi
mkdir -p "$out/bin"
for t in "${targets[@]}"; do
  [[ -x $build/fuzz/fuzz_$t ]] || { echo "fuzz-long.sh: no $build/fuzz/fuzz_$t" >&2; exit 2; }
  cp "$build/fuzz/fuzz_$t" "$out/bin/"
done
printf '%-14s %12s %9s %9s %8s\n' target executions seconds exec/s crashes | tee "$out/summary.txt"
failed=0
for t in "${targets[@]}"; do
  dir=$out/$t
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  inputs=("$dir/corpus" fuzz/corpus/"$t")
  [[ -d fuzz/regressions/$t ]] && inputs+=(fuzz/regressions/"$t")
  start=$(date +%s)
  rc=0
  "$out/bin/fuzz_$t" -runs="$runs" -seed=1 -max_len=8192 -timeout=30 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$dir/" "${inputs[@]}" \
    >"$dir/log.txt" 2>&1 || rc=$?
  secs=$(($(date +%s) - start))
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log.txt" | tail -1)
  crashes=$(find "$dir" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' \
    -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | wc -l)
  ((rc == 0)) || { failed=1; ((crashes)) || crashes="rc=$rc"; }
  printf '%-14s %12s %9s %9s %8s\n' "$t" "${done_runs:-?}" "$secs" \
    "$(( ${done_runs:-0} / (secs > 0 ? secs : 1) ))" "$crashes" | tee -a "$out/summary.txt"
done
exit "$failed"
