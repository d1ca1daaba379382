package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/projector/projector/internal/keys"
)

func idsCommand(_ context.Context, args []string, e env) error {
	fs := newFlagSet("ids", "ids <document_key> <version> <chunk_count>", e)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if fs.NArg() != 3 {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("want three arguments: document_key version chunk_count")}
	}
	key := fs.Arg(0)
	version, err := strconv.ParseInt(fs.Arg(1), 10, 64)
	if err != nil || version < 1 {
		return &exitError{code: 2, err: fmt.Errorf("version %q: want an integer >= 1", fs.Arg(1))}
	}
	count, err := strconv.Atoi(fs.Arg(2))
	if err != nil || count < 0 || count > 1_000_000 {
		return &exitError{code: 2, err: fmt.Errorf("chunk_count %q: want an integer from 0 to 1000000", fs.Arg(2))}
	}
	for i := 0; i < count; i++ {
		fmt.Fprintln(e.stdout, keys.ChunkID(key, version, i))
	}
	return nil
}
