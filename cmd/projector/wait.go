package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/retry"
)

// waitUntil runs check until it succeeds, backing off from 0.5 s to 10 s while
// transient says its failure is one that waiting heals: at start the
// stores, brokers and endpoints may still be coming up (in a compose file
// they start with the projector). It logs one line when it starts waiting.
// Any other failure, or ctx ending, is returned at once.
func waitUntil(ctx context.Context, log *zap.Logger, waitingFor string, check func(context.Context) error, transient func(error) bool, fields ...zap.Field) error {
	policy := retry.Policy{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 0; ; attempt++ {
		err := check(ctx)
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		if attempt == 0 {
			log.Warn(waitingFor+" not available yet; waiting", append(fields, zap.Error(err))...)
		}
		if err := retry.Sleep(ctx, policy.Delay(attempt)); err != nil {
			return err
		}
	}
}

// storeTransient is waitUntil's test for the stores and the embedding
// endpoint, whose adapters classify their own errors.
func storeTransient(err error) bool { return project.KindOf(err) == project.Transient }
