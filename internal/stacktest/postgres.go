package stacktest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// serverWait bounds the waits of the replication slot helpers.
const serverWait = 30 * time.Second

// DropSlotOnCleanup drops a replication slot before the database goes:
// DROP DATABASE refuses a database that still has a logical slot, and a
// leftover slot pins WAL for the whole server.
func DropSlotOnCleanup(t testing.TB, pool *pgxpool.Pool, slot string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		defer cancel()
		if _, err := pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
			t.Errorf("drop replication slot %s: %v", slot, err)
		}
	})
}

// RoleDSN creates a login role that is a member of inRoles only (for
// example pg_monitor, or none at all) and returns a DSN for it on dsn's
// database; pool is a superuser connection to that database. The role is
// dropped after the test.
func (s Stack) RoleDSN(t testing.TB, pool *pgxpool.Pool, dsn string, inRoles ...string) string {
	t.Helper()
	ctx := context.Background()
	role := "role_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	const password = "role-password"
	create := fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password)
	if len(inRoles) > 0 {
		create += " IN ROLE " + strings.Join(inRoles, ", ")
	}
	if _, err := pool.Exec(ctx, create); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		defer cancel()
		// Privileges granted on the test database depend on the role.
		if _, err := pool.Exec(ctx, "DROP OWNED BY "+role); err != nil {
			t.Errorf("drop what role %s owns: %v", role, err)
		}
		admin, err := pgx.Connect(ctx, s.PGAdminDSN)
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	u.User = url.UserPassword(role, password)
	return u.String()
}

// StreamSlot attaches a logical replication stream to slot, as a connector
// does, so that the slot is active until the test ends; then it detaches
// and waits until PostgreSQL has let go of the slot (so it can be dropped).
func StreamSlot(t testing.TB, pool *pgxpool.Pool, dsn, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	conn, err := pgconn.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	conn.Frontend().Send(&pgproto3.Query{String: "START_REPLICATION SLOT " + slot + " LOGICAL 0/0"})
	if err := conn.Frontend().Flush(); err != nil {
		t.Fatalf("START_REPLICATION: %v", err)
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("START_REPLICATION: %v", err)
		}
		if _, ok := msg.(*pgproto3.CopyBothResponse); ok {
			break
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("START_REPLICATION: %s", e.Message)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		defer cancel()
		_ = conn.Close(ctx)
		Eventually(t, serverWait, "slot "+slot+" to be released", func() (bool, string) {
			var active bool
			err := pool.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
			return err == nil && !active || errors.Is(err, pgx.ErrNoRows), fmt.Sprintf("active %t, %v", active, err)
		})
	})
}

// SlotPair is a database with two logical replication slots: Ours, streamed
// as a running connector's is, and Leftover, another pipeline's or an
// abandoned one, that nothing reads. Suffix is unique to the test.
type SlotPair struct {
	DSN            string
	Pool           *pgxpool.Pool
	Ours, Leftover string
	Suffix         string
}

// NewSlotPair creates a Debezium outbox database with a SlotPair; both
// slots are dropped after the test.
func (s Stack) NewSlotPair(t testing.TB) SlotPair {
	t.Helper()
	dsn, pool := s.FreshOutbox(t, SeedDebezium)
	ctx := context.Background()
	suffix := strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	sp := SlotPair{DSN: dsn, Pool: pool, Ours: "ours_" + suffix, Leftover: "leftover_" + suffix, Suffix: suffix}
	for _, slot := range []string{sp.Ours, sp.Leftover} {
		if _, err := pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot); err != nil {
			t.Fatalf("create slot %s: %v", slot, err)
		}
		DropSlotOnCleanup(t, pool, slot)
	}
	StreamSlot(t, pool, dsn, sp.Ours)
	Eventually(t, serverWait, "slot "+sp.Ours+" to be active", func() (bool, string) {
		var active bool
		err := pool.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", sp.Ours).Scan(&active)
		return err == nil && active, fmt.Sprintf("active %t, %v", active, err)
	})
	return sp
}
