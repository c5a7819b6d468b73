#!/usr/bin/env bash
# Installs every Debian package FlatCake needs to build, test and run (idempotent).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  liburing-dev libxxhash-dev libzstd-dev zlib1g-dev
  libcli11-dev nlohmann-json3-dev libtbb-dev libprotobuf-dev protobuf-compiler
  libtomlplusplus-dev prometheus-cpp-dev etcd-server etcd-client
  libucx-dev ucx-utils
  pybind11-dev python3-dev python3-torch python3-numpy python3-pytest python3-pip python3-venv
  systemd
  clang clang-format clang-tidy lld libfuzzer-14-dev gnuplot-nox
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
