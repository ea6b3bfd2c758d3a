-- Seed schema B for MySQL 8.0+ and MariaDB 10.6+: an outbox table with a
-- monotonic sequence and an event type (no aggregate type: a relay routes
-- by event_type). See mysql_schema_a.sql for the clock and the index.
-- The table name is literally "outbox": load this file into its own database.
CREATE TABLE outbox (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  aggregate_id  VARCHAR(255) NOT NULL,
  event_type    VARCHAR(255) NOT NULL,
  payload       JSON         NOT NULL,
  created_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  published_at  TIMESTAMP(6) NULL DEFAULT NULL,
  -- The backlog in id order, at the start of the index (see schema A).
  KEY outbox_unpublished_idx (published_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
