package lint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/explain"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// Names of the connector checks, in the order Connector reports them.
const (
	CheckConnector       = "connector"
	CheckConverter       = "converter"
	CheckPlugin          = "plugin.name"
	CheckSlot            = "slot.name"
	CheckPublication     = "publication"
	CheckPublicationMode = "publication mode"
	CheckSnapshot        = "snapshot.mode"
	CheckCapture         = "captured tables"
	CheckRouter          = "event router"
	CheckRouterScope     = "router scope"
	CheckCanaryTopic     = "canary topic"
	CheckRecordTimestamp = "record timestamp"
	CheckHeartbeat       = "heartbeat"
	CheckTasks           = "tasks.max"
	CheckTombstones      = "tombstones"
	CheckServerID        = "server id"
	CheckSchemaHistory   = "schema history"
)

// Class names the connector checks recognise.
const (
	postgresConnector = "io.debezium.connector.postgresql.PostgresConnector"
	mariadbConnector  = "io.debezium.connector.mariadb.MariaDbConnector"
	mysqlConnector    = "io.debezium.connector.mysql.MySqlConnector"
	eventRouter       = "io.debezium.transforms.outbox.EventRouter"
	jsonConverter     = "org.apache.kafka.connect.json.JsonConverter"
	stringConverter   = "org.apache.kafka.connect.storage.StringConverter"
	byteArrayConv     = "org.apache.kafka.connect.converters.ByteArrayConverter"
	topicNameMatches  = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
)

// debeziumDefaults are the settings of Debezium 3.x's PostgreSQL connector
// and outbox EventRouter that the checks read, as Debezium applies them
// when the configuration leaves them out. Router settings are keyed
// without their "transforms.<alias>." prefix.
var debeziumDefaults = map[string]string{
	"plugin.name":                 "decoderbufs",
	"slot.name":                   "debezium",
	"publication.name":            "dbz_publication",
	"publication.autocreate.mode": "all_tables",
	"snapshot.mode":               "initial",
	"tasks.max":                   "1",
	"heartbeat.interval.ms":       "0",
	"topic.heartbeat.prefix":      "__debezium-heartbeat",
	"database.port":               "5432",

	"route.by.field":                   "aggregatetype",
	"route.topic.regex":                "(?<routedByValue>.*)",
	"route.topic.replacement":          "outbox.event.${routedByValue}",
	"table.field.event.payload":        "payload",
	"table.expand.json.payload":        "false",
	"route.tombstone.on.empty.payload": "false",
}

// recommendedHeartbeatQuery is the heartbeat.action.query of the
// recommended configuration: a logical decoding message written in the
// captured database, so the slot has something to confirm even when
// nothing there changes, without a table to write to.
const recommendedHeartbeatQuery = "SELECT pg_logical_emit_message(false, 'outbox-canary-heartbeat', now()::varchar)"

// ConnectorInfo is what lint reads about a pipeline's connector; the checks
// are pure functions of it and the pipeline.
type ConnectorInfo struct {
	Name   string
	Config map[string]string
	// Status is the connector's state; nil when it could not be read
	// (StatusError says why).
	Status      *connect.Status
	StatusError error
	// Others are the other connectors of the Connect cluster by name; nil
	// when they could not be listed.
	Others map[string]map[string]string
	// DB holds what the pipeline's database says; nil when it was not read.
	DB *ConnectorDB
	// Topics says, for each topic the connector writes to, whether it
	// exists; nil when Kafka was not asked (TopicsError says why).
	Topics      map[string]bool
	TopicsError error
}

// ConnectorDB is what the pipeline's database says about the connector's
// slot and publication.
type ConnectorDB struct {
	Database string // current_database(); MySQL: DATABASE()
	// ServerID is a MySQL server's @@server_id, which no connector's
	// database.server.id may repeat; 0 on PostgreSQL.
	ServerID int64
	// SlotDatabase, SlotPlugin: the replication slot named by slot.name,
	// "" when there is none.
	SlotDatabase string
	SlotPlugin   string
	// PublicationExists, PublicationAllTables, PublicationTables: the
	// publication named by publication.name in this database.
	PublicationExists    bool
	PublicationAllTables bool
	PublicationTables    []string // schema.table
}

// ConnectorSources are the connections InspectConnector reads through. A
// nil DB or Kafka leaves those facts unread (and their checks say so).
type ConnectorSources struct {
	HTTP *http.Client
	DB   postgres.Querier
	// MySQL is the database of a pipeline on MySQL or MariaDB, in DB's
	// place.
	MySQL *mysql.DB
	Kafka *kafka.Client
}

// ConnectorConfigured reports whether the pipeline names a connector to
// check: a cdc relay with watch.connect_url and watch.connector.
func ConnectorConfigured(p *config.Pipeline) bool {
	return p.Relay.Kind == config.RelayCDC && p.Watch.ConnectURL != "" && p.Watch.Connector != ""
}

// Connector reads the pipeline's connector through the Kafka Connect REST
// API (and its slot, publication and topics through the database and
// Kafka, when given) and runs every connector check. A connector that
// cannot be read is a FAIL finding; nothing is returned for a pipeline
// without a connector to check (ConnectorConfigured).
func Connector(ctx context.Context, p *config.Pipeline, src ConnectorSources) []Finding {
	if !ConnectorConfigured(p) {
		return nil
	}
	info, err := InspectConnector(ctx, p, src)
	if err != nil {
		fix := "check that Kafka Connect answers at watch.connect_url and that watch.connector names the connector (GET " +
			strings.TrimRight(p.Watch.ConnectURL, "/") + "/connectors lists them)"
		return []Finding{{Check: CheckConnector, Level: Fail, Message: explain.OneLine(err.Error()), Fix: fix}}
	}
	return ConnectorChecks(p, info)
}

// InspectConnector reads the connector's configuration and status, the
// other connectors of the cluster, and, through src.DB and src.Kafka when
// set, its slot, publication and topics. The error is for a configuration
// that could not be read; anything else missing is recorded in the info.
func InspectConnector(ctx context.Context, p *config.Pipeline, src ConnectorSources) (ConnectorInfo, error) {
	client := src.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	base, name := p.Watch.ConnectURL, p.Watch.Connector
	cfg, err := connect.QueryConfig(ctx, client, base, name)
	if err != nil {
		return ConnectorInfo{}, err
	}
	info := ConnectorInfo{Name: name, Config: cfg}
	if st, err := connect.QueryStatus(ctx, client, base, name); err != nil {
		info.StatusError = err
	} else {
		info.Status = &st
	}
	if all, err := connect.QueryConfigs(ctx, client, base); err == nil {
		delete(all, name)
		info.Others = all
	}
	if src.DB != nil {
		db, err := inspectConnectorDB(ctx, src.DB, info.setting("slot.name"), info.setting("publication.name"))
		if err == nil {
			info.DB = &db
		}
	}
	if src.MySQL != nil {
		if srv, err := src.MySQL.Server(ctx); err == nil {
			info.DB = &ConnectorDB{Database: srv.Database, ServerID: srv.ServerID}
		}
	}
	topics := info.writtenTopics(p)
	if src.Kafka == nil {
		info.TopicsError = errors.New("Kafka not asked")
	} else if len(topics) > 0 {
		info.Topics, info.TopicsError = topicsExist(ctx, src.Kafka, topics)
	}
	return info, nil
}

func inspectConnectorDB(ctx context.Context, q postgres.Querier, slot, publication string) (ConnectorDB, error) {
	var db ConnectorDB
	if err := q.QueryRow(ctx, `SELECT current_database()`).Scan(&db.Database); err != nil {
		return db, fmt.Errorf("current database: %w", err)
	}
	// Slots are the server's, not the database's: one named like ours may
	// belong to another database.
	if err := q.QueryRow(ctx, `SELECT COALESCE(max(database), ''), COALESCE(max(plugin), '') FROM pg_replication_slots WHERE slot_name = $1`,
		slot).Scan(&db.SlotDatabase, &db.SlotPlugin); err != nil {
		return db, fmt.Errorf("replication slot %s: %w", slot, err)
	}
	if err := q.QueryRow(ctx, `SELECT count(*) > 0, COALESCE(bool_or(puballtables), false) FROM pg_publication WHERE pubname = $1`,
		publication).Scan(&db.PublicationExists, &db.PublicationAllTables); err != nil {
		return db, fmt.Errorf("publication %s: %w", publication, err)
	}
	rows, err := q.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1`, publication)
	if err != nil {
		return db, fmt.Errorf("tables of publication %s: %w", publication, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return db, err
		}
		db.PublicationTables = append(db.PublicationTables, t)
	}
	return db, rows.Err()
}

func topicsExist(ctx context.Context, client *kafka.Client, topics []string) (map[string]bool, error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("topics %v: %w", topics, err)
	}
	exist := make(map[string]bool, len(topics))
	for _, t := range topics {
		exist[t] = false // a broker may leave an unknown topic out of its answer
	}
	for _, t := range meta.Topics {
		exist[t.Name] = t.Error == nil && len(t.Partitions) > 0
	}
	return exist, nil
}

// setting is a connector setting as Debezium applies it: the configured
// value, else Debezium's default.
func (info ConnectorInfo) setting(key string) string {
	if v, ok := info.Config[key]; ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return debeziumDefaults[key]
}

// router returns the alias of the outbox EventRouter in the transform
// chain, "" when there is none.
func (info ConnectorInfo) router() string {
	for _, alias := range splitList(info.Config["transforms"]) {
		if strings.TrimSpace(info.Config["transforms."+alias+".type"]) == eventRouter {
			return alias
		}
	}
	return ""
}

// routerSetting is a setting of the router transform with Debezium's
// default.
func (info ConnectorInfo) routerSetting(alias, key string) string {
	if v, ok := info.Config["transforms."+alias+"."+key]; ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return debeziumDefaults[key]
}

// heartbeatTopic is where Debezium writes the connector's heartbeats.
func (info ConnectorInfo) heartbeatTopic() string {
	return info.setting("topic.heartbeat.prefix") + "." + info.setting("topic.prefix")
}

// writtenTopics are the topics whose existence the checks need: the one
// canaries are routed to and, with heartbeats, the heartbeat topic.
func (info ConnectorInfo) writtenTopics(p *config.Pipeline) []string {
	var topics []string
	if alias := info.router(); alias != "" {
		if t, err := routedTopic(info, alias, p.Canary.AggregateType); err == nil {
			topics = append(topics, t)
		}
	}
	if ms, _ := strconv.ParseInt(info.setting("heartbeat.interval.ms"), 10, 64); ms > 0 {
		topics = append(topics, info.heartbeatTopic())
	}
	return topics
}

// routedTopic is the topic the router sends a row with the given route
// value to: Kafka's RegexRouter applies route.topic.regex to the whole
// value and, when it matches, route.topic.replacement; otherwise the
// value itself is the topic.
func routedTopic(info ConnectorInfo, alias, value string) (string, error) {
	expr := info.routerSetting(alias, "route.topic.regex")
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return "", fmt.Errorf("transforms.%s.route.topic.regex %q: %w", alias, expr, err)
	}
	m := re.FindStringSubmatchIndex(value)
	if m == nil {
		return value, nil
	}
	return string(re.ExpandString(nil, info.routerSetting(alias, "route.topic.replacement"), value, m)), nil
}

// ConnectorChecks runs every connector check on an inspected connector:
// Debezium's PostgreSQL connector's, or its MariaDB or MySQL connector's
// (binlogConnectorChecks). Of another connector only that is reported,
// besides its state.
func ConnectorChecks(p *config.Pipeline, info ConnectorInfo) []Finding {
	findings := []Finding{connectorState(p, info)}
	if info.binlog() {
		return append(findings, binlogConnectorChecks(p, info)...)
	}
	if class := strings.TrimSpace(info.Config["connector.class"]); class != postgresConnector {
		return append(findings, Finding{Check: CheckConnector, Level: Warn,
			Message: fmt.Sprintf("connector.class is %q, not one of Debezium's PostgreSQL, MariaDB or MySQL connectors: the connector checks know those only", class),
			Fix:     "point watch.connector at the Debezium connector that captures " + p.Outbox.Table})
	}
	findings = append(findings,
		converter(info),
		plugin(info),
		slotName(info),
		publication(info),
		publicationMode(p, info),
		snapshotMode(info),
		capturedTables(p, info),
		router(p, info),
		routerScope(p, info),
		canaryTopic(p, info),
	)
	if p.Relay.PublishedStamp == config.PublishedFromRecordTimestamp {
		findings = append(findings, recordTimestamp(info))
	}
	return append(findings, heartbeat(info), tasksMax(info, "PostgreSQL connector", "one slot, one stream", "its slot"), tombstones(info))
}

func connectorState(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckConnector}
	if info.Status == nil {
		f.Level, f.Message = Warn, "status not read: "+explain.OneLine(fmt.Sprint(info.StatusError))
		f.Fix = "check that Kafka Connect answers at watch.connect_url"
		return f
	}
	st := *info.Status
	if st.Running() {
		f.Level, f.Message = OK, st.Summary()
		return f
	}
	f.Level = Fail
	parts := append([]string{st.Summary()}, st.TraceLines()...)
	f.Message = strings.Join(parts, "; ") + ": nothing publishes the canaries"
	f.Fix = fmt.Sprintf("remove the cause the trace names, then restart the failed tasks: POST %s/connectors/%s/restart?includeTasks=true&onlyFailed=true",
		strings.TrimRight(p.Watch.ConnectURL, "/"), info.Name)
	return f
}

// schemaRegistryConverter recognises the converters that frame values
// with a schema registry's magic byte and schema id.
func schemaRegistryConverter(class string) bool {
	c := strings.ToLower(class)
	return strings.HasPrefix(c, "io.confluent.") || strings.HasPrefix(c, "io.apicurio.") ||
		strings.Contains(c, "avro") || strings.Contains(c, "protobuf") || strings.Contains(c, "jsonschema")
}

const converterFix = "value.converter=" + jsonConverter + " and value.converter.schemas.enable=false on the connector (a connector's converter overrides the worker's)"

func converter(info ConnectorInfo) Finding {
	f := Finding{Check: CheckConverter}
	class := strings.TrimSpace(info.Config["value.converter"])
	alias := info.router()
	expanded := alias != "" && info.routerSetting(alias, "table.expand.json.payload") == "true"
	switch {
	case class == "":
		f.Level = Warn
		f.Message = "value.converter is not set on the connector: the worker's applies, which the REST API does not show " +
			"(Kafka's JsonConverter, which the prober reads; a worker defaulting to a schema registry converter, as Confluent Platform images do, makes every canary unreadable)"
		f.Fix = converterFix
	case schemaRegistryConverter(class):
		f.Level = Fail
		f.Message = fmt.Sprintf("value.converter %s frames values for a schema registry: the prober skips every canary as unsupported_encoding and all are lost", class)
		f.Fix = converterFix
	case class == byteArrayConv:
		f.Level = Fail
		f.Message = "value.converter ByteArrayConverter accepts bytes only; the router's payload is a string or a struct, so the task fails on the first event"
		f.Fix = converterFix
	case class == jsonConverter:
		f.Level = OK
		schemas := info.Config["value.converter.schemas.enable"]
		switch strings.TrimSpace(schemas) {
		case "false":
			f.Message = "JsonConverter without schemas: the prober reads the payload as a JSON string or object"
		case "true":
			f.Message = "JsonConverter with schemas: the prober unwraps Connect's {schema, payload} envelope (every message carries its schema)"
		default:
			f.Message = "JsonConverter; value.converter.schemas.enable is the worker's (Kafka's default true): the prober reads the value with or without Connect's envelope"
		}
	case class == stringConverter && expanded:
		f.Level = Warn
		f.Message = fmt.Sprintf("StringConverter with transforms.%s.table.expand.json.payload=true writes Kafka Connect's Struct text (Struct{seq=...}): the prober reads it, business consumers get no JSON", alias)
		f.Fix = fmt.Sprintf("transforms.%s.table.expand.json.payload=false (the payload column's JSON as it is), or %s", alias, converterFix)
	case class == stringConverter:
		f.Level = OK
		f.Message = "StringConverter: the payload column's text as it is, which the prober reads"
	default:
		f.Level = Warn
		f.Message = fmt.Sprintf("value.converter %s: the prober reads JSON and plain text values only; check that this converter writes one of them", class)
		f.Fix = converterFix
	}
	return f
}

func (info ConnectorInfo) running() bool { return info.Status != nil && info.Status.Running() }

func plugin(info ConnectorInfo) Finding {
	f := Finding{Check: CheckPlugin}
	name := info.setting("plugin.name")
	_, set := info.Config["plugin.name"]
	switch {
	case name == "pgoutput":
		f.Level, f.Message = OK, "pgoutput: PostgreSQL's own logical decoding plugin (10+), nothing to install"
	case name == "decoderbufs" && info.running():
		f.Level = Warn
		f.Message = "decoderbufs (" + defaulted(set) + ") is installed on this server, as the running task shows; a server without it (a failover, an upgrade) fails the connector"
		f.Fix = "plugin.name=pgoutput, built into PostgreSQL 10+"
	case name == "decoderbufs":
		f.Level = Fail
		f.Message = "decoderbufs (" + defaulted(set) + "): stock PostgreSQL does not ship it, and the task fails creating its slot"
		f.Fix = "plugin.name=pgoutput, built into PostgreSQL 10+"
	default:
		f.Level = Warn
		f.Message = fmt.Sprintf("plugin.name %s: the checks know pgoutput and decoderbufs only", name)
		f.Fix = "plugin.name=pgoutput, built into PostgreSQL 10+"
	}
	return f
}

func defaulted(set bool) string {
	if set {
		return "set"
	}
	return "Debezium's default"
}

// sameServer reports whether another connector captures the same
// PostgreSQL server (by the host and port it was given).
func sameServer(info ConnectorInfo, other map[string]string) bool {
	port := func(c map[string]string) string {
		return settingOr(c["database.port"], debeziumDefaults["database.port"])
	}
	return strings.TrimSpace(other["connector.class"]) == postgresConnector &&
		strings.EqualFold(other["database.hostname"], info.Config["database.hostname"]) && port(other) == port(info.Config)
}

// settingOr is a connector setting as Connect reads it (surrounding
// spaces ignored), or def when it is unset.
func settingOr(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return strings.TrimSpace(v)
}

// sharers are the other connectors on the same server whose setting key
// (with Debezium's default) equals this connector's.
func sharers(info ConnectorInfo, key string, sameDatabase bool) []string {
	var names []string
	for name, other := range info.Others {
		if !sameServer(info, other) || settingOr(other[key], debeziumDefaults[key]) != info.setting(key) {
			continue
		}
		if sameDatabase && other["database.dbname"] != info.Config["database.dbname"] {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func slotName(info ConnectorInfo) Finding {
	f := Finding{Check: CheckSlot}
	slot := info.setting("slot.name")
	fix := "slot.name=<a name of its own on this server, e.g. outbox_<service>>"
	if others := sharers(info, "slot.name", false); len(others) > 0 {
		f.Level, f.Fix = Fail, fix
		f.Message = fmt.Sprintf("slot %s is also the slot of connector %s on the same server: a slot streams to one connector, the other fails or, restarted, takes over the stream",
			slot, strings.Join(others, ", "))
		return f
	}
	if db := info.DB; db != nil && db.SlotDatabase != "" {
		if db.SlotDatabase != info.Config["database.dbname"] {
			f.Level, f.Fix = Fail, fix
			f.Message = fmt.Sprintf("slot %s exists for database %s, not %s: the connector cannot stream from it", slot, db.SlotDatabase, info.Config["database.dbname"])
			return f
		}
		if want := info.setting("plugin.name"); db.SlotPlugin != want {
			f.Level = Fail
			f.Message = fmt.Sprintf("slot %s was created with plugin %s, the connector uses %s: it cannot stream from it", slot, db.SlotPlugin, want)
			f.Fix = fmt.Sprintf("drop the slot once nothing needs its WAL (SELECT pg_drop_replication_slot('%s')) or use a new slot.name", slot)
			return f
		}
	}
	if slot == debeziumDefaults["slot.name"] {
		f.Level, f.Fix = Warn, fix
		f.Message = "slot.name is Debezium's default \"debezium\": the next connector on this server left at the default collides with this one"
		return f
	}
	f.Level = OK
	f.Message = fmt.Sprintf("slot %s, shared with no other connector of this Connect cluster", slot)
	if info.Others == nil {
		f.Message = fmt.Sprintf("slot %s (the cluster's other connectors could not be listed to look for another user)", slot)
	}
	return f
}

func publication(info ConnectorInfo) Finding {
	f := Finding{Check: CheckPublication}
	if info.setting("plugin.name") != "pgoutput" {
		f.Level, f.Message = OK, "not used: only pgoutput reads a publication"
		return f
	}
	pub := info.setting("publication.name")
	fix := "publication.name=<a name of its own in this database, e.g. the slot's>"
	if others := sharers(info, "publication.name", true); len(others) > 0 {
		f.Level, f.Fix = Fail, fix
		f.Message = fmt.Sprintf("publication %s is also the publication of connector %s in the same database: each captures the other's tables, and filtered mode rewrites its table list at every start",
			pub, strings.Join(others, ", "))
		return f
	}
	if pub == debeziumDefaults["publication.name"] {
		f.Level, f.Fix = Warn, fix
		f.Message = "publication.name is Debezium's default \"dbz_publication\": the next connector on this database left at the default shares it"
		return f
	}
	f.Level, f.Message = OK, fmt.Sprintf("publication %s, shared with no other connector of this Connect cluster", pub)
	if info.Others == nil {
		f.Message = fmt.Sprintf("publication %s (the cluster's other connectors could not be listed to look for another user)", pub)
	}
	return f
}

// qualifiedTable is the outbox table as Debezium names it: schema.table
// on PostgreSQL, database.table on MySQL (the DSN's database, as the
// server says it, when the table names none).
func (info ConnectorInfo) qualifiedTable(p *config.Pipeline) string {
	if strings.Contains(p.Outbox.Table, ".") {
		return p.Outbox.Table
	}
	if info.binlog() {
		db := "<database>"
		if info.DB != nil && info.DB.Database != "" {
			db = info.DB.Database
		}
		return db + "." + p.Outbox.Table
	}
	return "public." + p.Outbox.Table
}

func publicationMode(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckPublicationMode}
	if info.setting("plugin.name") != "pgoutput" {
		f.Level, f.Message = OK, "not used: only pgoutput reads a publication"
		return f
	}
	mode, pub, table := info.setting("publication.autocreate.mode"), info.setting("publication.name"), info.qualifiedTable(p)
	switch mode {
	case "filtered":
		f.Level, f.Message = OK, "filtered: the publication holds the captured tables only"
	case "all_tables":
		f.Level = Warn
		f.Message = "all_tables (Debezium's default): the publication is FOR ALL TABLES, which only a superuser may create, and the server decodes and sends every table's changes for the connector to drop"
		f.Fix = "publication.autocreate.mode=filtered (publishes table.include.list only)"
	case "disabled":
		switch db := info.DB; {
		case db == nil:
			f.Level, f.Message = Warn, fmt.Sprintf("disabled: publication %s must exist and publish %s; the database was not read to check", pub, table)
			f.Fix = fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, table)
		case !db.PublicationExists:
			f.Level, f.Message = Fail, fmt.Sprintf("disabled, and publication %s does not exist: the connector fails at its start", pub)
			f.Fix = fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, or publication.autocreate.mode=filtered", pub, table)
		case !db.PublicationAllTables && !slices.Contains(db.PublicationTables, table):
			f.Level = Fail
			f.Message = fmt.Sprintf("disabled, and publication %s does not publish %s (it publishes %v): no canary row is captured", pub, table, db.PublicationTables)
			f.Fix = fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, table)
		default:
			f.Level, f.Message = OK, fmt.Sprintf("disabled: publication %s exists and publishes %s", pub, table)
		}
	default:
		f.Level, f.Message = Warn, fmt.Sprintf("publication.autocreate.mode %q: the checks know filtered, all_tables and disabled", mode)
		f.Fix = "publication.autocreate.mode=filtered"
	}
	return f
}

func snapshotMode(info ConnectorInfo) Finding {
	from := "its slot"
	if info.binlog() {
		from = "the binlog"
	}
	f := Finding{Check: CheckSnapshot}
	const fix = "snapshot.mode=no_data (Debezium 2.6+; \"never\" before): the outbox's existing rows were published already"
	switch mode := info.setting("snapshot.mode"); mode {
	case "no_data", "never":
		f.Level, f.Message = OK, mode+": the connector streams from "+from+" and publishes no row a second time from a snapshot"
	case "initial", "when_needed":
		f.Level, f.Fix = Warn, fix
		f.Message = mode + ": whenever the connector starts without stored offsets (its first start, or after its offsets are lost) it publishes every row still in the outbox table again, so consumers see old events twice"
	case "always":
		f.Level, f.Fix = Fail, fix
		f.Message = "always: every restart publishes every row still in the outbox table again"
	case "initial_only":
		f.Level, f.Fix = Fail, fix
		f.Message = "initial_only: the connector stops after its snapshot and never streams: no canary is published"
	default:
		f.Level, f.Fix = Warn, fix
		f.Message = fmt.Sprintf("snapshot.mode %q: check when it snapshots, each snapshot publishes the outbox's rows again", mode)
	}
	return f
}

// javaListMatches reports whether a Debezium include/exclude list (comma
// separated regular expressions, each matched against the whole name,
// ignoring case as Debezium does) matches name. ok is false when a pattern
// is not valid Go syntax.
func javaListMatches(list, name string) (match, ok bool) {
	for _, pat := range splitList(list) {
		re, err := regexp.Compile(`(?i)^(?:` + pat + `)$`)
		if err != nil {
			return false, false
		}
		if re.MatchString(name) {
			return true, true
		}
	}
	return false, true
}

func capturedTables(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckCapture}
	table := info.qualifiedTable(p)
	schema, _, _ := strings.Cut(table, ".")
	if db := info.DB; db != nil && info.Config["database.dbname"] != db.Database {
		f.Level = Fail
		f.Message = fmt.Sprintf("the connector captures database %s, the pipeline's outbox is in %s: no canary row is captured", info.Config["database.dbname"], db.Database)
		f.Fix = "database.dbname=" + db.Database + ", or point database.dsn at the connector's database"
		return f
	}
	if failed, ok := captureLists(info, table, []captureList{
		{"schema.include.list", schema, true}, {"schema.exclude.list", schema, false},
		{"table.include.list", table, true}, {"table.exclude.list", table, false},
	}); !ok {
		return failed
	}
	f.Level = OK
	if info.Config["table.include.list"] == "" {
		f.Message = fmt.Sprintf("no table.include.list: every table of %s is captured, %s among them", info.Config["database.dbname"], table)
	} else {
		f.Message = fmt.Sprintf("table.include.list %q captures %s", info.Config["table.include.list"], table)
	}
	return f
}

// captureList is one of a connector's include or exclude lists and the
// name (schema, database or schema.table) it must or must not match.
type captureList struct {
	key, name string
	include   bool
}

// captureLists checks the outbox table against a connector's include and
// exclude lists: the first that leaves it out is a finding, and ok is
// false; a list the checks cannot read is a warning.
func captureLists(info ConnectorInfo, table string, lists []captureList) (Finding, bool) {
	f := Finding{Check: CheckCapture}
	for _, l := range lists {
		list := info.Config[l.key]
		if strings.TrimSpace(list) == "" {
			continue
		}
		match, ok := javaListMatches(list, l.name)
		switch {
		case !ok:
			f.Level, f.Message = Warn, fmt.Sprintf("%s %q is not a pattern the checks can read: whether it captures %s is not checked", l.key, list, table)
			f.Fix = fmt.Sprintf("check by hand that %s captures %s", l.key, table)
			return f, false
		case l.include && !match:
			f.Level, f.Message = Fail, fmt.Sprintf("%s %q does not capture %s: no canary row is captured", l.key, list, table)
			f.Fix = fmt.Sprintf("%s=%s", l.key, regexp.QuoteMeta(l.name))
			return f, false
		case !l.include && match:
			f.Level, f.Message = Fail, fmt.Sprintf("%s %q excludes %s: no canary row is captured", l.key, list, table)
			f.Fix = fmt.Sprintf("remove %s from %s", l.name, l.key)
			return f, false
		}
	}
	return f, true
}

const routerFix = "transforms=outbox, transforms.outbox.type=" + eventRouter

func router(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckRouter}
	alias := info.router()
	if alias == "" {
		f.Level = Fail
		f.Message = fmt.Sprintf("no outbox EventRouter in transforms %q: canary rows reach Kafka as Debezium change events on %s.%s, not on the canary topic",
			info.Config["transforms"], info.setting("topic.prefix"), info.qualifiedTable(p))
		f.Fix = routerFix
		return f
	}
	if by, col := info.routerSetting(alias, "route.by.field"), p.Outbox.Columns.Route; by != col {
		f.Level = Fail
		f.Message = fmt.Sprintf("the router routes by column %s; the prober writes the canary aggregate type into %s (outbox.columns.route)", by, col)
		f.Fix = fmt.Sprintf("transforms.%s.route.by.field=%s, or outbox.columns.route: %s", alias, col, by)
		return f
	}
	if field, col := info.routerSetting(alias, "table.field.event.payload"), p.Outbox.Columns.Payload; field != col {
		f.Level = Fail
		f.Message = fmt.Sprintf("the router reads the payload from column %s; the prober writes the canary into %s (outbox.columns.payload)", field, col)
		f.Fix = fmt.Sprintf("transforms.%s.table.field.event.payload=%s", alias, col)
		return f
	}
	f.Level = OK
	f.Message = fmt.Sprintf("transforms.%s is the outbox EventRouter, routing by %s", alias, p.Outbox.Columns.Route)
	return f
}

func routerScope(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckRouterScope}
	alias := info.router()
	if alias == "" {
		f.Level, f.Message = OK, "no router (see event router)"
		return f
	}
	outboxTopic := info.setting("topic.prefix") + "." + info.qualifiedTable(p)
	predicateFix := fmt.Sprintf("transforms.%s.predicate=isOutboxTable, predicates=isOutboxTable, predicates.isOutboxTable.type=%s, predicates.isOutboxTable.pattern=%s",
		alias, topicNameMatches, regexp.QuoteMeta(outboxTopic))
	if pred := strings.TrimSpace(info.Config["transforms."+alias+".predicate"]); pred != "" {
		negate := strings.TrimSpace(info.Config["transforms."+alias+".negate"]) == "true"
		if typ := strings.TrimSpace(info.Config["predicates."+pred+".type"]); typ != topicNameMatches {
			f.Level = Warn
			f.Message = fmt.Sprintf("predicate %s is a %s: whether it lets the outbox table's events through is not checked", pred, typ)
			f.Fix = predicateFix
			return f
		}
		pattern := info.Config["predicates."+pred+".pattern"]
		re, err := regexp.Compile(`^(?:` + pattern + `)$`)
		if err != nil {
			f.Level, f.Message = Warn, fmt.Sprintf("predicate %s's pattern %q is not a pattern the checks can read", pred, pattern)
			f.Fix = predicateFix
			return f
		}
		if re.MatchString(outboxTopic) == negate {
			f.Level = Fail
			f.Message = fmt.Sprintf("predicate %s (pattern %q, negate %t) keeps the router off %s, the outbox table's events: no canary is routed", pred, pattern, negate, outboxTopic)
			f.Fix = predicateFix
			return f
		}
		f.Level, f.Message = OK, fmt.Sprintf("predicate %s limits the router to %s", pred, outboxTopic)
		return f
	}
	if include := strings.TrimSpace(info.Config["table.include.list"]); include != "" && literalList(include, info.qualifiedTable(p)) {
		f.Level = OK
		f.Message = fmt.Sprintf("table.include.list captures %s only, so the router sees nothing else (heartbeats pass it unchanged)", info.qualifiedTable(p))
		return f
	}
	scope := "no table.include.list: the connector captures every table of its database"
	if include := info.Config["table.include.list"]; include != "" {
		scope = fmt.Sprintf("table.include.list %q captures more than %s", include, info.qualifiedTable(p))
	}
	f.Level = Fail
	f.Message = "the router has no predicate and " + scope + ": an event of another table fails the task (Unable to find payload field), or, with such columns, is routed as if it were an outbox row"
	f.Fix = predicateFix + "; or table.include.list=" + info.qualifiedTable(p)
	return f
}

// literalList reports whether an include list names exactly the table and
// nothing else (its dots escaped or not).
func literalList(list, table string) bool {
	items := splitList(list)
	return len(items) == 1 && (strings.EqualFold(items[0], table) || strings.EqualFold(items[0], regexp.QuoteMeta(table)))
}

func canaryTopic(p *config.Pipeline, info ConnectorInfo) Finding {
	f := Finding{Check: CheckCanaryTopic}
	alias := info.router()
	if alias == "" {
		f.Level, f.Message = Fail, "no router: canaries are not routed to "+p.Kafka.Topic
		f.Fix = routerFix
		return f
	}
	agg := p.Canary.AggregateType
	topic, err := routedTopic(info, alias, agg)
	if err != nil {
		f.Level, f.Message = Warn, "where canaries go is not checked: "+err.Error()
		f.Fix = fmt.Sprintf("check by hand that transforms.%s routes %q to %s", alias, agg, p.Kafka.Topic)
		return f
	}
	if topic != p.Kafka.Topic {
		f.Level = Fail
		f.Message = fmt.Sprintf("the router sends canaries (%s %q) to %s; the prober reads %s: every canary is lost", p.Outbox.Columns.Route, agg, topic, p.Kafka.Topic)
		f.Fix = fmt.Sprintf("kafka.topic: %s, or transforms.%s.route.topic.replacement so that %q goes to %s", topic, alias, agg, p.Kafka.Topic)
		return f
	}
	exists, known := info.Topics[topic]
	switch {
	case !known:
		f.Level, f.Message = Warn, fmt.Sprintf("canaries go to %s; whether it exists was not checked: %v", topic, info.TopicsError)
		f.Fix = "check that " + topic + " exists: brokers often run with auto.create.topics.enable=false"
	case !exists && info.Config["topic.creation.default.partitions"] != "" && info.Config["topic.creation.default.replication.factor"] != "":
		f.Level, f.Message = OK, fmt.Sprintf("canaries go to %s, which Kafka Connect creates at the first canary (topic.creation.default.*)", topic)
	case !exists:
		f.Level = Fail
		f.Message = fmt.Sprintf("canaries go to %s, which does not exist: with auto.create.topics.enable=false (common) the task fails at the first canary", topic)
		f.Fix = fmt.Sprintf("create it (kafka-topics.sh --create --topic %s --partitions 1), or set topic.creation.default.partitions and topic.creation.default.replication.factor on the connector", topic)
	default:
		f.Level, f.Message = OK, fmt.Sprintf("canaries (%s %q) go to %s, which exists", p.Outbox.Columns.Route, agg, topic)
	}
	return f
}

func recordTimestamp(info ConnectorInfo) Finding {
	f := Finding{Check: CheckRecordTimestamp}
	alias := info.router()
	col := ""
	if alias != "" {
		col = strings.TrimSpace(info.Config["transforms."+alias+".table.field.event.timestamp"])
	}
	if col != "" {
		f.Level = Fail
		f.Message = fmt.Sprintf("the record timestamp is the row's column %s, not the time Debezium published the event: with relay.published_stamp record_timestamp, commit_to_publish measures that column, not the relay", col)
		f.Fix = fmt.Sprintf("remove transforms.%s.table.field.event.timestamp (the timestamp is then Debezium's processing time)", alias)
		return f
	}
	f.Level, f.Message = OK, "the record timestamp is Debezium's processing time: the publish stamp of relay.published_stamp record_timestamp"
	return f
}

// emitMessageRE reads the prefix of a pg_logical_emit_message call.
var emitMessageRE = regexp.MustCompile(`(?i)pg_logical_emit_message\s*\(\s*(?:true|false)\s*,\s*'([^']*)'`)

func heartbeat(info ConnectorInfo) Finding {
	f := Finding{Check: CheckHeartbeat}
	recommended := fmt.Sprintf("heartbeat.interval.ms=10000, heartbeat.action.query=%s, message.prefix.exclude.list=outbox-canary-heartbeat", recommendedHeartbeatQuery)
	ms, err := strconv.ParseInt(info.setting("heartbeat.interval.ms"), 10, 64)
	if err != nil || ms <= 0 {
		f.Level = Warn
		f.Message = "no heartbeat: while nothing the connector captures changes, it confirms no position, and its slot retains every byte of WAL the server writes meanwhile (other databases' included); canaries write the outbox only while the prober runs"
		f.Fix = recommended + " (and create the topic " + info.heartbeatTopic() + ")"
		return f
	}
	topic := info.heartbeatTopic()
	if exists, known := info.Topics[topic]; known && !exists {
		f.Level = Fail
		f.Message = fmt.Sprintf("heartbeats every %d ms go to %s, which does not exist: the task fails at its first heartbeat", ms, topic)
		f.Fix = fmt.Sprintf("create %s (kafka-topics.sh --create --topic %s --partitions 1)", topic, topic)
		return f
	}
	query := strings.TrimSpace(info.Config["heartbeat.action.query"])
	if query == "" {
		f.Level = Warn
		f.Message = fmt.Sprintf("heartbeats every %d ms but no heartbeat.action.query: a heartbeat alone does not move the slot while this database is quiet and others on the server write WAL (measured on the local stack: 20 MB retained after 30 s of writes to another database; with the query below, under 300 KB)", ms)
		f.Fix = "heartbeat.action.query=" + recommendedHeartbeatQuery + ", message.prefix.exclude.list=outbox-canary-heartbeat"
		return f
	}
	if m := emitMessageRE.FindStringSubmatch(query); m != nil {
		prefix := m[1]
		excluded, _ := javaListMatches(info.Config["message.prefix.exclude.list"], prefix)
		include := strings.TrimSpace(info.Config["message.prefix.include.list"])
		included, _ := javaListMatches(include, prefix)
		messageTopic := info.setting("topic.prefix") + ".message"
		if !excluded && (include == "" || included) {
			f.Level = Fail
			f.Message = fmt.Sprintf("heartbeat.action.query emits logical messages with prefix %q, which Debezium publishes as events to %s: without that topic the task fails (checked on the local stack)", prefix, messageTopic)
			f.Fix = "message.prefix.exclude.list=" + regexp.QuoteMeta(prefix)
			return f
		}
	}
	f.Level = OK
	f.Message = fmt.Sprintf("heartbeats every %d ms to %s, with heartbeat.action.query %q", ms, topic, query)
	return f
}

// tasksMax: Debezium's log connectors run one task, whatever tasks.max
// says. connector names the connector, stream why there is one task, and
// source what that one task reads.
func tasksMax(info ConnectorInfo, connector, stream, source string) Finding {
	f := Finding{Check: CheckTasks}
	n, err := strconv.Atoi(info.setting("tasks.max"))
	switch {
	case err != nil:
		f.Level, f.Message, f.Fix = Warn, fmt.Sprintf("tasks.max %q is not a number", info.setting("tasks.max")), "tasks.max=1"
	case n > 1:
		f.Level = Warn
		f.Message = fmt.Sprintf("tasks.max=%d: the %s runs one task whatever tasks.max says (%s), so the setting promises parallelism that does not exist", n, connector, stream)
		f.Fix = "tasks.max=1"
	default:
		f.Level, f.Message = OK, fmt.Sprintf("one task: the %s reads %s with one", connector, source)
	}
	return f
}

func tombstones(info ConnectorInfo) Finding {
	f := Finding{Check: CheckTombstones, Level: OK}
	alias := info.router()
	if alias == "" {
		f.Message = "no router (see event router)"
		return f
	}
	if info.routerSetting(alias, "route.tombstone.on.empty.payload") == "true" {
		f.Message = fmt.Sprintf("transforms.%s.route.tombstone.on.empty.payload=true: a row with an empty payload becomes a tombstone (null value) on its topic, deleting its key's events where the topic is compacted; canary rows always have a payload, and the router drops DELETE events and their tombstones either way", alias)
		return f
	}
	f.Message = "the router drops DELETE events and their tombstones, and publishes a row with an empty payload as an event with a null payload (route.tombstone.on.empty.payload=false): canaries deleted in their own transaction are published once"
	return f
}

// splitList splits a comma-separated Kafka Connect list.
func splitList(list string) []string {
	var out []string
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// oneLine flattens a multi-line error so a finding stays one line.
