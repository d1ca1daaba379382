package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseReplayTarget(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want replayTarget
		ok   bool
	}{
		{"earliest", replayTarget{earliest: true, offset: -1}, true},
		{"0", replayTarget{offset: 0}, true},
		{"1500", replayTarget{offset: 1500}, true},
		{"2024-05-01T12:00:00Z", replayTarget{offset: -1, at: at}, true},
		{"2024-05-01T14:00:00+02:00", replayTarget{offset: -1, at: at}, true},
		{"", replayTarget{}, false},
		{"-1", replayTarget{}, false},
		{"latest", replayTarget{}, false},
		{"2024-05-01", replayTarget{}, false},
	}
	for _, tt := range tests {
		got, err := parseReplayTarget(tt.in)
		if (err == nil) != tt.ok || got.earliest != tt.want.earliest || got.offset != tt.want.offset || !got.at.Equal(tt.want.at) {
			t.Errorf("parseReplayTarget(%q) = %+v, %v; want %+v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParsePartitions(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "[]", true},
		{"0,2,5", "[0 2 5]", true},
		{" 1 , 1 ", "[1]", true},
		{"0,x", "[]", false},
		{"-1", "[]", false},
		{"0,,1", "[]", false},
	}
	for _, tt := range tests {
		got, err := parsePartitions(tt.in)
		if (err == nil) != tt.ok || (tt.ok && fmt.Sprint(got) != tt.want) {
			t.Errorf("parsePartitions(%q) = %v, %v; want %s, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestPrintReplay(t *testing.T) {
	var b bytes.Buffer
	printReplay(&b, "reset the offsets of group projector on topic documents:", []replayRow{
		{partition: 0, before: 12, after: 0, start: 0, end: 12, clampedFrom: -1},
		{partition: 1, before: -1, after: 30, start: 4, end: 30, clampedFrom: 99},
		{partition: 2, before: 7, after: 9, start: 0, end: 9, clampedFrom: -1, noRecordAfter: true},
	})
	got := b.String()
	for _, want := range []string{
		"reset the offsets of group projector on topic documents:",
		"PARTITION  BEFORE  AFTER  START  END  NOTE",
		"0          12      0      0      12",
		"1          none    30     4      30   offset 99 is outside the partition's range 4..30; clamped",
		"2          7       9      0      9    no record at or after that time; set to the end",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printReplay printed\n%s\nwant a line containing %q", got, want)
		}
	}
}
