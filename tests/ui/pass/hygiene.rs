//! The generated code names nothing the caller can shadow.
#![deny(warnings)]
#![allow(non_camel_case_types, dead_code)]

mod core {}
mod std {}

struct Result;
struct Option;
struct String;
struct KeyBuilder;
struct __lock_key;

mod inner {
    // The annotated function's own scope: `lock_runtime` is something else entirely, and
    // `core`, `std` and the prelude's types are shadowed here, where the expansion lands.
    use ::std as lock_runtime;

    mod core {}
    mod std {}

    struct Result;
    struct Option;
    struct String;
    struct Box;
    struct KeyBuilder;

    #[::lock_runtime::distributed_lock(key = "hygiene:<id>", ttl = "1s")]
    pub async fn locked(id: u32) -> ::core::result::Result<u32, ::lock_runtime::LockError> {
        let __lock_key = id; // the user's name, not the attribute's
        let _ = lock_runtime::mem::size_of::<u8>();
        Ok(__lock_key)
    }

    struct Duration;

    // A `Duration` expression: the attribute's own names (`__lock_ttl`) do not shadow
    // the user's, and its type is named by an absolute path.
    #[::lock_runtime::distributed_lock(
        key = "hygiene:<id>",
        ttl = __lock_ttl,
        wait = ::core::time::Duration::from_millis(__lock_wait)
    )]
    pub async fn configured(
        id: u32,
        __lock_ttl: ::core::time::Duration,
        __lock_wait: u64,
    ) -> ::core::result::Result<u32, ::lock_runtime::LockError> {
        Ok(id)
    }
}

fn main() {
    let _ = inner::locked(1);
    let _ = inner::configured(1, ::core::time::Duration::from_secs(1), 10);
}
