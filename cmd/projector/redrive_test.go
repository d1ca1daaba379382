package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/project"
)

// The dry run's line of a letter redriven and dead-lettered again names
// the event's first place, so an operator sees that two letters are one
// event; a first letter has no such header and no original= field.
func TestDryRunLineNamesTheOriginalPlace(t *testing.T) {
	source := []kgo.RecordHeader{
		{Key: dlq.HeaderReason, Value: []byte("version_conflict")},
		{Key: dlq.HeaderSourceTopic, Value: []byte("documents")},
		{Key: dlq.HeaderSourcePartition, Value: []byte("2")},
		{Key: dlq.HeaderSourceOffset, Value: []byte("3")},
	}
	first := &kgo.Record{Partition: 0, Offset: 0, Key: []byte("doc-1"), Value: []byte("{}"), Headers: source}
	if got, want := dryRunLine(first), `would send partition=0 offset=0 reason=version_conflict key="doc-1" source=documents/2/3 value=2 bytes`; got != want {
		t.Errorf("first letter:\n got %s\nwant %s", got, want)
	}
	again := &kgo.Record{Partition: 0, Offset: 1, Key: []byte("doc-1"),
		Headers: append([]kgo.RecordHeader{{Key: project.HeaderOriginalPosition, Value: []byte("documents/2/2/AAAAAAAAAAAAAAAAAAAAAQ")}}, source...)}
	if got, want := dryRunLine(again), `would send partition=0 offset=1 reason=version_conflict key="doc-1" source=documents/2/3 original=documents/2/2/AAAAAAAAAAAAAAAAAAAAAQ value=tombstone`; got != want {
		t.Errorf("letter redriven before:\n got %s\nwant %s", got, want)
	}
}
