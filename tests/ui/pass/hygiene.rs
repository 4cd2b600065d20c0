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
}

fn main() {
    let _ = inner::locked(1);
}
