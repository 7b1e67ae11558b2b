# shellcheck shell=bash
# What the scripts share: the Debian packages' install (setup.sh, setup_browser.sh, fuzz/run.sh);
# the sanitizer scripts' (test_sanitized.sh, test_tsan.sh) report directory and the scan of it
# after the run. Sourced, not run: source "$ROOT/scripts/lib.sh".

# apt_install_missing NAME PACKAGE...: installs those of the Debian packages that are not
# installed yet (with sudo when not root), after a line "NAME: installing ..."; nothing when all are.
apt_install_missing() {
  local name="$1" p missing=()
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  echo "$name: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# fresh_reports DIR: an empty DIR, for the sanitizers' log_path=DIR/report (one file per process).
fresh_reports() {
  rm -rf "$1"
  mkdir -p "$1"
}

# scan_reports NAME LABEL KIND DIR: prints every report file DIR/report* after a line
# "=== LABEL report FILE", then "NAME: FAILED: KIND reports above (kept in DIR)", and returns 1;
# returns 0 and prints nothing when there is none.
scan_reports() {
  local name="$1" label="$2" kind="$3" dir="$4" f
  compgen -G "$dir/report*" >/dev/null || return 0
  for f in "$dir"/report*; do
    echo "=== $label report $f"
    cat "$f"
  done
  echo "$name: FAILED: $kind reports above (kept in $dir)"
  return 1
}

# status_ok NAME STATUS WHAT: returns 0 when STATUS is 0, else prints "NAME: FAILED: WHAT" and
# returns 1.
status_ok() {
  [ "$2" != 0 ] || return 0
  echo "$1: FAILED: $3"
  return 1
}
