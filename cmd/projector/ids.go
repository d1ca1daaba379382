package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
)

func idsCommand(ctx context.Context, args []string, e env) error {
	var (
		sf    storeFlags
		check bool
	)
	fs := newFlagSet("ids", "ids [--check [store flags]] <document_key> <version> <chunk_count>", e)
	sf.register(fs)
	fs.BoolVar(&check, "check", false, "look each id up in the index, the graph and the relational store; exit with status 3 if one is missing anywhere")
	// Flags may come before or after the three arguments.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return usageError(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if err := parseWithArgs(fs, nil, e); err != nil {
		return err
	}
	if len(pos) != 3 {
		fs.Usage()
		return usageError(errors.New("want three arguments: document_key version chunk_count"))
	}
	key := pos[0]
	version, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || version < 1 {
		return usageError(fmt.Errorf("version %q: want an integer >= 1", pos[1]))
	}
	count, err := strconv.Atoi(pos[2])
	if err != nil || count < 0 || count > 1_000_000 {
		return usageError(fmt.Errorf("chunk_count %q: want an integer from 0 to 1000000", pos[2]))
	}
	if len(key) == 0 || len(key) > 512 {
		return usageError(fmt.Errorf("document_key has %d bytes: want 1 to 512", len(key)))
	}
	ids := keys.ChunkIDs(key, version, count)
	if !check {
		for _, id := range ids {
			fmt.Fprintln(e.stdout, id)
		}
		return nil
	}
	st, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer st.close(context.WithoutCancel(ctx))
	held, err := lookUp(ctx, ids, []chunkLookup{st.index, st.graph, st.relational})
	if err != nil {
		return err
	}
	missing := 0
	for _, id := range ids {
		line, absent := id.String()+" ", false
		for i, name := range []string{project.StoreIndex, project.StoreGraph, project.StoreRelational} {
			answer := "yes"
			if !held[i][id] {
				answer, absent = "no", true
			}
			line += " " + name + "=" + answer
		}
		if absent {
			missing++
		}
		fmt.Fprintln(e.stdout, line)
	}
	if missing > 0 {
		return &exitError{code: exitDiscrepancies, err: fmt.Errorf("%d of %d ids are missing from at least one store", missing, len(ids))}
	}
	return nil
}

// chunkLookup is what ids --check needs of a store.
type chunkLookup interface {
	HasChunks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]bool, error)
}

// lookUpBatch bounds the ids of one store call.
const lookUpBatch = 1000

// lookUp asks every store, concurrently, which of ids it holds.
func lookUp(ctx context.Context, ids []uuid.UUID, stores []chunkLookup) ([]map[uuid.UUID]bool, error) {
	out := make([]map[uuid.UUID]bool, len(stores))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range stores {
		out[i] = make(map[uuid.UUID]bool, len(ids))
		g.Go(func() error {
			for from := 0; from < len(ids); from += lookUpBatch {
				held, err := s.HasChunks(gctx, ids[from:min(from+lookUpBatch, len(ids))])
				if err != nil {
					return err
				}
				for id := range held {
					out[i][id] = true
				}
			}
			return nil
		})
	}
	return out, g.Wait()
}
