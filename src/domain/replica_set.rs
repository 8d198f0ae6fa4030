//! A replica set's settings as models.toml writes them (`replicas`, `ports`, `gpus`): the
//! types and their parsing, a leaf the registry parser uses; `domain::replicas` expands a set
//! into its members.

use serde::{Deserialize, Serialize};

/// How many members a set asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Count {
    /// Exactly this many (fewer where fewer logical GPUs hold the model: said in the plan).
    Exactly(u32),
    /// Every logical GPU that holds it (within `gpus`), up to the port range.
    Fill,
}

/// A registry entry's replica set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSet {
    /// How many members.
    pub count: Count,
    /// First and last port of the range; member k (1-based) listens on `first + k - 1`.
    pub ports: (u16, u16),
    /// Physical or logical GPU identities the members may use (BDF prefixes: `0000:05:00`
    /// takes every partition of that GPU, `0000:05:00.1` one logical GPU); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
}

impl ReplicaSet {
    /// Most members the port range allows.
    pub fn max_members(&self) -> u32 {
        u32::from(self.ports.1.saturating_sub(self.ports.0)) + 1
    }

    /// The range as the plan and the view say it: `8001-8016`.
    pub fn ports_text(&self, members: u32) -> String {
        let last = u32::from(self.ports.0) + members.max(1) - 1;
        if members <= 1 {
            self.ports.0.to_string()
        } else {
            format!("{}-{last}", self.ports.0)
        }
    }
}

/// A member's place in its set (on a member's spec).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The set's registry name.
    pub set: String,
    /// 1-based index: its port is the range's first + index - 1.
    pub index: u32,
}

/// Separates a set's name from a member's index in the member's name (`mistral-12b#3`): no
/// registry name is a set name followed by it, so a member's name is never another model's.
pub const MEMBER_SEP: char = '#';

/// `replicas = N` (1 or more) or `replicas = "fill"`.
pub fn parse_count(v: &toml::Value) -> Result<Count, String> {
    match v {
        toml::Value::Integer(n) if (1..=4096).contains(n) => {
            Ok(Count::Exactly(u32::try_from(*n).unwrap_or(1)))
        }
        toml::Value::String(s) if s == "fill" => Ok(Count::Fill),
        other => Err(format!(
            "replicas = {other} is not a count: give 1 to 4096, or \"fill\" (every logical GPU that holds the model)"
        )),
    }
}

/// `ports = "8001-8016"` (first and last, first <= last, none 0).
pub fn parse_ports(s: &str) -> Result<(u16, u16), String> {
    let bad = || {
        format!(
            "ports = {s:?} is not a port range: write the first and last port, like \"8001-8016\""
        )
    };
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || b < a {
        return Err(bad());
    }
    Ok((a, b))
}
