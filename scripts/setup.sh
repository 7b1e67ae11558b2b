#!/usr/bin/env bash
# Installs what gradflow needs on Debian bookworm (as root, or through sudo) and builds it
# in ./build (Release). Safe to run again: apt skips what is installed, CMake rebuilds what changed.
#   bash scripts/setup.sh            # install + build
#   GRADFLOW_SKIP_APT=1 bash scripts/setup.sh   # build only
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake libopenblas-dev libtbb-dev doctest-dev libfmt-dev nlohmann-json3-dev libxxhash-dev graphviz
          pkg-config libsentencepiece-dev libopenmpi-dev openmpi-bin libdnnl-dev)

if [ "${GRADFLOW_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/gradflow"
