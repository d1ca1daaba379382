// Package graph is the graph store: documents and chunks in Neo4j.
//
// The layout is the contract's: (:Document {key}), (:Chunk {id}) and
// (:Document)-[:HAS_CHUNK]->(:Chunk), with unique constraints on
// Document.key and Chunk.id. Writes are sent as parameters of constant
// Cypher statements, one transaction per batch, and their effect is always
// a MERGE's: writing a batch again leaves the graph as it was.
//
// # Why new versions are written with CREATE
//
// Merging a chunk costs an index lookup and a lock on the id whose answer
// is almost always "not there": a batch mostly writes versions the graph
// has not seen. So Apply first merges the Document nodes, each statement
// row returning whether the node had no version or an older one before the
// write (fresh), and then creates the chunks of fresh documents with
// CREATE and merges the chunks of the others. It is safe because:
//
//   - a chunk id is the UUIDv5 of key:version:ordinal, so a chunk of a
//     version can exist only if that version was written before;
//   - the adapter writes a version's chunks only under a Document node of
//     that version, in the transaction that sets the node's version, and
//     a node's version only moves forward; a withdrawal deletes the node
//     together with every chunk up to its version. So while the node is
//     absent or older, no chunk of the version written exists, and the
//     CREATE makes the very nodes and relationships the MERGE would;
//   - where that reasoning does not hold (the graph changed by hand, say
//     a Document node deleted without its chunks, or two members writing
//     the same document at once during a partition handover, each reading
//     the node's version before the other committed), the CREATE of an
//     existing chunk fails on the unique constraint on Chunk.id instead of
//     duplicating it. That failure rolls the whole transaction back, and
//     Apply writes the batch again in a new transaction that merges every
//     chunk (MergeAll). A constraint failure of the CREATE is never
//     reported to the caller.
//
// The CREATE therefore relies on the Chunk.id constraint, which Migrate
// makes (projector run and projector migrate call it at start).
package graph

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"

	"github.com/projector/projector/internal/metajson"
	"github.com/projector/projector/internal/project"
)

// Config says how to reach Neo4j.
type Config struct {
	// URI is the Bolt URI; neo4j+s:// and bolt+s:// encrypt and verify the
	// server's certificate, +ssc encrypts without verifying.
	URI string
	// User and Password authenticate; an empty Password means none.
	User     string
	Password string
	// TLS, when set, replaces the driver's TLS configuration, e.g. to
	// trust a private CA (RootCAs). It needs an encrypted URI scheme: with
	// bolt:// or neo4j:// it would silently do nothing, so Open refuses it.
	TLS *tls.Config
	// Database is the database to use; empty means the server's default.
	Database string
	// ChunkText keeps each chunk's text on its Chunk node. The text is
	// also in the index and the relational store; on the graph it makes
	// inserts up to 1.35 times slower (docs/benchmarks.md) and the store
	// larger, so it is off by default. Off, a chunk written (or written
	// again) has no text property; chunk nodes written earlier keep theirs
	// until rewritten.
	ChunkText bool
	// Chunks selects the statements that write chunks; the zero value,
	// CreateNewVersions, is the one to run the projector with.
	Chunks ChunkWrites
}

// ChunkWrites selects how Apply writes a batch's chunks. It exists so that
// the benchmarks measure the adapter's own statements against each other.
type ChunkWrites int

const (
	// CreateNewVersions creates the chunks of documents whose node had no
	// version or an older one with CREATE and merges the others, falling
	// back to MergeAll for a transaction where a CREATE meets an existing
	// chunk (see the package comment).
	CreateNewVersions ChunkWrites = iota
	// MergeAll merges every chunk and relationship.
	MergeAll
	// CreateOnlyUnsafe creates every Document, Chunk and relationship with
	// CREATE and removes nothing. It is NOT repeat-safe: a second write of
	// a document fails on the unique constraints, and a new version of a
	// stored document cannot be written at all. It is the floor the
	// benchmarks compare the other two with (internal/bench); no flag
	// selects it.
	CreateOnlyUnsafe
)

// Store is the Neo4j adapter. It is safe for concurrent use.
type Store struct {
	driver    neo4j.DriverWithContext
	database  string
	chunkText bool
	chunks    ChunkWrites
	// fallbacks counts the transactions written again with MergeAll
	// because a CREATE met an existing chunk.
	fallbacks atomic.Int64
}

var _ project.Graph = (*Store)(nil)

// livenessCheckAfter is how long a pooled connection may idle before it is
// checked; the check costs a round trip only after such a pause.
const livenessCheckAfter = 5 * time.Second

// Open creates a driver; it connects lazily. Use Ping to find out whether
// the server answers.
func Open(cfg Config) (*Store, error) {
	auth := neo4j.NoAuth()
	if cfg.Password != "" {
		auth = neo4j.BasicAuth(cfg.User, cfg.Password, "")
	}
	if cfg.TLS != nil && !encrypted(cfg.URI) {
		return nil, fmt.Errorf("neo4j URI %s: a TLS configuration (CA file) needs an encrypted scheme, neo4j+s:// or bolt+s://", redactURI(cfg.URI))
	}
	driver, err := neo4j.NewDriverWithContext(cfg.URI, auth, func(c *config.Config) {
		c.TlsConfig = cfg.TLS
		// The projector retries whole batches itself, with backoff and one
		// log line per outage; the driver's own retry loop only hides time.
		c.MaxTransactionRetryTime = 5 * time.Second
		c.SocketConnectTimeout = 5 * time.Second
		c.ConnectionAcquisitionTimeout = 10 * time.Second
		// A connection idle for longer is checked (a RESET answered)
		// before it is used, within the acquisition timeout: one whose
		// peer died or stopped answering while it waited in the pool is
		// dropped instead of taking a write that would wait for ever.
		c.ConnectionLivenessCheckTimeout = livenessCheckAfter
	})
	if err != nil {
		return nil, fmt.Errorf("neo4j driver for %s: %w", redactURI(cfg.URI), err)
	}
	return &Store{driver: driver, database: cfg.Database, chunkText: cfg.ChunkText, chunks: cfg.Chunks}, nil
}

// encrypted reports whether uri's scheme makes the driver use TLS.
func encrypted(uri string) bool {
	scheme, _, _ := strings.Cut(uri, "://")
	return strings.HasSuffix(scheme, "+s") || strings.HasSuffix(scheme, "+ssc")
}

// redactURI drops any user information from a URI before it is printed.
func redactURI(uri string) string {
	if at := strings.LastIndex(uri, "@"); at >= 0 {
		if scheme := strings.Index(uri, "://"); scheme >= 0 && scheme < at {
			return uri[:scheme+3] + "***@" + uri[at+1:]
		}
	}
	return uri
}

// Close closes the driver and its connections.
func (s *Store) Close(ctx context.Context) error { return s.driver.Close(ctx) }

// Name is the store's label.
func (s *Store) Name() string { return project.StoreGraph }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	return classify(ctx, s.driver.VerifyConnectivity(ctx))
}

// Migrate creates the constraints and the index the projector relies on. It
// is idempotent.
func (s *Store) Migrate(ctx context.Context) error {
	for _, stmt := range []string{
		`CREATE CONSTRAINT document_key IF NOT EXISTS FOR (d:Document) REQUIRE d.key IS UNIQUE`,
		`CREATE CONSTRAINT chunk_id IF NOT EXISTS FOR (c:Chunk) REQUIRE c.id IS UNIQUE`,
		`CREATE INDEX chunk_document_key IF NOT EXISTS FOR (c:Chunk) ON (c.document_key)`,
		`CREATE CONSTRAINT partition_writer_id IF NOT EXISTS FOR (w:PartitionWriter) REQUIRE w.id IS UNIQUE`,
		`CREATE CONSTRAINT withdrawn_document_key IF NOT EXISTS FOR (t:WithdrawnDocument) REQUIRE t.key IS UNIQUE`,
		`CREATE INDEX withdrawn_document_at IF NOT EXISTS FOR (t:WithdrawnDocument) ON (t.withdrawn_at)`,
	} {
		if _, err := neo4j.ExecuteQuery(ctx, s.driver, stmt, nil, neo4j.EagerResultTransformer, s.queryConfig()); err != nil {
			return classify(ctx, fmt.Errorf("create graph schema: %w", err))
		}
	}
	return nil
}

func (s *Store) queryConfig() neo4j.ExecuteQueryConfigurationOption {
	return neo4j.ExecuteQueryWithDatabase(s.database)
}

func (s *Store) session(ctx context.Context, mode neo4j.AccessMode) neo4j.SessionWithContext {
	return s.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: mode, DatabaseName: s.database})
}

// txTimeout gives a transaction ctx's deadline as its timeout, so that the
// server, and not only the driver, ends a transaction still open then: a
// repair's write must not land after its repair lease (docs/write-order.md,
// "The repair lease"). Neo4j checks the timeouts every
// db.transaction.monitor.check.interval (2 s by default), so it ends the
// transaction up to that much after the deadline; the driver's retries of
// a transaction keep its first attempt's timeout, as the driver takes the
// configuration once. Without a deadline the server's
// db.transaction.timeout applies.
func txTimeout(ctx context.Context) []func(*neo4j.TransactionConfig) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	// 0 would mean no timeout at all; the driver rounds up to 1 ms.
	return []func(*neo4j.TransactionConfig){neo4j.WithTxTimeout(max(time.Until(deadline), time.Nanosecond))}
}

// The statements below only move a document forward in its log: a
// document node takes a write of a higher version, or of its version from
// an event at or after the one it holds (its source_topic,
// source_partition and source_offset; events of different logs are not
// ordered, and are taken), chunks are written only under a document node
// that holds the written event, and removals reach only versions up to the
// one written. So a late write, of an older version or of an earlier event
// of the same version, leaves the newer one as it is.
//
// The partition's owner is the exception (rows with own set: the write
// carries a token, which checkFence found the newest in the same
// transaction). What the graph holds of a document from its partition's
// log beyond what the owner writes can only be what an earlier owner wrote
// before the owner took its token (from then on checkFence refuses every
// earlier owner) and never committed to the relational store, which
// decides: the owner reads the stored states there and writes in log
// order, so nothing of the log it has not written is committed. Its write
// replaces such a node, tombstone or chunk, where a forward-only write
// would keep it and fail its fence for ever.
//
// mergeDocuments returns a row per document it wrote, fresh when the node
// had no version or an older one before: no chunk of the written version
// can exist then (see the package comment). It takes the node's write
// lock (the SET and REMOVE of _lock, which leave no property) before it
// reads the stored version: under Neo4j's read-committed isolation a read
// before the lock could see a version that a transaction holding the node
// is about to raise, and the write after it would set the node back.
//
// A withdrawn document's tombstone (see deleteDocuments) is read again once
// the lock is held: a withdrawal that deleted the node meanwhile leaves a
// node this MERGE created, which is deleted again when the write is
// refused. Only a higher version than the tombstone's revives a document,
// and the revival removes the tombstone.
const mergeDocuments = `
UNWIND $docs AS d
MERGE (doc:Document {key: d.key})
SET doc._lock = true
REMOVE doc._lock
WITH doc, d, doc.version AS stored
OPTIONAL MATCH (t:WithdrawnDocument {key: d.key})
WITH doc, d, stored, t, (t IS NULL OR t.version < d.version OR (d.own AND ` + tombstoneOfSameLog + `))
	AND (stored IS NULL OR stored < d.version OR (stored = d.version AND NOT ` + docHoldsLaterEvent + `)
		OR (d.own AND ` + docOfSameLog + `)) AS take
FOREACH (x IN CASE WHEN NOT take AND stored IS NULL THEN [doc] ELSE [] END | DELETE x)
WITH doc, d, stored, t, take WHERE take
SET doc.version = d.version, doc.title = d.title, doc.source = d.source,
	doc.metadata = d.metadata, doc.content_hash = d.content_hash,
	doc.source_topic = d.topic, doc.source_topic_id = d.topic_id, doc.source_partition = d.partition, doc.source_offset = d.offset
FOREACH (x IN CASE WHEN t IS NULL THEN [] ELSE [t] END | DELETE x)
RETURN d.key AS key, stored IS NULL OR stored < d.version AS fresh`

// docOfSameLog and tombstoneOfSameLog are true where the Document node doc,
// or the tombstone t, holds an event of the written row d's log. Unknown
// positions are of no log.
const (
	docOfSameLog = `coalesce(doc.source_topic = d.topic AND doc.source_partition = d.partition
	AND (doc.source_topic_id IS NULL OR d.topic_id IS NULL OR doc.source_topic_id = d.topic_id), false)`
	tombstoneOfSameLog = `coalesce(t.source_topic = d.topic AND t.source_partition = d.partition
	AND (t.source_topic_id IS NULL OR d.topic_id IS NULL OR t.source_topic_id = d.topic_id), false)`
)

// docHoldsLaterEvent is true where the Document node doc holds an event of
// the same log as the written row d, at a later offset: a late write or
// withdrawal of d's version must leave it. Events of different logs (or of
// unknown positions) are not ordered.
const docHoldsLaterEvent = `coalesce(doc.source_topic = d.topic AND doc.source_partition = d.partition
	AND (doc.source_topic_id IS NULL OR d.topic_id IS NULL OR doc.source_topic_id = d.topic_id) AND d.offset < doc.source_offset, false)`

// holdsEvent is true where the Document node doc holds the event of the
// written row d: its version at its log position (null when unknown).
const holdsEvent = `doc.version = d.version AND coalesce(doc.source_topic, '') = coalesce(d.topic, '')
	AND coalesce(doc.source_partition, -1) = coalesce(d.partition, -1) AND coalesce(doc.source_offset, -1) = coalesce(d.offset, -1)
	AND (doc.source_topic_id IS NULL OR d.topic_id IS NULL OR doc.source_topic_id = d.topic_id)`

// createChunks creates the chunks of fresh documents, each under its
// Document node; mergeChunks merges the chunks of the others. Both take
// the chunks grouped by document, so the node is looked up once per
// document. A null text (Config.ChunkText off) is no property: CREATE
// leaves it out and SET removes an earlier one, as MERGE then SET would.
const (
	createChunks = `
UNWIND $docs AS d
MATCH (doc:Document {key: d.key}) WHERE ` + holdsEvent + `
UNWIND d.chunks AS c
CREATE (doc)-[:HAS_CHUNK]->(:Chunk {id: c.id, document_key: d.key, version: d.version,
	ordinal: c.ordinal, text: c.text, metadata: c.metadata})`
	mergeChunks = `
UNWIND $docs AS d
MATCH (doc:Document {key: d.key}) WHERE ` + holdsEvent + `
UNWIND d.chunks AS c
MERGE (ch:Chunk {id: c.id})
SET ch.document_key = d.key, ch.version = d.version, ch.ordinal = c.ordinal,
	ch.text = c.text, ch.metadata = c.metadata
MERGE (doc)-[:HAS_CHUNK]->(ch)`
)

// createDocuments is CreateOnlyUnsafe's statement for the Document nodes:
// not repeat-safe, for the benchmarks' floor only.
const createDocuments = `
UNWIND $docs AS d
CREATE (:Document {key: d.key, version: d.version, title: d.title, source: d.source,
	metadata: d.metadata, content_hash: d.content_hash})`

// deleteOtherChunks removes, per document, the chunks the write makes
// obsolete: older versions, and, where the node holds the written event,
// every chunk it did not write (of any version: a node holding the written
// event is the document's current state, so another version's chunk is a
// leftover of a write that never committed); for a withdrawal (live
// false) every version up to its own, and for the owner's withdrawal of a
// document its log wrote, every chunk (see mergeDocuments). The keep lists
// are per document so each check is against a short list.
const deleteOtherChunks = `
UNWIND $docs AS d
OPTIONAL MATCH (doc:Document {key: d.key})
WITH d, doc, coalesce(` + holdsEvent + `, false) AS held
MATCH (ch:Chunk {document_key: d.key})
WHERE ch.version < d.version
	OR (d.live AND held AND NOT ch.id IN d.ids)
	OR (NOT d.live AND (ch.version = d.version OR (d.own AND (doc IS NULL OR ` + docOfSameLog + `))))
DETACH DELETE ch`

// deleteDocuments removes withdrawn documents whose node is not of a newer
// event than the withdrawal (a newer version, or a later event of the same
// log at the same version), or, for the owner, whose node its log wrote
// (see mergeDocuments). Like mergeDocuments, it reads the version only
// once it holds the node's lock, so a transaction raising the version
// meanwhile is waited for rather than undone.
//
// A withdrawal at a log position (an event's, not a reconcile clean-up's)
// leaves a tombstone, (:WithdrawnDocument {key}) with the version and
// position withdrawn, no chunk and no relationship, where a later write of
// the document must see it: a live write of that version or an older one,
// arriving late, is refused by mergeDocuments instead of creating the
// document again. A tombstone moves only to a newer withdrawal, or to the
// owner's withdrawal where its log wrote it, and never to the withdrawal
// it holds (so a withdrawal read again changes nothing, withdrawn_at
// included); projector ledger-prune removes those older than its
// retention.
const deleteDocuments = `
UNWIND $docs AS d
OPTIONAL MATCH (doc:Document {key: d.key})
FOREACH (x IN CASE WHEN doc IS NULL THEN [] ELSE [doc] END | SET x._lock = true REMOVE x._lock)
WITH d, doc WHERE doc IS NULL OR doc.version < d.version OR (doc.version = d.version
	AND NOT ` + docHoldsLaterEvent + `) OR (d.own AND ` + docOfSameLog + `)
FOREACH (x IN CASE WHEN doc IS NULL THEN [] ELSE [doc] END | DETACH DELETE x)
WITH d WHERE d.topic IS NOT NULL
MERGE (t:WithdrawnDocument {key: d.key})
SET t._lock = true
REMOVE t._lock
WITH t, d, coalesce(t.version = d.version AND ` + tombstoneOfSameLog + ` AND t.source_offset = d.offset, false) AS holds
WITH t, d WHERE NOT holds AND (t.version IS NULL OR t.version < d.version OR (t.version = d.version
	AND coalesce(NOT (t.source_topic = d.topic AND t.source_partition = d.partition
		AND (t.source_topic_id IS NULL OR d.topic_id IS NULL OR t.source_topic_id = d.topic_id)) OR d.offset > t.source_offset, true))
	OR (d.own AND ` + tombstoneOfSameLog + `))
SET t.version = d.version, t.source_topic = d.topic, t.source_topic_id = d.topic_id, t.source_partition = d.partition, t.source_offset = d.offset,
	t.withdrawn_at = datetime()`

// pruneTombstones removes up to $limit tombstones withdrawn before
// $cutoff, and returns how many it removed.
const pruneTombstones = `
MATCH (t:WithdrawnDocument) WHERE t.withdrawn_at < $cutoff
WITH t LIMIT $limit
DELETE t
RETURN count(*) AS removed`

// checkFence is the first statement of a fenced write: it keeps, on one
// (:PartitionWriter {id}) node per partition, the newest writer's token
// seen, and returns the token seen before. The node's write lock, taken
// before the read, is held until the transaction ends, so a write of a
// newer writer and one of an older writer are ordered, and once a newer
// token is in, every write of an older one is refused (Store.write rolls
// it back). The node carries the partition's topic and number, and
// nothing of any document.
const checkFence = `
MERGE (w:PartitionWriter {id: $id})
SET w._lock = true
REMOVE w._lock
WITH w, coalesce(w.token, 0) AS newest
SET w.token = CASE WHEN newest > $token THEN newest ELSE $token END, w.topic = $topic, w.partition = $partition
RETURN newest`

// batch is a Write as the statements' parameters.
type batch struct {
	fence project.Fence
	docs  []map[string]any
	// chunks holds, per live document in the order of docs, its key,
	// version and chunks.
	chunks    []map[string]any
	keep      []map[string]any
	withdrawn []map[string]any
}

// Apply writes w in one write transaction (two when a CREATE meets an
// existing chunk, see the package comment).
func (s *Store) Apply(ctx context.Context, w *project.Write) error {
	b, err := s.batchOf(w)
	if err != nil {
		return err
	}
	err = s.write(ctx, b, s.chunks)
	if s.chunks == CreateNewVersions && chunkExists(err) {
		s.fallbacks.Add(1)
		err = s.write(ctx, b, MergeAll)
	}
	if err != nil {
		return classify(ctx, fmt.Errorf("write batch: %w", err))
	}
	return nil
}

// CreateFallbacks is the number of transactions written again with
// MergeAll because a CREATE met an existing chunk. It stays 0 unless the
// graph was changed by hand or two members wrote one document at once, so
// an operator who sees it grow knows another writer is at work.
func (s *Store) CreateFallbacks() int64 { return s.fallbacks.Load() }

// batchOf turns w into parameters; metadata that cannot be encoded is the
// record's fault.
func (s *Store) batchOf(w *project.Write) (*batch, error) {
	// own marks the rows of the partition owner's write: checkFence, the
	// transaction's first statement, refuses any other with a token.
	own := w.Fence.Token > 0
	b := &batch{
		fence:     w.Fence,
		docs:      make([]map[string]any, 0, len(w.Live)),
		chunks:    make([]map[string]any, 0, len(w.Live)),
		keep:      make([]map[string]any, 0, len(w.Live)+len(w.Withdrawn)),
		withdrawn: make([]map[string]any, len(w.Withdrawn)),
	}
	for _, d := range w.Live {
		md, err := jsonOrNil(d.Metadata)
		if err != nil {
			return nil, &project.StoreError{Store: project.StoreGraph, Kind: project.Rejected, Err: fmt.Errorf("document %q metadata: %w", d.Key, err)}
		}
		b.docs = append(b.docs, withPosition(map[string]any{
			"key": d.Key, "version": d.Version, "title": d.Title, "source": d.Source,
			"metadata": md, "content_hash": d.ContentHash, "own": own,
		}, d.Position))
		ids := make([]string, len(d.Chunks))
		chunks := make([]map[string]any, len(d.Chunks))
		for i, c := range d.Chunks {
			cmd, err := jsonOrNil(c.Metadata)
			if err != nil {
				return nil, &project.StoreError{Store: project.StoreGraph, Kind: project.Rejected, Err: fmt.Errorf("chunk %s metadata: %w", c.ID, err)}
			}
			ids[i] = c.ID.String()
			chunks[i] = map[string]any{"id": ids[i], "ordinal": int64(c.Ordinal), "metadata": cmd}
			if s.chunkText {
				chunks[i]["text"] = c.Text
			}
		}
		b.chunks = append(b.chunks, withPosition(map[string]any{"key": d.Key, "version": d.Version, "chunks": chunks}, d.Position))
		b.keep = append(b.keep, withPosition(map[string]any{"key": d.Key, "version": d.Version, "live": true, "ids": ids, "own": own}, d.Position))
	}
	for i, d := range w.Withdrawn {
		b.withdrawn[i] = withPosition(map[string]any{"key": d.Key, "version": d.Version, "own": own}, d.Position)
		b.keep = append(b.keep, withPosition(map[string]any{"key": d.Key, "version": d.Version, "live": false, "ids": []string{}, "own": own}, d.Position))
	}
	return b, nil
}

// write runs b's statements in one transaction, the chunks written as mode
// says. The driver may run the function again after a transient error, so
// it decides which documents are fresh inside the transaction.
func (s *Store) write(ctx context.Context, b *batch, mode ChunkWrites) error {
	sess := s.session(ctx, neo4j.AccessModeWrite)
	defer sess.Close(ctx)
	_, err := sess.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		if err := fenceWrite(ctx, tx, b.fence); err != nil {
			return nil, err
		}
		if mode == CreateOnlyUnsafe {
			if _, err := run(ctx, tx, createDocuments, b.docs); err != nil {
				return nil, err
			}
			_, err := run(ctx, tx, createChunks, b.chunks)
			return nil, err
		}
		written, err := run(ctx, tx, mergeDocuments, b.docs)
		if err != nil {
			return nil, err
		}
		fresh := make(map[string]bool, len(written))
		if mode == CreateNewVersions {
			for _, r := range written {
				key, _, _ := neo4j.GetRecordValue[string](r, "key")
				fresh[key], _, _ = neo4j.GetRecordValue[bool](r, "fresh")
			}
		}
		var created, merged []map[string]any
		for _, d := range b.chunks {
			if key, _ := d["key"].(string); fresh[key] {
				created = append(created, d)
			} else {
				merged = append(merged, d)
			}
		}
		for _, st := range []struct {
			query string
			rows  []map[string]any
		}{
			{createChunks, created},
			{mergeChunks, merged},
			{deleteOtherChunks, b.keep},
			{deleteDocuments, b.withdrawn},
		} {
			if _, err := run(ctx, tx, st.query, st.rows); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}, txTimeout(ctx)...)
	return err
}

// RaiseFence makes f's token the newest the graph knows for its partition
// (a *project.FencedError when a newer one is there): a new owner raises
// it before its first batch, so that from then on the graph refuses every
// write of an earlier owner, even one the new owner has not overwritten.
func (s *Store) RaiseFence(ctx context.Context, f project.Fence) error {
	sess := s.session(ctx, neo4j.AccessModeWrite)
	defer sess.Close(ctx)
	_, err := sess.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		return nil, fenceWrite(ctx, tx, f)
	})
	if err != nil {
		return classify(ctx, fmt.Errorf("raise the fencing token: %w", err))
	}
	return nil
}

var _ project.GraphFence = (*Store)(nil)

// fenceWrite runs checkFence for a fenced write and returns a
// *project.FencedError when the partition has a newer writer.
func fenceWrite(ctx context.Context, tx neo4j.ManagedTransaction, f project.Fence) error {
	if f.Token == 0 {
		return nil
	}
	res, err := tx.Run(ctx, checkFence, map[string]any{
		"id": fmt.Sprintf("%s/%d", f.Topic, f.Partition), "topic": f.Topic, "partition": int64(f.Partition), "token": f.Token,
	})
	if err != nil {
		return err
	}
	rec, err := res.Single(ctx)
	if err != nil {
		return err
	}
	newest, _, err := neo4j.GetRecordValue[int64](rec, "newest")
	if err != nil {
		return err
	}
	if newest > f.Token {
		return &project.FencedError{Store: project.StoreGraph, Fence: f, Newest: newest}
	}
	return nil
}

// run runs query with rows as its $docs, and returns its records; no rows
// is no statement.
func run(ctx context.Context, tx neo4j.ManagedTransaction, query string, rows []map[string]any) ([]*neo4j.Record, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	res, err := tx.Run(ctx, query, map[string]any{"docs": rows})
	if err != nil {
		return nil, err
	}
	return res.Collect(ctx)
}

// chunkExists reports whether err is a unique constraint's refusal: in a
// transaction of CreateNewVersions, a CREATE that met an existing chunk.
func chunkExists(err error) bool {
	var n4j *neo4j.Neo4jError
	return errors.As(err, &n4j) && n4j.Code == "Neo.ClientError.Schema.ConstraintValidationFailed"
}

// ChunkCounts returns the number of chunk nodes per document.
func (s *Store) ChunkCounts(ctx context.Context, keys []string) (map[string]int, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
UNWIND $keys AS k
MATCH (c:Chunk {document_key: k})
RETURN k, count(c) AS n`, map[string]any{"keys": keys}, neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("count chunks: %w", err))
	}
	out := make(map[string]int, len(keys))
	for _, r := range res.Records {
		k, _ := r.Get("k")
		n, _ := r.Get("n")
		key, _ := k.(string)
		count, _ := n.(int64)
		out[key] = int(count)
	}
	return out, nil
}

// ChunkIDs returns, per document, the ids of the chunks it holds through a
// HAS_CHUNK relationship; a chunk node without it is not counted as held.
// Each document comes back as one record of its ids: a record per chunk
// cost the driver more to decode than the query cost the server.
func (s *Store) ChunkIDs(ctx context.Context, keys []string) (map[string][]uuid.UUID, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
UNWIND $keys AS k
MATCH (c:Chunk {document_key: k})
WHERE EXISTS { MATCH (:Document {key: k})-[:HAS_CHUNK]->(c) }
RETURN k, collect(c.id) AS ids`, map[string]any{"keys": keys}, neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("list chunk ids: %w", err))
	}
	out := make(map[string][]uuid.UUID, len(keys))
	for _, r := range res.Records {
		key, _, _ := neo4j.GetRecordValue[string](r, "k")
		raw, _, _ := neo4j.GetRecordValue[[]any](r, "ids")
		ids := make([]uuid.UUID, len(raw))
		for i, v := range raw {
			s, _ := v.(string)
			id, err := uuid.Parse(s)
			if err != nil {
				// A chunk whose id is not a UUID was not written by the
				// projector; report it under the nil id so it counts as
				// foreign.
				id = uuid.Nil
			}
			ids[i] = id
		}
		out[key] = ids
	}
	return out, nil
}

// withPosition adds a log position to a row of parameters: topic,
// topic_id, partition and offset, nulls when unknown (no topic; no topic id
// from a broker before Kafka 3.1), which no property holds. Two positions
// are of the same log when their topics and partitions are, and their
// topic ids too where both are known: a topic deleted and created again
// restarts its offsets.
func withPosition(row map[string]any, p project.Position) map[string]any {
	if p.Topic == "" {
		row["topic"], row["topic_id"], row["partition"], row["offset"] = nil, nil, nil, nil
		return row
	}
	row["topic"], row["partition"], row["offset"] = p.Topic, int64(p.Partition), p.Offset
	row["topic_id"] = nil
	if p.TopicID != (project.TopicID{}) {
		row["topic_id"] = uuid.UUID(p.TopicID).String()
	}
	return row
}

// PruneTombstones removes the tombstones of documents withdrawn before
// cutoff, in transactions of at most batch, and returns how many it
// removed. A late write of a version they withdrew could create its
// document again after that, so the retention must outlast any write that
// can still be on its way (docs/operations.md, "Ledger retention").
func (s *Store) PruneTombstones(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		res, err := neo4j.ExecuteQuery(ctx, s.driver, pruneTombstones, map[string]any{"cutoff": cutoff.UTC(), "limit": int64(batch)},
			neo4j.EagerResultTransformer, s.queryConfig())
		if err != nil {
			return total, classify(ctx, fmt.Errorf("prune tombstones: %w", err))
		}
		removed, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "removed")
		total += removed
		if removed < int64(batch) {
			return total, nil
		}
	}
}

// jsonOrNil encodes metadata as a JSON string property; Neo4j properties
// cannot hold maps. nil metadata is no property at all.
func jsonOrNil(m map[string]any) (any, error) {
	if m == nil {
		return nil, nil
	}
	return metajson.Marshal(m, metajson.AsJSON)
}

// classify wraps a Neo4j error as a project.StoreError whose kind says
// whether retrying can help and whether a record is to blame (see
// docs/operations.md, "Store errors"). ctx is the failed call's: once it
// has ended, the error also says so in Go's terms.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*project.FencedError](err); ok {
		return err // not a failure of the store: its answer
	}
	err = project.WithContextErr(ctx, err)
	kind, limit := project.Transient, ""
	var n4j *neo4j.Neo4jError
	var auth *neo4j.InvalidAuthenticationError
	var gaveUp *neo4j.TransactionExecutionLimit
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case errors.As(err, &auth), certificateRejected(err):
		kind = project.Fatal
	case errors.As(err, &n4j):
		kind, limit = kindOfCode(n4j.Code)
	case errors.As(err, &gaveUp) && len(gaveUp.Errors) > 0:
		// The driver retried a transient error until its retry time ran
		// out; the last one says what it was, but the driver's error does
		// not unwrap to it.
		if errors.As(gaveUp.Errors[len(gaveUp.Errors)-1], &n4j) {
			kind, limit = kindOfCode(n4j.Code)
		}
	case neo4j.IsRetryable(err):
	}
	return &project.StoreError{Store: project.StoreGraph, Kind: kind, LimitName: limit, Err: err}
}

// neo4jLimits are the Neo4j status codes of a limit of the server, not of
// a record, with the setting that sets the limit: a batch over it fails
// the same way however often it is retried, and every record of it would
// pass alone.
var neo4jLimits = map[string]string{
	"Neo.TransientError.General.MemoryPoolOutOfMemoryError":              "dbms.memory.transaction.total.max",
	"Neo.TransientError.General.TransactionMemoryLimit":                  "db.memory.transaction.max",
	"Neo.ClientError.Transaction.TransactionTimedOut":                    "db.transaction.timeout",
	"Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration": "db.transaction.timeout",
}

// kindOfCode maps a Neo4j status code (Neo.<Classification>.<Category>.<Title>)
// to what the projector should do about it, and names the limit of a
// Limit. The projector's statements are constant and their parameters are
// checked, so a statement error is a record's only where it can come from
// a value (a type or argument the value breaks, a constraint); a missing
// parameter or a syntax error is the projector's own, and fatal.
func kindOfCode(code string) (project.ErrorKind, string) {
	if limit, ok := neo4jLimits[code]; ok {
		return project.Limit, limit
	}
	switch {
	case strings.HasPrefix(code, "Neo.TransientError."):
		return project.Transient, ""
	case strings.HasPrefix(code, "Neo.ClientError.Security."),
		strings.HasPrefix(code, "Neo.ClientError.Database."),
		strings.HasPrefix(code, "Neo.ClientError.Statement.SyntaxError"),
		strings.HasPrefix(code, "Neo.ClientError.Statement.ParameterMissing"),
		strings.HasPrefix(code, "Neo.ClientError.Procedure."),
		code == "Neo.ClientError.General.ForbiddenOnReadOnlyDatabase":
		return project.Fatal, ""
	case strings.HasPrefix(code, "Neo.ClientError.Schema.ConstraintValidationFailed"),
		strings.HasPrefix(code, "Neo.ClientError.Statement."):
		return project.Rejected, ""
	}
	return project.Transient, ""
}
