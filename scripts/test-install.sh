#!/usr/bin/env bash
# Tests FlatCake as its users install it, never from the build tree (docs/install.md):
#   1. `pip wheel` builds the wheel (PEP 517, pyproject.toml, offline: --no-build-isolation),
#      installed into a fresh `python3 -m venv --system-site-packages` (Debian's torch and pytest
#      come from the system); the Python suite, the SGLang and vLLM stand-in tests and the CLI
#      tests run from that environment, outside the source tree, with no PYTHONPATH;
#   2. `cmake --install` into a temporary prefix: the files the checks name, the C++ consumer in
#      examples/consumer/ built against it with find_package and run (shared and static), and
#      the same source built with pkg-config;
#   3. scripts/check-service.sh: `systemd-analyze verify` on the installed unit, and its command
#      lines run by hand with clients connecting (its own, and the venv's Python package);
#   4. `pip uninstall flatcake` then leaves the venv as it was, file for file.
#
#   scripts/test-install.sh [BUILD_DIR]   BUILD_DIR: a configured Release tree to reuse for the
#                                         wheel and the install (default build/, as
#                                         scripts/build.sh makes it)
# Python: /usr/bin/python3 (Debian's, where python3-torch lives). Temporaries are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
case "${1:-}" in
  -h | --help)
    sed -n '2,17p' "$0"
    exit 0
    ;;
esac
build=$(realpath "${1:-build}")
[[ -f $build/CMakeCache.txt ]] || {
  echo "test-install.sh: $build is no configured build tree (scripts/build.sh makes build/)" >&2
  exit 2
}
python=/usr/bin/python3
tmp=$(mktemp -d -t flatcake-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
step() { echo "-- test-install: $*"; }

step "pip wheel (PEP 517, no build isolation, reusing $build)"
"$python" -m pip wheel --quiet --no-build-isolation --no-deps \
  --config-settings=build-dir="$build" -w "$tmp/dist" "$repo"
wheel=$(ls "$tmp"/dist/flatcake-*.whl)
echo "   $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"

step "a fresh venv (--system-site-packages), the wheel installed into it"
"$python" -m venv --system-site-packages "$tmp/venv"
(cd "$tmp/venv" && find . | sort) >"$tmp/venv-before.txt"
"$tmp/venv/bin/python" -m pip install --quiet --no-index --no-deps "$wheel"

step "the Python suite from the venv, outside the source tree, no PYTHONPATH"
mkdir "$tmp/work"
(
  cd "$tmp/work"
  unset PYTHONPATH FLATCAKE_BIN
  export PATH="$tmp/venv/bin:$PATH"
  [[ $(command -v flatcake) == "$tmp/venv/bin/flatcake" ]]
  flatcake --help >/dev/null
  python -c 'import flatcake, flatcake.sglang, flatcake.vllm
print("   import flatcake:", flatcake.__file__)
print("   ", flatcake.sglang.FlatCakeStorage, flatcake.vllm.FlatCakeConnector)'
  python -m pytest -q -p no:cacheprovider "$repo/python/tests"
)

step "cmake --install into a prefix"
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in lib/cmake/FlatCake/FlatCakeConfig.cmake lib/cmake/FlatCake/FlatCakeConfigVersion.cmake \
  include/flatcake/store.h bin/flatcake lib/libflatcake.a lib/libflatcake.so \
  lib/pkgconfig/flatcake.pc share/flatcake/profiles/local.json; do
  [[ -e $prefix/$f ]] || {
    echo "test-install.sh: cmake --install made no $f" >&2
    exit 1
  }
done
if [[ -f $build/libflatcake_gpu_kernels.so ]]; then
  kernels=$("$prefix/bin/flatcake" info --json --dram-bytes 16M |
    "$python" -c 'import json, sys; print(json.load(sys.stdin)["build"]["gpu_kernels"])')
  [[ $kernels == "$prefix/lib/flatcake/libflatcake_gpu_kernels.so" ]] || {
    echo "test-install.sh: the installed tool would load the GPU kernels from $kernels" >&2
    exit 1
  }
  echo "   the installed tool's GPU kernels: $kernels"
fi

step "examples/consumer built against the prefix with find_package, and run"
cmake -S examples/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
mkdir "$tmp/consumer-ssd"
"$tmp/consumer/flatcake_consumer" "$tmp/consumer-ssd"
"$tmp/consumer/flatcake_consumer_static"
step "the same source built with pkg-config"
# shellcheck disable=SC2046  # pkg-config's words are the compiler's arguments
g++ -o "$tmp/consumer-pc" examples/consumer/main.cc \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs flatcake) \
  -Wl,-rpath,"$prefix/lib"
"$tmp/consumer-pc"

step "the systemd unit: verified, its command lines run by hand, clients connecting"
cmake --install "$build" --prefix "$prefix" --component service >/dev/null
# Beside check-service.sh's own client (`flatcake soak --client`), the installed Python package
# connects as an engine process would, and round-trips a batch through both media.
cat >"$tmp/service_client.py" <<'PY'
import os, flatcake, torch
layout = flatcake.KvLayout(4, 2, 4096)
keys = [f"service-check/{i}" for i in range(8)]
src = [torch.randint(0, 256, (layout.block_bytes,), dtype=torch.uint8) for _ in keys]
with flatcake.connect(os.environ["FLATCAKE_SOCKET"], tenant="service-check") as store:
    assert store.put(keys[:4], layout, src[:4], force_medium="dram").written == 4
    assert store.put(keys[4:], layout, src[4:], force_medium="ssd").written == 4
    dst = [torch.zeros(layout.block_bytes, dtype=torch.uint8) for _ in keys]
    got = store.get(keys, layout, dst)
    assert got.hits == 8 and got.bytes_from_ssd == 4 * layout.block_bytes, got
    assert all(torch.equal(a, b) for a, b in zip(src, dst))
print(f"service-check client: 8 blocks byte-exact through {os.environ['FLATCAKE_SOCKET']}")
PY
scripts/check-service.sh --unit "$prefix/lib/systemd/system/flatcake.service" \
  --sysusers "$prefix/lib/sysusers.d/flatcake.conf" \
  --example "$prefix/share/doc/flatcake/node.toml" \
  --client "$tmp/venv/bin/python $tmp/service_client.py" "$prefix/bin/flatcake"

step "pip uninstall removes every file it installed"
"$tmp/venv/bin/python" -m pip uninstall --quiet --yes flatcake
(cd "$tmp/venv" && find . | sort) >"$tmp/venv-after.txt"
if ! diff "$tmp/venv-before.txt" "$tmp/venv-after.txt"; then
  echo "test-install.sh: pip uninstall left the files above (> lines)" >&2
  exit 1
fi

step "passed"
