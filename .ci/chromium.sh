#!/usr/bin/env bash
# Installs headless Chromium and its WebDriver from Debian's packages (if needed), for the
# console's browser tests (crates/agentctl/tests/all/serve_browser*.rs). Idempotent.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
echo "$(chromium --version) / $(chromedriver --version | head -n 1)"
