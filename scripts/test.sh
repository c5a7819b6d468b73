#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the GoogleTest suite (ctest), the
# concurrency stress tests again under ThreadSanitizer, the library and the other tests again
# built with clang (thread-safety analysis as errors, no io_uring), the Python suite (pytest), and
# the clang-format and clang-tidy checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The GPU data path's kernels compile in build/ wherever CMake finds nvcc (FLATCAKE_CUDA=AUTO);
# its fake-device tests (label gpu-fake) run in the ctest below either way.
if [[ -f build/libflatcake_gpu_kernels.so ]]; then
  echo "== CUDA part: built (build/libflatcake_gpu_kernels.so)"
else
  echo "== CUDA part: not built (no nvcc)"
fi

echo "== ctest (Release)"
(cd build && ctest --output-on-failure --timeout 900)

echo "== stress tests under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLATCAKE_SANITIZE=thread \
  -DFLATCAKE_BUILD_PYTHON=OFF -DFLATCAKE_CUDA=OFF
stress_targets=$(cd build && ctest -N -L stress | sed -n 's/^ *Test *#[0-9]*: //p')
cmake --build build-tsan -j"$(nproc)" --target $stress_targets
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1" ctest -L stress --output-on-failure --timeout 900)

echo "== clang build: thread-safety analysis, without io_uring"
# One extra tree checks two things: the lock annotations (-Wthread-safety as errors; gcc ignores
# them) and the build with FLATCAKE_WITH_URING=OFF, whose tests skip what needs io_uring.
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFLATCAKE_THREAD_SAFETY=ON -DFLATCAKE_WITH_URING=OFF -DFLATCAKE_BUILD_PYTHON=OFF -DFLATCAKE_CUDA=OFF
other_targets=$(cd build-clang && ctest -N -LE stress | sed -n 's/^ *Test *#[0-9]*: //p')
cmake --build build-clang -j"$(nproc)" --target flatcake_store flatcake_eval $other_targets
(cd build-clang && ctest -LE stress --output-on-failure --timeout 900)

if [[ -d python/tests ]]; then
  echo "== pytest"
  PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q python/tests
fi

echo "== clang-format"
scripts/check-format.sh

echo "== clang-tidy"
scripts/check-tidy.sh build
