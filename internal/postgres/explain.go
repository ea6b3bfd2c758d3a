package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outbox-canary/outbox-canary/internal/explain"
)

// SQLSTATEs of the login failures Explain words.
const (
	sqlstateInvalidPassword      = "28P01" // wrong password, or no such role (the server does not say which)
	sqlstateInvalidAuthorization = "28000" // pg_hba.conf has no line for the connection, or rejects it
)

// Explain turns an error of a connection to PostgreSQL whose cause an
// operator fixes in database.dsn (a rejected password, a server
// certificate the client does not trust, a server that requires TLS) into
// a sentence that says which, and what to check. Other errors, and nil,
// come back unchanged, as do errors already explained. The result wraps
// err, so errors.Is and errors.As still see the cause. It never contains
// the DSN nor the password: pgx's connection errors carry neither.
func Explain(err error) error {
	if err == nil || explain.Done(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if msg := explainPostgres(err); msg != "" {
		return explain.Wrap(msg, err)
	}
	return err
}

func explainPostgres(err error) string {
	// pgx's ConnectError says where and as whom; other errors (a query on
	// a connection that broke) do not.
	server, forUser, user := "the server", "", "this connection"
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Config != nil {
		server = "the server " + net.JoinHostPort(ce.Config.Host, strconv.Itoa(int(ce.Config.Port)))
		forUser = fmt.Sprintf(" for user %q, database %q", ce.Config.User, ce.Config.Database)
		user = fmt.Sprintf("user %q", ce.Config.User)
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == sqlstateInvalidPassword:
			return fmt.Sprintf("password authentication failed%s on %s: the server rejected the user name or the password; "+
				"check both in database.dsn", forUser, server)
		case pg.Code == sqlstateInvalidAuthorization && strings.HasSuffix(pg.Message, "no encryption"):
			return fmt.Sprintf("%s refuses %s without TLS (%s): set sslmode=verify-full, and sslrootcert "+
				"to the CA that signed the server's certificate, in database.dsn", server, user, pg.Message)
		case pg.Code == sqlstateInvalidAuthorization && strings.Contains(pg.Message, "pg_hba.conf"):
			return fmt.Sprintf("%s does not admit %s (%s): its pg_hba.conf decides by host, user, database "+
				"and whether the connection uses TLS (sslmode in database.dsn)", server, user, pg.Message)
		}
		return ""
	}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("TLS: the certificate of %s is not signed by a CA this client trusts "+
			"(sslrootcert in database.dsn; without it, the system's CAs): %v", server, unknown)
	case errors.As(err, &host):
		return fmt.Sprintf("TLS: the certificate of %s is not valid for the host name %q in database.dsn, "+
			"which sslmode=verify-full checks: %v; connect by a name it carries", server, host.Host, host)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Sprintf("TLS: the certificate of %s has expired or is not valid yet: %v", server, invalid)
	case errors.As(err, &invalid):
		return fmt.Sprintf("TLS: the certificate of %s is not valid: %v", server, invalid)
	case errors.As(err, &verify):
		return fmt.Sprintf("TLS: the certificate of %s could not be verified: %v", server, verify.Err)
	}
	return ""
}
