//! The crate documentation's torch.cuda ↔ cudasem map (src/lib.rs) names every function that
//! `cudasem::cuda` exports, so no family (the memory one was missing) drops out of it.

mod common;

#[test]
fn the_torch_cuda_map_names_every_function_of_cuda() {
    let root = common::repo_root();
    let cuda = std::fs::read_to_string(root.join("src/cuda.rs")).unwrap();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let map: String = lib.lines().filter(|l| l.starts_with("//! |")).collect::<Vec<_>>().join("\n");
    // The top-level re-exports (before the `memory` submodule).
    let exports = &cuda[..cuda.find("pub mod memory").unwrap_or(cuda.len())];
    let mut names = Vec::new();
    for item in exports.split("pub use ").skip(1) {
        let item = &item[..item.find(';').unwrap()];
        let list = item.rsplit_once('{').map_or(item.rsplit("::").next().unwrap(), |(_, l)| l.trim_end_matches('}'));
        names.extend(list.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string));
    }
    let functions: Vec<&String> = names.iter().filter(|n| n.starts_with(|c: char| c.is_ascii_lowercase())).collect();
    assert!(functions.len() > 30, "the re-exports were read: {names:?}");
    let missing: Vec<&&String> = functions
        .iter()
        .filter(|f| {
            !map.match_indices(&format!("cuda::{f}"))
                .any(|(i, m)| !map[i + m.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
        .collect();
    assert!(missing.is_empty(), "cudasem::cuda functions missing from the map in src/lib.rs: {missing:?}");
    for memory in ["memory_allocated", "max_memory_reserved", "memory_stats", "empty_cache", "MemPool", "mem_get_info"]
    {
        assert!(map.contains(&format!("cuda::{memory}")), "{memory}");
    }
}
