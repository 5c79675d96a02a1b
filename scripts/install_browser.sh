#!/usr/bin/env bash
# Chromium from the distribution's packages, for the report's browser test (tests/test_report_browser.py).
# Best effort: does nothing when a Chromium is already there, says why and exits 0 when it cannot install one
# (not root, no apt-get); the test is then skipped with the same reason.
set -uo pipefail
for name in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$name" >/dev/null; then
    echo "[browser] $(command -v "$name") is installed"
    exit 0
  fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "[browser] no Chromium, and apt-get is not usable here (needs root on Debian/Ubuntu): the report's browser test will be skipped"
  exit 0
fi
start=$(date +%s)
if DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
  echo "[browser] chromium installed in $(( $(date +%s) - start )) s"
else
  echo "[browser] apt-get could not install chromium: the report's browser test will be skipped"
fi
exit 0
