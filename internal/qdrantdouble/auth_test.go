package qdrantdouble

import (
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func TestAPIKey(t *testing.T) {
	const key = "s3cret"
	tests := []struct {
		name      string
		clientKey string
		header    []string // extra metadata pairs on the call
		code      codes.Code
		msg       string
	}{
		{"right key", key, nil, codes.OK, ""},
		{"bearer token", "", []string{"authorization", "Bearer " + key}, codes.OK, ""},
		{"no key", "", nil, codes.Unauthenticated, "Must provide an API key or an Authorization bearer token"},
		{"wrong key", "guess", nil, codes.Unauthenticated, "Invalid API key or JWT"},
		{"wrong bearer token", "", []string{"authorization", "Bearer guess"}, codes.Unauthenticated, "Invalid API key or JWT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := startDouble(t, Options{APIKey: key}, tt.clientKey)
			ctx := metadata.AppendToOutgoingContext(t.Context(), tt.header...)

			// HealthCheck is open, as in Qdrant, so the client's version
			// check works before authentication.
			if _, err := client.HealthCheck(ctx); err != nil {
				t.Errorf("health check: got %v, want no error", err)
			}

			_, err := client.ListCollections(ctx)
			if tt.code == codes.OK {
				if err != nil {
					t.Errorf("list: got %v, want no error", err)
				}
				return
			}
			wantStatus(t, err, tt.code, tt.msg)
			// The key is checked before anything else, unimplemented RPCs included.
			_, err = client.Query(ctx, &qdrant.QueryPoints{CollectionName: "chunks"})
			wantStatus(t, err, tt.code, tt.msg)
		})
	}
}
