#!/usr/bin/env bash
# The installed package as an outside project sees it (docs/library.md): installs BUILD (default
# build/, already built) into a temporary prefix, checks that the installed headers hold no
# instruction-set-specific code, then configures, builds and runs each of examples/ against the
# prefix with a short budget, and builds gradient_probe once more through pkg-config. Fails on any
# error, on a failed gradient check and on a training loss that did not fall.
#   bash scripts/test_examples.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

step() { echo "test_examples: $* ($SECONDS s)"; }

step "install $build into a temporary prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/gradflow/gradflow.h" && test -f "$prefix/lib/cmake/gradflow/gradflowConfig.cmake"

# The library may be built with -march=native; its consumers are not, so no header may depend on it.
if grep -rnE 'immintrin|x86intrin|__AVX|__SSE|__FMA__|__m(128|256|512)|__attribute__\(\(target|\[\[gnu::target' "$prefix/include"; then
  echo "test_examples: the installed headers above hold instruction-set-specific code (docs/library.md)" >&2
  exit 1
fi

for ex in custom_layer gradient_probe train_loop; do
  step "configure and build examples/$ex"
  cmake -S "examples/$ex" -B "$tmp/$ex" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$tmp/$ex" -j2 >/dev/null
done

# Pulls "first last" out of a run's output: the losses of its first and last progress lines.
falls() {  # falls NAME FIRST LAST
  awk -v a="$2" -v b="$3" -v n="$1" 'BEGIN { if (!(b < a)) { printf "test_examples: %s: loss did not fall (%s -> %s)\n", n, a, b; exit 1 }
                                             printf "test_examples: %s: loss %s -> %s\n", n, a, b }'
}

step "run gradient_probe"
"$tmp/gradient_probe/gradient_probe" | tee "$tmp/probe.txt"
grep -q "backward reached layer 2 first, then layer 1" "$tmp/probe.txt"

step "run custom_layer (200 steps)"
"$tmp/custom_layer/custom_layer" --steps 200 --out "$tmp/run" | tee "$tmp/custom.txt"
grep -q "^gradcheck (float64, input and w1, w3, w2): ok" "$tmp/custom.txt"
losses=$(grep "^loss by step:" "$tmp/custom.txt" | grep -oE '[0-9]+: [0-9.]+' | awk '{print $2}')
falls custom_layer "$(echo "$losses" | head -1)" "$(echo "$losses" | tail -1)"

step "run train_loop (200 steps)"
"$tmp/train_loop/train_loop" --steps 200 | tee "$tmp/loop.txt"
losses=$(grep -oE '^step +[0-9]+ .* loss [0-9.]+' "$tmp/loop.txt" | awk '{print $NF}')
falls train_loop "$(echo "$losses" | head -1)" "$(echo "$losses" | tail -1)"

step "build gradient_probe with pkg-config"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --exists --print-errors gradflow
# shellcheck disable=SC2046
g++ -O2 examples/gradient_probe/main.cpp -o "$tmp/probe_pc" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gradflow)
"$tmp/probe_pc" | cmp - "$tmp/probe.txt"
step "all passed"
