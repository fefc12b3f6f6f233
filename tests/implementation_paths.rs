//! Every file IMPLEMENTATION.md names exists in the repository, so the design note cannot point at
//! a file that was renamed, split or never written (it once named `src/alloc/pickle.rs`).
//!
//! A path is any word with a file extension (`.rs`, `.cu`, `.py`, `.md`, `.toml`, `.csv`) or a
//! folder ending in `/`. One that starts with a top folder of the repository (`src/`, `tests/`,
//! …) or is a file at its root must exist there; in a row of a table, a bare name (`history.rs`)
//! lies in the folder of the last full path of its cell (`src/alloc/snapshot.rs`, `history.rs`);
//! elsewhere a shorter path (`runtime/work.rs`, `status.rs`) must be the end of some file's path.
//! `../` paths are outside the repository and not checked; names with `*` or `$` are patterns.

mod common;

use std::path::Path;

const EXTENSIONS: &[&str] = &["rs", "cu", "py", "md", "toml", "csv"];
const TOP: &[&str] = &["src/", "tests/", "examples/", "benches/", "bench/", "docs/", ".ci/"];

/// The repository's files (and folders, with a trailing `/`), relative to `root`.
fn repo_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            if rel == "target" || rel == ".git" {
                continue;
            }
            if path.is_dir() {
                out.push(format!("{rel}/"));
                dirs.push(path);
            } else {
                out.push(rel);
            }
        }
    }
    out
}

/// The words of `line` that look like paths.
fn paths(line: &str) -> Vec<&str> {
    let word = |c: char| c.is_ascii_alphanumeric() || "_./-*${}".contains(c);
    line.split(|c: char| !word(c))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| {
            let file = w.rsplit_once('.').is_some_and(|(stem, ext)| {
                EXTENSIONS.contains(&ext) && !stem.is_empty() && !stem.ends_with('/') && !stem.starts_with('.')
            });
            let folder = w.ends_with('/') && TOP.iter().any(|t| w.starts_with(t));
            (file || folder) && !w.contains(['*', '$', '{', '}'])
        })
        .collect()
}

/// The paths of `text` that name no file of `files`.
fn missing_paths(text: &str, files: &[String]) -> Vec<String> {
    let exists = |p: &str| files.iter().any(|f| f == p);
    let ends_with = |p: &str| files.iter().any(|f| f == p || f.ends_with(&format!("/{p}")));
    let rooted = |p: &str| TOP.iter().any(|t| p.starts_with(t)) || !p.contains('/');
    let mut missing = Vec::new();
    for line in text.lines() {
        let table = line.trim_start().starts_with('|');
        for cell in line.split('|') {
            let mut folder: Option<String> = None;
            for p in paths(cell) {
                if p.starts_with("../") {
                    continue;
                }
                let found = if TOP.iter().any(|t| p.starts_with(t)) {
                    folder =
                        Some(if p.ends_with('/') { p.to_string() } else { p[..=p.rfind('/').unwrap()].to_string() });
                    exists(p)
                } else if let (true, Some(dir)) = (table && !p.contains('/'), &folder) {
                    exists(&format!("{dir}{p}"))
                } else if rooted(p) && exists(p) {
                    true
                } else {
                    ends_with(p)
                };
                if !found {
                    missing.push(p.to_string());
                }
            }
        }
    }
    missing
}

#[test]
fn every_path_in_implementation_md_exists() {
    let root = &common::repo_root();
    let text = std::fs::read_to_string(root.join("IMPLEMENTATION.md")).unwrap();
    let files = repo_files(root);
    let named: usize = text.lines().map(|l| paths(l).len()).sum();
    assert!(named > 100, "the paths were read ({named})");
    let missing = missing_paths(&text, &files);
    assert!(missing.is_empty(), "IMPLEMENTATION.md names files that do not exist: {missing:?}");
}

#[test]
fn a_missing_path_is_reported() {
    let files: Vec<String> =
        ["src/", "src/alloc/", "src/alloc/snapshot.rs", "src/alloc/history.rs", "src/runtime/work.rs"]
            .map(String::from)
            .to_vec();
    let ok = "| snapshots | `src/alloc/snapshot.rs`, `history.rs` |\nthe door (`runtime/work.rs`), `src/alloc/`.\n";
    assert_eq!(missing_paths(ok, &files), Vec::<String>::new());
    let bad = "| pickles | `src/alloc/snapshot.rs`, `pickle.rs` |\n`src/alloc/gone.rs`; `runtime/nowhere.rs`, \
               `work.rs` and `src/nope/` but `../shared/DESIGN.md` and `cu/*.cu` are not checked.\n| x | `work.rs` |\n";
    assert_eq!(missing_paths(bad, &files), ["pickle.rs", "src/alloc/gone.rs", "runtime/nowhere.rs", "src/nope/"]);
}
