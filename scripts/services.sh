#!/usr/bin/env bash
# Runs the real services that projector's integration tests and local runs need,
# natively (no Docker), bound to 127.0.0.1 only:
#
#   postgres  PostgreSQL from Debian's packages, own cluster run as the postgres user
#   kafka     the Apache Kafka broker (KRaft, one broker+controller), jars from Maven Central
#   neo4j     the Neo4j Community engine with Bolt, jars from Maven Central (scripts/neo4j)
#   qdrant    Qdrant's engine (the crate qdrant-edge) behind the project's own
#             Qdrant API server, qdrant-engine/, built once with cargo; a real
#             Qdrant server instead with QDRANT_BIN or QDRANT_ADDR; data on disk
#
# Beside the plain endpoints the suite uses, each store also has a secured one, as
# production would run it, for the security tests (e2e/security_test.go): a
# throwaway CA and a server certificate for 127.0.0.1 and localhost (.services/tls),
# and random dev secrets (.services/secrets, mode 600):
#
#   postgres  TLS on the same port; role projector_tls may only connect over TLS
#             (hostssl), its password is in a passfile
#   kafka     an extra SASL_SSL listener (KAFKA_SECURE_PORT) with SCRAM-SHA-256,
#             SCRAM-SHA-512 (added through the admin API after start) and PLAIN
#   neo4j     a second small database in the same JVM with authentication on and
#             Bolt over TLS only (NEO4J_SECURE_BOLT_PORT)
#   qdrant    a second server with an API key (.services/secrets/qdrant-api-key)
#             and TLS on REST and gRPC (QDRANT_SECURE_GRPC_PORT)
#
# `env` prints them as PROJECTOR_SECURE_* variables, which no flag reads.
#
# Usage: scripts/services.sh up|down|status|env|clean [SERVICE...]
#        scripts/services.sh start|stop|restart|kill SERVICE...
#
#   up      install what is missing, start what is not running, wait until each answers
#   down    stop all (SIGTERM, then SIGKILL) and check no process is left; with
#           SERVICE names, stop just those (the same as stop)
#   status  print each service up/down with its address; exit 1 if one is down
#   env     print export lines: eval "$(scripts/services.sh env)"
#   clean   stop, then delete the data (not the download cache in .cache/)
#   start, stop, restart   one or more services, e.g. for outage tests
#   kill    end services at once, as a crash would (SIGKILL; PostgreSQL: an
#           immediate shutdown), e.g. a broker of the cluster in a failover test
#
# Without SERVICE names, up, status and clean take those in SERVICES (default all:
# SERVICES="postgres kafka neo4j qdrant"). Run as root: PostgreSQL runs as the
# postgres user.
# Ports: PG_PORT (5432), KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
# KAFKA_SECURE_PORT (9094), NEO4J_BOLT_PORT (7687), NEO4J_SECURE_BOLT_PORT (7688),
# QDRANT_HTTP_PORT (6333), QDRANT_GRPC_PORT (6334), QDRANT_SECURE_HTTP_PORT (6343),
# QDRANT_SECURE_GRPC_PORT (6344). Versions: KAFKA_VERSION,
# NEO4J_VERSION (default: the ones in scripts/kafka/pom.xml, scripts/neo4j/pom.xml).
# Data, pid files and logs live in .services/ (logs: .services/logs/SERVICE.log),
# downloaded jars in .cache/; both are git-ignored.
#
# KAFKA_CLUSTER=1 adds a three-node KRaft cluster, the services kafka-1, kafka-2
# and kafka-3 (each broker and controller, node.id 1 to 3), from the same jars,
# beside the single broker that every other test uses: replication factor 3 and
# min.insync.replicas 2 by default, plain listeners on KAFKA_CLUSTER_PORT (19092)
# and the next two ports, controllers on KAFKA_CLUSTER_CONTROLLER_PORT (19192) and
# the next two. `env` then also prints PROJECTOR_TEST_CLUSTER_BROKERS, which
# e2e/cluster_test.go reads. Named, the nodes work without the variable too, and
# `down` always stops them.
#
# The work is done by a Go program, cmd/services (internal/services, one table of
# the services: start, health wait, stop, version); this script builds it into
# .services/bin (go build rebuilds it only when its sources changed) and runs it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/.services/bin/services

command -v go >/dev/null || {
	echo "services: error: go not found: scripts/services.sh builds and runs cmd/services (https://go.dev/dl/)" >&2
	exit 1
}
mkdir -p "$ROOT/.services/bin"
# The lock makes calls at the same time (a test stopping one service while
# another starts) build one after the other, never over each other.
(cd "$ROOT" && flock "$BIN.lock" go build -o "$BIN" ./cmd/services) || {
	echo "services: error: cannot build ./cmd/services" >&2
	exit 1
}
exec -a "$0" "$BIN" -root "$ROOT" "$@"
