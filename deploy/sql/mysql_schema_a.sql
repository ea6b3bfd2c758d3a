-- Seed schema A for MySQL 8.0+ and MariaDB 10.6+: an outbox table routed by
-- aggregate type. The database clock stamps created_at: CURRENT_TIMESTAMP(6)
-- is NOW(6), the start of the INSERT statement (PostgreSQL's now() is the
-- start of the transaction); a polling relay sets published_at after the
-- broker acknowledged the row. TIMESTAMP columns are stored in UTC and read
-- in the session's time zone: outbox-canary's sessions use UTC.
-- The table name is literally "outbox": load this file into its own database.
CREATE TABLE outbox (
  id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, -- monotonically assigned
  aggregate_type VARCHAR(255) NOT NULL,                  -- routing key
  aggregate_id   VARCHAR(255) NOT NULL,                  -- ordering key
  payload        JSON         NOT NULL,                  -- serialized event
  created_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  published_at   TIMESTAMP(6) NULL DEFAULT NULL,         -- set by a polling relay after send
  -- MySQL has no partial index. An index that leads with published_at
  -- keeps the unpublished rows together at its start (NULL sorts first), so
  -- the 'unpublished' lookup and the oldest unpublished created_at read only
  -- the backlog's entries, however many published rows the table keeps.
  KEY outbox_unpublished_idx (published_at, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
