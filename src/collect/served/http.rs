//! One HTTP GET with a hard timeout (ureq, blocking: called from `spawn_blocking` or from the
//! executor's own thread). Health checks and metrics scrapes both come through here.

use std::time::Duration;

/// What a GET gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Body (first 4 MiB).
    pub body: String,
}

/// GETs `url` within `timeout`. The error text says what failed (refused, timed out).
pub fn get(url: &str, timeout: Duration) -> Result<Reply, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent.get(url).call().map_err(|e| short(&e))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(4 << 20)
        .read_to_string()
        .map_err(|e| short(&e))?;
    Ok(Reply { status, body })
}

fn short(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused".into()
        }
        ureq::Error::Timeout(_) => "timed out".into(),
        other => other.to_string(),
    }
}
