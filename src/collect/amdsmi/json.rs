//! Tolerant leaf types for amd-smi JSON and the top-level shape handling shared by every command.
//!
//! amd-smi puts `"N/A"` in place of anything: a leaf, a list element, a whole section. Measured
//! values are `{"value": n, "unit": "MB"}` (sometimes `{"value": "N/A", ...}`), ids are ints or
//! strings, and a process slot may be the string "No running processes detected". The 6.x family
//! prints a top-level array, 7.x wraps static/metric in `{"gpu_data": [...]}`; a group warning
//! line may precede the JSON, and 6.3's `partition` printed text after it.

use super::error::{AmdSmiError, excerpt};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de::DeserializeOwned};
use std::fmt;

/// A unit as amd-smi prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// No unit (bare number).
    None,
    /// `%`.
    Percent,
    /// `W`.
    Watt,
    /// `C`.
    Celsius,
    /// Bytes with a multiplier (`B`, `KB`, `MB`, `GB`; base 1024 as amd-smi computes them).
    Bytes(u64),
    /// Anything else (`MHz`, `mV`, `ns`, ...), kept for display only.
    Other,
}

impl Unit {
    /// How amd-smi writes a byte multiplier.
    const fn bytes_name(m: u64) -> &'static str {
        match m {
            1 => "B",
            1024 => "KB",
            1_048_576 => "MB",
            _ => "GB",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "" => Self::None,
            "%" => Self::Percent,
            "W" => Self::Watt,
            "C" | "°C" => Self::Celsius,
            "B" => Self::Bytes(1),
            "KB" | "KiB" => Self::Bytes(1 << 10),
            "MB" | "MiB" => Self::Bytes(1 << 20),
            "GB" | "GiB" => Self::Bytes(1 << 30),
            _ => Self::Other,
        }
    }
}

/// A measured leaf: a number with its unit, or N/A.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Q {
    /// A value.
    Val(f64, Unit),
    /// The tool said N/A.
    Na,
}

impl Q {
    /// The plain number, whatever its unit.
    pub const fn num(self) -> Option<f64> {
        match self {
            Self::Val(v, _) => Some(v),
            Self::Na => None,
        }
    }

    /// The value in bytes (bare numbers are taken as bytes); N/A when absent or out of range
    /// (see [`Q::bytes_checked`] for the reason).
    pub fn bytes(self) -> Option<u64> {
        self.bytes_checked().ok().flatten()
    }

    /// The value in bytes under the one range policy ([`crate::domain::sanity::bytes_of`]):
    /// `Err` with the reason for -86 GB or 1e308 B (never clamped to 0 or saturated).
    pub fn bytes_checked(self) -> Result<Option<u64>, String> {
        let (v, m, unit) = match self {
            Self::Val(v, Unit::Bytes(m)) => (v, m, Unit::bytes_name(m)),
            Self::Val(v, Unit::None) => (v, 1, "B"),
            _ => return Ok(None),
        };
        crate::domain::sanity::bytes_of(v, m, unit).map(Some)
    }

    /// The value as a count from 0 to `max` under the one range policy
    /// ([`crate::domain::sanity::count_of`]): `Err` with the reason for 1e308 CUs or -5.
    pub fn count_checked(self, max: u32, what: &str) -> Result<Option<u32>, String> {
        match self {
            Self::Val(v, _) => crate::domain::sanity::count_of(v, max, what).map(Some),
            Self::Na => Ok(None),
        }
    }
}

impl<'de> Deserialize<'de> for Q {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Q;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number, \"N/A\", or {\"value\", \"unit\"}")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Q, E> {
                let t = s.trim();
                if t == "N/A" || t.is_empty() {
                    return Ok(Q::Na);
                }
                // Python's json writes NaN and Infinity: that one value is N/A, nothing else.
                t.parse::<f64>()
                    .map(|v| {
                        if v.is_finite() {
                            Q::Val(v, Unit::None)
                        } else {
                            Q::Na
                        }
                    })
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(s), &self))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Q, E> {
                Ok(Q::Na)
            }
            #[expect(clippy::cast_precision_loss, reason = "amd-smi values fit f64")]
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Q, E> {
                Ok(Q::Val(v as f64, Unit::None))
            }
            #[expect(clippy::cast_precision_loss, reason = "amd-smi values fit f64")]
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Q, E> {
                Ok(Q::Val(v as f64, Unit::None))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Q, E> {
                Ok(if v.is_finite() {
                    Q::Val(v, Unit::None)
                } else {
                    Q::Na
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Q, A::Error> {
                let mut value: Option<Q> = None;
                let mut unit = Unit::None;
                while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match k.as_ref() {
                        "value" => value = Some(map.next_value::<Q>()?),
                        "unit" => {
                            unit = Unit::parse(&map.next_value::<std::borrow::Cow<'de, str>>()?)
                        }
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                match value {
                    Some(Q::Val(v, _)) => Ok(Q::Val(v, unit)),
                    Some(Q::Na) => Ok(Q::Na),
                    None => Err(de::Error::missing_field("value")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A section that may be `"N/A"` as a whole.
#[derive(Clone, Debug, PartialEq)]
pub enum Section<T> {
    /// Present.
    Some(T),
    /// `"N/A"` (or any string) in place of the section.
    Na,
}

impl<T> Section<T> {
    /// The section, if present.
    pub const fn get(&self) -> Option<&T> {
        match self {
            Self::Some(t) => Some(t),
            Self::Na => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Section<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Section<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object or \"N/A\"")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Section<T>, E> {
                Ok(Section::Na)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Section<T>, E> {
                Ok(Section::Na)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Section<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Section::Some)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Text that may be `"N/A"` (or a number, e.g. an OAM id); N/A and empty become `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text(pub Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or number")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text, E> {
                let t = s.trim();
                Ok(Text((!t.is_empty() && t != "N/A").then(|| t.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(Some(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(Some(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(Some(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

impl Text {
    /// The text, if any.
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// An id printed as an int, a string of an int (`"0"`), `"N/A"` or `""`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Id(pub Option<u64>);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer id, a string of one, or \"N/A\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Id, E> {
                let t = s.trim();
                if t.is_empty() || t == "N/A" {
                    return Ok(Id(None));
                }
                // 6.3 printed "0,1,2,3" on the primary: the first is this partition.
                let first = t.split(',').next().unwrap_or(t).trim();
                first
                    .parse()
                    .map(|v| Id(Some(v)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(s), &self))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Id, E> {
                Ok(Id(None))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                u64::try_from(v)
                    .map(|v| Id(Some(v)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

impl Id {
    /// As u32 (ids that do not fit are treated as absent).
    pub fn u32(self) -> Option<u32> {
        self.0.and_then(|v| u32::try_from(v).ok())
    }
}

/// What surrounded the JSON in a command's stdout.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Extras {
    /// Lines before the JSON (e.g. the group-membership warning).
    pub preamble: Vec<String>,
    /// `[AMDSMI_STATUS_*]` lines found anywhere in the output.
    pub status_lines: Vec<String>,
}

/// Splits stdout into the JSON text and what surrounds it.
pub fn split_output(stdout: &str) -> (&str, Extras) {
    let mut extras = Extras::default();
    if stdout.contains("[AMDSMI_STATUS_") {
        extras.status_lines = stdout
            .lines()
            .filter(|l| l.contains("[AMDSMI_STATUS_"))
            .map(|l| l.trim().to_string())
            .collect();
    }
    let mut offset = 0;
    for line in stdout.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with('[') && !t.starts_with("[AMDSMI_STATUS_") || t.starts_with('{') {
            return (&stdout[offset..], extras);
        }
        if !line.trim().is_empty() {
            extras.preamble.push(line.trim().to_string());
        }
        offset += line.len();
    }
    ("", extras)
}

/// The 7.x wrapper (or amd-smi's error object).
#[derive(Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
struct Wrapped<T> {
    #[serde(default = "Option::default")]
    gpu_data: Option<Vec<T>>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    code: Option<i64>,
}

/// Parses one JSON value of type `T` from `json`, ignoring trailing text, and maps failures to
/// errors that name the command and the JSON path.
pub fn parse_value<T: DeserializeOwned>(command: &str, json: &str) -> Result<T, AmdSmiError> {
    let quoted = quote_non_finite(json);
    let json: &str = &quoted;
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() {
            AmdSmiError::Shape {
                command: command.to_string(),
                path,
                detail: inner.to_string(),
            }
        } else {
            AmdSmiError::NotJson {
                command: command.to_string(),
                detail: inner.to_string(),
                excerpt: excerpt(json, 120),
            }
        }
    })
}

/// Python's `json.dumps` writes `NaN`, `Infinity` and `-Infinity`, which are not JSON: they are
/// turned into strings (outside string literals only), so the one leaf becomes N/A instead of
/// the whole document failing.
pub fn quote_non_finite(json: &str) -> std::borrow::Cow<'_, str> {
    if !(json.contains("NaN") || json.contains("Infinity")) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = json;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_str = true;
            out.push(c);
            rest = &rest[1..];
            continue;
        }
        let token = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        if let Some(t) = token {
            out.push('"');
            out.push_str(t);
            out.push('"');
            rest = &rest[t.len()..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Parses a per-GPU command (`list`, `static`, `metric`, `process`, `monitor`) in either family:
/// a top-level array, or `{"gpu_data": [...]}`; also recognises amd-smi's error object.
pub fn parse_gpu_array<T: DeserializeOwned>(
    command: &str,
    stdout: &str,
) -> Result<(Vec<T>, Extras), AmdSmiError> {
    let (json, extras) = split_output(stdout);
    check_preamble(command, stdout, json, &extras)?;
    if json.trim_start().starts_with('{') {
        let w: Wrapped<T> = parse_value(command, json)?;
        if let Some(message) = w.error {
            return Err(AmdSmiError::Cli {
                command: command.to_string(),
                code: w.code.unwrap_or(0),
                message,
            });
        }
        return w
            .gpu_data
            .map(|v| (v, extras))
            .ok_or_else(|| AmdSmiError::Shape {
                command: command.to_string(),
                path: ".".into(),
                detail: "an object without \"gpu_data\"".into(),
            });
    }
    let v: Vec<T> = parse_value(command, json)?;
    Ok((v, extras))
}

/// Parses a command whose JSON is one object (7.x `partition`).
pub fn parse_object<T: DeserializeOwned>(
    command: &str,
    stdout: &str,
) -> Result<(T, Extras), AmdSmiError> {
    let (json, extras) = split_output(stdout);
    check_preamble(command, stdout, json, &extras)?;
    if json.trim_start().starts_with('{') {
        #[derive(Deserialize)]
        struct E {
            error: String,
            #[serde(default)]
            code: i64,
        }
        if let Ok(e) = serde_json::from_str::<E>(json.trim()) {
            return Err(AmdSmiError::Cli {
                command: command.into(),
                code: e.code,
                message: e.error,
            });
        }
    }
    Ok((parse_value(command, json)?, extras))
}

fn check_preamble(
    command: &str,
    stdout: &str,
    json: &str,
    extras: &Extras,
) -> Result<(), AmdSmiError> {
    if let Some(w) = extras
        .preamble
        .iter()
        .find(|l| l.contains("missing the following required groups"))
        && json.trim().is_empty()
    {
        return Err(AmdSmiError::MissingGroups {
            command: command.into(),
            message: w.clone(),
        });
    }
    if json.trim().is_empty() {
        if !extras.status_lines.is_empty() {
            return Err(AmdSmiError::Status {
                command: command.into(),
                lines: extras.status_lines.join("; "),
            });
        }
        return Err(AmdSmiError::NotJson {
            command: command.into(),
            detail: "no JSON in the output".into(),
            excerpt: excerpt(stdout, 120),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_accepts_every_shape() {
        let v: Vec<Q> = serde_json::from_str(
            r#"[{"value":0,"unit":"%"},"N/A",3,{"value":"N/A","unit":"GB/s"},{"value":96.0,"unit":"MB"}]"#,
        )
        .unwrap();
        assert_eq!(v[0], Q::Val(0.0, Unit::Percent));
        assert_eq!(v[1], Q::Na);
        assert_eq!(v[2].num(), Some(3.0));
        assert_eq!(v[3], Q::Na);
        assert_eq!(v[4].bytes(), Some(96 << 20));
    }

    #[test]
    fn ids_as_int_string_list_or_na() {
        let v: Vec<Id> = serde_json::from_str(r#"[0,"1","0,1,2,3","N/A",""]"#).unwrap();
        assert_eq!(
            v,
            vec![Id(Some(0)), Id(Some(1)), Id(Some(0)), Id(None), Id(None)]
        );
    }

    #[test]
    fn preamble_and_status_lines_are_split_off() {
        let out = "WARNING: User is missing the following required groups: render, video. Please add user to these groups.\n[\n {\"gpu\": 0}\n]\n";
        let (json, ex) = split_output(out);
        assert!(json.starts_with('['));
        assert_eq!(ex.preamble.len(), 1);
        let (_, ex) = split_output("GPU: 0\n    MEMORY_PARTITION: [AMDSMI_STATUS_BUSY] Unable\n");
        assert_eq!(ex.status_lines.len(), 1);
    }

    #[test]
    fn error_object_becomes_cli_error() {
        #[derive(Deserialize)]
        struct G {}
        let e = parse_gpu_array::<G>(
            "amd-smi static --json",
            "{\"error\": \"Can not find a device: GPU '123123'\", \"code\": -3}\n",
        )
        .err()
        .unwrap();
        assert!(matches!(e, AmdSmiError::Cli { code: -3, .. }));
    }
}
