#!/usr/bin/env bash
# Installs Debian's prometheus package for the alert rules' tests: `promtool check rules`,
# `promtool test rules` (tests/unit/test_deploy_prometheus.py) and a real server scraping a topology
# (tests/integration/test_prometheus.py). The tests start their own server on a free loopback port
# with a temporary data directory; the package's service is not used (and not started without systemd).
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  echo "prometheus and promtool already installed"; exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends prometheus
prometheus --version | head -1
promtool --version | head -1
