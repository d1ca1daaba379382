//! Errors as the Qdrant server reports them: the same gRPC codes and the same
//! message prefixes ("Wrong input: ", "Not found: ", "Bad request: "), since
//! clients, the projector among them, decide what to do by both.

use qdrant_edge::OperationError;
use tonic::{Code, Status};

/// An error of an API call, by the kind the Qdrant server gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// The request's data cannot be taken: InvalidArgument, "Wrong input: ".
    BadInput(String),
    /// A limit of the collection (strict mode): InvalidArgument, "Bad request: ".
    BadRequest(String),
    NotFound(String),
    AlreadyExists(String),
    /// A request the server's gRPC layer refuses as it stands, with its
    /// message as is: InvalidArgument ("Unable to parse UUID: x").
    Invalid(String),
    /// The engine ran out of the time the request gave it: DeadlineExceeded.
    Timeout(String),
    /// A part of Qdrant's API that this server does not serve.
    Unimplemented(String),
    Internal(String),
}

impl ApiError {
    pub fn collection_not_found(name: &str) -> Self {
        Self::NotFound(format!("Collection `{name}` doesn't exist!"))
    }

    /// A feature the request asks for that this server leaves out; the
    /// message says where to read what it serves.
    pub fn unsupported(what: impl std::fmt::Display) -> Self {
        Self::Unimplemented(format!("{what} is not served by qdrant-engine (see qdrant-engine/README.md)"))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadInput(d) | Self::AlreadyExists(d) => write!(f, "Wrong input: {d}"),
            Self::BadRequest(d) => write!(f, "Bad request: {d}"),
            Self::NotFound(d) => write!(f, "Not found: {d}"),
            Self::Unimplemented(d) | Self::Invalid(d) => write!(f, "{d}"),
            Self::Timeout(d) => write!(f, "Timeout error: {d}"),
            Self::Internal(d) => write!(f, "Service internal error: {d}"),
        }
    }
}

impl From<ApiError> for Status {
    fn from(err: ApiError) -> Self {
        let code = match &err {
            ApiError::BadInput(_) | ApiError::BadRequest(_) | ApiError::Invalid(_) => Code::InvalidArgument,
            ApiError::Timeout(_) => Code::DeadlineExceeded,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::AlreadyExists(_) => Code::AlreadyExists,
            ApiError::Unimplemented(_) => Code::Unimplemented,
            ApiError::Internal(_) => Code::Internal,
        };
        Status::new(code, err.to_string())
    }
}

/// The engine's errors classified as the Qdrant server's collection layer
/// classifies them: the caller's data, or the server's own trouble.
impl From<OperationError> for ApiError {
    fn from(err: OperationError) -> Self {
        match err {
            OperationError::WrongVectorDimension { .. }
            | OperationError::MalformedVectorBlob { .. }
            | OperationError::VectorNameNotExists { .. }
            | OperationError::TypeError { .. }
            | OperationError::TypeInferenceError { .. }
            | OperationError::ValidationError { .. }
            | OperationError::MissingRangeIndexForOrderBy { .. }
            | OperationError::MissingMapIndexForFacet { .. }
            | OperationError::VariableTypeError { .. }
            | OperationError::NonFiniteNumber { .. } => Self::BadInput(err.to_string()),
            OperationError::WrongSparse => {
                Self::BadInput("Conversion between sparse and regular vectors failed".into())
            }
            OperationError::WrongMulti => Self::BadInput("Conversion between multi and regular vectors failed".into()),
            OperationError::PointIdError { missed_point_id } => {
                Self::NotFound(format!("No point with id {missed_point_id} found"))
            }
            OperationError::Timeout { description } => Self::Timeout(description),
            OperationError::ServiceError { description, .. } => Self::Internal(description),
            other => Self::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_the_servers() {
        let cases = [
            (ApiError::collection_not_found("c"), Code::NotFound, "Not found: Collection `c` doesn't exist!"),
            (
                ApiError::BadInput("Vector dimension error: expected dim: 4, got 3".into()),
                Code::InvalidArgument,
                "Wrong input: Vector dimension error: expected dim: 4, got 3",
            ),
            (
                ApiError::BadRequest("Limit exceeded 3 > 2 for \"upsert limit\"".into()),
                Code::InvalidArgument,
                "Bad request: Limit exceeded 3 > 2 for \"upsert limit\"",
            ),
            (
                ApiError::from(OperationError::Timeout { description: "search".into() }),
                Code::DeadlineExceeded,
                "Timeout error: search",
            ),
            (
                ApiError::AlreadyExists("Collection `c` already exists!".into()),
                Code::AlreadyExists,
                "Wrong input: Collection `c` already exists!",
            ),
        ];
        for (err, code, message) in cases {
            let st = Status::from(err);
            assert_eq!((st.code(), st.message()), (code, message));
        }
    }

    #[test]
    fn a_wrong_dimension_is_the_callers_fault() {
        let err = ApiError::from(OperationError::WrongVectorDimension { expected_dim: 4, received_dim: 3 });
        assert_eq!(err, ApiError::BadInput("Vector dimension error: expected dim: 4, got 3".into()));
    }
}
