//! A label selector as `kubectl -l` takes it, checked before it is sent (pure): `partop fleet
//! --kubernetes -l` refuses a malformed one at once, naming where it breaks, instead of waiting
//! on the API server's 400 (or, with no server, never saying the selector was wrong).
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery/pkg/labels`): requirements separated by
//! commas, each `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)` or
//! `key notin (v1,v2)`; a key is an optional DNS-subdomain prefix and `/`, then a name of at most
//! 63 characters; a value is empty or at most 63 characters; names and values begin and end
//! with a letter or digit and hold letters, digits, `-`, `_` and `.`.

/// Why `selector` is not a label selector, or Ok.
pub fn check(selector: &str) -> Result<(), String> {
    if selector.trim().is_empty() {
        return Err("an empty label selector: give one (app=x) or leave -l out".into());
    }
    for (i, req) in split_top(selector).into_iter().enumerate() {
        requirement(req.trim())
            .map_err(|e| format!("requirement {} `{}`: {e}", i + 1, req.trim()))?;
    }
    Ok(())
}

/// The requirements: commas outside parentheses separate them.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn requirement(r: &str) -> Result<(), String> {
    if r.is_empty() {
        return Err("empty (two commas in a row, or one at an end)".into());
    }
    if let Some(k) = r.strip_prefix('!') {
        return key(k.trim());
    }
    for op in ["==", "!=", "="] {
        if let Some((k, v)) = r.split_once(op) {
            key(k.trim())?;
            return value(v.trim());
        }
    }
    for op in [" notin ", " in "] {
        if let Some((k, set)) = r.split_once(op) {
            key(k.trim())?;
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| format!("`{}` takes a list in parentheses: ({set})", op.trim()))?;
            return inner.split(',').try_for_each(|v| value(v.trim()));
        }
    }
    if r.contains(['(', ')', '<', '>', ' ']) {
        return Err(
            "not one of key, !key, key=value, key!=value, key in (…), key notin (…)".into(),
        );
    }
    key(r)
}

fn key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !ok {
            return Err(format!("the key's prefix `{p}` is not a DNS subdomain"));
        }
    }
    if name.is_empty() {
        return Err("a key is missing".into());
    }
    word(name).map_err(|e| format!("the key `{name}` {e}"))
}

fn value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    word(v).map_err(|e| format!("the value `{v}` {e}"))
}

/// A label name or value: at most 63 characters, alphanumeric at both ends, `-_.` inside.
fn word(w: &str) -> Result<(), String> {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if w.len() > 63 {
        return Err(format!("is {} characters long (63 at most)", w.len()));
    }
    if !w.chars().all(|c| alnum(c) || "-_.".contains(c)) {
        return Err("holds a character other than letters, digits, - _ .".into());
    }
    if !w.starts_with(alnum) || !w.ends_with(alnum) {
        return Err("must begin and end with a letter or digit".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Selectors kubectl accepts and ones the API server refuses (what each says): 12 + 12.
    #[test]
    fn selectors_kubectl_takes_pass_and_malformed_ones_say_where() {
        let good = [
            "app",
            "!app",
            "app=x",
            "app==x",
            "app!=x",
            "app=",
            "amd.com/gpu.product-name=MI300X",
            "app in (a,b)",
            "app notin (a, b)",
            "tier in (gpu),app=x",
            "a=b,!c,d!=e",
            "node-role.kubernetes.io/gpu",
        ];
        for g in good {
            assert_eq!(super::check(g), Ok(()), "{g}");
        }
        let long = "k".repeat(64);
        let bad = [
            ("", "empty"),
            ("a=b=c", "the value `b=c`"),
            ("a=b,,c", "requirement 2"),
            ("a=b,", "requirement 2"),
            ("-app=x", "begin and end"),
            ("app=x-", "begin and end"),
            ("app=x y", "the value `x y`"),
            ("app in a,b", "parentheses"),
            ("Bad_Prefix/app=x", "DNS subdomain"),
            ("/app", "DNS subdomain"),
            (long.as_str(), "63 at most"),
            ("app=\u{1b}[2J", "the value"),
        ];
        for (b, said) in bad {
            let e = super::check(b).expect_err(b);
            assert!(e.contains(said), "{b}: {e}");
        }
    }
}
