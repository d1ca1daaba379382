package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
)

func TestGenerateIsDeterministic(t *testing.T) {
	tests := []struct {
		name      string
		seedA     uint64
		seedB     uint64
		wantEqual bool
	}{
		{"same seed", 7, 7, true},
		{"other seed", 7, 8, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := Generate(500, tt.seedA, "p/"), Generate(500, tt.seedB, "p/")
			equal := len(a.Records) == len(b.Records)
			for i := 0; equal && i < len(a.Records); i++ {
				equal = a.Records[i].Key == b.Records[i].Key && bytes.Equal(a.Records[i].Value, b.Records[i].Value)
			}
			if equal != tt.wantEqual {
				t.Errorf("corpora of seeds %d and %d equal = %v, want %v", tt.seedA, tt.seedB, equal, tt.wantEqual)
			}
		})
	}
}

func TestGeneratePrefixOnlyChangesKeys(t *testing.T) {
	a, b := Generate(300, 1, "a/"), Generate(300, 1, "bb/")
	if len(a.Records) != len(b.Records) || a.Chunks != b.Chunks {
		t.Fatalf("prefix b/ gives %d records and %d chunks, prefix a/ %d and %d; want the same", len(b.Records), b.Chunks, len(a.Records), a.Chunks)
	}
	for i := range a.Records {
		ra, rb := a.Records[i], b.Records[i]
		if ra.Doc != rb.Doc || ra.Chunks != rb.Chunks || ra.Withdraw != rb.Withdraw || strings.TrimPrefix(ra.Key, "a/") != strings.TrimPrefix(rb.Key, "bb/") {
			t.Fatalf("record %d: got %s (%d chunks) with prefix bb/, want %s (%d chunks) with the prefix changed", i, rb.Key, rb.Chunks, ra.Key, ra.Chunks)
		}
	}
}

// TestGenerateShares checks the corpus has what docs/benchmarks.md says:
// the promised shares of new versions and withdrawals, documents of varied
// size, valid events in order of version.
func TestGenerateShares(t *testing.T) {
	const docs = 20000
	c := Generate(docs, 1, "s/")
	dec := event.NewDecoder(event.DefaultLimits(), event.Splitter{MaxBytes: event.DefaultChunkBytes})
	tests := []struct {
		name      string
		got, want float64
		tolerance float64
	}{
		{"documents", float64(c.Documents), docs, 0},
		{"new version share", float64(c.NewVersions) / docs, NewVersionShare, 0.01},
		{"withdrawal share", float64(c.Withdrawals) / docs, WithdrawalShare, 0.01},
		{"records", float64(len(c.Records)), float64(docs + c.NewVersions + c.Withdrawals), 0},
		{"chunks per upsert", float64(c.Chunks) / float64(docs+c.NewVersions), 4.6, 0.3},
	}
	for _, tt := range tests {
		if math.Abs(tt.got-tt.want) > tt.tolerance {
			t.Errorf("%s = %.3f, want %.3f ± %.3f", tt.name, tt.got, tt.want, tt.tolerance)
		}
	}

	sizes := map[string]int{}
	last := map[string]int64{}
	withdrawn := map[string]bool{}
	firstLater := -1
	for i, r := range c.Records {
		ev, err := dec.Decode([]byte(r.Key), r.Value, "")
		if err != nil {
			t.Fatalf("record %d does not decode: %v", i, err)
		}
		if withdrawn[r.Key] {
			t.Fatalf("record %d: %s has an event after its withdrawal", i, r.Key)
		}
		if ev.Op == keys.OpWithdraw {
			withdrawn[r.Key] = true
			if !r.Withdraw || ev.Version != last[r.Key] {
				t.Fatalf("record %d: withdrawal of %s at version %d (marked %v), want at its last version %d", i, r.Key, ev.Version, r.Withdraw, last[r.Key])
			}
			continue
		}
		if ev.Version != last[r.Key]+1 {
			t.Fatalf("record %d: %s version %d after version %d, want %d", i, r.Key, ev.Version, last[r.Key], last[r.Key]+1)
		}
		if ev.Version > 1 && firstLater < 0 {
			firstLater = i
		}
		last[r.Key] = ev.Version
		if len(ev.Chunks) != r.Chunks {
			t.Fatalf("record %d: %d chunks, marked %d", i, len(ev.Chunks), r.Chunks)
		}
		switch n := len(ev.Chunks); {
		case n <= 3:
			sizes["small"]++
		case n <= 8:
			sizes["medium"]++
		default:
			sizes["large"]++
		}
	}
	for _, size := range []string{"small", "medium", "large"} {
		if sizes[size] == 0 {
			t.Errorf("no %s documents (sizes %v), want every size", size, sizes)
		}
	}
	if firstLater < 0 || firstLater > len(c.Records)/2 {
		t.Errorf("first later version at record %d of %d, want later versions spread over the topic", firstLater, len(c.Records))
	}
}

func TestPartitionSpreadsDocuments(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		counts := make([]int, n)
		for doc := range 10000 {
			counts[Partition(doc, n)]++
		}
		for p, got := range counts {
			if want := 10000 / n; math.Abs(float64(got-want)) > 0.05*float64(want) {
				t.Errorf("%d partitions: partition %d has %d documents, want %d ± 5%%", n, p, got, want)
			}
		}
	}
}
