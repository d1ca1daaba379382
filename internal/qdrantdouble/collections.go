package qdrantdouble

import (
	"context"
	"slices"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/proto"
)

// collectionsService answers the Collections service from a store.
type collectionsService struct {
	qdrant.UnimplementedCollectionsServer
	store *store
}

// Create makes a collection with one unnamed dense vector. Options that only
// tune storage or indexing (HNSW, WAL, optimizers, quantization, on_disk) are
// accepted and have no effect, as an in-memory exact store has nothing to
// tune; options that change what is stored or how it is addressed are refused.
func (s *collectionsService) Create(_ context.Context, req *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	start := time.Now()
	name := req.GetCollectionName()
	if name == "" {
		return nil, errInvalid("collection_name must not be empty")
	}
	params, err := vectorParams(req.GetVectorsConfig())
	if err != nil {
		return nil, err
	}
	if len(req.GetSparseVectorsConfig().GetMap()) > 0 {
		return nil, errUnsupported("sparse vectors")
	}
	if req.GetShardingMethod() == qdrant.ShardingMethod_Custom {
		return nil, errUnsupported("custom sharding")
	}

	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	if _, ok := s.store.collections[name]; ok {
		return nil, errCollectionExists(name)
	}
	s.store.collections[name] = &collection{
		vectors:       params,
		onDiskPayload: req.OnDiskPayload == nil || *req.OnDiskPayload, // Qdrant's default is true
		points:        make(map[pointID]*point),
		indexes:       make(map[string]*fieldIndex),
	}
	return &qdrant.CollectionOperationResponse{Result: true, Time: time.Since(start).Seconds()}, nil
}

// vectorParams validates the vectors config of a new collection and returns
// the stored copy of its parameters.
func vectorParams(cfg *qdrant.VectorsConfig) (*qdrant.VectorParams, error) {
	switch c := cfg.GetConfig().(type) {
	case *qdrant.VectorsConfig_Params:
		p := c.Params
		switch {
		case p.GetSize() == 0:
			return nil, errInvalid("vector size must be at least 1")
		case p.GetDistance() == qdrant.Distance_UnknownDistance:
			return nil, errInvalid("vector distance must be set")
		case p.MultivectorConfig != nil:
			return nil, errUnsupported("multivectors")
		case p.GetDatatype() != qdrant.Datatype_Default && p.GetDatatype() != qdrant.Datatype_Float32:
			return nil, errUnsupported("vector datatype %s (it changes the stored values)", p.GetDatatype())
		}
		return proto.CloneOf(p), nil
	case *qdrant.VectorsConfig_ParamsMap:
		return nil, errUnsupported("named vectors")
	default:
		return nil, errUnsupported("collections without a dense vector")
	}
}

// CollectionExists reports whether the collection exists.
func (s *collectionsService) CollectionExists(_ context.Context, req *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	start := time.Now()
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	_, ok := s.store.collections[req.GetCollectionName()]
	return &qdrant.CollectionExistsResponse{
		Result: &qdrant.CollectionExists{Exists: ok},
		Time:   time.Since(start).Seconds(),
	}, nil
}

// Get describes the collection: always green and optimised (there is nothing
// to optimise), the exact point count, its vector parameters and a
// payload_schema entry per index, with the number of points it holds.
func (s *collectionsService) Get(_ context.Context, req *qdrant.GetCollectionInfoRequest) (*qdrant.GetCollectionInfoResponse, error) {
	start := time.Now()
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	schema := make(map[string]*qdrant.PayloadSchemaInfo, len(c.indexes))
	for key, idx := range c.indexes {
		schema[key] = &qdrant.PayloadSchemaInfo{
			DataType: idx.schema,
			Params:   proto.CloneOf(idx.params),
			Points:   qdrant.PtrOf(idx.count),
		}
	}
	count := uint64(len(c.points))
	indexed := uint64(0) // below Qdrant's indexing threshold no vector is HNSW-indexed
	one := uint32(1)
	return &qdrant.GetCollectionInfoResponse{
		Result: &qdrant.CollectionInfo{
			Status:          qdrant.CollectionStatus_Green,
			OptimizerStatus: &qdrant.OptimizerStatus{Ok: true},
			SegmentsCount:   1,
			Config: &qdrant.CollectionConfig{
				Params: &qdrant.CollectionParams{
					ShardNumber:            1,
					OnDiskPayload:          c.onDiskPayload,
					VectorsConfig:          qdrant.NewVectorsConfig(proto.CloneOf(c.vectors)),
					ReplicationFactor:      &one,
					WriteConsistencyFactor: &one,
				},
			},
			PayloadSchema:       schema,
			PointsCount:         &count,
			IndexedVectorsCount: &indexed,
		},
		Time: time.Since(start).Seconds(),
	}, nil
}

// List returns the collection names, sorted (Qdrant's order is unspecified).
func (s *collectionsService) List(context.Context, *qdrant.ListCollectionsRequest) (*qdrant.ListCollectionsResponse, error) {
	start := time.Now()
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	names := make([]string, 0, len(s.store.collections))
	for name := range s.store.collections {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*qdrant.CollectionDescription, len(names))
	for i, name := range names {
		out[i] = &qdrant.CollectionDescription{Name: name}
	}
	return &qdrant.ListCollectionsResponse{Collections: out, Time: time.Since(start).Seconds()}, nil
}

// Delete drops a collection with its points. Like Qdrant it is not an error to
// delete a missing collection: the answer is result false.
func (s *collectionsService) Delete(_ context.Context, req *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	start := time.Now()
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	_, ok := s.store.collections[req.GetCollectionName()]
	delete(s.store.collections, req.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: ok, Time: time.Since(start).Seconds()}, nil
}
