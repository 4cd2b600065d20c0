//! A return type that mentions `impl Trait`, and inner attributes at the top of the body.
#![deny(warnings)]

use std::fmt::Display;

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "label:<id>")]
pub async fn label(id: u64) -> Result<impl Display + Send, LockError> {
    if id == 0 {
        return Ok(String::from("zero"));
    }
    Ok(format!("item {id}"))
}

#[distributed_lock(key = "numbers")]
pub async fn numbers() -> Result<Vec<impl Display + Send>, LockError> {
    Ok(vec![1, 2, 3])
}

/// An inner attribute applies to the whole body, as on any function.
#[distributed_lock(key = "quiet:<id>")]
pub async fn quiet(id: u64) -> Result<u64, LockError> {
    //! An inner doc comment documents the function, as without the attribute.
    #![allow(unused_variables)]
    let unused = 1;
    Ok(id)
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    assert_send(&label(1));
    assert_send(&numbers());
    assert_send(&quiet(1));
}
