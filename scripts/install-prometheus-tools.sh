#!/usr/bin/env bash
# Installs the tools the deploy tests use beyond Go, from Debian's packages:
# promtool (package prometheus), which checks deploy/prometheus.yml, the
# alert rules and their unit tests, and amtool (package
# prometheus-alertmanager), which checks the Alertmanager example. The
# packages also hold the servers; if their init scripts started them, they
# are stopped: only the tools are wanted. Needs root (apt-get); without it,
# or offline, it says so and exits non-zero, and the deploy tests report the
# tool as missing (skipped outside CI, failed in CI).
set -euo pipefail

# install TOOL PACKAGE: apt-get install PACKAGE unless TOOL is on PATH.
install() {
	local tool=$1 package=$2
	command -v "$tool" >/dev/null && return 0
	if [[ $(id -u) -ne 0 ]]; then
		echo "$tool is missing; install it with: sudo apt-get install --no-install-recommends $package" >&2
		return 1
	fi
	{ apt-get install -y -q --no-install-recommends "$package" ||
		{ apt-get update -q && apt-get install -y -q --no-install-recommends "$package"; }; } >/dev/null 2>&1 || {
		echo "could not install $tool (apt-get install $package)" >&2
		return 1
	}
	"/etc/init.d/$package" stop >/dev/null 2>&1 || true
}

status=0
install promtool prometheus || status=1
install amtool prometheus-alertmanager || status=1
exit "$status"
