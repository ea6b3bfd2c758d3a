package diagnose

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/connect"
	"github.com/outbox-canary/outbox-canary/internal/debezium"
)

// Next steps when Debezium's own metrics, not the connector's state, name
// the trouble: Connect says RUNNING while the stream is not.
const (
	nextStreamDisconnected = "Debezium's task runs but holds no connection to the database's log (it retries inside the task, so Connect " +
		"still says RUNNING): its log in the worker says why; check the database is reachable from the worker and the replication " +
		"user's privileges (outbox-canary lint)"
	nextStreamBehind = "Debezium reads the log late: the last event it processed was committed %s before (budget %s %s). A snapshot " +
		"running holds the stream back; otherwise look for a large transaction or a burst in the log, and the worker's CPU and heap"
	nextStreamQueueFull = "Debezium's queue between the log reader and the Kafka producer is full: the producer side is slow. " +
		"Check the brokers' produce latency and the worker's producer settings (linger.ms, batch.size, max.in.flight); " +
		"max.queue.size only buys time"
)

// debeziumEvidence reads the connector's streaming metrics from Prometheus
// (o.PrometheusURL): evidence beside the connector's state, and a verdict
// on what that state cannot show (a RUNNING task whose stream is down,
// behind, or blocked on Kafka). Metrics that cannot be read are evidence,
// never a verdict: Prometheus is an aid here, not a stage of the pipeline.
func debeziumEvidence(ctx context.Context, p *config.Pipeline, pr Probes, o Options) (evidence []string, healthy bool, next string) {
	cfg, err := connect.QueryConfig(ctx, pr.HTTP, p.Watch.ConnectURL, p.Watch.Connector)
	if err != nil {
		return []string{"Debezium metrics not read: the connector's config: " + err.Error()}, true, ""
	}
	// topic.prefix since Debezium 2.0; database.server.name before it.
	server := cfg["topic.prefix"]
	if server == "" {
		server = cfg["database.server.name"]
	}
	if server == "" {
		return []string{"Debezium metrics not read: connector " + p.Watch.Connector + " sets no topic.prefix, the server label of its metrics"}, true, ""
	}
	s, err := debezium.Query(ctx, pr.HTTP, o.PrometheusURL, server)
	if err != nil {
		return []string{"Debezium metrics not read: " + err.Error()}, true, ""
	}
	seg, budget := relayBudget(p)
	next = streamVerdict(s, seg, budget)
	return []string{s.String()}, next == "", next
}

// streamVerdict is the next step when Debezium's own metrics show trouble
// that the connector's RUNNING state hides, "" when they do not.
func streamVerdict(s debezium.Streaming, seg string, budget time.Duration) string {
	switch {
	case s.KnownConnected && !s.Connected:
		return nextStreamDisconnected
	case s.KnownBehind && s.BehindSource > budget:
		return fmt.Sprintf(nextStreamBehind, roundAge(s.BehindSource), seg, budget)
	case s.QueueTotal > 0 && s.QueueRemaining == 0:
		return nextStreamQueueFull
	}
	return ""
}
