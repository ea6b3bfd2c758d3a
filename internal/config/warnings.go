package config

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Warnings lists what a valid configuration accepts but almost surely does
// not mean, in file order: settings that are ignored, and budgets that can
// never be the one a canary breaks. The validate command prints them; run
// logs them at start.
func (c *Config) Warnings() []Warning {
	var out []Warning
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		base := fmt.Sprintf("pipelines[%d]", i)
		add := func(field, format string, args ...any) {
			path := joinPath(base, field)
			out = append(out, Warning{Line: c.pos.line(path), Path: path, Message: fmt.Sprintf(format, args...), pipeline: p.Name})
		}
		written := func(field string) bool { return c.pos.has(joinPath(base, field)) }

		if e2e, ok := p.Budgets[SegmentEndToEnd]; ok {
			// Every segment but insert_to_commit lies inside end_to_end
			// (commit to consume): a canary over such a budget is over
			// end_to_end's too.
			for _, seg := range p.Segments() {
				if b, ok := p.Budgets[seg]; ok && seg != SegmentEndToEnd && b > e2e {
					add("budgets."+seg, "%s is longer than budgets.end_to_end (%s), which contains this segment: every canary over it is already over the end-to-end budget, so its SLO can never be the one that fires first", b, e2e)
				}
			}
		}
		if spec := strings.TrimSpace(p.Canary.Schedule); strings.HasPrefix(spec, "@every ") {
			if want, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(spec, "@every "))); err == nil {
				if got, err := ScheduleInterval(p.Canary.Schedule); err == nil && got != want {
					add("canary.schedule", "%q fires every %s: the cron library rounds down to whole seconds (at least 1s)", p.Canary.Schedule, got)
				}
			}
		}
		tls := p.Kafka.TLS
		if !tls.Enabled {
			for _, f := range []string{"ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify"} {
				if written("kafka.tls." + f) {
					add("kafka.tls."+f, "ignored: kafka.tls.enabled is not true, so the prober connects without TLS")
				}
			}
		}
		if tls.Enabled && tls.InsecureSkipVerify {
			ignored := ""
			if tls.CAFile != "" || tls.ServerName != "" {
				ignored = " (kafka.tls.ca_file and server_name are not used)"
			}
			add("kafka.tls.insecure_skip_verify", "the prober accepts any broker certificate%s: anyone on the network path can read and forge canaries; for tests only", ignored)
		}
		if p.Kafka.SASL.Mechanism == "plain" && !tls.Enabled {
			add("kafka.sasl.mechanism", "plain sends the password as it is, and kafka.tls.enabled is not true: anyone on the network path can read it; use TLS (a SASL_SSL listener) or scram-sha-512")
		}
		if p.Kafka.SASL.Mechanism == "" {
			for _, f := range []string{"username", "password"} {
				if written("kafka.sasl." + f) {
					add("kafka.sasl."+f, "ignored: kafka.sasl.mechanism is not set, so the prober connects without SASL")
				}
			}
		}
		if _, declared := p.Database.DeclaredFamily(); !declared && p.Relay.Kind == RelayCDC {
			// rules and dashboards read no secret: only database.kind
			// tells them the binlog, not a replication slot, is captured.
			if kind, err := p.Database.Family(); err == nil && kind == KindMySQL {
				add("database.dsn", "a MySQL DSN from env or file, and database.kind is not set: `rules` and `dashboards`, which read no secret, take the pipeline for PostgreSQL and generate replication slot alerts and panels instead of the binlog's; set database.kind: mysql")
			}
		}
		if p.Relay.PublishedHeader != "" && p.Relay.PublishedStamp != PublishedFromHeader {
			add("relay.published_header", "ignored: relay.published_stamp is %s, not header", p.Relay.PublishedStamp)
		}
		if written("canary.event_type") {
			cols := p.Outbox.Columns
			switch {
			case cols.EventType == "":
				add("canary.event_type", "ignored: outbox.columns.event_type is not set, so no event type is written")
			case cols.EventType == cols.Route:
				add("canary.event_type", "ignored: the event type column is the route column, which gets canary.aggregate_type")
			}
		}
		w := p.Watch
		switch {
		case w.ConnectURL != "" && w.Connector == "":
			add("watch.connect_url", "ignored: watch.connector is not set, so no connector is watched")
		case w.Connector != "" && w.ConnectURL == "":
			add("watch.connector", "ignored: watch.connect_url is not set, so the connector is not watched")
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}
