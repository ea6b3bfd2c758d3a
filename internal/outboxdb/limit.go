package outboxdb

import (
	"context"
	"time"
)

// Limit returns w asking at most n of its questions at a time (at least
// one): the others wait for a turn, or for their context. A family whose
// pool keeps no connections back for the canary inserts bounds its
// watchers with it, so slow watcher questions never take every
// connection the inserts need.
func Limit(w Watched, n int) Watched {
	return &limited{Watched: w, slots: make(chan struct{}, max(1, n))}
}

type limited struct {
	Watched
	slots chan struct{}
}

func (l *limited) acquire(ctx context.Context) (func(), error) {
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *limited) Backlog(ctx context.Context, t Table) (Backlog, error) {
	release, err := l.acquire(ctx)
	if err != nil {
		return Backlog{}, err
	}
	defer release()
	return l.Watched.Backlog(ctx, t)
}

func (l *limited) UnpublishedIndex(ctx context.Context, t Table) (string, error) {
	release, err := l.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	return l.Watched.UnpublishedIndex(ctx, t)
}

func (l *limited) OpenTransactions(ctx context.Context, thresholds []time.Duration) (Transactions, error) {
	release, err := l.acquire(ctx)
	if err != nil {
		return Transactions{}, err
	}
	defer release()
	return l.Watched.OpenTransactions(ctx, thresholds)
}

func (l *limited) CaptureLog(ctx context.Context) (CaptureLog, error) {
	release, err := l.acquire(ctx)
	if err != nil {
		return CaptureLog{}, err
	}
	defer release()
	return l.Watched.CaptureLog(ctx)
}
