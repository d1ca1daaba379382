package qdrantdouble

import (
	"strings"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/proto"
)

// payloadView selects the part of a stored payload a response carries, as a
// copy the caller may keep.
type payloadView func(map[string]*qdrant.Value) map[string]*qdrant.Value

// compilePayloadSelector turns with_payload into a payloadView. Qdrant's
// default differs per RPC (Scroll returns payloads, Get does not), so the
// caller passes it for a nil selector.
func compilePayloadSelector(sel *qdrant.WithPayloadSelector, dflt bool) (payloadView, error) {
	if sel == nil {
		return payloadAll(dflt), nil
	}
	switch s := sel.GetSelectorOptions().(type) {
	case *qdrant.WithPayloadSelector_Enable:
		return payloadAll(s.Enable), nil
	case *qdrant.WithPayloadSelector_Include:
		keys, err := topLevelKeys(s.Include.GetFields())
		if err != nil {
			return nil, err
		}
		return func(p map[string]*qdrant.Value) map[string]*qdrant.Value {
			out := make(map[string]*qdrant.Value)
			for k := range keys {
				if v, ok := p[k]; ok {
					out[k] = proto.CloneOf(v)
				}
			}
			return out
		}, nil
	case *qdrant.WithPayloadSelector_Exclude:
		keys, err := topLevelKeys(s.Exclude.GetFields())
		if err != nil {
			return nil, err
		}
		return func(p map[string]*qdrant.Value) map[string]*qdrant.Value {
			out := make(map[string]*qdrant.Value)
			for k, v := range p {
				if !keys[k] {
					out[k] = proto.CloneOf(v)
				}
			}
			return out
		}, nil
	default:
		return nil, errInvalid("with_payload has no selector set")
	}
}

// payloadAll returns the whole payload, or none.
func payloadAll(enable bool) payloadView {
	if !enable {
		return func(map[string]*qdrant.Value) map[string]*qdrant.Value { return nil }
	}
	return clonePayload
}

// topLevelKeys collects selector keys. Qdrant also accepts nested paths there
// (it then cuts the payload down to the nested value); the double refuses them
// rather than return a payload Qdrant would not.
func topLevelKeys(fields []string) (map[string]bool, error) {
	keys := make(map[string]bool, len(fields))
	for _, f := range fields {
		if strings.ContainsAny(f, `.[]"`) {
			return nil, errUnsupported("nested payload selector paths (%q)", f)
		}
		keys[f] = true
	}
	return keys, nil
}

// clonePayload copies a payload so that stored state and messages never share
// values.
func clonePayload(p map[string]*qdrant.Value) map[string]*qdrant.Value {
	out := make(map[string]*qdrant.Value, len(p))
	for k, v := range p {
		out[k] = proto.CloneOf(v)
	}
	return out
}
