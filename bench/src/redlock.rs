//! Section 5: one hot key in Redlock mode, on three independent throwaway
//! masters started by `bench/run`: ours (`Config::redlock`) against rslock (a Redlock
//! implementation) over the same masters, in the same run.
//!
//! The contending tasks are those of section 3 ([`scenarios::hot_tasks`]); the server side
//! is counted on every master: a `MONITOR` tap on each for the requests clients sent, and
//! `INFO commandstats` on each (summed) for the commands run, Lua included.

use std::sync::Arc;
use std::time::Duration;

use crate::admin::{Admin, CommandStats, Monitor, Monitored};
use crate::contenders::{Clients, Contender};
use crate::error::BenchResult;
use crate::scenarios::{self, HotRecord};

/// The masters and a connection of the bench's own to each.
pub(crate) struct Masters {
    /// Their URLs, as given to both contenders.
    pub(crate) urls: Vec<String>,
    admins: Vec<Admin>,
    /// Ours and rslock, each over all the masters.
    clients: Arc<Clients>,
}

impl Masters {
    /// Connects to the masters in `BENCH_REDLOCK_URLS` (comma-separated); `None` when it is
    /// unset (the binary run without `bench/run`).
    pub(crate) async fn from_env() -> BenchResult<Option<Self>> {
        let Ok(list) = std::env::var("BENCH_REDLOCK_URLS") else {
            return Ok(None);
        };
        let urls: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_owned)
            .collect();
        if urls.len() < 3 {
            return Err(format!("BENCH_REDLOCK_URLS names {} masters, not 3", urls.len()).into());
        }
        let mut admins = Vec::new();
        for url in &urls {
            admins.push(Admin::connect(url).await?);
        }
        let clients = Arc::new(Clients::redlock(&urls).await?);
        Ok(Some(Masters {
            urls,
            admins,
            clients,
        }))
    }

    /// A warm-up acquisition on the key `warm`: connections to every master open and
    /// scripts loaded before the counters start.
    async fn warm_up(&self, contender: Contender, warm: &str) -> BenchResult<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        match self.clients.acquire_hot(contender, warm, deadline).await? {
            Some(held) => held.release().await?,
            None => return Err("the warm-up acquisition did not finish in 5 s".into()),
        }
        Ok(())
    }

    /// Every master's counters reset, then a `MONITOR` tap on each (`None` where none
    /// could be opened).
    async fn tap(&self) -> BenchResult<Vec<Option<Monitor>>> {
        for admin in &self.admins {
            admin.reset_stats().await?;
        }
        let mut monitors = Vec::new();
        for admin in &self.admins {
            monitors.push(admin.monitor().await?);
        }
        Ok(monitors)
    }

    /// What the taps saw, summed (`None` if a master had no tap), and the commands every
    /// master ran, summed.
    async fn counted(
        &self,
        monitors: Vec<Option<Monitor>>,
    ) -> BenchResult<(Option<Monitored>, CommandStats)> {
        let mut monitored = Some(Monitored::default());
        for (monitor, admin) in monitors.into_iter().zip(&self.admins) {
            match monitor {
                Some(monitor) => {
                    let seen = monitor.finish(admin).await?;
                    if let Some(total) = monitored.as_mut() {
                        total.requests += seen.requests;
                        total.in_lua += seen.in_lua;
                    }
                }
                None => monitored = None,
            }
        }
        let mut commands = CommandStats::default();
        for admin in &self.admins {
            commands.add(&admin.command_stats().await?);
        }
        Ok((monitored, commands))
    }
}

/// The contenders of section 5.
pub(crate) const CONTENDERS: [Contender; 2] = [Contender::Api, Contender::Rslock];

/// The label of a contender in section 5.
pub(crate) fn label(contender: Contender) -> &'static str {
    match contender {
        Contender::Rslock => "rslock 0.10, 3 masters",
        _ => "ours, Config::redlock, 3 masters",
    }
}

/// A master stopped with `SIGSTOP` (it accepts connections and answers nothing) until this
/// is dropped, when it gets `SIGCONT`: nothing is left stopped, whatever fails.
struct Silenced(u64);

impl Silenced {
    async fn new(admin: &Admin) -> BenchResult<Self> {
        let pid = admin.info_field("server", "process_id").await?;
        signal("STOP", pid)?;
        Ok(Silenced(pid))
    }
}

impl Drop for Silenced {
    fn drop(&mut self) {
        let _ = signal("CONT", self.0);
    }
}

fn signal(name: &str, pid: u64) -> BenchResult<()> {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()?;
    if !status.success() {
        return Err(format!("kill -{name} {pid} failed: {status}").into());
    }
    Ok(())
}

/// `tasks` tasks in this process contend for one key on the masters for `window`, each
/// holding it for `hold` (section 3's shape, in Redlock mode); with `silent`, the last
/// master is stopped (`SIGSTOP`) for the window.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn hot_key(
    masters: &Masters,
    contender: Contender,
    run: usize,
    tasks: u64,
    hold: Duration,
    window: Duration,
    silent: bool,
) -> BenchResult<HotRecord> {
    let key = format!(
        "bench:redlock-hot:{}:{run}{}",
        contender.id(),
        if silent { ":silent" } else { "" }
    );
    // A warm-up acquisition on a key of its own: connections to every master open and
    // scripts loaded before the counters start.
    let warm = format!("bench:redlock-warm:{}:{run}", contender.id());
    masters.warm_up(contender, &warm).await?;
    let monitors = masters.tap().await?;
    let silenced = match (silent, masters.admins.last()) {
        (true, Some(last)) => Some(Silenced::new(last).await?),
        _ => None,
    };
    let outcome =
        scenarios::hot_tasks(&masters.clients, contender, &key, tasks, hold, window).await;
    drop(silenced);
    // The taps and counters are read (and the keys cleaned) whatever the outcome.
    let (monitored, commands) = masters.counted(monitors).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for admin in &masters.admins {
        admin.del_matching(&format!("*{key}*")).await?;
        admin.del_matching(&format!("*{warm}*")).await?;
    }
    let outcome = outcome?;
    let acquisitions = vec![outcome.waits_us.len() as u64];
    Ok(scenarios::hot_record(
        contender,
        run,
        (tasks, acquisitions),
        hold,
        window,
        outcome,
        monitored,
        commands,
    ))
}
