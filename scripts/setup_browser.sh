#!/usr/bin/env bash
# Installs Debian's chromium for tests/test_report_browser.cpp, which opens the HTML report pages in
# headless Chromium, and fonts-nanum so that its screenshots show the built-in corpus's Korean
# (only what is missing). Part of the full check (.ci/run), not of scripts/setup.sh: training and
# the rest of the suite need no browser, and it is a large download.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
apt_install_missing setup_browser chromium fonts-nanum
