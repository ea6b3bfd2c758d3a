package config

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

func TestTheDatabaseKindComesFromTheDSNUnlessSet(t *testing.T) {
	cases := []struct {
		name, kind, dsn, want string
	}{
		{"A mysql:// URL is MySQL.", "", "mysql://u:p@db:3306/orders", KindMySQL},
		{"A mariadb:// URL is MySQL.", "", "MariaDB://u:p@db/orders", KindMySQL},
		{"A postgres:// URL is PostgreSQL.", "", "postgres://u:p@db/orders", KindPostgres},
		{"keyword=value pairs are PostgreSQL.", "", "host=db dbname=orders", KindPostgres},
		{"An explicit kind wins over the DSN's form.", KindMySQL, "u:p@tcp(db:3306)/orders", KindMySQL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Database{Kind: tc.kind, DSN: InlineSecret(tc.dsn)}.Family()
			if err != nil || got != tc.want {
				t.Fatalf("Family() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestAMySQLDSNPinsUTCAndReadsItsTLSSettings(t *testing.T) {
	cfg, err := Database{DSN: InlineSecret("mysql://canary:p%40ss@db.internal/orders?tls=true&readTimeout=3s")}.MySQLConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "canary" || cfg.Passwd != "p@ss" || cfg.Addr != "db.internal:3306" || cfg.DBName != "orders" {
		t.Errorf("user %q password %q addr %q database %q", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
	}
	if cfg.Params["time_zone"] != "'+00:00'" || cfg.Loc != time.UTC || !cfg.ParseTime {
		t.Errorf("session time zone %q, location %v, parseTime %t: want UTC throughout", cfg.Params["time_zone"], cfg.Loc, cfg.ParseTime)
	}
	if cfg.TLS == nil || cfg.TLS.ServerName != "db.internal" || cfg.TLS.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLS %+v: want verification of db.internal", cfg.TLS)
	}
	if cfg.ReadTimeout != 3*time.Second {
		t.Errorf("readTimeout %v, want the driver's parameter kept", cfg.ReadTimeout)
	}
	// Go's URL parser takes the user information up to the last @, so an
	// unescaped @ in the password is read as meant.
	at, err := Database{DSN: InlineSecret("mysql://u:p@ss@db/orders")}.MySQLConfig()
	if err != nil || at.Passwd != "p@ss" || at.Addr != "db:3306" {
		t.Errorf("unescaped @: %+v, %v", at, err)
	}
	native, err := Database{Kind: KindMySQL, DSN: InlineSecret("canary:pw@tcp(db:3307)/orders")}.MySQLConfig()
	if err != nil || native.Addr != "db:3307" || native.Params["time_zone"] != "'+00:00'" {
		t.Fatalf("go-sql-driver's own form: %+v, %v", native, err)
	}
}

// As for PostgreSQL: every secret part is spelt with a Q, and no error may
// show one.
func TestAMySQLDSNErrorNeverShowsThePassword(t *testing.T) {
	cases := []struct {
		name, kind, dsn string
		hidden          []string
		want            string
	}{
		{"a URL password with a space", "", "mysql://u:sQ ret@dbhostQ/dbnameQ",
			[]string{"sQ", "ret@", "dbhostQ"}, "not a valid mysql:// URL"},
		{"a URL with a bad port", "", "mysql://u:sQcret@dbhostQ:portQ/dbnameQ",
			[]string{"sQcret", "dbhostQ", "portQ"}, "not a valid mysql:// URL"},
		{"a URL without a database", "", "mysql://u:sQcret@dbhostQ",
			[]string{"sQcret", "dbhostQ"}, "a mysql:// URL names one database as its path (mysql://host:3306/database)"},
		{"a URL naming a missing CA file", "", "mysql://u:sQcret@dbhostQ/dbnameQ?ca=/nonexistent/caQ.pem",
			[]string{"sQcret", "dbhostQ", "caQ"}, "ca cannot be read (no such file or directory)"},
		{"a URL with a bad driver parameter", "", "mysql://u:sQcret@dbhostQ/dbnameQ?readTimeout=tenQ",
			[]string{"sQcret", "dbhostQ", "tenQ"}, "not a valid MySQL connection string"},
		{"the driver's form without the slash", KindMySQL, "u:sQcret@tcp(dbhostQ)",
			[]string{"sQcret", "dbhostQ"}, "not a valid MySQL connection string: invalid DSN: missing the slash separating the database name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Database{Kind: tc.kind, DSN: InlineSecret(tc.dsn)}.MySQLConfig()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "database.dsn: "+tc.want) {
				t.Errorf("error %q, want it to start with %q", msg, "database.dsn: "+tc.want)
			}
			for _, h := range tc.hidden {
				if strings.Contains(msg, h) {
					t.Errorf("error %q shows %q", msg, h)
				}
			}
		})
	}
}
