//! Bounds checked on a snapshot file before it is decoded: how deeply its values nest (serde's
//! decoders recurse once per level, so a file nested 100,000 deep would overflow the stack), and
//! which device indices it names.
//!
//! The pickle scan walks the opcodes without building any value: every container is a node
//! whose depth is raised as items go into it (through the memo too, so a list filled after it
//! was shared is counted where it is used), and a depth past [`MAX_DEPTH`] stops the scan.

use crate::error::{Error, Result};

/// The deepest nesting a snapshot file may have (PyTorch's own snapshots nest about 7 deep).
pub(crate) const MAX_DEPTH: u32 = 64;
/// The largest snapshot file read (4 GiB; PyTorch's, with stack frames, run to hundreds of MB).
pub(crate) const MAX_SNAPSHOT_BYTES: u64 = 4 << 30;
/// Device indices a snapshot may name: `0..MAX_DEVICES` (PyTorch's `DeviceIndex` is 8 bits).
pub(crate) const MAX_DEVICES: usize = 256;

fn too_deep() -> Error {
    Error::InvalidSnapshot { reason: format!("values nest deeper than {MAX_DEPTH} levels (the cap)") }
}

fn bad_pickle(reason: String) -> Error {
    Error::InvalidSnapshot { reason: format!("not a snapshot's pickle: {reason}") }
}

/// Checks that JSON text nests at most [`MAX_DEPTH`] arrays and objects deep (strings skipped).
pub(crate) fn check_json_depth(bytes: &[u8]) -> Result<()> {
    let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(too_deep());
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// A value on the scanned pickle's stack.
#[derive(Debug, Clone, Copy)]
enum Item {
    Mark,
    /// A scalar (depth 0).
    Leaf,
    /// A container: its index in [`Scan::nodes`].
    Node(usize),
}

#[derive(Debug, Default)]
struct Node {
    depth: u32,
    /// The containers holding this one.
    parents: Vec<usize>,
}

#[derive(Debug, Default)]
struct Scan {
    stack: Vec<Item>,
    nodes: Vec<Node>,
    memo: std::collections::HashMap<u64, Item>,
}

impl Scan {
    fn pop(&mut self) -> Result<Item> {
        match self.stack.pop() {
            Some(Item::Mark) | None => Err(bad_pickle("stack underflow".into())),
            Some(item) => Ok(item),
        }
    }

    fn pop_n(&mut self, n: usize) -> Result<Vec<Item>> {
        (0..n).map(|_| self.pop()).collect()
    }

    /// The items above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Item>> {
        let at = self.stack.iter().rposition(|i| matches!(i, Item::Mark));
        let at = at.ok_or_else(|| bad_pickle("no MARK on the stack".into()))?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items)
    }

    fn top(&self) -> Result<Item> {
        match self.stack.last() {
            Some(Item::Mark) | None => Err(bad_pickle("stack underflow".into())),
            Some(&item) => Ok(item),
        }
    }

    /// A new container holding `items`, pushed.
    fn push_new(&mut self, items: &[Item]) -> Result<()> {
        self.nodes.push(Node { depth: 1, parents: Vec::new() });
        let id = self.nodes.len() - 1;
        self.stack.push(Item::Node(id));
        self.adopt(Item::Node(id), items)
    }

    /// Puts `items` into `parent` (a scalar parent, an object built from a global, counts as a
    /// new container).
    fn adopt(&mut self, parent: Item, items: &[Item]) -> Result<()> {
        let Item::Node(p) = parent else { return Ok(()) };
        for item in items {
            if let Item::Node(c) = *item {
                self.nodes[c].parents.push(p);
                let d = self.nodes[c].depth + 1;
                self.raise(p, d)?;
            }
        }
        Ok(())
    }

    /// Raises `node` to at least `depth`, and its holders after it.
    fn raise(&mut self, node: usize, depth: u32) -> Result<()> {
        let mut work = vec![(node, depth)];
        while let Some((n, d)) = work.pop() {
            if d <= self.nodes[n].depth {
                continue;
            }
            if d > MAX_DEPTH {
                return Err(too_deep());
            }
            self.nodes[n].depth = d;
            work.extend(self.nodes[n].parents.iter().map(|&p| (p, d + 1)));
        }
        Ok(())
    }

    /// Replaces the top item by a container holding it (an object built from its state).
    fn wrap_top(&mut self, extra: &[Item]) -> Result<()> {
        let top = self.pop()?;
        let mut items = extra.to_vec();
        items.push(top);
        self.push_new(&items)
    }
}

/// Reads `n` bytes at `*at`, moving past them.
fn take<'a>(bytes: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8]> {
    let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or_else(|| bad_pickle("truncated".into()))?;
    let out = &bytes[*at..end];
    *at = end;
    Ok(out)
}

fn uint(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x))
}

/// Moves past a newline-terminated argument.
fn line<'a>(bytes: &'a [u8], at: &mut usize) -> Result<&'a [u8]> {
    let rest = &bytes[(*at).min(bytes.len())..];
    let n = rest.iter().position(|&b| b == b'\n').ok_or_else(|| bad_pickle("truncated".into()))?;
    *at += n + 1;
    Ok(&rest[..n])
}

/// Checks that a pickle (protocols 0 to 5) nests at most [`MAX_DEPTH`] containers deep, without
/// decoding it; an opcode it does not know is an error.
pub(crate) fn check_pickle_depth(bytes: &[u8]) -> Result<()> {
    let mut s = Scan::default();
    let mut at = 0;
    while at < bytes.len() {
        let op = bytes[at];
        at += 1;
        match op {
            b'.' => return Ok(()),
            b'(' => s.stack.push(Item::Mark),
            b'N' | 0x88 | 0x89 | 0x97 => s.stack.push(Item::Leaf),
            b'0' => drop(s.stack.pop()),
            b'1' => drop(s.pop_mark()?),
            b'2' => s.stack.push(s.top()?),
            b'}' | b']' | b')' | 0x8f => s.push_new(&[])?,
            b'l' | b't' | b'd' | 0x91 | b'o' => {
                let items = s.pop_mark()?;
                s.push_new(&items)?;
            }
            0x85..=0x87 => {
                let items = s.pop_n(usize::from(op - 0x84))?;
                s.push_new(&items)?;
            }
            b'a' | b'b' => {
                let item = s.pop()?;
                s.adopt(s.top()?, &[item])?;
            }
            b's' => {
                let items = s.pop_n(2)?;
                s.adopt(s.top()?, &items)?;
            }
            b'e' | b'u' | 0x90 => {
                let items = s.pop_mark()?;
                s.adopt(s.top()?, &items)?;
            }
            b'R' | 0x81 => {
                let args = s.pop()?;
                s.wrap_top(&[args])?;
            }
            0x92 => {
                let items = s.pop_n(2)?;
                s.wrap_top(&items)?;
            }
            0x93 => {
                s.pop_n(2)?;
                s.stack.push(Item::Leaf);
            }
            b'Q' => {
                s.pop()?;
                s.stack.push(Item::Leaf);
            }
            0x98 | 0x80 | 0x95 => {
                // READONLY_BUFFER changes nothing; PROTO's version and FRAME's length are skipped.
                let n = match op {
                    0x80 => 1,
                    0x95 => 8,
                    _ => 0,
                };
                take(bytes, &mut at, n)?;
            }
            b'p' | b'g' => {
                let key = line(bytes, &mut at)?;
                let key = std::str::from_utf8(key).ok().and_then(|k| k.trim().parse::<u64>().ok());
                let key = key.ok_or_else(|| bad_pickle("a memo key that is not a number".into()))?;
                memo(&mut s, op == b'p', key)?;
            }
            b'q' | b'h' | b'r' | b'j' => {
                let n = if matches!(op, b'q' | b'h') { 1 } else { 4 };
                let key = uint(take(bytes, &mut at, n)?);
                memo(&mut s, matches!(op, b'q' | b'r'), key)?;
            }
            0x94 => {
                let key = s.memo.len() as u64;
                s.memo.insert(key, s.top()?);
            }
            _ => scalar(bytes, &mut at, op, &mut s)?,
        }
    }
    Err(bad_pickle("no STOP opcode".into()))
}

/// `PUT` (store the top item) or `GET` (push the stored one).
fn memo(s: &mut Scan, put: bool, key: u64) -> Result<()> {
    if put {
        let top = s.top()?;
        s.memo.insert(key, top);
    } else {
        let item = *s.memo.get(&key).ok_or_else(|| bad_pickle(format!("memo key {key} was never stored")))?;
        s.stack.push(item);
    }
    Ok(())
}

/// Opcodes that push one scalar, their arguments skipped.
fn scalar(bytes: &[u8], at: &mut usize, op: u8, s: &mut Scan) -> Result<()> {
    match op {
        b'I' | b'L' | b'S' | b'V' | b'F' | b'P' => drop(line(bytes, at)?),
        b'c' => {
            line(bytes, at)?;
            line(bytes, at)?;
        }
        b'i' => {
            line(bytes, at)?;
            line(bytes, at)?;
            let items = s.pop_mark()?;
            return s.push_new(&items);
        }
        b'K' | 0x82 => drop(take(bytes, at, 1)?),
        b'M' | 0x83 => drop(take(bytes, at, 2)?),
        b'J' | 0x84 => drop(take(bytes, at, 4)?),
        b'G' => drop(take(bytes, at, 8)?),
        0x8a | b'U' | b'C' | 0x8c => {
            let n = uint(take(bytes, at, 1)?);
            take(bytes, at, n as usize)?;
        }
        0x8b | b'T' | b'X' | b'B' => {
            let n = uint(take(bytes, at, 4)?);
            take(bytes, at, usize::try_from(n).unwrap_or(usize::MAX))?;
        }
        0x8d | 0x8e | 0x96 => {
            let n = uint(take(bytes, at, 8)?);
            take(bytes, at, usize::try_from(n).unwrap_or(usize::MAX))?;
        }
        other => return Err(bad_pickle(format!("unknown opcode {other:#04x}"))),
    }
    s.stack.push(Item::Leaf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle of `depth` nested lists (`[[[...]]]`), protocol 2, with or without the memo.
    fn nested(depth: usize, memo: bool) -> Vec<u8> {
        let mut p = vec![0x80, 2];
        for i in 0..depth {
            p.push(b']');
            if memo {
                p.extend([b'q', i as u8]);
            }
        }
        p.extend(std::iter::repeat_n(b'a', depth - 1));
        p.push(b'.');
        p
    }

    #[test]
    fn pickle_depth_is_counted_before_decoding() {
        let ok = nested(MAX_DEPTH as usize, false);
        check_pickle_depth(&ok).unwrap();
        let v: serde_pickle::Value = serde_pickle::from_slice(&ok, Default::default()).unwrap();
        assert!(matches!(v, serde_pickle::Value::List(_)));
        for memo in [false, true] {
            let e = check_pickle_depth(&nested(MAX_DEPTH as usize + 1, memo)).unwrap_err();
            assert!(e.to_string().contains("deeper than 64"), "{e}");
            assert!(check_pickle_depth(&nested(100_000, memo)).is_err());
        }
    }

    #[test]
    fn a_list_filled_after_it_was_shared_counts_where_it_is_used() {
        // a = []; b = [a, a]; then 70 levels go into a through the memo; b is the value.
        let mut p = vec![0x80, 2, b']', b'q', 0, b']', b'q', 1, b'(', b'h', 0, b'h', 0, b'e', b'h', 0];
        p.extend(std::iter::repeat_n(b']', 70));
        p.extend(std::iter::repeat_n(b'a', 70));
        p.extend([b'0', b'.']);
        let v: serde_pickle::Value = serde_pickle::from_slice(&p, Default::default()).unwrap();
        assert!(matches!(v, serde_pickle::Value::List(ref l) if l.len() == 2), "{v:?}");
        assert!(check_pickle_depth(&p).is_err());
    }

    #[test]
    fn json_depth_skips_strings() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        check_json_depth(deep(MAX_DEPTH as usize).as_bytes()).unwrap();
        assert!(check_json_depth(deep(MAX_DEPTH as usize + 1).as_bytes()).is_err());
        check_json_depth(format!("{{\"k\": \"{}\\\"\"}}", "[".repeat(500)).as_bytes()).unwrap();
    }
}
