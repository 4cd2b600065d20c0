//! Section 4: the watchdog of many locks held at once.

use std::fmt::Write as _;

use super::results::Settings;
use super::summaries::WatchdogSummary;
use crate::figures::thousands;

/// Section 4's table.
pub(super) fn watchdog_section(out: &mut String, s: &Settings, watchdog: &[WatchdogSummary]) {
    let _ = writeln!(out, "## 4. Watchdog at scale\n");
    let _ = writeln!(
        out,
        "{} locks acquired at once (ttl {:.0} s, renewed every ttl/3 = 1 s), held for \
         {:.1} s, then released. Renewals are the `PEXPIRE` calls in the window (each \
         renewal's, run inside its script: ours renews up to 200 leases per script call, a \
         peer one per call); server reads count \
         `total_reads_processed` (one per request, or per chunk of a pipeline), so batching \
         shows as few reads per period. Heap per held lock is the allocator's bytes in use \
         (`mallinfo2`) after acquiring minus before: what the lock allocates, the guard's own \
         allocations included; the guard value itself (its `size_of`, in the *guard* column) \
         sits in storage the caller made before the count. RSS per held \
         lock is the `/proc/self/statm` difference, which stays low when the heap reuses memory \
         freed by earlier scenarios. Only contenders with a watchdog take part.\n",
        s.watchdog_locks,
        s.watchdog_ttl_ms as f64 / 1e3,
        s.watchdog_hold_s
    );
    let _ = writeln!(
        out,
        "| contender | acquire all | renewals/period | server reads/period | client CPU (share of a core) | CPU µs/renewal | heap per held lock | guard | RSS per held lock | DBSIZE before → held → after | lost | leases tracked after |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
    );
    for w in watchdog {
        let _ = writeln!(
            out,
            "| {} | {:.2} s | {} | {} | {:.1}% | {:.2} | {:.0} B | {} B | {:.0} B | {} → {} → {} | {} | {} |",
            w.contender.label(),
            w.acquire_s,
            thousands(w.renewals_per_period),
            thousands(w.server_reads_per_period),
            w.client_cpu_share * 100.0,
            w.client_cpu_us_per_renewal,
            w.heap_per_lock_bytes,
            w.guard_bytes,
            w.rss_per_lock_bytes,
            w.dbsize_before,
            w.dbsize_held,
            w.dbsize_after,
            w.lost,
            w.tracked_after.map_or("–".to_owned(), |t| t.to_string())
        );
    }
    let _ = writeln!(out);
}
