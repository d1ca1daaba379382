package bench

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
)

// TestChunkRows requires the peer's rows to be the corpus's chunks, each
// once, keyed by its chunk id, in the partition of its document, and in the
// shape Connect's JsonConverter reads with schemas.
func TestChunkRows(t *testing.T) {
	c := Generate(40, 3, "p/")
	rows, err := chunkRows(c, 8, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != c.Chunks {
		t.Fatalf("%d rows, want the corpus's %d chunks", len(rows), c.Chunks)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		var key, value struct {
			Schema  connectSchema  `json:"schema"`
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(r.Key, &key); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(r.Value, &value); err != nil {
			t.Fatal(err)
		}
		id, _ := key.Payload["chunk_id"].(string)
		if _, err := uuid.Parse(id); err != nil || seen[id] || value.Payload["chunk_id"] != id {
			t.Fatalf("row key %q, value id %v: want a fresh chunk id in both", id, value.Payload["chunk_id"])
		}
		seen[id] = true
		if len(value.Schema.Fields) != 7 || value.Schema.Type != "struct" {
			t.Errorf("value schema %+v, want a struct of the chunks table's 7 columns", value.Schema)
		}
		vec, err := base64.StdEncoding.DecodeString(value.Payload["vector"].(string))
		if err != nil || len(vec) == 0 {
			t.Errorf("vector %v: want the base64 of the encoded vector (%v)", value.Payload["vector"], err)
		}
		if r.Partition < 0 || r.Partition >= 3 {
			t.Errorf("partition %d, want one of 3", r.Partition)
		}
	}
}
