#!/bin/sh
# Publishes sample documents with `projector publish`, round after round, so
# the dashboard of `make demo` has something to show. Each round writes
# every document at a new version, and with it every case an operator should
# see on the dashboard:
#
#   projected    every document at the round's version (text or ready chunks)
#   withdrawn    a few documents withdrawn (they come back in a later round)
#   redelivered  one record sent twice
#   stale        one record at the previous version
#   conflict     one record at the current version with other content,
#                dead-lettered as version_conflict
#   bad input    one invalid record, dead-lettered with a reason that turns
#                over between invalid_version, invalid_op and ambiguous_content
#
# It runs in the demo image (busybox sh) and with any POSIX sh. Kafka and the
# topic come from PROJECTOR_BROKERS and PROJECTOR_TOPIC, as for every
# projector command. DEMO_DOCUMENTS (20), DEMO_INTERVAL (seconds between
# rounds, 5), DEMO_ROUNDS (0: forever) and DEMO_PREFIX (of document keys,
# demo) shape it.
set -eu

documents=${DEMO_DOCUMENTS:-20}
interval=${DEMO_INTERVAL:-5}
rounds=${DEMO_ROUNDS:-0}
prefix=${DEMO_PREFIX:-demo}

# upsert I R prints document I at version R; the same arguments always give
# the same line, so printing it again is a redelivery. Every third document
# comes split into chunks, the others as text for the projector to split.
upsert() {
	if [ $(($1 % 3)) -eq 0 ]; then
		printf '{"document_key":"%s-doc-%d","version":%d,"title":"Document %d","source":"demo","chunks":[{"text":"Document %d at version %d, first part."},{"text":"Document %d at version %d, second part."}]}\n' \
			"$prefix" "$1" "$2" "$1" "$1" "$2" "$1" "$2"
	else
		printf '{"document_key":"%s-doc-%d","version":%d,"title":"Document %d","source":"demo","text":"Document %d at version %d. It has a few sentences. Each round writes a new version of it."}\n' \
			"$prefix" "$1" "$2" "$1" "$1" "$2"
	fi
}

# round R prints the records of round R, one JSON object a line.
round() {
	i=1
	while [ "$i" -le "$documents" ]; do
		# Documents 1 to 3 carry the special cases below, so they stay live.
		if [ "$i" -gt 3 ] && [ $(((i + $1) % 7)) -eq 0 ]; then
			printf '{"document_key":"%s-doc-%d","version":%d,"op":"withdraw"}\n' "$prefix" "$i" "$1"
		else
			upsert "$i" "$1"
		fi
		i=$((i + 1))
	done
	upsert 2 "$1"
	upsert 1 $(($1 - 1))
	printf '{"document_key":"%s-doc-3","version":%d,"text":"Other content at the same version."}\n' "$prefix" "$1"
	case $(($1 % 3)) in
	0) printf '{"document_key":"%s-bad-%d","version":0,"text":"Version 0 is not a version."}\n' "$prefix" "$1" ;;
	1) printf '{"document_key":"%s-bad-%d","version":%d,"op":"erase"}\n' "$prefix" "$1" "$1" ;;
	2) printf '{"document_key":"%s-bad-%d","version":%d,"text":"both","chunks":[{"text":"and chunks"}]}\n' "$prefix" "$1" "$1" ;;
	esac
}

# Versions start at the clock, so a restarted demo still moves forward
# instead of sending only stale records.
version=$(date +%s)
n=1
while :; do
	round "$version" | projector publish --create-topic
	if [ "$rounds" -gt 0 ] && [ "$n" -ge "$rounds" ]; then
		exit 0
	fi
	n=$((n + 1))
	version=$((version + 1))
	sleep "$interval"
done
