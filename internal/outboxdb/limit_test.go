package outboxdb

import (
	"context"
	"errors"
	"testing"
	"time"
)

// blockingDB answers each Backlog question when told to, and says when
// one has started.
type blockingDB struct {
	Watched
	started chan struct{}
	answer  chan struct{}
}

func (b *blockingDB) Backlog(ctx context.Context, t Table) (Backlog, error) {
	b.started <- struct{}{}
	<-b.answer
	return Backlog{}, nil
}

func TestLimitAsksAtMostNQuestionsAtATime(t *testing.T) {
	db := &blockingDB{started: make(chan struct{}, 10), answer: make(chan struct{})}
	w := Limit(db, 2)
	done := make(chan struct{}, 3)
	for range 3 {
		go func() {
			_, _ = w.Backlog(context.Background(), Table{})
			done <- struct{}{}
		}()
	}
	<-db.started
	<-db.started
	select {
	case <-db.started:
		t.Fatal("a third question started while two were unanswered")
	default:
	}
	db.answer <- struct{}{} // one answered: the third may start
	<-db.started
	db.answer <- struct{}{}
	db.answer <- struct{}{}
	for range 3 {
		<-done
	}

	// A question waiting for its turn gives up with its context.
	go func() { _, _ = w.Backlog(context.Background(), Table{}) }()
	go func() { _, _ = w.Backlog(context.Background(), Table{}) }()
	<-db.started
	<-db.started
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := w.Backlog(ctx, Table{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a question over the limit with an expired context: %v, want the context's error", err)
	}
	db.answer <- struct{}{}
	db.answer <- struct{}{}
}
