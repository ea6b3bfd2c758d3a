package judge

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// TestByNameIsEncodedAndDecodedAsTheMapItStandsFor fills random maps of
// the value types a canary keeps, sets the same entries in a ByName in
// another order, and wants the ByName to answer, encode and decode as the
// map does.
func TestByNameIsEncodedAndDecodedAsTheMapItStandsFor(t *testing.T) {
	names := []string{"", "read", "publish", "end_to_end", "a\"b", "<html>&", "\u2028", "ключ", "\x01", "read_to_publish", "Z"}
	rng := rand.New(rand.NewPCG(7, 14))
	for i := range 2000 {
		stamps := map[string]time.Time{}
		verdicts := map[string]*Verdict{}
		for range rng.IntN(len(names) + 1) {
			name := names[rng.IntN(len(names))]
			at := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(time.FixedZone("x", 3600*rng.IntN(3)))
			stamps[name] = at
			verdicts[name] = &Verdict{Outcome: []string{"", Good, Bad, Unjudged}[rng.IntN(4)], Reason: names[rng.IntN(len(names))],
				At: []time.Time{{}, at}[rng.IntN(2)], Observed: rng.IntN(2) == 0}
		}
		var s ByName[time.Time]
		var v ByName[Verdict]
		for _, name := range rng.Perm(len(names)) {
			if at, ok := stamps[names[name]]; ok {
				s.Set(names[name], at)
				s.Set(names[name], at) // set twice: still one entry
				*v.add(names[name], 0) = *verdicts[names[name]]
			}
		}
		checkByName(t, i, s, stamps)
		checkByName(t, i, v, verdicts)
	}
}

func checkByName[V any, M any](t *testing.T, i int, s ByName[V], m map[string]M) {
	t.Helper()
	if len(m) == 0 {
		m = nil // as a ByName nothing was set in; omitted from a canary's record like an empty one
	}
	if len(s) != len(m) {
		t.Fatalf("case %d: %d entries, want the map's %d", i, len(s), len(m))
	}
	for name, want := range m {
		got, ok := s.Get(name)
		if !ok || !s.Has(name) || jsonOf(t, got) != jsonOf(t, want) {
			t.Fatalf("case %d: %q is %v (%t), want %v", i, name, got, ok, want)
		}
	}
	if _, ok := s.Get("absent"); ok || s.Has("absent") {
		t.Fatalf("case %d: a name never set has a value", i)
	}
	want, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("case %d: encoded %s, want as the map %s", i, got, want)
	}
	var back ByName[V]
	if err := json.Unmarshal(want, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != len(s) || (len(m) > 0 && jsonOf(t, back) != string(want)) {
		t.Fatalf("case %d: decoded %v, want %v", i, back, s)
	}
	for k := range back {
		if back[k].Name != s[k].Name {
			t.Fatalf("case %d: decoded %v, want the names in the order of %v", i, back, s)
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestANullByNameDecodesAsNone(t *testing.T) {
	s := ByName[string]{{Name: "read", Value: InvalidBeforeCommit}}
	if err := json.Unmarshal([]byte("null"), &s); err != nil || s != nil {
		t.Errorf("null decoded as %v (%v), want nil", s, err)
	}
	if b, err := json.Marshal(ByName[string](nil)); err != nil || string(b) != "null" {
		t.Errorf("a nil ByName encoded as %s (%v), want null as a nil map", b, err)
	}
}
