package judge

import (
	"encoding/json"
	"slices"
	"strings"
	"unique"
)

// Named is one value of a ByName.
type Named[V any] struct {
	Name  string
	Value V
}

// ByName holds a canary's few values by name (its stamps, their error
// bounds, its verdicts), sorted by name, and is encoded as encoding/json
// encodes a map of them, so a state file does not tell them apart. A
// remembered canary keeps a handful of each for lost_after + forget: a
// map would cost a group of eight slots and its header for each, a slice
// costs the entries.
type ByName[V any] []Named[V]

// search returns where name is or would be inserted, and whether it is
// there. The few entries are scanned: faster than a binary search, and
// the names are mostly the plan's own strings, equal at the first byte
// compared.
func (s ByName[V]) search(name string) (int, bool) {
	for i := range s {
		if s[i].Name == name {
			return i, true
		}
		if s[i].Name > name {
			return i, false
		}
	}
	return len(s), false
}

// Get returns the value of name.
func (s ByName[V]) Get(name string) (V, bool) {
	if i, ok := s.search(name); ok {
		return s[i].Value, true
	}
	var zero V
	return zero, false
}

// find returns the value of name in place, nil when it has none: no copy
// of a large value. The pointer is good until the next insertion.
func (s ByName[V]) find(name string) *V {
	if i, ok := s.search(name); ok {
		return &s[i].Value
	}
	return nil
}

// Has reports whether name has a value.
func (s ByName[V]) Has(name string) bool {
	_, ok := s.search(name)
	return ok
}

// Set sets the value of name.
func (s *ByName[V]) Set(name string, v V) { *s.add(name, 0) = v }

// add returns the value of name, inserting a zero value in its place if
// there was none. An insertion that needs more room makes room for most
// entries at once, the most the caller will add (rather than doubling,
// which would leave unused room for a remembered canary's life). The
// pointer is good until the next insertion.
func (s *ByName[V]) add(name string, most int) *V {
	i, ok := s.search(name)
	if !ok {
		if len(*s) == cap(*s) {
			*s = slices.Grow(*s, max(most-len(*s), 1))
		}
		*s = slices.Insert(*s, i, Named[V]{Name: name})
	}
	return &(*s)[i].Value
}

// MarshalJSON encodes the values as an object, as encoding/json encodes a
// map[string]V (keys sorted by their bytes).
func (s ByName[V]) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	b := []byte{'{'}
	for i, e := range s {
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(e.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(e.Value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes an object as encoding/json decodes it into a
// map[string]V (a repeated key: the last value), sorted by name. Names are
// interned: every canary names the same few stamps and segments.
func (s *ByName[V]) UnmarshalJSON(data []byte) error {
	var m map[string]V
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if m == nil {
		*s = nil
		return nil
	}
	out := make(ByName[V], 0, len(m))
	for name, v := range m {
		out = append(out, Named[V]{Name: unique.Make(name).Value(), Value: v})
	}
	slices.SortFunc(out, func(a, b Named[V]) int { return strings.Compare(a.Name, b.Name) })
	*s = out
	return nil
}
