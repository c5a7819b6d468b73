#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the GoogleTest suite (ctest), the
# concurrency tests (labels stress and concurrent) again under ThreadSanitizer, the whole suite
# again built with clang under AddressSanitizer and UndefinedBehaviorSanitizer (thread-safety
# analysis as errors), with a short run of each libFuzzer target and its regression inputs, the
# installed package's tests (scripts/test-install.sh: the wheel in a venv with the Python suite
# run there, `cmake --install` with a C++ consumer, the systemd unit), and the clang-format
# check (clang-tidy with --tidy). docs/reliability.md says what each tree covers.
#
#   scripts/test.sh [--tidy]   --tidy: also clang-tidy over every source (about 5 minutes on the
#                              2-core VM; without it the run stays within CI's 30-minute budget)
set -euo pipefail
cd "$(dirname "$0")/.."
tidy=0
for arg in "$@"; do
  case "$arg" in
    --tidy) tidy=1 ;;
    -h | --help)
      sed -n '2,11p' "$0"
      exit 0
      ;;
    *)
      echo "test.sh: unknown argument '$arg' (--tidy, --help)" >&2
      exit 2
      ;;
  esac
done
# Each stage's header says how long the run has taken so far (CI's budget is 30 minutes).
stage() { echo "== $1 ($((SECONDS / 60)) min $((SECONDS % 60)) s into the run)"; }
scripts/install-deps.sh
stage "build (Release)"
scripts/build.sh
# The GPU data path's kernels compile in build/ wherever CMake finds nvcc (FLATCAKE_CUDA=AUTO);
# its fake-device tests (label gpu-fake) run in the ctest below either way.
if [[ -f build/libflatcake_gpu_kernels.so ]]; then
  echo "== CUDA part: built (build/libflatcake_gpu_kernels.so)"
else
  echo "== CUDA part: not built (no nvcc)"
fi

stage "ctest (Release)"
(cd build && ctest -j"$(nproc)" --output-on-failure --timeout 900)

stage "stress and concurrent tests under ThreadSanitizer"
# Without io_uring: this tree also checks the build with FLATCAKE_WITH_URING=OFF (src/io's
# stand-in engine, the tests that skip what needs io_uring); the engines' threads under TSan are
# the preadv pool's.
# At -O1 with line tables only (-g1: enough for TSan's reports), which compiles in about half the
# time of RelWithDebInfo's -O2 -g.
# Both sanitizer trees build with precompiled headers and unity builds (FLATCAKE_PCH,
# CMAKE_UNITY_BUILD: each library's sources compiled eight to a file), which halve their build
# times; the Release tree above builds each file alone, so that a missing #include still fails.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DFLATCAKE_SANITIZE=thread \
  -DFLATCAKE_WITH_URING=OFF -DFLATCAKE_BUILD_PYTHON=OFF -DFLATCAKE_CUDA=OFF \
  -DFLATCAKE_PCH=ON -DCMAKE_UNITY_BUILD=ON
tsan_targets=$(cd build && ctest -N -L 'stress|concurrent' | sed -n 's/^ *Test *#[0-9]*: //p')
cmake --build build-tsan -j"$(nproc)" --target $tsan_targets
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1" \
  ctest -j"$(nproc)" -L 'stress|concurrent' --output-on-failure --timeout 900)

stage "clang build: ASan + UBSan, thread-safety analysis, fuzz targets"
# One more tree checks three things: the whole suite under AddressSanitizer (LeakSanitizer
# included) and UndefinedBehaviorSanitizer (a report fails its test), the lock annotations
# (-Wthread-safety as errors; gcc ignores them), and the libFuzzer targets (fuzz/): a short run of
# each from its seed corpus, and every regression input.
# At -O0: the sanitizers' instrumentation makes this tree's optimised build its longest stage
# (10 of 33 minutes at -O3; -O1 saves 5% of that), and -O0 compiles in about 40% of -O3's time.
# Long fuzzing campaigns build optimised targets of their own (scripts/fuzz-long.sh).
# Linked by lld: bfd's links of the sanitized test binaries took 131 of the tree's 964 build
# seconds (2026-12-06).
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
  -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld \
  -DFLATCAKE_THREAD_SAFETY=ON -DFLATCAKE_SANITIZE=address,undefined -DFLATCAKE_FUZZ=ON \
  -DFLATCAKE_BUILD_PYTHON=OFF -DFLATCAKE_CUDA=OFF -DFLATCAKE_PCH=ON -DCMAKE_UNITY_BUILD=ON
# The test binaries, and the fuzzers (a fuzz test is named after its fuzzer; _regressions too).
clang_targets=$(cd build-clang && ctest -N | sed -n 's/^ *Test *#[0-9]*: //p' |
  sed 's/_regressions$//' | sort -u)
cmake --build build-clang -j"$(nproc)" --target flatcake_store flatcake_eval $clang_targets
(cd build-clang && ctest -j"$(nproc)" --output-on-failure --timeout 900)

stage "installed: wheel in a venv (pytest there), cmake --install, consumer, systemd unit"
# The Python suite runs against the wheel installed into a fresh venv, from outside the source
# tree; the wheel and the install reuse build/ (scripts/test-install.sh, docs/install.md).
scripts/test-install.sh build

stage "clang-format"
scripts/check-format.sh

if ((tidy)); then
  stage "clang-tidy"
  scripts/check-tidy.sh build
else
  echo "== clang-tidy: not run (scripts/test.sh --tidy; scripts/check-tidy.sh build FILE... for a change)"
fi
stage "done"
