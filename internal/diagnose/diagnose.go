// Package diagnose walks the outbox runbook for a pipeline, source to
// consumer, and names the first unhealthy stage with its evidence and the
// next thing to check: what `outbox-canary diagnose` prints on call.
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/explain"
	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/lint"
	"github.com/outbox-canary/outbox-canary/internal/mysql"
	"github.com/outbox-canary/outbox-canary/internal/outboxdb"
	"github.com/outbox-canary/outbox-canary/internal/postgres"
	"github.com/outbox-canary/outbox-canary/slo"
)

// Stages of the runbook that Diagnose walks, source to consumer (the seed
// article's order: downstream symptoms usually have upstream causes).
const (
	StageCommit = "commit"
	StageRelay  = "relay"
	StageSlot   = "replication slot"
	// StageBinlog is the capture log's stage on MySQL and MariaDB, where
	// PostgreSQL's is the replication slot.
	StageBinlog    = "binlog"
	StageBroker    = "broker"
	StageConsumers = "consumers"
)

// Stage statuses.
const (
	StatusOK            = "ok"
	StatusUnhealthy     = "unhealthy"
	StatusNotChecked    = "not_checked"    // an earlier stage is unhealthy
	StatusNotApplicable = "not_applicable" // e.g. the replication slot of a polling relay
	StatusNotConfigured = "not_configured" // the config names nothing to check
	// StatusExplained: the stage looks unhealthy because a later stage is
	// (a relay that cannot publish to brokers that are down).
	StatusExplained = "explained_by_later_stage"
)

// StageResult is one step of the runbook: what was seen (numbers) and, when
// unhealthy, what to check next.
type StageResult struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Healthy bool   `json:"healthy"`
	// Evidence lines, with numbers.
	Evidence []string `json:"evidence,omitempty"`
	NextStep string   `json:"next_step,omitempty"`
}

// Diagnosis is the result of walking the runbook for one pipeline. The walk
// stops at the first unhealthy stage; the later ones are listed as
// not_checked.
type Diagnosis struct {
	Pipeline string `json:"pipeline"`
	Relay    string `json:"relay"`
	Healthy  bool   `json:"healthy"`
	// FirstUnhealthy names the stage to look at, "" when healthy.
	FirstUnhealthy string        `json:"first_unhealthy,omitempty"`
	Stages         []StageResult `json:"stages"`
}

// Options tunes Diagnose. Zero fields take defaults.
type Options struct {
	// Now is the clock for consumer lag ages (default time.Now).
	Now func() time.Time
	// StageTimeout bounds each stage's queries (default 10s), so a server
	// that hangs is reported, not waited on.
	StageTimeout time.Duration
	// MaxRetainedWAL is the WAL a replication slot may hold back before
	// the slot stage is unhealthy (default 1 GiB).
	MaxRetainedWAL int64
	// HTTP is the Kafka Connect client (default: a 5s timeout client),
	// and Prometheus'.
	HTTP *http.Client
	// PrometheusURL is a Prometheus that scrapes the Kafka Connect worker's
	// JMX exporter: a CDC pipeline's relay stage then reads Debezium's own
	// streaming metrics from it (internal/debezium). Empty: not read.
	PrometheusURL string
}

// Probes are the connections Diagnose uses. A nil Outbox or Kafka makes
// the stages that need them unhealthy ("cannot be checked"), with DBError
// or KafkaError, when set, as the reason.
type Probes struct {
	// Outbox is the outbox's database through the family seam: the
	// backlog, open transactions and capture log every family has.
	Outbox outboxdb.DB
	// DB is the same database when it is PostgreSQL, for what only
	// PostgreSQL shows (a session's pg_stat_activity row, replication
	// slots, the connector's slot and publication); nil on MySQL.
	DB         postgres.Querier
	DBError    error
	Kafka      *kafka.Client
	KafkaError error
	HTTP       *http.Client
}

// Next steps, from the seed article's runbook.
const (
	nextDatabase = "check the DSN, the network path and that the database is up (pg_isready -d ...); " +
		"nothing upstream of Kafka can be judged without it"
	nextCommitMySQL = "find the session: SELECT trx_id, trx_state, trx_started, trx_query FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = %d " +
		"(and SHOW PROCESSLIST for its user and host); have its owner commit or roll back, or end it with KILL %d. Rows it wrote stay invisible " +
		"to the relay until it commits: no relay change can publish them"
	nextBinlogPurged = "the connector cannot resume: stop it, reset its offsets (DELETE /connectors/<name>/offsets) and resume it; re-emit the events of the gap " +
		"from the service's tables (docs/alerts.md#outboxbinlogunreadfileatrisk)"
	nextBinlogExpiring = "stop the purge now: SET GLOBAL binlog_expire_logs_seconds = 604800 (and in the option file), then get the connector reading " +
		"(its status and task log; docs/alerts.md#outboxbinlogunreadfileatrisk)"
	nextBinlog = "log capture needs the binlog on, row-based and with full row images: in the server's option file log_bin, " +
		"binlog_format = ROW, binlog_row_image = FULL and a unique server_id, then restart the server (outbox-canary lint shows each setting)"
	nextCommit = "find the session: SELECT pid, usename, application_name, state, xact_start, query FROM pg_stat_activity WHERE pid = %d; " +
		"have its owner commit or roll back, or end it with SELECT pg_terminate_backend(%d). Rows it wrote stay invisible to the relay " +
		"until it commits: no relay change can publish them"
	nextRelayPolling = "the relay is stalled or slow: confirm the relay process is running and not paused, and that its logs do not show " +
		"repeating errors (a restart loop looks like slow progress); if it runs, compare the per-segment latency histograms before " +
		"shortening the poll interval (a slow publish only queues up in front of the broker)"
	nextRelayCDC = "confirm the connector and every task are RUNNING (GET %s/connectors/%s/status); a FAILED task's trace says why; " +
		"after fixing the cause restart it (POST .../restart?includeTasks=true&onlyFailed=true). Watch restart counts: a restart loop " +
		"looks like slow progress"
	nextConnect = "check that Kafka Connect answers at watch.connect_url and that watch.connector names the connector"
	nextSlot    = "a slot that stops advancing while retained WAL grows means the connector is stuck, and the database disk is at risk: " +
		"check that the connector is attached to the slot (active), watch free disk on the primary, bound retention with " +
		"max_slot_wal_keep_size, and drop a slot no connector will use again (pg_drop_replication_slot)"
	nextBroker = "check broker health: the brokers are up and reachable from here (network, TLS/SASL settings), every partition " +
		"of the canary topic has a leader, no partition is under-replicated, and produce errors or throttling are absent; " +
		"the relay's retries show up as relay lag"
	nextConsumers = "publishing is healthy, so the delay is the consumer group's: check that its members run and keep up " +
		"(kafka-consumer-groups.sh --describe --group %s), that none is stuck on a poisoned message, and hand it to the group's owner"
)

// Pipeline connects to the pipeline's database, Kafka and Kafka Connect as
// its configuration says, walks the runbook and closes the connections. It
// never fails: what could not be reached is an unhealthy stage.
func Pipeline(ctx context.Context, p *config.Pipeline, o Options) Diagnosis {
	o = o.withDefaults()
	probes := Probes{HTTP: o.HTTP}
	closeDB, err := openDatabase(ctx, p, o, &probes)
	if err != nil {
		probes.DBError = err
	} else {
		defer closeDB()
	}
	client, closeKafka, err := kafkaclient.NewClient(p.Kafka, o.StageTimeout)
	if err != nil {
		probes.KafkaError = err
	} else {
		defer closeKafka()
		probes.Kafka = client
	}
	return With(ctx, p, probes, o)
}

// openDatabase opens the pipeline's database, of the family its DSN (or
// database.kind) names, into probes: the one place diagnose tells the
// families apart by configuration; the stages read probes.Outbox.
func openDatabase(ctx context.Context, p *config.Pipeline, o Options, probes *Probes) (func(), error) {
	kind, err := p.Database.Family()
	if err != nil {
		return nil, err
	}
	if kind == config.KindMySQL {
		db, err := mysql.Open(p.Database, 2)
		if err != nil {
			return nil, err
		}
		probes.Outbox = db
		return func() { _ = db.Close() }, nil
	}
	pool, err := postgres.NewPool(ctx, p.Database, postgres.PoolOptions{MaxConns: 2, ConnectTimeout: o.StageTimeout})
	if err != nil {
		return nil, err
	}
	probes.DB, probes.Outbox = pool, postgres.NewOutboxDB(pool)
	return pool.Close, nil
}

func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StageTimeout <= 0 {
		o.StageTimeout = 10 * time.Second
	}
	if o.MaxRetainedWAL <= 0 {
		o.MaxRetainedWAL = 1 << 30
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 5 * time.Second}
	}
	return o
}

// With walks the runbook with connections the caller owns.
func With(ctx context.Context, p *config.Pipeline, probes Probes, o Options) Diagnosis {
	o = o.withDefaults()
	if probes.HTTP == nil {
		probes.HTTP = o.HTTP
	}
	if probes.Outbox == nil && probes.DB != nil {
		if pool, ok := probes.DB.(*pgxpool.Pool); ok {
			probes.Outbox = postgres.NewOutboxDB(pool)
		}
	}
	d := Diagnosis{Pipeline: p.Name, Relay: p.Relay.Kind, Healthy: true}
	checks := []struct {
		name  string
		check func(context.Context, *config.Pipeline, Probes, Options) StageResult
	}{
		{StageCommit, checkCommit},
		{StageRelay, checkRelay},
		{captureStage(probes), checkCapture},
		{StageBroker, checkBroker},
		{StageConsumers, checkConsumers},
	}
	var brokerChecked StageResult // checked early, for a relay that looks unhealthy
	for _, c := range checks {
		if !d.Healthy && !(c.name == StageBroker && brokerChecked.Name != "") {
			d.Stages = append(d.Stages, StageResult{Name: c.name, Status: StatusNotChecked,
				Evidence: []string{"not checked: stage " + d.FirstUnhealthy + " is unhealthy"}})
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, o.StageTimeout)
		r := c.check(sctx, p, probes, o)
		cancel()
		if c.name == StageRelay && !r.Healthy && r.Status != StatusNotConfigured {
			// Produce errors and broker trouble show up as relay lag (the
			// seed's runbook): before the relay is named, the brokers are.
			bctx, cancel := context.WithTimeout(ctx, o.StageTimeout)
			b := checkBroker(bctx, p, probes, o)
			cancel()
			if !b.Healthy {
				r.Name, r.Status = c.name, StatusExplained
				r.Evidence = append(r.Evidence, "the brokers are unhealthy (stage "+StageBroker+"): a relay cannot publish to them, so its lag is theirs")
				r.NextStep = ""
				d.Stages = append(d.Stages, r)
				b.Name, b.Status = StageBroker, StatusUnhealthy
				d.Healthy, d.FirstUnhealthy = false, StageBroker
				brokerChecked = b
				continue
			}
		}
		if c.name == StageBroker && brokerChecked.Name != "" {
			d.Stages = append(d.Stages, brokerChecked)
			continue
		}
		r.Name = c.name
		if r.Status == "" {
			r.Status = StatusOK
			if !r.Healthy {
				r.Status = StatusUnhealthy
			}
		}
		d.Stages = append(d.Stages, r)
		if r.Status == StatusUnhealthy {
			d.Healthy = false
			d.FirstUnhealthy = c.name
		}
	}
	return d
}

// unreachable is a stage that could not be checked: unhealthy, with the
// error as evidence.
func unreachable(what string, err error, next string) StageResult {
	return StageResult{Status: StatusUnhealthy, Evidence: []string{what + ": " + explain.OneLine(err.Error())}, NextStep: next}
}

// oneLine flattens a multi-line error (pgx lists every address it tried on
// a line of its own) so that each evidence entry stays one line.

func (pr Probes) dbError() error {
	if pr.DBError != nil {
		return pr.DBError
	}
	return errors.New("no database connection")
}

func (pr Probes) kafkaError() error {
	if pr.KafkaError != nil {
		return pr.KafkaError
	}
	return errors.New("no Kafka client")
}

// captureStage names the capture log's stage for the database's family.
func captureStage(pr Probes) string {
	if pr.Outbox != nil && pr.Outbox.Family() == config.KindMySQL {
		return StageBinlog
	}
	return StageSlot
}

// nextCommitFor is the commit stage's next step in the family's terms.
var nextCommitFor = map[string]string{config.KindPostgres: nextCommit, config.KindMySQL: nextCommitMySQL}

// checkCommit: an open transaction older than the threshold hides the rows
// it wrote from the relay; no other signal can see that.
func checkCommit(ctx context.Context, p *config.Pipeline, pr Probes, _ Options) StageResult {
	if pr.Outbox == nil {
		return unreachable("database", pr.dbError(), nextDatabase)
	}
	threshold := time.Duration(p.Watch.LongTransactionThreshold)
	tx, err := pr.Outbox.OpenTransactions(ctx, []time.Duration{threshold})
	if err != nil {
		return unreachable("database", pr.Outbox.Explain(err), nextDatabase)
	}
	over := tx.OverThreshold[0]
	ev := []string{fmt.Sprintf("%d open transactions older than watch.long_transaction_threshold %s; oldest open transaction %s",
		over, threshold, roundAge(tx.OldestAge))}
	if over == 0 {
		return StageResult{Healthy: true, Evidence: ev}
	}
	var state, app, user string
	// Best effort: the session may end between the two queries. Only
	// PostgreSQL's pg_stat_activity is read for the session's details;
	// elsewhere the session's id is the evidence.
	if pr.DB != nil && pr.DB.QueryRow(ctx,
		`SELECT COALESCE(state, ''), COALESCE(application_name, ''), COALESCE(usename::text, '') FROM pg_stat_activity WHERE pid = $1`,
		tx.OldestSession).Scan(&state, &app, &user) == nil {
		ev = append(ev, fmt.Sprintf("oldest: pid %d, user %q, application %q, state %q", tx.OldestSession, user, app, state))
	} else {
		ev = append(ev, fmt.Sprintf("oldest: session %d (its connection id)", tx.OldestSession))
	}
	next, ok := nextCommitFor[pr.Outbox.Family()]
	if !ok {
		next = nextCommit
	}
	return StageResult{Evidence: ev, NextStep: fmt.Sprintf(next, tx.OldestSession, tx.OldestSession)}
}

// relayBudget is the budget the oldest unpublished row is judged against.
func relayBudget(p *config.Pipeline) (string, time.Duration) {
	seg := config.SegmentName(config.StampCommit, config.StampPublish)
	if len(p.Relay.Stamps) == 0 {
		if b, ok := p.Budget(seg); ok {
			return seg, b
		}
	}
	b, _ := p.Budget(config.SegmentEndToEnd)
	return config.SegmentEndToEnd, b
}

// checkRelay: for a polling relay, the age of the oldest unpublished row
// (it climbs while the relay stalls, traffic or not); for log capture, the
// connector's and its tasks' state.
func checkRelay(ctx context.Context, p *config.Pipeline, pr Probes, o Options) StageResult {
	if p.Relay.Kind == config.RelayCDC {
		w := p.Watch
		if w.ConnectURL == "" || w.Connector == "" {
			return StageResult{Status: StatusNotConfigured, Healthy: true,
				Evidence: []string{"watch.connect_url and watch.connector are not set: the connector's state is not checked"}}
		}
		st, err := connect.QueryStatus(ctx, pr.HTTP, w.ConnectURL, w.Connector)
		if err != nil {
			return unreachable("Kafka Connect", err, nextConnect)
		}
		r := StageResult{Healthy: st.Running(), Evidence: append([]string{st.Summary(), fmt.Sprintf("%d failed tasks", st.FailedTasks())}, st.TraceLines()...)}
		var streamNext string
		if o.PrometheusURL != "" {
			ev, healthy, next := debeziumEvidence(ctx, p, pr, o)
			r.Evidence = append(r.Evidence, ev...)
			if r.Healthy && !healthy {
				r.Healthy, streamNext = false, next
			}
		}
		if streamNext != "" {
			r.NextStep = streamNext
		} else if !r.Healthy {
			r.NextStep = fmt.Sprintf(nextRelayCDC, w.ConnectURL, w.Connector)
			if lintEvidence := connectorLint(ctx, p, pr); len(lintEvidence) > 0 {
				r.Evidence = append(r.Evidence, lintEvidence...)
				r.NextStep += "; the lint lines are the connector's misconfigurations, each with its fix (outbox-canary lint, docs/cdc.md)"
			}
		}
		return r
	}
	if pr.Outbox == nil {
		return unreachable("database", pr.dbError(), nextDatabase)
	}
	c := p.Outbox.Columns
	b, err := pr.Outbox.Backlog(ctx, outboxdb.Table{Name: p.Outbox.Table, ID: c.ID, PublishedAt: c.PublishedAt, CreatedAt: c.CreatedAt})
	if err != nil {
		return unreachable("backlog", pr.Outbox.Explain(err), nextDatabase)
	}
	seg, budget := relayBudget(p)
	r := StageResult{Healthy: b.OldestAge <= budget, Evidence: []string{
		fmt.Sprintf("backlog %d rows; oldest unpublished row %s old (budget %s %s)", b.Rows, roundAge(b.OldestAge), seg, budget),
	}}
	if !r.Healthy {
		r.NextStep = nextRelayPolling
	}
	return r
}

// connectorLint runs lint's connector checks on a connector that does not
// run, as evidence: a misconfiguration (a route to a missing topic, a
// decoding plugin the server lacks) is often the cause its trace names.
// The connector's own state is already in the evidence, so lint's is left
// out, and so are the checks that pass.
func connectorLint(ctx context.Context, p *config.Pipeline, pr Probes) []string {
	var ev []string
	src := lint.ConnectorSources{HTTP: pr.HTTP, DB: pr.DB, Kafka: pr.Kafka}
	if db, ok := pr.Outbox.(*mysql.DB); ok {
		src.MySQL = db
	}
	for _, f := range lint.Connector(ctx, p, src) {
		if f.Level == lint.OK || (f.Check == lint.CheckConnector && f.Level == lint.Fail) {
			continue
		}
		line := fmt.Sprintf("lint %s %s: %s", f.Level, f.Check, f.Message)
		if f.Fix != "" {
			line += " (fix: " + f.Fix + ")"
		}
		ev = append(ev, line)
	}
	return ev
}

// checkCapture: the capture log a cdc relay reads, in its family's terms:
// PostgreSQL's replication slot, MySQL's binlog.
func checkCapture(ctx context.Context, p *config.Pipeline, pr Probes, o Options) StageResult {
	if captureStage(pr) == StageBinlog {
		return checkBinlog(ctx, p, pr, o)
	}
	return checkSlot(ctx, p, pr, o)
}

// checkBinlog: log capture on MySQL reads the binlog, which must be on,
// row-based, with full row images.
func checkBinlog(ctx context.Context, p *config.Pipeline, pr Probes, o Options) StageResult {
	if p.Relay.Kind != config.RelayCDC {
		return StageResult{Status: StatusNotApplicable, Healthy: true,
			Evidence: []string{"a polling relay reads the table, not the binlog"}}
	}
	if pr.Outbox == nil {
		return unreachable("database", pr.dbError(), nextDatabase)
	}
	c, err := pr.Outbox.CaptureLog(ctx)
	if err != nil {
		return unreachable("binlog", pr.Outbox.Explain(err), nextDatabase)
	}
	if !c.Enabled {
		return StageResult{Evidence: []string{"log_bin is OFF: the server writes no binlog, nothing captures the outbox table's changes"}, NextStep: nextBinlog}
	}
	r := StageResult{Healthy: c.Format == "ROW/FULL", Evidence: []string{
		fmt.Sprintf("binlog on, binlog_format/binlog_row_image %s, position %s, %d files retained (%d bytes), binlog_expire_logs_seconds %s",
			c.Format, c.Position, c.RetainedFiles, c.RetainedBytes, c.Expiry)}}
	if !r.Healthy {
		r.Evidence = append(r.Evidence, "log capture needs binlog_format ROW and binlog_row_image FULL")
		r.NextStep = nextBinlog
		return r
	}
	return connectorBinlog(ctx, p, pr, o, c, r)
}

// connectorBinlog adds how far the connector's committed position (Kafka
// Connect's offsets API) is behind the binlog, as the binlog_connector
// watcher measures it. A connector whose file is purged cannot resume:
// the stage is unhealthy. One that is behind is evidence, not a verdict:
// Debezium commits its offset once a minute, and the canaries say whether
// events are late.
func connectorBinlog(ctx context.Context, p *config.Pipeline, pr Probes, o Options, c outboxdb.CaptureLog, r StageResult) StageResult {
	w := p.Watch
	if w.ConnectURL == "" || w.Connector == "" {
		r.Evidence = append(r.Evidence, "the connector's position not read: set watch.connect_url and watch.connector")
		return r
	}
	offsets, err := connect.QueryOffsets(ctx, pr.HTTP, w.ConnectURL, w.Connector)
	if err != nil {
		r.Evidence = append(r.Evidence, "the connector's position not read: "+explain.OneLine(err.Error()))
		return r
	}
	pos, ok := connect.BinlogOffset(offsets)
	if !ok {
		r.Evidence = append(r.Evidence, fmt.Sprintf("connector %s has committed no binlog position yet", w.Connector))
		return r
	}
	lag, err := connect.ConnectorBinlogLag(c, pos, o.withDefaults().Now())
	if err != nil {
		r.Evidence = append(r.Evidence, fmt.Sprintf("connector %s at %s:%d: %s", w.Connector, pos.File, pos.Pos, explain.OneLine(err.Error())))
		return r
	}
	if lag.Purged {
		r.Healthy = false
		r.Evidence = append(r.Evidence, fmt.Sprintf("connector %s committed %s:%d, a file the server has purged (%d files behind): it cannot resume from its offset", w.Connector, pos.File, pos.Pos, lag.BehindFiles))
		r.NextStep = nextBinlogPurged
		return r
	}
	line := fmt.Sprintf("connector %s committed %s:%d, %d bytes and %d files behind the server", w.Connector, pos.File, pos.Pos, lag.BehindBytes, lag.BehindFiles)
	if lag.HasHeadroom {
		line += fmt.Sprintf("; binlog expiry may purge its file in %s", lag.Headroom.Round(time.Second))
		if lag.Headroom < slo.BinlogPurgeHeadroom {
			r.Healthy = false
			r.NextStep = nextBinlogExpiring
		}
	}
	r.Evidence = append(r.Evidence, line)
	return r
}

// checkSlot: a logical slot that no connector reads pins WAL on the primary.
// With watch.slot it judges that slot only: another pipeline's slot, or a
// leftover one, is not this pipeline's stage.
func checkSlot(ctx context.Context, p *config.Pipeline, pr Probes, o Options) StageResult {
	if p.Relay.Kind != config.RelayCDC {
		return StageResult{Status: StatusNotApplicable, Healthy: true,
			Evidence: []string{"a polling relay reads the table, not a replication slot"}}
	}
	if pr.DB == nil {
		return unreachable("database", pr.dbError(), nextDatabase)
	}
	want := p.Watch.Slot
	slots, err := postgres.QuerySlots(ctx, pr.DB, want)
	if err != nil {
		return unreachable("replication slots", postgres.Explain(err), nextDatabase)
	}
	if len(slots) == 0 {
		if want != "" {
			return StageResult{Evidence: []string{fmt.Sprintf("replication slot %s (watch.slot) does not exist in this database: nothing captures the outbox table's changes", want)},
				NextStep: "check that the connector is deployed against this database with slot.name " + want + " and has created its slot, or correct watch.slot"}
		}
		return StageResult{Evidence: []string{"no logical replication slot in this database: nothing captures the outbox table's changes"},
			NextStep: "check that the connector is deployed against this database and created its slot (slot.name)"}
	}
	r := StageResult{Healthy: true}
	if want == "" {
		r.Evidence = append(r.Evidence, "watch.slot is not set: every slot of the database is judged, whoever reads it")
	}
	for _, s := range slots {
		line := fmt.Sprintf("slot %s: active %t, wal_status %q, retained WAL %d bytes, unconfirmed WAL %d bytes",
			s.Name, s.Active, s.WALStatus, s.RetainedWAL, s.UnconfirmedWAL)
		if s.SafeWALSize != nil {
			line += fmt.Sprintf(", safe WAL size %d bytes", *s.SafeWALSize)
		}
		r.Evidence = append(r.Evidence, line)
		if !s.Active || s.WALStatus == "unreserved" || s.WALStatus == "lost" || s.RetainedWAL > o.MaxRetainedWAL {
			r.Healthy = false
		}
	}
	if !r.Healthy {
		r.NextStep = nextSlot
	}
	return r
}

// checkBroker: the canary topic's metadata, from the brokers themselves.
func checkBroker(ctx context.Context, p *config.Pipeline, pr Probes, _ Options) StageResult {
	if pr.Kafka == nil {
		return unreachable("Kafka", pr.kafkaError(), nextBroker)
	}
	topic := p.Kafka.Topic
	meta, err := pr.Kafka.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return unreachable(fmt.Sprintf("brokers %v", p.Kafka.Brokers), err, nextBroker)
	}
	r := StageResult{Healthy: true, Evidence: []string{fmt.Sprintf("%d brokers in the cluster metadata", len(meta.Brokers))}}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		var terr error = errors.New("not in the metadata")
		if len(meta.Topics) == 1 {
			terr = meta.Topics[0].Error
		}
		r.Healthy = false
		r.Evidence = append(r.Evidence, fmt.Sprintf("canary topic %s: %v", topic, terr))
		r.NextStep = "create the canary topic " + topic + " (the relay does not create topics), or correct kafka.topic"
		return r
	}
	parts := meta.Topics[0].Partitions
	leaderless, underReplicated := 0, 0
	for _, part := range parts {
		if part.Error != nil || part.Leader.ID < 0 || part.Leader.Host == "" {
			leaderless++
		}
		if len(part.Isr) < len(part.Replicas) {
			underReplicated++
		}
	}
	r.Evidence = append(r.Evidence, fmt.Sprintf("canary topic %s: %d partitions, %d without a leader, %d under-replicated",
		topic, len(parts), leaderless, underReplicated))
	if leaderless > 0 || underReplicated > 0 || len(parts) == 0 {
		r.Healthy = false
		r.NextStep = nextBroker
	}
	return r
}

// checkConsumers: the lag of each watched business consumer group against
// the end-to-end budget.
func checkConsumers(ctx context.Context, p *config.Pipeline, pr Probes, o Options) StageResult {
	groups := p.Watch.ConsumerGroups
	if len(groups) == 0 {
		return StageResult{Status: StatusNotConfigured, Healthy: true,
			Evidence: []string{"watch.consumer_groups is empty: no business consumer group is watched"}}
	}
	if pr.Kafka == nil {
		return unreachable("Kafka", pr.kafkaError(), nextBroker)
	}
	budget, _ := p.Budget(config.SegmentEndToEnd)
	r := StageResult{Healthy: true}
	var late []string
	for _, g := range groups {
		lag, err := kafkaclient.QueryConsumerLag(ctx, pr.Kafka, g, o.Now)
		if err != nil {
			return unreachable("consumer group "+g.Group, err, nextBroker)
		}
		r.Evidence = append(r.Evidence, fmt.Sprintf("group %s on %s: %d messages behind, oldest unconsumed %s old (budget end_to_end %s)",
			g.Group, g.Topic, lag.Messages, roundAge(lag.OldestAge), budget))
		if lag.OldestAge > budget {
			r.Healthy = false
			late = append(late, g.Group)
		}
	}
	if !r.Healthy {
		r.NextStep = fmt.Sprintf(nextConsumers, late[0])
	}
	return r
}

func roundAge(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
