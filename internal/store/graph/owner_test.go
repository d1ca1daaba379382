package graph

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// TestRaiseFenceRefusesTheEarlierOwner: the new owner raises the graph's
// token before its first batch; from then on the graph refuses the
// earlier owner's writes, though the new owner has written nothing. Before,
// the graph learned a token at its owner's first graph write and took the
// earlier owner's writes until then (the interleaving explorer's cases with
// the owner held before its first index write).
func TestRaiseFenceRefusesTheEarlierOwner(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	topic := prefix + "documents"
	earlier, owner := project.Fence{Topic: topic, Token: 1}, project.Fence{Topic: topic, Token: 2}
	if err := s.RaiseFence(ctx, owner); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	var fenced *project.FencedError
	err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc(prefix+"a", 1, "x")}, Fence: earlier})
	if !errors.As(err, &fenced) || fenced.Newest != 2 {
		t.Fatalf("the earlier owner's write after the raise = %v, want a FencedError naming token 2", err)
	}
	if err := s.RaiseFence(ctx, earlier); !errors.As(err, &fenced) {
		t.Errorf("raising an older token = %v, want a FencedError", err)
	}
	if err := s.RaiseFence(ctx, owner); err != nil {
		t.Errorf("raising the newest token again: %v", err)
	}
}

// TestOwnerReplacesWhatItsLogLeftUncommitted: an earlier owner wrote a
// later event of the partition's log to the graph (version 3, then in
// another case a withdrawal) and never to the relational store, which
// decides; the new owner, writing the log in order, writes version 2.
// Its write replaces what the earlier owner left, where an ordinary
// forward-only write keeps it and its fence would fail for ever. A write
// without a token (a repair), or of another partition's log, moves only
// forward.
func TestOwnerReplacesWhatItsLogLeftUncommitted(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	// Each case has a topic of its own, so its fences are its own.
	var topic string
	at := func(d project.Document, partition int32, offset int64) project.Document {
		d.Position = project.Position{Topic: topic, Partition: partition, Offset: offset}
		return d
	}
	for i, tt := range []struct {
		name        string
		left, write func() project.Write
		wantV       int64
		wantN       int
	}{
		{
			name: "a later version",
			left: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"v", 3, "z"), 0, 12)}, Fence: project.Fence{Topic: topic, Token: 1}}
			},
			write: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"v", 2, "x", "y"), 0, 11)}, Fence: project.Fence{Topic: topic, Token: 2}}
			},
			wantV: 2, wantN: 2,
		},
		{
			name: "a later withdrawal",
			left: func() project.Write {
				return project.Write{Withdrawn: []project.Withdrawal{{Key: prefix + "w", Version: 2, Position: project.Position{Topic: topic, Offset: 12}}}, Fence: project.Fence{Topic: topic, Token: 1}}
			},
			write: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"w", 2, "x", "y"), 0, 11)}, Fence: project.Fence{Topic: topic, Token: 2}}
			},
			wantV: 2, wantN: 2,
		},
		{
			name: "a repair moves only forward",
			left: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"r", 3, "z"), 0, 12)}, Fence: project.Fence{Topic: topic, Token: 1}}
			},
			write: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"r", 2, "x", "y"), 0, 11)}}
			},
			wantV: 3, wantN: 1,
		},
		{
			name: "another partition's log moves only forward",
			left: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"p", 3, "z"), 1, 12)}, Fence: project.Fence{Topic: topic, Partition: 1, Token: 1}}
			},
			write: func() project.Write {
				return project.Write{Live: []project.Document{at(storetest.Doc(prefix+"p", 2, "x", "y"), 0, 11)}, Fence: project.Fence{Topic: topic, Token: 2}}
			},
			wantV: 3, wantN: 1,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			topic = fmt.Sprintf("%sdocuments-%d", prefix, i)
			left, write := tt.left(), tt.write()
			if err := s.Apply(ctx, &left); err != nil {
				t.Fatal(err)
			}
			if write.Fence.Token > 0 {
				if err := s.RaiseFence(ctx, write.Fence); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Apply(ctx, &write); err != nil {
				t.Fatal(err)
			}
			key := write.Live[0].Key
			res, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (d:Document {key: $k}) RETURN d.version AS v`, map[string]any{"k": key}, neo4j.EagerResultTransformer)
			if err != nil {
				t.Fatal(err)
			}
			var v int64
			if len(res.Records) == 1 {
				v, _, _ = neo4j.GetRecordValue[int64](res.Records[0], "v")
			}
			ids, err := s.ChunkIDs(ctx, []string{key})
			if err != nil {
				t.Fatal(err)
			}
			if v != tt.wantV || len(ids[key]) != tt.wantN {
				t.Errorf("the graph holds version %d with %d chunks, want %d with %d", v, len(ids[key]), tt.wantV, tt.wantN)
			}
			if tt.wantV == 2 && len(ids[key]) == 2 && ids[key][0] != keys.ChunkID(key, 2, 0) && ids[key][1] != keys.ChunkID(key, 2, 0) {
				t.Errorf("chunks %v are not version 2's", ids[key])
			}
			tomb, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (t:WithdrawnDocument {key: $k}) RETURN count(t) AS n`, map[string]any{"k": key}, neo4j.EagerResultTransformer)
			if err != nil {
				t.Fatal(err)
			}
			if n, _, _ := neo4j.GetRecordValue[int64](tomb.Records[0], "n"); n != 0 {
				t.Errorf("the left withdrawal's tombstone stays beside the owner's live document")
			}
		})
	}
}
