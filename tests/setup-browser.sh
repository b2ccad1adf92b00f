#!/usr/bin/env bash
# Chromium for the browser checks of HTML reports (tests/explore/test_diff.py): Debian's package, used headless
# through Playwright (playwright-core, in the dev dependencies) with executable_path; no browser download.
# Idempotent: does nothing when /usr/bin/chromium is there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup-browser: install Chromium (Debian package 'chromium') and set TRACELAKE_CHROMIUM to its path" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || {
    $sudo apt-get update -q >/dev/null
    $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null
}
/usr/bin/chromium --version
