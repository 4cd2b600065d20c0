//! The packages as cargo sees them: the attribute crate is pinned to the runtime's exact
//! version, so an expansion never meets the `__private` of another release; and the
//! features are the ones the manifests declare, none made up by cargo for an optional
//! dependency.
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

/// The features `manifest` declares in its `[features]` table (`name = [...]` lines).
fn declared_features(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_features = false;
    let mut declared = Vec::new();
    for line in text.lines() {
        if line.starts_with('[') {
            in_features = line.trim_end() == "[features]";
        } else if in_features {
            let name = line.split('=').next().unwrap_or("").trim();
            let is_name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
            if line.contains('=') && !name.is_empty() && name.chars().all(is_name) {
                declared.push(name.to_owned());
            }
        }
    }
    declared
}

/// An optional dependency named nowhere with `dep:` becomes a public feature of its own
/// (cargo's implicit feature): a name users can turn on, and must keep being able to. Every
/// feature cargo shows is one the manifest declares, and every optional dependency is
/// reached through a `dep:` of a declared feature.
#[test]
fn no_optional_dependency_is_an_implicit_feature() {
    let metadata = metadata();
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        let declared = declared_features(package["manifest_path"].as_str().unwrap());
        let features = package["features"].as_object().unwrap();
        for feature in features.keys() {
            assert!(
                declared.contains(feature),
                "{name}: `{feature}` is a feature its Cargo.toml does not declare: an optional \
                 dependency named in no feature with `dep:{feature}`"
            );
        }
        for dependency in package["dependencies"].as_array().unwrap() {
            if dependency["optional"] != true {
                continue;
            }
            let dep = dependency["rename"]
                .as_str()
                .or(dependency["name"].as_str())
                .unwrap();
            let wanted = format!("dep:{dep}");
            let reached = features
                .values()
                .flat_map(|enables| enables.as_array().unwrap())
                .any(|enabled| enabled.as_str() == Some(wanted.as_str()));
            assert!(
                reached,
                "{name}: the optional dependency `{dep}` is named in no feature with `dep:{dep}`"
            );
        }
    }
}
