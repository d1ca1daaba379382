//! Conversions between Qdrant's gRPC messages and the engine's types.
//!
//! Filters, payload selectors and payloads go through the JSON shape of
//! Qdrant's REST API, which the engine's own types deserialize: the engine
//! then parses and checks them exactly as the server's REST layer does, and
//! this file only has to say how each gRPC message is spelt in JSON.

use std::collections::HashMap;

use qdrant_client::qdrant as grpc;
use qdrant_client::qdrant::condition::ConditionOneOf;
use qdrant_client::qdrant::r#match::MatchValue;
use qdrant_client::qdrant::value::Kind;
use qdrant_edge::external::ordered_float::OrderedFloat;
use qdrant_edge::external::uuid::Uuid;
use qdrant_edge::{
    AnyVariants, Condition, DEFAULT_VECTOR_NAME, FacetValue, FieldCondition, Filter, IsEmptyCondition, Match, MatchAny,
    MatchValue as EngineMatchValue, NamedQuery, Payload, PointId, QueryEnum, Range, Record, ScoredPoint, ScoringQuery,
    SearchParams, ValueVariants, VectorInternal, VectorPersisted, VectorStructInternal, VectorStructPersisted,
    WithPayloadInterface, WithVector,
};
use serde_json::{Map, Number, Value as Json, json};

use crate::error::ApiError;

/// A point id of a request.
pub fn point_id(id: Option<grpc::PointId>) -> Result<PointId, ApiError> {
    use grpc::point_id::PointIdOptions;
    match id.and_then(|id| id.point_id_options) {
        Some(PointIdOptions::Num(n)) => Ok(PointId::NumId(n)),
        Some(PointIdOptions::Uuid(s)) => {
            Uuid::parse_str(&s).map(PointId::Uuid).map_err(|_| ApiError::Invalid(format!("Unable to parse UUID: {s}")))
        }
        None => Err(ApiError::Invalid("Empty ID is not allowed".into())),
    }
}

/// A point id of a response.
pub fn point_id_out(id: PointId) -> grpc::PointId {
    use grpc::point_id::PointIdOptions;
    let opt = match id {
        PointId::NumId(n) => PointIdOptions::Num(n),
        PointId::Uuid(u) => PointIdOptions::Uuid(u.to_string()),
    };
    grpc::PointId { point_id_options: Some(opt) }
}

fn point_id_json(id: grpc::PointId) -> Result<Json, ApiError> {
    Ok(match point_id(Some(id))? {
        PointId::NumId(n) => json!(n),
        PointId::Uuid(u) => json!(u.to_string()),
    })
}

/// A payload value as JSON; a double that JSON cannot hold (NaN, infinity)
/// is refused.
pub fn value_json(v: grpc::Value) -> Result<Json, ApiError> {
    Ok(match v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::DoubleValue(d)) => Json::Number(
            Number::from_f64(d)
                .ok_or_else(|| ApiError::BadInput(format!("Payload value {d} is not a finite number")))?,
        ),
        Some(Kind::IntegerValue(i)) => json!(i),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::StructValue(s)) => Json::Object(fields_json(s.fields)?),
        Some(Kind::ListValue(l)) => Json::Array(l.values.into_iter().map(value_json).collect::<Result<_, _>>()?),
    })
}

fn fields_json(fields: HashMap<String, grpc::Value>) -> Result<Map<String, Json>, ApiError> {
    fields.into_iter().map(|(k, v)| Ok((k, value_json(v)?))).collect()
}

/// A JSON value as a payload value: integers stay integers, as the server
/// returns them.
pub fn json_value(v: Json) -> grpc::Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Kind::IntegerValue(i),
            None => Kind::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Kind::StringValue(s),
        Json::Array(a) => Kind::ListValue(grpc::ListValue { values: a.into_iter().map(json_value).collect() }),
        Json::Object(o) => {
            Kind::StructValue(grpc::Struct { fields: o.into_iter().map(|(k, v)| (k, json_value(v))).collect() })
        }
    };
    grpc::Value { kind: Some(kind) }
}

/// The payload of a point to write.
pub fn payload(fields: HashMap<String, grpc::Value>) -> Result<Payload, ApiError> {
    Ok(Payload::from(fields_json(fields)?))
}

/// The payload of a point read.
pub fn payload_out(p: Option<Payload>) -> HashMap<String, grpc::Value> {
    p.map(|p| p.0.into_iter().map(|(k, v)| (k, json_value(v))).collect()).unwrap_or_default()
}

/// A filter as the engine's types. The conditions every write of the
/// projector sends (a field matching a keyword, an integer or keywords, a
/// range, `is_empty`, `has_id`, a filter in a filter) are built here
/// directly; every other condition, and a filter with `min_should`, goes
/// through the JSON shape of Qdrant's REST API, parsed and checked by the
/// engine's own types. Both give the same filter (a test holds them
/// equal): parsing the JSON (untagged enums, each condition tried against
/// every shape) took a third of the CPU of converting an update.
pub fn filter(f: grpc::Filter) -> Result<Filter, ApiError> {
    if f.min_should.is_some() {
        return filter_by_json(f);
    }
    Ok(Filter { should: clause(f.should)?, min_should: None, must: clause(f.must)?, must_not: clause(f.must_not)? })
}

fn filter_by_json(f: grpc::Filter) -> Result<Filter, ApiError> {
    serde_json::from_value(filter_json(f)?).map_err(|e| ApiError::BadInput(format!("Invalid filter: {e}")))
}

/// The conditions of a clause, none when it has none; an empty condition
/// is left out, as the server leaves it out (see conditions_json).
fn clause(conds: Vec<grpc::Condition>) -> Result<Option<Vec<Condition>>, ApiError> {
    if conds.is_empty() {
        return Ok(None);
    }
    conds.into_iter().filter(|c| c.condition_one_of.is_some()).map(condition).collect::<Result<_, _>>().map(Some)
}

fn condition(c: grpc::Condition) -> Result<Condition, ApiError> {
    let direct = match &c.condition_one_of {
        Some(ConditionOneOf::Field(f)) => field(f).map(Condition::Field),
        // The engine does not export the type of its key: read as JSON,
        // but as the one type it is, not tried against every condition.
        Some(ConditionOneOf::IsEmpty(e)) => {
            serde_json::from_value::<IsEmptyCondition>(json!({"is_empty": {"key": e.key}})).ok().map(Condition::IsEmpty)
        }
        _ => None,
    };
    if let Some(direct) = direct {
        return Ok(direct);
    }
    match c.condition_one_of {
        Some(ConditionOneOf::HasId(h)) => {
            let ids = h.has_id.into_iter().map(|id| point_id(Some(id))).collect::<Result<Vec<_>, _>>()?;
            Ok(Condition::HasId(ids.into_iter().collect()))
        }
        Some(ConditionOneOf::Filter(f)) => Ok(Condition::Filter(filter(f)?)),
        other => serde_json::from_value(condition_json(grpc::Condition { condition_one_of: other })?)
            .map_err(|e| ApiError::BadInput(format!("Invalid filter: {e}"))),
    }
}

/// Whether a field condition sets nothing but its match and its range.
pub fn sets_only_match_or_range(f: &grpc::FieldCondition) -> bool {
    f.geo_bounding_box.is_none()
        && f.geo_radius.is_none()
        && f.geo_polygon.is_none()
        && f.datetime_range.is_none()
        && f.values_count.is_none()
        && f.is_empty.is_none()
        && f.is_null.is_none()
}

/// A field condition of one match (keyword, integer, keywords, integers)
/// or one range of finite bounds, as the engine reads its JSON; None for
/// any other, left to the JSON.
fn field(f: &grpc::FieldCondition) -> Option<FieldCondition> {
    if !sets_only_match_or_range(f) {
        return None;
    }
    let key = f.key.parse().ok()?;
    match (f.r#match.as_ref().and_then(|m| m.match_value.as_ref()), &f.range) {
        (Some(m), None) => {
            let m = match m {
                MatchValue::Keyword(s) => Match::Value(EngineMatchValue { value: ValueVariants::String(s.clone()) }),
                MatchValue::Integer(i) => Match::Value(EngineMatchValue { value: ValueVariants::Integer(*i) }),
                MatchValue::Keywords(r) => {
                    Match::Any(MatchAny { any: AnyVariants::Strings(r.strings.iter().cloned().collect()) })
                }
                // An empty list reads as keywords in JSON.
                MatchValue::Integers(r) if !r.integers.is_empty() => {
                    Match::Any(MatchAny { any: AnyVariants::Integers(r.integers.iter().copied().collect()) })
                }
                _ => return None,
            };
            Some(FieldCondition::new_match(key, m))
        }
        (None, Some(r)) if f.r#match.is_none() => {
            let bound = |b: Option<f64>| match b {
                Some(b) if !b.is_finite() => Err(()),
                b => Ok(b.map(OrderedFloat)),
            };
            let range = Range {
                lt: bound(r.lt).ok()?,
                gt: bound(r.gt).ok()?,
                gte: bound(r.gte).ok()?,
                lte: bound(r.lte).ok()?,
            };
            Some(FieldCondition::new_range(key, range))
        }
        _ => None,
    }
}

/// An optional filter; Qdrant treats an empty one as none.
pub fn filter_opt(f: Option<grpc::Filter>) -> Result<Option<Filter>, ApiError> {
    f.map(filter).transpose()
}

fn filter_json(f: grpc::Filter) -> Result<Json, ApiError> {
    let mut out = Map::new();
    for (name, conds) in [("must", f.must), ("should", f.should), ("must_not", f.must_not)] {
        if !conds.is_empty() {
            out.insert(name.into(), conditions_json(conds)?);
        }
    }
    if let Some(min) = f.min_should {
        out.insert(
            "min_should".into(),
            json!({"conditions": conditions_json(min.conditions)?, "min_count": min.min_count}),
        );
    }
    Ok(Json::Object(out))
}

/// The conditions of a clause; an empty one is left out, as the server
/// leaves it out.
fn conditions_json(conds: Vec<grpc::Condition>) -> Result<Json, ApiError> {
    Ok(Json::Array(
        conds.into_iter().filter(|c| c.condition_one_of.is_some()).map(condition_json).collect::<Result<_, _>>()?,
    ))
}

fn condition_json(c: grpc::Condition) -> Result<Json, ApiError> {
    match c.condition_one_of {
        Some(ConditionOneOf::Field(f)) => field_json(f),
        Some(ConditionOneOf::IsEmpty(c)) => Ok(json!({"is_empty": {"key": c.key}})),
        Some(ConditionOneOf::IsNull(c)) => Ok(json!({"is_null": {"key": c.key}})),
        Some(ConditionOneOf::HasId(c)) => {
            let ids: Vec<Json> = c.has_id.into_iter().map(point_id_json).collect::<Result<_, _>>()?;
            Ok(json!({ "has_id": ids }))
        }
        Some(ConditionOneOf::Filter(f)) => filter_json(f),
        Some(ConditionOneOf::Nested(n)) => {
            let inner = n.filter.map(filter_json).transpose()?.unwrap_or_else(|| json!({}));
            Ok(json!({"nested": {"key": n.key, "filter": inner}}))
        }
        Some(ConditionOneOf::HasVector(h)) => Ok(json!({"has_vector": h.has_vector})),
        None => Ok(json!({})),
    }
}

fn field_json(f: grpc::FieldCondition) -> Result<Json, ApiError> {
    let mut out = Map::new();
    out.insert("key".into(), Json::String(f.key.clone()));
    if let Some(m) = f.r#match.and_then(|m| m.match_value) {
        let m = match m {
            MatchValue::Keyword(s) => json!({ "value": s }),
            MatchValue::Integer(i) => json!({ "value": i }),
            MatchValue::Boolean(b) => json!({ "value": b }),
            MatchValue::Text(s) => json!({ "text": s }),
            MatchValue::Keywords(r) => json!({ "any": r.strings }),
            MatchValue::Integers(r) => json!({ "any": r.integers }),
            MatchValue::ExceptKeywords(r) => json!({ "except": r.strings }),
            MatchValue::ExceptIntegers(r) => json!({ "except": r.integers }),
            MatchValue::Phrase(s) => json!({ "phrase": s }),
            MatchValue::TextAny(s) => json!({ "text_any": s }),
        };
        out.insert("match".into(), m);
    }
    if let Some(r) = f.range {
        let mut range = Map::new();
        for (name, bound) in [("lt", r.lt), ("gt", r.gt), ("gte", r.gte), ("lte", r.lte)] {
            if let Some(b) = bound {
                let n = Number::from_f64(b).ok_or_else(|| {
                    ApiError::BadInput(format!("Range bound {b} of {} is not a finite number", f.key))
                })?;
                range.insert(name.into(), Json::Number(n));
            }
        }
        out.insert("range".into(), Json::Object(range));
    }
    if let Some(c) = f.values_count {
        out.insert("values_count".into(), json!({"lt": c.lt, "gt": c.gt, "gte": c.gte, "lte": c.lte}));
    }
    if let Some(b) = f.is_empty {
        out.insert("is_empty".into(), json!(b));
    }
    if let Some(b) = f.is_null {
        out.insert("is_null".into(), json!(b));
    }
    if f.geo_bounding_box.is_some() || f.geo_radius.is_some() || f.geo_polygon.is_some() {
        return Err(ApiError::unsupported("A geo condition"));
    }
    if f.datetime_range.is_some() {
        return Err(ApiError::unsupported("A datetime range condition"));
    }
    Ok(Json::Object(out))
}

/// Which payload to return; `default` applies when the request says nothing.
pub fn with_payload(sel: Option<grpc::WithPayloadSelector>, default: bool) -> Result<WithPayloadInterface, ApiError> {
    use grpc::with_payload_selector::SelectorOptions;
    let j = match sel.and_then(|s| s.selector_options) {
        None => json!(default),
        Some(SelectorOptions::Enable(b)) => json!(b),
        Some(SelectorOptions::Include(i)) => json!({ "include": i.fields }),
        Some(SelectorOptions::Exclude(e)) => json!({ "exclude": e.fields }),
    };
    serde_json::from_value(j).map_err(|e| ApiError::BadInput(format!("Invalid payload selector: {e}")))
}

/// Which vectors to return; none unless asked for.
pub fn with_vector(sel: Option<grpc::WithVectorsSelector>) -> WithVector {
    use grpc::with_vectors_selector::SelectorOptions;
    match sel.and_then(|s| s.selector_options) {
        None => WithVector::Bool(false),
        Some(SelectorOptions::Enable(b)) => WithVector::Bool(b),
        Some(SelectorOptions::Include(v)) => WithVector::Selector(v.names),
    }
}

/// The vectors of a point to write, as the server's gRPC layer reads them:
/// a point without vectors is refused here, their sizes later
/// ([`check_vectors`]), after strict mode, as on the server.
pub fn vectors(v: Option<grpc::Vectors>) -> Result<VectorStructPersisted, ApiError> {
    use grpc::vectors::VectorsOptions;
    match v.and_then(|v| v.vectors_options) {
        Some(VectorsOptions::Vector(v)) => Ok(VectorStructPersisted::Single(dense(v)?)),
        Some(VectorsOptions::Vectors(named)) => Ok(VectorStructPersisted::Named(
            named
                .vectors
                .into_iter()
                .map(|(name, v)| Ok((name, VectorPersisted::Dense(dense(v)?))))
                .collect::<Result<_, ApiError>>()?,
        )),
        None => Err(ApiError::Invalid("Expected some vectors".into())),
    }
}

/// Checks a point's vectors against the collection's vector sizes by name
/// ("" is the unnamed vector) before anything is written, so that a request
/// with one bad point writes nothing, as on the server.
pub fn check_vectors(v: &VectorStructPersisted, sizes: &HashMap<String, usize>) -> Result<(), ApiError> {
    match v {
        VectorStructPersisted::Single(data) => check_dim(DEFAULT_VECTOR_NAME, data.len(), sizes),
        VectorStructPersisted::Named(named) => named.iter().try_for_each(|(name, v)| match v {
            VectorPersisted::Dense(data) => check_dim(name, data.len(), sizes),
            _ => Err(ApiError::unsupported("A vector other than dense")),
        }),
        _ => Err(ApiError::unsupported("A vector other than dense")),
    }
}

fn dense(v: grpc::Vector) -> Result<Vec<f32>, ApiError> {
    use grpc::vector::Vector;
    #[allow(deprecated)]
    let grpc::Vector { data, indices, vector, .. } = v;
    match vector {
        Some(Vector::Dense(d)) => Ok(d.data),
        Some(Vector::Sparse(_)) => Err(ApiError::unsupported("A sparse vector")),
        Some(Vector::MultiDense(_)) => Err(ApiError::unsupported("A multivector")),
        Some(Vector::Document(_) | Vector::Image(_) | Vector::Object(_)) => Err(ApiError::unsupported("Inference")),
        None if indices.is_some() => Err(ApiError::unsupported("A sparse vector")),
        None => Ok(data),
    }
}

fn check_dim(name: &str, got: usize, sizes: &HashMap<String, usize>) -> Result<(), ApiError> {
    match sizes.get(name) {
        Some(&want) if want == got => Ok(()),
        Some(&want) => Err(ApiError::BadInput(format!("Vector dimension error: expected dim: {want}, got {got}"))),
        None => Err(ApiError::BadInput(format!("Not existing vector name error: {name}"))),
    }
}

/// A point read, for a response.
pub fn record_out(r: Record) -> grpc::RetrievedPoint {
    grpc::RetrievedPoint {
        id: Some(point_id_out(r.id)),
        payload: payload_out(r.payload),
        vectors: r.vector.map(vectors_out),
        shard_key: None,
        order_value: None,
    }
}

fn vectors_out(v: VectorStructInternal) -> grpc::VectorsOutput {
    use grpc::vectors_output::VectorsOptions;
    let opts = match v {
        VectorStructInternal::Single(d) => VectorsOptions::Vector(vector_out(VectorInternal::Dense(d))),
        VectorStructInternal::MultiDense(m) => VectorsOptions::Vector(vector_out(VectorInternal::MultiDense(m))),
        VectorStructInternal::Named(named) => VectorsOptions::Vectors(grpc::NamedVectorsOutput {
            vectors: named.into_iter().map(|(k, v)| (k, vector_out(v))).collect(),
        }),
    };
    grpc::VectorsOutput { vectors_options: Some(opts) }
}

fn vector_out(v: VectorInternal) -> grpc::VectorOutput {
    use grpc::vector_output::Vector;
    let vector = match v {
        VectorInternal::Dense(data) => Vector::Dense(grpc::DenseVector { data }),
        VectorInternal::Sparse(s) => Vector::Sparse(grpc::SparseVector { values: s.values, indices: s.indices }),
        VectorInternal::MultiDense(m) => Vector::MultiDense(grpc::MultiDenseVector {
            vectors: m.into_multi_vectors().into_iter().map(|data| grpc::DenseVector { data }).collect(),
        }),
    };
    #[allow(deprecated)]
    grpc::VectorOutput { data: vec![], indices: None, vectors_count: None, vector: Some(vector) }
}

/// A scored point, for a response.
pub fn scored_out(p: ScoredPoint) -> grpc::ScoredPoint {
    grpc::ScoredPoint {
        id: Some(point_id_out(p.id)),
        payload: payload_out(p.payload),
        score: p.score,
        version: p.version,
        vectors: p.vector.map(vectors_out),
        shard_key: None,
        order_value: None,
    }
}

/// Search parameters of a request.
pub fn search_params(p: Option<grpc::SearchParams>) -> Result<Option<SearchParams>, ApiError> {
    let Some(p) = p else { return Ok(None) };
    if p.quantization.is_some() || p.acorn.is_some() {
        return Err(ApiError::unsupported("Quantization and ACORN search parameters"));
    }
    Ok(Some(SearchParams {
        hnsw_ef: p.hnsw_ef.map(|ef| ef as usize),
        exact: p.exact.unwrap_or(false),
        indexed_only: p.indexed_only.unwrap_or(false),
        ..Default::default()
    }))
}

/// The dense query vector of a nearest-neighbour query, by vector name.
pub fn nearest(input: grpc::VectorInput, using: Option<String>) -> Result<ScoringQuery, ApiError> {
    use grpc::vector_input::Variant;
    let data = match input.variant {
        Some(Variant::Dense(d)) => d.data,
        Some(Variant::Id(_)) => return Err(ApiError::unsupported("A query by the id of a point")),
        Some(Variant::Sparse(_)) => return Err(ApiError::unsupported("A sparse vector")),
        Some(Variant::MultiDense(_)) => return Err(ApiError::unsupported("A multivector")),
        Some(Variant::Document(_) | Variant::Image(_) | Variant::Object(_)) => {
            return Err(ApiError::unsupported("Inference"));
        }
        None => return Err(ApiError::Invalid("VectorInput variant is missing".into())),
    };
    let using = using.filter(|u| u != DEFAULT_VECTOR_NAME);
    Ok(ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery { query: VectorInternal::Dense(data), using })))
}

/// A facet value, for a response.
pub fn facet_value_out(v: FacetValue) -> grpc::FacetValue {
    use grpc::facet_value::Variant;
    let variant = match v {
        FacetValue::Keyword(s) => Variant::StringValue(s),
        FacetValue::Int(i) => Variant::IntegerValue(i),
        FacetValue::Uuid(u) => Variant::StringValue(Uuid::from_u128(u).to_string()),
        FacetValue::Bool(b) => Variant::BoolValue(b),
    };
    grpc::FacetValue { variant: Some(variant) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdrant_client::qdrant::{Condition, FieldCondition, Match, Range};

    fn keyword(key: &str, v: &str) -> Condition {
        Condition {
            condition_one_of: Some(ConditionOneOf::Field(FieldCondition {
                key: key.into(),
                r#match: Some(Match { match_value: Some(MatchValue::Keyword(v.into())) }),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn a_filter_reads_as_the_servers_json() {
        let f = grpc::Filter {
            must: vec![keyword("document_key", "doc-1")],
            must_not: vec![Condition {
                condition_one_of: Some(ConditionOneOf::HasId(grpc::HasIdCondition {
                    has_id: vec![point_id_out(PointId::NumId(7))],
                })),
            }],
            should: vec![Condition {
                condition_one_of: Some(ConditionOneOf::Field(FieldCondition {
                    key: "version".into(),
                    range: Some(Range { lt: Some(3.0), ..Default::default() }),
                    ..Default::default()
                })),
            }],
            min_should: None,
        };
        let got = filter_json(f.clone()).unwrap();
        let want = json!({
            "must": [{"key": "document_key", "match": {"value": "doc-1"}}],
            "should": [{"key": "version", "range": {"lt": 3.0}}],
            "must_not": [{"has_id": [7]}],
        });
        assert_eq!(got, want);
        filter(f).expect("the engine parses it");
    }

    /// The filters the projector sends, and a condition of every other
    /// kind: built directly, they are the filters the engine reads from
    /// their JSON.
    #[test]
    fn a_filter_built_directly_is_the_one_its_json_gives() {
        let f = |c: ConditionOneOf| Condition { condition_one_of: Some(c) };
        let field = |key: &str, fill: fn(&mut FieldCondition)| {
            let mut c = FieldCondition { key: key.into(), ..Default::default() };
            fill(&mut c);
            f(ConditionOneOf::Field(c))
        };
        let uuid = "6f1c2b7e-3d4a-4e5f-9a8b-1c2d3e4f5a6b";
        let replaceable = grpc::Filter::should([
            Condition::is_empty("source_offset"),
            grpc::Filter::must_not([keyword("source_topic", "documents")]).into(),
            grpc::Filter::must_not([Condition::matches("source_partition", 1)]).into(),
            Condition::range("source_offset", Range { lte: Some(41.0), ..Default::default() }),
            grpc::Filter::must_not([Condition::is_empty("source_topic_id"), keyword("source_topic_id", uuid)]).into(),
        ]);
        let update_filter =
            grpc::Filter::should([
                grpc::Filter::must([keyword("document_key", "d1"), replaceable.clone().into()]).into()
            ]);
        let mut obsolete =
            grpc::Filter::must([keyword("document_key", "d1"), Condition::matches("version", 2), replaceable.into()]);
        obsolete.must_not = vec![Condition::has_id([point_id_out(PointId::NumId(7)), grpc::PointId::from(uuid)])];
        let delete = grpc::Filter::should([
            obsolete.into(),
            grpc::Filter::must([
                Condition::matches("document_key", vec!["d1".to_string(), "d2".to_string()]),
                Condition::range("version", Range { lt: Some(2.0), gte: Some(0.5), ..Default::default() }),
            ])
            .into(),
        ]);
        let cases = [
            update_filter,
            delete,
            grpc::Filter::must([
                Condition::matches("n", Vec::<i64>::new()),
                Condition::matches("n", vec![3i64, 1, 3]),
                Condition::matches("k", Vec::<String>::new()),
                Condition::matches("b", true),
            ]),
            grpc::Filter { must: vec![Condition { condition_one_of: None }], ..Default::default() },
            grpc::Filter::min_should(1, [keyword("a", "x"), keyword("b", "y")]),
            grpc::Filter::should([
                Condition::matches_text("text", "some words"),
                Condition::values_count("tags", grpc::ValuesCount { gte: Some(2), ..Default::default() }),
                Condition::is_null("gone"),
                grpc::HasVectorCondition { has_vector: String::new() }.into(),
                Condition::nested("offers", grpc::Filter::must([keyword("sku", "x")])),
                field("both", |c| {
                    c.r#match = Some(grpc::Match { match_value: Some(MatchValue::Keyword("x".into())) });
                    c.range = Some(Range { lt: Some(1.0), ..Default::default() });
                }),
                field("a.b[].c", |c| c.range = Some(Range { gt: Some(-1.5), ..Default::default() })),
            ]),
            grpc::Filter::must([keyword("bad[", "x")]),
            grpc::Filter::must([Condition::is_empty("")]),
            grpc::Filter::must([Condition::range("r", Range { lt: Some(f64::INFINITY), ..Default::default() })]),
            grpc::Filter::must([Condition::has_id([grpc::PointId::from("not-a-uuid")])]),
            grpc::Filter::default(),
        ];
        for case in cases {
            assert_eq!(filter(case.clone()), filter_by_json(case.clone()), "for {case:?}");
        }
    }

    #[test]
    fn an_unparsable_uuid_is_wrong_input() {
        let id = grpc::PointId { point_id_options: Some(grpc::point_id::PointIdOptions::Uuid("nope".into())) };
        let err = point_id(Some(id)).unwrap_err();
        assert_eq!(err, ApiError::Invalid("Unable to parse UUID: nope".into()));
    }

    #[test]
    fn payload_round_trips() {
        let mut fields = HashMap::new();
        fields.insert("i".to_string(), json_value(json!(3)));
        fields.insert("d".to_string(), json_value(json!(2.5)));
        fields.insert("s".to_string(), json_value(json!({"a": [1, "x", null, true]})));
        let p = payload(fields.clone()).unwrap();
        assert_eq!(payload_out(Some(p)), fields);
    }

    #[test]
    fn a_non_finite_double_is_refused() {
        let v = grpc::Value { kind: Some(Kind::DoubleValue(f64::NAN)) };
        assert!(matches!(value_json(v), Err(ApiError::BadInput(_))));
    }

    #[test]
    fn a_vector_of_the_wrong_size_is_refused() {
        let sizes = HashMap::from([(String::new(), 4)]);
        #[allow(deprecated)]
        let v = grpc::Vectors {
            vectors_options: Some(grpc::vectors::VectorsOptions::Vector(grpc::Vector {
                data: vec![],
                indices: None,
                vectors_count: None,
                vector: Some(grpc::vector::Vector::Dense(grpc::DenseVector { data: vec![1.0, 2.0, 3.0] })),
            })),
        };
        let err = check_vectors(&vectors(Some(v)).unwrap(), &sizes).unwrap_err();
        assert_eq!(err, ApiError::BadInput("Vector dimension error: expected dim: 4, got 3".into()));
    }
}
