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
# throwaway CA and a server certificate for 127.0.0.1 and localhost (.services/tls,
# made with openssl), and random dev secrets (.services/secrets, mode 600):
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
#        scripts/services.sh start|stop|restart SERVICE...
#
#   up      install what is missing, start what is not running, wait until each answers
#   down    stop all (SIGTERM, then SIGKILL) and check no process is left; with
#           SERVICE names, stop just those (the same as stop)
#   status  print each service up/down with its address; exit 1 if one is down
#   env     print export lines: eval "$(scripts/services.sh env)"
#   clean   stop, then delete the data (not the download cache in .cache/)
#   start, stop, restart   one or more services, e.g. for outage tests
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
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES_DIR=$ROOT/.services
CACHE_DIR=$ROOT/.cache
LOG_DIR=$SERVICES_DIR/logs
RUN_DIR=$SERVICES_DIR/run
BIN_DIR=$SERVICES_DIR/bin
TLS_DIR=$SERVICES_DIR/tls
SECRETS_DIR=$SERVICES_DIR/secrets

ALL_SERVICES="postgres kafka neo4j qdrant"
SERVICES=${SERVICES:-$ALL_SERVICES}

PG_PORT=${PG_PORT:-5432}
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}
KAFKA_SECURE_PORT=${KAFKA_SECURE_PORT:-9094}
NEO4J_BOLT_PORT=${NEO4J_BOLT_PORT:-7687}
NEO4J_SECURE_BOLT_PORT=${NEO4J_SECURE_BOLT_PORT:-7688}
QDRANT_HTTP_PORT=${QDRANT_HTTP_PORT:-6333}
QDRANT_GRPC_PORT=${QDRANT_GRPC_PORT:-6334}
QDRANT_SECURE_HTTP_PORT=${QDRANT_SECURE_HTTP_PORT:-6343}
QDRANT_SECURE_GRPC_PORT=${QDRANT_SECURE_GRPC_PORT:-6344}

JAVA=${JAVA:-java}
KAFKA_HEAP=${KAFKA_HEAP:--Xms256m -Xmx768m}
NEO4J_HEAP=${NEO4J_HEAP:--Xms512m -Xmx1g}

# Seconds to wait for a service to answer after its start, and for it to stop.
START_TIMEOUT_POSTGRES=60
START_TIMEOUT_KAFKA=120
START_TIMEOUT_NEO4J=180
START_TIMEOUT_QDRANT=60
STOP_TIMEOUT=30

log() { printf '%s\n' "services: $*" >&2; }

die() {
	log "error: $*"
	exit 1
}

# fail SERVICE LOGFILE MESSAGE: report a service that did not come up, with its log.
fail() {
	log "error: $1 did not come up: $3"
	if [[ -f $2 ]]; then
		log "last 30 lines of $2:"
		tail -n 30 "$2" >&2
	fi
	exit 1
}

# port_open PORT: whether something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# require_free_port SERVICE PORT VAR: fail if a foreign process holds the port.
require_free_port() {
	if port_open "$2"; then
		die "$1: 127.0.0.1:$2 is already taken by another process ($(ss -Hltnp "sport = :$2" 2>/dev/null | head -n 1)); stop it or set $3"
	fi
}

# rotate_log FILE: keep the log of the previous run as FILE.1.
rotate_log() {
	if [[ -f $1 ]]; then mv -f "$1" "$1.1"; fi
}

# cache_key POM: a short hash of a pom, so editing it gives a fresh jar cache.
cache_key() { sha1sum "$1" | cut -c1-8; }

# fetch_jars NAME POM VERSION_PROPERTY VERSION DEST: copy the runtime jars of POM
# into DEST/lib once; DEST/.complete marks a finished download, so later runs
# neither call Maven nor touch the network.
fetch_jars() {
	local name=$1 pom=$2 prop=$3 version=$4 dest=$5
	[[ -f $dest/.complete ]] && return
	command -v mvn >/dev/null || die "$name: mvn not found (apt-get install maven)"
	log "$name: downloading $name $version jars from Maven Central into $dest"
	rm -rf "$dest"
	mkdir -p "$dest"
	if ! mvn -B -q -f "$pom" dependency:copy-dependencies \
		"-D$prop=$version" "-DoutputDirectory=$dest/lib" >"$LOG_DIR/mvn-$name.log" 2>&1; then
		fail "$name" "$LOG_DIR/mvn-$name.log" "Maven could not fetch $name $version"
	fi
	touch "$dest/.complete"
}

# go_build NAME PACKAGE: build a Go command of this module into .services/bin.
go_build() {
	(cd "$ROOT" && go build -o "$BIN_DIR/$1" "$2") || die "cannot build $2"
}

# --- processes started from a pid file (kafka, neo4j, qdrant) ----------------

pid_file() { echo "$RUN_DIR/$1.pid"; }

# running_pid SERVICE: print the pid of the running service, or fail. The process
# must be alive and its command line must name this checkout's .services directory,
# so a pid that the system gave to another process since is never taken for it.
running_pid() {
	local f pid
	f=$(pid_file "$1")
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	alive "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$SERVICES_DIR/" || return 1
	echo "$pid"
}

# launch SERVICE COMMAND...: start COMMAND in its own session, detached from this
# shell (a Ctrl-C or a CI step ending does not kill it), output to its log.
launch() {
	local name=$1 logf=$LOG_DIR/$1.log
	shift
	rotate_log "$logf"
	setsid "$@" </dev/null >"$logf" 2>&1 &
	echo $! >"$(pid_file "$name")"
}

# alive PID: whether the process runs; an exited process that its parent has not
# reaped yet (a zombie) does not count.
alive() { [[ -r /proc/$1/status ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# kill_pid NAME PID: SIGTERM, wait up to STOP_TIMEOUT seconds, then SIGKILL.
kill_pid() {
	local name=$1 pid=$2 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	log "$name: pid $pid ignored SIGTERM for ${STOP_TIMEOUT}s, sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	while alive "$pid"; do sleep 0.1; done
}

stop_pid_service() {
	local pid
	if pid=$(running_pid "$1"); then
		log "$1: stopping (pid $pid)"
		kill_pid "$1" "$pid"
	fi
	rm -f "$(pid_file "$1")"
}

# wait_until SERVICE LOGFILE TIMEOUT CHECK...: run CHECK every half second until it
# succeeds; fail early, with the log, if the service's process died.
wait_until() {
	local name=$1 logf=$2 timeout=$3 deadline
	shift 3
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		is_up "$name" || fail "$name" "$logf" "the process exited"
		((SECONDS < deadline)) || fail "$name" "$logf" "no answer after ${timeout}s"
		sleep 0.5
	done
}

# --- TLS certificates and dev secrets ---------------------------------------------

# ensure_tls: a throwaway CA and one server certificate for 127.0.0.1 and localhost,
# made once; every secured endpoint presents it, clients trust TLS_DIR/ca.crt. RSA
# and PKCS#8 keys, which Kafka's PEM key store, Neo4j and PostgreSQL all read.
ensure_tls() {
	[[ -f $TLS_DIR/.complete ]] && return
	command -v openssl >/dev/null || {
		log "tls: installing openssl"
		{ apt-get install -y -q openssl || { apt-get update -q && apt-get install -y -q openssl; }; } >"$LOG_DIR/apt-openssl.log" 2>&1 ||
			fail tls "$LOG_DIR/apt-openssl.log" "apt-get install openssl failed"
	}
	log "tls: making a throwaway CA and a server certificate for 127.0.0.1 and localhost in $TLS_DIR"
	rm -rf "$TLS_DIR"
	mkdir -p "$TLS_DIR/trusted" "$TLS_DIR/revoked"
	chmod 755 "$TLS_DIR"
	(
		cd "$TLS_DIR"
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
			-subj "/CN=projector throwaway dev CA" \
			-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
			openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" &&
			printf '%s\n' subjectAltName=IP:127.0.0.1,DNS:localhost extendedKeyUsage=serverAuth \
				basicConstraints=CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment >server.ext &&
			openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
				-extfile server.ext -out server.crt &&
			cat server.key server.crt >kafka-keystore.pem &&
			cp ca.crt trusted/ca.crt &&
			chmod 644 ca.crt server.crt trusted/ca.crt
	) >"$LOG_DIR/tls.log" 2>&1 || fail tls "$LOG_DIR/tls.log" "openssl could not make the certificates"
	touch "$TLS_DIR/.complete"
}

# secret NAME: print the dev secret NAME, made once as NAME- and 24 random hex
# digits (distinctive, so a test can find it in anything that leaked it).
secret() {
	local f=$SECRETS_DIR/$1
	if [[ ! -s $f ]]; then
		mkdir -p "$SECRETS_DIR"
		chmod 700 "$SECRETS_DIR"
		(umask 077 && printf '%s-%s\n' "$1" "$(openssl rand -hex 12)" >"$f")
	fi
	tr -d '\n' <"$f"
}

# --- PostgreSQL -----------------------------------------------------------------

# pg_bin: the newest installed server's bin directory (Debian keeps them versioned).
pg_bin() {
	local d
	d=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	[[ -x $d/initdb ]] && echo "$d"
}

# pg_home: where the cluster lives. PostgreSQL refuses to run as root, so it runs as
# the postgres user, which must be able to reach its directory; a checkout under a
# private directory (/root, say) gets a per-checkout directory in /var/lib instead.
pg_home() {
	if id postgres >/dev/null 2>&1 && runuser -u postgres -- test -x "$ROOT"; then
		echo "$SERVICES_DIR/postgres"
	else
		echo "/var/lib/postgresql/projector-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)"
	fi
}

# pg_socket_dir: the cluster's Unix socket directory, for the superuser's peer
# login. A socket path is limited to 107 bytes, so a deep checkout uses /tmp.
pg_socket_dir() {
	local dir
	dir=$(pg_home)/run
	if ((${#dir} > 80)); then
		dir=/tmp/projector-pg-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)
	fi
	echo "$dir"
}

# as_postgres COMMAND...: run as the postgres user, from a directory it can read.
as_postgres() { (cd / && runuser -u postgres -- "$@"); }

pg_running() {
	local bin
	bin=$(pg_bin) || return 1
	as_postgres "$bin/pg_ctl" status -D "$(pg_home)/data" >/dev/null 2>&1
}

# psql_admin SQL...: run SQL as the superuser over the cluster's own Unix socket.
psql_admin() {
	as_postgres "$(pg_bin)/psql" -X -q -v ON_ERROR_STOP=1 -h "$(pg_socket_dir)" -p "$PG_PORT" \
		-d postgres -tA "$@"
}

install_postgres() {
	pg_bin >/dev/null && return
	log "postgres: installing Debian's postgresql package"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -q && apt-get install -y -q postgresql; } >"$LOG_DIR/apt-postgres.log" 2>&1; then
		fail postgres "$LOG_DIR/apt-postgres.log" "apt-get install postgresql failed"
	fi
	# The package creates and may start a "main" cluster on 5432; ours replaces it.
	pg_ctlcluster "$(basename "$(dirname "$(pg_bin)")")" main stop >/dev/null 2>&1 || true
}

start_postgres() {
	install_postgres
	local bin home sock logf=$LOG_DIR/postgres.log
	bin=$(pg_bin)
	home=$(pg_home)
	sock=$(pg_socket_dir)
	if pg_running; then
		log "postgres: already running"
		return
	fi
	require_free_port postgres "$PG_PORT" PG_PORT
	mkdir -p "$home" "$sock"
	chown postgres:postgres "$home" "$sock"
	if [[ ! -f $home/data/PG_VERSION ]]; then
		log "postgres: creating a cluster in $home/data"
		as_postgres "$bin/initdb" -D "$home/data" -U postgres -E UTF8 --locale=C.UTF-8 \
			--auth-local=peer --auth-host=scram-sha-256 >"$LOG_DIR/initdb.log" 2>&1 ||
			fail postgres "$LOG_DIR/initdb.log" "initdb failed"
	fi
	rotate_log "$logf"
	# No -l: the server inherits this shell's file for its log, so the log can live
	# in .services/logs even when the postgres user may not write there.
	log "postgres: starting on 127.0.0.1:$PG_PORT"
	as_postgres "$bin/pg_ctl" start -D "$home/data" -w -t "$START_TIMEOUT_POSTGRES" \
		-o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='$sock'" \
		</dev/null >>"$logf" 2>&1 || fail postgres "$logf" "pg_ctl start failed"
}

wait_postgres() {
	local logf=$LOG_DIR/postgres.log
	wait_until postgres "$logf" "$START_TIMEOUT_POSTGRES" \
		"$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"
	# The application's role (CREATEDB, so tests may make databases of their own)
	# and database; re-running resets the password and changes nothing else.
	psql_admin -c "DO \$\$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'projector') THEN
			CREATE ROLE projector LOGIN CREATEDB PASSWORD 'projector';
		ELSE
			ALTER ROLE projector LOGIN CREATEDB PASSWORD 'projector';
		END IF; END \$\$" >>"$logf" 2>&1 || fail postgres "$logf" "cannot create role projector"
	if [[ -z $(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'projector'") ]]; then
		psql_admin -c "CREATE DATABASE projector OWNER projector" >>"$logf" 2>&1 ||
			fail postgres "$logf" "cannot create database projector"
	fi
	secure_postgres
	log "postgres: up on 127.0.0.1:$PG_PORT ($(psql_admin -c 'SELECT version()' | cut -d, -f1); TLS on, role projector_tls TLS only)"
}

# secure_postgres: TLS with the dev certificate, and the role projector_tls that
# may log in only over TLS (hostssl), with a password from a passfile. All of it
# takes effect on a reload, so a running cluster is secured without a restart;
# connections without TLS (PROJECTOR_POSTGRES_DSN) keep working for other roles.
secure_postgres() {
	local logf=$LOG_DIR/postgres.log home tls hba pw
	home=$(pg_home)
	tls=$home/tls
	hba=$home/data/pg_hba.conf
	pw=$(secret postgres-password)
	# The server reads its key as the postgres user, from its own directory.
	install -d -o postgres -g postgres -m 700 "$tls"
	install -o postgres -g postgres -m 600 "$TLS_DIR/server.key" "$tls/server.key"
	install -o postgres -g postgres -m 644 "$TLS_DIR/server.crt" "$tls/server.crt"
	# The password goes through standard input, never a command line.
	psql_admin >>"$logf" 2>&1 <<SQL || fail postgres "$logf" "cannot set up TLS and the role projector_tls"
ALTER SYSTEM SET ssl = on;
ALTER SYSTEM SET ssl_cert_file = '$tls/server.crt';
ALTER SYSTEM SET ssl_key_file = '$tls/server.key';
DO \$\$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'projector_tls') THEN
		CREATE ROLE projector_tls LOGIN;
	END IF; END \$\$;
ALTER ROLE projector_tls LOGIN PASSWORD '$pw';
GRANT CONNECT, CREATE ON DATABASE projector TO projector_tls;
SQL
	# First match wins: these rules go above initdb's "host all all" lines.
	if ! grep -q '^# projector_tls' "$hba"; then
		as_postgres sh -c 'f=$1; { printf "%s\n" \
			"# projector_tls (scripts/services.sh): over TLS only, with a password" \
			"hostssl projector projector_tls 127.0.0.1/32 scram-sha-256" \
			"hostnossl all projector_tls all reject"; cat "$f"; } >"$f.new" && mv "$f.new" "$f"' sh "$hba" ||
			fail postgres "$logf" "cannot add the hostssl rule to $hba"
	fi
	psql_admin -c "SELECT pg_reload_conf()" >>"$logf" 2>&1 || fail postgres "$logf" "cannot reload the configuration"
	(umask 077 && printf '%s:%s:projector:projector_tls:%s\n' 127.0.0.1 "$PG_PORT" "$pw" localhost "$PG_PORT" "$pw" >"$SECRETS_DIR/pgpass")
	# A reload is asynchronous: wait until new sessions see TLS on.
	wait_until postgres "$logf" 10 pg_ssl_on
}

pg_ssl_on() { [[ $(psql_admin -c 'SHOW ssl') == on ]]; }

stop_postgres() {
	pg_running || return 0
	local bin data
	bin=$(pg_bin)
	data=$(pg_home)/data
	log "postgres: stopping"
	# fast: roll back open transactions and disconnect clients, then a clean shutdown.
	as_postgres "$bin/pg_ctl" stop -D "$data" -m fast -w -t "$STOP_TIMEOUT" >/dev/null 2>&1 ||
		as_postgres "$bin/pg_ctl" stop -D "$data" -m immediate -w >/dev/null 2>&1 || true
}

# --- Kafka ------------------------------------------------------------------------

KAFKA_POM=$ROOT/scripts/kafka/pom.xml
KAFKA_HOME=$SERVICES_DIR/kafka

kafka_version() {
	echo "${KAFKA_VERSION:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM")}"
}

kafka_jars() { echo "$CACHE_DIR/kafka-$(kafka_version)-$(cache_key "$KAFKA_POM")"; }

# write_kafka_config: one node that is both broker and controller (KRaft), written
# on every start so that port overrides take effect.
write_kafka_config() {
	# It holds the PLAIN password: readable by this user only.
	(umask 077 && cat >"$KAFKA_HOME/server.properties") <<EOF
# Written by scripts/services.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
# The secured listener: TLS with the dev certificate, then SASL. SCRAM users live
# in the cluster metadata (wait_kafka adds them); PLAIN's user is listed here.
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/kafka-keystore.pem
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_projector="$(secret kafka-password)";
log.dirs=$KAFKA_HOME/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
# Fewer group-coordinator partitions than the default 50: a faster first start.
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
}

start_kafka() {
	local jars
	jars=$(kafka_jars)
	if running_pid kafka >/dev/null; then
		# The configuration is written on every start: it tells how this one started.
		if grep -q '^listeners=.*SASL_SSL://' "$KAFKA_HOME/server.properties" 2>/dev/null; then
			log "kafka: already running"
			return
		fi
		log "kafka: running without the SASL_SSL listener (started by an older scripts/services.sh); restarting it"
		stop_pid_service kafka
	fi
	require_free_port kafka "$KAFKA_PORT" KAFKA_PORT
	require_free_port kafka "$KAFKA_CONTROLLER_PORT" KAFKA_CONTROLLER_PORT
	require_free_port kafka "$KAFKA_SECURE_PORT" KAFKA_SECURE_PORT
	fetch_jars kafka "$KAFKA_POM" kafka.version "$(kafka_version)" "$jars"
	go_build kafka-probe ./scripts/kafka/probe
	mkdir -p "$KAFKA_HOME"
	write_kafka_config
	# log4j2's own shutdown hook would stop logging before the broker's hook has
	# logged its shutdown; without it the log shows the whole shutdown.
	# shellcheck disable=SC2206 # KAFKA_HEAP holds several JVM flags
	local java_opts=($KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
		"-Dlog4j2.configurationFile=$ROOT/scripts/kafka/log4j2.properties"
		-Dlog4j2.shutdownHookEnabled=false -cp "$jars/lib/*")
	if [[ ! -f $KAFKA_HOME/data/meta.properties ]]; then
		# KRaft storage is formatted once, with a new cluster id; --standalone makes
		# this node the only voter of the metadata quorum. The quorum remembers the
		# controller port: changing KAFKA_CONTROLLER_PORT later needs `clean kafka`.
		log "kafka: formatting storage in $KAFKA_HOME/data"
		local id
		id=$("$JAVA" "${java_opts[@]}" kafka.tools.StorageTool random-uuid 2>"$LOG_DIR/kafka-format.log") ||
			fail kafka "$LOG_DIR/kafka-format.log" "StorageTool random-uuid failed"
		"$JAVA" "${java_opts[@]}" kafka.tools.StorageTool format --standalone -t "$id" \
			-c "$KAFKA_HOME/server.properties" >>"$LOG_DIR/kafka-format.log" 2>&1 ||
			fail kafka "$LOG_DIR/kafka-format.log" "StorageTool format failed"
	fi
	log "kafka: starting Kafka $(kafka_version) on 127.0.0.1:$KAFKA_PORT (controller 127.0.0.1:$KAFKA_CONTROLLER_PORT, SASL_SSL 127.0.0.1:$KAFKA_SECURE_PORT)"
	launch kafka "$JAVA" "${java_opts[@]}" kafka.Kafka "$KAFKA_HOME/server.properties"
}

wait_kafka() {
	local logf=$LOG_DIR/kafka.log guess version
	wait_until kafka "$logf" "$START_TIMEOUT_KAFKA" \
		"$BIN_DIR/kafka-probe" -brokers "127.0.0.1:$KAFKA_PORT" -timeout 3s
	guess=$("$BIN_DIR/kafka-probe" -brokers "127.0.0.1:$KAFKA_PORT")
	# The broker logs its exact version at start (AppInfoParser).
	version=$(sed -n 's/.*Kafka version: \([^ ]*\).*/\1/p' "$logf" | head -n 1)
	log "kafka: up on 127.0.0.1:$KAFKA_PORT (Apache Kafka ${version:-?}; ApiVersions match $guess)"
	# SCRAM credentials are cluster metadata: add them through the admin API on
	# every start (an upsert), so a broker formatted before they existed gets them
	# too; then log in over SASL_SSL to prove the listener works.
	secret kafka-password >/dev/null
	go_build kafka-scram ./scripts/kafka/scram
	"$BIN_DIR/kafka-scram" -brokers "127.0.0.1:$KAFKA_PORT" -secure "127.0.0.1:$KAFKA_SECURE_PORT" \
		-ca-file "$TLS_DIR/ca.crt" -user projector -password-file "$SECRETS_DIR/kafka-password" >"$LOG_DIR/kafka-scram.log" 2>&1 ||
		fail kafka "$LOG_DIR/kafka-scram.log" "cannot add the SCRAM user projector or log in on 127.0.0.1:$KAFKA_SECURE_PORT"
	log "kafka: SASL_SSL on 127.0.0.1:$KAFKA_SECURE_PORT (user projector: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN)"
}

# --- Neo4j ------------------------------------------------------------------------

NEO4J_POM=$ROOT/scripts/neo4j/pom.xml
NEO4J_HOME=$SERVICES_DIR/neo4j
NEO4J_SECURE_HOME=$SERVICES_DIR/neo4j-secure

neo4j_version() {
	echo "${NEO4J_VERSION:-$(sed -n 's:.*<neo4j.version>\(.*\)</neo4j.version>.*:\1:p' "$NEO4J_POM")}"
}

neo4j_jars() { echo "$CACHE_DIR/neo4j-$(neo4j_version)-$(cache_key "$NEO4J_POM")"; }

start_neo4j() {
	local jars src=$ROOT/scripts/neo4j/Main.java
	jars=$(neo4j_jars)
	local pid
	if pid=$(running_pid neo4j); then
		if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$NEO4J_SECURE_HOME"; then
			log "neo4j: already running"
			return
		fi
		log "neo4j: running without the secured instance (started by an older scripts/services.sh); restarting it"
		stop_pid_service neo4j
	fi
	require_free_port neo4j "$NEO4J_BOLT_PORT" NEO4J_BOLT_PORT
	require_free_port neo4j "$NEO4J_SECURE_BOLT_PORT" NEO4J_SECURE_BOLT_PORT
	fetch_jars neo4j "$NEO4J_POM" neo4j.version "$(neo4j_version)" "$jars"
	go_build neo4j-probe ./scripts/neo4j/probe
	if [[ ! -f $jars/classes/Main.class || $src -nt $jars/classes/Main.class ]]; then
		mkdir -p "$jars/classes"
		javac -d "$jars/classes" -cp "$jars/lib/*" "$src" >"$LOG_DIR/neo4j-javac.log" 2>&1 ||
			fail neo4j "$LOG_DIR/neo4j-javac.log" "javac scripts/neo4j/Main.java failed"
	fi
	mkdir -p "$NEO4J_HOME" "$NEO4J_SECURE_HOME"
	secret neo4j-password >/dev/null
	log "neo4j: starting Neo4j $(neo4j_version) with Bolt on 127.0.0.1:$NEO4J_BOLT_PORT (and over TLS, with authentication, on 127.0.0.1:$NEO4J_SECURE_BOLT_PORT)"
	# The --add-opens flags are those Neo4j's own launcher passes on Java 17.
	# shellcheck disable=SC2086 # NEO4J_HEAP holds several JVM flags
	launch neo4j "$JAVA" $NEO4J_HEAP -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
		--add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED \
		--add-opens=java.base/sun.nio.ch=ALL-UNNAMED -Dio.netty.tryReflectionSetAccessible=true \
		-cp "$jars/lib/*:$jars/classes" Main "$NEO4J_HOME" "$NEO4J_BOLT_PORT" \
		"$NEO4J_SECURE_HOME" "$NEO4J_SECURE_BOLT_PORT" "$TLS_DIR" "$SECRETS_DIR/neo4j-password"
}

wait_neo4j() {
	local logf=$LOG_DIR/neo4j.log uri=bolt://127.0.0.1:$NEO4J_BOLT_PORT
	wait_until neo4j "$logf" "$START_TIMEOUT_NEO4J" "$BIN_DIR/neo4j-probe" -uri "$uri" -timeout 3s
	log "neo4j: up on $uri ($("$BIN_DIR/neo4j-probe" -uri "$uri"))"
	local secure=bolt+s://127.0.0.1:$NEO4J_SECURE_BOLT_PORT
	local auth=(-user neo4j -password-file "$SECRETS_DIR/neo4j-password" -ca-file "$TLS_DIR/ca.crt")
	# Bolt opens before Main has set the password: a probe then would fail to log
	# in, and three failures lock the user for 5 s. Wait for Main's ready line.
	wait_until neo4j "$logf" "$START_TIMEOUT_NEO4J" grep -q '^neo4j: ready: .*bolt over TLS' "$logf"
	wait_until neo4j "$logf" "$START_TIMEOUT_NEO4J" "$BIN_DIR/neo4j-probe" -uri "$secure" "${auth[@]}" -timeout 3s
	log "neo4j: up on $secure, authentication on ($("$BIN_DIR/neo4j-probe" -uri "$secure" "${auth[@]}"))"
}

# --- Qdrant -------------------------------------------------------------------------

# No package registry these machines reach ships the Qdrant server, but crates.io
# ships its engine, the crate qdrant-edge. qdrant-engine/ is the project's own
# small server of Qdrant's gRPC API on that engine; it is built here with cargo
# once per source (about 8 minutes on two cores), outside the work tree so a
# clean checkout reuses it. A real Qdrant server takes precedence: QDRANT_BIN
# names one to run instead, QDRANT_ADDR (host:port, gRPC) one already running,
# which the suite then shares (the secured instance and the tests' private
# servers still come from QDRANT_BIN or qdrant-engine).
QDRANT_HOME=$SERVICES_DIR/qdrant
QDRANT_SECURE_HOME=$SERVICES_DIR/qdrant-secure
QDRANT_ENGINE_SRC=$ROOT/qdrant-engine
QDRANT_ENGINE_CACHE=${QDRANT_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/projector/qdrant-engine}
QDRANT_ADDR=${QDRANT_ADDR:-}

# qdrant_engine_key: a hash of all qdrant-engine is built from (lock file,
# manifest, toolchain and sources): a change to any of them builds it again.
qdrant_engine_key() {
	(cd "$QDRANT_ENGINE_SRC" && find Cargo.lock Cargo.toml rust-toolchain.toml src -type f -print0 | sort -z |
		xargs -0 sha1sum) | sha1sum | cut -c1-12
}

# qdrant_bin: print the path of the Qdrant server to run: QDRANT_BIN when set,
# else qdrant-engine, built first if this source has not been built yet.
qdrant_bin() {
	if [[ -n ${QDRANT_BIN:-} ]]; then
		[[ -x $QDRANT_BIN ]] || die "qdrant: QDRANT_BIN=$QDRANT_BIN is not an executable file"
		echo "$QDRANT_BIN"
		return
	fi
	local bin
	bin=$(qdrant_bin_path)
	[[ -x $bin ]] || build_qdrant_engine "$bin"
	echo "$bin"
}

# qdrant_bin_path: where qdrant_bin finds the server, without building it.
qdrant_bin_path() { echo "${QDRANT_BIN:-$QDRANT_ENGINE_CACHE/$(qdrant_engine_key)/qdrant-engine}"; }

# build_qdrant_engine DEST: cargo build of qdrant-engine/, with its locked
# dependencies from crates.io, on the toolchain its rust-toolchain.toml names.
build_qdrant_engine() {
	local dest=$1 logf=$LOG_DIR/qdrant-engine-build.log
	command -v cargo >/dev/null ||
		die "qdrant: cargo not found; install Rust with rustup (qdrant-engine needs its nightly toolchain), or set QDRANT_BIN to a Qdrant server"
	(cd "$QDRANT_ENGINE_SRC" && rustup which rustc >/dev/null 2>&1) ||
		die "qdrant: the Rust toolchain of qdrant-engine/rust-toolchain.toml is not installed (rustup toolchain install nightly), or set QDRANT_BIN to a Qdrant server"
	log "qdrant: building qdrant-engine (Qdrant's engine, the crate qdrant-edge, behind the project's Qdrant API server) into $(dirname "$dest"); about 8 minutes on two cores, once per source; log in $logf"
	if ! (cd "$QDRANT_ENGINE_SRC" && CARGO_TARGET_DIR=$QDRANT_ENGINE_CACHE/target cargo build --release --locked) >"$logf" 2>&1; then
		fail qdrant "$logf" "cargo could not build qdrant-engine"
	fi
	mkdir -p "$(dirname "$dest")"
	cp "$QDRANT_ENGINE_CACHE/target/release/qdrant-engine" "$dest.part"
	mv "$dest.part" "$dest"
}

# write_qdrant_config HOME HTTP_PORT GRPC_PORT [secure]: one server's configuration,
# written on every start so that port overrides take effect. The secured server
# requires the API key and serves REST and gRPC over TLS only. Both servers read
# the same file: qdrant-engine takes Qdrant's keys.
write_qdrant_config() {
	local home=$1 http=$2 grpc=$3
	mkdir -p "$home"
	# It may hold the API key: readable by this user only.
	(umask 077 && cat >"$home/config.yaml") <<EOF
# Written by scripts/services.sh on every start; edits are lost.
log_level: INFO
telemetry_disabled: true
storage:
  storage_path: $home/storage
  snapshots_path: $home/snapshots
service:
  host: 127.0.0.1
  http_port: $http
  grpc_port: $grpc
EOF
	if [[ ${4:-} == secure ]]; then
		cat >>"$home/config.yaml" <<EOF
  api_key: $(secret qdrant-api-key)
  enable_tls: true
tls:
  cert: $TLS_DIR/server.crt
  key: $TLS_DIR/server.key
EOF
	fi
}

# ensure_curl: curl asks the servers' /readyz.
ensure_curl() {
	command -v curl >/dev/null && return
	log "qdrant: installing curl"
	{ apt-get install -y -q curl || { apt-get update -q && apt-get install -y -q curl; }; } >"$LOG_DIR/apt-curl.log" 2>&1 ||
		fail qdrant "$LOG_DIR/apt-curl.log" "apt-get install curl failed"
}

# qdrant_external_up: whether the server of QDRANT_ADDR accepts connections.
qdrant_external_up() { (exec 3<>"/dev/tcp/${QDRANT_ADDR%:*}/${QDRANT_ADDR##*:}") 2>/dev/null; }

qdrant_running() {
	running_pid qdrant-secure >/dev/null || return 1
	if [[ -n $QDRANT_ADDR ]]; then qdrant_external_up; else running_pid qdrant >/dev/null; fi
}

start_qdrant() {
	local bin
	ensure_curl
	if qdrant_running; then
		log "qdrant: already running"
		return
	fi
	stop_qdrant
	if [[ -z $QDRANT_ADDR ]]; then
		require_free_port qdrant "$QDRANT_HTTP_PORT" QDRANT_HTTP_PORT
		require_free_port qdrant "$QDRANT_GRPC_PORT" QDRANT_GRPC_PORT
	fi
	require_free_port qdrant "$QDRANT_SECURE_HTTP_PORT" QDRANT_SECURE_HTTP_PORT
	require_free_port qdrant "$QDRANT_SECURE_GRPC_PORT" QDRANT_SECURE_GRPC_PORT
	bin=$(qdrant_bin)
	write_qdrant_config "$QDRANT_SECURE_HOME" "$QDRANT_SECURE_HTTP_PORT" "$QDRANT_SECURE_GRPC_PORT" secure
	if [[ -z $QDRANT_ADDR ]]; then
		write_qdrant_config "$QDRANT_HOME" "$QDRANT_HTTP_PORT" "$QDRANT_GRPC_PORT"
		log "qdrant: starting $bin on 127.0.0.1:$QDRANT_GRPC_PORT (gRPC) and :$QDRANT_HTTP_PORT (REST); with an API key and TLS on :$QDRANT_SECURE_GRPC_PORT and :$QDRANT_SECURE_HTTP_PORT"
		# Qdrant looks for its optional config/ directory in its working directory.
		(cd "$QDRANT_HOME" && launch qdrant "$bin" --config-path "$QDRANT_HOME/config.yaml")
	else
		log "qdrant: using the Qdrant server at $QDRANT_ADDR (QDRANT_ADDR); starting $bin with an API key and TLS on :$QDRANT_SECURE_GRPC_PORT and :$QDRANT_SECURE_HTTP_PORT"
	fi
	(cd "$QDRANT_SECURE_HOME" && launch qdrant-secure "$bin" --config-path "$QDRANT_SECURE_HOME/config.yaml")
}

stop_qdrant() {
	stop_pid_service qdrant-secure
	stop_pid_service qdrant
}

# qdrant_ready PORT [secure]: whether the REST /readyz answers 200, which it
# does once the collections on disk are loaded; the gRPC port opens only then too.
qdrant_ready() {
	if [[ ${2:-} == secure ]]; then
		curl -fsS -m 3 --cacert "$TLS_DIR/ca.crt" "https://127.0.0.1:$1/readyz"
	else
		curl -fsS -m 3 "http://127.0.0.1:$1/readyz"
	fi
}

# qdrant_version PORT: what serves the index, from the REST root: the Qdrant
# server's version, or qdrant-engine's API version and engine.
qdrant_version() {
	local root version engine
	root=$(curl -fsS -m 3 "http://127.0.0.1:$1/" 2>/dev/null) || { echo "version unknown"; return; }
	version=$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' <<<"$root")
	engine=$(sed -n 's/.*"engine":"\([^"]*\)".*/\1/p' <<<"$root")
	if [[ -n $engine ]]; then
		echo "qdrant-engine: Qdrant API $version on Qdrant's engine $engine"
	else
		echo "the Qdrant server ${version:-of unknown version}"
	fi
}

wait_qdrant() {
	if [[ -z $QDRANT_ADDR ]]; then
		wait_until qdrant "$LOG_DIR/qdrant.log" "$START_TIMEOUT_QDRANT" qdrant_ready "$QDRANT_HTTP_PORT"
	else
		local deadline=$((SECONDS + START_TIMEOUT_QDRANT))
		until qdrant_external_up; do
			((SECONDS < deadline)) || die "qdrant: nothing answers on QDRANT_ADDR=$QDRANT_ADDR after ${START_TIMEOUT_QDRANT}s"
			sleep 0.5
		done
	fi
	wait_until qdrant-secure "$LOG_DIR/qdrant-secure.log" "$START_TIMEOUT_QDRANT" qdrant_ready "$QDRANT_SECURE_HTTP_PORT" secure
	if [[ -z $QDRANT_ADDR ]]; then
		log "qdrant: up on 127.0.0.1:$QDRANT_GRPC_PORT ($(qdrant_version "$QDRANT_HTTP_PORT")); API key and TLS on 127.0.0.1:$QDRANT_SECURE_GRPC_PORT"
	else
		log "qdrant: the Qdrant server at $QDRANT_ADDR answers; API key and TLS on 127.0.0.1:$QDRANT_SECURE_GRPC_PORT ($(qdrant_version "$QDRANT_SECURE_HTTP_PORT"))"
	fi
}

# --- commands -----------------------------------------------------------------------

check_names() {
	local s
	for s in "$@"; do
		[[ " $ALL_SERVICES " == *" $s "* ]] || die "unknown service '$s' (one of: $ALL_SERVICES)"
	done
}

# in_order SERVICE...: the given services in start order (postgres first).
in_order() {
	local s
	for s in $ALL_SERVICES; do
		[[ " $* " == *" $s "* ]] && echo "$s"
	done
	return 0
}

is_up() {
	case $1 in
	postgres) pg_running ;;
	qdrant) qdrant_running ;;
	*) running_pid "$1" >/dev/null ;;
	esac
}

addr_of() {
	case $1 in
	postgres) echo "127.0.0.1:$PG_PORT" ;;
	kafka) echo "127.0.0.1:$KAFKA_PORT" ;;
	neo4j) echo "127.0.0.1:$NEO4J_BOLT_PORT" ;;
	qdrant) echo "${QDRANT_ADDR:-127.0.0.1:$QDRANT_GRPC_PORT}" ;;
	esac
}

# cmd_start SERVICE...: launch all (the JVMs start in parallel), then wait for each.
cmd_start() {
	local s
	mkdir -p "$LOG_DIR" "$RUN_DIR" "$BIN_DIR"
	ensure_tls
	for s in $(in_order "$@"); do "start_$s"; done
	for s in $(in_order "$@"); do "wait_$s"; done
}

cmd_stop() {
	local s
	for s in $(in_order "$@" | tac); do
		case $s in
		postgres) stop_postgres ;;
		qdrant) stop_qdrant ;;
		*) stop_pid_service "$s" ;;
		esac
	done
}

# leftovers: pids of service processes (java, postgres, qdrant) whose command
# line names this checkout's service data or jar cache; none may survive `down`.
leftovers() {
	DIRS="$SERVICES_DIR/|$CACHE_DIR/|$(pg_home)/" ps -eo pid=,comm=,args= | awk '
		BEGIN { n = split(ENVIRON["DIRS"], dirs, "|") }
		$2 == "java" || $2 == "postgres" || $2 ~ /^qdrant/ {
			for (i = 1; i <= n; i++) if (index($0, dirs[i])) { print $1; break }
		}'
}

# cmd_down: stop every service, then any process of theirs that lost its pid file.
cmd_down() {
	local pid
	# shellcheck disable=SC2086 # a space-separated list
	cmd_stop $ALL_SERVICES
	for pid in $(leftovers); do
		log "stopping left-over process $pid: $(ps -o args= -p "$pid" | cut -c1-120)"
		kill_pid left-over "$pid"
	done
	[[ -z $(leftovers) ]] || die "processes still running: $(leftovers | tr '\n' ' ')"
	log "down"
}

cmd_status() {
	local s rc=0
	for s in "$@"; do
		if is_up "$s"; then
			printf '%-9s up    %s\n' "$s" "$(addr_of "$s")"
		else
			printf '%-9s down  %s\n' "$s" "$(addr_of "$s")"
			rc=1
		fi
	done
	return $rc
}

cmd_env() {
	cat <<EOF
export PROJECTOR_BROKERS='127.0.0.1:$KAFKA_PORT'
export PROJECTOR_POSTGRES_DSN='postgres://projector:projector@127.0.0.1:$PG_PORT/projector?sslmode=disable'
export PROJECTOR_NEO4J_URI='bolt://127.0.0.1:$NEO4J_BOLT_PORT'
export PROJECTOR_NEO4J_USER='neo4j'
export PROJECTOR_NEO4J_PASSWORD=''
export PROJECTOR_QDRANT_ADDR='${QDRANT_ADDR:-127.0.0.1:$QDRANT_GRPC_PORT}'
export PROJECTOR_SECURE_CA_FILE='$TLS_DIR/ca.crt'
export PROJECTOR_SECURE_BROKERS='127.0.0.1:$KAFKA_SECURE_PORT'
export PROJECTOR_SECURE_KAFKA_USER='projector'
export PROJECTOR_SECURE_KAFKA_PASSWORD_FILE='$SECRETS_DIR/kafka-password'
export PROJECTOR_SECURE_POSTGRES_DSN='postgres://projector_tls@127.0.0.1:$PG_PORT/projector?sslmode=verify-full&sslrootcert=$TLS_DIR/ca.crt&passfile=$SECRETS_DIR/pgpass'
export PROJECTOR_SECURE_POSTGRES_PASSWORD_FILE='$SECRETS_DIR/postgres-password'
export PROJECTOR_SECURE_NEO4J_URI='bolt+s://127.0.0.1:$NEO4J_SECURE_BOLT_PORT'
export PROJECTOR_SECURE_NEO4J_USER='neo4j'
export PROJECTOR_SECURE_NEO4J_PASSWORD_FILE='$SECRETS_DIR/neo4j-password'
export PROJECTOR_SECURE_QDRANT_ADDR='127.0.0.1:$QDRANT_SECURE_GRPC_PORT'
export PROJECTOR_SECURE_QDRANT_API_KEY_FILE='$SECRETS_DIR/qdrant-api-key'
export PROJECTOR_TEST_QDRANT_BIN='$(qdrant_bin_path)'
export PROJECTOR_TEST_QDRANT_ENGINE_TARGET='$QDRANT_ENGINE_CACHE/target'
EOF
}

cmd_clean() {
	local s
	cmd_stop "$@"
	if [[ $* == "$ALL_SERVICES" ]]; then
		rm -rf "$(pg_home)" "$SERVICES_DIR"
		log "removed $SERVICES_DIR"
		return
	fi
	for s in "$@"; do
		case $s in
		postgres) rm -rf "$(pg_home)" ;;
		kafka) rm -rf "$KAFKA_HOME" ;;
		neo4j) rm -rf "$NEO4J_HOME" "$NEO4J_SECURE_HOME" ;;
		qdrant) rm -rf "$QDRANT_HOME" "$QDRANT_SECURE_HOME" ;;
		esac
		rm -f "$LOG_DIR/$s.log" "$LOG_DIR/$s.log.1"
	done
	log "removed the data of: $*"
}

main() {
	[[ $# -ge 1 ]] || die "usage: $0 up|down|status|env|clean [SERVICE...] | start|stop|restart SERVICE..."
	local cmd=$1 svcs
	shift
	if [[ $cmd =~ ^(start|stop|restart)$ && $# -eq 0 ]]; then
		die "$cmd needs a service name (one of: $ALL_SERVICES)"
	fi
	# The services named on the command line, else those in SERVICES (default all).
	if [[ $# -gt 0 ]]; then svcs=("$@"); else read -ra svcs <<<"$SERVICES"; fi
	check_names "${svcs[@]}"
	case $cmd in
	up) cmd_start "${svcs[@]}" ;;
	down) if [[ $# -gt 0 ]]; then cmd_stop "$@"; else cmd_down; fi ;;
	status) cmd_status "${svcs[@]}" ;;
	env) cmd_env ;;
	clean) cmd_clean "${svcs[@]}" ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	restart)
		cmd_stop "$@"
		cmd_start "$@"
		;;
	*) die "unknown command '$cmd'" ;;
	esac
}

main "$@"
