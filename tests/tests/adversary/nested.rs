//! Nested locks in the adversary's schedule, and the deadlock detection's checker.
//!
//! Some tasks ([`takes_part`]) now and then take two or three of [`KEYS`] in a random
//! order, each inside the guarded body of the one before (`Lock::run` on the plain client,
//! or the attribute on the global client, for the whole nest), so that real cycles form
//! between tasks of one process and of several. The inner waits are far longer than the
//! detection delay ([`DELAY`], [`NESTED_WAIT`]): only the detection ends a cycle.
//!
//! Every tenure is an `ADV-HOLD` line as any lock's (the exclusion invariant covers these
//! keys too). Every inner wait is an `ADV-NEST` line, written when it is dropped:
//! `ADV-NEST <holder> <pid> <waits-for> <held,keys> <start_us> <end_us> <outcome> [cycle]`,
//! the outcome `got` (ended at the start of the inner body), `deadlock` (ended when the
//! error came back, before the outer keys are let go; the cycle's text follows),
//! `timeout`, `error` or `dropped` (a cut or a loss ended the body meanwhile).
//!
//! The parent checks ([`check`]):
//! - no false deadlock: for each `deadlock`, the cycle its error names is in the workers'
//!   records at the error's time: its first key is the one the victim waited for; each
//!   key but the last was held (an `ADV-HOLD` tenure) by a task of the named process that
//!   was waiting (an `ADV-NEST` wait) for the next key named; the last key was held by the
//!   victim;
//! - no nested wait runs out its wait (`timeout`) while its window held a stretch of
//!   [`QUIET`] without a fault (a standing cycle outlived the delay and its margin).
//!
//! On the single server, and over the Redlock masters (each step of a walk there is what a
//! majority of them says) unless `ADVERSARY_REDLOCK_NESTS=0`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockError, OnLost, current_lock, distributed_lock};
use lock_tests::checkers::now_us;
use tokio::time::Instant;

use super::{Fault, HANG, HoldRecord, Phase, Rng, TTLS_MS, Tenure, Worker, cut, phase, quiet_for};

/// The keys nested locks are taken on (no other iteration takes them).
const KEYS: [&str; 3] = ["n0", "n1", "n2"];
/// The workers' detection delay.
pub(super) const DELAY: Duration = Duration::from_millis(100);
/// An inner wait: a cycle must end long before it does.
const NESTED_WAIT: Duration = Duration::from_secs(20);
/// The outermost wait (behind nests that may stand in a cycle for a while).
const OUTER_WAIT: Duration = Duration::from_secs(3);
/// How long before its error a deadlock's victim may have read its cycle (the two walks
/// of a look; a stall fault slows them).
const LOOK: Duration = Duration::from_millis(500);
/// A fault-free stretch in which a standing cycle must be found: the delay and a margin.
const QUIET: Duration = Duration::from_secs(1);
/// How often (percent) an iteration of a task that takes part is a nest.
pub(super) const PERCENT: u64 = 30;

/// Whether `key`, left at the end, is a nested wait's deadlock records (`~lock/waits…`,
/// `~lock/waiters-hold…`) that end by themselves within the inner wait and two delays: a
/// removal that a fault cut leaves them to their expiry, no leftover.
pub(super) fn records_end_by_themselves(conn: &mut redis::Connection, key: &str) -> bool {
    if !key.starts_with("~lock/wait") {
        return false;
    }
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap_or(-1);
    let most = NESTED_WAIT + DELAY * 2;
    (0..=i64::try_from(most.as_millis()).unwrap_or(i64::MAX)).contains(&pttl)
}

/// Whether task `index` of a worker takes nested locks (one in four: the nests' keys stay
/// contended without every task queuing on them).
pub(super) fn takes_part(index: usize) -> bool {
    index.is_multiple_of(4)
}

type Nested = Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

/// One nest: its keys in the order taken, and the options of its locks.
struct Nest {
    worker: Arc<Worker>,
    holder: String,
    keys: Vec<&'static str>,
    /// Through the attribute (the global client), else `Lock::run` (the plain client).
    attribute: bool,
    ttl: Duration,
    on_lost: OnLost,
    /// Before the next key is asked for: lets the nests of other tasks take their first.
    pause: Duration,
    steps: Vec<Duration>,
}

/// One inner wait, written as an `ADV-NEST` line when dropped.
struct Wait {
    worker: Arc<Worker>,
    holder: String,
    waits_for: &'static str,
    held: Vec<&'static str>,
    start_us: u64,
    /// When and how it ended (unset: dropped).
    end: Mutex<Option<(u64, String)>>,
}

impl Wait {
    fn begin(nest: &Nest, depth: usize) -> Arc<Wait> {
        Arc::new(Wait {
            worker: nest.worker.clone(),
            holder: nest.holder.clone(),
            waits_for: nest.keys[depth + 1],
            held: nest.keys[..=depth].to_vec(),
            start_us: now_us(),
            end: Mutex::new(None),
        })
    }

    /// Notes the end (the first one noted stands).
    fn end(&self, outcome: String) {
        self.end.lock().unwrap().get_or_insert((now_us(), outcome));
    }

    /// Notes the end of a wait that did not get its lock, and counts it.
    fn failed(&self, err: &LockError, started: Instant) {
        match err {
            LockError::Deadlock { cycle, .. } => {
                self.end(format!("deadlock {cycle}"));
                self.worker.bump("nested_deadlocks");
            }
            LockError::Timeout { .. } => {
                self.end("timeout".into());
                self.worker.bump("nested_timeouts");
            }
            // Found after the inner body began: the wait had ended with `got`.
            LockError::Lost { .. } => self.worker.bump("lost"),
            other => {
                self.end("error".into());
                self.worker
                    .acquire_failed(other, self.waits_for, started, NESTED_WAIT);
            }
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        let (end_us, outcome) = self
            .end
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| (now_us(), "dropped".into()));
        self.worker.line(format!(
            "ADV-NEST {} {} {} {} {} {end_us} {outcome}",
            self.holder,
            std::process::id(),
            self.waits_for,
            self.held.join(","),
            self.start_us,
        ));
    }
}

#[distributed_lock(key = "<key>", ttl = "3s", wait = "3s")]
async fn attribute_outer(key: &'static str, nest: Arc<Nest>) -> Result<(), LockError> {
    let _ = key;
    body(nest, 0, None).await
}

#[distributed_lock(key = "<key>", ttl = "3s", wait = "20s")]
async fn attribute_inner(
    key: &'static str,
    nest: Arc<Nest>,
    depth: usize,
    wait: Arc<Wait>,
) -> Result<(), LockError> {
    let _ = key;
    body(nest, depth, Some(wait)).await
}

/// Takes the nest's key at `depth` (the wait `arrived` leads to it, below the outermost)
/// and runs its body.
fn take(nest: Arc<Nest>, depth: usize, arrived: Option<Arc<Wait>>) -> Nested {
    let key = nest.keys[depth];
    match (nest.attribute, arrived) {
        (true, None) => Box::pin(attribute_outer(key, nest)),
        (true, Some(wait)) => Box::pin(attribute_inner(key, nest, depth, wait)),
        (false, arrived) => Box::pin(async move {
            let wait = if arrived.is_some() {
                NESTED_WAIT
            } else {
                OUTER_WAIT
            };
            let lock = nest.worker.plain.lock(key);
            let lock = lock.ttl(nest.ttl).wait(wait).on_lost(nest.on_lost);
            lock.run(body(nest.clone(), depth, arrived)).await
        }),
    }
}

/// The body under the nest's key at `depth`: its tenure; then the next key, or a few
/// steps at the innermost. An inner wait's failure is recorded and counted here, and
/// the body ends well (its own lock's outcome is the caller's).
fn body(nest: Arc<Nest>, depth: usize, arrived: Option<Arc<Wait>>) -> Nested {
    Box::pin(async move {
        if let Some(wait) = &arrived {
            wait.end("got".into());
        }
        let probe = current_lock();
        let cancels = nest.attribute || matches!(nest.on_lost, OnLost::Cancel);
        let (key, holder) = (nest.keys[depth].to_owned(), nest.holder.clone());
        let mut tenure = Tenure::begin(&nest.worker, key, holder, None, probe, cancels);
        let mut detector = nest.worker.detector.clone();
        tenure.check(&mut detector, true).await;
        if depth + 1 < nest.keys.len() {
            tokio::time::sleep(nest.pause).await;
            let wait = Wait::begin(&nest, depth);
            let started = Instant::now();
            if let Err(err) = take(nest.clone(), depth + 1, Some(wait.clone())).await {
                wait.failed(&err, started);
            }
        } else {
            for step in &nest.steps {
                tokio::time::sleep(*step).await;
                tenure.check(&mut detector, false).await;
            }
        }
        tenure.finish();
        Ok(())
    })
}

/// One nest of a task: two or three of [`KEYS`] in a random order, cut from outside now
/// and then (inside a wait, too).
pub(super) async fn iteration(worker: &Arc<Worker>, rng: &mut Rng, holder: String) {
    let mut keys = KEYS.to_vec();
    for index in (1..keys.len()).rev() {
        keys.swap(index, rng.below(index as u64 + 1) as usize);
    }
    keys.truncate(if rng.chance(70) { 2 } else { 3 });
    let first = keys[0];
    let nest = Arc::new(Nest {
        worker: worker.clone(),
        holder,
        attribute: rng.chance(30),
        ttl: Duration::from_millis(rng.pick(&TTLS_MS)),
        on_lost: if rng.chance(70) {
            OnLost::Cancel
        } else {
            OnLost::Continue
        },
        pause: rng.millis(0, 5),
        steps: (0..1 + rng.below(3)).map(|_| rng.millis(0, 8)).collect(),
        keys,
    });
    let depth = nest.keys.len() as u32 - 1;
    let bound = OUTER_WAIT + NESTED_WAIT * depth + HANG;
    let started = Instant::now();
    match phase(take(nest, 0, None), cut(rng, 10, 400), bound).await {
        Phase::Done(Ok(())) => worker.bump("nests"),
        Phase::Done(Err(LockError::Lost { .. })) => worker.bump("lost"),
        Phase::Done(Err(err)) => worker.acquire_failed(&err, first, started, OUTER_WAIT),
        Phase::Cut => worker.bump("nest_cut"),
        Phase::Hung => {
            worker.bump("hung");
            worker.line(format!("ADV-HUNG nest {first} {}", now_us()));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent's side.

/// An inner wait as the parent reads it back.
#[derive(Debug, Clone)]
pub(super) struct NestWait {
    holder: String,
    pid: String,
    waits_for: String,
    held: Vec<String>,
    start_us: u64,
    end_us: u64,
    outcome: String,
    /// The deadlock's cycle, as its error names it.
    cycle: Option<String>,
}

impl NestWait {
    fn waiting_at(&self, at_us: u64) -> bool {
        self.start_us <= at_us && at_us <= self.end_us
    }
}

/// An `ADV-NEST` line.
pub(super) fn parse_line(line: &str) -> Option<NestWait> {
    let rest = &line[line.find("ADV-NEST ")? + "ADV-NEST ".len()..];
    let mut parts = rest.splitn(8, ' ');
    let mut next = || parts.next().map(str::to_owned);
    let (holder, pid, waits_for, held) = (next()?, next()?, next()?, next()?);
    let (start_us, end_us) = (next()?.parse().ok()?, next()?.parse().ok()?);
    let (outcome, cycle) = (next()?, next());
    Some(NestWait {
        holder,
        pid,
        waits_for,
        held: held.split(',').map(str::to_owned).collect(),
        start_us,
        end_us,
        outcome,
        cycle,
    })
}

/// What the nests did, for the summary.
#[derive(Debug, Default)]
pub(super) struct Tally {
    waits: usize,
    outcomes: BTreeMap<String, usize>,
    /// Deadlocks per cycle length (keys).
    cycles: BTreeMap<usize, usize>,
    /// Timeouts whose window had no quiet stretch (excused).
    timeouts_in_faults: usize,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "nested waits {} {:?}, deadlocks by cycle length {:?}, timeouts excused by faults {}",
            self.waits, self.outcomes, self.cycles, self.timeouts_in_faults
        )
    }
}

impl Tally {
    pub(super) fn deadlocks(&self) -> usize {
        self.outcomes.get("deadlock").copied().unwrap_or(0)
    }
}

/// Whether `holder` held `key` at `at_us` (a tenure of it covers that moment).
fn held_at(holds: &HashMap<String, Vec<HoldRecord>>, key: &str, holder: &str, at_us: u64) -> bool {
    holds.get(key).is_some_and(|tenures| {
        tenures
            .iter()
            .any(|hold| hold.holder == holder && hold.start_us <= at_us && at_us <= hold.end_us)
    })
}

/// Checks every inner wait (see the module's doc); findings go into `findings`.
pub(super) fn check(
    waits: &[NestWait],
    holds: &HashMap<String, Vec<HoldRecord>>,
    faults: &[Fault],
    findings: &mut BTreeMap<&'static str, Vec<String>>,
) -> Tally {
    let mut tally = Tally {
        waits: waits.len(),
        ..Tally::default()
    };
    for wait in waits {
        *tally.outcomes.entry(wait.outcome.clone()).or_default() += 1;
        match wait.outcome.as_str() {
            "deadlock" => match false_deadlock(wait, waits, holds) {
                Ok(length) => *tally.cycles.entry(length).or_default() += 1,
                Err(why) => findings.entry("false deadlock").or_default().push(format!(
                    "{} waiting for {} holding {:?}, at {}: {why}; cycle {:?}",
                    wait.holder, wait.waits_for, wait.held, wait.end_us, wait.cycle
                )),
            },
            "timeout" if quiet_for(faults, wait.start_us, wait.end_us, QUIET) => {
                let middle = wait.start_us + (wait.end_us - wait.start_us) / 2;
                let standing = cycle_at(wait, waits, holds, middle);
                findings
                    .entry("a nested wait ran out while a cycle could be found")
                    .or_default()
                    .push(format!(
                        "{} waited for {} holding {:?} from {} to {}; cycle in the records \
                         halfway: {standing:?}",
                        wait.holder, wait.waits_for, wait.held, wait.start_us, wait.end_us
                    ));
            }
            "timeout" => tally.timeouts_in_faults += 1,
            _ => {}
        }
    }
    tally
}

/// One step of a deadlock's cycle text: the key, its holder's pid, what it waits for
/// (`None`: the victim's own key).
type Step = (String, Option<String>, Option<String>);

/// Reads a cycle's text (`` `k` held by HOST pid N SERVICE `F`, waiting for `k2`; ... ``,
/// the last step `` `k` held by ... (this wait's task) ``).
fn parse_cycle(text: &str) -> Option<Vec<Step>> {
    text.split("; ")
        .map(|step| {
            let (key, holder) = step.strip_prefix('`')?.split_once("` held by ")?;
            let pid = holder
                .split_once(" pid ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .map(str::to_owned);
            let next = match holder.strip_suffix(" (this wait's task)") {
                Some(_) => None,
                None => Some(holder.strip_suffix('`')?.rsplit_once(", waiting for `")?.1),
            };
            Some((key.to_owned(), pid, next.map(str::to_owned)))
        })
        .collect()
}

/// Whether the deadlock `victim` got matches a cycle in the records at its time: the
/// cycle's length (in keys), or why not. "Its time" is the error's, or a moment up to
/// [`LOOK`] before at which a record changed: a task of the cycle that is cut (dropped)
/// ends its records at once, and its keys a release later, so the victim's look may have
/// read the cycle just before the records show it broken.
fn false_deadlock(
    victim: &NestWait,
    waits: &[NestWait],
    holds: &HashMap<String, Vec<HoldRecord>>,
) -> Result<usize, String> {
    let text = victim.cycle.as_deref().ok_or("no cycle named")?;
    let steps = parse_cycle(text).ok_or("the cycle's text does not read")?;
    let (first, last) = (&steps[0], &steps[steps.len() - 1]);
    if first.0 != victim.waits_for {
        return Err(format!("it starts at `{}`, not the waited key", first.0));
    }
    if last.2.is_some() || last.1.as_ref() != Some(&victim.pid) {
        return Err("it does not end at the victim's process".into());
    }
    if !victim.held.contains(&last.0) {
        return Err(format!("the victim's nest does not hold `{}`", last.0));
    }
    let (to, from) = (
        victim.end_us,
        victim.end_us.saturating_sub(LOOK.as_micros() as u64),
    );
    let ends = waits.iter().map(|wait| wait.end_us);
    let ends = ends.chain(holds.values().flatten().map(|hold| hold.end_us));
    let mut moments: Vec<u64> = ends.filter(|&end| from < end && end <= to).collect();
    moments.iter_mut().for_each(|end| *end -= 1);
    moments.push(to);
    let mut why = String::new();
    for at in moments {
        match stood_at(victim, &steps, waits, holds, at) {
            Ok(()) => return Ok(steps.len()),
            Err(not) => why = not,
        }
    }
    Err(why)
}

/// Whether the cycle `steps` stood at `at_us` in the records (see [`false_deadlock`]).
fn stood_at(
    victim: &NestWait,
    steps: &[Step],
    waits: &[NestWait],
    holds: &HashMap<String, Vec<HoldRecord>>,
    at: u64,
) -> Result<(), String> {
    let last = &steps[steps.len() - 1];
    if !victim.waiting_at(at) || !held_at(holds, &last.0, &victim.holder, at) {
        return Err(format!(
            "the victim did not hold `{}` and wait then",
            last.0
        ));
    }
    for (index, (key, pid, next)) in steps[..steps.len() - 1].iter().enumerate() {
        let next = next.as_deref().ok_or("a middle step waits for nothing")?;
        if steps[index + 1].0 != next {
            return Err(format!(
                "`{key}`'s holder waits for `{next}`, not the next key"
            ));
        }
        let member = waits.iter().any(|wait| {
            wait.holder != victim.holder
                && Some(&wait.pid) == pid.as_ref()
                && wait.waits_for == next
                && wait.held.contains(key)
                && wait.waiting_at(at)
                && held_at(holds, key, &wait.holder, at)
        });
        if !member {
            return Err(format!("no task held `{key}` and waited for `{next}` then"));
        }
    }
    Ok(())
}

/// The keys of a cycle through `victim` in the records at `at_us`, if one stood: from the
/// key it waits for, a task that held it and waited for another, and so on back to a key
/// the victim held.
fn cycle_at(
    victim: &NestWait,
    waits: &[NestWait],
    holds: &HashMap<String, Vec<HoldRecord>>,
    at_us: u64,
) -> Option<Vec<String>> {
    let mut path = vec![victim.waits_for.clone()];
    for _ in 0..KEYS.len() {
        let key = path.last()?.clone();
        if victim.held.contains(&key) && held_at(holds, &key, &victim.holder, at_us) {
            return Some(path);
        }
        let holder = waits.iter().find(|wait| {
            wait.holder != victim.holder
                && wait.held.contains(&key)
                && wait.waiting_at(at_us)
                && held_at(holds, &key, &wait.holder, at_us)
        })?;
        path.push(holder.waits_for.clone());
    }
    None
}

/// The checker refuses what the records do not show: a member that had stopped waiting,
/// a cycle through a key nobody waited for, a wait run out in a quiet window.
#[test]
fn the_checker_refuses_a_cycle_the_records_do_not_show() {
    const S: u64 = 1_000_000;
    let hold = |holder: &str, key: &str| {
        let hold = HoldRecord {
            holder: holder.into(),
            start_us: S,
            end_us: 9 * S,
            lost: false,
            fence: None,
            saw: Vec::new(),
        };
        (key.to_owned(), vec![hold])
    };
    let holds: HashMap<_, _> = [hold("a", "n0"), hold("b", "n1")].into();
    let wait = |line: &str| parse_line(line).unwrap();
    let cycle = "`n1` held by h pid 7 s `f`, waiting for `n0`; `n0` held by h pid 7 s `f` \
                 (this wait's task)";
    let victim = wait(&format!(
        "ADV-NEST a 7 n1 n0 {} {} deadlock {cycle}",
        2 * S,
        4 * S
    ));
    let member = |end_us: u64| wait(&format!("ADV-NEST b 7 n0 n1 {} {end_us} got", 2 * S));
    let outcome = |waits: &[NestWait]| {
        let mut findings = BTreeMap::new();
        check(waits, &holds, &[], &mut findings);
        findings.keys().copied().collect::<Vec<_>>()
    };
    assert!(outcome(&[victim.clone(), member(5 * S)]).is_empty());
    // The member had stopped waiting a second before the error.
    assert_eq!(
        outcome(&[victim.clone(), member(3 * S)]),
        ["false deadlock"]
    );
    // The cycle names a key nobody held and waited on.
    let mut other = victim.clone();
    other.cycle = Some(cycle.replace("`n1` held", "`n2` held"));
    assert_eq!(outcome(&[other, member(5 * S)]), ["false deadlock"]);
    // A 20 s wait run out without a fault.
    let timeout = wait(&format!("ADV-NEST a 7 n1 n0 {} {} timeout", 2 * S, 22 * S));
    assert_eq!(
        outcome(&[timeout.clone(), member(23 * S)]),
        ["a nested wait ran out while a cycle could be found"]
    );
    let fault = Fault {
        kind: "stall",
        start_us: 0,
        end_us: 30 * S,
    };
    let mut findings = BTreeMap::new();
    check(&[timeout], &holds, &[fault], &mut findings);
    assert!(findings.is_empty());
}
