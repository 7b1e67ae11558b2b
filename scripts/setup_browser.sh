#!/usr/bin/env bash
# Installs Debian's chromium for tests/test_report_browser.cpp, which opens the HTML report pages in
# headless Chromium, and fonts-nanum so that its screenshots show the built-in corpus's Korean
# (only what is missing). Part of the full check (.ci/run), not of scripts/setup.sh: training and
# the rest of the suite need no browser, and it is a large download.
set -euo pipefail
PACKAGES=(chromium fonts-nanum)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "setup_browser: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
