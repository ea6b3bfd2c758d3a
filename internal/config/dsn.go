package config

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig resolves the DSN and parses it as the prober, check, diagnose
// and lint connect with it: the one place a pool configuration is made
// from the configuration. Pool sizes and timeouts are the caller's.
//
// Its error starts with "database.dsn: " and never contains the password
// nor any other part of the connection string: pgx's own parse errors
// quote the string with the password masked on a best-effort basis, which
// misses a password with an unescaped @ or an unterminated quote.
func (d Database) PoolConfig() (*pgxpool.Config, error) {
	cfg, err := d.poolConfig()
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	return cfg, nil
}

func (d Database) poolConfig() (*pgxpool.Config, error) {
	dsn, err := d.DSN.Resolve()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnError(err)
	}
	// libpq's URL syntax takes the user information up to the first @, so
	// "postgres://u:p@ss@host/db" is the password "p" on the host
	// "ss@host": every connection error would then show the rest of the
	// password as the host name.
	hosts := []string{cfg.ConnConfig.Host}
	for _, f := range cfg.ConnConfig.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	for _, h := range hosts {
		if strings.Contains(h, "@") {
			return nil, errors.New("the host name contains @: percent-encode an @ in the user name or password as %40")
		}
	}
	return cfg, nil
}

// dsnError rewrites a pgx parse error without the connection string: pgx's
// message (the setting at fault) is kept, its quoted input dropped.
func dsnError(err error) error {
	const generic = "not a valid connection string (a postgres:// URL or keyword=value pairs)"
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return errors.New(generic)
	}
	// pgx prints "cannot parse `<masked input>`: <message> (<cause>)". The
	// prefix is rebuilt from the same input, so cutting it leaves pgx's
	// own words, whatever the masking did.
	prefix := pgconn.NewParseConfigError(pce.ConnString, "", nil).Error()
	msg, ok := strings.CutPrefix(pce.Error(), prefix)
	if !ok {
		return errors.New(generic)
	}
	cause := errors.Unwrap(pce)
	if cause != nil {
		msg = strings.TrimSuffix(msg, " ("+cause.Error()+")")
	}
	// A few messages end in a value taken from the input
	// ("unknown target_session_attrs value: x").
	if i := strings.IndexAny(msg, ":\"'`"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return errors.New(generic)
	}
	hint := ""
	switch {
	case msg == "failed to configure TLS" && tlsProblem(cause) != "":
		hint = ": " + tlsProblem(cause)
	case msg == "failed to parse as URL" || msg == "failed to parse as keyword/value":
		// The parsers' causes say what is wrong in fixed words, or quote
		// the input; only the former are kept.
		if cause != nil && !strings.ContainsAny(cause.Error(), "\"'`") {
			hint = " (" + cause.Error() + ")"
		}
		if strings.HasPrefix(msg, "failed to parse as URL") {
			hint += "; percent-encode @ : / ? # % and spaces in the user name and password"
		} else {
			hint += "; a connection string is a postgres:// URL or keyword=value pairs"
		}
	case errors.As(cause, new(*fs.PathError)):
		hint = " (a file it names cannot be read)"
	}
	return errors.New("not a valid connection string: " + msg + hint)
}

// tlsProblem names the TLS setting of the DSN that pgx could not use,
// from the fixed words pgx starts its error with (pgconn's configTLS),
// and why, in words that never come from the DSN: a file's path is left
// out, only the system's reason ("no such file or directory") is kept.
// "" for an error it does not know.
func tlsProblem(cause error) string {
	if cause == nil {
		return ""
	}
	why := ""
	var pe *fs.PathError
	if errors.As(cause, &pe) {
		why = " (" + pe.Err.Error() + ")"
	}
	text := cause.Error()
	for _, p := range []struct{ pgx, ours string }{
		{"unable to read CA file", "sslrootcert cannot be read" + why},
		{"unable to add CA to cert pool", "sslrootcert holds no PEM certificate"},
		{"unable to load system certificate pool", "the system's CA certificates cannot be loaded (sslrootcert=system)"},
		{"unable to read cert", "sslcert cannot be read" + why},
		{"unable to load cert", "sslcert and sslkey are not a certificate and its key"},
		{"unable to read sslkey", "sslkey cannot be read" + why},
		{"failed to decode sslkey", "sslkey holds no PEM private key"},
		{"unable to find sslpassword", "sslkey is encrypted and sslpassword is not set"},
		{"unable to decrypt key", "sslkey cannot be decrypted with sslpassword"},
		{`both "sslcert" and "sslkey" are required`, "sslcert and sslkey go together"},
		{"sslmode is invalid", "sslmode is not one of disable, allow, prefer, require, verify-ca, verify-full"},
	} {
		if strings.HasPrefix(text, p.pgx) {
			return p.ours
		}
	}
	return ""
}

// CheckSecrets resolves every secret the prober will read (the signing
// key, each pipeline's DSN and SASL password) and parses each DSN as
// PoolConfig (or MySQLConfig) does, and returns every problem at once as Problems, with
// lines when the Config was loaded from a file. Validate checks inline
// values only; validate and run call CheckSecrets before trusting the
// environment and the secret files.
func (c *Config) CheckSecrets() error {
	v := &validator{pos: c.pos}
	if _, err := c.SigningKey.Resolve(); err != nil {
		v.add("signing_key", "", "%s", err)
	}
	for i, k := range c.PreviousSigningKeys {
		if _, err := k.Resolve(); err != nil {
			v.add(fmt.Sprintf("previous_signing_keys[%d]", i), "", "%s", err)
		}
	}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		pv := in{v: v, p: p, base: fmt.Sprintf("pipelines[%d]", i)}
		if err := p.Database.checkDSN(); err != nil {
			pv.add("database.dsn", "%s", err)
		}
		if p.Kafka.SASL.Mechanism != "" {
			if _, err := p.Kafka.SASL.Password.Resolve(); err != nil {
				pv.add("kafka.sasl.password", "%s", err)
			}
		}
	}
	return v.problems.err()
}
