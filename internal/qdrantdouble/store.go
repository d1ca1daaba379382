package qdrantdouble

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
)

// store is the in-memory state of every collection.
//
// One RWMutex guards all of it, collections and their points, payload indexes
// and id orders alike: read RPCs hold it shared, write RPCs exclusively, each
// for the whole call. A test double serves a few callers at a time, and a
// single lock makes every RPC atomic and linearizable, so a reader sees a
// write whole or not at all. Writes bring the indexes and the id order up to
// date before they return, so a read never changes anything and readers
// holding the lock together cannot race. The store owns every value in it:
// requests are copied in and responses copied out, so no caller can alias
// stored state.
type store struct {
	mu          sync.RWMutex
	collections map[string]*collection // guarded by mu
}

func newStore() *store {
	return &store{collections: make(map[string]*collection)}
}

// collection returns the named collection, or Qdrant's NotFound error.
// The caller holds mu.
func (s *store) collection(name string) (*collection, error) {
	c, ok := s.collections[name]
	if !ok {
		return nil, errCollectionNotFound(name)
	}
	return c, nil
}

// collection is one Qdrant collection with a single unnamed dense vector.
// All of its fields are guarded by store.mu.
//
// Invariant, kept by put and remove, the only writers of points: order holds
// exactly the ids of points, and every index in indexes holds exactly the
// values of points (fieldIndex.appendValues). Plans and ordered scrolls rely on it.
type collection struct {
	vectors *qdrant.VectorParams // as created; Size and Distance drive upserts
	// onDiskPayload is echoed by Get; the double keeps everything in memory.
	onDiskPayload bool
	points        map[pointID]*point
	order         idOrder                // the ids of points, in Qdrant's order
	indexes       map[string]*fieldIndex // payload key -> its index
	lastOp        uint64                 // operation id of the last write
}

// put stores p, replacing the point with its id if there is one: the payload
// indexes drop the old point's values and take the new one's.
func (c *collection) put(p *point) {
	if old, ok := c.points[p.id]; ok {
		for _, idx := range c.indexes {
			idx.remove(old)
		}
	} else {
		c.order.insert(p.id)
	}
	c.points[p.id] = p
	for _, idx := range c.indexes {
		idx.add(p)
	}
}

// remove deletes the point with id, if there is one.
func (c *collection) remove(id pointID) {
	p, ok := c.points[id]
	if !ok {
		return
	}
	for _, idx := range c.indexes {
		idx.remove(p)
	}
	c.order.remove(id)
	delete(c.points, id)
}

// createIndex indexes key, replacing its index if there is one, and indexes
// the points already stored.
func (c *collection) createIndex(key string, idx *fieldIndex) {
	for _, p := range c.points {
		idx.add(p)
	}
	c.indexes[key] = idx
}

// point is a stored point. vector and payload are owned by the store.
type point struct {
	id      pointID
	vector  []float32
	payload map[string]*qdrant.Value
}

// completeWrite hands out the next operation id and builds the write's answer.
// Qdrant answers Completed when the caller asked to wait and Acknowledged
// otherwise; the double has applied the write either way.
func (c *collection) completeWrite(wait *bool, start time.Time) *qdrant.PointsOperationResponse {
	c.lastOp++
	op := c.lastOp
	st := qdrant.UpdateStatus_Acknowledged
	if wait != nil && *wait {
		st = qdrant.UpdateStatus_Completed
	}
	return &qdrant.PointsOperationResponse{
		Result: &qdrant.UpdateResult{OperationId: &op, Status: st},
		Time:   time.Since(start).Seconds(),
	}
}

// storeVector returns the vector as Qdrant stores it. Cosine collections keep
// vectors normalised to unit length, so they come back normalised; Qdrant does
// it in float32 and leaves zero and already-unit vectors untouched, and so does
// the double. The other distances keep vectors as given.
func storeVector(v []float32, d qdrant.Distance) []float32 {
	out := slices.Clone(v)
	if d != qdrant.Distance_Cosine {
		return out
	}
	var sq float32
	for _, x := range out {
		sq += x * x
	}
	const f32Epsilon = 0x1p-23 // Rust's f32::EPSILON
	if sq < f32Epsilon || math.Abs(float64(sq-1)) <= 1e-6 {
		return out
	}
	norm := float32(math.Sqrt(float64(sq)))
	for i, x := range out {
		out[i] = x / norm
	}
	return out
}

// pointID is a Qdrant point id: an unsigned integer or a UUID.
type pointID struct {
	isUUID bool
	num    uint64
	uuid   uuid.UUID
}

// parsePointID converts a request's id. Qdrant accepts any UUID spelling its
// parser knows (hyphenated, simple, braced, urn:uuid:) and answers with the
// canonical hyphenated lower-case form.
func parsePointID(id *qdrant.PointId) (pointID, error) {
	switch v := id.GetPointIdOptions().(type) {
	case *qdrant.PointId_Num:
		return pointID{num: v.Num}, nil
	case *qdrant.PointId_Uuid:
		u, err := uuid.Parse(v.Uuid)
		if err != nil {
			return pointID{}, errInvalid("Unable to parse UUID: %s", v.Uuid)
		}
		return pointID{isUUID: true, uuid: u}, nil
	default:
		return pointID{}, errInvalid("No ID options provided")
	}
}

// parsePointIDs converts a list of request ids.
func parsePointIDs(ids []*qdrant.PointId) ([]pointID, error) {
	out := make([]pointID, 0, len(ids))
	for _, id := range ids {
		pid, err := parsePointID(id)
		if err != nil {
			return nil, err
		}
		out = append(out, pid)
	}
	return out, nil
}

// compare orders ids as Qdrant does (its ExtendedPointId derives Ord): every
// numeric id before every UUID, numbers by value, UUIDs by their bytes.
func (a pointID) compare(b pointID) int {
	switch {
	case a.isUUID != b.isUUID:
		if a.isUUID {
			return 1
		}
		return -1
	case a.isUUID:
		return bytes.Compare(a.uuid[:], b.uuid[:])
	default:
		return cmp.Compare(a.num, b.num)
	}
}

// String returns the id as Qdrant prints it.
func (a pointID) String() string {
	if a.isUUID {
		return a.uuid.String()
	}
	return strconv.FormatUint(a.num, 10)
}

// proto returns the id as the API spells it.
func (a pointID) proto() *qdrant.PointId {
	if a.isUUID {
		return qdrant.NewIDUUID(a.uuid.String())
	}
	return qdrant.NewIDNum(a.num)
}
