//! What an operator does to locks from outside their holders: look at a key, end a hold.

pub(crate) mod force_release;
pub(crate) mod inspect;
#[cfg(feature = "redlock")]
pub(crate) mod majority;
