//! The README's code is the examples' code, verbatim: the lines between
//! `// README:start` and `// README:end` in each source below must appear in README.md as
//! one ```rust block, so the README cannot drift from code that compiles and is tested.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;

/// The files that hold a marked excerpt, relative to the workspace root: the README's first
/// example (Usage) and its web-service code.
const QUICK_START: &str = "examples/quick_start.rs";
const WEB_SHOP: &str = "examples/src/web_shop.rs";
const SCHEDULED_JOB: &str = "examples/src/scheduled_job.rs";
const START: &str = "// README:start";
const END: &str = "// README:end";

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The lines strictly between the markers, with their common indentation removed.
fn excerpt(source: &str) -> String {
    excerpt_of(source, "the source")
}

fn excerpt_of(source: &str, name: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let file = name;
    let marker = |marker: &str| {
        let found: Vec<usize> = (0..lines.len())
            .filter(|&at| lines[at].trim() == marker)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{file} must have exactly one `{marker}` line"
        );
        found[0]
    };
    let (start, end) = (marker(START), marker(END));
    assert!(start < end, "{file}: `{START}` must come before `{END}`");
    let body = &lines[start + 1..end];
    let indent = body
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|line| line.get(indent..).unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The contents of every fenced block whose info string starts with `rust`.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match &mut open {
            None if fence.starts_with("```rust") => open = Some(Vec::new()),
            None => {}
            Some(block) if fence.trim_end() == "```" => {
                blocks.push(block.join("\n"));
                open = None;
            }
            Some(block) => block.push(line.trim_end()),
        }
    }
    blocks
}

/// Fails unless README.md holds the marked excerpt of `source` as one ```rust block.
fn assert_readme_shows(source: &str) {
    let root = workspace_root();
    let code = std::fs::read_to_string(root.join(source)).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let expected = excerpt_of(&code, source);
    assert!(
        expected.lines().count() > 10,
        "the excerpt in {source} is nearly empty"
    );
    assert!(
        rust_blocks(&readme).contains(&expected),
        "README.md has no ```rust block equal to the lines between `{START}` and `{END}` in \
         {source}; replace the README's block with:\n\n```rust\n{expected}\n```\n"
    );
}

#[test]
fn readme_shows_the_web_shop_code_verbatim() {
    assert_readme_shows(WEB_SHOP);
}

/// The README's first example compiles as written: it is `examples/quick_start.rs`.
#[test]
fn readme_first_example_is_the_quick_start_example_verbatim() {
    assert_readme_shows(QUICK_START);
}

#[test]
fn readme_shows_the_scheduled_job_code_verbatim() {
    assert_readme_shows(SCHEDULED_JOB);
}

#[test]
fn the_excerpt_is_dedented_and_blocks_are_found() {
    let source =
        "fn a() {}\n    // README:start\n    let x = 1;\n\n        y();\n    // README:end\n";
    assert_eq!(excerpt(source), "let x = 1;\n\n    y();");
    let markdown = "text\n```rust\nlet x = 1;\n```\n```toml\na = 1\n```\n```rust,no_run\nb\n```\n";
    assert_eq!(rust_blocks(markdown), ["let x = 1;", "b"]);
}
