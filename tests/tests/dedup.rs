//! The daily gift of `examples/src/dedup.rs` against a real redis-server: exactly one gift
//! per user under concurrency (the rest `Busy` or already claimed), each outcome on its
//! own, and the same claims without the lock paying out twice (so the test can fail).
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_examples::dedup::{self, GIFT_COINS, GiftError, User};
use lock_examples::servers::Mode;
use lock_examples::store::Store;
use lock_runtime::{Lock, LockError};
use lock_tests::shared_server;

const USERS: usize = 5;
const CLAIMS_PER_USER: usize = 20;

/// Users whose ids no other test uses (the tests share one server).
fn fresh_users(count: usize) -> Vec<User> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    (0..count)
        .map(|index| User::new(format!("user-{run}-{index}")))
        .collect()
}

async fn store() -> Store {
    Store::connect_urls(Mode::Single, &[shared_server().url()])
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_pay_out_exactly_one_gift_per_user() {
    let server = shared_server();
    let users = fresh_users(USERS);
    async {
        let store = store().await;
        // Spread over 100 ms: claims that overlap the first are busy, later ones find the
        // gift claimed. Which kind each gets depends on timing, so only their sum is checked.
        let tallies = dedup::run_claims(
            &store,
            &users,
            CLAIMS_PER_USER,
            true,
            Duration::from_millis(100),
        )
        .await;
        for (user, tally) in users.iter().zip(&tallies) {
            assert_eq!(tally.failed, 0, "{}: {:?}", user.id, tally.first_error);
            assert_eq!(tally.gifts, 1, "{}: {tally:?}", user.id);
            assert_eq!(
                tally.busy + tally.already_claimed,
                CLAIMS_PER_USER - 1,
                "{}: {tally:?}",
                user.id
            );
            assert_eq!(dedup::wallet(&store, user).await.unwrap(), GIFT_COINS);
            assert!(
                !lock_runtime::is_locked(&format!("sign-in:{}", user.id))
                    .await
                    .unwrap()
            );
        }
    }
    .await;
    for user in &users {
        // Today's claim is recorded, with the gift's coins, and expires.
        let key = dedup::gift_key(&user.id, dedup::today());
        assert_eq!(server.get(&key), Some(GIFT_COINS.to_string()), "{key}");
        assert!(server.pttl(&key) > 0, "{key} never expires");
        assert_eq!(server.get(&format!("sign-in:{}", user.id)), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_while_another_runs_is_busy_and_a_later_one_finds_it_claimed() {
    let server = shared_server();
    let user = fresh_users(1).remove(0);
    async {
        let store = store().await;
        // Another claim in progress: someone holds the user's sign-in lock.
        let held = Lock::new(format!("sign-in:{}", user.id))
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        // A different task: reentrancy is per task, so this is another owner.
        let busy = tokio::spawn({
            let (store, user) = (store.clone(), user.clone());
            async move { dedup::claim_daily_gift(&store, &user).await }
        })
        .await
        .unwrap();
        match busy {
            Err(GiftError::Lock(LockError::Busy { key })) => {
                assert_eq!(key, format!("sign-in:{}", user.id));
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        assert_eq!(dedup::wallet(&store, &user).await.unwrap(), 0);
        held.release().await.unwrap();

        let claim = || {
            let (store, user) = (store.clone(), user.clone());
            tokio::spawn(async move { dedup::claim_daily_gift(&store, &user).await })
        };
        let gift = claim().await.unwrap().unwrap();
        assert_eq!(gift.user_id, user.id);
        assert_eq!(gift.coins, GIFT_COINS);
        match claim().await.unwrap() {
            Err(GiftError::AlreadyClaimed { user_id }) => assert_eq!(user_id, user.id),
            other => panic!("expected AlreadyClaimed, got {other:?}"),
        }
        assert_eq!(dedup::wallet(&store, &user).await.unwrap(), GIFT_COINS);
    }
    .await;
    assert!(
        server
            .get(&dedup::gift_key(&user.id, dedup::today()))
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_concurrent_claims_pay_out_several_gifts() {
    let users = fresh_users(USERS);
    lock_tests::shared_server();
    let store = store().await;
    // All claims at once: each finds no gift, issues it for 50 ms, and pays out.
    let tallies = dedup::run_claims(&store, &users, CLAIMS_PER_USER, false, Duration::ZERO).await;
    let mut gifts = 0;
    let mut coins = 0;
    for (user, tally) in users.iter().zip(&tallies) {
        assert_eq!(tally.failed, 0, "{}: {:?}", user.id, tally.first_error);
        assert_eq!(tally.busy, 0, "no lock, so nothing is busy");
        gifts += tally.gifts;
        coins += dedup::wallet(&store, user).await.unwrap();
    }
    assert!(
        gifts > USERS,
        "without the lock every user still got one gift ({gifts} for {USERS} users): \
         the workload does not show the race, so the locked test proves nothing"
    );
    assert_eq!(coins, gifts as i64 * GIFT_COINS);
}
