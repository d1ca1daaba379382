#!/usr/bin/env bash
# Installs promtool, which the deploy tests use to check deploy/prometheus.yml,
# the alert rules and their unit tests, from Debian's prometheus package. The
# package also holds a Prometheus server; if its init script started one, it
# is stopped: only the tool is wanted. Needs root (apt-get); without it, or
# offline, it says so and exits non-zero, and the deploy tests report
# promtool as missing (skipped outside CI, failed in CI).
set -euo pipefail
command -v promtool >/dev/null && exit 0
if [[ $(id -u) -ne 0 ]]; then
	echo "promtool is missing; install it with: sudo apt-get install --no-install-recommends prometheus" >&2
	exit 1
fi
{ apt-get install -y -q --no-install-recommends prometheus ||
	{ apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; }; } >/dev/null 2>&1 || {
	echo "could not install promtool (apt-get install prometheus)" >&2
	exit 1
}
/etc/init.d/prometheus stop >/dev/null 2>&1 || true
