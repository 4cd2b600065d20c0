//! The long job: a 4-second job holds a lock whose lease is only 1 second; the watchdog
//! keeps renewing it, so another process that tries the same key the whole time is refused
//! every time, and gets the lock only after the job ends.
//!
//! Run it (it starts a Redis if none runs):
//!
//! ```text
//! cargo run -p lock-examples --example long_job
//! ```
//!
//! Redis: `REDIS_URL`, else a server on 127.0.0.1:6379, else a throwaway one.
//!
//! The job runs under `#[distributed_lock(key = "long-job:<job>", ttl = "1s", wait = "0s")]`
//! and prints, every second, how long the lock key has left to live (`PTTL`): never more
//! than the 1 s lease, yet the key outlives it because the watchdog renews it every
//! `ttl/3`. Once the job holds the lock, the example starts a copy of itself with
//! `--contender` (handing it the Redis URL in `LONG_JOB_URL`) that runs the same guarded
//! function every 400 ms: `Busy` while the job runs, then it gets the lock. Times are
//! seconds since the job started, in both processes.

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_examples::servers::{Mode, Servers};
use lock_examples::store::Store;
use lock_runtime::{LockError, distributed_lock};
use tokio::sync::oneshot;

/// The job's name: the lock key is `long-job:nightly-report`.
const JOB: &str = "nightly-report";
/// How long the job works, in steps of one second.
const JOB_STEPS: u32 = 4;
const STEP: Duration = Duration::from_secs(1);
/// How often the contender tries, and at most how many times.
const RETRY_EVERY: Duration = Duration::from_millis(400);
const MAX_TRIES: u32 = 30;

const URL_ENV: &str = "LONG_JOB_URL";
/// Hands the contender the parent's start time (Unix milliseconds).
const START_ENV: &str = "LONG_JOB_START_MS";
/// Unix time in milliseconds when the example started: the zero of every printed time.
static START: OnceLock<u64> = OnceLock::new();
/// The line on which the contender reports what happened, for the parent to check.
const RESULT_MARK: &str = "CONTENDER-RESULT";

/// Why a run of the job did not happen.
#[derive(Debug)]
enum JobError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl From<LockError> for JobError {
    fn from(err: LockError) -> Self {
        JobError::Lock(err)
    }
}

impl From<redis::RedisError> for JobError {
    fn from(err: redis::RedisError) -> Self {
        JobError::Redis(err)
    }
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Lock(err) => write!(f, "{err}"),
            JobError::Redis(err) => write!(f, "redis: {err}"),
        }
    }
}

impl Error for JobError {}

/// Runs `job` for `steps` seconds under the lock, reporting each step with the lock key's
/// remaining lease; tells `started` once it holds the lock. Returns when the work ended
/// (Unix milliseconds), which is before the lock is released.
#[distributed_lock(key = "long-job:<job>", ttl = "1s", wait = "0s")]
async fn run_job(
    job: &str,
    who: &str,
    steps: u32,
    store: &Store,
    started: Option<oneshot::Sender<()>>,
) -> Result<u64, JobError> {
    let key = format!("long-job:{job}");
    let pttl: i64 = store.query(redis::cmd("PTTL").arg(&key)).await?;
    say(who, &format!("got the lock `{key}` (lease left {pttl} ms)"));
    if let Some(started) = started {
        let _ = started.send(());
    }
    for step in 1..=steps {
        tokio::time::sleep(STEP).await;
        let pttl: i64 = store.query(redis::cmd("PTTL").arg(&key)).await?;
        say(
            who,
            &format!("step {step}/{steps} done, lease left {pttl} ms (renewed by the watchdog)"),
        );
    }
    say(who, "done, releasing the lock");
    Ok(unix_millis())
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Seconds since [`START`].
fn since_start() -> f64 {
    let start = START.get().copied().unwrap_or(0);
    (unix_millis() as f64 - start as f64) / 1000.0
}

fn say(who: &str, what: &str) {
    println!("[t+{:5.2}s] {who:<9} {what}", since_start());
}

fn main() -> Result<ExitCode, Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match std::env::args().nth(1).as_deref() {
        Some("--contender") => runtime.block_on(contender_main()),
        None => runtime.block_on(job_main()),
        Some(other) => Err(format!("unknown argument {other:?}; run it without arguments").into()),
    }
}

/// The parent: takes the lock for the long job, starts the contender once it holds it,
/// then checks what the contender saw.
async fn job_main() -> Result<ExitCode, Box<dyn Error>> {
    let servers = Servers::for_mode(Mode::Single)?;
    let url = servers.urls.first().cloned().ok_or("no Redis URL")?;
    lock_runtime::init(servers.config())?;
    let store = Store::connect(&servers).await?;
    let start = *START.get_or_init(unix_millis);
    println!(
        "long job: {JOB_STEPS} s of work under a 1 s lease (redis {url}{})",
        if servers.started_here() {
            ", started for this run"
        } else {
            ""
        },
    );

    let (started_tx, started_rx) = oneshot::channel();
    let job = {
        let store = store.clone();
        tokio::spawn(async move { run_job(JOB, "job", JOB_STEPS, &store, Some(started_tx)).await })
    };
    if started_rx.await.is_err() {
        // The job ended before it held the lock: report why.
        job.await??;
        return Err("the job never held the lock".into());
    }

    let mut contender = Command::new(std::env::current_exe()?)
        .arg("--contender")
        .env(URL_ENV, &url)
        .env(START_ENV, start.to_string())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = contender.stdout.take().ok_or("no contender stdout")?;
    // Echo the contender's lines as they come, keeping its result line.
    let reader = std::thread::spawn(move || {
        let mut result = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            match line.strip_prefix(RESULT_MARK) {
                Some(rest) => result = Some(rest.trim().to_owned()),
                None => println!("{line}"),
            }
        }
        result
    });

    let job_ended = job.await??;
    let status = contender.wait()?;
    let result = reader.join().map_err(|_| "the output reader panicked")?;

    // The contender reports `refused=N acquired_ms=T` (T 0 when it never got the lock).
    let mut refused = 0u32;
    let mut acquired = 0u64;
    for pair in result.as_deref().unwrap_or("").split_whitespace() {
        match pair.split_once('=') {
            Some(("refused", value)) => refused = value.parse()?,
            Some(("acquired_ms", value)) => acquired = value.parse()?,
            _ => {}
        }
    }
    if status.success() && refused > 0 && acquired >= job_ended {
        println!(
            "the contender was refused {refused} times while the job ran ({JOB_STEPS} s on a 1 s \
             lease) and got the lock {} ms after the job's work ended",
            acquired - job_ended
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "unexpected: contender {status}, refused {refused} times, acquired at {acquired}, \
             job ended at {job_ended} (unix ms)"
        );
        Ok(ExitCode::FAILURE)
    }
}

/// The contender: tries the job every 400 ms with `wait = "0s"` until it gets the lock.
async fn contender_main() -> Result<ExitCode, Box<dyn Error>> {
    let url = std::env::var(URL_ENV).map_err(|_| format!("{URL_ENV} is not set"))?;
    lock_runtime::init(lock_runtime::Config::single(url.clone()))?;
    let start = std::env::var(START_ENV)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(unix_millis);
    START.get_or_init(|| start);
    let store = Store::connect_urls(Mode::Single, &[url]).await?;
    let mut refused = 0;
    for _ in 0..MAX_TRIES {
        match run_job(JOB, "contender", 0, &store, None).await {
            Ok(acquired) => {
                println!("{RESULT_MARK} refused={refused} acquired_ms={acquired}");
                return Ok(ExitCode::SUCCESS);
            }
            Err(JobError::Lock(LockError::Busy { key })) => {
                refused += 1;
                say("contender", &format!("refused: `{key}` is busy"));
            }
            Err(err) => return Err(err.into()),
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
    say("contender", &format!("gave up after {MAX_TRIES} tries"));
    println!("{RESULT_MARK} refused={refused} acquired_ms=0");
    Ok(ExitCode::FAILURE)
}
