#!/bin/sh
# Run first by `npm test`: test/browser/ opens the run report in a real browser, Debian's headless Chromium.
# Installed here only where it is missing and we are root with apt-get (CI, these machines); elsewhere
# one line says how, and the browser tests skip naming what is missing. Quiet when there is nothing to do.
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u 2>/dev/null)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: chromium not found, installing Debian's chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium >/dev/null && exit 0
  echo "ensure-chromium: installing chromium failed; the browser tests in test/browser/ will skip" >&2
  exit 0
fi
echo "ensure-chromium: chromium not found: install it (Debian/Ubuntu: sudo apt-get install chromium), or the browser tests in test/browser/ will skip" >&2
