//! The flash-sale invariant (DESIGN §6) on the example's own code: buyers race for a few
//! items whose stock lives in a real Redis; under `#[distributed_lock]` exactly the stock
//! is sold, never below zero, in one process and across processes; without the lock the
//! same workload oversells, which shows that these tests can fail.
#![allow(clippy::unwrap_used, missing_docs)]

use lock_examples::flash_sale::{self, Outcome};
use lock_examples::servers::Mode;
use lock_examples::store::Store;
use lock_tests::{block_on, child, shared_server};

const STOCK: i64 = 10;
const BUYERS: usize = 100;

fn unique_item() -> String {
    format!("phone-{}", uuid::Uuid::new_v4().simple())
}

async fn store() -> Store {
    Store::connect_urls(Mode::Single, &[shared_server().url()])
        .await
        .unwrap()
}

/// Runs `BUYERS` concurrent buyers in this process and returns the end state.
fn sale_in_one_process(locked: bool) -> (flash_sale::Tally, Outcome) {
    block_on(async {
        let store = store().await;
        let item = unique_item();
        flash_sale::open_sale(&store, &item, STOCK).await.unwrap();
        let tally = flash_sale::run_buyers(&store, &item, BUYERS, locked, |_, _| {}).await;
        let outcome = Outcome::read(&store, &item, STOCK).await.unwrap();
        (tally, outcome)
    })
}

#[test]
fn one_process_sells_exactly_the_stock() {
    if child::role().is_some() {
        return;
    }
    let (tally, outcome) = sale_in_one_process(true);
    assert!(outcome.is_exact(), "{outcome}");
    assert_eq!(tally.bought, STOCK as u64);
    assert_eq!(tally.sold_out, BUYERS as u64 - STOCK as u64);
    assert_eq!(tally.failed, 0);
}

#[test]
fn without_the_lock_the_same_sale_oversells() {
    if child::role().is_some() {
        return;
    }
    let (tally, outcome) = sale_in_one_process(false);
    assert!(outcome.oversold() > 0, "expected an oversell: {outcome}");
    assert_eq!(tally.bought as i64, outcome.sold);
}

/// The buyer side of `several_processes_sell_exactly_the_stock`: runs only in children.
#[test]
fn flash_sale_buyers() {
    let Some(_role) = child::role() else { return };
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    let item = std::env::var("LOCK_TESTS_ITEM").unwrap();
    lock_runtime::init(lock_runtime::Config::single(url.clone())).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tally = runtime.block_on(async {
        let store = Store::connect_urls(Mode::Single, &[url]).await.unwrap();
        flash_sale::run_buyers(&store, &item, BUYERS / 4, true, |_, _| {}).await
    });
    println!("TALLY {} {} {}", tally.bought, tally.sold_out, tally.failed);
}

#[test]
fn several_processes_sell_exactly_the_stock() {
    if child::role().is_some() {
        return;
    }
    let server = shared_server();
    let item = unique_item();
    block_on(async {
        flash_sale::open_sale(&store().await, &item, STOCK)
            .await
            .unwrap()
    });
    let workers: Vec<_> = (0..4)
        .map(|index| {
            child::spawn(
                "flash_sale_buyers",
                &format!("p{index}"),
                &[
                    ("LOCK_TESTS_URL", server.url()),
                    ("LOCK_TESTS_ITEM", item.clone()),
                ],
            )
        })
        .collect();
    let mut bought = 0;
    let mut failed = 0;
    for worker in workers {
        let lines = child::collect(worker, "TALLY ");
        assert_eq!(lines.len(), 1, "{lines:?}");
        let numbers: Vec<u64> = lines[0]
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        bought += numbers[0];
        failed += numbers[2];
    }
    let outcome = block_on(async { Outcome::read(&store().await, &item, STOCK).await.unwrap() });
    assert!(outcome.is_exact(), "{outcome}");
    assert_eq!(bought, STOCK as u64);
    assert_eq!(failed, 0);
    // Every lock was released: no lock key, no queue left behind for this item.
    assert_eq!(server.get(&format!("stock:{item}")), None);
}
