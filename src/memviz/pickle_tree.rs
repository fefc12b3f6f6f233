//! A pickle read into a tree whose shared objects stay shared: every object one node of an arena,
//! every memo reference (`GET`) the same node again. PyTorch's snapshots share one list of frames
//! between a block and its trace entries (and frames between lists), which serde-pickle's memo
//! loses after a first copy; this reader keeps them, for the stacks (`stacks.rs`).
//!
//! It knows the opcodes Python writes for plain data (dicts, lists, tuples, strings, numbers,
//! `None`, booleans, bytes; protocols 0 to 5); globals and the objects they build become an opaque
//! node. Anything else is an error (the caller then reads the pickle the other way).

use std::collections::HashMap;

/// One object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// `None`.
    None,
    /// An integer that fits in 128 bits (addresses are unsigned 64-bit).
    Int(i128),
    /// A string.
    Str(String),
    /// A list or tuple: its items.
    List(Vec<usize>),
    /// A dict: its items in order.
    Dict(Vec<(usize, usize)>),
    /// Anything else (floats, booleans, bytes, big integers, objects).
    Other,
}

/// The arena and the root object.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    /// Node `id`.
    pub fn node(&self, id: usize) -> &Node {
        &self.nodes[id]
    }

    /// The value of key `key` of dict `id`.
    pub fn get(&self, id: usize, key: &str) -> Option<usize> {
        match &self.nodes[id] {
            Node::Dict(items) => {
                items.iter().find(|(k, _)| matches!(&self.nodes[*k], Node::Str(s) if s == key)).map(|&(_, v)| v)
            }
            _ => None,
        }
    }

    /// The items of list `id` (empty for anything else).
    pub fn items(&self, id: usize) -> &[usize] {
        match &self.nodes[id] {
            Node::List(items) => items,
            _ => &[],
        }
    }

    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }
}

/// Why a pickle could not be read this way.
type Failed = String;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Failed> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or("the pickle ends early")?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn uint(&mut self, n: usize) -> Result<u64, Failed> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |v, &b| (v << 8) | b as u64))
    }

    fn sized(&mut self, width: usize) -> Result<&'a [u8], Failed> {
        let n = self.uint(width)?;
        self.take(usize::try_from(n).map_err(|_| "a length past the address space")?)
    }

    fn line(&mut self) -> Result<&'a str, Failed> {
        let rest = &self.bytes[self.at..];
        let n = rest.iter().position(|&b| b == b'\n').ok_or("a line without its end")?;
        self.at += n + 1;
        std::str::from_utf8(&rest[..n]).map_err(|_| "a line that is not UTF-8".into())
    }
}

/// A little-endian two's-complement integer (`LONG1`, `LONG4`), if it fits in 128 bits.
fn long(bytes: &[u8]) -> Node {
    if bytes.len() > 16 {
        return Node::Other;
    }
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    let mut buf = [if negative { 0xff } else { 0 }; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    Node::Int(i128::from_le_bytes(buf))
}

fn text(bytes: &[u8]) -> Result<Node, Failed> {
    String::from_utf8(bytes.to_vec()).map(Node::Str).map_err(|_| "a string that is not UTF-8".into())
}

/// Reads `bytes` (a whole pickle) into a tree; returns it and the root's node.
pub(crate) fn parse(bytes: &[u8]) -> Result<(Tree, usize), Failed> {
    let mut r = Reader { bytes, at: 0 };
    let mut tree = Tree::default();
    let mut stack: Vec<usize> = Vec::new();
    let mut marks: Vec<usize> = Vec::new();
    let mut memo: HashMap<u64, usize> = HashMap::new();
    loop {
        let op = r.take(1)?[0];
        let leaf = match op {
            0x80 => {
                r.take(1)?;
                None
            }
            0x95 => {
                r.take(8)?;
                None
            }
            b'.' => return stack.pop().map(|root| (tree, root)).ok_or_else(|| "an empty pickle".into()),
            b'(' => {
                marks.push(stack.len());
                None
            }
            b'0' => {
                stack.pop().ok_or("POP on an empty stack")?;
                None
            }
            b'1' => {
                let m = marks.pop().ok_or("POP_MARK without a mark")?;
                stack.truncate(m);
                None
            }
            b'2' => Some(*stack.last().ok_or("DUP on an empty stack")?),
            b'}' => Some(tree.push(Node::Dict(Vec::new()))),
            b']' | b')' => Some(tree.push(Node::List(Vec::new()))),
            b'N' => Some(tree.push(Node::None)),
            0x88 | 0x89 | b'G' | b'F' => {
                match op {
                    b'G' => drop(r.take(8)?),
                    b'F' => drop(r.line()?),
                    _ => {}
                }
                Some(tree.push(Node::Other))
            }
            b'J' => Some(tree.push(Node::Int(r.uint(4)? as u32 as i32 as i128))),
            b'K' => Some(tree.push(Node::Int(r.uint(1)? as i128))),
            b'M' => Some(tree.push(Node::Int(r.uint(2)? as i128))),
            0x8a => Some(tree.push(long(r.sized(1)?))),
            0x8b => Some(tree.push(long(r.sized(4)?))),
            b'I' | b'L' => {
                let line = r.line()?.trim_end_matches('L');
                Some(tree.push(line.parse().map(Node::Int).unwrap_or(Node::Other)))
            }
            0x8c => Some(tree.push(text(r.sized(1)?)?)),
            b'X' => Some(tree.push(text(r.sized(4)?)?)),
            0x8d => Some(tree.push(text(r.sized(8)?)?)),
            b'U' | b'C' => {
                r.sized(1)?;
                Some(tree.push(Node::Other))
            }
            b'T' | b'B' => {
                r.sized(4)?;
                Some(tree.push(Node::Other))
            }
            0x8e => {
                r.sized(8)?;
                Some(tree.push(Node::Other))
            }
            0x94 => {
                let top = *stack.last().ok_or("MEMOIZE on an empty stack")?;
                memo.insert(memo.len() as u64, top);
                None
            }
            b'p' | b'q' | b'r' => {
                let id = match op {
                    b'p' => r.line()?.parse().map_err(|_| "a bad PUT")?,
                    b'q' => r.uint(1)?,
                    _ => r.uint(4)?,
                };
                memo.insert(id, *stack.last().ok_or("PUT on an empty stack")?);
                None
            }
            b'g' | b'h' | b'j' => {
                let id = match op {
                    b'g' => r.line()?.parse().map_err(|_| "a bad GET")?,
                    b'h' => r.uint(1)?,
                    _ => r.uint(4)?,
                };
                Some(*memo.get(&id).ok_or("GET of an id never put")?)
            }
            _ => {
                containers(op, &mut r, &mut tree, &mut stack, &mut marks)?;
                None
            }
        };
        if let Some(node) = leaf {
            stack.push(node);
        }
    }
}

/// The opcodes that build or fill containers, and those that make objects (opaque nodes).
fn containers(
    op: u8,
    r: &mut Reader,
    tree: &mut Tree,
    stack: &mut Vec<usize>,
    marks: &mut Vec<usize>,
) -> Result<(), Failed> {
    let mut pop_mark = |stack: &mut Vec<usize>| -> Result<Vec<usize>, Failed> {
        let m = marks.pop().ok_or("a container without its mark")?;
        Ok(stack.split_off(m.min(stack.len())))
    };
    let pop = |stack: &mut Vec<usize>| stack.pop().ok_or_else(|| "an empty stack".to_string());
    match op {
        b't' | b'l' => {
            let items = pop_mark(stack)?;
            stack.push(tree.push(Node::List(items)));
        }
        0x85..=0x87 => {
            let n = (op - 0x84) as usize;
            let items = stack.split_off(stack.len().checked_sub(n).ok_or("a tuple of missing items")?);
            stack.push(tree.push(Node::List(items)));
        }
        b'd' => {
            let items = pop_mark(stack)?;
            let pairs = items.chunks_exact(2).map(|p| (p[0], p[1])).collect();
            stack.push(tree.push(Node::Dict(pairs)));
        }
        b'a' | b'e' => {
            let items = if op == b'a' { vec![pop(stack)?] } else { pop_mark(stack)? };
            let list = *stack.last().ok_or("APPEND without a list")?;
            match &mut tree.nodes[list] {
                Node::List(v) => v.extend(items),
                _ => return Err("APPEND to something not a list".into()),
            }
        }
        b's' | b'u' => {
            let items = if op == b's' {
                let v = pop(stack)?;
                vec![pop(stack)?, v]
            } else {
                pop_mark(stack)?
            };
            let dict = *stack.last().ok_or("SETITEM without a dict")?;
            match &mut tree.nodes[dict] {
                Node::Dict(d) => d.extend(items.chunks_exact(2).map(|p| (p[0], p[1]))),
                _ => return Err("SETITEM on something not a dict".into()),
            }
        }
        b'c' => {
            r.line()?;
            r.line()?;
            stack.push(tree.push(Node::Other));
        }
        0x93 | b'R' | 0x81 => {
            pop(stack)?;
            pop(stack)?;
            stack.push(tree.push(Node::Other));
        }
        b'b' => {
            pop(stack)?; // the state: the object stays opaque
        }
        _ => return Err(format!("opcode {op:#04x}, which this reader does not know")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_lists_stay_shared_and_values_read_as_pythons() {
        let frames = serde_json::json!([{"filename": "a.py", "line": 3, "name": "f"}]);
        let value = serde_json::json!({"n": -5, "big": 1u64 << 40, "addr": u64::MAX, "s": "é", "l": [frames.clone(), frames], "t": null});
        let bytes = serde_pickle::to_vec(&value, serde_pickle::SerOptions::new()).unwrap();
        let (t, root) = parse(&bytes).unwrap();
        assert_eq!(t.node(t.get(root, "n").unwrap()), &Node::Int(-5));
        assert_eq!(t.node(t.get(root, "big").unwrap()), &Node::Int(1 << 40));
        assert_eq!(t.node(t.get(root, "addr").unwrap()), &Node::Int(u64::MAX as i128));
        assert_eq!(t.node(t.get(root, "s").unwrap()), &Node::Str("é".into()));
        assert_eq!(t.node(t.get(root, "t").unwrap()), &Node::None);
        let l = t.items(t.get(root, "l").unwrap());
        let frame = t.items(l[1])[0];
        assert_eq!(t.node(t.get(frame, "line").unwrap()), &Node::Int(3));
        // Python's own pickle of one list used twice (protocol 4: MEMOIZE, BINGET): one node.
        let fixture = include_bytes!("../../tests/fixtures/pytorch_snapshot.pickle");
        let (t, root) = parse(fixture).unwrap();
        let entries = t.items(t.items(t.get(root, "device_traces").unwrap())[0]);
        let (a, b) = (t.get(entries[0], "frames").unwrap(), t.get(entries[5], "frames").unwrap());
        assert_eq!(a, b, "the shared list is one node");
        assert_eq!(t.items(a).len(), 2);
        for bad in [&b""[..], b"\x80\x02", b"\x80\x02h\x05.", b"\x80\x02\xff."] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
