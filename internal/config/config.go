// Package config is the user-facing schema of outbox-canary: one YAML file,
// decoded strictly, defaulted, then validated with errors that name the field.
//
// The rest of the program reads the validated Config; slo converts it once
// into its internal model, the prober reads connection and column settings.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"
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
	// InstanceID tells this prober's canaries apart from other instances'
	// on a shared canary topic. Defaults to the host name.
	InstanceID string `yaml:"instance_id"`
	// StateDir holds the in-flight canary state that survives restarts.
	StateDir string `yaml:"state_dir"`
	// SigningKey is the HMAC key canaries are signed with.
	SigningKey Secret     `yaml:"signing_key"`
	Pipelines  []Pipeline `yaml:"pipelines"`
	Alerting   Alerting   `yaml:"alerting"`
}

// Pipeline is one outbox pipeline: database -> outbox table -> relay -> Kafka.
type Pipeline struct {
	Name     string   `yaml:"name"`
	Database Database `yaml:"database"`
	Outbox   Outbox   `yaml:"outbox"`
	Relay    Relay    `yaml:"relay"`
	Canary   Canary   `yaml:"canary"`
	Kafka    Kafka    `yaml:"kafka"`
	Budgets  Budgets  `yaml:"budgets"`
	SLO      SLO      `yaml:"slo"`
	Owners   Owners   `yaml:"owners"`
	Watch    Watch    `yaml:"watch"`
}

// Database is the service database that holds the outbox table.
type Database struct {
	DSN Secret `yaml:"dsn"`
	// ClockOffsetInterval is how often the DB clock offset is re-estimated.
	ClockOffsetInterval Duration `yaml:"clock_offset_interval"`
}

// Outbox names the outbox table and maps its columns, so seed schema A,
// seed schema B and Debezium's default table all work unmodified.
type Outbox struct {
	// Table may be schema-qualified: "public.outbox".
	Table        string  `yaml:"table"`
	Columns      Columns `yaml:"columns"`
	IDGeneration string  `yaml:"id_generation"`
}

// Columns maps outbox roles to column names. Empty optional columns are not
// written.
type Columns struct {
	ID          string `yaml:"id"`
	Route       string `yaml:"route"` // the column the relay routes topics by (aggregate type, or event type)
	Key         string `yaml:"key"`   // the message key column (aggregate id)
	Payload     string `yaml:"payload"`
	EventType   string `yaml:"event_type"`   // optional unless it is the route
	CreatedAt   string `yaml:"created_at"`   // optional; informational
	PublishedAt string `yaml:"published_at"` // polling relays only
}

// Relay says how rows leave the table.
type Relay struct {
	Kind string `yaml:"kind"`
	// PublishedStamp chooses the source of the publish stamp; the default
	// depends on Kind (published_at for polling, record_timestamp for cdc).
	PublishedStamp string `yaml:"published_stamp"`
	// PublishedHeader names the header carrying the relay's send time when
	// PublishedStamp is "header".
	PublishedHeader string `yaml:"published_header"`
	// Stamps are extra stamps, in pipeline order, between commit and
	// publish; each splits commit_to_publish further.
	Stamps []Stamp `yaml:"stamps"`
	// SkewTolerance: a segment negative by less than this is measurement
	// noise, observed as measured, not counted as suspected clock skew.
	// Defaults to 50ms when the publish stamp is published_at (written
	// after the broker's ack, so the record is often read before it),
	// else 0.
	SkewTolerance Duration `yaml:"skew_tolerance"`
}

// Stamp is an extra timestamp carried by a message header.
type Stamp struct {
	Name   string `yaml:"name"`
	Header string `yaml:"header"`
}

// Canary shapes the synthetic rows the prober writes.
type Canary struct {
	// AggregateType is the value written to the route column; the relay
	// routes it to the dedicated canary topic.
	AggregateType string `yaml:"aggregate_type"`
	// Key is the aggregate id (message key) of canary rows.
	Key string `yaml:"key"`
	// EventType is written to the event type column when one is mapped and
	// it is not the route column.
	EventType string `yaml:"event_type"`
	// Schedule is a robfig/cron spec: "@every 10s", "*/15 * * * * *" (seconds field allowed).
	Schedule string `yaml:"schedule"`
	// LostAfter is when a canary that never arrived is declared lost.
	LostAfter Duration `yaml:"lost_after"`
	// DeleteAfterInsert deletes the canary row in its own transaction
	// (CDC table hygiene: Debezium ignores the delete).
	DeleteAfterInsert bool `yaml:"delete_after_insert"`
}

// Kafka is the connection to the canary topic.
type Kafka struct {
	Brokers  []string `yaml:"brokers"`
	Topic    string   `yaml:"topic"`
	ClientID string   `yaml:"client_id"`
	TLS      TLS      `yaml:"tls"`
	SASL     SASL     `yaml:"sasl"`
}

// TLS settings for Kafka.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SASL settings for Kafka.
type SASL struct {
	// Mechanism is "", "plain", "scram-sha-256" or "scram-sha-512".
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  Secret `yaml:"password"`
}

// Budgets maps a segment name to its latency budget.
type Budgets map[string]Duration

// SLO is the objective the canary SLI events are judged against.
type SLO struct {
	// Objective in percent, e.g. 99.9.
	Objective float64  `yaml:"objective"`
	Window    Duration `yaml:"window"`
}

// Owners maps a segment name (or "default") to the team that owns it;
// alerts carry it as the owner label for Alertmanager routing.
type Owners map[string]string

// Watch configures the database and consumer watchers.
type Watch struct {
	Interval                 Duration        `yaml:"interval"`
	LongTransactionThreshold Duration        `yaml:"long_transaction_threshold"`
	ConsumerGroups           []ConsumerGroup `yaml:"consumer_groups"`
	ConnectURL               string          `yaml:"connect_url"`
	Connector                string          `yaml:"connector"`
	// Slot is the logical replication slot a cdc pipeline's connector
	// reads (Debezium's slot.name). The slot watcher, diagnose and the
	// slot alerts then look at this slot only; unset, they take every
	// slot of the database, including other pipelines' and leftovers.
	Slot string `yaml:"slot"`
}

// ConsumerGroup is a business consumer group whose lag is watched.
type ConsumerGroup struct {
	Group string `yaml:"group"`
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

// Defaults.
var (
	DefaultCanary = Canary{
		AggregateType: "outbox-canary",
		Key:           "outbox-canary",
		EventType:     "outbox-canary",
		Schedule:      "@every 10s",
		LostAfter:     Duration(5 * time.Minute),
	}
	DefaultSLO = SLO{Objective: 99.9, Window: Duration(30 * 24 * time.Hour)}
)

const defaultTopicPrefix = "outbox.event."

// Load decodes, defaults and validates a configuration held in memory.
func Load(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty: at least one pipeline is required")
		}
		return nil, fmt.Errorf("parse: %w", err)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
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
	if c.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("instance_id: not set and the host name is unknown (%w); set instance_id", err)
		}
		c.InstanceID = host
	}
	if c.StateDir == "" {
		c.StateDir = "outbox-canary-state"
	}
	c.Alerting.setDefaults()
	for i := range c.Pipelines {
		c.Pipelines[i].setDefaults()
	}
	return nil
}

func (p *Pipeline) setDefaults() {
	if p.Database.ClockOffsetInterval == 0 {
		p.Database.ClockOffsetInterval = Duration(time.Minute)
	}
	o := &p.Outbox
	if o.Table == "" {
		o.Table = "outbox"
	}
	if o.IDGeneration == "" {
		o.IDGeneration = IDFromDatabase
	}
	c := &o.Columns
	setIfEmpty(&c.ID, "id")
	setIfEmpty(&c.Route, "aggregate_type")
	setIfEmpty(&c.Key, "aggregate_id")
	setIfEmpty(&c.Payload, "payload")
	if p.Relay.Kind == "" {
		p.Relay.Kind = RelayPolling
	}
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
	if p.Relay.SkewTolerance == 0 && p.Relay.PublishedStamp == PublishedFromColumn {
		p.Relay.SkewTolerance = Duration(50 * time.Millisecond)
	}
	cn := &p.Canary
	setIfEmpty(&cn.AggregateType, DefaultCanary.AggregateType)
	setIfEmpty(&cn.Key, DefaultCanary.Key)
	setIfEmpty(&cn.EventType, DefaultCanary.EventType)
	setIfEmpty(&cn.Schedule, DefaultCanary.Schedule)
	if cn.LostAfter == 0 {
		cn.LostAfter = DefaultCanary.LostAfter
	}
	setIfEmpty(&p.Kafka.Topic, defaultTopicPrefix+cn.AggregateType)
	setIfEmpty(&p.Kafka.ClientID, "outbox-canary")
	if p.SLO.Objective == 0 {
		p.SLO.Objective = DefaultSLO.Objective
	}
	if p.SLO.Window == 0 {
		p.SLO.Window = DefaultSLO.Window
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

var (
	pipelineNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_-]*$`)
	stampNameRE    = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	// A plain or schema-qualified SQL identifier; it is quoted anyway, this
	// only rejects what is surely a mistake (quotes, spaces, empty parts).
	identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)
	// PostgreSQL's own rule for replication slot names (lower-case
	// letters, digits and _, at most NAMEDATALEN-1 bytes): a name it would
	// refuse can never match a slot.
	slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
)

// Validate checks a defaulted configuration; errors name the field path.
func (c *Config) Validate() error {
	if len(c.Pipelines) == 0 {
		return errors.New("pipelines: at least one pipeline is required")
	}
	if strings.ContainsAny(c.InstanceID, " \t\n") {
		return fmt.Errorf("instance_id: %q must not contain whitespace", c.InstanceID)
	}
	if err := c.SigningKey.validate("signing_key"); err != nil {
		return err
	}
	if c.SigningKey.IsZero() {
		return errors.New("signing_key: required (set env: NAME or file: PATH); canaries are signed so a forged message cannot fake health")
	}
	seen := map[string]bool{}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		path := fmt.Sprintf("pipelines[%d]", i)
		if p.Name != "" {
			path = fmt.Sprintf("pipelines[%d] %q", i, p.Name)
		}
		if seen[p.Name] && p.Name != "" {
			return fmt.Errorf("%s: name: duplicate pipeline name", path)
		}
		seen[p.Name] = true
		if err := p.validate(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := c.Alerting.validate(); err != nil {
		return fmt.Errorf("alerting: %w", err)
	}
	return nil
}

func (p *Pipeline) validate() error {
	if p.Name == "" {
		return errors.New("name: required")
	}
	if !pipelineNameRE.MatchString(p.Name) {
		return fmt.Errorf("name: %q must match %s (it becomes a label value and a rule name)", p.Name, pipelineNameRE)
	}
	if p.Database.DSN.IsZero() {
		return errors.New("database.dsn: required (value, env or file)")
	}
	if err := p.Database.DSN.validate("database.dsn"); err != nil {
		return err
	}
	if p.Database.ClockOffsetInterval < 0 {
		return errors.New("database.clock_offset_interval: must be positive")
	}
	if err := p.validateOutbox(); err != nil {
		return err
	}
	if err := p.validateRelay(); err != nil {
		return err
	}
	if err := p.validateCanary(); err != nil {
		return err
	}
	if err := p.validateKafka(); err != nil {
		return err
	}
	if err := p.validateBudgets(); err != nil {
		return err
	}
	if !(p.SLO.Objective > 0 && p.SLO.Objective < 100) {
		return fmt.Errorf("slo.objective: %v must be a percentage strictly between 0 and 100, e.g. 99.9", p.SLO.Objective)
	}
	if p.SLO.Window <= 0 {
		return errors.New("slo.window: must be positive, e.g. 30d")
	}
	for seg, owner := range p.Owners {
		if seg != "default" && !p.knownSegment(seg) {
			return fmt.Errorf("owners.%s: unknown segment; known: default, %s", seg, strings.Join(p.allSegments(), ", "))
		}
		if owner == "" {
			return fmt.Errorf("owners.%s: empty owner", seg)
		}
	}
	for i, g := range p.Watch.ConsumerGroups {
		if g.Group == "" || g.Topic == "" {
			return fmt.Errorf("watch.consumer_groups[%d]: group and topic are both required", i)
		}
	}
	if p.Watch.Interval < 0 || p.Watch.LongTransactionThreshold < 0 {
		return errors.New("watch: interval and long_transaction_threshold must be positive")
	}
	if s := p.Watch.Slot; s != "" {
		if p.Relay.Kind != RelayCDC {
			return errors.New("watch.slot: only for cdc relays (a polling relay reads the table, not a replication slot)")
		}
		if !slotNameRE.MatchString(s) {
			return fmt.Errorf("watch.slot: %q is not a replication slot name (lower-case letters, digits and _, at most 63)", s)
		}
	}
	return nil
}

func (p *Pipeline) validateOutbox() error {
	for _, part := range strings.Split(p.Outbox.Table, ".") {
		if !identifierRE.MatchString(part) {
			return fmt.Errorf("outbox.table: %q is not a table name (schema.table or table, letters, digits and _)", p.Outbox.Table)
		}
	}
	if n := strings.Count(p.Outbox.Table, "."); n > 1 {
		return fmt.Errorf("outbox.table: %q has more than one dot", p.Outbox.Table)
	}
	c := p.Outbox.Columns
	cols := []struct{ name, value string }{
		{"id", c.ID}, {"route", c.Route}, {"key", c.Key}, {"payload", c.Payload},
		{"event_type", c.EventType}, {"created_at", c.CreatedAt}, {"published_at", c.PublishedAt},
	}
	for _, col := range cols {
		if col.value != "" && !identifierRE.MatchString(col.value) {
			return fmt.Errorf("outbox.columns.%s: %q is not a column name (letters, digits and _)", col.name, col.value)
		}
	}
	switch p.Outbox.IDGeneration {
	case IDFromDatabase, IDUUID:
	default:
		return fmt.Errorf("outbox.id_generation: %q must be %q or %q", p.Outbox.IDGeneration, IDFromDatabase, IDUUID)
	}
	return nil
}

func (p *Pipeline) validateRelay() error {
	r := p.Relay
	switch r.Kind {
	case RelayPolling, RelayCDC:
	default:
		return fmt.Errorf("relay.kind: %q must be %q or %q", r.Kind, RelayPolling, RelayCDC)
	}
	switch r.PublishedStamp {
	case PublishedFromColumn:
		if r.Kind != RelayPolling {
			return errors.New("relay.published_stamp: published_at is written only by polling relays; use header or record_timestamp for cdc")
		}
		if p.Outbox.Columns.PublishedAt == "" {
			return errors.New("outbox.columns.published_at: required when relay.published_stamp is published_at")
		}
	case PublishedFromHeader:
		if r.PublishedHeader == "" {
			return errors.New("relay.published_header: required when relay.published_stamp is header")
		}
	case PublishedFromRecordTimestamp:
	default:
		return fmt.Errorf("relay.published_stamp: %q must be published_at, header or record_timestamp", r.PublishedStamp)
	}
	names := map[string]bool{StampCommit: true, StampPublish: true, StampConsume: true}
	for i, s := range r.Stamps {
		if !stampNameRE.MatchString(s.Name) {
			return fmt.Errorf("relay.stamps[%d].name: %q must be lower-case letters and digits", i, s.Name)
		}
		if names[s.Name] {
			return fmt.Errorf("relay.stamps[%d].name: %q is already a stamp", i, s.Name)
		}
		names[s.Name] = true
		if s.Header == "" {
			return fmt.Errorf("relay.stamps[%d].header: required", i)
		}
	}
	return nil
}

func (p *Pipeline) validateCanary() error {
	c := p.Canary
	if _, err := cronParser.Parse(c.Schedule); err != nil {
		return fmt.Errorf("canary.schedule: %q is not a cron spec (%w); write e.g. \"@every 10s\" or \"*/15 * * * * *\"", c.Schedule, err)
	}
	if c.LostAfter <= 0 {
		return errors.New("canary.lost_after: must be positive")
	}
	if b, ok := p.Budgets[SegmentEndToEnd]; ok && c.LostAfter <= b {
		return fmt.Errorf("canary.lost_after: %s must be longer than budgets.end_to_end (%s)", c.LostAfter, b)
	}
	if c.DeleteAfterInsert && p.Relay.Kind == RelayPolling {
		return errors.New("canary.delete_after_insert: only for cdc relays (a polling relay never sees a deleted row)")
	}
	return nil
}

// cronParser accepts an optional seconds field, so sub-minute schedules can
// be written either as "@every 10s" or as a six-field spec.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses a canary schedule as validation accepted it.
func ParseSchedule(spec string) (cron.Schedule, error) { return cronParser.Parse(spec) }

func (p *Pipeline) validateKafka() error {
	k := p.Kafka
	if len(k.Brokers) == 0 {
		return errors.New("kafka.brokers: at least one host:port is required")
	}
	for i, b := range k.Brokers {
		if !strings.Contains(b, ":") {
			return fmt.Errorf("kafka.brokers[%d]: %q must be host:port", i, b)
		}
	}
	switch k.SASL.Mechanism {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.SASL.Username == "" {
			return errors.New("kafka.sasl.username: required with a SASL mechanism")
		}
		if err := k.SASL.Password.validate("kafka.sasl.password"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("kafka.sasl.mechanism: %q must be plain, scram-sha-256 or scram-sha-512", k.SASL.Mechanism)
	}
	if (k.TLS.CertFile == "") != (k.TLS.KeyFile == "") {
		return errors.New("kafka.tls: cert_file and key_file go together")
	}
	return nil
}

func (p *Pipeline) validateBudgets() error {
	if _, ok := p.Budgets[SegmentEndToEnd]; !ok {
		return errors.New("budgets.end_to_end: required")
	}
	for _, seg := range sortedKeys(p.Budgets) {
		if !p.knownSegment(seg) {
			return fmt.Errorf("budgets.%s: unknown segment; known: %s", seg, strings.Join(p.allSegments(), ", "))
		}
		if p.Budgets[seg] <= 0 {
			return fmt.Errorf("budgets.%s: must be positive", seg)
		}
	}
	return nil
}

func (p *Pipeline) allSegments() []string {
	return append([]string{SegmentInsertToCommit}, p.Segments()...)
}

func (p *Pipeline) knownSegment(seg string) bool {
	for _, s := range p.allSegments() {
		if s == seg {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
