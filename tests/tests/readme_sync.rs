//! The READMEs against the code: the quick start is an example's code, verbatim (the lines
//! between `// README:start` and `// README:end` in `examples/quick_start.rs` must appear
//! as one ```rust block); the crates.io page says what the repository's README says; the
//! feature list and the minimum Rust version are Cargo.toml's. The README's other blocks
//! are complete programs that `scripts/check-readme-crate` builds as a new crate would.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;

/// The file whose marked excerpt is the README's first example.
const QUICK_START: &str = "examples/quick_start.rs";
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

/// The README's first example compiles as written: it is `examples/quick_start.rs`.
#[test]
fn readme_first_example_is_the_quick_start_example_verbatim() {
    assert_readme_shows(QUICK_START);
}

#[test]
fn the_excerpt_is_dedented_and_blocks_are_found() {
    let source =
        "fn a() {}\n    // README:start\n    let x = 1;\n\n        y();\n    // README:end\n";
    assert_eq!(excerpt(source), "let x = 1;\n\n    y();");
    let markdown = "text\n```rust\nlet x = 1;\n```\n```toml\na = 1\n```\n```rust,no_run\nb\n```\n";
    assert_eq!(rust_blocks(markdown), ["let x = 1;", "b"]);
}

/// The published crates and their crates.io pages (each one's own README).
const CRATES: [&str; 2] = ["lock-runtime", "lock-macros"];

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path))
        .unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

/// Each crate's page is its own README.md (`readme = "README.md"`), opens with the quick
/// start verbatim, and tells users which version to depend on.
#[test]
fn each_crate_readme_is_its_page_and_opens_with_the_quick_start() {
    let quick_start = excerpt_of(&read(QUICK_START), QUICK_START);
    for name in CRATES {
        let manifest = read(&format!("{name}/Cargo.toml"));
        assert!(
            manifest
                .lines()
                .any(|line| line.trim() == r#"readme = "README.md""#),
            "{name}/Cargo.toml must say readme = \"README.md\" (its own page, not the workspace's)"
        );
        let readme = read(&format!("{name}/README.md"));
        assert_eq!(
            rust_blocks(&readme).first(),
            Some(&quick_start),
            "{name}/README.md's first ```rust block must be the excerpt of {QUICK_START}"
        );
        let version = package_version();
        let minor = version.rsplit_once('.').unwrap().0;
        assert!(
            readme.contains(&format!("lock-runtime = \"{minor}\"")),
            "{name}/README.md must tell users to depend on lock-runtime = \"{minor}\""
        );
    }
}

/// The part of a README that both pages share: everything before the repository's own
/// links (the line `In this repository:` or `The source repository also holds`), with link
/// targets left out, since the crates.io page must link absolute URLs.
fn shared_part(readme: &str) -> String {
    let end = ["In this repository:", "The source repository also holds"]
        .iter()
        .filter_map(|marker| readme.find(marker))
        .min()
        .unwrap_or(readme.len());
    let mut text = String::new();
    let mut rest = &readme[..end];
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        rest = &rest[rest.find(')').unwrap_or(rest.len())..];
    }
    text.push_str(rest);
    text
}

/// The crates.io page of lock-runtime is the repository's README: the same text up to the
/// repository's own links.
#[test]
fn the_runtime_readme_is_the_repository_readme() {
    let repository = shared_part(&read("README.md"));
    let crate_page = shared_part(&read("lock-runtime/README.md"));
    assert!(
        repository.lines().count() > 100,
        "README.md's shared part is nearly empty"
    );
    if repository != crate_page {
        let line = repository
            .lines()
            .zip(crate_page.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(repository.lines().count().min(crate_page.lines().count()));
        panic!(
            "lock-runtime/README.md must say what README.md says (link targets aside) up to \
             the repository's own links; they differ at line {}:\n  README.md: {:?}\n  \
             lock-runtime/README.md: {:?}",
            line + 1,
            repository.lines().nth(line),
            crate_page.lines().nth(line)
        );
    }
}

/// The README is the front page a reader goes through in five minutes.
#[test]
fn the_readme_is_short() {
    for readme in ["README.md", "lock-runtime/README.md"] {
        let lines = read(readme).lines().count();
        assert!(
            lines <= 250,
            "{readme} has {lines} lines; the guide (lock-runtime/src/guide/) is the place \
             for more"
        );
    }
}

/// The workspace's version, `x.y.z`.
fn package_version() -> String {
    let manifest = read("Cargo.toml");
    let line = manifest
        .lines()
        .find(|line| line.starts_with("version = "))
        .expect("[workspace.package] version");
    line.trim_start_matches("version = ")
        .trim_matches('"')
        .to_owned()
}

/// Links on crates.io and docs.rs resolve against neither the repository nor the workspace:
/// every link in a crate's README is absolute.
#[test]
fn crate_readmes_link_only_absolute_urls() {
    for name in CRATES {
        let readme = read(&format!("{name}/README.md"));
        for (at, _) in readme.match_indices("](") {
            let target = &readme[at + 2..];
            let target = &target[..target.find(')').unwrap_or(target.len())];
            assert!(
                target.starts_with("https://"),
                "{name}/README.md links to `{target}`, which breaks on crates.io; link \
                 docs.rs or crates.io instead"
            );
        }
    }
}

/// lock-runtime's README lists every feature of its Cargo.toml meant for applications (the
/// ones with a `##` comment, which the docs' front page lists too), and no other.
#[test]
fn the_runtime_readme_lists_every_feature() {
    let manifest = read("lock-runtime/Cargo.toml");
    let table: Vec<&str> = manifest
        .lines()
        .skip_while(|line| line.trim() != "[features]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .collect();
    let features: Vec<&str> = table
        .windows(2)
        .filter(|pair| pair[0].starts_with("##"))
        .filter_map(|pair| pair[1].split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| !name.starts_with('#') && *name != "default")
        .collect();
    assert!(features.len() >= 4, "no features found in {features:?}");
    let readme = read("lock-runtime/README.md");
    let listed: Vec<&str> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|line| line.split_once("` |").map(|(name, _)| name))
        .collect();
    let mut expected = features.clone();
    expected.sort_unstable();
    let mut found = listed.clone();
    found.sort_unstable();
    assert_eq!(
        found, expected,
        "lock-runtime/README.md's features table (\"| `name` | ... |\") must name exactly \
         the features of lock-runtime/Cargo.toml"
    );
}

/// The docs' front page (lock-runtime's crate documentation) is read on docs.rs, where
/// the repository's files are not: it names none of them (`cohort.rs`, `lua/release.lua`,
/// `RELIABILITY.md`); it is short, and links every chapter of the guide and both reference
/// tables instead of copying them.
#[test]
fn the_docs_front_page_names_no_files_and_links_the_guide() {
    let lib = read("lock-runtime/src/lib.rs");
    let front: Vec<&str> = lib.lines().filter(|line| line.starts_with("//!")).collect();
    for line in &front {
        for file in [".rs`", ".rs ", ".rs)", ".lua", ".md"] {
            assert!(
                !line.contains(file),
                "the front page names a file (`{file}`), which docs.rs readers cannot open: \
                 {line}"
            );
        }
    }
    assert!(
        front.len() <= 120,
        "the front page has {} lines: it is a summary with links, the guide holds the rest",
        front.len()
    );
    let text = front.join("\n");
    for link in [
        "guide::choosing",
        "guide::fencing",
        "guide::web",
        "guide::patterns",
        "guide::deployments",
        "guide::operations",
        "distributed_lock",
        "LockError",
    ] {
        assert!(
            text.contains(&format!("({link})")) || text.contains(&format!("[`{link}`]")),
            "the front page does not link `{link}`"
        );
    }
}

/// The minimum Rust version the READMEs state is the workspace's `rust-version`
/// (which `scripts/check-msrv` checks against a fresh resolve in CI).
#[test]
fn the_readmes_state_the_workspace_rust_version() {
    let manifest = read("Cargo.toml");
    let msrv = manifest
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = "))
        .expect("rust-version in Cargo.toml")
        .trim_matches('"');
    for readme in ["README.md", "lock-runtime/README.md"] {
        let text = read(readme);
        let stated = ["Minimum Rust version: ", "**Rust "]
            .iter()
            .filter_map(|marker| text.split_once(marker))
            .map(|(_, rest)| {
                rest.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .next()
            })
            .next()
            .flatten();
        assert_eq!(
            stated,
            Some(msrv),
            "{readme} must state the minimum Rust version as Cargo.toml's rust-version"
        );
    }
}
