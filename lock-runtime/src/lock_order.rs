//! The lock-order check: which classes of locks a task takes while it holds others, and
//! the first inversion of an order seen before, reported before it can deadlock (see
//! [`Config::lock_order_check`](crate::Config::lock_order_check)).
//!
//! As the Linux kernel's lockdep, the check works on classes, not on single locks: the key
//! template of the attribute (`stock:<id>`, for every id), or the key of a [`Lock`]
//! unless it names its class ([`Lock::order_class`]). A task that holds class `A` (inside a
//! guarded body) and takes class `B` records `A → B` in its client's graph; an edge that
//! closes a cycle (`B → A`, or `A → B → C → A`) is reported the first time it is seen.
//!
//! [`Lock`]: crate::Lock
//! [`Lock::order_class`]: crate::Lock::order_class

mod graph;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use crate::call_site::CallSite;
use crate::error::LockError;
use graph::{Edge, Graph};

/// What a client does about the order in which its tasks take nested locks (see
/// [`Config::lock_order_check`](crate::Config::lock_order_check)); default off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockOrderCheck {
    /// No check: nothing is recorded, nothing is reported.
    #[default]
    Off,
    /// A WARN event, `lock-order inversion`, for the first inversion of each order; the
    /// acquisition goes on.
    Warn,
    /// The event, and the acquisition that shows the inversion fails with
    /// [`LockError::OrderInversion`] (the body does not run).
    Fail,
    /// The event, and the acquisition that shows the inversion panics with the same
    /// message: for tests.
    Panic,
}

/// How a builder's locks are named to the check: their class (none: the key is the
/// class) and where they are taken.
#[derive(Debug, Clone)]
pub(crate) struct OrderSpec {
    pub(crate) class: Option<Cow<'static, str>>,
    pub(crate) site: CallSite,
}

impl Default for OrderSpec {
    fn default() -> Self {
        OrderSpec {
            class: None,
            site: CallSite::UNKNOWN,
        }
    }
}

impl OrderSpec {
    /// The class of a lock on `key`.
    pub(crate) fn class_of<'a>(&'a self, key: &'a str) -> &'a str {
        self.class.as_deref().unwrap_or(key)
    }
}

/// A hold as the check knows it: its class and where it was taken.
#[derive(Debug)]
pub(crate) struct OrderHold {
    class: Arc<str>,
    site: CallSite,
}

/// One client's check: its mode and the orders its tasks showed so far.
#[derive(Debug)]
pub(crate) struct LockOrder {
    mode: LockOrderCheck,
    graph: Mutex<Graph>,
}

impl LockOrder {
    /// The check `mode` asks for; none when it is off.
    pub(crate) fn new(mode: LockOrderCheck) -> Option<Self> {
        (mode != LockOrderCheck::Off).then(|| LockOrder {
            mode,
            graph: Mutex::new(Graph::default()),
        })
    }

    /// Before a task that holds `held` takes `key` of class `class` at `site`: records an
    /// edge from each held class to this one, and reports the first edge that closes a
    /// cycle as the mode says. The hold, for the task's held locks.
    pub(crate) fn check(
        &self,
        held: &[Arc<OrderHold>],
        key: &str,
        class: &str,
        site: CallSite,
    ) -> Result<Arc<OrderHold>, LockError> {
        let hold = Arc::new(OrderHold {
            class: class.into(),
            site,
        });
        let cycles: Vec<Vec<Edge>> = {
            let mut graph = self.graph.lock().unwrap_or_else(|err| err.into_inner());
            (held.iter())
                .filter_map(|outer| {
                    graph.add(Edge {
                        from: outer.class.clone(),
                        held_at: outer.site,
                        to: hold.class.clone(),
                        taken_at: site,
                    })
                })
                .collect()
        };
        let Some(cycle) = cycles.first() else {
            return Ok(hold);
        };
        let inversion = describe(cycle);
        let classes = classes(cycle);
        tracing::warn!(key = %key, classes = %classes, inversion = %inversion, "lock-order inversion");
        match self.mode {
            LockOrderCheck::Fail => Err(LockError::OrderInversion {
                key: key.to_owned(),
                inversion,
            }),
            LockOrderCheck::Panic => panic!("lock `{key}`: {inversion}"),
            _ => Ok(hold),
        }
    }
}

/// `a → b → a`: the classes of a cycle, from the new edge's held class.
fn classes(cycle: &[Edge]) -> String {
    let mut text = cycle[0].from.to_string();
    for edge in cycle {
        text.push_str(" → ");
        text.push_str(&edge.to);
    }
    text
}

/// What a cycle's report says: the order just seen, the earlier ones, and the fix.
fn describe(cycle: &[Edge]) -> String {
    let order = |edge: &Edge| {
        format!(
            "`{}` taken at {} while `{}` was held (taken at {})",
            edge.to, edge.taken_at, edge.from, edge.held_at
        )
    };
    let earlier: Vec<String> = cycle[1..].iter().map(order).collect();
    format!(
        "lock-order inversion: {}, but earlier {}; tasks that take these locks in these \
         orders at the same time wait for each other forever: take them in one order \
         everywhere, or together as one multi-key lock",
        order(&cycle[0]),
        earlier.join("; and ")
    )
}
