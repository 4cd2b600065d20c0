//! The id generator of `examples/src/id_generator.rs` in 3 OS processes on one real
//! redis-server: no id is handed out twice with the lock, and the same workload without
//! it hands out duplicates (so the test can fail).
#![allow(clippy::unwrap_used, missing_docs)]

use lock_examples::id_generator::{self, Report};
use lock_examples::servers::Mode;
use lock_examples::store::Store;
use lock_tests::{RedisServer, child};

const PROCESSES: usize = 3;
const TASKS_PER_PROCESS: usize = 4;
const IDS_PER_TASK: usize = 25;
const TOTAL: usize = PROCESSES * TASKS_PER_PROCESS * IDS_PER_TASK;

const URL_ENV: &str = "LOCK_TESTS_URL";
const NAME_ENV: &str = "ID_GENERATOR_TEST_NAME";
const LOCKED_ENV: &str = "ID_GENERATOR_TEST_LOCKED";

/// The worker side: runs only in the child processes that the tests below start. It hands
/// out its ids with [`id_generator::generate`] and prints them on one `IDS` line.
#[test]
fn id_generator_worker() {
    let Some(role) = child::role() else { return };
    let url = std::env::var(URL_ENV).unwrap();
    let name = std::env::var(NAME_ENV).unwrap();
    let locked = std::env::var(LOCKED_ENV).unwrap() == "1";
    let runtime = lock_tests::two_worker_runtime();
    let ids = runtime.block_on(async {
        lock_runtime::init(lock_runtime::Config::single(url.clone())).unwrap();
        let store = Store::connect_urls(Mode::Single, &[url]).await.unwrap();
        id_generator::generate(&store, &name, TASKS_PER_PROCESS, IDS_PER_TASK, locked)
            .await
            .unwrap()
    });
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    println!("IDS {role} {}", list.join(" "));
}

/// Runs the workload in [`PROCESSES`] worker processes on `server` and returns every id
/// handed out, and the counter at the end.
fn run_workers(server: &RedisServer, locked: bool) -> (Vec<i64>, i64) {
    let name = format!("test-{}", uuid::Uuid::new_v4().simple());
    let workers: Vec<_> = (0..PROCESSES)
        .map(|index| {
            child::spawn(
                "id_generator_worker",
                &format!("p{index}"),
                &[
                    (URL_ENV, server.url()),
                    (NAME_ENV, name.clone()),
                    (LOCKED_ENV, if locked { "1" } else { "0" }.to_owned()),
                ],
            )
        })
        .collect();
    let mut ids = Vec::new();
    for worker in workers {
        let lines = child::collect(worker, "IDS ");
        assert_eq!(lines.len(), 1, "a worker printed {lines:?}");
        let mut words = lines[0].split_whitespace();
        let _role = words.next();
        ids.extend(words.map(|id| id.parse::<i64>().unwrap()));
    }
    let counter = server
        .get(&id_generator::counter_key(&name))
        .map_or(0, |value| value.parse().unwrap());
    (ids, counter)
}

#[test]
fn three_processes_never_hand_out_the_same_id() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let (mut ids, counter) = run_workers(&server, true);
    let report = Report::of(&ids);
    assert!(
        report.is_unique(),
        "duplicate ids: {report}: {:?}",
        report.duplicates
    );
    assert_eq!(report.total, TOTAL);
    // Nothing lost either: the ids are exactly 1..=TOTAL and the counter ends there.
    ids.sort_unstable();
    assert_eq!(ids, (1..=TOTAL as i64).collect::<Vec<_>>());
    assert_eq!(counter, TOTAL as i64);
}

#[test]
fn without_the_lock_the_same_workload_hands_out_duplicates() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let (ids, counter) = run_workers(&server, false);
    let report = Report::of(&ids);
    assert_eq!(report.total, TOTAL);
    // Generators that read the counter together write back the same value: duplicates,
    // and the counter ends below the number of ids handed out.
    assert!(
        !report.is_unique(),
        "no duplicates without the lock: the workload does not show the race, so the \
         locked test proves nothing"
    );
    assert!(counter < TOTAL as i64, "counter {counter} for {TOTAL} ids");
}
