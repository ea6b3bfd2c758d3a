#!/usr/bin/env bash
# make demo: the prober on the local stack (already started by `make
# stack-up`), with the four pipelines of examples/outbox-canary.yml, each in
# its own database: "orders" on seed schema A and "payments" on seed schema B,
# each with a reference polling relay, "shipments" on Debezium's outbox
# table, captured from the WAL by Debezium on the stack's Kafka Connect, and
# "invoices" on Debezium's outbox table in MariaDB, captured from the binlog
# by Debezium's MariaDB connector on the same worker. Prints a line per
# canary until Ctrl-C, then a p50/p99 summary per segment. DEMO_SECONDS=300
# stops by itself after 300 s. OUTBOX_CANARY_STACK_ENV names another stack's
# env file (default .stack/env), as for the tests: the demo only adds
# databases, topics and connectors to it, it never stops its servers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[demo] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

STACK_ENV=${OUTBOX_CANARY_STACK_ENV:-.stack/env}
[[ -f $STACK_ENV ]] || die "$STACK_ENV is missing: run 'make stack-up' first"
set -a
# shellcheck disable=SC1090
source "$STACK_ENV"
set +a
[[ -x bin/outbox-canary && -x bin/outbox-relay ]] || die "bin/ is missing the binaries: run 'make build'"

PROBER_ADDR=${DEMO_PROBER_ADDR:-127.0.0.1:9465}
ORDERS_RELAY_ADDR=${DEMO_ORDERS_RELAY_ADDR:-127.0.0.1:9466}
PAYMENTS_RELAY_ADDR=${DEMO_PAYMENTS_RELAY_ADDR:-127.0.0.1:9467}
POLL_INTERVAL=${DEMO_POLL_INTERVAL:-100ms}
LOGS=$OUTBOX_CANARY_STACK_DIR/logs
CANARY_LOG=$LOGS/demo-canaries.log
mkdir -p "$LOGS"

psql_admin() { psql "$OUTBOX_CANARY_PG_ADMIN_DSN" -v ON_ERROR_STOP=1 -qAtX "$@"; }
dsn_for() { echo "${OUTBOX_CANARY_PG_DSN/\/canary\?//$1?}"; }

# prepare_db NAME SCHEMA_FILE: a database with its outbox table, created once.
prepare_db() {
	local db=$1 schema=$2
	if [[ -z $(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$db'") ]]; then
		log "creating database $db with $(basename "$schema")"
		psql_admin -c "CREATE DATABASE $db OWNER canary"
		psql "$(dsn_for "$db")" -v ON_ERROR_STOP=1 -qX -f "$schema"
	fi
}
prepare_db demo_orders deploy/sql/schema_a.sql
prepare_db demo_payments deploy/sql/schema_b.sql
prepare_db demo_shipments deploy/sql/debezium_outbox.sql

# The invoices pipeline's MariaDB database, created once by the stack's
# admin user (canary_admin: the DDL, as the PostgreSQL superuser canary
# does above), with Debezium's outbox table for MySQL and MariaDB. The
# prober's user canary gets just the rows of that table (insert and delete
# the canaries, read the backlog): least privilege, as docs/mysql.md says.
[[ -n ${OUTBOX_CANARY_MYSQL_ADMIN_DSN:-} ]] || die "the stack has no MariaDB (OUTBOX_CANARY_MYSQL_ADMIN_DSN): run 'make stack-up'"
# mysql_admin ARGS...: the mariadb client as the admin user of the stack's
# DSN; the password goes through the environment, not the command line.
mysql_admin() {
	local cred=${OUTBOX_CANARY_MYSQL_ADMIN_DSN#*://}
	cred=${cred%%@*}
	MYSQL_PWD=${cred#*:} mariadb --no-defaults -h "$OUTBOX_CANARY_MYSQL_HOST" -P "$OUTBOX_CANARY_MYSQL_PORT" \
		-u "${cred%%:*}" -N -B "$@"
}
mysql_dsn_for() { echo "${OUTBOX_CANARY_MYSQL_DSN%/*}/$1"; }
mysql_user=${OUTBOX_CANARY_MYSQL_DSN#*://}
mysql_user=${mysql_user%%:*}
if [[ -z $(mysql_admin -e "SHOW DATABASES LIKE 'demo_invoices'") ]]; then
	log "creating MariaDB database demo_invoices with mysql_debezium_outbox.sql"
	mysql_admin -e "CREATE DATABASE demo_invoices"
	mysql_admin demo_invoices <deploy/sql/mysql_debezium_outbox.sql
fi
mysql_admin -e "GRANT SELECT, INSERT, DELETE ON demo_invoices.outbox TO '$mysql_user'@'127.0.0.1'" ||
	die "could not grant $mysql_user the rows of demo_invoices.outbox"

# The stack creates outbox.event.outbox-canary; the other pipelines route
# their canaries (by their aggregate types) to topics of their own, and
# Debezium writes heartbeats to a topic the broker will not create itself.
# Canary topics stamp at the broker (LogAppendTime): the shipments
# pipeline's publish stamp is then the broker's append time, after
# Debezium's queue (docs/cdc.md). An existing topic is given the setting.
kafka_tool() {
	"$OUTBOX_CANARY_JAVA" -Dlog4j2.configurationFile="$OUTBOX_CANARY_KAFKA_TOOLS_LOG4J" \
		-cp "$OUTBOX_CANARY_KAFKA_LIBS/*" "$@" --bootstrap-server "$OUTBOX_CANARY_KAFKA_BROKERS" >/dev/null
}
create_topic() {
	kafka_tool org.apache.kafka.tools.TopicCommand --create --if-not-exists \
		--topic "$1" --partitions "$2" --replication-factor 1 ${3:+--config "$3"}
	[[ -z ${3:-} ]] || kafka_tool org.apache.kafka.tools.ConfigCommand --alter --entity-type topics --entity-name "$1" --add-config "$3"
}
canary_topic=message.timestamp.type=LogAppendTime
create_topic outbox.event.outbox-canary-payments 3 "$canary_topic"
create_topic outbox.event.outbox-canary-shipments 1 "$canary_topic"
create_topic __debezium-heartbeat.demo-shipments 1
create_topic outbox.event.outbox-canary-invoices 1 "$canary_topic"
create_topic __debezium-heartbeat.demo-invoices 1
# The MariaDB connector keeps the tables' structure here: one partition,
# kept forever (it warns otherwise).
kafka_tool org.apache.kafka.tools.TopicCommand --create --if-not-exists --topic schema-history.demo-invoices \
	--partitions 1 --replication-factor 1 --config retention.ms=-1 --config retention.bytes=-1

# The Debezium connector of the shipments pipeline, (re)created through the
# worker's REST API: a standalone worker forgets REST-made connectors when it
# restarts, and PUT is idempotent. Its slot keeps the position across runs.
# It is the recommended configuration (deploy/local/connect/
# outbox-connector.json, explained in docs/cdc.md) with this database's
# connection, topic prefix and slot filled in; `outbox-canary lint` on the
# demo config checks it.
[[ -n ${OUTBOX_CANARY_CONNECT_URL:-} ]] || die "the stack has no Kafka Connect worker (OUTBOX_CANARY_CONNECT_URL): run 'make stack-up'"
shipments_dsn=$(dsn_for demo_shipments)
connector_config=$(sed -e "s|@PG_HOST@|$OUTBOX_CANARY_PG_HOST|g" -e "s|@PG_PORT@|$OUTBOX_CANARY_PG_PORT|g" \
	-e "s|@PG_USER@|canary|g" -e "s|@PG_PASSWORD@|canary|g" -e "s|@PG_DBNAME@|demo_shipments|g" \
	-e "s|@TOPIC_PREFIX@|demo-shipments|g" -e "s|@SLOT@|demo_shipments|g" deploy/local/connect/outbox-connector.json)
if grep -q '@[A-Z_]*@' <<<"$connector_config"; then
	die "deploy/local/connect/outbox-connector.json has a placeholder demo.sh does not fill: $(grep -o '@[A-Z_]*@' <<<"$connector_config" | sort -u | tr '\n' ' ')"
fi
curl -fsS -X PUT -H 'Content-Type: application/json' --data "$connector_config" \
	"$OUTBOX_CANARY_CONNECT_URL/connectors/demo-shipments/config" >/dev/null ||
	die "could not create the Debezium connector at $OUTBOX_CANARY_CONNECT_URL (see $LOGS/connect.log)"
log "debezium: connector demo-shipments captures demo_shipments.public.outbox (status: $OUTBOX_CANARY_CONNECT_URL/connectors/demo-shipments/status)"

# The invoices pipeline's connector: the recommended MariaDB configuration
# (deploy/local/connect/outbox-connector-mariadb.json, docs/mysql.md) with
# the stack's CDC user. Its server id is the demo's own among the server's
# replicas (the tests take ids from 100000 up). Its binlog position is kept
# in the worker's offsets across runs.
connector_config=$(sed -e "s|@MYSQL_HOST@|$OUTBOX_CANARY_MYSQL_HOST|g" -e "s|@MYSQL_PORT@|$OUTBOX_CANARY_MYSQL_PORT|g" \
	-e "s|@MYSQL_USER@|$OUTBOX_CANARY_MYSQL_CDC_USER|g" -e "s|@MYSQL_PASSWORD@|$OUTBOX_CANARY_MYSQL_CDC_PASSWORD|g" \
	-e "s|@MYSQL_DBNAME@|demo_invoices|g" -e "s|@TOPIC_PREFIX@|demo-invoices|g" -e "s|@SERVER_ID@|4242|g" \
	-e "s|@BROKERS@|$OUTBOX_CANARY_KAFKA_BROKERS|g" -e "s|@SCHEMA_HISTORY_TOPIC@|schema-history.demo-invoices|g" \
	deploy/local/connect/outbox-connector-mariadb.json)
if grep -q '@[A-Z_]*@' <<<"$connector_config"; then
	die "deploy/local/connect/outbox-connector-mariadb.json has a placeholder demo.sh does not fill: $(grep -o '@[A-Z_]*@' <<<"$connector_config" | sort -u | tr '\n' ' ')"
fi
curl -fsS -X PUT -H 'Content-Type: application/json' --data "$connector_config" \
	"$OUTBOX_CANARY_CONNECT_URL/connectors/demo-invoices/config" >/dev/null ||
	die "could not create the Debezium MariaDB connector at $OUTBOX_CANARY_CONNECT_URL (see $LOGS/connect.log)"
# The connector is RUNNING before it reads the binlog, and a canary
# committed in between is before its starting position and never published
# (docs/mysql.md): wait for its binlog dump thread, the MariaDB analogue of
# an active replication slot.
log "debezium: connector demo-invoices captures demo_invoices.outbox on MariaDB; waiting for it to read the binlog ..."
for ((i = 0; ; i++)); do
	[[ $(mysql_admin -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '$OUTBOX_CANARY_MYSQL_CDC_USER' AND COMMAND LIKE 'Binlog Dump%'") -gt 0 ]] && break
	((i < ${DEMO_CONNECTOR_WAIT:-120} * 2)) || die "connector demo-invoices does not read the binlog after ${DEMO_CONNECTOR_WAIT:-120}s: $(curl -fsS "$OUTBOX_CANARY_CONNECT_URL/connectors/demo-invoices/status") (see $LOGS/connect.log)"
	sleep 0.5
done
log "debezium: connector demo-invoices reads the binlog (status: $OUTBOX_CANARY_CONNECT_URL/connectors/demo-invoices/status)"
if [[ -n ${OUTBOX_CANARY_CONNECT_METRICS_URL:-} ]]; then
	log "debezium: both connectors' own metrics (behind source, queue, connected: docs/cdc.md) at $OUTBOX_CANARY_CONNECT_METRICS_URL"
fi

export OUTBOX_CANARY_SIGNING_KEY=${OUTBOX_CANARY_SIGNING_KEY:-demo-signing-key-not-for-production}
export OUTBOX_CANARY_PG_DSN_ORDERS; OUTBOX_CANARY_PG_DSN_ORDERS=$(dsn_for demo_orders)
export OUTBOX_CANARY_PG_DSN_PAYMENTS; OUTBOX_CANARY_PG_DSN_PAYMENTS=$(dsn_for demo_payments)
export OUTBOX_CANARY_PG_DSN_SHIPMENTS=$shipments_dsn
export OUTBOX_CANARY_MYSQL_DSN_INVOICES; OUTBOX_CANARY_MYSQL_DSN_INVOICES=$(mysql_dsn_for demo_invoices)

# The example config, with the stack's brokers and the orders database.
CONFIG=$OUTBOX_CANARY_STACK_DIR/demo.yml
sed -e "s/127\.0\.0\.1:9092/$OUTBOX_CANARY_KAFKA_BROKERS/g" \
	-e "s/env: OUTBOX_CANARY_PG_DSN$/env: OUTBOX_CANARY_PG_DSN_ORDERS/" \
	-e "s#connect_url: http://127.0.0.1:8083#connect_url: $OUTBOX_CANARY_CONNECT_URL#" \
	examples/outbox-canary.yml >"$CONFIG"

pids=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	((${#pids[@]})) && kill -TERM "${pids[@]}" 2>/dev/null || true
	((${#pids[@]})) && wait "${pids[@]}" 2>/dev/null || true
	summarize
	log "stopped (the stack keeps running; 'make stack-down' stops it)"
	exit "$rc"
}

# summarize prints p50 and p99 per segment over the canaries of this run,
# read from the lines the prober printed (exact per-canary durations).
summarize() {
	[[ -s $CANARY_LOG ]] || return 0
	log "summary of $(grep -c . "$CANARY_LOG") canaries (p50 / p99 / max per segment):"
	awk '
	function secs(v,   n) {
		if (v ~ /µs$/) { sub(/µs$/, "", v); return v / 1e6 }
		if (v ~ /ms$/) { sub(/ms$/, "", v); return v / 1e3 }
		if (v ~ /ns$/) { sub(/ns$/, "", v); return v / 1e9 }
		if (v ~ /s$/)  { sub(/s$/, "", v); return v + 0 }
		return -1
	}
	{
		for (i = 5; i <= NF; i++) {
			split($i, kv, "=")
			if (kv[2] == "-") continue
			if (kv[2] ~ /\(/) continue  # not judged (e.g. prober_down): no latency of the pipeline
			split(kv[2], vb, "/")
			v = vb[1]
			if (v ~ /^</) continue  # an upper bound (<=), not a latency
			s = secs(v); if (s < 0 && v !~ /^-/) continue
			key = $3 " " kv[1]
			n[key]++; val[key, n[key]] = s
		}
	}
	END {
		for (k in n) {
			m = n[k]
			for (i = 1; i <= m; i++) a[i] = val[k, i]
			for (i = 2; i <= m; i++) { x = a[i]; j = i - 1; while (j > 0 && a[j] > x) { a[j + 1] = a[j]; j-- } a[j + 1] = x }
			p50 = a[int((m - 1) * 0.50) + 1]; p99 = a[int((m - 1) * 0.99) + 1]
			printf "  %-32s n=%-4d p50 %8.2fms  p99 %8.2fms  max %8.2fms\n", k, m, p50 * 1e3, p99 * 1e3, a[m] * 1e3
		}
	}' "$CANARY_LOG" | sort >&2
}
trap cleanup EXIT INT TERM

start_relay() {
	local name=$1 db=$2 schema=$3 addr=$4
	OUTBOX_RELAY_DSN=$(dsn_for "$db") bin/outbox-relay --brokers "$OUTBOX_CANARY_KAFKA_BROKERS" \
		--schema "$schema" --poll-interval "$POLL_INTERVAL" --admin.listen-address "$addr" \
		>>"$LOGS/relay-$name.log" 2>&1 &
	pids+=($!)
	log "relay $name: seed schema ${schema^^}, polling every $POLL_INTERVAL; faults at http://$addr/admin/state (log $LOGS/relay-$name.log)"
}
start_relay orders demo_orders a "$ORDERS_RELAY_ADDR"
start_relay payments demo_payments b "$PAYMENTS_RELAY_ADDR"

bin/outbox-canary run --config.file "$CONFIG" --web.listen-address "$PROBER_ADDR" \
	--print-canaries --log.level warn >"$CANARY_LOG" 2>>"$LOGS/prober.log" &
pids+=($!)
tail -n +1 -f "$CANARY_LOG" &
pids+=($!)

log "prober: status http://$PROBER_ADDR/  metrics http://$PROBER_ADDR/metrics  (log $LOGS/prober.log)"
log "try:   curl -XPOST http://$ORDERS_RELAY_ADDR/admin/pause      (then /admin/resume)"
log "       curl -XPOST 'http://$ORDERS_RELAY_ADDR/admin/delay?d=700ms'"
log "       curl -XPOST 'http://$PAYMENTS_RELAY_ADDR/admin/duplicate?n=3'"
log "one line per canary: time, verdict, pipeline, seq, then each segment as measured/budget. Ctrl-C stops."

if [[ -n ${DEMO_SECONDS:-} ]]; then
	sleep "$DEMO_SECONDS"
	exit 0
fi
# Until Ctrl-C, or until the prober exits on its own (its log says why).
wait "${pids[2]}" || die "the prober exited: see $LOGS/prober.log"
