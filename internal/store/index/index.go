// Package index is the vector index: one Qdrant point per chunk.
//
// The point id is the chunk id; the payload holds document_key (keyword
// index), version (integer index), ordinal, text, title, source and
// metadata (the document's metadata with the chunk's own on top), so a
// search result can be shown and filtered without another store, and the
// log position of the event the chunk is of (source_topic,
// source_partition, source_offset), so a late write of an earlier event
// of the same version does not replace it.
package index

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/projector/projector/internal/project"
)

// Config says how to reach Qdrant and how to write to it.
type Config struct {
	// Addr is the gRPC address, host:port (Qdrant's gRPC port is 6334).
	Addr       string
	Collection string
	// APIKey is sent with every call when set.
	APIKey string
	// TLS, when set, encrypts the connection.
	TLS *tls.Config
	// Dim is the vector dimension of the collection.
	Dim int
	// UpsertBatch bounds the points of one upsert call.
	UpsertBatch int
	// UpsertMaxBytes bounds the encoded size of one upsert call. A
	// document's title and metadata are copied into every point's
	// payload, so a few large records can make a request of any size; it
	// is cut by this bound instead. A point larger than the bound on its
	// own is refused as its record's fault.
	UpsertMaxBytes int
	// UpsertConcurrency bounds the upsert calls of one Apply in flight at
	// once: the server applies them in parallel, and the points built
	// but not yet acknowledged stay under UpsertConcurrency × UpsertBatch.
	UpsertConcurrency int
	// Shards is the shard count of a collection that Migrate creates (0:
	// Qdrant's default, one per node). Qdrant applies one shard's updates
	// one at a time, so concurrent upserts gain from more shards only
	// while the server has cores to spare.
	Shards int
}

// DefaultUpsertMaxBytes is Config.UpsertMaxBytes unless configured: a
// quarter of the 32 MiB gRPC message Qdrant accepts by default.
const DefaultUpsertMaxBytes = 8 << 20

// upsertOverhead bounds what an upsert request adds to its points: the
// collection name, flags and a few bytes per point for the field tags.
const upsertOverhead = 1024

// Store is the Qdrant adapter. It is safe for concurrent use.
type Store struct {
	client *qdrant.Client
	cfg    Config
}

var _ project.Index = (*Store)(nil)

// The gRPC keepalive of the connection to Qdrant, in seconds (the
// go-client's unit); gRPC pings no more often than every 10 s.
const (
	keepAliveTime    = 10
	keepAliveTimeout = 5
)

// Open creates a client. The go-client dials lazily, so an unreachable
// server shows up on the first call, not here.
func Open(cfg Config) (*Store, error) {
	host, portText, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("qdrant address %q: want host:port", cfg.Addr)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("qdrant address %q: port is not a number", cfg.Addr)
	}
	if cfg.UpsertBatch <= 0 {
		cfg.UpsertBatch = 256
	}
	if cfg.UpsertConcurrency <= 0 {
		cfg.UpsertConcurrency = 4
	}
	if cfg.UpsertMaxBytes <= 0 {
		cfg.UpsertMaxBytes = DefaultUpsertMaxBytes
	}
	client, err := qdrant.NewClient(&qdrant.Config{
		Host: host, Port: port, APIKey: cfg.APIKey, UseTLS: cfg.TLS != nil, TLSConfig: cfg.TLS,
		// The version check logs through the standard logger; the
		// projector reports the server's version itself.
		SkipCompatibilityCheck: true,
		// One connection: gRPC multiplexes the concurrent upserts on it.
		// With a pool, calls go round-robin over connections that come
		// back from an outage one at a time, so a store that just
		// recovered fails again on the connection still reconnecting.
		PoolSize: 1,
		// gRPC's own liveness check: after keepAliveTime without a byte
		// from Qdrant it pings, and drops the connection, failing its
		// calls, when the ping is not answered within keepAliveTimeout.
		// It finds a connection that TCP keepalives cannot, one whose
		// peer's kernel answers and whose server does not.
		KeepAliveTime: keepAliveTime, KeepAliveTimeout: keepAliveTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("qdrant client for %s: %w", cfg.Addr, err)
	}
	return &Store{client: client, cfg: cfg}, nil
}

// Close closes the client's connections.
func (s *Store) Close() error { return s.client.Close() }

// Name is the store's label.
func (s *Store) Name() string { return project.StoreIndex }

// Client exposes the go-client to the reconcile and test code of this module.
func (s *Store) Client() *qdrant.Client { return s.client }

// Collection names the collection the store writes.
func (s *Store) Collection() string { return s.cfg.Collection }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.client.HealthCheck(ctx)
	return classify(ctx, err)
}

// Migrate creates the collection and its payload indexes when missing. An
// existing collection with another vector size stops the service: writing
// would fail on every point.
func (s *Store) Migrate(ctx context.Context) error {
	exists, err := s.client.CollectionExists(ctx, s.cfg.Collection)
	if err != nil {
		return classify(ctx, fmt.Errorf("check collection %s: %w", s.cfg.Collection, err))
	}
	if !exists {
		create := &qdrant.CreateCollection{
			CollectionName: s.cfg.Collection,
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{
				Size: uint64(s.cfg.Dim), Distance: qdrant.Distance_Cosine,
			}),
		}
		if s.cfg.Shards > 0 {
			create.ShardNumber = qdrant.PtrOf(uint32(s.cfg.Shards))
		}
		err := s.client.CreateCollection(ctx, create)
		if err != nil && grpcCode(err) != codes.AlreadyExists {
			return classify(ctx, fmt.Errorf("create collection %s: %w", s.cfg.Collection, err))
		}
	}
	if err := s.checkDimension(ctx); err != nil {
		return err
	}
	for field, typ := range map[string]qdrant.FieldType{"document_key": qdrant.FieldType_FieldTypeKeyword, "version": qdrant.FieldType_FieldTypeInteger} {
		_, err := s.client.CreateFieldIndex(ctx, &qdrant.CreateFieldIndexCollection{
			CollectionName: s.cfg.Collection, FieldName: field, FieldType: qdrant.PtrOf(typ), Wait: qdrant.PtrOf(true),
		})
		if err != nil {
			return classify(ctx, fmt.Errorf("create payload index %s: %w", field, err))
		}
	}
	return nil
}

// CheckCollection returns a fatal StoreError unless the collection exists
// with vectors of the embedder's dimension, and changes nothing: for the
// commands that read the stores (reconcile), on which a missing collection
// means nothing was projected there yet, not an empty index to compare.
func (s *Store) CheckCollection(ctx context.Context) error {
	exists, err := s.client.CollectionExists(ctx, s.cfg.Collection)
	if err != nil {
		return classify(ctx, fmt.Errorf("check collection %s: %w", s.cfg.Collection, err))
	}
	if !exists {
		return &project.StoreError{Store: project.StoreIndex, Kind: project.Fatal, Err: fmt.Errorf(
			"collection %s does not exist: nothing was projected to it yet, or --qdrant-collection names another; projector migrate creates it (projector run does too)",
			s.cfg.Collection)}
	}
	return s.checkDimension(ctx)
}

// checkDimension refuses a collection whose vectors are not of the
// embedder's dimension: writing would fail on every point, and comparing
// it would compare another embedder's index.
func (s *Store) checkDimension(ctx context.Context) error {
	info, err := s.client.GetCollectionInfo(ctx, s.cfg.Collection)
	if err != nil {
		return classify(ctx, fmt.Errorf("read collection %s: %w", s.cfg.Collection, err))
	}
	if size := info.GetConfig().GetParams().GetVectorsConfig().GetParams().GetSize(); size != uint64(s.cfg.Dim) {
		return &project.StoreError{Store: project.StoreIndex, Kind: project.Fatal, Err: fmt.Errorf(
			"collection %s has vectors of dimension %d but the embedder makes %d; use another --qdrant-collection or set the embedder's dimension to %d",
			s.cfg.Collection, size, s.cfg.Dim, size)}
	}
	return nil
}

// Apply upserts the chunks of w.Live, in calls of at most UpsertBatch
// points, UpsertConcurrency calls at a time, then, once every upsert
// succeeded, deletes with one filtered delete the points the write makes
// obsolete: older versions of its documents, ordinals a rewritten version
// no longer has, and every version up to a withdrawal's. The new points
// are in before the old ones go. Every call waits until Qdrant has applied
// it, so a fence that follows reads the write.
//
// Writes only move a document forward in its log: an upsert replaces a
// stored point only where the point holds an event at or before the
// written one (Qdrant's conditional upsert, update_filter), and a delete
// never reaches a newer version, nor a point of the written version from a
// later event. So a late write of a member that lost its partition can add
// points of an earlier event, never take the newer event's away; the
// partition's owner removes them (project.Projector.Settle). An exact write
// (w.Exact, the owner's) replaces and removes whatever the index holds of
// its documents instead.
func (s *Store) Apply(ctx context.Context, w *project.Write) error {
	if err := s.upsert(ctx, w); err != nil {
		return err
	}
	if len(w.Live) == 0 && len(w.Withdrawn) == 0 {
		return nil
	}
	selector := appendDeleteFilter(nil, func(b []byte) []byte {
		if w.Exact {
			return appendOthers(b, w)
		}
		return appendObsolete(b, w)
	})
	if err := s.deleteSelected(ctx, selector); err != nil {
		return fmt.Errorf("delete other points: %w", err)
	}
	return nil
}

// The payload fields of a point's event position. Two positions are of
// the same log when their topics and partitions are, and their topic ids
// too where both are known: a topic deleted and created again restarts its
// offsets.
const (
	fieldTopic     = "source_topic"
	fieldTopicID   = "source_topic_id"
	fieldPartition = "source_partition"
	fieldOffset    = "source_offset"
)

// topicID is pos's topic id as the payload holds it, "" when unknown.
func topicID(pos project.Position) string {
	if pos.TopicID == (project.TopicID{}) {
		return ""
	}
	return uuid.UUID(pos.TopicID).String()
}

// deleteSelected deletes the points of selector, a DeletePoints' points
// field encoded (appendDeleteFilter).
func (s *Store) deleteSelected(ctx context.Context, selector []byte) error {
	call := &qdrant.DeletePoints{CollectionName: s.cfg.Collection, Wait: qdrant.PtrOf(true)}
	call.ProtoReflect().SetUnknown(selector)
	_, err := s.client.GetPointsClient().Delete(ctx, call)
	return classify(ctx, err)
}

// upsert upserts the points of w.Live. It returns when every call it
// started has ended.
func (s *Store) upsert(ctx context.Context, w *project.Write) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.UpsertConcurrency)
	// stopped is why building stopped early: an upsert failed or ctx
	// ended, and building more is pointless.
	var stopped error
	err := s.upsertCalls(w, func(call *qdrant.UpsertPoints) bool {
		g.Go(func() error {
			if _, err := s.client.Upsert(gctx, call); err != nil {
				return classify(ctx, fmt.Errorf("upsert points: %w", err))
			}
			return nil
		})
		if gctx.Err() != nil {
			stopped = context.Cause(gctx)
			return false
		}
		return true
	})
	werr := g.Wait()
	switch {
	case err != nil:
		return err
	case werr != nil:
		return werr
	case stopped != nil:
		return classify(ctx, fmt.Errorf("upsert points: %w", stopped))
	}
	return nil
}

// upsertCalls builds the upsert calls of w.Live, of at most UpsertBatch
// points and UpsertMaxBytes bytes each, and gives each to send as it is
// complete, until send returns false.
func (s *Store) upsertCalls(w *project.Write, send func(*qdrant.UpsertPoints) bool) error {
	// points holds the encoded points of the call being filled (wire.go)
	// and then its update_filter, sized for the points the call will hold
	// and their conditions, so that it seldom grows: growing it copies
	// all of it.
	var points []byte
	left := pointsOf(w)
	perPoint := (estimatedPointBytes(w) + estimatedReplaceBytes(w)) / max(1, left)
	newCall := func() []byte {
		return make([]byte, 0, min(s.cfg.UpsertMaxBytes, perPoint*min(s.cfg.UpsertBatch, left)))
	}
	count := 0
	size := upsertOverhead + len(s.cfg.Collection)
	// replace holds, per document of the call, the condition on its stored
	// points that they may be replaced: the shoulds of the call's
	// update_filter, encoded.
	var replace []byte
	flush := func() bool {
		if count == 0 {
			return true
		}
		call := &qdrant.UpsertPoints{CollectionName: s.cfg.Collection, Wait: qdrant.PtrOf(true)}
		if !w.Exact {
			points = appendUpdateFilter(points, replace)
		}
		call.ProtoReflect().SetUnknown(points)
		points, count, replace = nil, 0, replace[:0]
		size = upsertOverhead + len(s.cfg.Collection)
		return send(call)
	}
	for _, d := range w.Live {
		doc, err := newDocumentWire(&d)
		if err != nil {
			return err
		}
		// The condition goes into every call that holds a point of the
		// document, and counts against UpsertMaxBytes there (with up to 8
		// bytes of the update_filter's tag and length).
		var docReplace []byte
		replaceBytes := 0 // an exact write sends no update_filter
		if !w.Exact {
			docReplace = appendDocReplace(nil, &d)
			replaceBytes = len(docReplace) + 8
		}
		inCall := false
		for _, c := range d.Chunks {
			if points == nil {
				points = newCall()
			}
			start := len(points)
			points, err = doc.appendPoint(points, &c)
			if err == nil {
				err = s.checkPointSize(len(points)-start, &c, replaceBytes)
			}
			if err != nil {
				return err
			}
			n := len(points) - start
			need := n
			if !inCall {
				need += replaceBytes
			}
			if count > 0 && size+need > s.cfg.UpsertMaxBytes {
				point := slices.Clone(points[start:])
				points = points[:start]
				if !flush() {
					return nil
				}
				points = append(newCall(), point...)
				inCall, need = false, n+replaceBytes
			}
			if !inCall {
				replace = append(replace, docReplace...)
				inCall = true
			}
			count++
			left--
			size += need
			if count == s.cfg.UpsertBatch {
				if !flush() {
					return nil
				}
				inCall = false
			}
		}
	}
	flush()
	return nil
}

// pointsOf is the number of points w upserts.
func pointsOf(w *project.Write) int {
	n := 0
	for _, d := range w.Live {
		n += len(d.Chunks)
	}
	return n
}

// estimatedPointBytes is about the size of w's encoded points: each
// chunk's text and vector, its document's title, source and key, and a
// few hundred bytes of field names and metadata.
func estimatedPointBytes(w *project.Write) int {
	n := 0
	for _, d := range w.Live {
		for _, c := range d.Chunks {
			n += len(c.Text) + 4*len(c.Vector) + len(d.Title) + len(d.Source) + len(d.Key) + 320
		}
	}
	return n
}

// estimatedReplaceBytes is about the size of the conditions w's upserts
// send on its documents' stored points (appendDocReplace): each
// document's key and position, and about a hundred bytes of field names
// and framing.
func estimatedReplaceBytes(w *project.Write) int {
	if w.Exact {
		return 0
	}
	n := 0
	for _, d := range w.Live {
		n += len(d.Key) + len(d.Position.Topic) + 160
	}
	return n
}

// checkPointSize refuses a point of n bytes that would make a request over
// UpsertMaxBytes on its own, with conditionBytes of its document's
// update_filter condition: its record's chunk, title and metadata are too
// large together, whatever the batch.
func (s *Store) checkPointSize(n int, c *project.Chunk, conditionBytes int) error {
	if n+conditionBytes+upsertOverhead+len(s.cfg.Collection) > s.cfg.UpsertMaxBytes {
		return &project.StoreError{Store: project.StoreIndex, Kind: project.Rejected, Err: fmt.Errorf(
			"point of chunk %s has %d bytes (text, title and metadata), over the %d bytes of one upsert (--qdrant-upsert-max-bytes)", c.ID, n, s.cfg.UpsertMaxBytes)}
	}
	return nil
}

// validUTF8 refuses what Qdrant's payload strings cannot hold, as
// qdrant.NewValue does.
func validUTF8(texts ...string) error {
	for _, t := range texts {
		if !utf8.ValidString(t) {
			return fmt.Errorf("invalid UTF-8 in string: %q", t)
		}
	}
	return nil
}

// ChunkCounts returns the number of points per document with one exact
// facet call over document_key; a document without points is left out.
func (s *Store) ChunkCounts(ctx context.Context, keys []string) (map[string]int, error) {
	hits, err := s.client.Facet(ctx, &qdrant.FacetCounts{
		CollectionName: s.cfg.Collection,
		Key:            "document_key",
		Filter:         &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}},
		Limit:          qdrant.PtrOf(uint64(len(keys))),
		Exact:          qdrant.PtrOf(true),
	})
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("count points: %w", err))
	}
	out := make(map[string]int, len(hits))
	for _, h := range hits {
		// Qdrant's exact facet can return a value whose points were all
		// deleted, with count 0: such a document holds no chunk.
		if h.GetCount() > 0 {
			out[h.GetValue().GetStringValue()] = int(h.GetCount())
		}
	}
	return out, nil
}

// scrollPage is the page size of id scans; ids and one keyword per point
// are small, so pages can be large.
const scrollPage = 2048

// ChunkIDs returns the point ids per document with one filtered scroll that
// returns ids and document_key only.
func (s *Store) ChunkIDs(ctx context.Context, keys []string) (map[string][]uuid.UUID, error) {
	out := make(map[string][]uuid.UUID, len(keys))
	filter := &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}}
	err := s.scan(ctx, filter, []string{"document_key"}, func(p *scanned) error {
		key := p.String("document_key")
		out[key] = append(out[key], p.ID())
		return nil
	})
	return out, err
}

// Points returns, per document, its points with the event each was
// written from, from one filtered scroll of ids and positions.
func (s *Store) Points(ctx context.Context, keys []string) (map[string][]project.Point, error) {
	out := make(map[string][]project.Point, len(keys))
	filter := &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}}
	fields := []string{"document_key", "version", fieldTopic, fieldTopicID, fieldPartition, fieldOffset}
	err := s.scan(ctx, filter, fields, func(p *scanned) error {
		key := p.String("document_key")
		pt := project.Point{ID: p.ID(), Version: p.Int("version"), Position: project.Position{
			Topic: p.String(fieldTopic), Partition: int32(p.Int(fieldPartition)), Offset: p.Int(fieldOffset),
		}}
		if id, err := uuid.Parse(p.String(fieldTopicID)); err == nil {
			pt.Position.TopicID = project.TopicID(id)
		}
		out[key] = append(out[key], pt)
		return nil
	})
	return out, err
}

// classify wraps a Qdrant error as a project.StoreError whose kind says
// whether retrying can help and whether a record is to blame (see
// docs/operations.md, "Store errors"). ctx is the failed call's: gRPC
// reports a call its context cut short as a status, so the error also
// says, in Go's terms, that ctx ended.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	err = project.WithContextErr(ctx, err)
	kind, limit := project.Transient, ""
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case certificateRejected(err):
		kind = project.Fatal
	default:
		kind, limit = kindOfStatus(grpcStatus(err))
	}
	return &project.StoreError{Store: project.StoreIndex, Kind: kind, LimitName: limit, Err: err}
}

// grpcStatus finds the gRPC status in err's chain; the go-client wraps it.
func grpcStatus(err error) *status.Status {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok {
			return st
		}
	}
	return status.New(codes.Unknown, err.Error())
}

// grpcCode is the code of grpcStatus.
func grpcCode(err error) codes.Code { return grpcStatus(err).Code() }

// kindOfStatus maps what Qdrant answered to what the projector does, and
// names the limit of a Limit. Qdrant answers InvalidArgument both for data
// it cannot take ("Wrong input: ...", e.g. a vector of another dimension:
// the record's fault) and for requests over a limit of the collection
// ("Bad request: ...", strict mode: the collection's, never a record's);
// ResourceExhausted is a rate limit or a gRPC message over the server's
// size limit.
func kindOfStatus(st *status.Status) (project.ErrorKind, string) {
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		if strings.Contains(msg, "Wrong input:") {
			return project.Rejected, ""
		}
		return project.Limit, limitName(msg)
	case codes.ResourceExhausted:
		return project.Limit, limitName(msg)
	case codes.NotFound, codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented, codes.FailedPrecondition:
		return project.Fatal, ""
	}
	if strings.Contains(msg, "Rate limiting exceeded") {
		// A filtered delete over the write rate limit comes back as
		// Unknown with the limit in the message.
		return project.Limit, limitName(msg)
	}
	return project.Transient, ""
}

// qdrantLimits name Qdrant's limits by a phrase of its error message; the
// names are strict mode's parameters, which is where an operator lifts
// them.
var qdrantLimits = []struct{ phrase, name string }{
	{`"upsert limit"`, "upsert_max_batchsize"},
	{"Condition size limit", "condition_max_size"},
	{"Filter condition limit", "filter_max_conditions"},
	{"Write rate limit", "write_rate_limit"},
	{"Read rate limit", "read_rate_limit"},
	{"points count", "max_points_count"},
	{"payload size", "max_collection_payload_size_bytes"},
	{"vector size", "max_collection_vector_size_bytes"},
	{"payload index", "max_payload_index_count"},
	{"larger than max", "max_request_size"},
}

// limitName names the limit an error message is about.
func limitName(msg string) string {
	for _, l := range qdrantLimits {
		if strings.Contains(msg, l.phrase) {
			return l.name
		}
	}
	return "qdrant_limit"
}

// Prune deletes, with one filtered delete, the points that w, a write of
// its documents' current state, makes obsolete, and writes nothing: the
// removals of Apply without its upserts. Every point it removes is of an
// event before the current one, which no write needs again, so it is safe
// beside any other writer of the collection: the fill of a generation
// prunes after its write what run moved past meanwhile.
func (s *Store) Prune(ctx context.Context, w *project.Write) error {
	if len(w.Live) == 0 && len(w.Withdrawn) == 0 {
		return nil
	}
	selector := appendDeleteFilter(nil, func(b []byte) []byte { return appendObsolete(b, w) })
	if err := s.deleteSelected(ctx, selector); err != nil {
		return fmt.Errorf("delete obsolete points: %w", err)
	}
	return nil
}
