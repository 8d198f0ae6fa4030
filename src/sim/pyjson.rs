//! Output byte-compatible with Python's `json.dumps(obj, indent=4)`, which is how amd-smi prints
//! JSON: 4-space indent, `": "` after keys, non-ASCII escaped as `\uXXXX`, floats as Python's
//! repr (`96.0`), keys in insertion order.

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter, Serializer};
use std::io::{self, Write};

struct PyFormatter<'a>(PrettyFormatter<'a>);

impl Formatter for PyFormatter<'_> {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, s: &str) -> io::Result<()> {
        if s.is_ascii() {
            return w.write_all(s.as_bytes());
        }
        let mut buf = [0u16; 2];
        for c in s.chars() {
            if c.is_ascii() {
                w.write_all(&[c as u8])?;
            } else {
                for unit in c.encode_utf16(&mut buf) {
                    write!(w, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// Serialises like `json.dumps(value, indent=4)` plus the newline `print` adds.
pub fn dumps<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser =
        Serializer::with_formatter(&mut out, PyFormatter(PrettyFormatter::with_indent(b"    ")));
    if value.serialize(&mut ser).is_err() {
        return "{}\n".to_string();
    }
    out.push(b'\n');
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_layout() {
        let v = json!({"gpu": 0, "vram_total": {"value": 192.0, "unit": "GB"}, "l": [], "t": "°C"});
        assert_eq!(
            dumps(&v),
            "{\n    \"gpu\": 0,\n    \"vram_total\": {\n        \"value\": 192.0,\n        \"unit\": \"GB\"\n    },\n    \"l\": [],\n    \"t\": \"\\u00b0C\"\n}\n"
        );
    }

    #[test]
    fn byte_identical_to_a_fixture() {
        let text = include_str!(
            "../../tests/fixtures/amd-smi/synth-partition-c-m-json-8xmi300x-spx-nps1-rocm7.0.json"
        );
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(dumps(&v), text);
    }
}
