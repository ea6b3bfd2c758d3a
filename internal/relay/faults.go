package relay

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Faults is the fault-injection state of one relay, safe for concurrent use:
// the admin API writes it while the relay loop reads it. Tests use it to stall
// or slow each segment of the pipeline on purpose.
type Faults struct {
	log *slog.Logger

	mu     sync.Mutex
	paused bool
	// polling is held for reading through each poll, so Pause can wait out
	// a poll that began before it.
	polling   sync.RWMutex
	delay     time.Duration
	markDelay time.Duration
	drop      int
	duplicate int
}

// FaultState is a snapshot of Faults.
type FaultState struct {
	// Paused relays claim no rows, so rows stay unpublished.
	Paused bool
	// PublishDelay is slept after each batch is read and before it is sent.
	PublishDelay time.Duration
	// MarkDelay is slept after each batch is acknowledged and before its
	// rows are marked published (Config.MarkDelay).
	MarkDelay time.Duration
	// DropNext rows will be marked published without being sent.
	DropNext int
	// DuplicateNext rows will be sent twice.
	DuplicateNext int
}

// NewFaults returns a fault state with no fault injected.
func NewFaults(logger *slog.Logger) *Faults {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Faults{log: logger}
}

// Pause stops the relay from claiming rows until Resume.
func (f *Faults) Pause() {
	f.mu.Lock()
	was := f.paused
	f.paused = true
	f.mu.Unlock()
	// A poll that checked the flag just before may still claim rows,
	// even rows committed after this call: wait it out, so that once
	// Pause returns nothing is claimed until Resume.
	f.polling.Lock()
	f.polling.Unlock() //nolint:staticcheck // an empty critical section: a barrier
	if !was {
		f.log.Info("relay paused by fault injection: rows stay unpublished until resumed")
	}
}

// beginPoll starts a poll: whether the relay is paused, and the func that
// ends the poll.
func (f *Faults) beginPoll() (paused bool, end func()) {
	f.polling.RLock()
	return f.State().Paused, f.polling.RUnlock
}

// Resume undoes Pause.
func (f *Faults) Resume() {
	f.mu.Lock()
	was := f.paused
	f.paused = false
	f.mu.Unlock()
	if was {
		f.log.Info("relay resumed")
	}
}

// SetPublishDelay makes the relay sleep d between reading a batch and sending
// it, so the delay shows in commit->publish. Zero removes the delay.
func (f *Faults) SetPublishDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("publish delay %s: must not be negative", d)
	}
	f.mu.Lock()
	f.delay = d
	f.mu.Unlock()
	f.log.Info("publish delay set by fault injection", "delay", d)
	return nil
}

// SetMarkDelay makes the relay wait d between the broker's ack of a whole
// batch and marking its rows published, so published_at lies after the
// records' arrival (as with relays that mark after a batch or on a timer).
// Zero marks at once.
func (f *Faults) SetMarkDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("mark delay %s: must not be negative", d)
	}
	f.setMarkDelay(d)
	f.log.Info("mark delay set: published_at is written that long after the batch is acknowledged", "mark_delay", d)
	return nil
}

func (f *Faults) setMarkDelay(d time.Duration) {
	f.mu.Lock()
	f.markDelay = d
	f.mu.Unlock()
}

// DropNext makes the next n rows lost events: marked published but never
// sent. It replaces any pending count; zero cancels.
func (f *Faults) DropNext(n int) error {
	if n < 0 {
		return fmt.Errorf("drop count %d: must not be negative", n)
	}
	f.mu.Lock()
	f.drop = n
	f.mu.Unlock()
	f.log.Info("next rows will be dropped by fault injection", "rows", n)
	return nil
}

// DuplicateNext makes the next n rows be sent twice. It replaces any pending
// count; zero cancels.
func (f *Faults) DuplicateNext(n int) error {
	if n < 0 {
		return fmt.Errorf("duplicate count %d: must not be negative", n)
	}
	f.mu.Lock()
	f.duplicate = n
	f.mu.Unlock()
	f.log.Info("next rows will be duplicated by fault injection", "rows", n)
	return nil
}

// State returns a snapshot of the current faults.
func (f *Faults) State() FaultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FaultState{Paused: f.paused, PublishDelay: f.delay, MarkDelay: f.markDelay, DropNext: f.drop, DuplicateNext: f.duplicate}
}

// faultPlan is what one batch does: the first drop rows are dropped, the
// following duplicate rows are sent twice.
type faultPlan struct {
	drop, duplicate  int
	delay, markDelay time.Duration
}

// take reserves the faults for a batch of n rows.
func (f *Faults) take(n int) faultPlan {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := faultPlan{delay: f.delay, markDelay: f.markDelay}
	p.drop = min(f.drop, n)
	f.drop -= p.drop
	p.duplicate = min(f.duplicate, n-p.drop)
	f.duplicate -= p.duplicate
	return p
}

// refund gives back the row faults of a batch that was rolled back, so that
// a fault is injected into a batch that really commits.
func (f *Faults) refund(p faultPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop += p.drop
	f.duplicate += p.duplicate
}
