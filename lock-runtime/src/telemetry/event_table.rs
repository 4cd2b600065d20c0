//! The events table of the module's docs is the one list of the events the crate emits:
//! these tests read every `tracing` event out of the crate's sources and hold each against
//! the table's rows.

use std::collections::BTreeSet;
use std::path::Path;

/// One event as the source emits it.
#[derive(Debug)]
struct Emitted {
    file: String,
    level: String,
    /// The message with each `{…}` placeholder written `…`.
    message: String,
    fields: BTreeSet<String>,
}

/// One row of the table: its level, its event names, its fields.
#[derive(Debug)]
struct Row {
    level: String,
    names: Vec<String>,
    fields: BTreeSet<String>,
}

/// The header of the events table in the module's docs.
const EVENTS_HEADER: &str = "| level | event | fields | means |";

const LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

fn sources(dir: &Path, found: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
            found.push((path.display().to_string(), text));
        }
    }
}

/// The text of the source without its comments (`//` to the end of the line; block
/// comments are not used), string literals kept.
fn code_only(source: &str) -> String {
    source
        .lines()
        .map(|line| {
            let (mut in_string, mut escaped) = (false, false);
            let bytes = line.as_bytes();
            for (at, &byte) in bytes.iter().enumerate() {
                match byte {
                    _ if escaped => escaped = false,
                    b'\\' if in_string => escaped = true,
                    b'"' => in_string = !in_string,
                    b'/' if !in_string && bytes.get(at + 1) == Some(&b'/') => {
                        return &line[..at];
                    }
                    _ => {}
                }
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level arguments of the macro call whose `(` ends `text`'s prefix: `text` starts
/// just after the `(`.
fn arguments(text: &str) -> Vec<String> {
    let (mut args, mut current) = (Vec::new(), String::new());
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for c in text.chars() {
        if in_string {
            current.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => {
                args.push(current.trim().to_owned());
                return args.into_iter().filter(|arg| !arg.is_empty()).collect();
            }
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                args.push(std::mem::take(&mut current).trim().to_owned());
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    panic!("unclosed macro call: {text}");
}

/// A string literal's text: escapes read, a line continuation joined, each `{…}`
/// placeholder written `…`.
fn message(literal: &str) -> String {
    let inner = &literal[1..literal.len() - 1];
    let (mut text, mut chars) = (String::new(), inner.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => while chars.next_if(|c| c.is_whitespace()).is_some() {},
                Some('n') => text.push('\n'),
                Some(other) => text.push(other),
                None => {}
            },
            '{' | '}' if chars.peek() == Some(&c) => {
                chars.next();
                text.push(c);
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                text.push('…');
            }
            c => text.push(c),
        }
    }
    text
}

/// Every `tracing` event in the crate's sources (not in comments, not in this file).
fn emitted() -> Vec<Emitted> {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 20, "found too few sources: {}", files.len());
    let mut events = Vec::new();
    for (file, source) in files {
        if file.ends_with("event_table.rs") {
            continue;
        }
        let code = code_only(&source);
        for level in LEVELS {
            let unqualified = format!("{level}!(");
            for (at, _) in code.match_indices(&unqualified) {
                let before = &code[..at];
                assert!(
                    before.ends_with("tracing::")
                        || before.ends_with(|c: char| c.is_alphanumeric() || c == '_'),
                    "{file}: an event written `{level}!(..)`; write `tracing::{level}!(..)` \
                     so that the events table's test reads it"
                );
                if !before.ends_with("tracing::") {
                    continue;
                }
                let args = arguments(&code[at + unqualified.len()..]);
                let position = args
                    .iter()
                    .position(|arg| arg.starts_with('"'))
                    .unwrap_or_else(|| panic!("{file}: an event without a message: {args:?}"));
                let fields = args[..position]
                    .iter()
                    .map(|arg| {
                        let name = arg.split('=').next().unwrap_or(arg).trim();
                        name.trim_start_matches(['%', '?']).trim().to_owned()
                    })
                    .collect();
                events.push(Emitted {
                    file: file.clone(),
                    level: level.to_uppercase(),
                    message: message(&args[position]),
                    fields,
                });
            }
        }
    }
    events
}

/// The code spans of a table cell.
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The rows of the events table in the module's docs.
fn rows() -> Vec<Row> {
    let docs: Vec<&str> = include_str!("../telemetry.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = docs
        .iter()
        .position(|line| line.starts_with(EVENTS_HEADER))
        .expect("the events table");
    docs[start + 2..]
        .iter()
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 4, "a row of the events table: {line}");
            Row {
                level: cells[0].trim().to_owned(),
                names: spans(cells[1]),
                fields: spans(cells[2]).into_iter().collect(),
            }
        })
        .collect()
}

/// Whether `name` names `message`: it is the message, or the message's start up to a
/// word's end.
fn names(name: &str, message: &str) -> bool {
    message
        .strip_prefix(name)
        .is_some_and(|rest| !rest.starts_with(char::is_alphanumeric))
}

#[test]
fn the_events_table_lists_every_event_the_crate_emits() {
    let events = emitted();
    assert!(
        events.len() > 30 && events.iter().any(|event| event.message == "lock lost"),
        "could not read the crate's events: {events:#?}"
    );
    let rows = rows();
    let mut unlisted = Vec::new();
    let mut used = BTreeSet::new();
    let mut fields: Vec<BTreeSet<String>> = vec![BTreeSet::new(); rows.len()];
    for event in &events {
        // The longest name of the event's level that names it.
        let row = rows
            .iter()
            .enumerate()
            .filter(|(_, row)| row.level == event.level)
            .flat_map(|(index, row)| row.names.iter().map(move |name| (index, name)))
            .filter(|(_, name)| names(name, &event.message))
            .max_by_key(|(_, name)| name.len());
        match row {
            Some((index, name)) => {
                used.insert((index, name.clone()));
                fields[index].extend(event.fields.iter().cloned());
            }
            None => unlisted.push(event),
        }
    }
    let unlisted: Vec<String> = unlisted
        .iter()
        .map(|event| {
            let Emitted {
                file,
                level,
                message,
                fields,
            } = event;
            format!("{file}: {level} `{message}` {fields:?}")
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "events the table in telemetry.rs does not list (add a row, or the message's \
         start to a row of its level):\n{}",
        unlisted.join("\n")
    );
    for (index, row) in rows.iter().enumerate() {
        for name in &row.names {
            assert!(
                used.contains(&(index, name.clone())),
                "the events table lists {} `{name}`, which the crate does not emit",
                row.level
            );
        }
        assert_eq!(
            row.fields, fields[index],
            "the fields of the events table's row {:?} (left) are not those its events \
             have (right)",
            row.names
        );
    }
}

#[test]
fn the_reader_sees_events_as_written() {
    let source = "tracing::warn!(key = %names.lock(), ?outcome, found, \"lock {what} \\\n   lost: {{x}}\", what);";
    let at = source.find("warn!(").unwrap() + "warn!(".len();
    let args = arguments(&source[at..]);
    assert_eq!(args.len(), 5, "{args:?}");
    assert_eq!(message(&args[3]), "lock … lost: {x}");
    assert_eq!(code_only("a // b \"c\"\n\"//\" x"), "a \n\"//\" x");
    assert!(names("lock lost", "lock lost: the token is gone"));
    assert!(!names("lock lost", "lock lostness"));
}
