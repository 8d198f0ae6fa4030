//! amd-smi's human (non-JSON) layout, generated from the same JSON values: keys upper-cased,
//! 4-space nesting, `GPU: N` headers, `{"value","unit"}` as `60 %`, lists as `[a, b]`, a blank
//! line between GPUs.

use serde_json::Value;
use std::fmt::Write as _;

fn leaf(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("N/A".into()),
        Value::Object(m) if m.contains_key("value") && m.contains_key("unit") => {
            let val = leaf(&m["value"]).unwrap_or_default();
            let unit = m["unit"].as_str().unwrap_or("");
            let unit = if unit == "C" { "\u{b0}C" } else { unit };
            Some(if val == "N/A" {
                val
            } else {
                format!("{val} {unit}")
            })
        }
        Value::Array(a) if a.iter().all(|x| leaf(x).is_some()) => Some(format!(
            "[{}]",
            a.iter().filter_map(leaf).collect::<Vec<_>>().join(", ")
        )),
        _ => None,
    }
}

fn section(out: &mut String, key: &str, v: &Value, depth: usize) {
    let pad = "    ".repeat(depth);
    if let Some(l) = leaf(v) {
        let _ = writeln!(out, "{pad}{}: {l}", key.to_uppercase());
        return;
    }
    let _ = writeln!(out, "{pad}{}:", key.to_uppercase());
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                section(out, k, v, depth + 1);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                section(out, &i.to_string(), v, depth + 1);
            }
        }
        _ => {}
    }
}

/// Prints per-GPU objects (`{"gpu": N, ...}`) the way amd-smi's human output does.
pub fn gpus(items: &[Value]) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let Value::Object(m) = item else { continue };
        let _ = writeln!(
            out,
            "GPU: {}",
            m.get("gpu").and_then(leaf).unwrap_or_default()
        );
        for (k, v) in m.iter().filter(|(k, _)| k.as_str() != "gpu") {
            section(&mut out, k, v, 1);
        }
    }
    out
}

/// A column-padded table (`monitor`, `partition`).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let _ = write!(s, "{c:<width$}  ", width = w.get(i).copied().unwrap_or(0));
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_sections_units_and_lists() {
        let v = json!([{"gpu": 0, "usage": {"gfx_activity": {"value": 60, "unit": "%"}, "vcn_activity": [{"value": 0, "unit": "%"}, "N/A"]}, "temperature": {"hotspot": {"value": 55, "unit": "C"}}}]);
        let s = gpus(v.as_array().unwrap());
        assert_eq!(
            s,
            "GPU: 0\n    USAGE:\n        GFX_ACTIVITY: 60 %\n        VCN_ACTIVITY: [0 %, N/A]\n    TEMPERATURE:\n        HOTSPOT: 55 \u{b0}C\n"
        );
    }
}
