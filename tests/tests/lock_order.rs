//! The lock-order check (`Config::lock_order_check`), against a real redis-server: nested
//! guarded functions that take two classes of locks in both orders, one after the other (so
//! nothing deadlocks), are reported at the second order; a cycle through three classes at
//! its third edge; one order, reentrancy and a multi-key lock's own keys never; and with
//! the check off (the default) nothing is reported and Redis sees the same commands.
#![allow(clippy::unwrap_used, missing_docs)]

use lock_runtime::{Config, Lock, LockClient, LockError, LockOrderCheck, distributed_lock};
use lock_tests::{RedisServer, events, shared_server};

/// A client of its own on the shared server (its own prefix, its own order graph).
fn client(check: LockOrderCheck) -> LockClient {
    let config = Config::for_tests(shared_server().url()).lock_order_check(check);
    LockClient::new(config).unwrap()
}

#[distributed_lock(key = "stock:<id>", client = locks)]
async fn stock_then_user(locks: &LockClient, id: u64) -> Result<(), LockError> {
    user_alone(locks, id).await
}

#[distributed_lock(key = "user:<id>", client = locks)]
async fn user_alone(locks: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "user:<id>", client = locks)]
async fn user_then_stock(locks: &LockClient, id: u64) -> Result<(), LockError> {
    stock_alone(locks, id).await
}

#[distributed_lock(key = "stock:<id>", client = locks)]
async fn stock_alone(locks: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

/// The inversion's report, as the error or the event gives it, names both templates and the
/// four functions with this file.
fn names_both_orders(report: &str) {
    for text in [
        "`stock:<id>`",
        "`user:<id>`",
        "lock_order::stock_then_user (tests/tests/lock_order.rs:",
        "lock_order::user_alone (tests/tests/lock_order.rs:",
        "lock_order::user_then_stock (tests/tests/lock_order.rs:",
        "lock_order::stock_alone (tests/tests/lock_order.rs:",
    ] {
        assert!(report.contains(text), "{text:?} missing from {report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_mode_refuses_the_reverse_order_naming_both_orders() {
    let locks = client(LockOrderCheck::Fail);
    stock_then_user(&locks, 1).await.unwrap();
    // Another id: the classes are the templates, not the keys.
    match user_then_stock(&locks, 2).await {
        Err(err @ LockError::OrderInversion { .. }) => {
            assert!(err.key().ends_with("stock:2"), "{err}");
            names_both_orders(&err.to_string());
        }
        other => panic!("expected an inversion, got {other:?}"),
    }
    // Reported once: the same inversion again goes through.
    user_then_stock(&locks, 2).await.unwrap();
    assert_eq!(locks.held_leases(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_mode_logs_the_inversion_once_and_the_call_goes_on() {
    events::capture(tracing::Level::WARN);
    let locks = client(LockOrderCheck::Warn);
    // Each test's report names its own functions; this test's are `..._warned`.
    stock_then_user_warned(&locks, 1).await.unwrap();
    user_then_stock_warned(&locks, 1).await.unwrap();
    user_then_stock_warned(&locks, 1).await.unwrap();
    let lines = events::mentioning(&["lock-order inversion", "user_then_stock_warned"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(
        lines[0].contains("stock:<id> → user:<id> → stock:<id>")
            || lines[0].contains("user:<id> → stock:<id> → user:<id>"),
        "{}",
        lines[0]
    );
}

#[distributed_lock(key = "stock:<id>", client = locks)]
async fn stock_then_user_warned(locks: &LockClient, id: u64) -> Result<(), LockError> {
    user_alone(locks, id).await
}

#[distributed_lock(key = "user:<id>", client = locks)]
async fn user_then_stock_warned(locks: &LockClient, id: u64) -> Result<(), LockError> {
    stock_alone(locks, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_mode_panics_at_the_reverse_order() {
    let locks = client(LockOrderCheck::Panic);
    stock_then_user(&locks, 1).await.unwrap();
    let task = tokio::spawn({
        let locks = locks.clone();
        async move { user_then_stock(&locks, 1).await }
    });
    let panic = task.await.unwrap_err().into_panic();
    let message = panic.downcast_ref::<String>().unwrap();
    names_both_orders(message);
    // The outer lock of the task that panicked was given back.
    for _ in 0..500 {
        if locks.held_leases() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(locks.held_leases(), 0);
}

#[distributed_lock(key = "a:<id>", client = locks)]
async fn a_then_b(locks: &LockClient, id: u64) -> Result<(), LockError> {
    b_alone(locks, id).await
}

#[distributed_lock(key = "b:<id>", client = locks)]
async fn b_alone(locks: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b:<id>", client = locks)]
async fn b_then_c(locks: &LockClient, id: u64) -> Result<(), LockError> {
    c_alone(locks, id).await
}

#[distributed_lock(key = "c:<id>", client = locks)]
async fn c_alone(locks: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

/// Takes `a:<id>` with the builder, named by its class, inside `c:<id>`.
#[distributed_lock(key = "c:<id>", client = locks)]
async fn c_then_a(locks: &LockClient, id: u64) -> Result<(), LockError> {
    Lock::new(format!("a:{id}"))
        .order_class("a:<id>")
        .client(locks)
        .run(async { Ok::<(), LockError>(()) })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_through_three_classes_is_reported_at_its_third_order() {
    let locks = client(LockOrderCheck::Fail);
    // A → B, then B → C: no cycle yet.
    a_then_b(&locks, 1).await.unwrap();
    b_then_c(&locks, 2).await.unwrap();
    // C → A closes A → B → C → A; the builder is named by its class and this file's line.
    let err = c_then_a(&locks, 3).await.unwrap_err();
    let report = err.to_string();
    assert!(matches!(err, LockError::OrderInversion { .. }), "{err}");
    for text in [
        "`a:<id>` taken at tests/tests/lock_order.rs:",
        "`c:<id>` was held (taken at lock_order::c_then_a (tests/tests/lock_order.rs:",
        "`b:<id>` taken at lock_order::b_alone",
        "`a:<id>` was held (taken at lock_order::a_then_b",
        "`c:<id>` taken at lock_order::c_alone",
        "`b:<id>` was held (taken at lock_order::b_then_c",
    ] {
        assert!(report.contains(text), "{text:?} missing from {report}");
    }
}

#[distributed_lock(key = "account:<from>", client = locks)]
async fn debit(locks: &LockClient, from: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = ["account:<from>", "account:<to>"], client = locks)]
async fn transfer(locks: &LockClient, from: u64, to: u64) -> Result<(), LockError> {
    debit(locks, from).await
}

#[distributed_lock(key = "ledger:<day>", client = locks)]
async fn ledger_then_transfer(locks: &LockClient, day: u64) -> Result<(), LockError> {
    move_money(locks, 1, 2).await?;
    move_money(locks, 2, 1).await
}

#[distributed_lock(key = ["account:<from>", "account:<to>"], client = locks)]
async fn move_money(locks: &LockClient, from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "account:<from>", client = locks)]
async fn account_then_ledger(locks: &LockClient, from: u64) -> Result<(), LockError> {
    // Boxed, as above.
    Box::pin(ledger_then_transfer(locks, 7)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_reentrancy_and_a_multi_locks_own_keys_never_report() {
    let locks = client(LockOrderCheck::Fail);
    // Each call boxed: nested guarded bodies are large futures in a debug build, and this
    // test's own future lives on the test thread's stack.
    for id in 0..3 {
        // One order, many times, many ids.
        Box::pin(stock_then_user(&locks, id)).await.unwrap();
        user_alone(&locks, id).await.unwrap();
        // A multi-key lock takes its keys in key order: `account:<to>` before
        // `account:<from>` here, the other way round next; the nested `debit` re-enters.
        Box::pin(transfer(&locks, id, id + 1)).await.unwrap();
        Box::pin(transfer(&locks, id + 1, id)).await.unwrap();
    }
    // Reentrant: stock, user, then stock again (held by this task: no order is recorded).
    Box::pin(stock_user_stock(&locks, 5)).await.unwrap();
    // But a multi-key lock's keys do get orders from the locks held around it: ledger →
    // account, and now account → ledger.
    Box::pin(ledger_then_transfer(&locks, 7)).await.unwrap();
    let err = Box::pin(account_then_ledger(&locks, 9)).await.unwrap_err();
    assert!(err.to_string().contains("`ledger:<day>` taken at"), "{err}");
}

#[distributed_lock(key = "stock:<id>", client = locks)]
async fn stock_user_stock(locks: &LockClient, id: u64) -> Result<(), LockError> {
    user_stock_reentrant(locks, id).await
}

#[distributed_lock(key = "user:<id>", client = locks)]
async fn user_stock_reentrant(locks: &LockClient, id: u64) -> Result<(), LockError> {
    // Boxed: three guarded bodies nested inline outgrow a test thread's stack in a debug
    // build.
    Box::pin(stock_alone(locks, id)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default_reports_nothing_and_sends_the_same_commands() {
    events::capture(tracing::Level::WARN);
    let server = RedisServer::start();
    let off = LockClient::new(Config::for_tests(server.url())).unwrap();
    let on =
        LockClient::new(Config::for_tests(server.url()).lock_order_check(LockOrderCheck::Warn))
            .unwrap();
    let mut commands = Vec::new();
    for locks in [&off, &on] {
        // Warmed up (script loads, server checks), then counted.
        stock_alone(locks, 0).await.unwrap();
        server.reset_stats();
        stock_then_off(locks, 1).await.unwrap();
        user_then_off(locks, 1).await.unwrap();
        commands.push(server.server_commands());
    }
    assert_eq!(commands[0], commands[1], "commands off, on");
    // Only the client with the check on reported the inversion.
    let lines = events::mentioning(&["lock-order inversion", "user_then_off"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
}

#[distributed_lock(key = "stock:<id>", client = locks)]
async fn stock_then_off(locks: &LockClient, id: u64) -> Result<(), LockError> {
    user_alone(locks, id).await
}

#[distributed_lock(key = "user:<id>", client = locks)]
async fn user_then_off(locks: &LockClient, id: u64) -> Result<(), LockError> {
    stock_alone(locks, id).await
}

#[distributed_lock(key = "report:<day>", mode = "read", client = locks)]
async fn read_then_permit(locks: &LockClient, day: u64) -> Result<(), LockError> {
    export_permit(locks, day).await
}

#[distributed_lock(key = "export:<day>", permits = 2, client = locks)]
async fn export_permit(locks: &LockClient, day: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "export:<day>", permits = 2, client = locks)]
async fn permit_then_write(locks: &LockClient, day: u64) -> Result<(), LockError> {
    write_report(locks, day).await
}

#[distributed_lock(key = "report:<day>", mode = "write", client = locks)]
async fn write_report(locks: &LockClient, day: u64) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_and_semaphores_are_classes_too() {
    let locks = client(LockOrderCheck::Fail);
    read_then_permit(&locks, 1).await.unwrap();
    let err = permit_then_write(&locks, 1).await.unwrap_err();
    let report = err.to_string();
    for text in [
        "`report:<day>` taken at lock_order::write_report",
        "`export:<day>` was held (taken at lock_order::permit_then_write",
        "`export:<day>` taken at lock_order::export_permit",
        "`report:<day>` was held (taken at lock_order::read_then_permit",
    ] {
        assert!(report.contains(text), "{text:?} missing from {report}");
    }
}
