//! A small Python-like value tree, written out as JSON or as a pickle.

use std::fmt::Write;

/// A value as Python would hold it: what snapshots and statistics are exported as.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None` / `null`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer (wide enough for any address or byte count).
    Int(i128),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<Value>),
    /// A tuple (a JSON array).
    Tuple(Vec<Value>),
    /// A dict with string keys, in insertion order.
    Dict(Vec<(String, Value)>),
}

impl Value {
    /// A string value.
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    /// An integer value.
    pub fn int(v: impl Into<i128>) -> Value {
        Value::Int(v.into())
    }

    /// The value of `key` in a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value as JSON text (compact).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_json(self, &mut out);
        out
    }

    /// The value as a protocol-2 pickle (Python's `pickle.load` reads it).
    pub fn to_pickle(&self) -> Vec<u8> {
        super::pickle::to_pickle(self)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Int(v as i128)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v as i128)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_string())
    }
}

fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::None => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) if f.is_finite() => {
            let _ = write!(out, "{f:?}");
        }
        Value::Float(_) => out.push_str("null"),
        Value::Str(s) => write_json_str(s, out),
        Value::List(items) | Value::Tuple(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Dict(items) => {
            out.push('{');
            for (i, (k, item)) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_str(k, out);
                out.push(':');
                write_json(item, out);
            }
            out.push('}');
        }
    }
}

fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text() {
        let v = Value::Dict(vec![
            ("a".into(), Value::List(vec![Value::Int(1), Value::Int(-(1 << 70)), Value::None])),
            ("s\"".into(), Value::str("x\ny\u{1}")),
            ("t".into(), Value::Tuple(vec![Value::Bool(true), Value::Float(1.5), Value::Float(f64::NAN)])),
        ]);
        assert_eq!(v.to_json(), r#"{"a":[1,-1180591620717411303424,null],"s\"":"x\ny\u0001","t":[true,1.5,null]}"#);
        assert_eq!(v.get("s\""), Some(&Value::str("x\ny\u{1}")));
        assert_eq!(v.get("missing"), None);
    }
}
