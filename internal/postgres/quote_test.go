package postgres

import "testing"

func TestIsUnpublishedPredicate(t *testing.T) {
	cases := []struct {
		name, predicate, column string
		want                    bool
	}{
		{"PostgreSQL's rendering of the seed index matches.", "(published_at IS NULL)", "published_at", true},
		{"A quoted mixed-case column matches.", `("PublishedAt" IS NULL)`, "PublishedAt", true},
		{"The opposite predicate does not match.", "(published_at IS NOT NULL)", "published_at", false},
		{"A predicate with more conditions does not match.", "((published_at IS NULL) AND (aggregate_type <> 'x'::text))", "published_at", false},
		{"Another column whose name ends the same does not match.", "(not_published_at IS NULL)", "published_at", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnpublishedPredicate(tc.predicate, tc.column); got != tc.want {
				t.Errorf("IsUnpublishedPredicate(%q, %q) = %t, want %t", tc.predicate, tc.column, got, tc.want)
			}
		})
	}
}
