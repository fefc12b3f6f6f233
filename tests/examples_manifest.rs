//! Every example is declared in Cargo.toml with `harness = false`: built as a test target (as
//! `cargo test --all-targets` builds it, and as the GPU machines run the gathered executables), an
//! example without it is an empty libtest harness that exits 0 without running the example.

/// The `[[example]]` tables of the manifest: each one's name and whether it sets `harness = false`.
fn declared_examples(manifest: &str) -> Vec<(String, bool)> {
    manifest
        .split("[[")
        .filter_map(|table| table.strip_prefix("example]]"))
        .map(|body| {
            let body = body.split("\n[").next().unwrap_or("");
            let value = |key: &str| {
                body.lines().find_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
                })
            };
            (value("name").unwrap_or_default(), value("harness").as_deref() == Some("false"))
        })
        .collect()
}

#[test]
fn every_example_runs_its_main_when_built_as_a_test_target() {
    let declared = declared_examples(include_str!("../Cargo.toml"));
    // The examples folder, relative to the package root (cargo's and the GPU machines' working folder).
    let mut files: Vec<String> = std::fs::read_dir("examples")
        .expect("run from the package root: the examples folder is read from there")
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".rs").map(str::to_string))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no examples found");
    for name in &files {
        let entry = declared.iter().find(|(n, _)| n == name);
        assert!(
            matches!(entry, Some((_, true))),
            "examples/{name}.rs needs `[[example]] name = \"{name}\" harness = false` in Cargo.toml \
             (declared: {entry:?})"
        );
    }
}

#[test]
fn the_manifest_reader_sees_harness_settings() {
    let manifest = "[[example]]\nname = \"a\"\nharness = false\n\n[[example]]\nname = \"b\"\n\n[[bench]]\nname = \"c\"\nharness = false\n";
    assert_eq!(declared_examples(manifest), vec![("a".to_string(), true), ("b".to_string(), false)]);
}
