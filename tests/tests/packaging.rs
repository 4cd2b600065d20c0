//! The two published crates as cargo sees them: the attribute crate is pinned to the
//! runtime's exact version, so an expansion never meets the `__private` of another release.
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Command;

fn metadata() -> serde_json::Value {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn package<'a>(metadata: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|package| package["name"] == name)
        .unwrap_or_else(|| panic!("no package {name}"))
}

#[test]
fn the_runtime_depends_on_exactly_its_own_version_of_the_attribute() {
    let metadata = metadata();
    let runtime = package(&metadata, "lock-runtime");
    let macros = package(&metadata, "lock-macros");
    assert_eq!(runtime["version"], macros["version"]);
    let dependency = runtime["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|dependency| dependency["name"] == "lock-macros")
        .unwrap();
    let version = macros["version"].as_str().unwrap();
    assert_eq!(
        dependency["req"].as_str().unwrap(),
        format!("={version}"),
        "lock-runtime must require lock-macros = \"={version}\""
    );
}
