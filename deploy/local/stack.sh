#!/usr/bin/env bash
# The local test stack of outbox-canary: PostgreSQL 15, MariaDB 10.11 and a
# single-node Apache Kafka 4.4.0 (KRaft), plus the Debian packages of Prometheus,
# Alertmanager, promtool, kcat and chromium (the status page's browser test). Everything lives under $STACK_DIR
# (default <repo>/.stack, git-ignored); the servers listen on free ports of
# 127.0.0.1 and are described in $STACK_DIR/env for tests (internal/stacktest).
# Beside the plaintext connections that most tests use, Kafka has a SASL_SSL
# listener (SCRAM-SHA-512) and PostgreSQL and MariaDB take TLS (required of
# the role and user canary_tls), with a CA and passwords made at the first
# `up` in $STACK_DIR/secure.
#
# Usage: deploy/local/stack.sh COMMAND
#   up                 install what is missing, start what is not running (idempotent)
#   down               stop what the stack started, delete its data (keeps the Kafka jars)
#   status             print each server up/down (exit 0 only when all are up)
#   env                print the env file
#   stop-postgres | start-postgres | restart-postgres    (keep data and port)
#   stop-kafka    | start-kafka    | restart-kafka       (keep data and ports)
#   stop-mysql    | start-mysql    | restart-mysql       (keep data and port)
#
# Environment: STACK_DIR, PG_WAIT (s, default 60), KAFKA_WAIT (s, default 120),
# KAFKA_HEAP (default -Xmx512m -Xms512m), JAVA (java binary, default: java on
# PATH), MYSQL_WAIT (s, default 60), PG_PORT_BASE (25432), KAFKA_PORT_BASE
# (19092) and MYSQL_PORT_BASE (23306): the first ports tried.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STACK_DIR=${STACK_DIR:-$REPO/.stack}
PG_WAIT=${PG_WAIT:-60}
KAFKA_WAIT=${KAFKA_WAIT:-120}
STOP_WAIT=${STOP_WAIT:-60}
KAFKA_HEAP=${KAFKA_HEAP:--Xmx512m -Xms512m}
# Where the search for free ports starts. A second stack beside the default
# one should start elsewhere: while the first one restarts a server, its ports
# are free for a moment and the second stack could take them. All below
# Linux's ephemeral range (32768-60999 by default): while a disruptive test
# has a server stopped, the servers and clients the other tests start on
# port 0 (alerts/'s Alertmanagers, beside them in make test) could be given
# its port, and it would not start again.
PG_PORT_BASE=${PG_PORT_BASE:-25432}
KAFKA_PORT_BASE=${KAFKA_PORT_BASE:-19092}
MYSQL_PORT_BASE=${MYSQL_PORT_BASE:-23306}
MYSQL_WAIT=${MYSQL_WAIT:-60}
KAFKA_VERSION=4.4.0
PG_BIN=/usr/lib/postgresql/15/bin

ENV_FILE=$STACK_DIR/env
STATE_FILE=$STACK_DIR/state # ports and paths chosen at first start, reused on restart
PIDS=$STACK_DIR/pids
LOGS=$STACK_DIR/logs
KAFKA_HOME=$STACK_DIR/kafka
KAFKA_LIBS=$KAFKA_HOME/libs
KAFKA_DATA=$KAFKA_HOME/data
SECURE_DIR=$STACK_DIR/secure # CA, server certificate, passwords: see secure_material
KAFKA_SASL_USER=canary       # the SCRAM-SHA-512 user of the SASL_SSL listener
PG_TLS_USER=canary_tls       # the role that pg_hba.conf allows only over TLS
MYSQL_TLS_USER=canary_tls    # the MariaDB user created REQUIRE SSL

# The topics every test run can rely on: name partitions [config]. Canary
# topics stamp records at the broker (LogAppendTime): with Debezium the
# publish stamp is then the broker's append time, after the connector's
# queue (docs/cdc.md).
TOPICS=(
	"outbox.event.outbox-canary 3 message.timestamp.type=LogAppendTime"
	"outbox.event.order 3"
	"outbox.event.outbox-canary.logappend 1 message.timestamp.type=LogAppendTime"
)

log() { printf '[stack] %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# ---------------------------------------------------------------- helpers

# running, pid_alive, stop_pid, port_busy, port_taken, free_port,
# start_java, await_ready, tail_logs and take_lock, shared with connect.sh.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

# The command line of each server's process, which pid_alive checks before
# trusting a pid file. connect is connect.sh's worker, which `down` stops
# should connect.sh fail to.
declare -A PATTERN=([postgres]=postgres [kafka]=kafka.Kafka [connect]=ConnectStandalone [mysql]=mariadbd)

# server_alive NAME: $PIDS/NAME.pid names our running server NAME.
server_alive() { pid_alive "$1" "${PATTERN[$1]:-}"; }

# stop_server NAME SIGNAL: stop server NAME (see stop_pid in lib.sh).
stop_server() {
	stop_pid "$1" "${PATTERN[$1]:-}" "$2" "$1: "
	[[ -z $REPLY ]] || log "$1: stopped"
}

load_state() {
	if [[ -f $STATE_FILE ]]; then
		# shellcheck disable=SC1090
		source "$STATE_FILE"
	fi
}

# ---------------------------------------------------------------- packages

installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

# debian_daemons: pids of the Prometheus and Alertmanager daemons that
# Debian's packages run as the prometheus user, and of the MariaDB server its
# package runs on /var/lib/mysql (ours run with --defaults-file, never there).
debian_daemons() {
	pgrep -u prometheus -x prometheus 2>/dev/null || true
	pgrep -u prometheus -x prometheus-alertmanager 2>/dev/null || true
	pgrep -u mysql -a -x mariadbd 2>/dev/null | grep -v -- --defaults-file= | cut -d' ' -f1 || true
}

ensure_packages() {
	# chromium: e2e loads the status page in it, headless.
	local want=(postgresql-15 mariadb-server prometheus prometheus-alertmanager kcat chromium)
	command -v java >/dev/null || want+=(openjdk-17-jre-headless)
	command -v mvn >/dev/null || want+=(maven)
	command -v ss >/dev/null || want+=(iproute2)
	command -v curl >/dev/null || want+=(curl)
	command -v pgrep >/dev/null || want+=(procps) # debian_daemons
	command -v openssl >/dev/null || want+=(openssl) # secure_material
	local missing=() p
	for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done
	if ((${#missing[@]} == 0)); then
		log "packages: all present (${want[*]})"
		return
	fi
	log "packages: installing ${missing[*]} ..."
	# Debian's postinst scripts start the daemons through invoke-rc.d; a
	# policy-rc.d that answers 101 forbids it. Keep one that is already there.
	local policy=/usr/sbin/policy-rc.d ours=
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\n# temporary, written by outbox-canary deploy/local/stack.sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		ours=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also when interrupted
	fi
	local before rc=0
	before=" $(debian_daemons | tr '\n' ' ') "
	{
		local apt=(apt-get -o DPkg::Lock::Timeout=300 -q)
		export DEBIAN_FRONTEND=noninteractive
		"${apt[@]}" update >"$LOGS/apt.log" 2>&1 &&
			"${apt[@]}" install -y --no-install-recommends "${missing[@]}" >>"$LOGS/apt.log" 2>&1
	} || rc=$?
	if [[ -n $ours ]]; then
		rm -f "$policy"
		trap - EXIT
	fi
	if ((rc != 0)); then
		tail_logs "$LOGS/apt.log"
		die "packages: apt-get failed (exit $rc), full log in $LOGS/apt.log"
	fi
	# Should a postinst have started a daemon anyway (an init system that
	# ignores policy-rc.d), stop it, but only one that this install started.
	for p in $(debian_daemons); do
		if [[ $before != *" $p "* ]]; then
			log "packages: stopping the daemon that the Debian package started (pid $p)"
			kill "$p" 2>/dev/null || true
		fi
	done
	log "packages: installed ${missing[*]}"
}

java_bin() {
	local j=${JAVA:-$(command -v java || true)}
	[[ -n $j ]] || die "java: not found (set JAVA or install openjdk-17-jre-headless)"
	# Kafka 4.4 brokers need Java 17 (class files version 61).
	local major
	major=$("$j" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
	if ((${major%%.*} < 17)); then
		die "java: $j is Java $major, Kafka $KAFKA_VERSION needs 17 or newer"
	fi
	echo "$j"
}

# ---------------------------------------------------------------- postgres

pg_as() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

# PostgreSQL refuses to run as root, so it runs as the postgres system user,
# which must be able to reach its data and socket directories. When it cannot
# reach $STACK_DIR (a repo under /root, say) or the socket path would be too
# long for a unix socket, the data goes to a private directory under /tmp.
choose_pg_dirs() {
	local base=$STACK_DIR
	if ! pg_as test -x "$STACK_DIR" || ((${#STACK_DIR} > 80)); then
		base=$(mktemp -d /tmp/outbox-canary-pg.XXXXXX)
		chmod 755 "$base"
		log "postgres: $STACK_DIR is not usable by the postgres user, data goes to $base"
	fi
	PG_DATA=$base/pg
	PG_SOCKET_DIR=$base/run
}

pg_init() {
	log "postgres: initdb in $PG_DATA ..."
	mkdir -p "$PG_DATA" "$PG_SOCKET_DIR"
	chown postgres:postgres "$PG_DATA" "$PG_SOCKET_DIR"
	chmod 700 "$PG_DATA"
	pg_as "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host=scram-sha-256 >"$LOGS/initdb.log" 2>&1 ||
		{
			tail_logs "$LOGS/initdb.log"
			die "postgres: initdb failed"
		}
	sed -e "s|@PG_PORT@|$PG_PORT|" -e "s|@SOCKET_DIR@|$PG_SOCKET_DIR|" \
		"$HERE/postgres/postgresql.conf.in" >>"$PG_DATA/postgresql.conf"
	cp "$HERE/postgres/pg_hba.conf" "$PG_DATA/pg_hba.conf"
	chown postgres:postgres "$PG_DATA/postgresql.conf" "$PG_DATA/pg_hba.conf"
	pg_tls_files
}

pg_start() {
	if server_alive postgres; then
		log "postgres: already running on 127.0.0.1:$PG_PORT"
	else
		[[ -f $PG_DATA/PG_VERSION ]] || die "postgres: no data dir at $PG_DATA (run: $0 up)"
		if port_busy "$PG_PORT"; then
			die "postgres: port $PG_PORT is taken by another process (run: $0 down; $0 up)"
		fi
		mkdir -p "$PG_SOCKET_DIR" && chown postgres:postgres "$PG_SOCKET_DIR"
		log "postgres: starting on 127.0.0.1:$PG_PORT ..."
		# setsid: the server gets its own session, so neither the end of this
		# shell nor a signal to its process group (Ctrl-C, a killed job) stops
		# it. setpriv execs, so $! is the postmaster's own pid.
		setsid setpriv --reuid=postgres --regid=postgres --init-groups -- \
			"$PG_BIN/postgres" -D "$PG_DATA" </dev/null >>"$LOGS/postgres.log" 2>&1 9>&- &
		echo $! >"$PIDS/postgres.pid"
	fi
	# Wait even when it was already running: it may still be starting.
	await_ready postgres "$PG_WAIT" 0.2 "postgres: " pg_ready "$LOGS/postgres.log"
}

pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 1; }

# pg_bootstrap creates the role and database of the DSNs unless they exist,
# so an `up` that was interrupted after initdb completes them next time.
pg_bootstrap() {
	log "postgres: ensuring role canary (superuser) and database canary ..."
	pg_as "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U postgres -d postgres <<'SQL' >/dev/null
SELECT 'CREATE ROLE canary LOGIN SUPERUSER REPLICATION PASSWORD ''canary'''
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'canary') \gexec
SELECT 'CREATE DATABASE canary OWNER canary'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'canary') \gexec
SQL
}

pg_stop() {
	# SIGINT is PostgreSQL's "fast" shutdown: SIGTERM ("smart") would wait for
	# every client, such as a test's connection pool, to disconnect.
	stop_server postgres INT
}

# ---------------------------------------------------------------- mariadb

my_as() { setpriv --reuid=mysql --regid=mysql --init-groups -- "$@"; }

# choose_mysql_dirs: MariaDB runs as the mysql system user, which must reach
# its data and socket directories; as for PostgreSQL, a $STACK_DIR it cannot
# reach or too long for a unix socket sends them to a private /tmp directory.
choose_mysql_dirs() {
	local base=$STACK_DIR
	if ! my_as test -x "$STACK_DIR" || ((${#STACK_DIR} > 80)); then
		base=$(mktemp -d /tmp/outbox-canary-mysql.XXXXXX)
		chmod 755 "$base"
		log "mysql: $STACK_DIR is not usable by the mysql user, data goes to $base"
	fi
	MYSQL_DATA=$base/mysql
	MYSQL_RUN_DIR=$base/mysql-run
}

mysql_socket() { echo "$MYSQL_RUN_DIR/mariadbd.sock"; }

# mysql_root ARGS...: the mariadb client as the server's root, which
# mariadb-install-db lets in through the unix socket only, as the OS user
# root (this script runs as root).
mysql_root() { mariadb --no-defaults --protocol=socket --socket="$(mysql_socket)" -u root "$@"; }

mysql_init() {
	log "mysql: mariadb-install-db in $MYSQL_DATA ..."
	mkdir -p "$MYSQL_DATA" "$MYSQL_RUN_DIR"
	chown mysql:mysql "$MYSQL_DATA" "$MYSQL_RUN_DIR"
	chmod 700 "$MYSQL_DATA"
	mariadb-install-db --no-defaults --datadir="$MYSQL_DATA" --user=mysql \
		--auth-root-authentication-method=socket --skip-test-db >"$LOGS/mariadb-install-db.log" 2>&1 ||
		{
			tail_logs "$LOGS/mariadb-install-db.log"
			die "mysql: mariadb-install-db failed"
		}
	mysql_tls_files
}

# mysql_config renders the option file, at every start, so a changed
# template applies on restart.
mysql_config() {
	sed -e "s|@DATA_DIR@|$MYSQL_DATA|g" -e "s|@SOCKET@|$(mysql_socket)|g" -e "s|@RUN_DIR@|$MYSQL_RUN_DIR|g" \
		-e "s|@LOG_FILE@|$LOGS/mysql.log|g" -e "s|@MYSQL_PORT@|$MYSQL_PORT|g" -e "s|@CA_FILE@|$MYSQL_DATA/ca.pem|g" \
		"$HERE/mariadb/my.cnf.in" >"$MYSQL_RUN_DIR/my.cnf"
	chmod 644 "$MYSQL_RUN_DIR/my.cnf"
}

# mysql_tls_files copies the server certificate, its key (readable by the
# mysql user only) and the CA into the data directory.
mysql_tls_files() {
	[[ -f $SECURE_DIR/server.pem ]] || return 0
	install -o mysql -g mysql -m 644 "$SECURE_DIR/server.pem" "$MYSQL_DATA/server.crt"
	install -o mysql -g mysql -m 600 "$SECURE_DIR/server.key" "$MYSQL_DATA/server.key"
	install -o mysql -g mysql -m 644 "$SECURE_DIR/ca.pem" "$MYSQL_DATA/ca.pem"
}

mysql_start() {
	if server_alive mysql; then
		log "mysql: already running on 127.0.0.1:$MYSQL_PORT"
	else
		[[ -n ${MYSQL_PORT:-} && -d $MYSQL_DATA/mysql ]] || die "mysql: no data dir at ${MYSQL_DATA:-?} (run: $0 up)"
		if port_busy "$MYSQL_PORT"; then
			die "mysql: port $MYSQL_PORT is taken by another process (run: $0 down; $0 up)"
		fi
		mkdir -p "$MYSQL_RUN_DIR" && chown mysql:mysql "$MYSQL_RUN_DIR"
		mysql_config
		log "mysql: starting MariaDB $(mariadbd --version | awk '{print $3}') on 127.0.0.1:$MYSQL_PORT ..."
		# As pg_start: a session of its own; setpriv execs, so $! is
		# mariadbd's pid. --defaults-file must come first.
		setsid setpriv --reuid=mysql --regid=mysql --init-groups -- \
			/usr/sbin/mariadbd --defaults-file="$MYSQL_RUN_DIR/my.cnf" </dev/null >>"$LOGS/mysql.stdout.log" 2>&1 9>&- &
		echo $! >"$PIDS/mysql.pid"
	fi
	await_ready mysql "$MYSQL_WAIT" 0.2 "mysql: " mysql_ready "$LOGS/mysql.log" "$LOGS/mysql.stdout.log"
}

mysql_ready() { mysql_root -N -e 'SELECT 1' >/dev/null 2>&1; }

# mysql_bootstrap creates the database and users of the DSNs unless they
# exist, and sets their privileges every time:
#   canary        the prober's and the relay's user: rows of the outbox
#                 tables in the databases canary and canary_* (tests make
#                 one each), and what its watchers read (PROCESS for
#                 information_schema.innodb_trx, BINLOG MONITOR for SHOW
#                 BINARY LOGS), nothing else: least privilege.
#   canary_admin  the tests' and demo's DDL (creating the databases and
#                 tables), as the PostgreSQL superuser canary is.
#   canary_tls    as canary, and only over TLS (REQUIRE SSL).
#   canary_cdc    Debezium's MariaDB connector: what it needs to read the
#                 binlog and the tables' structure (REPLICATION SLAVE,
#                 BINLOG MONITOR, SELECT, RELOAD, SHOW DATABASES, LOCK TABLES).
mysql_bootstrap() {
	log "mysql: ensuring database canary and users canary (least privilege), canary_admin, canary_cdc${MYSQL_TLS_PASSWORD:+, $MYSQL_TLS_USER (TLS only)} ..."
	{
		cat <<'SQL'
CREATE DATABASE IF NOT EXISTS canary;
CREATE USER IF NOT EXISTS 'canary'@'127.0.0.1' IDENTIFIED BY 'canary';
GRANT SELECT, INSERT, UPDATE, DELETE ON `canary%`.* TO 'canary'@'127.0.0.1';
GRANT PROCESS, BINLOG MONITOR ON *.* TO 'canary'@'127.0.0.1';
CREATE USER IF NOT EXISTS 'canary_admin'@'127.0.0.1' IDENTIFIED BY 'canary_admin';
GRANT ALL PRIVILEGES ON *.* TO 'canary_admin'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'canary_cdc'@'127.0.0.1' IDENTIFIED BY 'canary_cdc';
GRANT SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'canary_cdc'@'127.0.0.1';
SQL
		# The password goes through stdin, not the command line that ps
		# shows; it is hex, so it needs no quoting.
		if [[ -n ${MYSQL_TLS_PASSWORD:-} ]]; then
			cat <<SQL
CREATE USER IF NOT EXISTS '$MYSQL_TLS_USER'@'127.0.0.1' IDENTIFIED BY '$MYSQL_TLS_PASSWORD' REQUIRE SSL;
ALTER USER '$MYSQL_TLS_USER'@'127.0.0.1' IDENTIFIED BY '$MYSQL_TLS_PASSWORD' REQUIRE SSL;
GRANT SELECT, INSERT, UPDATE, DELETE ON \`canary%\`.* TO '$MYSQL_TLS_USER'@'127.0.0.1';
GRANT PROCESS, BINLOG MONITOR ON *.* TO '$MYSQL_TLS_USER'@'127.0.0.1';
SQL
		fi
	} | mysql_root --batch || die "mysql: creating the database and users failed"
}

mysql_stop() { stop_server mysql TERM; }

# mysql_secure makes the password of $MYSQL_TLS_USER beside the others of
# $SECURE_DIR (a stack whose secure material predates MariaDB gets it now)
# and sets MYSQL_TLS_PASSWORD for mysql_bootstrap.
mysql_secure() {
	local f=$SECURE_DIR/mysql-$MYSQL_TLS_USER.password
	[[ -f $f ]] || (umask 077 && openssl rand -hex 24 >"$f")
	MYSQL_TLS_PASSWORD=$(<"$f")
}

# mysql_secure_check proves, as secure_check does for PostgreSQL, that
# $MYSQL_TLS_USER logs in over TLS with a client that trusts only the
# stack's CA and verifies the server's certificate for 127.0.0.1.
mysql_secure_check() {
	local out
	out=$(MYSQL_PWD=$MYSQL_TLS_PASSWORD mariadb --no-defaults -h 127.0.0.1 -P "$MYSQL_PORT" -u "$MYSQL_TLS_USER" \
		--ssl --ssl-ca="$SECURE_DIR/ca.pem" --ssl-verify-server-cert -N -B \
		-e "SHOW SESSION STATUS LIKE 'Ssl_version'" 2>&1) || true
	[[ $out == Ssl_version*TLS* ]] || die "mysql: user $MYSQL_TLS_USER cannot connect with TLS verified by $SECURE_DIR/ca.pem: $out"
	log "tls: MariaDB TLS on 127.0.0.1:$MYSQL_PORT verified (${out#Ssl_version	})"
}

# ---------------------------------------------------------------- kafka

kafka_fetch_libs() {
	local stamp
	stamp=$(sha256sum "$HERE/kafka/pom.xml" | cut -c1-16)
	if [[ -f $KAFKA_LIBS/.complete && $(<"$KAFKA_LIBS/.complete") == "$stamp" ]]; then
		log "kafka: jars already in $KAFKA_LIBS"
		return
	fi
	log "kafka: fetching Kafka $KAFKA_VERSION jars with Maven into $KAFKA_LIBS ..."
	rm -rf "$KAFKA_LIBS"
	mkdir -p "$KAFKA_LIBS"
	if ! mvn -q -B -Dstyle.color=never -f "$HERE/kafka/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS" >"$LOGS/maven.log" 2>&1; then
		tail_logs "$LOGS/maven.log"
		die "kafka: mvn dependency:copy-dependencies failed"
	fi
	echo "$stamp" >"$KAFKA_LIBS/.complete"
	log "kafka: $(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars"
}

# kafka_tool CLASS ARGS...: run one of Kafka's command-line tools.
kafka_tool() {
	local cls=$1
	shift
	# Short-lived JVM: small heap, C1 only, serial GC start fastest.
	"$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
		-Dlog4j2.configurationFile="$HERE/kafka/log4j2-tools.xml" \
		-cp "$KAFKA_LIBS/*" "$cls" "$@"
}

kafka_init() {
	log "kafka: formatting KRaft storage in $KAFKA_DATA ..."
	mkdir -p "$KAFKA_DATA"
	# umask: it holds the keystore password.
	(umask 077 && sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
		-e "s|@DATA_DIR@|$KAFKA_DATA|g" -e "s|@SASL_PORT@|$KAFKA_SASL_PORT|g" \
		-e "s|@KEYSTORE@|$SECURE_DIR/kafka.p12|g" -e "s|@KEYSTORE_PASSWORD@|$(<"$SECURE_DIR/kafka.p12.password")|g" \
		"$HERE/kafka/server.properties.in" >"$KAFKA_HOME/server.properties")
	# A cluster id is 16 random bytes in URL-safe base64 without padding, not
	# starting with '-' (kafka-storage would take it for an option, as
	# Kafka's own Uuid.randomUuid avoids it for).
	local cluster_id=-
	while [[ $cluster_id == -* ]]; do
		cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
	done
	# --add-scram: KRaft keeps SCRAM users in its metadata, so the user of the
	# SASL_SSL listener is created with the storage, before the first start.
	kafka_tool kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" \
		-c "$KAFKA_HOME/server.properties" \
		--add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$(<"$SECURE_DIR/kafka-$KAFKA_SASL_USER.password")]" \
		>"$LOGS/kafka-format.log" 2>&1 ||
		{
			tail_logs "$LOGS/kafka-format.log"
			die "kafka: storage format failed"
		}
}

# kafka_metadata [TOPIC]: the broker's metadata as kcat prints it, or fail.
kafka_metadata() {
	if [[ $# -gt 0 ]]; then
		kcat -L -b "127.0.0.1:$KAFKA_PORT" -m 3 -t "$1" 2>/dev/null
	else
		kcat -L -b "127.0.0.1:$KAFKA_PORT" -m 3 2>/dev/null
	fi
}

kafka_start() {
	if server_alive kafka; then
		log "kafka: already running on 127.0.0.1:$KAFKA_PORT"
	else
		[[ -f $KAFKA_DATA/meta.properties ]] || die "kafka: no formatted data dir at $KAFKA_DATA (run: $0 up)"
		local p
		for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
			if port_busy "$p"; then
				die "kafka: port $p is taken by another process (run: $0 down; $0 up)"
			fi
		done
		# Rendered at every start, so a changed template applies on restart.
		sed -e "s|@LOG_FILE@|$LOGS/kafka.log|g" "$HERE/kafka/log4j2.xml.in" >"$KAFKA_HOME/log4j2.xml"
		log "kafka: starting Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT (controller :$KAFKA_CONTROLLER_PORT) with $("$JAVA" -version 2>&1 | head -n1) ..."
		start_java kafka "$KAFKA_HEAP" "$KAFKA_HOME/log4j2.xml" "$KAFKA_LIBS/*" \
			kafka.Kafka "$KAFKA_HOME/server.properties" -Dkafka.logs.dir="$LOGS"
	fi
	await_ready kafka "$KAFKA_WAIT" 0.5 "kafka: " kafka_ready "$LOGS/kafka.log" "$LOGS/kafka.stdout.log"
}

# kafka_ready: the broker is registered (unfenced): metadata lists it; and
# after a restart every partition it holds has its leader again (a broker
# listed a moment before its partitions are led refuses their writes with
# "topic partition has no leader").
kafka_ready() {
	local md
	md=$(kafka_metadata) || return 1
	grep -q "broker 1 at 127.0.0.1:$KAFKA_PORT" <<<"$md" && ! grep -qE "leader -1,|Leader not available" <<<"$md"
}

kafka_topics() {
	local spec name parts config args
	for spec in "${TOPICS[@]}"; do
		read -r name parts config <<<"$spec"
		if kafka_metadata "$name" | grep -q "topic \"$name\" with $parts partitions"; then
			log "kafka: topic $name exists"
			# A topic made before its config was listed gets it now.
			[[ -z $config ]] || kafka_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
				--alter --entity-type topics --entity-name "$name" --add-config "$config" >/dev/null
			continue
		fi
		log "kafka: creating topic $name ($parts partitions${config:+, $config}) ..."
		args=(--bootstrap-server "127.0.0.1:$KAFKA_PORT" --create --if-not-exists
			--topic "$name" --partitions "$parts" --replication-factor 1)
		[[ -z $config ]] || args+=(--config "$config")
		kafka_tool org.apache.kafka.tools.TopicCommand "${args[@]}" >/dev/null
	done
	# Creation is asynchronous: wait until every partition has a leader.
	for spec in "${TOPICS[@]}"; do
		read -r name parts config <<<"$spec"
		local start=$SECONDS md
		while ((SECONDS - start < 30)); do
			md=$(kafka_metadata "$name" || true)
			if grep -q "with $parts partitions" <<<"$md" && ! grep -q "leader -1" <<<"$md"; then
				continue 2
			fi
			sleep 0.5
		done
		die "kafka: topic $name has no leader after 30s"
	done
}

kafka_stop() { stop_server kafka TERM; }

# ---------------------------------------------------------------- secured listeners

# secure_material makes, once per stack (until down), what the secured
# connections need, in $SECURE_DIR: a CA (ca.pem, which clients trust), one
# server certificate signed by it for 127.0.0.1 and localhost, presented by
# both PostgreSQL and Kafka's SASL_SSL listener (server.pem, server.key, and
# kafka.p12 with its password), and random passwords for the Kafka user
# $KAFKA_SASL_USER and the PostgreSQL role $PG_TLS_USER (one file each, what
# tests read). openssl with EC P-256 keys takes a few milliseconds; keytool
# would start a JVM per step.
secure_material() {
	if [[ -f $SECURE_DIR/.complete ]]; then
		log "tls: CA, server certificate and passwords already in $SECURE_DIR"
		return
	fi
	log "tls: making a CA, a server certificate for 127.0.0.1 and localhost, and passwords in $SECURE_DIR ..."
	rm -rf "$SECURE_DIR"
	mkdir -p "$SECURE_DIR"
	if ! (
		cd "$SECURE_DIR"
		umask 077
		ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc)
		openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 3650 \
			-subj "/CN=outbox-canary local stack CA" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
		openssl req -new "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost"
		printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "extendedKeyUsage=serverAuth" \
			"basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" >server.ext
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -days 825 -extfile server.ext -out server.pem
		openssl rand -hex 24 >kafka.p12.password
		openssl pkcs12 -export -name kafka -in server.pem -inkey server.key -certfile ca.pem \
			-passout file:kafka.p12.password -out kafka.p12
		openssl rand -hex 24 >"kafka-$KAFKA_SASL_USER.password"
		openssl rand -hex 24 >"postgres-$PG_TLS_USER.password"
		rm server.csr server.ext
		chmod 644 ca.pem server.pem
	) >"$LOGS/openssl.log" 2>&1; then
		tail_logs "$LOGS/openssl.log"
		die "tls: openssl failed"
	fi
	touch "$SECURE_DIR/.complete"
}

# pg_tls_files installs the server certificate where PostgreSQL looks for
# it (ssl_cert_file and ssl_key_file default to server.crt and server.key
# in the data directory), the key readable by the postgres user only.
pg_tls_files() {
	install -o postgres -g postgres -m 644 "$SECURE_DIR/server.pem" "$PG_DATA/server.crt"
	install -o postgres -g postgres -m 600 "$SECURE_DIR/server.key" "$PG_DATA/server.key"
}

# pg_tls_role creates the role that pg_hba.conf lets in over TLS only, a
# member of pg_monitor as the prober's role is, and sets its password from
# its file every time, so that the two never disagree.
pg_tls_role() {
	log "postgres: ensuring role $PG_TLS_USER (TLS only, pg_monitor) ..."
	# The password goes through stdin, not the command line that ps shows;
	# it is hex, so it needs no quoting.
	pg_as "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U postgres -d postgres \
		-v role="$PG_TLS_USER" <<SQL >/dev/null
\set password '$(<"$SECURE_DIR/postgres-$PG_TLS_USER.password")'
SELECT format('CREATE ROLE %I LOGIN IN ROLE pg_monitor', :'role')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I PASSWORD %L', :'role', :'password') \gexec
SQL
}

# secure_check proves that both secured connections take a client that
# trusts only the stack's CA: openssl s_client verifies the certificate of
# the SASL_SSL listener for 127.0.0.1, psql logs in as $PG_TLS_USER with
# sslmode=verify-full. Tens of milliseconds, and a broken certificate or role
# is reported here rather than by some test. SCRAM itself is left to the Go
# tests: Debian 12's kcat (librdkafka 2.0.2) cannot log in with SCRAM to a
# Kafka 4 broker at all (it repeats the client nonce in its final message,
# which Kafka 4 rejects; fixed in librdkafka 2.6.1, edenhill/kcat#462).
secure_check() {
	local out
	if ! out=$(openssl s_client -connect "127.0.0.1:$KAFKA_SASL_PORT" -CAfile "$SECURE_DIR/ca.pem" \
		-verify_ip 127.0.0.1 -verify_return_error -brief </dev/null 2>&1); then
		log "$out"
		die "kafka: the SASL_SSL listener 127.0.0.1:$KAFKA_SASL_PORT does not present a certificate that $SECURE_DIR/ca.pem verifies"
	fi
	out=$(PGPASSWORD=$(<"$SECURE_DIR/postgres-$PG_TLS_USER.password") "$PG_BIN/psql" -X -A -t \
		"host=127.0.0.1 port=$PG_PORT dbname=postgres user=$PG_TLS_USER sslmode=verify-full sslrootcert=$SECURE_DIR/ca.pem" \
		-c "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()" 2>&1) || true
	[[ $out == t ]] || die "postgres: role $PG_TLS_USER cannot connect with sslmode=verify-full: $out"
	log "tls: Kafka SASL_SSL on 127.0.0.1:$KAFKA_SASL_PORT and PostgreSQL TLS on 127.0.0.1:$PG_PORT verified"
}

# predates_secure_note: a stack set up by a stack.sh from before the
# secured listeners runs on without them (its tests of secured connections
# skip); only down and up can add them, as they change how the data was
# made (the SCRAM user is created with the Kafka storage).
predates_secure_note() {
	log "note: this stack predates the secured listeners (Kafka SASL_SSL, PostgreSQL TLS); run $0 down, then up, to add them"
}

# secure_env: the secured connections, for the env file.
secure_env() {
	cat <<EOF
OUTBOX_CANARY_TLS_CA_FILE=$SECURE_DIR/ca.pem
OUTBOX_CANARY_KAFKA_SASL_SSL_BROKERS=127.0.0.1:$KAFKA_SASL_PORT
OUTBOX_CANARY_KAFKA_SASL_MECHANISM=SCRAM-SHA-512
OUTBOX_CANARY_KAFKA_SASL_USERNAME=$KAFKA_SASL_USER
OUTBOX_CANARY_KAFKA_SASL_PASSWORD_FILE=$SECURE_DIR/kafka-$KAFKA_SASL_USER.password
OUTBOX_CANARY_PG_TLS_USERNAME=$PG_TLS_USER
OUTBOX_CANARY_PG_TLS_PASSWORD_FILE=$SECURE_DIR/postgres-$PG_TLS_USER.password
EOF
}

# mysql_env: MariaDB, for the env file. The DSNs are URLs with the mysql
# scheme, which outbox-canary reads as database.kind mysql.
mysql_env() {
	cat <<EOF
OUTBOX_CANARY_MYSQL_DSN=mysql://canary:canary@127.0.0.1:$MYSQL_PORT/canary
OUTBOX_CANARY_MYSQL_ADMIN_DSN=mysql://canary_admin:canary_admin@127.0.0.1:$MYSQL_PORT/canary
OUTBOX_CANARY_MYSQL_CDC_USER=canary_cdc
OUTBOX_CANARY_MYSQL_CDC_PASSWORD=canary_cdc
OUTBOX_CANARY_MYSQL_HOST=127.0.0.1
OUTBOX_CANARY_MYSQL_PORT=$MYSQL_PORT
OUTBOX_CANARY_MYSQL_SOCKET=$(mysql_socket)
OUTBOX_CANARY_MYSQL_VERSION=$(mysql_root -N -B -e 'SELECT VERSION()')
EOF
	[[ -z ${MYSQL_TLS_PASSWORD:-} ]] || cat <<EOF
OUTBOX_CANARY_MYSQL_TLS_USERNAME=$MYSQL_TLS_USER
OUTBOX_CANARY_MYSQL_TLS_PASSWORD_FILE=$SECURE_DIR/mysql-$MYSQL_TLS_USER.password
EOF
}

# ---------------------------------------------------------------- env

write_env() {
	local tmp=$ENV_FILE.tmp
	cat >"$tmp" <<EOF
# Written by deploy/local/stack.sh up; read by internal/stacktest. Do not edit.
OUTBOX_CANARY_STACK_DIR=$STACK_DIR
OUTBOX_CANARY_STACK_SCRIPT=$HERE/stack.sh
OUTBOX_CANARY_PG_DSN=postgres://canary:canary@127.0.0.1:$PG_PORT/canary?sslmode=disable
OUTBOX_CANARY_PG_ADMIN_DSN=postgres://canary:canary@127.0.0.1:$PG_PORT/postgres?sslmode=disable
OUTBOX_CANARY_PG_HOST=127.0.0.1
OUTBOX_CANARY_PG_PORT=$PG_PORT
OUTBOX_CANARY_PG_SOCKET_DIR=$PG_SOCKET_DIR
OUTBOX_CANARY_PG_BIN=$PG_BIN
OUTBOX_CANARY_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT
OUTBOX_CANARY_KAFKA_VERSION=$KAFKA_VERSION
OUTBOX_CANARY_KAFKA_LIBS=$KAFKA_LIBS
OUTBOX_CANARY_KAFKA_TOOLS_LOG4J=$HERE/kafka/log4j2-tools.xml
OUTBOX_CANARY_JAVA=$JAVA
OUTBOX_CANARY_KCAT=$(command -v kcat)
OUTBOX_CANARY_PROMTOOL=$(command -v promtool)
OUTBOX_CANARY_PROMETHEUS=$(command -v prometheus)
OUTBOX_CANARY_ALERTMANAGER=$(command -v prometheus-alertmanager)
EOF
	[[ -z ${KAFKA_SASL_PORT:-} ]] || secure_env >>"$tmp"
	mysql_env >>"$tmp"
	mv "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------- commands

prepare_dirs() { mkdir -p "$STACK_DIR" "$PIDS" "$LOGS" "$KAFKA_HOME"; }

# Take the stack lock, so that two commands (two test packages restarting a
# server, say) never interleave. The servers are started with 9>&-: a server
# that inherited fd 9 would hold the lock for as long as it runs.
lock() {
	prepare_dirs
	take_lock 9 "$STACK_DIR/.lock" stack.sh
}

cmd_up() {
	lock
	load_state
	if [[ -f $ENV_FILE ]] && server_alive postgres && server_alive kafka && server_alive mysql; then
		log "already up"
		[[ -n ${KAFKA_SASL_PORT:-} ]] || predates_secure_note
		# The Kafka Connect worker (Debezium, for the CDC path) may have been
		# stopped alone by a test; bring it back. 9>&-: it must not inherit
		# our lock.
		STACK_DIR=$STACK_DIR bash "$HERE/connect.sh" up 9>&-
		cmd_status
		return
	fi
	ensure_packages
	JAVA=$(java_bin)

	# Ports and data dirs are picked once and kept until `down`, so that
	# restart-* and a second `up` reuse them. The bases keep the ports easy to
	# recognise (5432x postgres, 1909x kafka).
	if [[ ! -f $STATE_FILE ]]; then
		choose_pg_dirs
		free_port "$PG_PORT_BASE" port_taken && PG_PORT=$REPLY
		free_port "$KAFKA_PORT_BASE" port_taken && KAFKA_PORT=$REPLY
		free_port $((KAFKA_PORT_BASE + 1)) port_taken && KAFKA_CONTROLLER_PORT=$REPLY
		free_port $((KAFKA_PORT_BASE + 2)) port_taken && KAFKA_SASL_PORT=$REPLY
		printf 'PG_PORT=%s\nPG_DATA=%s\nPG_SOCKET_DIR=%s\nKAFKA_PORT=%s\nKAFKA_CONTROLLER_PORT=%s\nKAFKA_SASL_PORT=%s\n' \
			"$PG_PORT" "$PG_DATA" "$PG_SOCKET_DIR" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" >"$STATE_FILE"
		# A fresh stack starts with fresh logs.
		: >"$LOGS/postgres.log"
		: >"$LOGS/kafka.log"
		: >"$LOGS/kafka.stdout.log"
	fi
	# MariaDB joined the stack later: a stack whose state predates it gets
	# its port and directories now.
	if [[ -z ${MYSQL_PORT:-} ]]; then
		choose_mysql_dirs
		free_port "$MYSQL_PORT_BASE" port_taken && MYSQL_PORT=$REPLY
		printf 'MYSQL_PORT=%s\nMYSQL_DATA=%s\nMYSQL_RUN_DIR=%s\n' "$MYSQL_PORT" "$MYSQL_DATA" "$MYSQL_RUN_DIR" >>"$STATE_FILE"
		: >"$LOGS/mysql.log"
	fi

	# A stack set up by a stack.sh from before the secured listeners has no
	# SASL_SSL port (predates_secure_note).
	if [[ -n ${KAFKA_SASL_PORT:-} ]]; then
		secure_material
	else
		predates_secure_note
	fi

	[[ -f $PG_DATA/PG_VERSION ]] || pg_init
	pg_start
	pg_bootstrap
	[[ -z ${KAFKA_SASL_PORT:-} ]] || pg_tls_role

	[[ -z ${KAFKA_SASL_PORT:-} ]] || mysql_secure
	[[ -d $MYSQL_DATA/mysql ]] || mysql_init
	mysql_start
	mysql_bootstrap
	[[ -z ${MYSQL_TLS_PASSWORD:-} ]] || mysql_secure_check

	kafka_fetch_libs
	[[ -f $KAFKA_DATA/meta.properties ]] || kafka_init
	kafka_start
	kafka_topics
	[[ -z ${KAFKA_SASL_PORT:-} ]] || secure_check

	write_env
	# After write_env, which rewrites the env file: connect.sh appends its URL.
	STACK_DIR=$STACK_DIR bash "$HERE/connect.sh" up 9>&-
	log "up: postgres, mariadb, kafka and kafka connect are running; env in $ENV_FILE"
	echo "OUTBOX_CANARY_PG_DSN=postgres://canary:canary@127.0.0.1:$PG_PORT/canary?sslmode=disable"
	echo "OUTBOX_CANARY_MYSQL_DSN=mysql://canary:canary@127.0.0.1:$MYSQL_PORT/canary"
	echo "OUTBOX_CANARY_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
}

cmd_down() {
	lock
	load_state
	# Companions started beside the stack (deploy/local/connect.sh: the Kafka
	# Connect worker) go first: they use Kafka and PostgreSQL.
	if [[ -x $HERE/connect.sh ]]; then
		STACK_DIR=$STACK_DIR "$HERE/connect.sh" down || log "down: connect.sh down failed, stopping its pid anyway"
	fi
	local f name
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		name=$(basename "$f" .pid)
		case $name in postgres | kafka | mysql) ;; *) stop_server "$name" TERM ;; esac
	done
	kafka_stop
	mysql_stop
	pg_stop
	rm -f "$ENV_FILE"
	rm -rf "$KAFKA_DATA" "$KAFKA_HOME/server.properties" "$KAFKA_HOME/log4j2.xml" "$SECURE_DIR"
	if [[ -n ${PG_DATA:-} ]]; then
		rm -rf "$PG_DATA" "$PG_SOCKET_DIR"
		# the private /tmp directory of choose_pg_dirs, if that was used
		case $PG_DATA in /tmp/outbox-canary-pg.*/pg) rmdir "$(dirname "$PG_DATA")" 2>/dev/null || true ;; esac
	fi
	if [[ -n ${MYSQL_DATA:-} ]]; then
		rm -rf "$MYSQL_DATA" "$MYSQL_RUN_DIR"
		case $MYSQL_DATA in /tmp/outbox-canary-mysql.*/mysql) rmdir "$(dirname "$MYSQL_DATA")" 2>/dev/null || true ;; esac
	fi
	rm -f "$STATE_FILE"
	log "down: stopped; data removed (Kafka jars kept in $KAFKA_LIBS, logs in $LOGS)"
}

cmd_status() {
	load_state
	local rc=0
	if server_alive postgres; then
		echo "postgres: up   127.0.0.1:${PG_PORT:-?} (pid $(<"$PIDS/postgres.pid"))"
	else
		echo "postgres: down"
		rc=1
	fi
	if server_alive kafka; then
		echo "kafka:    up   127.0.0.1:${KAFKA_PORT:-?} (pid $(<"$PIDS/kafka.pid"))"
	else
		echo "kafka:    down"
		rc=1
	fi
	if server_alive mysql; then
		echo "mysql:    up   127.0.0.1:${MYSQL_PORT:-?} (pid $(<"$PIDS/mysql.pid"))"
	else
		echo "mysql:    down"
		rc=1
	fi
	STACK_DIR=$STACK_DIR bash "$HERE/connect.sh" status || rc=1
	[[ -f $ENV_FILE ]] && echo "env:      $ENV_FILE" || echo "env:      missing (run: $0 up)"
	return $rc
}

need_state() {
	load_state
	[[ -n ${PG_PORT:-} ]] || die "no stack in $STACK_DIR (run: $0 up)"
}

main() {
	local cmd=${1:-}
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	env)
		[[ -f $ENV_FILE ]] || die "no env file: the stack is not up (run: $0 up)"
		cat "$ENV_FILE"
		;;
	stop-postgres | start-postgres | restart-postgres | stop-kafka | start-kafka | restart-kafka | stop-mysql | start-mysql | restart-mysql)
		lock
		need_state
		JAVA=$(java_bin)
		case $cmd in
		stop-postgres) pg_stop ;;
		start-postgres) pg_start ;;
		restart-postgres)
			pg_stop
			pg_start
			;;
		stop-kafka) kafka_stop ;;
		start-kafka) kafka_start ;;
		restart-kafka)
			kafka_stop
			kafka_start
			;;
		stop-mysql) mysql_stop ;;
		start-mysql) mysql_start ;;
		restart-mysql)
			mysql_stop
			mysql_start
			;;
		esac
		;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
