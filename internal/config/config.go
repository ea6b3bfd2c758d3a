// Package config is the user-facing schema of outbox-canary: one YAML file,
// decoded strictly, defaulted, then validated. Every problem in a file is
// reported at once, each with its line and field path, and no message ever
// repeats a secret. docs/configuration.md is generated from this package's
// field comments.
//
// The rest of the program reads the validated Config; slo converts it once
// into its internal model, the prober reads connection and column settings.
package config

import (
	"fmt"
	"os"
	"time"
)

// Relay kinds.
const (
	RelayPolling = "polling"
	RelayCDC     = "cdc"
)

// Published stamp sources: where the "publish" stamp of a canary comes from.
const (
	PublishedFromColumn          = "published_at"     // polling relay: the row's published_at, DB clock
	PublishedFromHeader          = "header"           // a relay-written header, relay clock
	PublishedFromRecordTimestamp = "record_timestamp" // the Kafka record timestamp
)

// ID generation for the outbox primary key.
const (
	IDFromDatabase = "database" // a default (bigserial, identity, gen_random_uuid) fills it; read back with RETURNING
	IDUUID         = "uuid"     // the prober supplies a random UUID (Debezium's default table has no default)
)

// Config is the whole configuration file.
type Config struct {
	// Tells this prober's canaries apart from other instances' on a shared
	// canary topic: each instance judges only its own. Letters, digits and
	// punctuation, no whitespace.
	InstanceID string `yaml:"instance_id"`
	// The directory that keeps the in-flight canaries (a snapshot per
	// pipeline and one journal for them all, see docs/persistence.md), so a restart neither
	// loses nor double-counts them. Unset,
	// `run` uses --state.dir's default: $STATE_DIRECTORY (systemd's
	// StateDirectory=), else /var/lib/outbox-canary.
	StateDir string `yaml:"state_dir"`
	// The HMAC key canaries are signed with, so a message that merely looks
	// like a canary cannot fake a healthy pipeline. See Secrets.
	SigningKey Secret `yaml:"signing_key"`
	// Keys that still verify canaries but sign none: to rotate the
	// signing key without turning in-flight canaries into bad_signature,
	// put the old key here and the new one in signing_key, and drop the
	// old one after canary.lost_after. See Secrets.
	PreviousSigningKeys []Secret `yaml:"previous_signing_keys"`
	// The outbox pipelines to measure; at least one.
	Pipelines []Pipeline `yaml:"pipelines"`
	// Shapes the generated Prometheus alerting rules and dashboards.
	Alerting Alerting `yaml:"alerting"`

	pos   positions       // where each field was written; nil unless loaded
	blank map[string]bool // fields written with an empty value; nil unless loaded
}

// Pipeline is one outbox pipeline: database -> outbox table -> relay -> Kafka.
type Pipeline struct {
	// The pipeline's name: the pipeline label of every metric and alert, and
	// part of rule names. Letters, digits, _ and -, not starting with a
	// digit or -; unique in the file.
	Name string `yaml:"name"`
	// The service database that holds the outbox table.
	Database Database `yaml:"database"`
	// The outbox table and how its columns are named.
	Outbox Outbox `yaml:"outbox"`
	// How rows leave the table for Kafka, and where the publish stamp comes
	// from.
	Relay Relay `yaml:"relay"`
	// The canary rows the prober writes, and how often.
	Canary Canary `yaml:"canary"`
	// Where the prober reads the canaries back.
	Kafka Kafka `yaml:"kafka"`
	// Latency budgets by segment: a canary is good on a segment when it is
	// faster than the segment's budget, and every budgeted segment is an
	// SLO. The segments are insert_to_commit, commit_to_publish (or, with
	// relay.stamps, commit_to_<stamp> ... <stamp>_to_publish),
	// publish_to_consume and end_to_end (commit to consume). end_to_end is
	// required.
	Budgets Budgets `yaml:"budgets"`
	// The objective the budgeted segments are held to.
	SLO SLO `yaml:"slo"`
	// The team that owns each segment, by segment name, with "default" for
	// the rest: alerts carry it as the owner label, for Alertmanager
	// routing. Unset, alerts carry an empty owner.
	Owners Owners `yaml:"owners"`
	// The watchers that explain a slow canary: backlog, transactions,
	// replication slot, connector and consumer lag.
	Watch Watch `yaml:"watch"`
}

// Database is the service database that holds the outbox table.
type Database struct {
	// The connection string: a postgres:// URL or keyword=value pairs, as
	// libpq takes them (percent-encode @, :, / and % in a URL's user name
	// and password). A secret, since it usually holds a password. The role
	// needs INSERT and SELECT on the outbox table (and DELETE for
	// canary.delete_after_insert), and pg_monitor for the watchers. Over
	// TLS, set sslmode=verify-full (the server's certificate must chain to
	// a trusted CA and carry the host name) and sslrootcert to the CA's PEM
	// file; sslcert and sslkey give a client certificate, passfile a
	// .pgpass file for the password.
	DSN Secret `yaml:"dsn"`
	// The database family: postgres, or mysql (MySQL 8.0+ and MariaDB
	// 10.6+). Empty: a DSN that is a mysql:// or mariadb:// URL is mysql
	// (mysql://user:password@host:3306/database?tls=true&ca=/ca.pem, where
	// tls is true, false, preferred or skip-verify and ca, a PEM file,
	// implies true; other parameters go to the driver, go-sql-driver/mysql),
	// anything else postgres. With mysql, a DSN that is not a URL is read in
	// go-sql-driver/mysql's form (user:password@tcp(host:3306)/database).
	// The MySQL user needs INSERT and SELECT on the outbox table (DELETE
	// for canary.delete_after_insert), and PROCESS and BINLOG MONITOR
	// (MySQL: REPLICATION CLIENT) for the watchers. The prober's sessions
	// run in UTC whatever the server's time zone. `rules` and `dashboards`
	// read no secret: for a cdc pipeline whose DSN comes from env or file,
	// set kind: mysql so they generate the binlog's alerts and panels, not
	// a replication slot's.
	Kind string `yaml:"kind"`
	// How often the offset between the database clock and the prober's is
	// re-estimated: published_at is written on the database clock and
	// converted to the prober's with it. Pipelines on one database (the
	// same dsn) share one estimate, made at the shortest of their
	// intervals.
	ClockOffsetInterval Duration `yaml:"clock_offset_interval"`
}

// Outbox names the outbox table and maps its columns, so seed schema A,
// seed schema B and Debezium's default table all work unmodified.
type Outbox struct {
	// The outbox table, optionally schema-qualified: outbox or
	// public.outbox.
	Table string `yaml:"table"`
	// The names of the table's columns, by role.
	Columns Columns `yaml:"columns"`
	// How a canary row gets its primary key: "database" (a column default
	// such as bigserial, identity or gen_random_uuid() fills it) or "uuid"
	// (the prober supplies a UUID, for tables without a default, such as
	// Debezium's).
	IDGeneration string `yaml:"id_generation"`
}

// Columns maps outbox roles to column names. Empty optional columns are not
// written.
type Columns struct {
	// The primary key column.
	ID string `yaml:"id"`
	// The column the relay routes topics by (the aggregate type, or the
	// event type): the prober writes canary.aggregate_type into it.
	Route string `yaml:"route"`
	// The message key column (the aggregate id): the prober writes
	// canary.key into it.
	Key string `yaml:"key"`
	// The payload column: the prober writes the signed canary payload.
	Payload string `yaml:"payload"`
	// The event type column, if the table has one apart from route: the
	// prober writes canary.event_type into it. Empty: not written.
	EventType string `yaml:"event_type"`
	// The creation time column (a database default such as now()): the
	// backlog watcher measures the oldest unpublished row's age from it.
	// Empty: the age is not measured.
	CreatedAt string `yaml:"created_at"`
	// The column a polling relay sets when it has published a row: the
	// backlog watcher counts rows where it is NULL, and with
	// relay.published_stamp published_at it is the publish stamp. Polling
	// relays only.
	PublishedAt string `yaml:"published_at"`
}

// Relay says how rows leave the table.
type Relay struct {
	// "polling" (a relay reads unpublished rows and sets published_at) or
	// "cdc" (log capture such as Debezium reads the WAL through a
	// replication slot).
	Kind string `yaml:"kind"`
	// Where the publish stamp comes from: "published_at" (the row's
	// published_at, database clock; polling only), "header" (a header the
	// relay writes, named by published_header; relay clock) or
	// "record_timestamp" (the Kafka record timestamp: the producer's, such
	// as Debezium's processing time, or the broker's with LogAppendTime). The default is published_at for
	// polling, and for cdc header when published_header is set, else
	// record_timestamp.
	PublishedStamp string `yaml:"published_stamp"`
	// The header carrying the relay's send time (RFC 3339 or Unix
	// milliseconds) when published_stamp is header.
	PublishedHeader string `yaml:"published_header"`
	// Extra stamps, in pipeline order, that the relay writes as headers
	// between commit and publish; each splits commit_to_publish further
	// (commit_to_read, read_to_publish, ...).
	Stamps []Stamp `yaml:"stamps"`
	// A segment negative by less than this (plus the error bound of the
	// database clock offset, for published_at) is measurement noise,
	// measured as 0, not counted as suspected clock skew. The default is
	// 50ms when the publish stamp is published_at (written after the
	// broker's ack, so the record is often read before it), else 1ms
	// (record timestamps and most headers are whole milliseconds,
	// truncated).
	SkewTolerance Duration `yaml:"skew_tolerance"`
	// A relay stamp more than this outside [commit, consume] is invalid
	// (counted in outbox_canary_stamps_invalid_total, its segments not
	// judged) rather than suspected skew: a header of year 2099, or one in
	// the wrong unit. Integer header stamps are read as seconds,
	// milliseconds, microseconds or nanoseconds by their magnitude.
	MaxClockSkew Duration `yaml:"max_clock_skew"`
}

// Stamp is an extra timestamp carried by a message header.
type Stamp struct {
	// The stamp's name, lower-case letters and digits; it names the
	// segments on either side (commit_to_<name>, <name>_to_...). Not
	// commit, publish or consume.
	Name string `yaml:"name"`
	// The message header that carries it (RFC 3339 or Unix milliseconds).
	Header string `yaml:"header"`
}

// Canary shapes the synthetic rows the prober writes.
type Canary struct {
	// The value written to the route column; the relay routes it to the
	// dedicated canary topic, so business consumers never see a canary.
	AggregateType string `yaml:"aggregate_type"`
	// The value written to the key column: the canaries' message key.
	Key string `yaml:"key"`
	// The value written to the event type column, when outbox.columns
	// maps one that is not the route column.
	EventType string `yaml:"event_type"`
	// When canaries are sent: "@every 10s", or a cron spec of five fields
	// (minute hour day-of-month month day-of-week) or six (with seconds
	// first), or @hourly, @daily, @weekly, @monthly, @yearly. Alerts that
	// count canary intervals use the longest gap between two firings.
	// Each pipeline fires at a phase of its own, from the FNV-1a hash of
	// its name, so that pipelines on one schedule do not all insert at
	// once: "@every D" fires at Unix epoch + phase + k*D, the phase in
	// [0, D); a cron spec fires at each of its times plus a phase below
	// its shortest step between seconds (at most a minute: "@hourly"
	// fires within the first minute of the hour). Phases are multiples of
	// 250ms, the instants the prober wakes in for its other periodic work
	// (fewer wakeups cost less CPU); a schedule under 500ms has none. The
	// gaps between firings are the spec's, and every deadline counts from
	// the canary's own commit, so the phase changes no verdict.
	Schedule string `yaml:"schedule"`
	// How long after its commit a canary that has not arrived is given up
	// as lost. Its end_to_end, and the segment it was stuck in, were
	// already counted bad when their budgets ran out; this only ends the
	// wait (and a late arrival is still counted as late). Longer than
	// budgets.end_to_end.
	LostAfter Duration `yaml:"lost_after"`
	// Insert and delete each canary row in one transaction, so the table
	// keeps no canaries: log capture still sees the insert in the WAL, and
	// Debezium's outbox router ignores the delete. cdc relays only.
	DeleteAfterInsert bool `yaml:"delete_after_insert"`
}

// Kafka is the connection to the canary topic.
type Kafka struct {
	// Bootstrap brokers, host:port.
	Brokers []string `yaml:"brokers"`
	// The topic the relay routes canaries to. The default follows
	// Debezium's outbox routing: outbox.event.<canary.aggregate_type>.
	Topic string `yaml:"topic"`
	// The Kafka client id of the prober's connections.
	ClientID string `yaml:"client_id"`
	// TLS to the brokers.
	TLS TLS `yaml:"tls"`
	// SASL authentication to the brokers.
	SASL SASL `yaml:"sasl"`
}

// TLS settings for Kafka.
type TLS struct {
	// Connect with TLS; the other tls settings take effect only when true.
	Enabled bool `yaml:"enabled"`
	// A PEM file of the CAs that sign the brokers' certificates; empty:
	// the system's roots.
	CAFile string `yaml:"ca_file"`
	// A PEM client certificate, for brokers that require one; with
	// key_file.
	CertFile string `yaml:"cert_file"`
	// The PEM private key of cert_file.
	KeyFile string `yaml:"key_file"`
	// The name the brokers' certificates must carry, when it is not the
	// host of the broker address.
	ServerName string `yaml:"server_name"`
	// Accept any broker certificate. For tests only: it lets anyone on the
	// path read and forge canaries.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASL settings for Kafka.
type SASL struct {
	// "plain", "scram-sha-256" or "scram-sha-512"; empty: no SASL.
	Mechanism string `yaml:"mechanism"`
	// The SASL user name.
	Username string `yaml:"username"`
	// The SASL password. See Secrets.
	Password Secret `yaml:"password"`
}

// Budgets maps a segment name to its latency budget.
type Budgets map[string]Duration

// SLO is the objective the canary SLI events are judged against.
type SLO struct {
	// The percentage of canaries that must be within budget, strictly
	// between 0 and 100, e.g. 99.9.
	Objective float64 `yaml:"objective"`
	// The window the objective (and its error budget) is measured over.
	Window Duration `yaml:"window"`
}

// Owners maps a segment name (or "default") to the team that owns it;
// alerts carry it as the owner label for Alertmanager routing.
type Owners map[string]string

// Watch configures the database and consumer watchers.
type Watch struct {
	// How often the watchers sample. Pipelines on one database share the
	// database watchers' queries: one for open transactions, one for
	// replication slots, one per outbox table, each asked at the shortest
	// interval of the pipelines that want its answer.
	Interval Duration `yaml:"interval"`
	// An open transaction older than this is counted in
	// outbox_canary_long_transactions (its outbox rows stay invisible to
	// the relay until it commits).
	LongTransactionThreshold Duration `yaml:"long_transaction_threshold"`
	// Business consumer groups whose lag behind their topics is watched.
	ConsumerGroups []ConsumerGroup `yaml:"consumer_groups"`
	// The Kafka Connect REST URL, for the connector watcher; with
	// connector.
	ConnectURL string `yaml:"connect_url"`
	// The Kafka Connect connector (e.g. Debezium) that relays this
	// pipeline; with connect_url.
	Connector string `yaml:"connector"`
	// The logical replication slot a cdc pipeline's connector reads
	// (Debezium's slot.name). The slot watcher, diagnose and the slot
	// alerts then look at this slot only; unset, they take every slot of
	// the database, including other pipelines' and leftovers. cdc only.
	Slot string `yaml:"slot"`
}

// ConsumerGroup is a business consumer group whose lag is watched.
type ConsumerGroup struct {
	// The consumer group id.
	Group string `yaml:"group"`
	// The topic it consumes.
	Topic string `yaml:"topic"`
}

// Segment names. Extra stamps add "<prev>_to_<name>" segments between
// commit and publish.
const (
	StampCommit  = "commit"
	StampPublish = "publish"
	StampConsume = "consume"

	SegmentInsertToCommit = "insert_to_commit"
	SegmentEndToEnd       = "end_to_end"
)

// SegmentName is the name of the segment between two stamps.
func SegmentName(from, to string) string { return from + "_to_" + to }

// StampOrder is the ordered list of stamps a canary of this pipeline gets.
func (p *Pipeline) StampOrder() []string {
	order := []string{StampCommit}
	for _, s := range p.Relay.Stamps {
		order = append(order, s.Name)
	}
	return append(order, StampPublish, StampConsume)
}

// Segments lists every segment of the pipeline in pipeline order: the
// consecutive stamp pairs, then end_to_end (commit to consume). Insert to
// commit is measured apart (it is the prober's own transaction).
func (p *Pipeline) Segments() []string {
	order := p.StampOrder()
	segs := make([]string, 0, len(order))
	for i := 1; i < len(order); i++ {
		segs = append(segs, SegmentName(order[i-1], order[i]))
	}
	return append(segs, SegmentEndToEnd)
}

// BudgetedSegments lists the segments that have a budget, in pipeline order
// (insert_to_commit first when it has one). Each is an SLO.
func (p *Pipeline) BudgetedSegments() []string {
	var out []string
	if _, ok := p.Budgets[SegmentInsertToCommit]; ok {
		out = append(out, SegmentInsertToCommit)
	}
	for _, s := range p.Segments() {
		if _, ok := p.Budgets[s]; ok {
			out = append(out, s)
		}
	}
	return out
}

// Owner returns the owner of a segment, falling back to "default".
func (p *Pipeline) Owner(segment string) string {
	if o, ok := p.Owners[segment]; ok {
		return o
	}
	return p.Owners["default"]
}

// Budget returns the budget of a segment and whether it has one.
func (p *Pipeline) Budget(segment string) (time.Duration, bool) {
	b, ok := p.Budgets[segment]
	return time.Duration(b), ok
}

// DefaultCanary is the canary a pipeline gets when canary is not written.
func DefaultCanary() Canary {
	return Canary{
		AggregateType: "outbox-canary",
		Key:           "outbox-canary",
		EventType:     "outbox-canary",
		Schedule:      "@every 10s",
		LostAfter:     Duration(5 * time.Minute),
	}
}

// DefaultSLO is the objective a pipeline gets when slo is not written.
func DefaultSLO() SLO { return SLO{Objective: 99.9, Window: Duration(30 * 24 * time.Hour)} }

const defaultTopicPrefix = "outbox.event."

// Load decodes, defaults and validates a configuration held in memory.
// Its error is Problems: every problem in the file, each with its line and
// field path, none repeating a secret.
func Load(data []byte) (*Config, error) {
	var cfg Config
	pos, failed, blank, problems := decode(data, &cfg)
	if pos == nil { // not YAML at all: nothing to validate
		return nil, problems.err()
	}
	cfg.pos = pos
	cfg.blank = blank
	if err := cfg.setDefaults(); err != nil {
		problems = append(problems, Problem{Path: "instance_id", Message: err.Error()})
	}
	for _, p := range cfg.validate() {
		if !underAny(p.Path, failed) {
			problems = append(problems, p)
		}
	}
	if err := problems.err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// underAny reports whether path is at, below or above one of the paths
// whose value could not be decoded: validating the zero value left there
// would only repeat the problem, less clearly.
func underAny(path string, failed []string) bool {
	for _, f := range failed {
		if within(path, f) || within(f, path) && path != "" {
			return true
		}
	}
	return false
}

// LoadFile reads and loads a configuration file.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Pipeline returns the pipeline with the given name.
func (c *Config) Pipeline(name string) (*Pipeline, bool) {
	for i := range c.Pipelines {
		if c.Pipelines[i].Name == name {
			return &c.Pipelines[i], true
		}
	}
	return nil, false
}

func (c *Config) setDefaults() error {
	c.Alerting.setDefaults()
	for i := range c.Pipelines {
		base := fmt.Sprintf("pipelines[%d]", i)
		c.Pipelines[i].setDefaults(func(field string) bool {
			path := joinPath(base, field)
			return c.pos.has(path) && !c.blank[path]
		})
	}
	if c.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("not set, and the host name is unknown (%w); set instance_id", err)
		}
		c.InstanceID = host
	}
	return nil
}

// setDefaults fills what was not written; written tells a field set to
// zero in the file (a mistake validation reports) from one left out.
func (p *Pipeline) setDefaults(written func(field string) bool) {
	if p.Database.ClockOffsetInterval == 0 {
		p.Database.ClockOffsetInterval = Duration(time.Minute)
	}
	o := &p.Outbox
	setIfEmpty(&o.Table, "outbox")
	setIfEmpty(&o.IDGeneration, IDFromDatabase)
	c := &o.Columns
	setIfEmpty(&c.ID, "id")
	setIfEmpty(&c.Route, "aggregate_type")
	setIfEmpty(&c.Key, "aggregate_id")
	setIfEmpty(&c.Payload, "payload")
	setIfEmpty(&p.Relay.Kind, RelayPolling)
	if p.Relay.Kind == RelayPolling {
		// Both seed schemas have these; the backlog watcher needs them.
		setIfEmpty(&c.PublishedAt, "published_at")
		setIfEmpty(&c.CreatedAt, "created_at")
	}
	if p.Relay.PublishedStamp == "" {
		switch {
		case p.Relay.Kind == RelayPolling:
			p.Relay.PublishedStamp = PublishedFromColumn
		case p.Relay.PublishedHeader != "":
			p.Relay.PublishedStamp = PublishedFromHeader
		default:
			p.Relay.PublishedStamp = PublishedFromRecordTimestamp
		}
	}
	if p.Relay.MaxClockSkew == 0 {
		p.Relay.MaxClockSkew = Duration(time.Minute)
	}
	if p.Relay.SkewTolerance == 0 {
		p.Relay.SkewTolerance = Duration(time.Millisecond)
		if p.Relay.PublishedStamp == PublishedFromColumn {
			p.Relay.SkewTolerance = Duration(50 * time.Millisecond)
		}
	}
	def := DefaultCanary()
	cn := &p.Canary
	setIfEmpty(&cn.AggregateType, def.AggregateType)
	setIfEmpty(&cn.Key, def.Key)
	setIfEmpty(&cn.EventType, def.EventType)
	setIfEmpty(&cn.Schedule, def.Schedule)
	if cn.LostAfter == 0 {
		cn.LostAfter = def.LostAfter
	}
	setIfEmpty(&p.Kafka.Topic, defaultTopicPrefix+cn.AggregateType)
	setIfEmpty(&p.Kafka.ClientID, "outbox-canary")
	defSLO := DefaultSLO()
	// A zero objective or window is no setting to fall back from: it would
	// silently become 99.9 % over 30d.
	if p.SLO.Objective == 0 && !written("slo.objective") {
		p.SLO.Objective = defSLO.Objective
	}
	if p.SLO.Window == 0 && !written("slo.window") {
		p.SLO.Window = defSLO.Window
	}
	if p.Watch.Interval == 0 {
		p.Watch.Interval = Duration(15 * time.Second)
	}
	if p.Watch.LongTransactionThreshold == 0 {
		p.Watch.LongTransactionThreshold = Duration(time.Minute)
	}
}

func setIfEmpty(s *string, def string) {
	if *s == "" {
		*s = def
	}
}
