package main

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/redrive"
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
	if got, want := dryRunLine(first, nil), `would send partition=0 offset=0 reason=version_conflict key="doc-1" source=documents/2/3 value=2 bytes`; got != want {
		t.Errorf("first letter:\n got %s\nwant %s", got, want)
	}
	again := &kgo.Record{Partition: 0, Offset: 1, Key: []byte("doc-1"),
		Headers: append([]kgo.RecordHeader{{Key: project.HeaderOriginalPosition, Value: []byte("documents/2/2/AAAAAAAAAAAAAAAAAAAAAQ")}}, source...)}
	if got, want := dryRunLine(again, nil), `would send partition=0 offset=1 reason=version_conflict key="doc-1" source=documents/2/3 original=documents/2/2/AAAAAAAAAAAAAAAAAAAAAQ value=tombstone`; got != want {
		t.Errorf("letter redriven before:\n got %s\nwant %s", got, want)
	}
	gone := fmt.Errorf("%w: the topic no longer holds offset 3 (retention deleted it)", redrive.ErrGone)
	if got, want := dryRunLine(first, gone), `would skip partition=0 offset=0 reason=version_conflict key="doc-1" source=documents/2/3 value=2 bytes (the whole record is gone from its source: the topic no longer holds offset 3 (retention deleted it))`; got != want {
		t.Errorf("a letter that would be skipped:\n got %s\nwant %s", got, want)
	}
}
