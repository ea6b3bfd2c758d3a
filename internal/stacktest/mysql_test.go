package stacktest_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/outbox-canary/outbox-canary/internal/stacktest"
)

// The stack's MariaDB: its binlog as log capture needs it, its user canary
// confined to the canary databases, and canary_tls let in over TLS only,
// through a mysql:// DSN that verifies the server against the stack's CA.
func TestMariaDBIsRowBasedLeastPrivilegedAndTakesTLS(t *testing.T) {
	s := stacktest.Load(t)
	m := s.MySQL(t)
	ctx := context.Background()
	db := stacktest.OpenMySQL(t, m.DSN)
	var format, image string
	var logBin bool
	var serverID int
	if err := db.QueryRowContext(ctx, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id").Scan(&logBin, &format, &image, &serverID); err != nil {
		t.Fatal(err)
	}
	if !logBin || format != "ROW" || image != "FULL" || serverID == 0 {
		t.Errorf("log_bin %t, binlog_format %s, binlog_row_image %s, server_id %d: want ON, ROW, FULL and an id", logBin, format, image, serverID)
	}
	if _, err := db.ExecContext(ctx, "CREATE DATABASE outside_the_canary_grants"); err == nil {
		_, _ = db.ExecContext(ctx, "DROP DATABASE outside_the_canary_grants")
		t.Error("the user canary created a database: it must have no DDL privilege")
	}

	if m.TLSUser == "" {
		t.Skip("this stack predates the secured listeners")
	}
	pw, err := os.ReadFile(m.TLSPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(m.TLSUser, strings.TrimSpace(string(pw))), Host: m.Host + ":" + m.Port, Path: "/canary"}
	plain := stacktest.OpenMySQL(t, u.String())
	if err := plain.PingContext(ctx); err == nil {
		t.Error("canary_tls logged in without TLS")
	}
	u.RawQuery = url.Values{"ca": {s.Env["OUTBOX_CANARY_TLS_CA_FILE"]}}.Encode()
	secured := stacktest.OpenMySQL(t, u.String())
	var name, version string
	if err := secured.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_version'").Scan(&name, &version); err != nil {
		t.Fatalf("canary_tls over TLS verified by the stack's CA: %v", err)
	}
	if !strings.HasPrefix(version, "TLS") {
		t.Errorf("Ssl_version %q, want a TLS version", version)
	}
}
