package prober

// Where Debezium's internal queue is charged, on the real stack (see
// cdc_e2e_test.go for how to start it). Debezium stamps a change event
// (the Kafka record's CreateTime) when it processes it, then holds it in
// its queue until Kafka Connect's next poll (poll.interval.ms). On a
// CreateTime canary topic the publish stamp is therefore taken before the
// wait, which lands in publish_to_consume (Kafka's owner); on a
// LogAppendTime topic the publish stamp is the broker's append time, after
// the wait, which lands in commit_to_publish (the connector's owner).
// Debezium's PostgreSQL WAL reader also sleeps poll.interval.ms when it
// finds nothing new, before it stamps: that wait is commit_to_publish's
// under either timestamp type.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/kafkaclient"
	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// cdcStampRun is what one pipeline's canaries measured.
type cdcStampRun struct {
	commitToPublish, publishToConsume []time.Duration
	timestampType                     kafkaclient.TimestampType
}

// measureCDCStamps runs the prober on p's pipeline (a canary a second)
// until it has n arrived canaries or, with n 0, for d, and returns their
// two segments. Canaries whose segments are not both measured are counted
// against the run: every canary on a healthy pipeline must be.
func measureCDCStamps(t *testing.T, p *cdcPipeline, n int, d time.Duration) cdcStampRun {
	t.Helper()
	cfg := p.config(t, "@every 1s", "{commit_to_publish: 60s, end_to_end: 60s}")
	r := startService(t, cfg, t.TempDir(), false)
	tr := r.tracker(t)
	seen := map[string]bool{}
	var run cdcStampRun
	collect := func() {
		for _, rep := range tr.Recent(1000) {
			if seen[rep.ID] || rep.State != StateArrived {
				continue
			}
			seen[rep.ID] = true
			a, b := segmentOf(rep, "commit_to_publish"), segmentOf(rep, "publish_to_consume")
			if !a.Measured || !b.Measured {
				t.Errorf("canary %s: commit_to_publish %s, publish_to_consume %s: want both measured", rep.ID, a.Took(time.Microsecond), b.Took(time.Microsecond))
				continue
			}
			run.commitToPublish = append(run.commitToPublish, a.Duration)
			run.publishToConsume = append(run.publishToConsume, b.Duration)
		}
	}
	if n > 0 {
		// The wait grows with how slowly the connector started: the
		// machine's load now.
		deadline := time.Now().Add(e2eWait + 10*p.startup + time.Duration(n)*time.Second)
		for collect(); len(run.commitToPublish) < n; collect() {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d canaries arrived before %s", len(run.commitToPublish), n, deadline.Format(time.TimeOnly))
			}
			time.Sleep(200 * time.Millisecond)
		}
	} else {
		// Canaries are remembered 2 x lost_after (4m): collect often
		// enough that none is forgotten first.
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Second) {
			collect()
		}
		collect()
	}
	typ, ok, err := r.svc.RecordTimestampType("e2e")
	if err != nil || !ok {
		t.Fatalf("record timestamp type: %v (seen %t)", err, ok)
	}
	run.timestampType = typ
	return run
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (r cdcStampRun) String() string {
	return fmt.Sprintf("%s topic, %d canaries: commit_to_publish p50 %s p99 %s, publish_to_consume p50 %s p99 %s",
		r.timestampType, len(r.commitToPublish),
		quantile(r.commitToPublish, 0.5).Round(time.Millisecond), quantile(r.commitToPublish, 0.99).Round(time.Millisecond),
		quantile(r.publishToConsume, 0.5).Round(time.Millisecond), quantile(r.publishToConsume, 0.99).Round(time.Millisecond))
}

// TestCDCQueueWaitLandsInCommitToPublishOnALogAppendTimeTopic: a connector
// whose events wait 2 s in Debezium's queue (poll.interval.ms=2000) is
// charged for the wait in commit_to_publish when the canary topic stamps
// at append (LogAppendTime), and publish_to_consume keeps only the
// broker-to-prober part; on a CreateTime topic the same wait lands in
// publish_to_consume. The assertions are about which segment holds the
// wait, not about speed.
func TestCDCQueueWaitLandsInCommitToPublishOnALogAppendTimeTopic(t *testing.T) {
	s := stacktest.Load(t)
	t.Parallel()
	const poll = 2 * time.Second
	const n = 8
	slowPoll := func(cfg map[string]string, _ stacktest.ConnectorNames) {
		cfg["poll.interval.ms"] = strconv.Itoa(int(poll.Milliseconds()))
	}
	var mu sync.Mutex
	runs := map[kafkaclient.TimestampType]cdcStampRun{}
	t.Run("group", func(t *testing.T) {
		for _, typ := range []kafkaclient.TimestampType{kafkaclient.LogAppendTime, kafkaclient.CreateTime} {
			t.Run(typ.String(), func(t *testing.T) {
				t.Parallel()
				p := newCDCPipelineOn(t, s, map[string]string{"message.timestamp.type": typ.String()}, slowPoll)
				run := measureCDCStamps(t, p, n, 0)
				t.Logf("poll.interval.ms=%d, %s", poll.Milliseconds(), run)
				if run.timestampType != typ {
					t.Errorf("the prober read %s record timestamps from a %s topic", run.timestampType, typ)
				}
				mu.Lock()
				runs[typ] = run
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	appended, created := runs[kafkaclient.LogAppendTime], runs[kafkaclient.CreateTime]
	c2p, p2c := median(appended.commitToPublish), median(appended.publishToConsume)
	// The queue holds an event up to poll.interval.ms, a median of about
	// half of it: on the LogAppendTime topic that is commit_to_publish's,
	// and publish_to_consume (append to fetch) is far shorter.
	if p2c >= poll/4 {
		t.Errorf("LogAppendTime: publish_to_consume median %s, want well under the poll interval %s: the queue's wait is charged to Kafka", p2c, poll)
	}
	if c2p <= 2*p2c {
		t.Errorf("LogAppendTime: commit_to_publish median %s, want far above publish_to_consume's %s: the queue's wait is not charged to the connector", c2p, p2c)
	}
	// The same connector on a CreateTime topic: the queue's wait moves to
	// publish_to_consume. (commit_to_publish keeps a wait too: Debezium's
	// WAL reader also sleeps poll.interval.ms when it found nothing, before
	// it stamps; how the two waits split depends on their phases, so only
	// the move is asserted.)
	if cp2c := median(created.publishToConsume); cp2c <= 2*p2c {
		t.Errorf("CreateTime: publish_to_consume median %s, want far above the LogAppendTime topic's %s: the queue's wait should be in it",
			cp2c, p2c)
	}
}

// TestCDCStampClocksMeasured measures, when OUTBOX_CANARY_CDC_MEASURE names
// a duration, commit_to_publish and publish_to_consume over that long on
// two pipelines side by side, behind the recommended connector as the demo
// runs it (poll.interval.ms at Debezium's 500 ms): one on a CreateTime
// canary topic, one on a LogAppendTime topic. The figures are logged, for
// docs/cdc.md:
//
//	OUTBOX_CANARY_CDC_MEASURE=4m go test -count=1 -v -run TestCDCStampClocksMeasured ./prober/
func TestCDCStampClocksMeasured(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("OUTBOX_CANARY_CDC_MEASURE"))
	if err != nil {
		t.Skip("a measurement, not a test: set OUTBOX_CANARY_CDC_MEASURE to how long to measure (e.g. 4m)")
	}
	s := stacktest.Load(t)
	for _, typ := range []kafkaclient.TimestampType{kafkaclient.CreateTime, kafkaclient.LogAppendTime} {
		t.Run(typ.String(), func(t *testing.T) {
			t.Parallel()
			p := newCDCPipelineOn(t, s, map[string]string{"message.timestamp.type": typ.String()}, nil)
			t.Logf("%s", measureCDCStamps(t, p, 0, d))
		})
	}
}
