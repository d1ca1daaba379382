//! The Qdrant server's validation of a gRPC request, done before anything
//! else, with its status and message: `INVALID_ARGUMENT` "Validation error
//! in body: [field: what is wrong; ...]".
//!
//! The rules are those the server declares for the messages (its
//! `lib/api/build.rs`, `lib/api/src/grpc/validate.rs` and
//! `common::validation`, as of v1.17.1), for the requests this server takes;
//! the wording of each message is the server's `describe_error`.

use qdrant_client::qdrant as grpc;
use tonic::Status;

use crate::convert::sets_only_match_or_range;

/// The problems found in one request, by field, in the order checked.
#[derive(Default)]
pub struct Check {
    errors: Vec<(String, String)>,
}

impl Check {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push((field.into(), message.into()));
    }

    /// A collection name of a request on an existing collection: 1 to 255
    /// bytes, no `/` or NUL (the server's "legacy" rule, which still takes
    /// the names older versions allowed).
    pub fn collection(&mut self, field: &str, name: &str) -> &mut Self {
        self.name(field, name, &['/', '\0'])
    }

    /// The name of a collection to create: the legacy rule and none of the
    /// characters a file system on any platform refuses.
    pub fn new_collection(&mut self, field: &str, name: &str) -> &mut Self {
        self.name(field, name, &['<', '>', ':', '"', '/', '\\', '|', '?', '*', '\0', '\u{1F}'])
    }

    fn name(&mut self, field: &str, name: &str, forbidden: &[char]) -> &mut Self {
        if name.is_empty() || name.chars().count() > 255 {
            self.add(field, format!("value {} invalid, must be from 1 to 255 characters", json_str(name)));
        }
        if let Some(c) = forbidden.iter().find(|c| name.contains(**c)) {
            self.add(field, format!("collection name cannot contain \"{c}\" char"));
        }
        self
    }

    /// A text that must not be empty (a field name, a facet key).
    pub fn not_empty(&mut self, field: &str, value: &str) -> &mut Self {
        if value.is_empty() {
            self.add(field, format!("value {} invalid, must be at least 1 characters", json_str(value)));
        }
        self
    }

    /// A number, when given, of at least `min`.
    pub fn at_least(&mut self, field: &str, value: Option<u64>, min: u64) -> &mut Self {
        if let Some(v) = value.filter(|v| *v < min) {
            self.add(field, format!("value {v} invalid, must be {min} or larger"));
        }
        self
    }

    /// A number, when given, from `min` to `max`.
    pub fn between(&mut self, field: &str, value: Option<f64>, min: f64, max: f64) -> &mut Self {
        if let Some(v) = value.filter(|v| !(min..=max).contains(v)) {
            self.add(field, format!("value {} invalid, must be from {} to {}", num(v), num(min), num(max)));
        }
        self
    }

    /// A filter: every field condition names at least one condition, in
    /// every clause and nested filter.
    pub fn filter(&mut self, field: &str, filter: Option<&grpc::Filter>) -> &mut Self {
        let Some(f) = filter else { return self };
        for (clause, conds) in [("should", &f.should), ("must", &f.must), ("must_not", &f.must_not)] {
            self.conditions(&format!("{field}.{clause}"), conds);
        }
        if let Some(min) = &f.min_should {
            self.conditions(&format!("{field}.min_should.conditions"), &min.conditions);
        }
        self
    }

    fn conditions(&mut self, field: &str, conds: &[grpc::Condition]) {
        use grpc::condition::ConditionOneOf;
        for (i, c) in conds.iter().enumerate() {
            let at = format!("{field}[{i}].condition_one_of");
            match &c.condition_one_of {
                Some(ConditionOneOf::Field(f)) => {
                    let none = f.r#match.is_none() && f.range.is_none() && sets_only_match_or_range(f);
                    if none {
                        self.add(
                            format!("{at}.match"),
                            "Validation error: At least one field condition must be specified [{}]",
                        );
                    }
                }
                Some(ConditionOneOf::Filter(f)) => {
                    self.filter(&at, Some(f));
                }
                Some(ConditionOneOf::Nested(n)) => {
                    self.filter(&format!("{at}.filter"), n.filter.as_ref());
                }
                _ => {}
            }
        }
    }

    /// The vector parameters of a collection to create.
    pub fn vectors_config(&mut self, field: &str, config: Option<&grpc::VectorsConfig>) -> &mut Self {
        use grpc::vectors_config::Config;
        match config.and_then(|c| c.config.as_ref()) {
            Some(Config::Params(p)) => {
                self.between(&format!("{field}.config.size"), Some(p.size as f64), 1.0, 65536.0);
            }
            Some(Config::ParamsMap(m)) => {
                // The server reports the first bad vector of the map only.
                if let Some(p) = m.map.values().find(|p| !(1..=65536).contains(&p.size)) {
                    self.between(&format!("{field}.config.map[].size"), Some(p.size as f64), 1.0, 65536.0);
                }
            }
            None => {}
        }
        self
    }

    /// HNSW, WAL and optimizer settings of a create or an update.
    pub fn settings(
        &mut self,
        hnsw: Option<&grpc::HnswConfigDiff>,
        wal: Option<&grpc::WalConfigDiff>,
        optimizers: Option<&grpc::OptimizersConfigDiff>,
    ) -> &mut Self {
        if let Some(h) = hnsw {
            self.at_least("hnsw_config.ef_construct", h.ef_construct, 4);
        }
        if let Some(w) = wal {
            self.at_least("wal_config.wal_capacity_mb", w.wal_capacity_mb, 1);
            self.at_least("wal_config.wal_retain_closed", w.wal_retain_closed, 1);
        }
        if let Some(o) = optimizers {
            self.between("optimizers_config.deleted_threshold", o.deleted_threshold, 0.0, 1.0);
            self.at_least("optimizers_config.vacuum_min_vector_number", o.vacuum_min_vector_number, 100);
            self.at_least("optimizers_config.max_segment_size", o.max_segment_size, 1);
        }
        self
    }

    /// The strict-mode settings of a create or an update.
    pub fn strict_mode(&mut self, strict: Option<&grpc::StrictModeConfig>) -> &mut Self {
        let Some(s) = strict else { return self };
        self.at_least("strict_mode_config.max_query_limit", s.max_query_limit.map(u64::from), 1)
            .at_least("strict_mode_config.max_timeout", s.max_timeout.map(u64::from), 1)
            .at_least("strict_mode_config.max_points_count", s.max_points_count, 1)
            .at_least("strict_mode_config.read_rate_limit", s.read_rate_limit.map(u64::from), 1)
            .at_least("strict_mode_config.write_rate_limit", s.write_rate_limit.map(u64::from), 1)
    }

    /// The request's verdict, as the server words it.
    #[allow(clippy::result_large_err, reason = "a tonic Status, as every handler returns")]
    pub fn done(&mut self) -> Result<(), Status> {
        if self.errors.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = self.errors.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        Err(Status::invalid_argument(format!("Validation error in body: [{}]", list.join("; "))))
    }
}

/// A text as the server's messages quote it: as JSON.
fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// A number as JSON prints it: `1.0` for a float, as the server's
/// parameters are.
fn num(v: f64) -> String {
    serde_json::json!(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_the_servers() {
        let st = Check::default().collection("collection_name", "c").at_least("limit", Some(0), 1).done().unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument);
        assert_eq!(st.message(), "Validation error in body: [limit: value 0 invalid, must be 1 or larger]");
        let st = Check::default().new_collection("collection_name", "a/b").done().unwrap_err();
        assert_eq!(
            st.message(),
            "Validation error in body: [collection_name: collection name cannot contain \"/\" char]"
        );
        let st = Check::default().collection("collection_name", "").done().unwrap_err();
        assert_eq!(
            st.message(),
            "Validation error in body: [collection_name: value \"\" invalid, must be from 1 to 255 characters]"
        );
        assert!(Check::default().collection("collection_name", "a:b").at_least("limit", None, 1).done().is_ok());
    }

    #[test]
    fn an_empty_field_condition_is_refused_and_an_empty_condition_is_not() {
        let f = grpc::Filter {
            must: vec![
                grpc::Condition { condition_one_of: None },
                grpc::Condition {
                    condition_one_of: Some(grpc::condition::ConditionOneOf::Field(grpc::FieldCondition {
                        key: "k".into(),
                        ..Default::default()
                    })),
                },
            ],
            ..Default::default()
        };
        let st = Check::default().filter("filter", Some(&f)).done().unwrap_err();
        assert_eq!(
            st.message(),
            "Validation error in body: [filter.must[1].condition_one_of.match: Validation error: At least one field condition must be specified [{}]]"
        );
    }
}
