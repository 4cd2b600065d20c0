//! The Lua scripts, each kept once as a `.lua` file and run by EVALSHA.

use once_cell::sync::Lazy;
use redis::Script;

/// `SET NX PX` with a token (and a fence with a counter key); `{1, fence}` or `{0, pttl}`.
pub(crate) static ACQUIRE: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("lua/acquire.lua")));

/// Compare-and-delete; returns 1 released, 0 gone, -1 another owner.
pub(crate) static RELEASE: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("lua/release.lua")));

/// Compare-and-PEXPIRE; returns 1 renewed, 0 token gone.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| Script::new(include_str!("lua/renew.lua")));
