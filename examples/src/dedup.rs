//! The daily gift: each user may claim one gift a day, however many clicks arrive at once.
//!
//! A claim checks whether today's gift key exists for the user, spends a moment "issuing"
//! the gift, then writes the key and credits the user's wallet: separate commands, so two
//! claims that both find no key would both pay out. [`claim_daily_gift`] runs the claim
//! under `#[distributed_lock(key = "sign-in:<user.id>", wait = "0s")]`: a claim that finds
//! another claim of the same user in progress is refused at once with
//! [`LockError::Busy`], and a claim after it finds the key and gets
//! [`GiftError::AlreadyClaimed`]. [`claim_daily_gift_without_lock`] is the same claim
//! without the lock: concurrent clicks pay out several times.
//!
//! Redis keys: `gift:<day>:<user id>` (today's claim, expires after two days) and
//! `wallet:<user id>` (the coins paid out). User ids are used verbatim, so use plain ids
//! (letters, digits, `-`, `_`, `.`).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockError, distributed_lock};

use crate::store::Store;

/// How long issuing a gift takes, between finding no gift key and writing it: the
/// non-atomic gap that concurrent claims of one user fall into.
pub const ISSUE_TIME: Duration = Duration::from_millis(50);

/// The coins a daily gift pays into the user's wallet.
pub const GIFT_COINS: i64 = 100;

/// How long a day's gift key is kept (it only matters on its own day).
const GIFT_KEY_LIFETIME: Duration = Duration::from_secs(2 * 24 * 3600);

/// A signed-in user.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    /// The user's id: the lock key is `sign-in:<id>`.
    pub id: String,
}

impl User {
    /// The user with this id.
    pub fn new(id: impl Into<String>) -> User {
        User { id: id.into() }
    }
}

/// A gift paid out to a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gift {
    /// Who got it.
    pub user_id: String,
    /// The day it was claimed for (days since the Unix epoch, UTC).
    pub day: u64,
    /// The coins credited to the user's wallet.
    pub coins: i64,
}

/// Why a claim got no gift.
#[derive(Debug)]
pub enum GiftError {
    /// The lock refused the claim: [`LockError::Busy`] when another claim of the same user
    /// is in progress; other variants when Redis failed.
    Lock(LockError),
    /// Reading or writing the gift data failed.
    Store(redis::RedisError),
    /// The user already has today's gift.
    AlreadyClaimed {
        /// The user's id.
        user_id: String,
    },
}

impl GiftError {
    /// Whether the claim was refused because another claim of the user was in progress.
    pub fn is_busy(&self) -> bool {
        matches!(self, GiftError::Lock(LockError::Busy { .. }))
    }
}

impl From<LockError> for GiftError {
    fn from(err: LockError) -> Self {
        GiftError::Lock(err)
    }
}

impl From<redis::RedisError> for GiftError {
    fn from(err: redis::RedisError) -> Self {
        GiftError::Store(err)
    }
}

impl fmt::Display for GiftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiftError::Lock(err) => write!(f, "{err}"),
            GiftError::Store(err) => write!(f, "gift store: {err}"),
            GiftError::AlreadyClaimed { user_id } => {
                write!(f, "user {user_id} already claimed today's gift")
            }
        }
    }
}

impl std::error::Error for GiftError {}

/// Today, as days since the Unix epoch (UTC).
pub fn today() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() / 86_400)
}

/// The Redis key that records `user_id`'s claim on `day`.
pub fn gift_key(user_id: &str, day: u64) -> String {
    format!("gift:{day}:{user_id}")
}

/// The Redis key holding `user_id`'s coins.
pub fn wallet_key(user_id: &str) -> String {
    format!("wallet:{user_id}")
}

/// Claims today's gift for `user`: at most one claim per user runs at a time, in every
/// process that shares the Redis; a concurrent claim is refused at once with
/// [`LockError::Busy`] (as [`GiftError::Lock`]).
#[distributed_lock(key = "sign-in:<user.id>", ttl = "5s", wait = "0s")]
pub async fn claim_daily_gift(store: &Store, user: &User) -> Result<Gift, GiftError> {
    claim(store, user).await
}

/// The same claim with no lock: concurrent claims of one user all find no gift key and
/// all pay out.
pub async fn claim_daily_gift_without_lock(store: &Store, user: &User) -> Result<Gift, GiftError> {
    claim(store, user).await
}

/// Check, issue, record: correct only when no other claim of `user` runs meanwhile.
async fn claim(store: &Store, user: &User) -> Result<Gift, GiftError> {
    let day = today();
    let key = gift_key(&user.id, day);
    let claimed: bool = store.query(redis::cmd("EXISTS").arg(&key)).await?;
    if claimed {
        return Err(GiftError::AlreadyClaimed {
            user_id: user.id.clone(),
        });
    }
    tokio::time::sleep(ISSUE_TIME).await;
    store
        .query::<()>(
            redis::cmd("SET")
                .arg(&key)
                .arg(GIFT_COINS)
                .arg("EX")
                .arg(GIFT_KEY_LIFETIME.as_secs()),
        )
        .await?;
    store
        .query::<i64>(
            redis::cmd("INCRBY")
                .arg(wallet_key(&user.id))
                .arg(GIFT_COINS),
        )
        .await?;
    Ok(Gift {
        user_id: user.id.clone(),
        day,
        coins: GIFT_COINS,
    })
}

/// Forgets `user`'s claim of today and empties the wallet (so a demo can run again).
pub async fn reset_user(store: &Store, user: &User) -> Result<(), redis::RedisError> {
    store
        .del(&[&gift_key(&user.id, today()), &wallet_key(&user.id)])
        .await
}

/// The coins in `user`'s wallet (zero when it has none).
pub async fn wallet(store: &Store, user: &User) -> Result<i64, redis::RedisError> {
    Ok(store.get(&wallet_key(&user.id)).await?.unwrap_or(0))
}

/// What the claims of one user got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimTally {
    /// Claims that paid out a gift.
    pub gifts: usize,
    /// Claims refused because another claim of the user was in progress.
    pub busy: usize,
    /// Claims that found today's gift already claimed.
    pub already_claimed: usize,
    /// Claims that failed otherwise (Redis errors).
    pub failed: usize,
    /// The first unexpected error, if any.
    pub first_error: Option<String>,
}

/// Fires `claims_per_user` concurrent claims for every user in `users`, with or without
/// the lock, and tallies what each user's claims got (in the order of `users`).
///
/// The claims of a user start evenly spread over `spread` (all at once when it is zero),
/// so that some overlap a claim in progress (busy) and some come after it (already
/// claimed).
pub async fn run_claims(
    store: &Store,
    users: &[User],
    claims_per_user: usize,
    locked: bool,
    spread: Duration,
) -> Vec<ClaimTally> {
    let mut tasks = tokio::task::JoinSet::new();
    for (index, user) in users.iter().enumerate() {
        for claim in 0..claims_per_user {
            let store = store.clone();
            let user = user.clone();
            let delay = spread.mul_f64(claim as f64 / claims_per_user.max(1) as f64);
            tasks.spawn(async move {
                tokio::time::sleep(delay).await;
                let result = if locked {
                    claim_daily_gift(&store, &user).await
                } else {
                    claim_daily_gift_without_lock(&store, &user).await
                };
                (index, result)
            });
        }
    }
    let mut tallies = vec![ClaimTally::default(); users.len()];
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = match joined {
            Ok(done) => done,
            Err(err) => {
                // A claim task panicked: no user to charge it to, so count it for the first.
                if let Some(tally) = tallies.first_mut() {
                    tally.failed += 1;
                    tally.first_error.get_or_insert_with(|| err.to_string());
                }
                continue;
            }
        };
        let tally = &mut tallies[index];
        match result {
            Ok(_) => tally.gifts += 1,
            Err(err) if err.is_busy() => tally.busy += 1,
            Err(GiftError::AlreadyClaimed { .. }) => tally.already_claimed += 1,
            Err(err) => {
                tally.failed += 1;
                tally.first_error.get_or_insert_with(|| err.to_string());
            }
        }
    }
    tallies
}
