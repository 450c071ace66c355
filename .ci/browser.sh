#!/usr/bin/env bash
# Installs Debian's headless Chromium and its driver for the browser tests (pytest -m browser).
# Selenium is pointed at /usr/bin/chromedriver explicitly, so it never downloads a browser.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  echo "chromium and chromedriver already installed"; exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends chromium chromium-driver fonts-dejavu-core
/usr/bin/chromium --version
/usr/bin/chromedriver --version
