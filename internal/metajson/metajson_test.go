package metajson

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// referencePoint is the relational store's metadata text as first
// written: floats turned into json.Number with a point, then encoding/json.
func referencePoint(m map[string]any) (string, error) {
	typed := make(map[string]any, len(m))
	for k, v := range m {
		if f, ok := v.(float64); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
			s := strconv.FormatFloat(f, 'g', -1, 64)
			if !strings.ContainsAny(s, ".e") {
				s += ".0"
			}
			v = json.Number(s)
		}
		typed[k] = v
	}
	b, err := json.Marshal(typed)
	return string(b), err
}

func referenceJSON(m map[string]any) (string, error) {
	b, err := json.Marshal(m)
	return string(b), err
}

// TestMarshalMatchesEncodingJSON compares Marshal with the text the
// stores held before it, on random metadata and on the values that
// encoding/json escapes or formats specially.
func TestMarshalMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	strs := []string{"", "plain", "with space", "quote\"d", `back\slash`, "<tag>", "a&b", "tab\t", "nl\n", "\x00", "\x7f",
		"ünïcödé", "日本", "\u2028", "x\u2029", "\xff\xfe", "emoji 🙂", strings.Repeat("long ", 50)}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 3, 0.5, 1e-6, 9.99e-7, 1e-7, 1.5e-9, 1e20, 1e21, 1.2345e22, -2.5e-10,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 123456789012345678, 0.1 + 0.2, math.Inf(1), math.NaN()}
	value := func() any {
		switch rng.IntN(7) {
		case 0:
			return nil
		case 1:
			return rng.IntN(2) == 0
		case 2:
			return int64(rng.Uint64())
		case 3:
			return strs[rng.IntN(len(strs))]
		case 4:
			return floats[rng.IntN(len(floats))]
		case 5:
			return math.Float64frombits(rng.Uint64())
		default:
			return []any{"nested"} // not a scalar: encoding/json's way
		}
	}
	cases := []map[string]any{{}, {"a": 1.0}, {"z": "b", "a": "c"}}
	for range 5000 {
		m := map[string]any{}
		for range rng.IntN(12) {
			m[strs[rng.IntN(len(strs))]+strconv.Itoa(rng.IntN(3))] = value()
		}
		cases = append(cases, m)
	}
	for _, m := range cases {
		for _, tc := range []struct {
			floats Floats
			ref    func(map[string]any) (string, error)
		}{{AsJSON, referenceJSON}, {WithPoint, referencePoint}} {
			got, err := Marshal(m, tc.floats)
			want, wantErr := tc.ref(m)
			if (err != nil) != (wantErr != nil) || got != want {
				t.Fatalf("Marshal(%#v, %d) = %q, %v; want %q, %v", m, tc.floats, got, err, want, wantErr)
			}
		}
	}
}

func BenchmarkMarshal(b *testing.B) {
	m := map[string]any{"lang": "en", "pages": int64(12), "draft": false, "score": 0.5}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(m, WithPoint); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalReference(b *testing.B) {
	m := map[string]any{"lang": "en", "pages": int64(12), "draft": false, "score": 0.5}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := referencePoint(m); err != nil {
			b.Fatal(err)
		}
	}
}
