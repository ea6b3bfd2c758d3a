package diagnose

// A failed connector task on the stack's real Kafka Connect worker
// (deploy/local/connect.sh up, which `make test` runs); it skips without
// the worker, and fails in CI.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

func TestDiagnoseReportsAFailedConnectorTaskWithItsTraceAndTheLintFindingBehindIt(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	url := s.ConnectURL(t)
	dsn, pool := s.FreshOutbox(t, stacktest.SeedDebezium)
	names := stacktest.NewConnectorNames(t)
	agg := names.Name + "-canary"
	canaryTopic := "outbox.event." + agg
	s.NewTopicNamed(t, canaryTopic, 1, nil)
	s.NewTopicNamed(t, names.HeartbeatTopic(), 1, nil)
	// The recommended connector with a typo in its route: the topic it
	// sends the canary to does not exist, and the broker creates none. The
	// producer gives up after 2 s instead of its default 60 s, only to keep
	// the test short (the worker lets connectors override producer settings).
	missing := canaryTopic + "s"
	cfg := stacktest.RecommendedConnector(t, dsn, names)
	cfg["transforms.outbox.route.topic.replacement"] = "outbox.event.${routedByValue}s"
	cfg["producer.override.max.block.ms"] = "2000"
	c := s.NewConnector(t, names.Name, cfg)
	c.WaitRunning(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES (gen_random_uuid(), $1, 'outbox-canary', 'outbox_canary', '{}')`, agg); err != nil {
		t.Fatal(err)
	}
	c.WaitTaskFailed(t)

	p := stacktest.LoadPipeline(t, stacktest.PipelineSpec{DSN: dsn, Schema: stacktest.SeedDebezium, IDGen: config.IDUUID,
		Brokers: s.KafkaBrokers, Topic: canaryTopic,
		Watch: fmt.Sprintf("{connect_url: %q, connector: %q, slot: %s}", url, names.Name, names.Slot)})
	p.Canary.AggregateType = agg
	d := Pipeline(context.Background(), p, Options{})
	logDiagnosis(t, d)
	assertFirstUnhealthy(t, d, StageRelay)
	relay := stageOf(t, d, StageRelay)
	evidence := strings.Join(relay.Evidence, "\n")
	for _, want := range []string{
		"(task 0 FAILED)",
		"task 0 trace: ConnectException: Unrecoverable exception from producer send callback; caused by: TimeoutException: Topic " + missing + " not present in metadata after 2000 ms.",
		"lint FAIL canary topic: the router sends canaries (aggregatetype \"" + agg + "\") to " + missing + "; the prober reads " + canaryTopic,
	} {
		if !strings.Contains(evidence, want) {
			t.Errorf("relay evidence lacks %q", want)
		}
	}
	if strings.Contains(evidence, "lint OK") {
		t.Errorf("passing lint checks in the evidence:\n%s", evidence)
	}
	if !strings.Contains(relay.NextStep, "restart?includeTasks=true&onlyFailed=true") {
		t.Errorf("next step %q does not say how to restart the failed task", relay.NextStep)
	}
}
