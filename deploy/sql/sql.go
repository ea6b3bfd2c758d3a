// Package outboxsql embeds the outbox table schemas that outbox-canary supports,
// so tests and the demo create exactly the tables that the docs describe.
//
// Each schema creates a table named literally "outbox" in the current search
// path; load it into a fresh database (or a fresh schema set as search_path).
package outboxsql

import _ "embed"

// SchemaA is seed schema A: id bigserial, aggregate_type (routing),
// aggregate_id (key), payload jsonb, created_at (database clock),
// published_at (set by a polling relay), and a partial index on created_at
// over unpublished rows.
//
//go:embed schema_a.sql
var SchemaA string

// SchemaB is seed schema B: id bigserial, aggregate_id (key), event_type
// (routing), payload jsonb, created_at, published_at, and a partial index on
// id over unpublished rows.
//
//go:embed schema_b.sql
var SchemaB string

// DebeziumOutbox is Debezium's default outbox table for its outbox event
// router: id uuid, aggregatetype, aggregateid, type, payload jsonb. It has no
// published_at column because log capture does not write back to the row.
//
//go:embed debezium_outbox.sql
var DebeziumOutbox string
