//! The bench's error type.

/// The bench's error type: anything, with its message.
pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
