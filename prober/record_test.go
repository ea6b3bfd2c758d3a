package prober

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// TestCanaryRecordsAreEncodedAsJSONMarshalEncodesThem fills every field of
// random canaries by reflection (so a field the judge adds is filled too),
// each left at its zero value now and then, and wants appendCanary's bytes
// to be json.Marshal's.
func TestCanaryRecordsAreEncodedAsJSONMarshalEncodesThem(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		var c judge.Canary
		fillRandom(rng, reflect.ValueOf(&c).Elem())
		want, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendCanary(nil, &c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("canary %d encoded\n  %s\nwant, as json.Marshal encodes it,\n  %s", i, got, want)
		}
	}
	if got, _ := appendCanary(nil, nil); string(got) != "null" {
		t.Errorf("a nil canary encoded %s, want null", got)
	}
}

// encodeStateFile is the snapshot appendStateFile writes of f, its judge's
// meta given as the state store gives it.
func encodeStateFile(t *testing.T, f *stateFile, meta judge.State) []byte {
	t.Helper()
	metaJSON, err := appendMeta(nil, &meta)
	if err != nil {
		t.Fatal(err)
	}
	b, err := appendStateFile(nil, f, metaJSON)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotsAreEncodedAsJSONMarshalEncodesThem does the same for whole
// snapshots: random states, by reflection, of random canaries.
func TestSnapshotsAreEncodedAsJSONMarshalEncodesThem(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 1000 {
		var st judge.State
		fillRandom(rng, reflect.ValueOf(&st).Elem())
		f := stateFile{Version: stateVersion, Pipeline: randomStrings[rng.IntN(len(randomStrings))],
			Instance: randomStrings[rng.IntN(len(randomStrings))], Generation: randomStrings[rng.IntN(len(randomStrings))], Judge: &st}
		if rng.IntN(10) == 0 {
			f.Judge = nil
		}
		want, err := json.Marshal(&f)
		if err != nil {
			t.Fatal(err)
		}
		got := encodeStateFile(t, &f, st.Meta())
		if string(got) != string(want) {
			t.Fatalf("snapshot %d encoded\n  %s\nwant, as json.Marshal encodes it,\n  %s", i, got, want)
		}
	}
}

var randomStrings = []string{"", "k", "canary-key", "019ad2c4-0000-7000-8001-000000000001", "1000001", "end_to_end",
	"publish", "a\"b", `back\slash`, "<html>&", "\u2028", "ключ", "tab\tnew\nline", "\x01", "\x7f"}

var randomZones = []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+30*60), time.FixedZone("minus", -8*3600)}

// fillRandom fills v with random values, each left at its zero value one
// time in four.
func fillRandom(rng *rand.Rand, v reflect.Value) {
	if rng.IntN(4) == 0 {
		v.SetZero()
		return
	}
	if v.Type() == reflect.TypeFor[time.Time]() {
		t := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(randomZones[rng.IntN(len(randomZones))])
		if rng.IntN(3) == 0 {
			t = t.Truncate(time.Millisecond)
		}
		v.Set(reflect.ValueOf(t))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(randomStrings[rng.IntN(len(randomStrings))])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(rng.Int64() >> rng.IntN(63))
		if rng.IntN(2) == 0 {
			v.SetInt(-v.Int())
		}
	case reflect.Uint64:
		v.SetUint(rng.Uint64() >> rng.IntN(64))
	case reflect.Struct:
		for i := range v.NumField() {
			fillRandom(rng, v.Field(i))
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillRandom(rng, p.Elem())
		v.Set(p)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range rng.IntN(4) {
			k := reflect.New(v.Type().Key()).Elem()
			switch k.Kind() {
			case reflect.String:
				k.SetString(randomStrings[rng.IntN(len(randomStrings))])
			default:
				k.SetInt(rng.Int64N(64) - 8)
			}
			e := reflect.New(v.Type().Elem()).Elem()
			fillRandom(rng, e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Slice:
		if set := v.Addr().MethodByName("Set"); set.IsValid() {
			// A judge.ByName: filled as the map it stands for, through
			// the method that keeps it sorted.
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			for range rng.IntN(4) {
				e := reflect.New(set.Type().In(1)).Elem()
				fillRandom(rng, e)
				set.Call([]reflect.Value{reflect.ValueOf(randomStrings[rng.IntN(len(randomStrings))]), e})
			}
			return
		}
		n := rng.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fillRandom(rng, s.Index(i))
		}
		v.Set(s)
	default:
		panic("fillRandom: no random " + v.Type().String())
	}
}
