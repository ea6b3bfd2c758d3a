package stacktest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	outboxsql "github.com/outbox-canary/outbox-canary/deploy/sql"
	"github.com/outbox-canary/outbox-canary/internal/config"
)

// MySQL is the stack's MariaDB 10.11, as stack.sh describes it in the env
// file: the least-privilege user canary (rows of the databases canary and
// canary_*, PROCESS, BINLOG MONITOR), the admin canary_admin (DDL), and
// canary_tls, which must use TLS.
type MySQL struct {
	// DSN and AdminDSN are mysql:// URLs on the database canary.
	DSN, AdminDSN string
	Host, Port    string
	Version       string
	// TLSUser and TLSPasswordFile: the user that must use TLS, and the
	// file of its password; empty on a stack from before the secured
	// listeners.
	TLSUser, TLSPasswordFile string
}

// MySQL returns the stack's MariaDB. A stack without one (started by a
// stack.sh from before MariaDB joined it), or whose MariaDB does not
// answer, skips the test, or fails it when CI is "true".
func (s Stack) MySQL(t testing.TB) MySQL {
	t.Helper()
	m := MySQL{DSN: s.Env["OUTBOX_CANARY_MYSQL_DSN"], AdminDSN: s.Env["OUTBOX_CANARY_MYSQL_ADMIN_DSN"],
		Host: s.Env["OUTBOX_CANARY_MYSQL_HOST"], Port: s.Env["OUTBOX_CANARY_MYSQL_PORT"],
		Version: s.Env["OUTBOX_CANARY_MYSQL_VERSION"], TLSUser: s.Env["OUTBOX_CANARY_MYSQL_TLS_USERNAME"],
		TLSPasswordFile: s.Env["OUTBOX_CANARY_MYSQL_TLS_PASSWORD_FILE"]}
	why := ""
	if m.DSN == "" || m.AdminDSN == "" || m.Port == "" {
		why = "the stack has no MariaDB (run `deploy/local/stack.sh up` again to add it)"
	} else if c, err := net.DialTimeout("tcp", net.JoinHostPort(m.Host, m.Port), dialTimeout); err != nil {
		why = fmt.Sprintf("the stack's MariaDB does not answer: %v", err)
	} else {
		c.Close()
	}
	if why != "" {
		Unavailable(t, "stacktest: %s", why)
	}
	return m
}

// OpenMySQL opens a database/sql handle on a mysql:// DSN, as the prober
// reads it (UTC sessions), closed when the test ends.
func OpenMySQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	cfg, err := config.ParseMySQLDSN(dsn)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

// NewDatabase creates an empty database named canary_<test>_<random>
// (the user canary may use every canary_* database) and returns the DSNs
// of the user canary and of the admin on it. It is dropped when the test
// ends.
func (m MySQL) NewDatabase(t testing.TB) (dsn, adminDSN string) {
	t.Helper()
	name := "canary_" + uniqueName(t, "_", 40)
	admin := OpenMySQL(t, m.AdminDSN)
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("stacktest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("stacktest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(t, m.DSN, name), withDatabase(t, m.AdminDSN, name)
}

func withDatabase(t testing.TB, dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// The supported outbox tables on MySQL, with the same column mappings as
// on PostgreSQL.
var (
	MySQLSeedA        = Schema{Name: "seed schema A (MySQL)", SQL: outboxsql.MySQLSchemaA, Route: SeedA.Route, Kind: SeedA.Kind, Columns: SeedA.Columns}
	MySQLSeedB        = Schema{Name: "seed schema B (MySQL)", SQL: outboxsql.MySQLSchemaB, Route: SeedB.Route, Kind: SeedB.Kind, Columns: SeedB.Columns}
	MySQLSeedDebezium = Schema{Name: "Debezium's outbox (MySQL)", SQL: outboxsql.MySQLDebeziumOutbox, Route: SeedDebezium.Route, Kind: SeedDebezium.Kind, Columns: SeedDebezium.Columns}
)

// FreshOutbox creates a database holding the schema's outbox table and
// returns the DSN of the least-privilege user canary on it and an admin
// handle.
func (m MySQL) FreshOutbox(t testing.TB, schema Schema) (string, *sql.DB) {
	t.Helper()
	dsn, adminDSN := m.NewDatabase(t)
	admin := OpenMySQL(t, adminDSN)
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	if _, err := admin.ExecContext(ctx, schema.SQL); err != nil {
		t.Fatalf("load %s: %v", schema.Name, err)
	}
	return dsn, admin
}

// InsertMySQLRow inserts one business row into a seed outbox on MySQL; age
// backdates its created_at on the database clock.
func InsertMySQLRow(t testing.TB, db *sql.DB, schema Schema, published bool, age time.Duration) {
	t.Helper()
	q := fmt.Sprintf(`INSERT INTO outbox (%s, aggregate_id, payload, created_at, published_at)
		VALUES ('order', 'ord-1', '{}', SYSDATE(6) - INTERVAL ? MICROSECOND, IF(?, SYSDATE(6), NULL))`, schema.Route)
	if _, err := db.ExecContext(context.Background(), q, age.Microseconds(), published); err != nil {
		t.Fatalf("insert an outbox row: %v", err)
	}
}

// MySQLDatabaseName is the database a mysql:// DSN names.
func MySQLDatabaseName(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// RecommendedMariaDBConnectorFile is the recommended configuration of
// Debezium's MariaDB connector, relative to the module root (docs/mysql.md).
const RecommendedMariaDBConnectorFile = "deploy/local/connect/outbox-connector-mariadb.json"

// MariaDBConnector reads the recommended MariaDB connector configuration
// and fills in its placeholders: the stack's CDC user, the database of dsn,
// the topic prefix, a replica server id of its own, the brokers and the
// schema history topic (SchemaHistoryTopic, which the test creates).
func (m MySQL) MariaDBConnector(t testing.TB, s Stack, dsn string, names ConnectorNames) map[string]string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	text, err := os.ReadFile(filepath.Join(root, RecommendedMariaDBConnectorFile))
	if err != nil {
		t.Fatalf("stacktest: %v", err)
	}
	var id [3]byte
	_, _ = rand.Read(id[:])
	vars := map[string]string{
		"@MYSQL_HOST@": m.Host, "@MYSQL_PORT@": m.Port,
		"@MYSQL_USER@": s.Env["OUTBOX_CANARY_MYSQL_CDC_USER"], "@MYSQL_PASSWORD@": s.Env["OUTBOX_CANARY_MYSQL_CDC_PASSWORD"],
		"@MYSQL_DBNAME@": MySQLDatabaseName(dsn), "@TOPIC_PREFIX@": names.TopicPrefix,
		// A replica's server id: unique among the server's replicas, so
		// tests running alongside each get one of their own.
		"@SERVER_ID@":            fmt.Sprint(100000 + int(id[0])<<16 | int(id[1])<<8 | int(id[2])),
		"@BROKERS@":              strings.Join(s.KafkaBrokers, ","),
		"@SCHEMA_HISTORY_TOPIC@": names.SchemaHistoryTopic(),
	}
	if vars["@MYSQL_USER@"] == "" {
		t.Skip("stacktest: the stack's MariaDB has no CDC user (run deploy/local/stack.sh up again)")
	}
	var unknown []string
	filled := placeholderRE.ReplaceAllFunc(text, func(p []byte) []byte {
		v, ok := vars[string(p)]
		if !ok {
			unknown = append(unknown, string(p))
			return p
		}
		quoted, _ := json.Marshal(v)
		return quoted[1 : len(quoted)-1]
	})
	if len(unknown) > 0 {
		t.Fatalf("stacktest: %s: unknown placeholders %v", RecommendedMariaDBConnectorFile, unknown)
	}
	var cfg map[string]string
	if err := json.Unmarshal(filled, &cfg); err != nil {
		t.Fatalf("stacktest: %s: %v", RecommendedMariaDBConnectorFile, err)
	}
	return cfg
}

// SchemaHistoryTopic is where a MySQL or MariaDB connector of these names
// keeps the tables' structure.
func (n ConnectorNames) SchemaHistoryTopic() string { return "schema-history." + n.TopicPrefix }

// NewCDCUser creates a MariaDB user of the test's own with the privileges
// Debezium's MariaDB connector needs (as the stack's canary_cdc has them),
// dropped after the test, so that the connector's binlog connection can be
// told apart from other tests' (StreamingBinlog).
func (m MySQL) NewCDCUser(t testing.TB) (user, password string) {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	user, password = fmt.Sprintf("cdc_%x", rnd), fmt.Sprintf("pw_%x", rnd)
	admin := OpenMySQL(t, m.AdminDSN)
	ctx, cancel := context.WithTimeout(context.Background(), serverWait)
	defer cancel()
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'", user, password),
		fmt.Sprintf("GRANT SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '%s'@'127.0.0.1'", user),
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("stacktest: CDC user: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serverWait)
		defer cancel()
		if _, err := admin.ExecContext(ctx, fmt.Sprintf("DROP USER IF EXISTS '%s'@'127.0.0.1'", user)); err != nil {
			t.Errorf("stacktest: drop CDC user %s: %v", user, err)
		}
	})
	return user, password
}

// StreamingBinlog waits until user reads the binlog (a "Binlog Dump"
// thread of its own on the server): the connector streams, the MariaDB
// analogue of an active replication slot. A connector's RUNNING state
// comes before that: rows committed in between are before the position
// it starts from. A task of c that fails meanwhile fails the test with
// its trace.
func (m MySQL) StreamingBinlog(t testing.TB, c *Connector, user string) {
	t.Helper()
	admin := OpenMySQL(t, m.AdminDSN)
	Eventually(t, connectorWait, user+" to read the binlog", func() (bool, string) {
		ctx := context.Background()
		if st, err := c.Status(ctx); err == nil {
			c.fatalIfTaskFailed(t, st)
		}
		var n int
		err := admin.QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND COMMAND LIKE 'Binlog Dump%'", user).Scan(&n)
		return err == nil && n > 0, fmt.Sprintf("%d binlog dump threads, %v", n, err)
	})
}
