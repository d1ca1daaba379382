package qdrantdouble

import (
	"slices"
	"strings"

	"github.com/qdrant/go-client/qdrant"
)

// predicate reports whether a stored point satisfies a compiled filter or
// condition.
type predicate func(*point) bool

// matchAll is the predicate of an absent filter.
func matchAll(*point) bool { return true }

// compileFilter turns a request filter into a predicate, refusing anything the
// double cannot evaluate the way Qdrant does. A nil filter matches every point.
//
// Semantics follow Qdrant's check_filter: every clause present must hold;
// should needs at least one of its conditions (an empty should is absent, as
// Qdrant's gRPC conversion drops empty lists); min_should needs at least
// min_count of its conditions; must needs all; must_not needs none.
func compileFilter(f *qdrant.Filter) (predicate, error) {
	if f == nil {
		return matchAll, nil
	}
	should, err := compileConditions(f.GetShould())
	if err != nil {
		return nil, err
	}
	must, err := compileConditions(f.GetMust())
	if err != nil {
		return nil, err
	}
	mustNot, err := compileConditions(f.GetMustNot())
	if err != nil {
		return nil, err
	}
	var minShould []predicate
	minCount := uint64(0)
	if ms := f.GetMinShould(); ms != nil {
		if minShould, err = compileConditions(ms.GetConditions()); err != nil {
			return nil, err
		}
		minCount = ms.GetMinCount()
	}
	return func(p *point) bool {
		if len(should) > 0 && !slices.ContainsFunc(should, func(c predicate) bool { return c(p) }) {
			return false
		}
		if minCount > 0 {
			n := uint64(0)
			for _, c := range minShould {
				if c(p) {
					n++
				}
			}
			if n < minCount {
				return false
			}
		}
		for _, c := range must {
			if !c(p) {
				return false
			}
		}
		return !slices.ContainsFunc(mustNot, func(c predicate) bool { return c(p) })
	}, nil
}

func compileConditions(conds []*qdrant.Condition) ([]predicate, error) {
	out := make([]predicate, 0, len(conds))
	for _, c := range conds {
		pred, err := compileCondition(c)
		if err != nil {
			return nil, err
		}
		out = append(out, pred)
	}
	return out, nil
}

func compileCondition(c *qdrant.Condition) (predicate, error) {
	switch v := c.GetConditionOneOf().(type) {
	case *qdrant.Condition_Field:
		return compileFieldCondition(v.Field)
	case *qdrant.Condition_HasId:
		ids, err := parsePointIDs(v.HasId.GetHasId())
		if err != nil {
			return nil, err
		}
		set := setOf(ids)
		return func(p *point) bool { return set[p.id] }, nil
	case *qdrant.Condition_Filter:
		return compileFilter(v.Filter)
	case *qdrant.Condition_IsEmpty:
		path, err := parsePath(v.IsEmpty.GetKey())
		if err != nil {
			return nil, err
		}
		// Qdrant: the key is missing, null or an empty array.
		return func(p *point) bool {
			val, ok := lookup(p.payload, path)
			return !ok || isNull(val) || isEmptyList(val)
		}, nil
	case *qdrant.Condition_IsNull:
		path, err := parsePath(v.IsNull.GetKey())
		if err != nil {
			return nil, err
		}
		// Qdrant: the key is present and null; a missing key or [] is not null.
		return func(p *point) bool {
			val, ok := lookup(p.payload, path)
			return ok && isNull(val)
		}, nil
	case *qdrant.Condition_Nested:
		return nil, errUnsupported("nested (array of objects) conditions")
	case *qdrant.Condition_HasVector:
		return nil, errUnsupported("has_vector conditions")
	default:
		// Qdrant drops an empty condition, which turns must:[{}] into "match
		// everything". The double refuses it: it is always a bug in the caller,
		// and in a delete it would silently empty the collection.
		return nil, errInvalid("qdrant test double refuses an empty condition (no condition type set); Qdrant would ignore it")
	}
}

// compileFieldCondition follows Qdrant's FieldCondition checker: is_empty wins
// over is_null, which wins over match and range; match and range, when both
// given, are alternatives. A value that is an array matches when any element
// does; a missing key matches only is_empty: true and is_null: false.
func compileFieldCondition(fc *qdrant.FieldCondition) (predicate, error) {
	path, err := parsePath(fc.GetKey())
	if err != nil {
		return nil, err
	}
	switch {
	case fc.GetGeoBoundingBox() != nil, fc.GetGeoRadius() != nil, fc.GetGeoPolygon() != nil:
		return nil, errUnsupported("geo conditions (key %q)", fc.GetKey())
	case fc.GetValuesCount() != nil:
		return nil, errUnsupported("values_count conditions (key %q)", fc.GetKey())
	case fc.GetDatetimeRange() != nil:
		return nil, errUnsupported("datetime_range conditions (key %q)", fc.GetKey())
	}
	if fc.IsEmpty != nil {
		want := *fc.IsEmpty
		return func(p *point) bool {
			val, ok := lookup(p.payload, path)
			if !ok {
				return want
			}
			if l := val.GetListValue(); l != nil {
				return (len(l.GetValues()) == 0) == want
			}
			return isNull(val) == want
		}, nil
	}
	if fc.IsNull != nil {
		want := *fc.IsNull
		return func(p *point) bool {
			val, ok := lookup(p.payload, path)
			if !ok {
				return !want
			}
			if l := val.GetListValue(); l != nil {
				return slices.ContainsFunc(l.GetValues(), isNull) == want
			}
			return isNull(val) == want
		}, nil
	}
	var checks []func(*qdrant.Value) bool
	if m := fc.GetMatch(); m != nil {
		check, err := compileMatch(m)
		if err != nil {
			return nil, err
		}
		checks = append(checks, check)
	}
	if r := fc.GetRange(); r != nil {
		checks = append(checks, func(v *qdrant.Value) bool { return inRange(r, v) })
	}
	if len(checks) == 0 {
		return nil, errInvalid("At least one field condition must be specified (key %q)", fc.GetKey())
	}
	return func(p *point) bool {
		val, ok := lookup(p.payload, path)
		if !ok {
			return false
		}
		return anyElement(val, func(v *qdrant.Value) bool {
			return slices.ContainsFunc(checks, func(c func(*qdrant.Value) bool) bool { return c(v) })
		})
	}, nil
}

// compileMatch returns the check of one payload value (an array element or a
// scalar) against a Match, as Qdrant's Match checker does it. Integers match
// only integer payload values: 3.0 stored as a double is not the integer 3.
func compileMatch(m *qdrant.Match) (func(*qdrant.Value) bool, error) {
	switch mv := m.GetMatchValue().(type) {
	case *qdrant.Match_Keyword:
		return func(v *qdrant.Value) bool {
			s, ok := v.GetKind().(*qdrant.Value_StringValue)
			return ok && s.StringValue == mv.Keyword
		}, nil
	case *qdrant.Match_Integer:
		return func(v *qdrant.Value) bool {
			i, ok := v.GetKind().(*qdrant.Value_IntegerValue)
			return ok && i.IntegerValue == mv.Integer
		}, nil
	case *qdrant.Match_Boolean:
		return func(v *qdrant.Value) bool {
			b, ok := v.GetKind().(*qdrant.Value_BoolValue)
			return ok && b.BoolValue == mv.Boolean
		}, nil
	case *qdrant.Match_Keywords:
		set := setOf(mv.Keywords.GetStrings())
		return func(v *qdrant.Value) bool {
			s, ok := v.GetKind().(*qdrant.Value_StringValue)
			return ok && set[s.StringValue]
		}, nil
	case *qdrant.Match_Integers:
		set := setOf(mv.Integers.GetIntegers())
		return func(v *qdrant.Value) bool {
			i, ok := v.GetKind().(*qdrant.Value_IntegerValue)
			return ok && set[i.IntegerValue]
		}, nil
	case *qdrant.Match_ExceptKeywords:
		set := setOf(mv.ExceptKeywords.GetStrings())
		// Qdrant: a string must be outside the list, null never matches, and
		// every other value (number, bool, object, nested array) matches.
		return func(v *qdrant.Value) bool {
			switch k := v.GetKind().(type) {
			case *qdrant.Value_StringValue:
				return !set[k.StringValue]
			case *qdrant.Value_NullValue:
				return false
			default:
				return true
			}
		}, nil
	case *qdrant.Match_ExceptIntegers:
		set := setOf(mv.ExceptIntegers.GetIntegers())
		// Qdrant: an integer must be outside the list, null never matches, and
		// every other value (double, string, bool, object, nested array) matches.
		return func(v *qdrant.Value) bool {
			switch k := v.GetKind().(type) {
			case *qdrant.Value_IntegerValue:
				return !set[k.IntegerValue]
			case *qdrant.Value_NullValue:
				return false
			default:
				return true
			}
		}, nil
	case *qdrant.Match_Text, *qdrant.Match_Phrase, *qdrant.Match_TextAny:
		return nil, errUnsupported("full-text match conditions (their result depends on a text index)")
	default:
		return nil, errInvalid("Malformed Match condition")
	}
}

// setOf returns values as a set, for conditions checked against many points:
// a match-any of a batch's 500 keys, a has_id of its 1000 ids.
func setOf[T comparable](values []T) map[T]bool {
	set := make(map[T]bool, len(values))
	for _, v := range values {
		set[v] = true
	}
	return set
}

// inRange reports whether a numeric payload value lies in r; every bound given
// must hold. Non-numeric values never match, as in Qdrant.
func inRange(r *qdrant.Range, v *qdrant.Value) bool {
	var x float64
	switch k := v.GetKind().(type) {
	case *qdrant.Value_IntegerValue:
		x = float64(k.IntegerValue)
	case *qdrant.Value_DoubleValue:
		x = k.DoubleValue
	default:
		return false
	}
	return (r.Gt == nil || x > *r.Gt) &&
		(r.Gte == nil || x >= *r.Gte) &&
		(r.Lt == nil || x < *r.Lt) &&
		(r.Lte == nil || x <= *r.Lte)
}

// elements returns the values a condition looks at: the elements of an array
// (one level deep, as Qdrant flattens it), or the value itself.
func elements(v *qdrant.Value) []*qdrant.Value {
	if l := v.GetListValue(); l != nil {
		return l.GetValues()
	}
	return []*qdrant.Value{v}
}

// anyElement reports whether check holds for any of elements(v).
func anyElement(v *qdrant.Value, check func(*qdrant.Value) bool) bool {
	return slices.ContainsFunc(elements(v), check)
}

func isNull(v *qdrant.Value) bool {
	_, ok := v.GetKind().(*qdrant.Value_NullValue)
	return ok
}

func isEmptyList(v *qdrant.Value) bool {
	l := v.GetListValue()
	return l != nil && len(l.GetValues()) == 0
}

// parsePath splits a payload key into its object keys ("a.b" is key b of the
// object under a). Qdrant's array syntax (a[].b, a[0]) and quoted keys are
// refused, so such a key cannot silently match nothing.
func parsePath(key string) ([]string, error) {
	if key == "" {
		return nil, errInvalid("Invalid key path: empty key")
	}
	if strings.ContainsAny(key, `[]"`) {
		return nil, errUnsupported("array or quoted payload key paths (%q)", key)
	}
	parts := strings.Split(key, ".")
	if slices.Contains(parts, "") {
		return nil, errInvalid("Invalid key path: %q", key)
	}
	return parts, nil
}

// lookup returns the payload value at path. As in Qdrant, each step must land
// on an object: a path does not reach through arrays without the [] syntax.
func lookup(payload map[string]*qdrant.Value, path []string) (*qdrant.Value, bool) {
	v, ok := payload[path[0]]
	for _, key := range path[1:] {
		if !ok {
			return nil, false
		}
		v, ok = v.GetStructValue().GetFields()[key]
	}
	return v, ok
}
