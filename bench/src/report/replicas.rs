//! Section 8 of BENCHMARKS.md: the cost of `Config::wait_for_replicas`, as
//! ratios measured in one run: ours over raw with the same option, and each contender with
//! the option over itself without it.

use std::fmt::Write as _;

use super::results::{Results, Settings};
use crate::contenders::Contender;
use crate::figures::{median, ms, thousands};
use crate::replicas::{self, Measured, Rule, Variant};
use crate::scenarios::{CycleRecord, HotRecord};

/// The median over runs of `of`'s records' `value` divided by the value of the record of
/// the same run that `partner` picks (ratios within one run: load drifting between runs
/// cancels); `None` without pairs.
fn paired<T>(
    records: &[Variant<T>],
    of: impl Fn(&Variant<T>) -> bool,
    partner: impl Fn(&Variant<T>, &Variant<T>) -> bool,
    value: impl Fn(&T) -> f64,
) -> Option<f64> {
    let ratios: Vec<f64> = records
        .iter()
        .filter(|r| of(r))
        .filter_map(|mine| {
            let other = records.iter().find(|o| partner(mine, o))?;
            let base = value(&other.record);
            (base > 0.0).then(|| value(&mine.record) / base)
        })
        .collect();
    (!ratios.is_empty()).then(|| median(ratios))
}

fn ratio(value: Option<f64>) -> String {
    value.map_or("–".to_owned(), |r| format!("{r:.2}×"))
}

/// Medians of one variant's cycle measurements, and its ratios.
struct CycleRow {
    contender: Contender,
    rule: Rule,
    waits: bool,
    per_s: f64,
    min: f64,
    max: f64,
    /// Over raw with the same option, same run.
    to_raw: Option<f64>,
    /// Over the same contender without the option, same run.
    to_without: Option<f64>,
    cpu_us: f64,
    server_cmds: f64,
    wait_cmds: f64,
    requests: Option<f64>,
    busy: u64,
}

fn cycle_rows(records: &[Variant<CycleRecord>], rule: Rule) -> Vec<CycleRow> {
    let mut rows = Vec::new();
    for contender in replicas::CONTENDERS {
        for waits in [false, true] {
            let mine: Vec<&CycleRecord> = records
                .iter()
                .filter(|v| v.waits == waits && v.record.contender == contender)
                .map(|v| &v.record)
                .collect();
            if mine.is_empty() {
                continue;
            }
            rows.push(CycleRow {
                contender,
                rule,
                waits,
                per_s: median(mine.iter().map(|r| r.per_s)),
                min: mine.iter().map(|r| r.per_s).fold(f64::INFINITY, f64::min),
                max: mine.iter().map(|r| r.per_s).fold(0.0, f64::max),
                to_raw: to_raw(records, contender, waits),
                to_without: to_without(records, contender, waits),
                cpu_us: median(mine.iter().map(|r| r.client_cpu_us_per_cycle)),
                server_cmds: median(mine.iter().map(|r| r.server_cmds_per_cycle)),
                wait_cmds: median(
                    mine.iter()
                        .map(|r| r.commands.get(rule.command()) as f64 / r.cycles.max(1) as f64),
                ),
                requests: mine
                    .iter()
                    .all(|r| r.requests_per_cycle.is_some())
                    .then(|| median(mine.iter().filter_map(|r| r.requests_per_cycle))),
                busy: mine.iter().map(|r| r.failures).sum(),
            });
        }
    }
    rows
}

/// `contender`'s cycles/s over raw's with the same option, same run (`None` for raw).
fn to_raw(records: &[Variant<CycleRecord>], contender: Contender, waits: bool) -> Option<f64> {
    let this = |v: &Variant<CycleRecord>| v.waits == waits && v.record.contender == contender;
    (contender != Contender::Raw)
        .then(|| {
            paired(
                records,
                this,
                |m, o| {
                    o.waits == m.waits
                        && o.record.contender == Contender::Raw
                        && o.record.run == m.record.run
                },
                |r| r.per_s,
            )
        })
        .flatten()
}

/// `contender`'s cycles/s with the option over its own without, same run (`None` without
/// the option).
fn to_without(records: &[Variant<CycleRecord>], contender: Contender, waits: bool) -> Option<f64> {
    let this = |v: &Variant<CycleRecord>| v.waits == waits && v.record.contender == contender;
    waits
        .then(|| {
            paired(
                records,
                this,
                |m, o| {
                    !o.waits
                        && o.record.contender == m.record.contender
                        && o.record.run == m.record.run
                },
                |r| r.per_s,
            )
        })
        .flatten()
}

fn cycle_table(out: &mut String, rows: &[CycleRow], rule: Rule) {
    let _ = writeln!(
        out,
        "| contender | cycles/s (median) | range over runs | × raw, same option, same run | with ÷ without, same run | client CPU µs/cycle | server cmds/cycle | of them {} | requests sent/cycle | busy or unconfirmed |",
        rule.command().to_uppercase()
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {}–{} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
            replicas::label(r.contender, r.rule, r.waits),
            thousands(r.per_s),
            thousands(r.min),
            thousands(r.max),
            if r.contender == Contender::Raw {
                "1.00×".to_owned()
            } else {
                ratio(r.to_raw)
            },
            if r.waits {
                ratio(r.to_without)
            } else {
                "1.00×".to_owned()
            },
            r.cpu_us,
            r.server_cmds,
            r.wait_cmds,
            r.requests.map_or("–".to_owned(), |v| format!("{v:.2}")),
            r.busy
        );
    }
}

fn find(rows: &[CycleRow], contender: Contender, waits: bool) -> Option<&CycleRow> {
    rows.iter()
        .find(|r| r.contender == contender && r.waits == waits)
}

/// The section, for BENCHMARKS.md (and, after a `BENCH_ONLY=replicas` or `durable` run,
/// `bench/results/replicas.md`): grants that wait for replicas, then durable grants.
pub(crate) fn section(out: &mut String, results: &Results) {
    let _ = writeln!(out, "## 8. Grants that wait for replicas\n");
    replicas_part(out, results);
    durable_part(out, results);
}

/// Grants that wait for replicas (`WAIT`), on the redis-server pair.
fn replicas_part(out: &mut String, results: &Results) {
    let s: &Settings = &results.settings;
    let m: &Measured = &results.replicas;
    let _ = writeln!(
        out,
        "`bench/run` starts two more throwaway redis-servers (loopback, no persistence): a \
         primary and a replica of it (`--replicaof`), and waits for their link. Each \
         measurement runs without and with the option, interleaved in the same run: ours is \
         `LockClient::new(Config::single(primary))` and the Lock API, with \
         `.wait_for_replicas({}, {} ms)` for the option; the raw limit is one multiplexed \
         connection whose `SET NX PX` goes out pipelined with `WAIT {} {}` for the option (the \
         least the option needs: the grant and the `WAIT` that counts it, in one round trip; \
         a release is not waited for, by raw or ours, since a delete the replica misses only \
         leaves the key to its ttl). *× raw* compares ours with raw under the same option; \
         *with ÷ without* compares a contender with itself; both are medians of ratios within \
         one run. *Requests sent* are counted by a `MONITOR` tap (a pipelined `WAIT` counts as \
         one request, though it shares its write's round trip); *busy or unconfirmed* counts \
         tries that failed, a grant too few replicas confirmed included.\n",
        replicas::REPLICAS,
        replicas::WAIT_TIMEOUT.as_millis(),
        replicas::REPLICAS,
        replicas::WAIT_TIMEOUT.as_millis(),
    );
    if m.uncontended.is_empty() && m.many_keys.is_empty() && m.hot_key.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    replicas_cycle_tables(out, s, m);
    if !m.hot_key.is_empty() {
        hot_table(out, s, &m.hot_key);
    }
    let _ = writeln!(
        out,
        "The replica's link after the measurements: `master_link_status:{}`.\n",
        if m.replica_link.is_empty() {
            "not read"
        } else {
            m.replica_link.as_str()
        }
    );
}

/// The one-task and many-keys tables of grants that wait for replicas.
fn replicas_cycle_tables(out: &mut String, s: &Settings, m: &Measured) {
    for (title, records) in [
        (
            format!(
                "One task, one key: acquire (no waiting) + release, for {:.1} s per run.",
                s.uncontended_s
            ),
            &m.uncontended,
        ),
        (
            format!(
                "{} concurrent tasks, each cycling on its own key, for {:.1} s per run.",
                s.many_tasks, s.many_s
            ),
            &m.many_keys,
        ),
    ] {
        if records.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}\n");
        cycle_table(out, &cycle_rows(records, Rule::Replicas), Rule::Replicas);
        let _ = writeln!(out);
    }
}

/// Durable grants (`WAITAOF`), on the Valkey pair: one task and many keys, with the
/// replica's append-only file and with the primary's own only.
fn durable_part(out: &mut String, results: &Results) {
    let (replica_ms, local_ms) = (
        Rule::Aof.timeout().as_millis(),
        Rule::AofLocal.timeout().as_millis(),
    );
    let _ = writeln!(out, "### Durable grants: the append-only file (WAITAOF)\n");
    let _ = writeln!(
        out,
        "Redis 7.0 has no `WAITAOF`, so `bench/run` starts a Valkey primary and a replica of \
         it (`valkey-server`, loopback, `--appendonly yes --appendfsync everysec` on both: \
         the default fsync policy, which a user who asks for durable grants keeps, since \
         `WAITAOF` makes each grant wait for the fsync that covers it while every other \
         write keeps the once-a-second fsync; `always` would fsync every write, not only the \
         grants). Each measurement runs without and with the option, \
         interleaved in the same run, as above, in two settings: ours with \
         `.wait_for_aof(true, 1, {replica_ms} ms)` (the grant in the primary's append-only \
         file and in one replica's; a replica reports how far its file is written about once \
         a second, so a 100 ms timeout confirms almost no grant) against the raw limit's `SET \
         NX PX` pipelined with `WAITAOF 1 1 {replica_ms}`, then `.wait_for_aof(true, 0, \
         {local_ms} ms)` (the primary's own file only) against `WAITAOF 1 0 {local_ms}`. *Busy or unconfirmed* counts the tries that \
         failed: a grant `WAITAOF` did not confirm within the timeout (ours undoes it and \
         fails with `NotDurable`; raw deletes it), a try or a release answered too late \
         because it waited behind another `WAITAOF` on the same connection (the key is left \
         to its ttl, and deleted before the next measurement); cycles/s count confirmed \
         cycles only. Alone: `BENCH_ONLY=durable bench/run`, which writes \
         `bench/results/replicas.md`.\n"
    );
    let settings = [
        (
            Rule::Aof,
            &results.durable,
            "the primary's and one replica's",
        ),
        (Rule::AofLocal, &results.durable_local, "the primary's own"),
    ];
    if settings
        .iter()
        .all(|(_, m, _)| m.uncontended.is_empty() && m.many_keys.is_empty())
    {
        let _ = writeln!(
            out,
            "Not measured in this run (see *Not measured in this run* below).\n"
        );
        return;
    }
    for (rule, m, files) in settings {
        durable_tables(out, &results.settings, rule, m, files);
    }
    let link = &results.durable.replica_link;
    let _ = writeln!(
        out,
        "The Valkey replica's link after the measurements: `master_link_status:{}`.\n",
        if link.is_empty() { "not read" } else { link }
    );
}

/// One setting of durable grants: its one-task and many-keys tables.
fn durable_tables(out: &mut String, s: &Settings, rule: Rule, m: &Measured, files: &str) {
    for (title, records) in [
        (
            format!(
                "One task, one key, for {:.1} s per run; grants in {files} append-only file.",
                s.uncontended_s
            ),
            &m.uncontended,
        ),
        (
            format!(
                "{} concurrent tasks, each cycling on its own key, for {:.1} s per run; grants \
                 in {files} append-only file.",
                s.many_tasks, s.many_s
            ),
            &m.many_keys,
        ),
    ] {
        if records.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}\n");
        cycle_table(out, &cycle_rows(records, rule), rule);
        let _ = writeln!(out);
    }
}

fn hot_table(out: &mut String, s: &Settings, records: &[Variant<HotRecord>]) {
    let _ = writeln!(
        out,
        "{} tasks contend for one key for {:.1} s per run, each holding it for \
         `tokio::time::sleep({} ms)`, as in section 3 (ours only: raw has no waiter).\n",
        replicas::HOT_TASKS,
        s.hot_window_s,
        s.hot_hold_ms
    );
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | with ÷ without, same run | p50 wait | p99 wait | max wait | mean hold | utilization | requests sent/acq | server cmds/acq | of them WAIT | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for waits in [false, true] {
        hot_row(out, records, waits);
    }
    let _ = writeln!(out);
}

/// One row of [`hot_table`]: the medians without or with the option.
fn hot_row(out: &mut String, records: &[Variant<HotRecord>], waits: bool) {
    let mine: Vec<&HotRecord> = records
        .iter()
        .filter(|v| v.waits == waits)
        .map(|v| &v.record)
        .collect();
    let Some(first) = mine.first() else { return };
    let to_without = waits
        .then(|| {
            paired(
                records,
                |v| v.waits,
                |m, o| !o.waits && o.record.run == m.record.run,
                |r| r.per_s,
            )
        })
        .flatten();
    let _ = writeln!(
        out,
        "| {} | {:.0} | {} | {} | {} | {} | {} | {:.2} | {} | {:.2} | {:.2} | {} |",
        replicas::label(first.contender, Rule::Replicas, waits),
        median(mine.iter().map(|r| r.per_s)),
        if waits {
            ratio(to_without)
        } else {
            "1.00×".to_owned()
        },
        ms(median(mine.iter().map(|r| r.p50_us as f64))),
        ms(median(mine.iter().map(|r| r.p99_us as f64))),
        ms(median(mine.iter().map(|r| r.max_us as f64))),
        ms(median(mine.iter().map(|r| r.mean_hold_us))),
        median(mine.iter().map(|r| r.utilization)),
        if mine.iter().all(|r| r.requests_per_acq.is_some()) {
            format!(
                "{:.2}",
                median(mine.iter().filter_map(|r| r.requests_per_acq))
            )
        } else {
            "–".to_owned()
        },
        median(mine.iter().map(|r| r.server_cmds_per_acq)),
        median(
            mine.iter()
                .map(|r| r.commands.get("wait") as f64 / r.acquisitions.max(1) as f64)
        ),
        mine.iter().map(|r| r.violations).sum::<u64>()
    );
}

/// The finding of section 8, for the Findings list: what waiting for one replica costs.
pub(crate) fn finding(m: &Measured) -> Option<String> {
    let rows = cycle_rows(&m.uncontended, Rule::Replicas);
    let ours = find(&rows, Contender::Api, true)?;
    let raw = find(&rows, Contender::Raw, true)?;
    let ours_plain = find(&rows, Contender::Api, false)?;
    let many = cycle_rows(&m.many_keys, Rule::Replicas);
    let many_note = match (
        find(&many, Contender::Api, true),
        find(&many, Contender::Raw, true),
    ) {
        (Some(ours), Some(raw)) => format!(
            " With {} tasks on distinct keys: ours {} of its rate without the option, raw \
             {}; ours {} raw with WAIT.",
            m.many_keys.first().map_or(0, |v| v.record.tasks),
            ratio(ours.to_without),
            ratio(raw.to_without),
            ratio(ours.to_raw)
        ),
        _ => String::new(),
    };
    // Whether ours keeps its distance to raw when both wait: then the option costs what the
    // replica's round trip costs anyone, and nothing of its own.
    let verdict = match (ours.to_raw, ours_plain.to_raw) {
        (Some(with), Some(without)) if (with / without - 1.0).abs() <= 0.10 => {
            "so the option costs what the replica's acknowledgement costs any client, and \
             no round trip of its own"
        }
        (Some(with), Some(without)) if with < without => {
            "so ours loses more to the option than raw does: more than the replica's \
             acknowledgement"
        }
        _ => "so ours loses less to the option than raw does",
    };
    Some(format!(
        "**What waiting for one replica costs.** With `wait_for_replicas(1, {} ms)` one \
         task's uncontended cycle runs at {} of its rate without the option ({} against {} \
         cycles/s), raw with a pipelined `WAIT 1` at {} of raw's; ours is {} raw with the \
         option and {} without, {verdict}.{many_note}",
        replicas::WAIT_TIMEOUT.as_millis(),
        ratio(ours.to_without),
        thousands(ours.per_s),
        thousands(ours_plain.per_s),
        ratio(raw.to_without),
        ratio(ours.to_raw),
        ratio(ours_plain.to_raw),
    ))
}

/// The finding of section 8's durable grants: whether the replica's append-only file
/// confirmed grants within the timeout, and what the primary's own costs.
pub(crate) fn durable_finding(results: &Results) -> Option<String> {
    let timeout = Rule::Aof.timeout().as_millis();
    let local_ms = Rule::AofLocal.timeout().as_millis();
    let replica = cycle_rows(&results.durable.uncontended, Rule::Aof);
    let ours = find(&replica, Contender::Api, true)?;
    let plain = find(&replica, Contender::Api, false)?;
    let raw = find(&replica, Contender::Raw, true);
    let mut note = format!(
        "**Durable grants.** With `wait_for_aof(true, 1, {timeout} ms)` on the Valkey pair, one \
         task confirmed {} cycles/s against {} without the option ({} tries failed over the \
         runs{}).",
        thousands(ours.per_s),
        thousands(plain.per_s),
        ours.busy,
        raw.map_or(String::new(), |raw| format!(
            "; raw with `WAITAOF 1 1 {timeout}`: {} cycles/s, {} failed",
            thousands(raw.per_s),
            raw.busy
        ))
    );
    if ours.per_s < 0.01 * plain.per_s {
        note.push_str(&format!(
            " The replica did not report the grants in its append-only file within {timeout} \
             ms, for ours and raw alike: durable grants that count a replica need a longer \
             timeout."
        ));
    }
    let local = cycle_rows(&results.durable_local.uncontended, Rule::AofLocal);
    if let (Some(ours), Some(raw)) = (
        find(&local, Contender::Api, true),
        find(&local, Contender::Raw, true),
    ) {
        note.push_str(&format!(
            " The primary's own file only (`wait_for_aof(true, 0, {local_ms} ms)`): ours at {} \
             of its rate without the option, raw with `WAITAOF 1 0` at {} of raw's; ours {} raw \
             with the option.",
            ratio(ours.to_without),
            ratio(raw.to_without),
            ratio(ours.to_raw)
        ));
    }
    Some(note)
}

#[cfg(test)]
mod tests {
    use super::{CycleRecord, Variant};
    use crate::report::document::tests::report;
    use crate::report::results::Results;

    #[test]
    fn section_8_says_when_durable_grants_were_not_measured() {
        let mut results = Results::empty();
        results
            .skipped
            .push("durable grants: no valkey-server (BENCH_AOF_URLS)".to_owned());
        let text = report(&results);
        let durable = text
            .find("### Durable grants")
            .unwrap_or_else(|| panic!("no durable grants in section 8:\n{text}"));
        assert!(text[durable..].contains("Not measured in this run"));
        assert!(text.contains("- durable grants: no valkey-server (BENCH_AOF_URLS)"));
    }

    fn cycle(
        contender: crate::contenders::Contender,
        waits: bool,
        per_s: f64,
        busy: u64,
    ) -> Variant<CycleRecord> {
        Variant {
            waits,
            record: CycleRecord {
                contender,
                run: 0,
                tasks: 1,
                cycles: per_s as u64,
                failures: busy,
                elapsed_s: 1.0,
                per_s,
                client_cpu_us_per_cycle: 50.0,
                client_switches_per_cycle: Some(2.0),
                server_cmds_per_cycle: 5.0,
                server_us_per_cycle: 20.0,
                requests_per_cycle: Some(2.0),
                commands: Default::default(),
            },
        }
    }

    #[test]
    fn the_findings_say_when_no_durable_grant_was_confirmed() {
        use crate::contenders::Contender::{Api, Raw};
        let mut results = Results::empty();
        results.durable.uncontended = vec![
            cycle(Api, false, 6_000.0, 0),
            cycle(Api, true, 0.0, 30),
            cycle(Raw, false, 9_000.0, 0),
            cycle(Raw, true, 0.0, 17),
        ];
        results.durable_local.uncontended = vec![
            cycle(Api, false, 6_000.0, 0),
            cycle(Api, true, 3_000.0, 0),
            cycle(Raw, false, 8_000.0, 0),
            cycle(Raw, true, 4_000.0, 0),
        ];
        let text = report(&results);
        let finding = text
            .lines()
            .find(|line| line.starts_with("- **Durable grants.**"))
            .unwrap_or_else(|| panic!("no finding on durable grants:\n{text}"));
        assert!(finding.contains("one task confirmed 0 cycles/s against 6,000 without"));
        assert!(finding.contains(
            "(30 tries failed over the runs; raw with `WAITAOF 1 1 1500`: 0 cycles/s, 17 failed)"
        ));
        assert!(finding.contains("need a longer timeout"));
        assert!(finding.contains("ours at 0.50× of its rate without the option, raw with `WAITAOF 1 0` at 0.50× of raw's; ours 0.75× raw"));
    }
}
