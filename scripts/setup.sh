#!/usr/bin/env bash
# Installs what gradflow needs on Debian bookworm (as root, or through sudo) and builds it
# in ./build (Release). Safe to run again: apt skips what is installed, CMake rebuilds what changed.
#   bash scripts/setup.sh            # install + build
#   GRADFLOW_SKIP_APT=1 bash scripts/setup.sh   # build only
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake libopenblas-dev libtbb-dev doctest-dev libfmt-dev nlohmann-json3-dev libxxhash-dev graphviz
          pkg-config libsentencepiece-dev libopenmpi-dev openmpi-bin libdnnl-dev)

source scripts/lib.sh
if [ "${GRADFLOW_SKIP_APT:-0}" != 1 ]; then
  apt_install_missing setup "${PACKAGES[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/gradflow"
