package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-canary/outbox-canary/internal/config"
)

func TestPoolSizeGrowsWithItsPipelinesUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		users int
		want  int32
	}{
		{"One pipeline gets room for an insert, a lookup and a watcher at once.", 1, 3},
		{"Twenty-five pipelines still share three connections.", 25, 3},
		{"A hundred pipelines share six.", 100, 6},
		{"Three hundred pipelines share no more than the cap.", 300, PoolMaxConnsCap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PoolSize(tc.users); got != tc.want {
				t.Errorf("PoolSize(%d) = %d, want %d", tc.users, got, tc.want)
			}
		})
	}
}

func TestPoolsShareOnePoolPerConnectionString(t *testing.T) {
	const (
		orders  = "postgres://canary:secret-a@db.invalid:5432/orders?sslmode=disable"
		billing = "postgres://canary:secret-b@db.invalid:5432/billing?sslmode=disable&application_name=billing-probe"
	)
	dbs := []config.Database{
		{DSN: config.InlineSecret(orders)}, {DSN: config.InlineSecret(orders)}, {DSN: config.InlineSecret(orders)},
		{DSN: config.InlineSecret(billing)},
	}
	ps, err := NewPools(context.Background(), dbs, PoolsOptions{}) // connects to nothing
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	info := ps.Info()
	if len(info) != 2 {
		t.Fatalf("%d pools, want 2: %+v", len(info), info)
	}
	for _, pi := range info {
		if pi.Database == "db.invalid:5432/orders as canary" && pi.Users != 3 {
			t.Errorf("orders pool: %d users, want 3", pi.Users)
		}
		for _, secret := range []string{"secret-a", "secret-b"} {
			if strings.Contains(pi.Database, secret) {
				t.Errorf("pool description %q shows the password", pi.Database)
			}
		}
	}
	a, _ := ps.Pool(dbs[0])
	b, _ := ps.Pool(dbs[2])
	c, _ := ps.Pool(dbs[3])
	if a != b || a == c {
		t.Errorf("pipelines on one database got different pools, or two databases one")
	}
	if got := a.Config().ConnConfig.RuntimeParams["application_name"]; got != ApplicationName {
		t.Errorf("application_name %q, want %q", got, ApplicationName)
	}
	if got := c.Config().ConnConfig.RuntimeParams["application_name"]; got != "billing-probe" {
		t.Errorf("application_name %q, want the DSN's billing-probe", got)
	}
	if _, err := ps.Pool(config.Database{DSN: config.InlineSecret("postgres://other.invalid/x")}); err == nil {
		t.Error("a database the pools were not built for got a pool")
	}
}

// countingQuerier records how many queries run at once.
type countingQuerier struct {
	running, most int
	release       chan struct{}
}

type fakeRow struct{ q *countingQuerier }

func (r fakeRow) Scan(...any) error { r.q.running--; return nil }

func (q *countingQuerier) QueryRow(context.Context, string, ...any) pgx.Row {
	q.running++
	q.most = max(q.most, q.running)
	return fakeRow{q}
}

func (q *countingQuerier) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("not used")
}

func TestLimitHoldsBackAQueryUntilASlotIsFree(t *testing.T) {
	q := &countingQuerier{}
	slots := make(chan struct{}, 1)
	l := Limit(q, slots)
	first := l.QueryRow(context.Background(), "SELECT 1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.QueryRow(ctx, "SELECT 2").Scan(); !errors.Is(err, context.Canceled) {
		t.Errorf("second query while the only slot is held: %v, want it to wait for its context", err)
	}
	if err := first.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := l.QueryRow(context.Background(), "SELECT 3").Scan(); err != nil {
		t.Errorf("query after the slot came back: %v", err)
	}
	if q.most != 1 {
		t.Errorf("%d queries ran at once, want 1", q.most)
	}
}
