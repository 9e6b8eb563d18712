#!/usr/bin/env bash
# Debian's Chromium, for the JupyterLab browser test (tests/test_jupyterlab.py). Run by
# `make browser` and before `make test`. Optional: it needs root and Debian's package archive;
# where it cannot install the browser it says so and the test is skipped with that reason.
# (Playwright drives the system browser: a browser download at run time is not possible here.)
set -uo pipefail

say() { printf '[browser] %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    say "no chromium, and installing it needs root and apt-get: the browser test will be skipped"
    exit 0
fi
say "installing Debian's chromium for the JupyterLab browser test (once, about 30 s)"
log=$(mktemp)
if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
        >"$log" 2>&1; then
    say "installed $(chromium --version 2>/dev/null)"
else
    tail -5 "$log" >&2
    say "chromium could not be installed (above): the browser test will be skipped"
fi
rm -f "$log"
exit 0
