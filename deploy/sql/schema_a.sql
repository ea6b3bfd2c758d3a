-- Seed schema A: an outbox table routed by aggregate type.
-- The database clock stamps created_at inside the business transaction; a
-- polling relay sets published_at after the broker acknowledged the row.
-- The table name is literally "outbox": load this file into its own database.
CREATE TABLE outbox (
  id             BIGSERIAL PRIMARY KEY,           -- monotonically assigned
  aggregate_type TEXT        NOT NULL,            -- routing key
  aggregate_id   TEXT        NOT NULL,            -- ordering key
  payload        JSONB       NOT NULL,            -- serialized event
  -- now() is the transaction start time on the DB server, not the app host
  created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  published_at   TIMESTAMPTZ NULL                 -- set by a polling relay after send
);

-- Partial index keeps the 'unpublished' lookup cheap as the table grows.
CREATE INDEX outbox_unpublished_idx
  ON outbox (created_at)
  WHERE published_at IS NULL;
