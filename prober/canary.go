// Package prober is the canary engine: the sender inserts canary rows on a
// schedule, the consumer reads them back from the canary topic, and the
// tracker, a thin shell around the pure judge (package prober/judge),
// turns each canary into per-segment latencies and SLI events, charged
// only on evidence, exactly once across restarts.
package prober

import "time"

// Canary is one sent canary as the tracker knows it: what the sender learnt
// while inserting it. All times are on the prober's clock.
type Canary struct {
	ID       string // random UUID, also in the signed payload
	Seq      uint64 // per instance and pipeline, increasing
	Pipeline string
	Key      string // the message key (aggregate id) the relay will use
	RowID    string // primary key of the outbox row, as text (for reading published_at back)

	// The insert is one INSERT in a transaction of its own, which commits
	// before PostgreSQL answers (with delete_after_insert: BEGIN, INSERT,
	// DELETE, COMMIT).
	InsertStarted time.Time // before the INSERT (or BEGIN) was sent
	CommitSent    time.Time // before the statement that commits was sent (the INSERT, or COMMIT): the commit happened between it and Committed
	Committed     time.Time // when that statement returned
}

// Arrival is a canary's message as consumed: its identity, where it was
// read, and every stamp known for it, already converted to the prober's
// clock (the consumer applies the measured DB clock offset to published_at).
type Arrival struct {
	CanaryID  string
	Seq       uint64
	Key       string
	Partition int
	Offset    int64
	Consumed  time.Time
	// Stamps holds the stamps between commit and consume by name: "publish"
	// and any configured extra stamp such as "read". A missing stamp is
	// simply absent.
	Stamps map[string]time.Time
	// Unparseable names the stamps whose header was there but held no
	// time: invalid stamps, not missing ones.
	Unparseable []string
}
