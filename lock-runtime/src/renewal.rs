//! What keeps held leases alive and ends them: the watchdog's batched renewals, the
//! process's liveness keys, the lost signal, and the shutdown that gives everything back.

pub(crate) mod at_exit;
pub(crate) mod liveness;
pub(crate) mod lost_signal;
pub(crate) mod notices;
pub(crate) mod shutdown;
pub(crate) mod tries_in_flight;
pub(crate) mod watchdog;
