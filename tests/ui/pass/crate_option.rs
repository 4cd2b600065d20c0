//! `crate = "..."` sends every generated path through the named crate: here a facade
//! module whose `run` records that it was called (and runs the body without Redis), so the
//! program fails if the expansion still went through `::lock_runtime`.
#![deny(warnings)]

use std::sync::atomic::{AtomicBool, Ordering};

use lock_runtime::LockError;

static RAN_THROUGH_FACADE: AtomicBool = AtomicBool::new(false);

/// What a crate that renamed or re-exports `lock_runtime` looks like to the attribute.
pub mod facade {
    pub use lock_runtime::distributed_lock;

    pub mod __private {
        pub use lock_runtime::__private::*;

        /// Stands in for the runtime's `run`: no lock, just the body.
        pub async fn run<C, F, T>(
            key: Result<String, lock_runtime::LockError>,
            _failure: C,
            options: lock_runtime::__private::Options,
            body: F,
        ) -> Result<T, C::Error>
        where
            C: lock_runtime::__private::FailureType,
            F: std::future::Future<Output = Result<T, C::Error>>,
        {
            assert_eq!(key.ok().as_deref(), Some("facade:7"));
            // Only the written option differs from the runtime's defaults.
            let mut expected = lock_runtime::LockOptions::default();
            expected.ttl = std::time::Duration::from_secs(5);
            assert_eq!(options.options(), &expected);
            super::super::RAN_THROUGH_FACADE.store(true, std::sync::atomic::Ordering::SeqCst);
            body.await
        }
    }
}

#[facade::distributed_lock(key = "facade:<id>", ttl = "5s", crate = "crate::facade")]
async fn through_facade(id: u64) -> Result<u64, LockError> {
    Ok(id * 2)
}

mod renamed {
    // A path that starts at an extern crate name, as with a renamed dependency
    // (`locks = { package = "lock-runtime", .. }`).
    #[lock_runtime::distributed_lock(key = "renamed", crate = "::lock_runtime")]
    pub async fn absolute() -> Result<(), lock_runtime::LockError> {
        Ok(())
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let doubled = runtime.block_on(through_facade(7)).expect("body ran");
    assert_eq!(doubled, 14);
    assert!(RAN_THROUGH_FACADE.load(Ordering::SeqCst), "the expansion ignored `crate`");
    let _ = renamed::absolute();
}
