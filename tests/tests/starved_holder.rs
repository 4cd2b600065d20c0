//! A holder starved past its lease's validity point (its process stopped with SIGSTOP for
//! longer than the ttl, while another owner takes the key) takes no step of its guarded
//! body after that point: the lease is judged by the clock, so the first poll after the
//! stall finds it lost and the body is cancelled (`on_lost = "cancel"`), whichever of the
//! body and the watchdog gets its turn first.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError, current_lock};
use lock_tests::{RedisServer, child};

const TTL: Duration = Duration::from_secs(2);
const KEY: &str = "starved";

/// The holder: a guarded body that takes a step every 5 ms and prints, for each, the time
/// since the step before and whether the lease reads lost.
#[test]
fn starved_holder_worker() {
    if child::role().is_none() {
        return;
    }
    let url = std::env::var("STARVED_URL").unwrap();
    lock_tests::two_worker_runtime().block_on(async {
        let client = LockClient::new(Config::single(url)).unwrap();
        let result = client
            .lock(KEY)
            .ttl(TTL)
            .run(async {
                println!("HELD");
                let mut last = Instant::now();
                for _ in 0..4_000 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let lost = current_lock().unwrap().is_lost();
                    println!("STEP {} {lost}", last.elapsed().as_millis());
                    last = Instant::now();
                }
                Ok::<_, LockError>(())
            })
            .await;
        println!("ENDED {result:?}");
    });
}

/// Stopped for 3 s, well past its ttl: another owner takes the key, and the holder takes
/// no step after its validity point.
#[test]
fn a_holder_stopped_past_its_validity_takes_no_step_after_it() {
    if child::role().is_some() {
        return;
    }
    stopped_holder(Duration::from_secs(3));
}

/// Stopped for 1.5 s, less than its ttl: the lease ends in the stop only when its last
/// renewal came more than about half a second before it (then as above); otherwise nobody
/// else can take the key, and the holder goes on, its lease renewed.
#[test]
fn a_holder_stopped_within_its_ttl_keeps_its_lease_or_takes_no_step_after_it() {
    if child::role().is_some() {
        return;
    }
    stopped_holder(Duration::from_millis(1500));
}

fn stopped_holder(stall: Duration) {
    let server = RedisServer::start();
    let mut holder = child::spawn(
        "starved_holder_worker",
        "holder",
        &[("STARVED_URL", server.url())],
    );
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let mut next_line = || lines.next().expect("the holder's output").unwrap();
    for _ in 0..1_000 {
        if next_line().contains("HELD") {
            break;
        }
    }
    for _ in 0..20 {
        assert!(next_line().contains("STEP"), "the holder did not step");
    }

    child::pause(holder.id());
    std::thread::sleep(stall);
    // Past the ttl, the lease ran out in Redis meanwhile: another owner takes the key.
    let runtime = lock_tests::two_worker_runtime();
    let other = server.lock_client();
    let taken = runtime.block_on(other.lock(KEY).ttl(Duration::from_secs(30)).try_acquire());
    child::signal(holder.id(), "CONT");
    let taken = match taken {
        Ok(taken) => taken,
        Err(LockError::Busy { .. }) if stall < TTL => {
            // Still held: the holder goes on, its lease renewed, and reads it held.
            for _ in 0..20 {
                let line = next_line();
                assert!(line.contains("STEP") && line.ends_with("false"), "{line}");
            }
            println!("FIGURE stopped-holder: stopped {stall:?}, the lease outlived the stop");
            holder.kill().unwrap();
            holder.wait().unwrap();
            return;
        }
        Err(err) => panic!("the stopped holder's lease did not run out in Redis: {err}"),
    };

    let mut after = Vec::new();
    for _ in 0..10_000 {
        let line = next_line();
        let ended = line.contains("ENDED");
        after.push(line);
        if ended {
            break;
        }
    }
    let late: Vec<&String> = after
        .iter()
        .filter(|line| {
            line.split("STEP ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u128>().ok())
                .is_some_and(|gap| gap >= TTL.as_millis())
        })
        .collect();
    assert!(
        late.is_empty(),
        "the body took a step after a stall past its validity point, beside another owner: {late:?}"
    );
    let ended = after.last().unwrap();
    assert!(
        ended.contains("Lost"),
        "the body was not stopped as lost: {ended}"
    );
    println!(
        "FIGURE stopped-holder: stopped {stall:?}, another owner took the key; the body took \
         no step after its validity point"
    );
    runtime.block_on(taken.release()).unwrap();
    let status = holder.wait().unwrap();
    assert!(status.success(), "the holder failed: {status:?}");
}
