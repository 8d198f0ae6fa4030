//! Deterministic snapshots for UI tests: recorded nodes (made from the simulator, see
//! tests/fixtures/recordings) replayed through the real parsers, with every timestamp pinned.

use partop::collect::amdsmi::recording::Recording;
use partop::collect::pipeline::{Collector, Source};
use partop::domain::Snapshot;
use std::path::Path;

/// The pinned clock.
pub const T: u64 = 1_800_000_000_000;

/// A snapshot of a recorded node, every time set to `T`.
pub fn recorded(name: &str) -> Snapshot {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recordings")
        .join(format!("{name}.json"));
    let rec = Recording::load(&p).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut c = Collector::new(Source::replay(rec));
    c.simulated = true;
    let mut s = rt.block_on(c.sample());
    pin(&mut s, T);
    s
}

/// Sets every timestamp to `t`.
pub fn pin(s: &mut Snapshot, t: u64) {
    s.taken_at_ms = t;
    s.taken_at = partop::collect::clock::rfc3339(t);
    for src in &mut s.sources {
        src.last_ok_ms = Some(t);
        src.took_ms = Some(12);
    }
    for g in &mut s.gpus {
        g.provenance.values_mut().for_each(|o| o.at_ms = t);
        for l in &mut g.partitions {
            l.provenance.values_mut().for_each(|o| o.at_ms = t);
        }
    }
    for p in &mut s.processes {
        p.provenance.values_mut().for_each(|o| o.at_ms = t);
        p.user = Some("svc-ml".into());
        p.started_at_ms = Some(t - 3_600_000);
    }
}
