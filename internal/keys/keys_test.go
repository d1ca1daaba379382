package keys

import (
	"strconv"
	"testing"

	"github.com/google/uuid"
)

func TestChunkIDGolden(t *testing.T) {
	tests := []struct {
		key     string
		version int64
		ordinal int
		want    string
	}{
		{"doc-42", 3, 0, "230a6eea-e67e-5a55-9a06-302307f8194b"},
	}
	for _, tt := range tests {
		got := ChunkID(tt.key, tt.version, tt.ordinal)
		if got.String() != tt.want {
			t.Errorf("ChunkID(%q, %d, %d) = %s, want %s", tt.key, tt.version, tt.ordinal, got, tt.want)
		}
		if got.Version() != 5 {
			t.Errorf("version of %s = %d, want 5", got, got.Version())
		}
		if got.Variant() != uuid.RFC4122 {
			t.Errorf("variant of %s = %v, want RFC4122", got, got.Variant())
		}
	}
}

func TestChunkIDMatchesNameFormat(t *testing.T) {
	// The id must be exactly UUIDv5(Namespace, "<key>:<version>:<ordinal>"),
	// including for keys that are long or contain separators.
	long := string(make([]byte, 300))
	for _, key := range []string{"doc-42", "a:b:c", "", "ключ", long} {
		got := ChunkID(key, 12, 7)
		want := uuid.NewSHA1(Namespace, []byte(key+":12:7"))
		if got != want {
			t.Errorf("ChunkID(%q, 12, 7) = %s, want %s", key, got, want)
		}
	}
}

func TestChunkIDDistinct(t *testing.T) {
	// Keys containing ':' must not collide with other splits of the same text:
	// "a:1", version 2 and "a", version 1... are different names.
	seen := map[uuid.UUID]string{}
	cases := []struct {
		key     string
		version int64
		ordinal int
	}{
		{"a", 1, 2}, {"a:1", 2, 0}, {"a", 12, 0}, {"a:1", 2, 1}, {"a", 1, 20},
		{"a:1:2", 0, 0}, {"a", 2, 1}, {"b", 1, 2}, {"a", 1, 3},
	}
	for _, c := range cases {
		id := ChunkID(c.key, c.version, c.ordinal)
		name := c.key + ":" + itoa(c.version) + ":" + itoa(int64(c.ordinal))
		if prev, ok := seen[id]; ok {
			t.Errorf("ChunkID collision: %q and %q both give %s", prev, name, id)
		}
		seen[id] = name
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestChunkIDDeterministic(t *testing.T) {
	a := ChunkID("doc-42", 3, 0)
	for i := 0; i < 100; i++ {
		if b := ChunkID("doc-42", 3, 0); b != a {
			t.Fatalf("call %d: got %s, want %s", i, b, a)
		}
	}
	ids := ChunkIDs("doc-42", 3, 3)
	if len(ids) != 3 || ids[0] != a || ids[1] != ChunkID("doc-42", 3, 1) {
		t.Errorf("ChunkIDs = %v, want ordinals 0..2 starting with %s", ids, a)
	}
}

func TestIdempotencyKey(t *testing.T) {
	tests := []struct {
		key     string
		version int64
		op      Op
		want    string
	}{
		{"doc-42", 3, OpUpsert, "document:doc-42:v3:upsert"},
		{"a:b", 10, OpWithdraw, "document:a:b:v10:withdraw"},
	}
	for _, tt := range tests {
		if got := IdempotencyKey(tt.key, tt.version, tt.op); got != tt.want {
			t.Errorf("IdempotencyKey(%q, %d, %s) = %q, want %q", tt.key, tt.version, tt.op, got, tt.want)
		}
	}
}

func FuzzChunkID(f *testing.F) {
	f.Add("doc-42", int64(3), 0)
	f.Add("a:b", int64(1), 5)
	f.Fuzz(func(t *testing.T, key string, version int64, ordinal int) {
		if version < 0 || ordinal < 0 {
			t.Skip()
		}
		got := ChunkID(key, version, ordinal)
		want := uuid.NewSHA1(Namespace, []byte(key+":"+itoa(version)+":"+itoa(int64(ordinal))))
		if got != want {
			t.Fatalf("ChunkID(%q, %d, %d) = %s, want %s", key, version, ordinal, got, want)
		}
		if got.Version() != 5 {
			t.Fatalf("version = %d, want 5", got.Version())
		}
	})
}

func BenchmarkChunkID(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = ChunkID("tenant-7/documents/2024/report-000123.pdf", 42, i%64)
	}
}

func BenchmarkIdempotencyKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = IdempotencyKey("tenant-7/documents/2024/report-000123.pdf", 42, OpUpsert)
	}
}
