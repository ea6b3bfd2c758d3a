-- Debezium's default outbox table, as its outbox event router expects it
-- (route by aggregatetype to outbox.event.<aggregatetype>, key = aggregateid,
-- header "id" = id). There is no published_at: log capture never writes back
-- to the row, so applications may delete each row in the transaction that
-- inserted it.
-- The table name is literally "outbox": load this file into its own database.
CREATE TABLE outbox (
  id            uuid         PRIMARY KEY,
  aggregatetype varchar(255) NOT NULL,
  aggregateid   varchar(255) NOT NULL,
  type          varchar(255) NOT NULL,
  payload       jsonb
);
