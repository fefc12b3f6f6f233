//! The fast walk against the system's unwinder: the same return addresses, frame for frame, on
//! the main test thread and on a spawned one, through recursion deeper than a stack keeps.

use super::{Stack, MAX_FRAMES};
use std::hint::black_box;
use std::sync::Arc;

/// The system unwinder's addresses from here outwards (its own frames first).
#[inline(never)]
fn system_stack() -> Vec<usize> {
    let mut ips = Vec::new();
    backtrace::trace(|f| {
        ips.push(f.ip() as usize);
        ips.len() < 256
    });
    ips
}

/// A capture and the system unwinder's stack, both taken in this function.
#[inline(never)]
fn both() -> (Stack, Vec<usize>) {
    let fast = black_box(Stack::capture());
    (fast, black_box(system_stack()))
}

/// Recurses `n` times, then captures both ways.
#[inline(never)]
fn deep(n: u32) -> (Stack, Vec<usize>) {
    let r = if n == 0 { both() } else { deep(black_box(n - 1)) };
    black_box(r)
}

/// The capture's frames from its caller's caller on (the first two are the capture's own
/// instruction and its return into `both`, which calls the system unwinder from another place)
/// are the system unwinder's, in order.
fn check_agree(fast: &Stack, system: &[usize]) {
    let ips = fast.ips();
    assert!(ips.len() >= 4, "{fast:?}");
    let from = system.iter().position(|&ip| ip == ips[2]).unwrap_or_else(|| panic!("{fast:?} vs {system:x?}"));
    let rest = &system[from..];
    let n = (ips.len() - 2).min(rest.len());
    assert_eq!(&ips[2..2 + n], &rest[..n], "{fast:?} vs {system:x?}");
}

#[test]
fn the_capture_gives_the_system_unwinders_return_addresses() {
    let (fast, system) = both();
    check_agree(&fast, &system);
    let (fast, system) = std::thread::spawn(both).join().unwrap();
    check_agree(&fast, &system);
}

#[test]
fn a_deep_stack_keeps_its_innermost_frames() {
    let (fast, system) = deep(40);
    assert_eq!(fast.ips().len(), MAX_FRAMES);
    check_agree(&fast, &system);
    // The frames past `both` are all `deep`'s own return address into itself.
    let inner = fast.ips()[3];
    assert!(fast.ips()[3..].iter().all(|&ip| ip == inner), "{fast:?}");
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_fast_walk_runs_on_x86_64_linux() {
    let mut ips = Vec::new();
    let walked = super::walk::capture(|ip| {
        ips.push(ip);
        ips.len() < MAX_FRAMES
    });
    assert!(walked, "the walk fell back to the system's unwinder");
    assert!(ips.len() > 2, "{ips:x?}");
}

#[inline(never)]
fn shared_here() -> Arc<Stack> {
    black_box(Stack::capture_shared())
}

#[test]
fn equal_captures_share_one_allocation_and_others_do_not() {
    // Two lines capturing in turn (an allocation and a free in a loop): two stacks in all.
    // The count is opaque, so that a release build keeps one loop (an unrolled loop's calls
    // would be separate call sites, and so different stacks).
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..black_box(3) {
        a.push(shared_here());
        b.push(black_box(Stack::capture_shared()));
    }
    assert!(a.iter().all(|s| Arc::ptr_eq(s, &a[0])), "{a:?}");
    assert!(b.iter().all(|s| Arc::ptr_eq(s, &b[0])), "{b:?}");
    assert_ne!(a[0].ips(), b[0].ips());
}
