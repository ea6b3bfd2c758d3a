package lint

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

// binlog reports whether the connector is Debezium's MariaDB or MySQL
// connector, which read the binlog.
func (info ConnectorInfo) binlog() bool {
	switch strings.TrimSpace(info.Config["connector.class"]) {
	case mariadbConnector, mysqlConnector:
		return true
	}
	return false
}

// binlogConnectorChecks are the connector checks of Debezium's MariaDB and
// MySQL connectors (deploy/local/connect/outbox-connector-mariadb.json is
// the recommended configuration): those they share with the PostgreSQL
// connector's (converter, snapshot, router, canary topic, tombstones), and
// the binlog's own: a replica server id of its own, a schema history topic
// of its own, the captured database and table, heartbeats.
func binlogConnectorChecks(p *config.Pipeline, info ConnectorInfo) []Finding {
	findings := []Finding{
		converter(info),
		serverID(info),
		schemaHistory(info),
		snapshotMode(info),
		capturedBinlogTables(p, info),
		router(p, info),
		routerScope(p, info),
		canaryTopic(p, info),
	}
	if p.Relay.PublishedStamp == config.PublishedFromRecordTimestamp {
		findings = append(findings, recordTimestamp(info))
	}
	return append(findings, binlogHeartbeat(info), tasksMax(info, "binlog connector", "one binlog stream", "the binlog"), tombstones(info))
}

// sameBinlogServer reports whether another connector reads the binlog of
// the same server (by the host and port it was given).
func sameBinlogServer(info ConnectorInfo, other map[string]string) bool {
	o := ConnectorInfo{Config: other}
	port := func(c map[string]string) string { return settingOr(c["database.port"], "3306") }
	return o.binlog() && strings.EqualFold(other["database.hostname"], info.Config["database.hostname"]) && port(other) == port(info.Config)
}

// binlogSharers are the other connectors on the same server whose setting
// key equals this connector's.
func binlogSharers(info ConnectorInfo, key string) []string {
	var names []string
	mine := strings.TrimSpace(info.Config[key])
	for name, other := range info.Others {
		if sameBinlogServer(info, other) && strings.TrimSpace(other[key]) == mine {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// serverID: the connector joins the server as a replica under
// database.server.id. A second connection with the same id makes the
// server drop the first (the two connectors take turns and each misses
// events), and the server's own id is refused.
func serverID(info ConnectorInfo) Finding {
	f := Finding{Check: CheckServerID}
	id := strings.TrimSpace(info.Config["database.server.id"])
	const fix = "database.server.id=<a number of its own among the server's replicas and connectors, not the server's server_id>"
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		f.Level, f.Fix = Warn, fix
		f.Message = fmt.Sprintf("database.server.id %q is not a number: Debezium picks one of its own, which another connector or replica may hold", id)
		return f
	}
	if info.DB != nil && info.DB.ServerID != 0 && strconv.FormatInt(info.DB.ServerID, 10) == id {
		f.Level, f.Fix = Fail, fix
		f.Message = fmt.Sprintf("database.server.id %s is the server's own server_id: the server refuses the connector's binlog connection", id)
		return f
	}
	if others := binlogSharers(info, "database.server.id"); len(others) > 0 {
		f.Level, f.Fix = Fail, fix
		f.Message = fmt.Sprintf("database.server.id %s is also that of %s on the same server: a second binlog connection with one id makes the server drop the first, so the connectors take turns and miss events", id, strings.Join(others, ", "))
		return f
	}
	f.Level, f.Message = OK, fmt.Sprintf("database.server.id %s, of its own on this server", id)
	return f
}

// schemaHistory: the connector keeps the captured tables' structure in a
// topic of its own and cannot decode the binlog without it.
func schemaHistory(info ConnectorInfo) Finding {
	f := Finding{Check: CheckSchemaHistory}
	topic := strings.TrimSpace(info.Config["schema.history.internal.kafka.topic"])
	const fix = "schema.history.internal.kafka.topic=schema-history.<topic.prefix> and schema.history.internal.kafka.bootstrap.servers, the topic with one partition and retention.ms=-1"
	if topic == "" || strings.TrimSpace(info.Config["schema.history.internal.kafka.bootstrap.servers"]) == "" {
		f.Level, f.Fix = Fail, fix
		f.Message = "no schema.history.internal.kafka.topic or bootstrap.servers: the connector does not start without a schema history"
		return f
	}
	var others []string
	for name, other := range info.Others {
		if strings.TrimSpace(other["schema.history.internal.kafka.topic"]) == topic {
			others = append(others, name)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		f.Level, f.Fix = Fail, fix
		f.Message = fmt.Sprintf("schema history topic %s is shared with %s: each connector rewrites the other's history, and a restart decodes the binlog with the wrong tables' structure", topic, strings.Join(others, ", "))
		return f
	}
	f.Level, f.Message = OK, fmt.Sprintf("schema history in %s, of its own", topic)
	return f
}

// capturedBinlogTables: the outbox table must be among what the connector
// captures, by database.include/exclude.list and
// table.include/exclude.list (database.table).
func capturedBinlogTables(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckCapture}
	table := info.qualifiedTable(p)
	database, _, _ := strings.Cut(table, ".")
	if failed, ok := captureLists(info, table, []captureList{
		{"database.include.list", database, true}, {"database.exclude.list", database, false},
		{"table.include.list", table, true}, {"table.exclude.list", table, false},
	}); !ok {
		return failed
	}
	f.Level = OK
	if info.Config["table.include.list"] == "" {
		f.Message = fmt.Sprintf("no table.include.list: every table the connector sees is captured, %s among them", table)
	} else {
		f.Message = fmt.Sprintf("table.include.list %q captures %s", info.Config["table.include.list"], table)
	}
	return f
}

// binlogHeartbeat: the connector commits an offset only with a record.
// While nothing it captures changes and other databases write the
// binlog, its committed file ages towards expiry, which may purge it
// (OutboxBinlogUnreadFileAtRisk); a heartbeat commits the position it has
// read.
func binlogHeartbeat(info ConnectorInfo) Finding {
	f := Finding{Check: CheckHeartbeat}
	ms, err := strconv.ParseInt(info.setting("heartbeat.interval.ms"), 10, 64)
	topic := info.heartbeatTopic()
	if err != nil || ms <= 0 {
		f.Level = Warn
		f.Message = "no heartbeat: while nothing the connector captures changes, it commits no position, and the binlog file it would resume from ages towards binlog expiry; canaries write the outbox only while the prober runs"
		f.Fix = "heartbeat.interval.ms=10000 (and create the topic " + topic + ")"
		return f
	}
	if exists, known := info.Topics[topic]; known && !exists {
		f.Level = Fail
		f.Message = fmt.Sprintf("heartbeats every %d ms go to %s, which does not exist: the task fails at its first heartbeat", ms, topic)
		f.Fix = fmt.Sprintf("create %s (kafka-topics.sh --create --topic %s --partitions 1)", topic, topic)
		return f
	}
	f.Level, f.Message = OK, fmt.Sprintf("heartbeats every %d ms to %s: the committed position follows the binlog while the outbox is quiet", ms, topic)
	return f
}
