package diagnose

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/internal/debezium"
)

func TestStreamVerdict(t *testing.T) {
	healthy := debezium.Streaming{Server: "orders", Connected: true, KnownConnected: true, KnownBehind: true,
		BehindSource: 300 * time.Millisecond, QueueRemaining: 8000, QueueTotal: 8192}
	tests := []struct {
		name string
		edit func(*debezium.Streaming)
		want string // a part of the next step; "" for none
	}{
		{"A connected connector a little behind with room in its queue is healthy.", func(*debezium.Streaming) {}, ""},
		{"A task that lost its log connection is named though Connect says RUNNING.", func(s *debezium.Streaming) { s.Connected = false }, "holds no connection"},
		{"Behind source past the commit_to_publish budget is named with both.", func(s *debezium.Streaming) { s.BehindSource = 3 * time.Second },
			"committed 3s before (budget commit_to_publish 2s)"},
		{"A full queue names the producer side.", func(s *debezium.Streaming) { s.QueueRemaining = 0 }, "queue between the log reader and the Kafka producer is full"},
		{"Series that were not scraped are no verdict.", func(s *debezium.Streaming) {
			*s = debezium.Streaming{Server: "orders", QueueRemaining: math.NaN(), QueueTotal: math.NaN(), EventsSeen: math.NaN()}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthy
			tt.edit(&s)
			got := streamVerdict(s, "commit_to_publish", 2*time.Second)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("next step %q, want one containing %q", got, tt.want)
			}
		})
	}
}
