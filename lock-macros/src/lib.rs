//! The `#[distributed_lock]` attribute. Use it through the `lock-runtime` crate, which
//! re-exports it and holds everything the expanded code calls.
//!
//! The crate works in three passes, one module each:
//! - `attr` parses the attribute's options into a plain struct and checks them
//!   (durations, repeated or unknown options);
//! - `template` parses the key template and resolves every placeholder against the
//!   function's arguments;
//! - `expand` only generates code.
//!
//! Every error is a `syn::Error` spanned at the offending token; all errors of one
//! attribute are reported together, and the original function is emitted beside them so
//! that no follow-on errors appear.

mod attr;
mod expand;
mod signature;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` under a distributed lock on Redis.
///
/// ```ignore
/// use lock_runtime::{distributed_lock, LockError};
///
/// #[distributed_lock(key = "stock:<id>", ttl = "10s", wait = "5s")]
/// async fn buy(id: u64) -> Result<(), LockError> {
///     // at most one caller per `id` runs this at a time, across every process
///     Ok(())
/// }
/// ```
///
/// Options (all but `key` optional):
///
/// | option | meaning | default |
/// |---|---|---|
/// | `key = "stock:<id>"` | the lock key; `<arg>`, `<arg.field>` and `<self.field>` render an argument (or a field of it: fields, not methods) with `Display`; braces are literal (`"{app}:job:<id>"` is a cluster hash tag), and `{id}` naming an argument is an error | required |
/// | `key = ["account:<from>", "account:<to>"]` | several keys, all or none: each template as above, taken in sorted order (so callers naming them in any order never deadlock), `wait` bounding the whole; `lock_runtime::MultiLock` | |
/// | `ttl = "10s"` | the lease: a duration as `humantime` reads it (`"250ms"`, `"1.5s"`, `"1m30s"`), or a `Duration` expression | `"30s"`, or the client's `Config::default_ttl` |
/// | `wait = "5s"` | how long to wait for a held lock; `"0s"` tries once; a string or a `Duration` expression | `"10s"`, or the client's `Config::default_wait` |
/// | `watchdog = false` | no renewal: the lease ends after `ttl` | `true` |
/// | `on_lost = "continue"` | let the body finish when the lease is lost | `"cancel"` |
/// | `fencing = true` | issue a fencing token, read with `current_lock()` | `false` |
/// | `hold_at_least = "30s"` | keep the key this long after acquiring however soon the body ends, so a scheduled job's late replica skips the tick too (`Lock::hold_at_least`); at most `ttl` (without a written `ttl`, checked when the lock is taken against the ttl in force), one key only | none |
/// | `max_hold = "5m"` | the longest a hold may last: when it is reached the watchdog stops renewing, the body is stopped with `LockError::Lost` (`LostCause::MaxHold`), the lock is released at once and a WARN names the key and token; a string or a `Duration` expression, over zero, under `ttl` with `watchdog = false`, at least `hold_at_least` | unbounded, or the client's `Config::default_max_hold` |
/// | `permits = 3` | a semaphore instead of a lock: at most this many bodies run at once per key, each holding a permit with its own lease (`Semaphore`); from 1 to 1000000, one key only, no fencing or `hold_at_least` | none (a lock) |
/// | `mode = "read"` / `"write"` | a read-write lock (`lock_runtime::RwLock`): many readers or one writer; a reader arriving after a queued writer waits behind it; one key, no `hold_at_least`, fencing for writers only | a plain lock |
/// | `client = state.locks` | the `LockClient` the call goes through instead of the global one: an expression that may name the arguments (`self.locks`, `LOCKS.get()`), evaluated on each call, borrowed (it moves nothing); a `LockClient`, `&LockClient`, `Arc<LockClient>` or `Option<&LockClient>` (`None` fails the call with `LockError::Config`) | the global client |
/// | `crate = "locks"` | the path of the `lock-runtime` crate, when it is renamed in `Cargo.toml` or re-exported | `"::lock_runtime"` |
///
/// With several keys, every template is checked as a single one is, and an empty array, a
/// template given twice or an element that is not a string literal is a compile error. The
/// other options apply to each key; with `on_lost = "cancel"` the loss of any key stops the
/// body with `LockError::Lost` for that key. Inside the body every key counts as held (a
/// nested lock on one is reentrant); `current_lock()` is the last key in sorted order and
/// `current_locks()` lists them all. Two templates that render the same key lock it once.
///
/// ```ignore
/// #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "10s")]
/// async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), LockError> {
///     // both accounts are locked here
///     Ok(())
/// }
/// ```
///
/// An option left out keeps the runtime's default (`LockOptions::default()`, or for `ttl`
/// and `wait` the client's `Config::default_ttl` and `Config::default_wait`); a `ttl`
/// over `lock_runtime::MAX_TTL` is a compile error.
///
/// `client = ...` serves services that inject their client (an axum `State`) and tests:
///
/// ```ignore
/// struct AppState { locks: LockClient }
///
/// #[distributed_lock(key = "order:<id>", client = state.locks)]
/// async fn place_order(state: &AppState, id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// A placeholder reads fields and calls no methods: `<name.len>` with `name: &str` (an
/// argument declared as a type without fields) is the attribute's error. Where the macro
/// cannot see the type (`<user.name.len>`), rustc reports the method at the template as
/// "method, not a field" (its suggestion to add `()` to the template does not apply);
/// pass the method's value as an argument instead.
///
/// A `ttl` or `wait` from configuration is an expression of type `Duration` instead of a
/// string (`ttl = settings.ttl`, `wait = Duration::from_millis(ms)`; it may name the
/// arguments). It is evaluated on each call, after the key is rendered, and checked then,
/// as `Lock::ttl` is: a ttl under 1 ms or over `MAX_TTL` fails the call with
/// `LockError::Config` before any Redis traffic.
///
/// The function must be `async` and return a `Result<T, E>` with `E: From<LockError>`.
/// Inner attributes at the top of the body (`#![allow(..)]`) apply to the whole function.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
