//! The README's figures are what the commands it names print: the ResNet-50 replay's peak reserved
//! bytes and driver allocations (default settings and expandable segments), read from the
//! `cudasem replay` output and looked up in README.md.

mod common;

use std::process::Command;

fn replay(conf: &str) -> String {
    let o = Command::new(common::cudasem_binary())
        .args(["replay", "bench/traces/resnet50_train.csv", "--compare", "bench/traces/resnet50_train.pytorch.json"])
        .env("CUDASEM_ALLOC_CONF", conf)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .current_dir(common::repo_root())
        .output()
        .expect("the cudasem binary starts");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    text
}

/// The words after `label` on its line.
fn field<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no `{label}` in:\n{text}"));
    line[label.len()..].split_whitespace().collect()
}

#[test]
fn the_readmes_resnet50_figures_are_what_the_named_command_prints() {
    let readme = std::fs::read_to_string(common::repo_root().join("README.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(readme.contains(
        "`cudasem replay bench/traces/resnet50_train.csv --compare bench/traces/resnet50_train.pytorch.json`"
    ));

    let text = replay("");
    let reserved: f64 = field(&text, "peak reserved")[0].parse().unwrap();
    let gib = field(&text, "peak reserved")[1].trim_start_matches('(');
    let driver_allocs = field(&text, "driver allocs / frees")[0];
    let claim =
        format!("prints {:.2} GB ({gib} GiB) peak reserved and {driver_allocs} driver allocations", reserved / 1e9);
    assert!(readme.contains(&claim), "README.md should say `{claim}`:\n{text}");

    let text = replay("expandable_segments:True");
    let ratio: f64 = field(&text, "reserved / live requested")[0].parse().unwrap();
    let reserved: f64 = field(&text, "peak reserved")[0].parse().unwrap();
    let claim = format!("prints {ratio:.3} × the live bytes ({:.2} GB)", reserved / 1e9);
    assert!(readme.contains(&claim), "README.md should say `{claim}`:\n{text}");
}
