package connect

import (
	"os"
	"testing"
)

func TestTraceSummary(t *testing.T) {
	// Recorded from a Debezium 3.6.1 task on Kafka Connect 4.3.0 whose
	// router sent an event to a topic that did not exist.
	recorded, err := os.ReadFile("testdata/missing-topic.trace")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		trace string
		want  string
	}{
		{"A failed task's trace becomes its exception and each cause, without frames or packages.", string(recorded),
			"ConnectException: Unrecoverable exception from producer send callback; caused by: TimeoutException: Topic missing.df685a32 not present in metadata after 5000 ms.; caused by: UnknownTopicOrPartitionException: This server does not host this topic-partition."},
		{"A one-line trace stays as it is.", "java.lang.IllegalStateException: boom", "IllegalStateException: boom"},
		{"An empty trace is empty.", "", ""},
		{"A message that is not a class name is kept.", "Task threw an uncaught and unrecoverable exception", "Task threw an uncaught and unrecoverable exception"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := TraceSummary(tc.trace); got != tc.want {
				t.Errorf("TraceSummary =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
