package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

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

// Validate checks a defaulted configuration and returns every problem
// found as Problems (nil when there is none). Load calls it; a Config
// built in code can call it too (its problems then carry no line).
//
// An inline database.dsn is parsed here; secrets read from the
// environment or files are checked by CheckSecrets.
func (c *Config) Validate() error { return c.validate().err() }

// validator collects the problems of one configuration.
type validator struct {
	pos      positions
	problems Problems
}

func (v *validator) add(path, pipeline, format string, args ...any) {
	v.problems = append(v.problems, Problem{
		Line: v.pos.line(path), Path: path, Message: fmt.Sprintf(format, args...), pipeline: pipeline,
	})
}

// in is the validator of one pipeline: paths are relative to it.
type in struct {
	v    *validator
	p    *Pipeline
	base string
}

func (c in) add(field, format string, args ...any) {
	c.v.add(joinPath(c.base, field), c.p.Name, format, args...)
}

func (c *Config) validate() Problems {
	v := &validator{pos: c.pos}
	if len(c.Pipelines) == 0 {
		v.add("pipelines", "", "at least one pipeline is required")
	}
	if strings.ContainsAny(c.InstanceID, " \t\n") {
		v.add("instance_id", "", "%q must not contain whitespace", c.InstanceID)
	}
	switch {
	case c.SigningKey.IsZero():
		v.add("signing_key", "", "required (set env: NAME or file: PATH); canaries are signed so a forged message cannot fake health")
	case c.SigningKey.sources() > 1:
		v.add("signing_key", "", "set only one of value, env and file")
	}
	for i, k := range c.PreviousSigningKeys {
		switch at := fmt.Sprintf("previous_signing_keys[%d]", i); {
		case k.IsZero():
			v.add(at, "", "empty: set value, env or file, or remove the entry")
		case k.sources() > 1:
			v.add(at, "", "set only one of value, env and file")
		}
	}
	first := map[string]int{}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		pv := in{v: v, p: p, base: fmt.Sprintf("pipelines[%d]", i)}
		if j, dup := first[p.Name]; dup && p.Name != "" {
			pv.add("name", "duplicate pipeline name (also pipelines[%d])", j)
		} else {
			first[p.Name] = i
		}
		pv.pipeline()
	}
	c.Alerting.validate(v)
	return v.problems
}

func (c in) pipeline() {
	p := c.p
	switch {
	case p.Name == "":
		c.add("name", "required")
	case !pipelineNameRE.MatchString(p.Name):
		c.add("name", "%q must match %s (it becomes a label value and a rule name)", p.Name, pipelineNameRE)
	}
	c.database()
	c.outbox()
	c.relay()
	c.canary()
	c.kafka()
	c.budgets()
	if !(p.SLO.Objective > 0 && p.SLO.Objective < 100) {
		c.add("slo.objective", "%v must be a percentage strictly between 0 and 100, e.g. 99.9", p.SLO.Objective)
	}
	if p.SLO.Window <= 0 {
		c.add("slo.window", "must be positive, e.g. 30d")
	}
	for _, seg := range slices.Sorted(maps.Keys(p.Owners)) {
		if seg != "default" && !p.knownSegment(seg) {
			c.add("owners."+seg, "unknown segment; known: default, %s", strings.Join(p.allSegments(), ", "))
		}
		if p.Owners[seg] == "" {
			c.add("owners."+seg, "empty owner")
		}
	}
	c.watch()
}

func (c in) database() {
	dsn := c.p.Database.DSN
	switch {
	case dsn.IsZero():
		c.add("database.dsn", "required (value, env or file)")
	case dsn.sources() > 1:
		c.add("database.dsn", "set only one of value, env and file")
	case dsn.IsInline():
		// An inline DSN is checked now, as run and check would parse it;
		// one from env or file waits for CheckSecrets.
		if err := c.p.Database.checkDSN(); err != nil {
			c.add("database.dsn", "%s", err)
		}
	}
	switch c.p.Database.Kind {
	case "", KindPostgres, KindMySQL:
	default:
		c.add("database.kind", "%q must be %q or %q (or empty: from the dsn)", c.p.Database.Kind, KindPostgres, KindMySQL)
	}
	if c.p.Database.ClockOffsetInterval < 0 {
		c.add("database.clock_offset_interval", "must be positive")
	}
}

func (c in) outbox() {
	o := c.p.Outbox
	for _, part := range strings.Split(o.Table, ".") {
		if !identifierRE.MatchString(part) {
			c.add("outbox.table", "%q is not a table name (schema.table or table, letters, digits and _)", o.Table)
			break
		}
	}
	if strings.Count(o.Table, ".") > 1 {
		c.add("outbox.table", "%q has more than one dot", o.Table)
	}
	cols := o.Columns
	for _, col := range []struct{ name, value string }{
		{"id", cols.ID}, {"route", cols.Route}, {"key", cols.Key}, {"payload", cols.Payload},
		{"event_type", cols.EventType}, {"created_at", cols.CreatedAt}, {"published_at", cols.PublishedAt},
	} {
		if col.value != "" && !identifierRE.MatchString(col.value) {
			c.add("outbox.columns."+col.name, "%q is not a column name (letters, digits and _)", col.value)
		}
	}
	switch o.IDGeneration {
	case IDFromDatabase, IDUUID:
	default:
		c.add("outbox.id_generation", "%q must be %q or %q", o.IDGeneration, IDFromDatabase, IDUUID)
	}
}

func (c in) relay() {
	p := c.p
	r := p.Relay
	switch r.Kind {
	case RelayPolling, RelayCDC:
	default:
		c.add("relay.kind", "%q must be %q or %q", r.Kind, RelayPolling, RelayCDC)
	}
	switch r.PublishedStamp {
	case PublishedFromColumn:
		if r.Kind == RelayCDC {
			c.add("relay.published_stamp", "published_at is written only by polling relays; use header or record_timestamp for cdc")
		} else if p.Outbox.Columns.PublishedAt == "" {
			c.add("outbox.columns.published_at", "required when relay.published_stamp is published_at")
		}
	case PublishedFromHeader:
		if r.PublishedHeader == "" {
			c.add("relay.published_header", "required when relay.published_stamp is header")
		}
	case PublishedFromRecordTimestamp:
	default:
		c.add("relay.published_stamp", "%q must be published_at, header or record_timestamp", r.PublishedStamp)
	}
	if r.SkewTolerance < 0 {
		c.add("relay.skew_tolerance", "must not be negative")
	}
	if r.MaxClockSkew <= r.SkewTolerance {
		c.add("relay.max_clock_skew", "%s must be longer than relay.skew_tolerance (%s)", r.MaxClockSkew, r.SkewTolerance)
	}
	names := map[string]bool{StampCommit: true, StampPublish: true, StampConsume: true}
	for i, s := range r.Stamps {
		at := fmt.Sprintf("relay.stamps[%d]", i)
		switch {
		case !stampNameRE.MatchString(s.Name):
			c.add(at+".name", "%q must be lower-case letters and digits", s.Name)
		case names[s.Name]:
			c.add(at+".name", "%q is already a stamp", s.Name)
		}
		names[s.Name] = true
		if s.Header == "" {
			c.add(at+".header", "required")
		}
	}
}

func (c in) canary() {
	p := c.p
	cn := p.Canary
	if _, err := ScheduleInterval(cn.Schedule); err != nil {
		c.add("canary.schedule", "%s", err)
	}
	if cn.LostAfter <= 0 {
		c.add("canary.lost_after", "must be positive")
	} else if b, ok := p.Budgets[SegmentEndToEnd]; ok && cn.LostAfter <= b {
		c.add("canary.lost_after", "%s must be longer than budgets.end_to_end (%s)", cn.LostAfter, b)
	}
	if cn.DeleteAfterInsert && p.Relay.Kind == RelayPolling {
		c.add("canary.delete_after_insert", "only for cdc relays (a polling relay never sees a deleted row)")
	}
}

func (c in) kafka() {
	k := c.p.Kafka
	if len(k.Brokers) == 0 {
		c.add("kafka.brokers", "at least one host:port is required")
	}
	for i, b := range k.Brokers {
		if !strings.Contains(b, ":") {
			c.add(fmt.Sprintf("kafka.brokers[%d]", i), "%q must be host:port", b)
		}
	}
	switch k.SASL.Mechanism {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.SASL.Username == "" {
			c.add("kafka.sasl.username", "required with a SASL mechanism")
		}
		if k.SASL.Password.IsZero() {
			c.add("kafka.sasl.password", "required with a SASL mechanism (value, env or file)")
		}
	default:
		c.add("kafka.sasl.mechanism", "%q must be plain, scram-sha-256 or scram-sha-512", k.SASL.Mechanism)
	}
	if k.SASL.Password.sources() > 1 {
		c.add("kafka.sasl.password", "set only one of value, env and file")
	}
	if (k.TLS.CertFile == "") != (k.TLS.KeyFile == "") {
		c.add("kafka.tls", "cert_file and key_file go together")
	}
}

func (c in) budgets() {
	p := c.p
	if _, ok := p.Budgets[SegmentEndToEnd]; !ok {
		c.add("budgets.end_to_end", "required")
	}
	for _, seg := range slices.Sorted(maps.Keys(p.Budgets)) {
		if !p.knownSegment(seg) {
			c.add("budgets."+seg, "unknown segment; known: %s", strings.Join(p.allSegments(), ", "))
		}
		if p.Budgets[seg] <= 0 {
			c.add("budgets."+seg, "must be positive")
		}
	}
}

func (c in) watch() {
	w := c.p.Watch
	for i, g := range w.ConsumerGroups {
		if g.Group == "" || g.Topic == "" {
			c.add(fmt.Sprintf("watch.consumer_groups[%d]", i), "group and topic are both required")
		}
	}
	if w.Interval < 0 {
		c.add("watch.interval", "must be positive")
	}
	if w.LongTransactionThreshold < 0 {
		c.add("watch.long_transaction_threshold", "must be positive")
	}
	if s := w.Slot; s != "" {
		if c.p.Relay.Kind != RelayCDC {
			c.add("watch.slot", "only for cdc relays (a polling relay reads the table, not a replication slot)")
		} else if !slotNameRE.MatchString(s) {
			c.add("watch.slot", "%q is not a replication slot name (lower-case letters, digits and _, at most 63)", s)
		}
	}
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
