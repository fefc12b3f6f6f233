//! A pickle writer (protocol 2) for [`Value`] trees: what `pickle.load` and PyTorch's
//! `memory_viz` read. Only the opcodes needed for plain data; no memo, no classes.

use super::value::Value;

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const BINUNICODE: u8 = b'X';
const MARK: u8 = b'(';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';

/// `value` as a protocol-2 pickle.
pub(crate) fn to_pickle(value: &Value) -> Vec<u8> {
    let mut out = vec![PROTO, 2];
    write(value, &mut out);
    out.push(STOP);
    out
}

fn write(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::None => out.push(NONE),
        Value::Bool(b) => out.push(if *b { NEWTRUE } else { NEWFALSE }),
        Value::Int(i) => write_int(*i, out),
        Value::Float(f) => {
            out.push(BINFLOAT);
            out.extend_from_slice(&f.to_be_bytes());
        }
        Value::Str(s) => write_str(s, out),
        Value::List(items) => {
            out.push(EMPTY_LIST);
            if !items.is_empty() {
                out.push(MARK);
                items.iter().for_each(|item| write(item, out));
                out.push(APPENDS);
            }
        }
        Value::Tuple(items) => {
            if items.is_empty() {
                out.push(EMPTY_TUPLE);
            } else {
                out.push(MARK);
                items.iter().for_each(|item| write(item, out));
                out.push(TUPLE);
            }
        }
        Value::Dict(items) => {
            out.push(EMPTY_DICT);
            if !items.is_empty() {
                out.push(MARK);
                for (k, item) in items {
                    write_str(k, out);
                    write(item, out);
                }
                out.push(SETITEMS);
            }
        }
    }
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(BINUNICODE);
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_int(i: i128, out: &mut Vec<u8>) {
    if (0..=0xff).contains(&i) {
        out.extend_from_slice(&[BININT1, i as u8]);
    } else if (0..=0xffff).contains(&i) {
        out.push(BININT2);
        out.extend_from_slice(&(i as u16).to_le_bytes());
    } else if let Ok(v) = i32::try_from(i) {
        out.push(BININT);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        // Little-endian two's complement, as short as keeps the sign.
        let mut bytes = i.to_le_bytes().to_vec();
        while bytes.len() > 1 {
            let (last, before) = (bytes[bytes.len() - 1], bytes[bytes.len() - 2]);
            if (last == 0 && before & 0x80 == 0) || (last == 0xff && before & 0x80 != 0) {
                bytes.pop();
            } else {
                break;
            }
        }
        out.extend_from_slice(&[LONG1, bytes.len() as u8]);
        out.extend_from_slice(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes() {
        assert_eq!(to_pickle(&Value::Int(5)), vec![0x80, 2, b'K', 5, b'.']);
        assert_eq!(to_pickle(&Value::Int(-1)), vec![0x80, 2, b'J', 0xff, 0xff, 0xff, 0xff, b'.']);
        // 2^31 needs a sign byte: 00 00 00 80 00.
        assert_eq!(to_pickle(&Value::Int(1 << 31)), vec![0x80, 2, 0x8a, 5, 0, 0, 0, 0x80, 0, b'.']);
        assert_eq!(to_pickle(&Value::Int(-(1 << 40))), vec![0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0, 0xff, b'.']);
        assert_eq!(to_pickle(&Value::List(vec![])), vec![0x80, 2, b']', b'.']);
        assert_eq!(
            to_pickle(&Value::Dict(vec![("a".into(), Value::None)])),
            vec![0x80, 2, b'}', b'(', b'X', 1, 0, 0, 0, b'a', b'N', b'u', b'.']
        );
    }
}
