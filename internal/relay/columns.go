package relay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-canary/outbox-canary/internal/postgres"
)

// Columns maps the relay onto one outbox table. Every name is an identifier,
// quoted by the relay, never SQL text. Empty fields take their value from
// SchemaAColumns, except EventType, which stays unset unless given.
type Columns struct {
	// Table is the outbox table, optionally schema-qualified ("public.outbox").
	// A dot always separates schema and table.
	Table string
	// ID is the monotonically assigned integer key (bigserial). Rows are
	// claimed in its order, and its value is sent as the "id" header.
	ID string
	// Route selects the topic through Config.TopicTemplate ({{.Route}}):
	// aggregate_type in seed schema A, event_type in seed schema B.
	Route string
	// Key becomes the Kafka message key (the aggregate id), so that one
	// aggregate's events stay on one partition, in order.
	Key string
	// Payload becomes the Kafka message value (jsonb text, or bytea as is).
	Payload string
	// CreatedAt is the database-stamped creation time, sent as the
	// "outbox-created-at" header.
	CreatedAt string
	// PublishedAt is NULL until the relay marks the row published; the relay
	// claims only rows where it is NULL.
	PublishedAt string
	// EventType, when set, is sent as the "event-type" header and is
	// available to the topic template as {{.EventType}}.
	EventType string
}

// SchemaAColumns returns the mapping for seed schema A (deploy/sql/schema_a.sql):
// routed by aggregate_type, keyed by aggregate_id.
func SchemaAColumns() Columns {
	return Columns{
		Table:       "outbox",
		ID:          "id",
		Route:       "aggregate_type",
		Key:         "aggregate_id",
		Payload:     "payload",
		CreatedAt:   "created_at",
		PublishedAt: "published_at",
	}
}

// SchemaBColumns returns the mapping for seed schema B (deploy/sql/schema_b.sql),
// which has no aggregate type: routed by event_type, keyed by aggregate_id,
// with event_type also sent as the "event-type" header.
func SchemaBColumns() Columns {
	c := SchemaAColumns()
	c.Route = "event_type"
	c.EventType = "event_type"
	return c
}

// withDefaults fills empty fields from SchemaAColumns (whose EventType is
// empty, so EventType stays unset unless given).
func (c Columns) withDefaults() Columns { return c.Fill(SchemaAColumns()) }

// Fill returns c with every empty field, EventType included, taken from
// preset: a preset (SchemaAColumns, SchemaBColumns) with single names
// overridden.
func (c Columns) Fill(preset Columns) Columns {
	for _, f := range []struct{ v, def *string }{
		{&c.Table, &preset.Table}, {&c.ID, &preset.ID}, {&c.Route, &preset.Route}, {&c.Key, &preset.Key},
		{&c.Payload, &preset.Payload}, {&c.CreatedAt, &preset.CreatedAt}, {&c.PublishedAt, &preset.PublishedAt},
		{&c.EventType, &preset.EventType},
	} {
		if *f.v == "" {
			*f.v = *f.def
		}
	}
	return c
}

// checkTable refuses a table name the quoting would turn into nonsense.
func checkTable(table string) error {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return fmt.Errorf("table %q: want table or schema.table", table)
	}
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("table %q: empty name part", table)
		}
	}
	return nil
}

// queries holds the SQL that one relay runs, built once from its Columns.
type queries struct {
	// claim takes $1 = batch size and returns id, route, key, payload,
	// created_at and, when configured, event_type.
	claim string
	// finish takes $1 = []int64 ids and marks them published (or deletes them).
	finish string
}

func buildQueries(c Columns, deletePublished bool) (queries, error) {
	if err := checkTable(c.Table); err != nil {
		return queries{}, err
	}
	for _, col := range []struct{ field, name string }{
		{"ID", c.ID}, {"Route", c.Route}, {"Key", c.Key}, {"Payload", c.Payload},
		{"CreatedAt", c.CreatedAt}, {"PublishedAt", c.PublishedAt},
	} {
		if strings.TrimSpace(col.name) == "" {
			return queries{}, fmt.Errorf("column %s: empty name", col.field)
		}
	}
	if c.EventType != "" && strings.TrimSpace(c.EventType) == "" {
		return queries{}, errors.New("column EventType: blank name")
	}
	q := postgres.QuoteIdent
	t, id, published := postgres.QuoteTable(c.Table), q(c.ID), q(c.PublishedAt)

	// Text casts let the relay read varchar, uuid or text keys alike; the
	// payload is read as bytes (jsonb arrives as its JSON text).
	sel := fmt.Sprintf("SELECT %s, %s::text, %s::text, %s, %s", id, q(c.Route), q(c.Key), q(c.Payload), q(c.CreatedAt))
	if c.EventType != "" {
		sel += fmt.Sprintf(", %s::text", q(c.EventType))
	}
	claim := fmt.Sprintf("%s FROM %s WHERE %s IS NULL ORDER BY %s LIMIT $1 FOR UPDATE SKIP LOCKED", sel, t, published, id)

	finish := fmt.Sprintf("UPDATE %s SET %s = clock_timestamp() WHERE %s = ANY($1)", t, published, id)
	if deletePublished {
		finish = fmt.Sprintf("DELETE FROM %s WHERE %s = ANY($1)", t, id)
	}
	return queries{claim: claim, finish: finish}, nil
}
