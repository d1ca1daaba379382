//go:build !faults

package fault

import (
	"context"

	"github.com/projector/projector/internal/project"
)

// action is empty without the faults build tag.
type action struct{}

// FromEnv returns nil: faults are not compiled into this build.
func FromEnv(func(string) string) (*Injector, error) { return nil, nil }

func (in *Injector) at(context.Context, string) {}

// WrapIndex returns idx unchanged.
func (in *Injector) WrapIndex(idx project.Index) project.Index { return idx }
