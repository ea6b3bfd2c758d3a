-- Seed schema B: an outbox table with a monotonic sequence and an event type
-- (no aggregate type: a relay routes by event_type).
-- The table name is literally "outbox": load this file into its own database.
CREATE TABLE outbox (
  id            bigserial PRIMARY KEY,
  aggregate_id  text        NOT NULL,
  event_type    text        NOT NULL,
  payload       jsonb       NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  published_at  timestamptz
);

-- Partial index holds only the backlog, so each poll stays cheap.
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
