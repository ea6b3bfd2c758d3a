package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each DSN is broken in a way that makes pgx quote it; the error must keep
// the password and everything after the user information to itself.
// Every secret part is spelt with a Q so no message word can match it.
func TestADSNErrorNeverShowsThePasswordOrTheRestOfTheDSN(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "notpemQ.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dsn string
		hidden    []string
		want      string
	}{
		{"a URL password with an unescaped @", "postgres://u:pQ@ssQ@dbhostQ/dbnameQ",
			[]string{"pQ", "ssQ", "dbhostQ", "dbnameQ"}, "the host name contains @: percent-encode an @ in the user name or password as %40"},
		{"a URL password with an unescaped /", "postgres://u:pQ/ssQ@dbhostQ/dbnameQ",
			[]string{"pQ", "ssQ", "dbhostQ", "dbnameQ"}, "not a valid connection string: invalid port"},
		{"a URL password with a space", "postgres://u:sQ ret@dbhostQ/dbnameQ",
			[]string{"sQ", "ret@", "dbhostQ", "dbnameQ"}, "not a valid connection string: failed to parse as URL (unexpected spaces found in password, use percent-encoded spaces (%20) instead); percent-encode @ : / ? # % and spaces in the user name and password"},
		{"a URL password with a bad escape", "postgres://u:sQ%zzretQ@dbhostQ/dbnameQ",
			[]string{"sQ", "zzretQ", "dbhostQ", "dbnameQ"}, "not a valid connection string: failed to parse as URL (invalid percent-encoded token in password); percent-encode @ : / ? # % and spaces in the user name and password"},
		{"a URL with a bad port", "postgres://u:sQcret@dbhostQ:portQ/dbnameQ",
			[]string{"sQcret", "dbhostQ", "portQ", "dbnameQ"}, "not a valid connection string: invalid port"},
		{"a URL with an unterminated IPv6 host", "postgres://u:sQcret@[dbhostQ/dbnameQ",
			[]string{"sQcret", "dbhostQ", "dbnameQ"}, "not a valid connection string: failed to parse as URL; percent-encode @ : / ? # % and spaces in the user name and password"},
		{"a URL with a bad query value", "postgres://u:sQcret@dbhostQ/dbnameQ?target_session_attrs=Qany",
			[]string{"sQcret", "dbhostQ", "dbnameQ", "Qany"}, "not a valid connection string: unknown target_session_attrs value"},
		{"keyword/value pairs with a bad port", "host=dbhostQ password=sQcret port=5432Q",
			[]string{"sQcret", "dbhostQ", "5432Q"}, "not a valid connection string: invalid port"},
		{"keyword/value pairs with an unterminated quote", "host=dbhostQ password='sQ cretQ",
			[]string{"sQ", "cretQ", "dbhostQ"}, "not a valid connection string: failed to parse as keyword/value (unterminated quoted string in connection info string); a connection string is a postgres:// URL or keyword=value pairs"},
		{"keyword/value pairs with a bad timeout", "host=dbhostQ password=sQcret connect_timeout=tenQ",
			[]string{"sQcret", "dbhostQ", "tenQ"}, "not a valid connection string: invalid connect_timeout"},
		{"keyword/value pairs naming a missing CA file", "host=dbhostQ password=sQcret sslmode=verify-full sslrootcert=/nonexistent/caQ.pem",
			[]string{"sQcret", "dbhostQ", "caQ"}, "not a valid connection string: failed to configure TLS: sslrootcert cannot be read (no such file or directory)"},
		{"a URL naming a CA file that holds no certificate", "postgres://u:sQcret@dbhostQ/dbnameQ?sslmode=verify-full&sslrootcert=" + notPEM,
			[]string{"sQcret", "dbhostQ", "dbnameQ", "notpemQ"}, "not a valid connection string: failed to configure TLS: sslrootcert holds no PEM certificate"},
		{"a URL with a client certificate but no key", "postgres://u:sQcret@dbhostQ/dbnameQ?sslmode=verify-full&sslcert=" + notPEM,
			[]string{"sQcret", "dbhostQ", "dbnameQ", "notpemQ"}, "not a valid connection string: failed to configure TLS: sslcert and sslkey go together"},
		{"a URL naming a missing client key", "postgres://u:sQcret@dbhostQ/dbnameQ?sslmode=verify-full&sslcert=/nonexistent/certQ.pem&sslkey=/nonexistent/keyQ.pem",
			[]string{"sQcret", "dbhostQ", "dbnameQ", "certQ", "keyQ"}, "not a valid connection string: failed to configure TLS: sslkey cannot be read (no such file or directory)"},
		{"a URL with a misspelt sslmode", "postgres://u:sQcret@dbhostQ/dbnameQ?sslmode=verify_fullQ",
			[]string{"sQcret", "dbhostQ", "dbnameQ", "verify_fullQ"}, "not a valid connection string: failed to configure TLS: sslmode is not one of disable, allow, prefer, require, verify-ca, verify-full"},
		{"a bare password", "sQcretpassword",
			[]string{"sQcretpassword"}, "not a valid connection string: failed to parse as keyword/value (invalid keyword/value); a connection string is a postgres:// URL or keyword=value pairs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Database{DSN: InlineSecret(tc.dsn)}.PoolConfig()
			if err == nil {
				t.Fatalf("PoolConfig(%q) succeeded", tc.dsn)
			}
			for _, h := range tc.hidden {
				if strings.Contains(err.Error(), h) {
					t.Errorf("the error shows %q: %v", h, err)
				}
			}
			if want := "database.dsn: " + tc.want; err.Error() != want {
				t.Errorf("error:\n  got  %v\n  want %s", err, want)
			}
		})
	}
}

func TestAValidDSNGivesAPoolConfig(t *testing.T) {
	cases := []struct{ name, dsn, host, password string }{
		{"a URL with a percent-encoded @ in the password", "postgres://u:p%40ss@db.internal:5433/orders", "db.internal", "p@ss"},
		{"a URL with a percent-encoded / and space", "postgres://u:a%2Fb%20c@db/orders", "db", "a/b c"},
		{"keyword/value pairs with a quoted password", "host=db password='p@ss word' dbname=orders", "db", "p@ss word"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Database{DSN: InlineSecret(tc.dsn)}.PoolConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ConnConfig.Host != tc.host || cfg.ConnConfig.Password != tc.password {
				t.Fatalf("host %q password %q, want %q %q", cfg.ConnConfig.Host, cfg.ConnConfig.Password, tc.host, tc.password)
			}
		})
	}
}

// validate checks an inline DSN at load time, as check would at start.
func TestAnInlineDSNIsParsedAtLoadTime(t *testing.T) {
	data := strings.Replace(inlineSecrets, "postgres://canary:s3cr3t-db-password@db/orders", "postgres://canary:s3cr3t@db-password@db/orders", 1)
	_, err := Load([]byte(data))
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "db-password") ||
		err.Error() != `line 6: pipelines[0] "orders": database.dsn: the host name contains @: percent-encode an @ in the user name or password as %40` {
		t.Fatalf("got %v", err)
	}
}

func TestCheckSecretsReportsEverySecretThatCannotBeRead(t *testing.T) {
	dir := t.TempDir()
	badDSNFile := filepath.Join(dir, "dsn")
	if err := os.WriteFile(badDSNFile, []byte("postgres://u:s3cr3t@x@db/orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OC_TEST_PAYMENTS_DSN", "host=db password=s3cr3t port=x")
	data := `instance_id: t
signing_key: {env: OC_TEST_UNSET_KEY}
pipelines:
  - name: orders
    database: {dsn: {file: ` + badDSNFile + `}}
    kafka: {brokers: ["k:9092"]}
    budgets: {end_to_end: 2s}
  - name: payments
    database: {dsn: {env: OC_TEST_PAYMENTS_DSN}}
    kafka:
      brokers: ["k:9092"]
      sasl: {mechanism: plain, username: u, password: {file: ` + filepath.Join(dir, "missing") + `}}
    budgets: {end_to_end: 2s}
`
	cfg, err := Load([]byte(data))
	if err != nil {
		t.Fatalf("Load checks only inline secrets, but: %v", err)
	}
	err = cfg.CheckSecrets()
	var problems Problems
	if !errors.As(err, &problems) {
		t.Fatalf("CheckSecrets() = %v, want Problems", err)
	}
	want := []string{
		"line 2: signing_key: environment variable OC_TEST_UNSET_KEY is not set",
		`line 5: pipelines[0] "orders": database.dsn: the host name contains @: percent-encode an @ in the user name or password as %40`,
		`line 9: pipelines[1] "payments": database.dsn: not a valid connection string: invalid port`,
		`line 12: pipelines[1] "payments": kafka.sasl.password: secret file: open ` + filepath.Join(dir, "missing") + `: no such file or directory`,
	}
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(problems), len(want), err)
	}
	for i, w := range want {
		if problems[i].Error() != w {
			t.Errorf("problem %d:\n  got  %s\n  want %s", i, problems[i], w)
		}
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("CheckSecrets repeats a secret:\n%v", err)
	}
	t.Setenv("OC_TEST_UNSET_KEY", "key")
	t.Setenv("OC_TEST_PAYMENTS_DSN", "host=db password=s3cr3t")
	if err := os.WriteFile(badDSNFile, []byte("postgres://u:s3cr3t@db/orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "missing"), []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckSecrets(); err != nil {
		t.Fatalf("with every secret readable: %v", err)
	}
}

// FuzzPoolConfig: whatever the password, a DSN that fails to parse never
// shows it, nor the host and database after it. The password is fenced by
// Q7 and Z9, which no message contains, so a leak of any end shows.
func FuzzPoolConfig(f *testing.F) {
	for _, pw := range []string{"secret", "p@ss", "p/ss", "p ss", "p%zz", "p'ss", "p:ss@", "p\"ss", "@@", "%40"} {
		f.Add(pw)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		pw = "Q7" + pw + "Z9"
		for _, dsn := range []string{
			"postgres://canary:" + pw + "@dbhostq/dbnameq",
			"host=dbhostq dbname=dbnameq password=" + pw,
			"host=dbhostq dbname=dbnameq password='" + pw + "'",
			pw,
		} {
			_, err := Database{DSN: InlineSecret(dsn)}.PoolConfig()
			if err == nil {
				continue
			}
			for _, hidden := range []string{"Q7", "Z9", "dbhostq", "dbnameq"} {
				if strings.Contains(err.Error(), hidden) {
					t.Fatalf("PoolConfig(%q) error shows %q: %v", dsn, hidden, err)
				}
			}
		}
	})
}
