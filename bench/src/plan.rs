//! Which contenders each scenario measures in this run: every one the machine allows, or
//! only the scenario (and contender) that `BENCH_ONLY=scenario[/contender]` names.

use crate::contenders::Contender;
use crate::setup::Setup;
use crate::{instructions, redlock, replicas, scaling};

/// `BENCH_ONLY=scenario[/contender]`: one scenario, for profiling and bench/ab; the report
/// is then not rewritten, only bench/results.
pub(crate) struct Only {
    /// The scenario's name, e.g. `hot4`.
    pub(crate) scenario: String,
    /// One contender's id, or empty for all of them.
    pub(crate) contender: String,
}

impl Only {
    /// `BENCH_ONLY`, when set and not empty.
    pub(crate) fn from_env() -> Option<Self> {
        let only = std::env::var("BENCH_ONLY")
            .ok()
            .filter(|only| !only.is_empty())?;
        let (scenario, contender) = only.split_once('/').unwrap_or((only.as_str(), ""));
        Some(Only {
            scenario: scenario.to_owned(),
            contender: contender.to_owned(),
        })
    }

    /// Whether a scenario that runs alone (outside the rotated lists) runs: in a full run,
    /// or when it is the one named.
    pub(crate) fn runs(only: Option<&Self>, name: &str) -> bool {
        only.is_none_or(|only| only.scenario == name)
    }
}

/// The contenders of every scenario, in the order they are measured (rotated by run).
pub(crate) struct Plan {
    pub(crate) uncontended: Vec<Contender>,
    pub(crate) many: Vec<Contender>,
    pub(crate) hot: Vec<Contender>,
    pub(crate) hot_processes: Vec<Contender>,
    pub(crate) watchdog: Vec<Contender>,
    pub(crate) redlock: Vec<Contender>,
    pub(crate) redlock_silent: Vec<Contender>,
    pub(crate) instructions: Vec<Contender>,
    pub(crate) scaling: Vec<Contender>,
    pub(crate) held: Vec<Contender>,
    pub(crate) wakeup: Vec<Contender>,
    pub(crate) replicas: Vec<Contender>,
    pub(crate) durable: Vec<Contender>,
}

impl Plan {
    /// Every contender the set-up can measure: redis-py only with an interpreter, Redlock
    /// only with masters, and so on.
    pub(crate) fn new(setup: &Setup) -> Self {
        let mut uncontended = vec![
            Contender::Attribute,
            Contender::Api,
            Contender::Raw,
            Contender::Rslock,
            Contender::AsyncRedisLock,
        ];
        let many = uncontended.clone();
        let mut hot = vec![Contender::Api, Contender::Rslock, Contender::AsyncRedisLock];
        if setup.python.is_some() {
            uncontended.push(Contender::RedisPy);
            hot.push(Contender::RedisPy);
        }
        let with =
            |present: bool, list: &[Contender]| if present { list.to_vec() } else { Vec::new() };
        Plan {
            uncontended,
            many,
            hot_processes: hot.clone(),
            hot,
            watchdog: vec![Contender::Api, Contender::AsyncRedisLock],
            redlock: with(setup.masters.is_some(), &redlock::CONTENDERS),
            redlock_silent: with(setup.masters.is_some(), &[Contender::Api]),
            instructions: with(setup.valgrind.is_some(), &instructions::CONTENDERS),
            scaling: scaling::CYCLE_CONTENDERS.to_vec(),
            held: vec![Contender::Api],
            wakeup: scaling::WAKE_CONTENDERS.to_vec(),
            replicas: with(setup.replicated.is_some(), &replicas::CONTENDERS),
            durable: with(setup.durable.is_some(), &replicas::CONTENDERS),
        }
    }

    /// Keeps only the scenario (and contender) `only` names, e.g. `hot4/api`.
    pub(crate) fn narrow(&mut self, only: &Only) {
        let (scenario, contender) = (only.scenario.as_str(), only.contender.as_str());
        for (name, list) in [
            ("uncontended", &mut self.uncontended),
            ("many", &mut self.many),
            ("hot", &mut self.hot),
            ("hot4", &mut self.hot_processes),
            ("watchdog", &mut self.watchdog),
            ("redlock", &mut self.redlock),
            ("redlock-silent", &mut self.redlock_silent),
            ("instructions", &mut self.instructions),
            ("scaling", &mut self.scaling),
            ("held", &mut self.held),
            ("wakeup", &mut self.wakeup),
            ("replicas", &mut self.replicas),
            ("durable", &mut self.durable),
        ] {
            list.retain(|c| name == scenario && (contender.is_empty() || c.id() == contender));
        }
    }
}

/// The list rotated by `run`, so that no contender always goes first.
pub(crate) fn rotated(list: &[Contender], run: usize) -> Vec<Contender> {
    let mut list = list.to_vec();
    if !list.is_empty() {
        let by = run % list.len();
        list.rotate_left(by);
    }
    list
}
