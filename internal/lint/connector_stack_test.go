package lint

// The connector checks against the stack's real Kafka Connect worker
// (deploy/local/connect.sh up, which `make test` runs): they skip without
// it, and fail in CI. The misconfigured connectors are linted through the
// command, in cmd/outbox-canary.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// connectorPipeline is a cdc pipeline on dsn watching the connector, with
// the canary aggregate type (and so the default canary topic) of its own.
func connectorPipeline(t *testing.T, dsn, connectURL, connector, aggregateType string) *config.Pipeline {
	t.Helper()
	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedDebezium, IDGen: config.IDUUID,
		Watch: fmt.Sprintf("{connect_url: %q, connector: %q}", connectURL, connector)})
	p.Canary.AggregateType = aggregateType
	p.Kafka.Topic = "outbox.event." + aggregateType
	return p
}

func TestTheRecommendedConnectorPassesEveryCheckOnTheRealWorker(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	url := s.ConnectURL(t)
	dsn, pool := s.FreshOutbox(t, stacktest.SeedDebezium)
	names := stacktest.NewConnectorNames(t)
	agg := names.Name + "-canary"
	s.NewTopicNamed(t, "outbox.event."+agg, 1, map[string]string{"message.timestamp.type": "LogAppendTime"}) // as docs/cdc.md recommends
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	c := s.NewConnector(t, names.Name, stacktest.RecommendedConnector(t, dsn, names))
	c.WaitRunning(t)

	p := connectorPipeline(t, dsn, url, names.Name, agg)
	client := &kafka.Client{Addr: kafka.TCP(s.KafkaBrokers...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
	defer client.Transport.(*kafka.Transport).CloseIdleConnections()
	findings := Connector(context.Background(), p, ConnectorSources{HTTP: &http.Client{Timeout: 10 * time.Second}, DB: pool, Kafka: client})
	var report strings.Builder
	for _, f := range findings {
		fmt.Fprintf(&report, "%-4s %-17s %s\n", f.Level, f.Check, f.Message)
		if f.Level != OK {
			t.Errorf("%s %s: %s (fix: %s)", f.Level, f.Check, f.Message, f.Fix)
		}
	}
	t.Logf("lint of the recommended connector:\n%s", report.String())
	if len(findings) < 14 {
		t.Errorf("%d findings, want one per connector check", len(findings))
	}
}
