package index

import (
	"context"
	"fmt"
	"strings"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
)

// Readers search the collection alias; the projector writes each
// generation's physical collection (internal/generation).

var _ generation.Names = (*Store)(nil)

// ForCollection returns a store of the same server, connection and
// settings writing collection, whose vectors are of dimension dim: one
// generation's. The returned store shares s's connection, which only the
// store Open returned closes.
func (s *Store) ForCollection(collection string, dim int) *Store {
	cfg := s.cfg
	cfg.Collection, cfg.Dim = collection, dim
	return &Store{client: s.client, cfg: cfg}
}

// Resolve says what name is on the server: an alias (and of which
// collection), a collection, or nothing. The server finds a collection
// by its aliases too, so the aliases are listed after the collection is
// found: an alias another member creates meanwhile is then listed, and
// never taken for a collection.
func (s *Store) Resolve(ctx context.Context, name string) (generation.NameKind, string, error) {
	exists, err := s.client.CollectionExists(ctx, name)
	if err != nil {
		return 0, "", classify(ctx, fmt.Errorf("check collection %s: %w", name, err))
	}
	if !exists {
		return generation.NameNone, "", nil
	}
	aliases, err := s.client.ListAliases(ctx)
	if err != nil {
		return 0, "", classify(ctx, fmt.Errorf("list aliases: %w", err))
	}
	for _, a := range aliases {
		if a.GetAliasName() == name {
			return generation.NameAlias, a.GetCollectionName(), nil
		}
	}
	return generation.NameCollection, name, nil
}

// EnsureAlias creates the alias alias of collection when the server has
// no alias of that name, and leaves an existing one as it is: where the
// alias points is the switch's to change, never a start's. A collection
// named alias refuses it (the server cannot hold both).
func (s *Store) EnsureAlias(ctx context.Context, alias, collection string) error {
	kind, target, err := s.Resolve(ctx, alias)
	if err != nil {
		return err
	}
	switch kind {
	case generation.NameAlias:
		return nil
	case generation.NameCollection:
		return &project.StoreError{Store: project.StoreIndex, Kind: project.Fatal, Err: fmt.Errorf(
			"cannot create the alias %s of collection %s: a collection of that name exists (%s) that the generation registry does not name", alias, collection, target)}
	}
	err = s.client.CreateAlias(ctx, alias, collection)
	if err != nil && grpcCode(err) != codes.AlreadyExists {
		return classify(ctx, fmt.Errorf("create alias %s of collection %s: %w", alias, collection, err))
	}
	return nil
}

// DropCollections deletes the collection named alias and every
// generation's collection under it (alias_g<N>), with their aliases: for
// the clean-up of a benchmark's or a test's namespace, never of a
// deployment's.
func DropCollections(ctx context.Context, c *qdrant.Client, alias string) error {
	names, err := c.ListCollections(ctx)
	if err != nil {
		return fmt.Errorf("list collections: %w", err)
	}
	for _, name := range names {
		if name == alias || strings.HasPrefix(name, alias+"_g") {
			if err := c.DeleteCollection(ctx, name); err != nil {
				return fmt.Errorf("delete collection %s: %w", name, err)
			}
		}
	}
	return nil
}

// CountPoints returns the number of points of the store's collection,
// exactly.
func (s *Store) CountPoints(ctx context.Context) (uint64, error) {
	n, err := s.client.Count(ctx, &qdrant.CountPoints{CollectionName: s.cfg.Collection, Exact: qdrant.PtrOf(true)})
	if err != nil {
		return 0, classify(ctx, fmt.Errorf("count the points of %s: %w", s.cfg.Collection, err))
	}
	return n, nil
}

// Drop deletes the store's collection, if it exists: an aborted or
// retired generation's. The server answers false for a collection it does
// not have, which a drop run again meets.
func (s *Store) Drop(ctx context.Context) error {
	if _, err := s.client.GetCollectionsClient().Delete(ctx, &qdrant.DeleteCollection{CollectionName: s.cfg.Collection}); err != nil {
		return classify(ctx, fmt.Errorf("delete collection %s: %w", s.cfg.Collection, err))
	}
	return nil
}

// PointAlias points alias at collection with one alias operation: a
// CreateAlias, which the server applies to an existing alias as a move,
// so a reader searching the alias finds the old collection or the new one
// and never no alias (a delete and a create would be two operations, each
// applied alone, with no alias between them). A legacy collection named
// alias is deleted first, as the alias cannot exist beside it: readers
// find nothing between the two calls (docs/upgrading.md). Pointing an
// alias where it points already changes nothing.
func (s *Store) PointAlias(ctx context.Context, alias, collection string) error {
	kind, target, err := s.Resolve(ctx, alias)
	if err != nil {
		return err
	}
	switch {
	case kind == generation.NameAlias && target == collection:
		return nil
	case kind == generation.NameCollection:
		if err := s.ForCollection(alias, s.cfg.Dim).Drop(ctx); err != nil {
			return err
		}
	}
	if err := s.client.CreateAlias(ctx, alias, collection); err != nil {
		return classify(ctx, fmt.Errorf("point alias %s at collection %s: %w", alias, collection, err))
	}
	return nil
}
