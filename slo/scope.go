package slo

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Scope is alerting.selector: the labels, matched exactly, that confine
// the generated rules and dashboards to one environment of a Prometheus
// holding several. Every expression selects them and every aggregation
// and join keeps them, so two scopes with the same pipeline names never
// merge. The zero Scope selects everything, as before scopes existed.
type Scope map[string]string

// Labels are the scope's label names, sorted.
func (s Scope) Labels() []string { return slices.Sorted(maps.Keys(s)) }

// Pairs are the scope's matchers as name, value pairs, sorted by name.
func (s Scope) Pairs() []string {
	var out []string
	for _, k := range s.Labels() {
		out = append(out, k, s[k])
	}
	return out
}

// Matchers are the scope's matchers as PromQL text, sorted by name:
// env="prod".
func (s Scope) Matchers() []string {
	var out []string
	for _, k := range s.Labels() {
		out = append(out, fmt.Sprintf("%s=%q", k, s[k]))
	}
	return out
}

// By is labels followed by the scope's label names, for a by () or
// on () clause that must keep the scope.
func (s Scope) By(labels ...string) []string {
	return append(slices.Clone(labels), s.Labels()...)
}

// ByClause is "by (labels..., scope...)", or "" when both are empty, so
// an unscoped sum(x) stays as it was.
func (s Scope) ByClause(labels ...string) string {
	all := s.By(labels...)
	if len(all) == 0 {
		return ""
	}
	return "by (" + strings.Join(all, ", ") + ")"
}
