// Package outboxsql embeds the outbox table schemas that outbox-canary supports,
// so tests and the demo create exactly the tables that the docs describe.
//
// Each schema creates a table named literally "outbox" in the current search
// path; load it into a fresh database (or a fresh schema set as search_path).
// The MySQL* schemas are the same tables for MySQL 8.0+ and MariaDB 10.6+,
// each one statement.
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

// MySQLSchemaA is seed schema A for MySQL and MariaDB: id BIGINT
// AUTO_INCREMENT, payload JSON, created_at TIMESTAMP(6) DEFAULT
// CURRENT_TIMESTAMP(6), published_at TIMESTAMP(6), and, as MySQL has no
// partial index, an index on (published_at, created_at) whose NULL prefix
// holds the backlog.
//
//go:embed mysql_schema_a.sql
var MySQLSchemaA string

// MySQLSchemaB is seed schema B for MySQL and MariaDB, with its index on
// (published_at, id).
//
//go:embed mysql_schema_b.sql
var MySQLSchemaB string

// MySQLDebeziumOutbox is Debezium's default outbox table for MySQL and
// MariaDB: id CHAR(36), aggregatetype, aggregateid, type, payload JSON.
//
//go:embed mysql_debezium_outbox.sql
var MySQLDebeziumOutbox string
