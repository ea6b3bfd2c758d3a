package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// QuoteIdent quotes one SQL identifier (a column or an unqualified table).
func QuoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }

// QuoteTable quotes a possibly schema-qualified table name ("public.outbox"):
// each part on its own, as config validated them.
func QuoteTable(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}

// IsUnpublishedPredicate reports whether an index predicate, as pg_get_expr
// prints it ("(published_at IS NULL)"), is exactly "<column> IS NULL". A
// predicate with more conditions does not serve a query that has only this
// one, so it does not count.
func IsUnpublishedPredicate(predicate, column string) bool {
	s := strings.TrimSpace(predicate)
	for strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s == column+" IS NULL" || s == QuoteIdent(column)+" IS NULL"
}
