-- Debezium's default outbox table for MySQL and MariaDB, as its outbox event
-- router expects it (route by aggregatetype to outbox.event.<aggregatetype>,
-- key = aggregateid, header "id" = id). id is the UUID as text: MySQL has no
-- uuid type (MariaDB's, 10.7+, is not MySQL's). No published_at: log capture
-- reads the binlog and never writes back to the row.
-- The table name is literally "outbox": load this file into its own database.
CREATE TABLE outbox (
  id            CHAR(36)     NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(255) NOT NULL,
  aggregateid   VARCHAR(255) NOT NULL,
  type          VARCHAR(255) NOT NULL,
  payload       JSON
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
