package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Database families: database.kind.
const (
	KindPostgres = "postgres"
	KindMySQL    = "mysql"
)

// KindOfDSN is the family a DSN names by its form: a mysql:// or
// mariadb:// URL is MySQL, anything else PostgreSQL (libpq's URL and
// keyword=value forms).
func KindOfDSN(dsn string) string {
	scheme, _, ok := strings.Cut(dsn, "://")
	if ok && (strings.EqualFold(scheme, "mysql") || strings.EqualFold(scheme, "mariadb")) {
		return KindMySQL
	}
	return KindPostgres
}

// Family is the database's family: database.kind, or the DSN's form
// (KindOfDSN), which resolves the DSN.
func (d Database) Family() (string, error) {
	if d.Kind != "" {
		return d.Kind, nil
	}
	dsn, err := d.DSN.Resolve()
	if err != nil {
		return "", fmt.Errorf("database.dsn: %w", err)
	}
	return KindOfDSN(dsn), nil
}

// DeclaredFamily is the family the configuration itself names, without
// reading a secret: database.kind, or the form of a DSN written inline.
// False when only the DSN from env or file can tell, which `rules` and
// `dashboards` do not read.
func (d Database) DeclaredFamily() (string, bool) {
	if d.Kind != "" {
		return d.Kind, true
	}
	if d.DSN.IsInline() {
		dsn, _ := d.DSN.Resolve()
		return KindOfDSN(dsn), true
	}
	return "", false
}

// checkDSN parses the DSN as its family's driver will, for validation.
func (d Database) checkDSN() error {
	kind, err := d.Family()
	if err != nil {
		return errors.Unwrap(err)
	}
	if kind == KindMySQL {
		_, err = d.mysqlConfig()
		return err
	}
	_, err = d.poolConfig()
	return err
}

// MySQLConfig resolves the DSN and parses it as the prober connects to a
// MySQL or MariaDB database. Its sessions are pinned to UTC
// (time_zone='+00:00', times parsed in UTC) so a TIMESTAMP column and
// SYSDATE(6) read the same instant whatever the server's zone, with
// parameters interpolated by the client (one round trip a statement, not
// prepare, execute and close).
//
// Its error starts with "database.dsn: " and never contains the password
// nor any other part of the connection string.
func (d Database) MySQLConfig() (*mysql.Config, error) {
	cfg, err := d.mysqlConfig()
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	return cfg, nil
}

func (d Database) mysqlConfig() (*mysql.Config, error) {
	dsn, err := d.DSN.Resolve()
	if err != nil {
		return nil, err
	}
	return ParseMySQLDSN(dsn)
}

// ParseMySQLDSN parses a mysql:// (or mariadb://) URL, or a DSN in
// go-sql-driver/mysql's own form, as MySQLConfig does.
func ParseMySQLDSN(dsn string) (*mysql.Config, error) {
	var cfg *mysql.Config
	var err error
	if KindOfDSN(dsn) == KindMySQL {
		cfg, err = mysqlURL(dsn)
	} else {
		cfg, err = mysql.ParseDSN(dsn)
		if err != nil {
			err = mysqlDriverError(err, dsn)
		}
	}
	if err != nil {
		return nil, err
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.InterpolateParams = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return cfg, nil
}

// mysqlURL reads mysql://user:password@host:port/database?params.
func mysqlURL(dsn string) (*mysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error quotes the URL, password and all: keep its reason only.
		var ue *url.Error
		why := ""
		if errors.As(err, &ue) && !strings.ContainsAny(ue.Err.Error(), "\"'`") {
			why = " (" + ue.Err.Error() + ")"
		}
		return nil, errors.New("not a valid mysql:// URL" + why + "; percent-encode @ : / ? # % and spaces in the user name and password")
	}
	if strings.Contains(u.Host, "@") {
		return nil, errors.New("the host name contains @: percent-encode an @ in the user name or password as %40")
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, errors.New("a mysql:// URL needs a host")
	}
	if port == "" {
		port = "3306"
	}
	cfg.Addr = net.JoinHostPort(host, port)
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return nil, errors.New("a mysql:// URL names one database as its path (mysql://host:3306/database)")
	}
	q := u.Query()
	tlsMode, ca := q.Get("tls"), q.Get("ca")
	q.Del("tls")
	q.Del("ca")
	if err := mysqlTLS(cfg, tlsMode, ca, host); err != nil {
		return nil, err
	}
	// The rest are the driver's parameters, read by its own parser from a
	// DSN that holds no secret.
	if len(q) > 0 {
		extra, err := mysql.ParseDSN("/?" + q.Encode())
		if err != nil {
			return nil, mysqlDriverError(err, "")
		}
		cfg.Params = extra.Params
		cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = extra.Timeout, extra.ReadTimeout, extra.WriteTimeout
		cfg.Collation, cfg.MaxAllowedPacket = extra.Collation, extra.MaxAllowedPacket
	}
	return cfg, nil
}

// mysqlTLS sets the TLS of a URL's tls and ca parameters.
func mysqlTLS(cfg *mysql.Config, mode, ca, host string) error {
	if mode == "" && ca != "" {
		mode = "true"
	}
	switch mode {
	case "", "false":
		if ca != "" {
			return errors.New("ca is set but tls is false")
		}
		return nil
	case "preferred", "skip-verify":
		if ca != "" {
			return fmt.Errorf("ca is set but tls is %s, which does not verify the server", mode)
		}
		cfg.TLSConfig = mode
		return nil
	case "true":
	default:
		return errors.New("tls is not one of true, false, preferred, skip-verify")
	}
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			var pe *os.PathError
			why := ""
			if errors.As(err, &pe) {
				why = " (" + pe.Err.Error() + ")"
			}
			return errors.New("ca cannot be read" + why)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return errors.New("ca holds no PEM certificate")
		}
	}
	cfg.TLS = tc
	return nil
}

// mysqlDriverError is go-sql-driver/mysql's parse error without the
// password: its messages are fixed words, a few followed by a value from
// the DSN, which is cut.
func mysqlDriverError(err error, dsn string) error {
	msg := err.Error()
	// "invalid DSN: <what>" is fixed words; other messages end in ": <the
	// value>" taken from the DSN.
	if !strings.HasPrefix(msg, "invalid DSN: ") {
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[:i]
		}
	}
	if strings.ContainsAny(msg, "\"'`") {
		msg = "invalid DSN"
	}
	if dsn != "" {
		if c, perr := mysql.ParseDSN(dsn); perr == nil && c.Passwd != "" && strings.Contains(msg, c.Passwd) {
			msg = "invalid DSN"
		}
	}
	return errors.New("not a valid MySQL connection string: " + strings.TrimSpace(msg) +
		" (a mysql:// URL, or go-sql-driver/mysql's user:password@tcp(host:3306)/database)")
}

// DescribeMySQL names a MySQL database for logs: host:port/database as
// user, never the password.
func DescribeMySQL(c *mysql.Config) string {
	return fmt.Sprintf("%s/%s as %s", c.Addr, c.DBName, c.User)
}
