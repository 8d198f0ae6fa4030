//! Fingerprints of confirmed values (plans): a hash of a value's whole serialised content, so a
//! plan is confirmed by its fingerprint and any change to any field, a stop, a command, a
//! model move, gives another one. Pure; sits below every planner.

use serde::Serialize;

/// FNV-1a of `s` as 16 hex digits.
pub fn fnv(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The fingerprint of `value`'s JSON (the caller clears the fingerprint field first).
pub fn of<T: Serialize>(value: &T) -> String {
    fnv(&serde_json::to_string(value).unwrap_or_default())
}

/// The fingerprint of `value` with its own fingerprint field (reached by `field`) cleared: what
/// a plan's fingerprint covers, everything but itself.
pub fn of_content<T: Serialize + Clone>(
    value: &T,
    field: impl Fn(&mut T) -> &mut String,
) -> String {
    let mut v = value.clone();
    field(&mut v).clear();
    of(&v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn any_byte_changes_it() {
        assert_ne!(super::fnv("stop 4242"), super::fnv("stop 4243"));
        assert_eq!(super::fnv(""), "cbf29ce484222325");
    }
}
