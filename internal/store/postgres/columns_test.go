package postgres

import (
	"reflect"
	"testing"
)

// TestMetadataKeepsItsTypes writes metadata as the projector stores it and
// reads it as a repair does: a float that happens to be whole (3.0) must
// come back a float, not the integer 3.
func TestMetadataKeepsItsTypes(t *testing.T) {
	in := map[string]any{"ratio": 3.0, "count": int64(3), "tiny": 1e-9, "huge": 1e21, "pi": 3.25, "name": "x", "ok": true, "none": nil}
	text, err := jsonText(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := metadataOf(&text)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("metadata read back as %#v (from %s), want %#v", got, text, in)
	}
}
