package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/project"
)

// waitUntil runs check until it succeeds, backing off from 0.5 s to 10 s
// while it fails transiently: at start the stores and endpoints may still be
// coming up (in a compose file they start with the projector). It logs one
// line when it starts waiting. Any other failure, or ctx ending, is
// returned at once.
func waitUntil(ctx context.Context, log *zap.Logger, waitingFor string, check func(context.Context) error, fields ...zap.Field) error {
	delay := 500 * time.Millisecond
	for waited := false; ; {
		err := check(ctx)
		if err == nil || project.KindOf(err) != project.Transient || ctx.Err() != nil {
			return err
		}
		if !waited {
			log.Warn(waitingFor+" not available yet; waiting", append(fields, zap.Error(err))...)
			waited = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}
