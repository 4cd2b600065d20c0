//! One source per reference table: the attribute's options are documented in one table, on
//! `#[distributed_lock]` (lock-macros/src/lib.rs), the errors in one table, on `LockError`
//! (lock-runtime/src/error.rs), and the events in one table, in the `telemetry` module
//! (lock-runtime/src/telemetry.rs, whose unit test holds it to the events the crate emits).
//! These tests read the sources: every option the attribute's parser accepts has a row,
//! every variant of `LockError` has a row, no other document copies a table, and an event a
//! document names is one the events table lists, at that level.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::PathBuf;

fn read(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path))
        .unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

/// The leading identifier of `text` (letters, digits, `_`), if any.
fn identifier(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (end > 0).then(|| &text[..end])
}

/// The names the attribute's parser accepts, read from lock-macros/src/attr.rs: its
/// `custom_keyword!`s, the string arms of the `match` that ends in the "unknown option"
/// error, and the list that error prints.
fn accepted_options() -> BTreeSet<String> {
    let source = read("lock-macros/src/attr.rs");
    let mut names = BTreeSet::new();
    for (at, _) in source.match_indices("custom_keyword!(") {
        let rest = &source[at + "custom_keyword!(".len()..];
        names.extend(identifier(rest.trim_start()).map(str::to_owned));
    }
    if let Some(unknown) = source.find("unknown option") {
        let before = &source[..unknown];
        let arms = &before[before.rfind("match ").unwrap_or(0)..];
        for line in arms.lines() {
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix('"')
                && let Some((name, after)) = rest.split_once('"')
                && after.trim_start().starts_with("=>")
            {
                names.insert(name.to_owned());
            }
        }
    }
    if let Some(at) = source.find("const OPTION_NAMES") {
        let rest = &source[at..];
        let list = &rest[rest.find('"').unwrap() + 1..];
        let list = &list[..list.find('"').unwrap()];
        names.extend(list.split(',').map(|name| name.trim().to_owned()));
    }
    names
}

/// The rows of the first Markdown table in `lines` whose header starts with `header`: the
/// leading identifier of each row's first cell (`` `ttl = "10s"` `` is `ttl`,
/// ``[`Busy`](Self::Busy)`` is `Busy`).
fn table_rows(lines: &[&str], header: &str) -> Vec<String> {
    let start = lines
        .iter()
        .position(|line| line.starts_with(header))
        .unwrap_or_else(|| panic!("no table with the header `{header}`"));
    lines[start + 2..]
        .iter()
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| {
            let cell = line.trim_start_matches('|').trim_start();
            identifier(cell.trim_start_matches(['[', '`']))
        })
        .map(str::to_owned)
        .collect()
}

/// The text of the `///` doc lines of a source file, without the markers.
fn doc_lines(source: &str) -> Vec<&str> {
    source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("///"))
        .map(str::trim_start)
        .collect()
}

/// The variants of `pub enum LockError`, read from lock-runtime/src/error.rs.
fn lock_error_variants() -> BTreeSet<String> {
    let source = read("lock-runtime/src/error.rs");
    let body = &source[source
        .find("pub enum LockError {")
        .expect("pub enum LockError")..];
    let body = &body[..body.find("\n}").unwrap()];
    body.lines()
        .skip(1)
        .filter(|line| line.starts_with("    ") && !line.starts_with("     "))
        .map(str::trim)
        .filter(|line| !line.starts_with("//") && !line.starts_with('#'))
        .filter_map(identifier)
        .map(str::to_owned)
        .collect()
}

const OPTIONS_HEADER: &str = "| option | meaning | default |";
const ERRORS_HEADER: &str = "| variant | when | what to do |";
/// The metrics table is the `telemetry` module's; its copies, old and new.
const METRICS_HEADERS: [&str; 2] = ["| name | kind | labels |", "| metric | kind | labels |"];
/// The HTTP mapping is the errors table's "with axum" column; the old copy's header.
const HTTP_HEADER: &str = "| error | status | why |";
/// The events table is the `telemetry` module's; its header, and the old copy's.
const EVENTS_HEADERS: [&str; 2] = [
    "| level | event | fields | means |",
    "| level | event | means |",
];
/// The levels of `tracing` events, as the events table writes them.
const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// The documents users read, where a copy of a reference table could sit.
const DOCUMENTS: [&str; 14] = [
    "README.md",
    "lock-runtime/README.md",
    "lock-macros/README.md",
    "lock-runtime/src/lib.rs",
    "lock-runtime/src/guide/mod.rs",
    "lock-runtime/src/guide/choosing.md",
    "lock-runtime/src/guide/fencing.md",
    "lock-runtime/src/guide/web.md",
    "lock-runtime/src/guide/patterns.md",
    "lock-runtime/src/guide/deployments.md",
    "lock-runtime/src/guide/operations.md",
    "lock-runtime/src/http.rs",
    "docs/internals.md",
    "RELIABILITY.md",
];

#[test]
fn every_option_the_attribute_accepts_has_a_row_in_its_table() {
    let accepted = accepted_options();
    assert!(
        accepted.len() >= 10 && accepted.contains("key") && accepted.contains("ttl"),
        "could not read the accepted options from lock-macros/src/attr.rs: {accepted:?}"
    );
    let docs = read("lock-macros/src/lib.rs");
    let rows: BTreeSet<String> = table_rows(&doc_lines(&docs), OPTIONS_HEADER)
        .into_iter()
        .collect();
    let missing: Vec<&String> = accepted.difference(&rows).collect();
    assert!(
        missing.is_empty(),
        "the options table on #[distributed_lock] (lock-macros/src/lib.rs) has no row for \
         {missing:?}; add a row `| \\`name = ...\\` | meaning | default |`"
    );
    let unknown: Vec<&String> = rows.difference(&accepted).collect();
    assert!(
        unknown.is_empty(),
        "the options table documents {unknown:?}, which the parser does not accept"
    );
}

#[test]
fn every_lock_error_variant_has_a_row_in_its_table() {
    let variants = lock_error_variants();
    assert!(
        variants.len() >= 10 && variants.contains("Busy") && variants.contains("InvalidUrl"),
        "could not read the variants of LockError from lock-runtime/src/error.rs: {variants:?}"
    );
    let source = read("lock-runtime/src/error.rs");
    let rows: BTreeSet<String> = table_rows(&doc_lines(&source), ERRORS_HEADER)
        .into_iter()
        .collect();
    let missing: Vec<&String> = variants.difference(&rows).collect();
    assert!(
        missing.is_empty(),
        "the table on LockError (lock-runtime/src/error.rs) has no row for {missing:?}; add \
         `| [\\`Name\\`](Self::Name) | when | what to do | with axum |`"
    );
    let unknown: Vec<&String> = rows.difference(&variants).collect();
    assert!(
        unknown.is_empty(),
        "the table on LockError lists {unknown:?}, which are not variants"
    );
}

/// The user documents link the two tables instead of copying them.
#[test]
fn no_other_document_copies_a_reference_table() {
    for path in DOCUMENTS {
        let text = read(path);
        for line in text.lines() {
            let line = line.trim_start().trim_start_matches("//!").trim_start();
            for header in [OPTIONS_HEADER, ERRORS_HEADER, HTTP_HEADER]
                .into_iter()
                .chain(METRICS_HEADERS)
                .chain(EVENTS_HEADERS)
            {
                assert!(
                    !line.starts_with(header),
                    "{path} copies a reference table (`{header}`); link \
                     `distributed_lock`, `LockError` or `telemetry` instead"
                );
            }
            // A row that starts with a level is a row of the events table, whatever the
            // table's heading.
            let first = line.strip_prefix('|').and_then(|row| row.split('|').next());
            assert!(
                !first.is_some_and(|cell| LEVELS.contains(&cell.trim())),
                "{path} copies a row of the events table: {line}\nlink `telemetry` instead"
            );
        }
    }
}

#[test]
fn the_readers_see_rows_as_written() {
    let lines = [
        "| option | meaning | default |",
        "|---|---|---|",
        "| `key = \"a\"` | x | required |",
        "| `mode = \"read\"` / `\"write\"` | y | |",
        "",
        "| variant | when | what to do | with `axum` |",
        "|---|---|---|---|",
        "| [`Busy`](Self::Busy) | held | wait | 429 |",
    ];
    assert_eq!(table_rows(&lines, OPTIONS_HEADER), ["key", "mode"]);
    assert_eq!(table_rows(&lines, ERRORS_HEADER), ["Busy"]);
}

/// The features lock-runtime's manifest declares for applications (not `default`, not
/// `docs`, which only renders this list).
fn user_features() -> BTreeSet<String> {
    let manifest = read("lock-runtime/Cargo.toml");
    let section = &manifest[manifest.find("[features]").expect("[features]")..];
    section
        .lines()
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter(|line| !line.starts_with('#') && line.contains('='))
        .filter_map(|line| line.split('=').next())
        .map(str::trim)
        .filter(|name| !matches!(*name, "default" | "docs"))
        .map(str::to_owned)
        .collect()
}

/// The features list has one source, lock-runtime's `[features]` table (rendered into the
/// crate's front page from it): the README's table and the front page's plain fallback
/// name exactly those features.
#[test]
fn the_features_lists_name_what_the_manifest_declares() {
    let declared = user_features();
    assert!(
        declared.contains("cluster") && declared.contains("metrics"),
        "could not read lock-runtime's features: {declared:?}"
    );
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let rows: BTreeSet<String> = table_rows(&lines, "| feature | what it adds |")
        .into_iter()
        .map(|row| row.replace('_', "-"))
        .collect();
    // Feature names have dashes, which `identifier` stops at: compare the first word.
    let first = |name: &String| name.split('-').next().unwrap_or("").to_owned();
    let declared_first: BTreeSet<String> = declared.iter().map(first).collect();
    assert_eq!(
        rows, declared_first,
        "README's features table and lock-runtime/Cargo.toml differ"
    );
    let lib = read("lock-runtime/src/lib.rs");
    let fallback = &lib[lib.find("as docs.rs does:").expect("the features fallback")..];
    let fallback = &fallback[..fallback.find(')').unwrap_or(fallback.len())];
    for name in &declared {
        assert!(
            fallback.contains(&format!("`{name}`")),
            "lib.rs's features fallback does not name `{name}`"
        );
    }
    let named = fallback.matches('`').count() / 2;
    assert_eq!(
        named,
        declared.len(),
        "lib.rs's features fallback names other features: {fallback}"
    );
}

/// The rows of the events table in the `telemetry` module: each row's level and the names
/// of its events (a name is the start of an event's message; `…` stands for a part that
/// varies).
fn event_names() -> Vec<(String, String)> {
    let source = read("lock-runtime/src/telemetry.rs");
    let lines: Vec<&str> = source
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = lines
        .iter()
        .position(|line| line.starts_with(EVENTS_HEADERS[0]))
        .expect("the events table in lock-runtime/src/telemetry.rs");
    let mut names = Vec::new();
    for line in lines[start + 2..]
        .iter()
        .take_while(|line| line.starts_with('|'))
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let level = cells[0].trim().to_owned();
        for name in cells[1].split('`').skip(1).step_by(2) {
            names.push((level.clone(), name.to_owned()));
        }
    }
    names
}

/// Whether `phrase` can be the start of a message that `name` names, or the reverse: the
/// name's parts in order, each `…` of the name standing for any text that the phrase goes
/// on after.
fn fits(name: &[&str], phrase: &str) -> bool {
    let Some((first, rest)) = name.split_first() else {
        return true;
    };
    if phrase.len() <= first.len() {
        return first.starts_with(phrase);
    }
    let Some(phrase) = phrase.strip_prefix(first) else {
        return false;
    };
    // What `…` stands for does not end the phrase: the phrase reaches the name's next part.
    rest.iter().all(|part| part.is_empty())
        || (0..phrase.len())
            .filter(|&at| phrase.is_char_boundary(at))
            .any(|at| fits(rest, &phrase[at..]))
}

/// The events the documents name, as a level word followed by a code span (`a WARN
/// \`lock lost\``, `one INFO (\`the Redis server answers again …\`)`): each level and
/// phrase, the phrase cut at its first `…`.
fn named_events(text: &str) -> Vec<(String, String)> {
    let text = text
        .lines()
        .map(|line| line.trim_start().trim_start_matches("//!").trim())
        .collect::<Vec<_>>()
        .join(" ");
    let mut named = Vec::new();
    for level in LEVELS {
        for (at, _) in text.match_indices(level) {
            if text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '`') {
                continue;
            }
            let after = text[at + level.len()..]
                .strip_prefix('s')
                .unwrap_or(&text[at + level.len()..]);
            let after = after.trim_start().trim_start_matches('(');
            let Some(span) = after.strip_prefix('`') else {
                continue;
            };
            let phrase = &span[..span.find('`').unwrap_or(0)];
            let phrase = phrase.split('…').next().unwrap_or("").trim_end();
            named.push((level.to_owned(), phrase.to_owned()));
        }
    }
    named
}

/// An event a document names by its message is one the events table lists at that level.
#[test]
fn the_events_the_documents_name_are_in_the_events_table() {
    let names = event_names();
    assert!(
        names.len() > 30 && names.contains(&("WARN".to_owned(), "lock lost".to_owned())),
        "could not read the events table: {names:?}"
    );
    let mut checked = 0;
    for path in DOCUMENTS {
        for (level, phrase) in named_events(&read(path)) {
            let listed = names.iter().any(|(listed_level, name)| {
                *listed_level == level && fits(&name.split('…').collect::<Vec<_>>(), &phrase)
            });
            assert!(
                listed,
                "{path} names the {level} event `{phrase}`, which the events table in \
                 lock-runtime/src/telemetry.rs does not list at {level}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "found too few events named in the documents: {checked}"
    );
}

#[test]
fn the_event_readers_see_mentions_as_written() {
    let named = named_events(
        "a WARN\n`lock lost` and one INFO (`the Redis server\nanswers again …`), `INFO x`",
    );
    assert_eq!(
        named,
        [
            (
                "INFO".to_owned(),
                "the Redis server answers again".to_owned()
            ),
            ("WARN".to_owned(), "lock lost".to_owned()),
        ]
    );
    let name: Vec<&str> = "the … answers again".split('…').collect();
    assert!(fits(&name, "the Redis server answers again"));
    assert!(fits(&name, "the Redis server answers again after 2 s"));
    assert!(!fits(&name, "the Redis server is down"));
    assert!(fits(&["lock lost"], "lock lost: the token is gone"));
    assert!(!fits(&["lock lost"], "lock busy"));
}
