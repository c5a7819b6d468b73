#!/usr/bin/env bash
# The GPU data path's check on a machine with a GPU (docs/gpu.md): builds the CUDA part
# (-DFLATCAKE_CUDA=ON, sm_90 by default) and only the targets it needs, runs the GPU tests and
# `flatcake bench gpu --json`, and prints one JSON line (last line of stdout). Diagnostics go to
# stderr, full logs to .device-check/ (and to $OUT when it is set). Sized for one NVIDIA H200 and
# 16 cores: under 8 minutes.
#
#   scripts/device-check.sh               the check
#   scripts/device-check.sh --configure-only  the tools, dependencies and configure steps alone (a
#                                         preflight, also on a machine without a GPU)
#   scripts/device-check.sh --fetch-deps  on a machine with apt (Debian), downloads the Debian
#                                         packages the build needs into .device-deps/, for a
#                                         device machine that has no network: the check unpacks
#                                         them into a private prefix (never into /) when the
#                                         machine lacks them.
#
# Then the vLLM connector on the GPU (docs/vllm.md), when python3's torch has CUDA: the package
# built from the same tree and installed into a venv, and `flatcake bench vllm --device cuda`
# (a paged KV pool on the GPU, the connector's restores through the store's GPU path, each
# layer read by a kernel on a compute stream after wait_for_layer_load, every byte compared,
# connector_vs_store against the store's own GPU restore). Without CUDA torch the JSON says why
# under "connector" and the rest of the check stands.
#
# Environment: FLATCAKE_CUDA_ARCHITECTURES (default 90), DEVICE_CHECK_BYTES (bench restore size,
# default 2GiB), DEVICE_CHECK_JOBS (default: nproc).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS_DIR=$ROOT/.device-deps
# What the build needs beyond a compiler, CMake, ninja and nvcc: as scripts/install-deps.sh names
# them (the subset the library, the CLI and the tests use), plus their runtime libraries.
DEPS=(libxxhash-dev libxxhash0 libzstd-dev zlib1g-dev libcli11-dev nlohmann-json3-dev libtbb-dev
  libtbb12 libtbbmalloc2 libtbbbind-2-5 libgtest-dev libgmock-dev pkgconf pkgconf-bin
  libpkgconf3 pkg-config pybind11-dev)

if [[ "${1:-}" == "--fetch-deps" ]]; then
  mkdir -p "$DEPS_DIR" && cd "$DEPS_DIR" || exit 1
  apt-get download "${DEPS[@]}" || { echo "device-check: apt-get download failed" >&2; exit 1; }
  echo "device-check: $(ls "$DEPS_DIR"/*.deb | wc -l) packages in $DEPS_DIR" >&2
  exit 0
fi

START=$(date +%s)
LOG=$ROOT/.device-check
BUILD=$ROOT/build-device
PREFIX=/tmp/flatcake-device-deps
ARCH=${FLATCAKE_CUDA_ARCHITECTURES:-90}
BYTES=${DEVICE_CHECK_BYTES:-2GiB}
JOBS=${DEVICE_CHECK_JOBS:-$(nproc)}
rm -rf "$LOG"
mkdir -p "$LOG"
STAGE=start
ERRORS=()
declare -A TESTS=()
BENCH=null
GPU_MODE=null
CONNECTOR=null

note() { echo "device-check: $*" >&2; }
elapsed() { echo $(($(date +%s) - START)); }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null ||
  printf '"%s"' "${1//\"/\'}"; }

finish() {
  local status=$1
  local tests="{" sep=""
  for t in "${!TESTS[@]}"; do
    tests+="$sep\"$t\": \"${TESTS[$t]}\""
    sep=", "
  done
  tests+="}"
  local errors="[" esep=""
  for e in "${ERRORS[@]}"; do
    errors+="$esep$(json_str "$e")"
    esep=", "
  done
  errors+="]"
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    cp "$LOG"/*.log "$OUT"/ 2>/dev/null
  fi
  echo "{\"device_check\": \"$status\", \"stage\": \"$STAGE\", \"seconds\": $(elapsed), " \
    "\"gpu_mode\": $GPU_MODE, \"tests\": $tests, \"bench\": $BENCH, \"connector\": $CONNECTOR," \
    "\"errors\": $errors}"
  [[ $status == ok ]] && exit 0 || exit 1
}

fail() {
  ERRORS+=("$1")
  note "FAILED at $STAGE: $1"
  [[ -n "${2:-}" && -f "$2" ]] && { note "last lines of $2:"; tail -n 40 "$2" >&2; }
  finish failed
}

# --- tools ---
STAGE=tools
{
  uname -a
  cat /etc/os-release 2>/dev/null | head -3
  nvidia-smi 2>&1 | head -15
} >"$LOG/environment.log" 2>&1
NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
[[ -z "$NVCC" ]] && fail "nvcc not found (PATH, /usr/local/cuda/bin)"
"$NVCC" --version >>"$LOG/environment.log" 2>&1
command -v cmake >/dev/null || fail "cmake not found"
CXX_BIN=${CXX:-$(command -v g++ || command -v c++ || command -v clang++ || true)}
[[ -z "$CXX_BIN" ]] && fail "no C++ compiler (g++, c++ or clang++)"
GENERATOR=()
if command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi
note "nvcc $NVCC, cmake $(cmake --version | head -1 | awk '{print $3}'), CXX $CXX_BIN," \
  "generator ${GENERATOR[*]:-make}, $JOBS jobs"

# --- dependencies ---
STAGE=deps
CMAKE_DEP_ARGS=()
if ls "$DEPS_DIR"/*.deb >/dev/null 2>&1; then
  # A private prefix: the packages' files under $PREFIX, their .pc files pointed there.
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for deb in "$DEPS_DIR"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$PREFIX" >>"$LOG/deps.log" 2>&1
    else  # not a Debian system: a .deb is an ar archive holding data.tar.*
      python3 - "$deb" "$PREFIX" >>"$LOG/deps.log" 2>&1 <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
PY
    fi
    [[ $? -eq 0 ]] || fail "cannot unpack $deb" "$LOG/deps.log"
  done
  find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|" {} +
  MULTI=$PREFIX/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH="$MULTI/pkgconfig:$PREFIX/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
  export LD_LIBRARY_PATH="$MULTI:${LD_LIBRARY_PATH:-}"
  export CPATH="$PREFIX/usr/include:${CPATH:-}"
  CMAKE_DEP_ARGS+=(-DCMAKE_PREFIX_PATH="$PREFIX/usr;$MULTI/cmake"
    -DPKG_CONFIG_EXECUTABLE="$PREFIX/usr/bin/pkgconf")
  note "using $(ls "$DEPS_DIR"/*.deb | wc -l) packages of .device-deps/ from $PREFIX"
fi

configure() {
  CXX=$CXX_BIN cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFLATCAKE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DFLATCAKE_CUDA_ARCHITECTURES="$ARCH" \
    -DFLATCAKE_BUILD_PYTHON=OFF "${CMAKE_DEP_ARGS[@]}" >"$LOG/configure.log" 2>&1
}

STAGE=configure
rm -rf "$BUILD"
if ! configure; then
  # The packages may be missing: installed the way scripts/install-deps.sh does, where apt can.
  if [[ ${#CMAKE_DEP_ARGS[@]} -eq 0 ]] && command -v apt-get >/dev/null; then
    note "configure failed; trying scripts/install-deps.sh (needs network)"
    timeout 300 scripts/install-deps.sh >"$LOG/install-deps.log" 2>&1 ||
      fail "configure failed and the packages could not be installed (no network?); run\
 scripts/device-check.sh --fetch-deps where apt works and bring .device-deps/" "$LOG/configure.log"
    rm -rf "$BUILD"
    configure || fail "configure failed after installing the packages" "$LOG/configure.log"
  else
    fail "configure failed (missing packages? without network, run scripts/device-check.sh\
 --fetch-deps where apt works and bring .device-deps/)" "$LOG/configure.log"
  fi
fi
grep -q "GPU kernels: built" "$LOG/configure.log" || fail "the CUDA part was not configured" \
  "$LOG/configure.log"
note "configured in $(elapsed) s"
[[ "${1:-}" == "--configure-only" ]] && finish ok

# --- build: the CLI, the GPU tests and the kernels only ---
STAGE=build
timeout 420 cmake --build "$BUILD" -j"$JOBS" --target flatcake_cli flatcake_gpu_kernels \
  gpu_device_test gpu_fake_test >"$LOG/build.log" 2>&1 || fail "build failed" "$LOG/build.log"
note "built in $(elapsed) s"

# --- tests ---
STAGE=tests
GPU_MODE=$(json_str "$("$BUILD/flatcake" info --dram-bytes 64M --json 2>"$LOG/info.log" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gpu_mode"] + ": " + (d["gpu_device"] or d["gpu_reason"]))' 2>>"$LOG/info.log" ||
  echo "unknown (see info.log)")")
note "GPU mode: $GPU_MODE"
for t in gpu_device_test gpu_fake_test; do
  if timeout 180 "$BUILD/src/gpu/$t" >"$LOG/$t.log" 2>&1; then
    if grep -q "SKIPPED" "$LOG/$t.log"; then TESTS[$t]=skipped; else TESTS[$t]=passed; fi
  else
    TESTS[$t]=failed
    ERRORS+=("$t failed")
    note "$t failed; last lines:"
    tail -n 30 "$LOG/$t.log" >&2
  fi
done
[[ "${TESTS[gpu_device_test]}" == skipped ]] && {
  ERRORS+=("gpu_device_test skipped: no usable GPU")
  grep -m1 -A1 Skipped "$LOG/gpu_device_test.log" >&2
}

# --- bench ---
STAGE=bench
BENCH_DIR=$ROOT/.device-check/pool
mkdir -p "$BENCH_DIR"
if timeout 300 "$BUILD/flatcake" bench gpu --json --bytes "$BYTES" --dir "$BENCH_DIR" \
  >"$LOG/bench.log" 2>"$LOG/bench-stderr.log"; then
  BENCH=$(tail -n 1 "$LOG/bench.log")
else
  rc=$?
  ERRORS+=("bench gpu exited $rc: $(tail -n 3 "$LOG/bench-stderr.log" | tr '\n' ' ')")
  [[ -s "$LOG/bench.log" ]] && BENCH=$(tail -n 1 "$LOG/bench.log")
  tail -n 20 "$LOG/bench-stderr.log" >&2
fi
rm -rf "$BENCH_DIR"

# --- the vLLM connector on the GPU ---
STAGE=connector
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
  >"$LOG/connector-torch.log" 2>&1; then
  CONNECTOR="{\"status\": \"skipped\", \"reason\": $(json_str "python3's torch has no CUDA: \
$(tail -n 1 "$LOG/connector-torch.log")")}"
  note "connector skipped: python3's torch has no CUDA"
else
  VENV=$LOG/venv
  if python3 -m venv --system-site-packages "$VENV" >"$LOG/connector-build.log" 2>&1 &&
    timeout 420 "$VENV/bin/pip" install --no-build-isolation --no-deps \
      --config-settings=build-dir="$BUILD" --config-settings=jobs="$JOBS" . \
      >>"$LOG/connector-build.log" 2>&1; then
    mkdir -p "$BENCH_DIR"
    if (cd /tmp && timeout 300 "$VENV/bin/python" -m flatcake._bench_vllm --device cuda --json \
      --bytes 1GiB --first-layer-bytes "$BYTES" --ssd-dir "$BENCH_DIR") \
      >"$LOG/connector.log" 2>"$LOG/connector-stderr.log"; then
      CONNECTOR=$(tail -n 1 "$LOG/connector.log")
    else
      ERRORS+=("bench vllm --device cuda failed: $(tail -n 3 "$LOG/connector-stderr.log" |
        tr '\n' ' ')")
      tail -n 20 "$LOG/connector-stderr.log" >&2
    fi
    rm -rf "$BENCH_DIR"
  else
    ERRORS+=("the Python package did not build or install (connector-build.log)")
    tail -n 30 "$LOG/connector-build.log" >&2
  fi
fi

STAGE=done
if [[ ${#ERRORS[@]} -eq 0 ]]; then finish ok; else finish failed; fi
