//! Error types the attribute checks for `From<LockError>`: written out, through an alias
//! (with `impl Trait` beside it), a type parameter with the bound, and an `impl Trait`.
#![deny(warnings)]

use std::fmt::{Debug, Display};

use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

pub type AppResult<T> = Result<T, AppError>;

#[distributed_lock(key = "a:<id>")]
pub async fn written(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>")]
pub async fn alias(id: u64) -> AppResult<u64> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>")]
pub async fn alias_with_impl(id: u64) -> AppResult<impl Display + Send> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>")]
pub async fn generic<E: From<LockError> + Send>(id: u64) -> Result<u64, E> {
    Ok(id)
}

#[distributed_lock(key = "e:<id>")]
pub async fn opaque_error(id: u64) -> Result<u64, impl Debug + From<LockError> + Send> {
    if id == 0 {
        return Err(AppError::from(LockError::InvalidKey {
            key: String::new(),
            reason: String::new(),
        }));
    }
    Ok(id)
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    assert_send(&written(1));
    assert_send(&alias(1));
    assert_send(&alias_with_impl(1));
    assert_send(&generic::<LockError>(1));
    assert_send(&opaque_error(1));
}
