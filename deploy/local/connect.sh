#!/usr/bin/env bash
# Kafka Connect (standalone) with the Debezium 3.6.1 PostgreSQL connector and
# Debezium's MariaDB connector (3.5.0, the newest on Maven Central: see
# docs/mysql.md), for the CDC path of the local test stack: a 4.3.0 worker, the Kafka that
# Debezium 3.6.1 is built against (it fails on 4.4.0, see connect/pom.xml),
# talking to the stack's 4.4.0 broker. It runs beside the
# PostgreSQL and Kafka of deploy/local/stack.sh, which must be up first: the
# brokers and Java come from $STACK_DIR/env. Jars, offsets and the rendered
# worker config live under $STACK_DIR/connect; the log is
# $STACK_DIR/logs/connect.log.
#
# The worker runs the Prometheus JMX exporter's Java agent (1.0.1, from Maven
# Central, see connect/jmx-exporter/pom.xml) with connect/jmx-exporter.yml:
# Debezium's streaming metrics (behind source, queue capacity, connected,
# events seen) on a port of their own, whose scrape URL goes into the env
# file as OUTBOX_CANARY_CONNECT_METRICS_URL.
#
# The worker starts with no connector: tests create one per test database
# through the REST API (PUT /connectors/<name>/config) and delete it after.
#
# Usage: deploy/local/connect.sh COMMAND
#   up        fetch the jars if missing, start the worker if not running (idempotent),
#             and add OUTBOX_CANARY_CONNECT_URL and OUTBOX_CANARY_CONNECT_METRICS_URL
#             to $STACK_DIR/env
#   down      stop the worker, delete its offsets and config (keeps the jars)
#   stop | start | restart    keep offsets and port. A standalone worker forgets
#             connectors created through REST: PUT them again after start, and
#             they resume from their stored offsets
#   status    print up/down (exit 0 only when the REST API answers)
#
# Environment: STACK_DIR, CONNECT_WAIT (s, default 120), STOP_WAIT (s, default
# 60), CONNECT_HEAP (default -Xms128m -Xmx512m), CONNECT_PORT_BASE (18083):
# the first REST port tried; the first metrics port tried is the one after it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STACK_DIR=${STACK_DIR:-$REPO/.stack}
CONNECT_WAIT=${CONNECT_WAIT:-120}
STOP_WAIT=${STOP_WAIT:-60}
CONNECT_HEAP=${CONNECT_HEAP:--Xms128m -Xmx512m}
CONNECT_PORT_BASE=${CONNECT_PORT_BASE:-18083}
DEBEZIUM_CONNECTOR=io.debezium.connector.postgresql.PostgresConnector
DEBEZIUM_MARIADB_CONNECTOR=io.debezium.connector.mariadb.MariaDbConnector

ENV_FILE=$STACK_DIR/env
PIDS=$STACK_DIR/pids
LOGS=$STACK_DIR/logs
CONNECT_HOME=$STACK_DIR/connect
STATE_FILE=$CONNECT_HOME/state # the REST and metrics ports chosen at first start, reused on restart
CONNECT_LIBS=$CONNECT_HOME/libs
PLUGIN_PATH=$CONNECT_HOME/plugins
DEBEZIUM_DIR=$PLUGIN_PATH/debezium-postgres
DEBEZIUM_MARIADB_DIR=$PLUGIN_PATH/debezium-mariadb
OFFSETS=$CONNECT_HOME/offsets.dat
JMX_EXPORTER_DIR=$CONNECT_HOME/jmx-exporter
JMX_EXPORTER_CONFIG=$HERE/connect/jmx-exporter.yml

log() { printf '[connect] %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# ---------------------------------------------------------------- helpers

# running, pid_alive, stop_pid, port_busy, port_bound, free_port,
# start_java, await_ready, tail_logs and take_lock, shared with stack.sh.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

# connect_alive: $PIDS/connect.pid names a live process that is still our
# worker (a pid file that survived a reboot may name another process).
connect_alive() { pid_alive connect ConnectStandalone; }

# env_get KEY: the value of KEY in the stack's env file.
env_get() { sed -n "s/^$1=//p" "$ENV_FILE" | tail -n 1; }

load_stack() {
	[[ -f $ENV_FILE ]] || die "no $ENV_FILE: the stack is not up (run: deploy/local/stack.sh up)"
	BROKERS=$(env_get OUTBOX_CANARY_KAFKA_BROKERS)
	JAVA=$(env_get OUTBOX_CANARY_JAVA)
	[[ -n $BROKERS && -n $JAVA ]] || die "$ENV_FILE lacks OUTBOX_CANARY_KAFKA_BROKERS or OUTBOX_CANARY_JAVA"
	load_state
}

# load_state: CONNECT_PORT (and CONNECT_METRICS_PORT, absent from a state
# written before the JMX exporter joined), if a worker was set up before.
load_state() {
	if [[ -f $STATE_FILE ]]; then
		# shellcheck disable=SC1090
		source "$STATE_FILE"
	fi
}

url() { echo "http://127.0.0.1:$CONNECT_PORT"; }
metrics_url() { echo "http://127.0.0.1:$CONNECT_METRICS_PORT/metrics"; }

# jmx_agent_jar: the exporter's agent jar that fetch copied.
jmx_agent_jar() {
	local jars=("$JMX_EXPORTER_DIR"/jmx_prometheus_javaagent-*.jar)
	[[ -f ${jars[0]} ]] || die "no jmx_prometheus_javaagent jar in $JMX_EXPORTER_DIR (run: $0 up)"
	echo "${jars[0]}"
}

# has_agent: the running worker was started with the exporter on the port
# of the state file (a worker started before the exporter joined the stack
# has neither).
has_agent() {
	tr '\0' ' ' <"/proc/$(<"$PIDS/connect.pid")/cmdline" 2>/dev/null |
		grep -q -- "jmx_prometheus_javaagent-[^ ]*=127.0.0.1:$CONNECT_METRICS_PORT:"
}

# rest PATH: GET a path of the REST API, quickly; fails when it does not answer 2xx.
rest() { curl -fsS --max-time 2 "$(url)$1" 2>/dev/null; }

# ---------------------------------------------------------------- jars

# fetch DIR POM: copy the runtime dependencies of POM into DIR with Maven,
# unless DIR was completed from the same POM before (~/.m2 makes a re-fetch
# after `rm -rf` quick anyway).
fetch() {
	local dir=$1 pom=$2 stamp
	stamp=$(sha256sum "$pom" | cut -c1-16)
	if [[ -f $dir/.complete && $(<"$dir/.complete") == "$stamp" ]]; then
		log "jars already in $dir"
		return
	fi
	log "fetching $(basename "$(dirname "$pom")")/$(basename "$pom") jars with Maven into $dir ..."
	local start=$SECONDS
	rm -rf "$dir"
	mkdir -p "$dir"
	if ! mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$dir" >"$LOGS/connect-maven.log" 2>&1; then
		tail_logs "$LOGS/connect-maven.log"
		die "mvn dependency:copy-dependencies -f $pom failed"
	fi
	echo "$stamp" >"$dir/.complete"
	log "$(find "$dir" -name '*.jar' | wc -l) jars in $((SECONDS - start))s"
}

# ---------------------------------------------------------------- worker

connect_start() {
	if connect_alive; then
		log "already running on $(url)"
	else
		if port_busy "$CONNECT_PORT"; then
			die "port $CONNECT_PORT is taken by another process (run: $0 down; $0 up)"
		fi
		# Rendered at every start, so a changed template or a Kafka that
		# moved to another port applies on restart.
		sed -e "s|@BROKERS@|$BROKERS|g" -e "s|@OFFSETS@|$OFFSETS|g" -e "s|@PORT@|$CONNECT_PORT|g" \
			-e "s|@PLUGIN_PATH@|$PLUGIN_PATH|g" "$HERE/connect/worker.properties.in" >"$CONNECT_HOME/worker.properties"
		sed -e "s|@LOG_FILE@|$LOGS/connect.log|g" "$HERE/connect/log4j2.xml.in" >"$CONNECT_HOME/log4j2.xml"
		if port_busy "$CONNECT_METRICS_PORT"; then
			die "metrics port $CONNECT_METRICS_PORT is taken by another process (run: $0 down; $0 up)"
		fi
		local agent
		agent=$(jmx_agent_jar)
		log "starting Kafka Connect standalone on $(url) (Kafka $BROKERS) with $("$JAVA" -version 2>&1 | head -n1) ..."
		log "with the JMX exporter agent $(basename "$agent") serving Debezium's metrics on $(metrics_url) ($JMX_EXPORTER_CONFIG)"
		start_java connect "$CONNECT_HEAP" "$CONNECT_HOME/log4j2.xml" "$CONNECT_LIBS/*" \
			org.apache.kafka.connect.cli.ConnectStandalone "$CONNECT_HOME/worker.properties" \
			"-javaagent:$agent=127.0.0.1:$CONNECT_METRICS_PORT:$JMX_EXPORTER_CONFIG"
	fi
	# Wait even when it was already running: it may still be starting.
	await_ready connect "$CONNECT_WAIT" 0.5 "" connect_ready "$LOGS/connect.log" "$LOGS/connect.stdout.log"
	log "REST API: $(rest /)"
	log "metrics: $(metrics_url) answers ($(curl -fsS --max-time 5 "$(metrics_url)" | grep -c '^debezium_') Debezium series now: one set per running connector)"
}

# connect_ready: the REST API answers GET /. The worker registers its REST
# resources only after its herder has started, so a PUT of a connector works
# from then on. Dies, here rather than in every test, when the worker runs
# without the Debezium plugin.
connect_ready() {
	rest / >/dev/null || return 1
	curl -fsS --max-time 2 "$(metrics_url)" >/dev/null 2>&1 || return 1
	local plugins c
	plugins=$(rest /connector-plugins)
	for c in "$DEBEZIUM_CONNECTOR" "$DEBEZIUM_MARIADB_CONNECTOR"; do
		if ! grep -q "$c" <<<"$plugins"; then
			tail_logs "$LOGS/connect.log"
			die "the worker runs but does not list $c (plugin.path $PLUGIN_PATH; a worker started before the plugin was added: $0 restart)"
		fi
	done
}

# connect_stop: SIGTERM (the worker stops its connectors and flushes their
# offsets), wait up to STOP_WAIT seconds, then SIGKILL (see stop_pid in
# lib.sh). Only ever signals the pid we recorded.
connect_stop() {
	stop_pid connect ConnectStandalone TERM ""
	if [[ -z $REPLY ]]; then
		log "not running"
	else
		log "stopped after ${REPLY}s"
	fi
}

# write_env adds (or replaces) the worker's URLs in the stack's env file,
# atomically, keeping every line that stack.sh wrote.
write_env() {
	local tmp=$ENV_FILE.connect.tmp
	grep -v -e '^OUTBOX_CANARY_CONNECT_URL=' -e '^OUTBOX_CANARY_CONNECT_METRICS_URL=' "$ENV_FILE" >"$tmp" || true
	echo "OUTBOX_CANARY_CONNECT_URL=$(url)" >>"$tmp"
	echo "OUTBOX_CANARY_CONNECT_METRICS_URL=$(metrics_url)" >>"$tmp"
	mv "$tmp" "$ENV_FILE"
}

drop_env() {
	[[ -f $ENV_FILE ]] || return 0
	local tmp=$ENV_FILE.connect.tmp
	grep -v -e '^OUTBOX_CANARY_CONNECT_URL=' -e '^OUTBOX_CANARY_CONNECT_METRICS_URL=' "$ENV_FILE" >"$tmp" || true
	mv "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------- commands

# lock: one connect.sh at a time. A lock file of our own, not stack.sh's:
# stack.sh may call us while it holds its lock.
lock() {
	mkdir -p "$CONNECT_HOME" "$PIDS" "$LOGS"
	take_lock 8 "$CONNECT_HOME/.lock" connect.sh
}

cmd_up() {
	lock
	command -v curl >/dev/null || die "curl: not found (apt-get install curl): the REST API is probed with it"
	load_stack
	fetch "$CONNECT_LIBS" "$HERE/connect/pom.xml"
	fetch "$DEBEZIUM_DIR" "$HERE/connect/debezium-postgres/pom.xml"
	fetch "$DEBEZIUM_MARIADB_DIR" "$HERE/connect/debezium-mariadb/pom.xml"
	fetch "$JMX_EXPORTER_DIR" "$HERE/connect/jmx-exporter/pom.xml"
	# A worker started before the MariaDB plugin joined the stack scans its
	# plugin.path only at start: restart it, once, to load it. Connectors
	# created over REST are forgotten then, as on any restart.
	if connect_alive && rest / >/dev/null && ! rest /connector-plugins | grep -q "$DEBEZIUM_MARIADB_CONNECTOR"; then
		log "the running worker predates the MariaDB plugin: restarting it to load $DEBEZIUM_MARIADB_CONNECTOR"
		connect_stop
	fi
	if [[ -z ${CONNECT_PORT:-} ]]; then
		free_port "$CONNECT_PORT_BASE" port_bound && CONNECT_PORT=$REPLY
		printf 'CONNECT_PORT=%s\n' "$CONNECT_PORT" >"$STATE_FILE"
		: >"$LOGS/connect.log"
		: >"$LOGS/connect.stdout.log"
	fi
	# The exporter joined the stack later: a state that predates it gets
	# its port now, and a worker running without the agent is restarted,
	# once, to load it (connectors created over REST are forgotten then).
	if [[ -z ${CONNECT_METRICS_PORT:-} ]]; then
		PICKED+="$CONNECT_PORT "
		free_port $((CONNECT_PORT_BASE + 1)) port_bound && CONNECT_METRICS_PORT=$REPLY
		printf 'CONNECT_METRICS_PORT=%s\n' "$CONNECT_METRICS_PORT" >>"$STATE_FILE"
	fi
	if connect_alive && ! has_agent; then
		log "the running worker predates the JMX exporter agent: restarting it to load the agent"
		connect_stop
	fi
	connect_start
	write_env
	log "up; OUTBOX_CANARY_CONNECT_URL=$(url) and OUTBOX_CANARY_CONNECT_METRICS_URL=$(metrics_url) added to $ENV_FILE"
	echo "OUTBOX_CANARY_CONNECT_URL=$(url)"
	echo "OUTBOX_CANARY_CONNECT_METRICS_URL=$(metrics_url)"
}

cmd_down() {
	lock
	load_state
	connect_stop
	drop_env
	# The offsets name LSNs of a database that stack.sh down deletes.
	rm -f "$OFFSETS" "$STATE_FILE" "$CONNECT_HOME/worker.properties" "$CONNECT_HOME/log4j2.xml"
	log "down: stopped; offsets removed (jars kept in $CONNECT_HOME, logs in $LOGS)"
}

cmd_status() {
	load_state
	if connect_alive && [[ -n ${CONNECT_PORT:-} ]] && rest / >/dev/null; then
		echo "connect:  up   $(url) (pid $(<"$PIDS/connect.pid"))"
		if [[ -n ${CONNECT_METRICS_PORT:-} ]] && curl -fsS --max-time 2 "$(metrics_url)" >/dev/null 2>&1; then
			echo "metrics:  up   $(metrics_url) (JMX exporter: Debezium's metrics)"
		else
			echo "metrics:  down (the worker runs without the JMX exporter: $0 up restarts it with it)"
		fi
		return 0
	fi
	echo "connect:  down"
	return 1
}

main() {
	local cmd=${1:-}
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	stop | start | restart)
		lock
		load_stack
		[[ -n ${CONNECT_PORT:-} && -d $CONNECT_LIBS ]] || die "no worker in $CONNECT_HOME (run: $0 up)"
		[[ -n ${CONNECT_METRICS_PORT:-} ]] || die "the worker in $CONNECT_HOME predates the JMX exporter agent (run: $0 up)"
		case $cmd in
		stop) connect_stop ;;
		start) connect_start ;;
		restart)
			connect_stop
			connect_start
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
