#!/usr/bin/env bash
# Measures `projector bench` next to its peer, the Debezium JDBC sink on a
# standalone Kafka Connect worker writing the same chunk rows into PostgreSQL
# alone, alternating in one run (docs/benchmarks.md, "The JDBC sink"). It
# fetches the worker's and the connector's jars from Maven Central once into
# .cache/, builds bin/projector, and passes every argument on to
# `projector bench`, e.g.:
#
#   scripts/services.sh up
#   scripts/peer-bench.sh --partitions 2,4 --runs 3 --skip-naive
#
# Needs the services of scripts/services.sh running, Java 17 and Maven.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
POM=$ROOT/scripts/peer-bench/pom.xml
JARS=$ROOT/.cache/peer-bench-$(sha1sum "$POM" | cut -c1-8)

log() { printf '%s\n' "peer-bench: $*" >&2; }

command -v java >/dev/null || { log "error: java not found (Java 17 runs the Connect worker)"; exit 1; }
if [[ ! -f $JARS/.complete ]]; then
	command -v mvn >/dev/null || { log "error: mvn not found (apt-get install maven)"; exit 1; }
	log "downloading Kafka Connect and the Debezium JDBC sink into $JARS"
	rm -rf "$JARS"
	mkdir -p "$JARS"
	if ! mvn -B -q -f "$POM" dependency:copy-dependencies -DoutputDirectory="$JARS/lib" >"$JARS/mvn.log" 2>&1; then
		log "error: Maven could not fetch the jars; the last lines of $JARS/mvn.log:"
		tail -n 20 "$JARS/mvn.log" >&2
		exit 1
	fi
	touch "$JARS/.complete"
fi
(cd "$ROOT" && go build -o bin/projector ./cmd/projector)
eval "$("$ROOT/scripts/services.sh" env)"
exec "$ROOT/bin/projector" bench --peer-classpath "$JARS/lib/*" "$@"
