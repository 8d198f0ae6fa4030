//! The throughput store on disk (`$XDG_STATE_HOME/partop/throughput.json`): what this node's
//! model sets delivered under each layout (`domain::throughput`), kept across restarts of
//! partop. Read bounded, written atomically through `safe_file`; recorded by the app side
//! ([`spawn`]: the monitor, `partop serve`), never by the collector.

use crate::domain::throughput::Store;
use std::path::{Path, PathBuf};

/// Where the store lives.
pub fn path() -> PathBuf {
    crate::config::paths::state_dir().join("throughput.json")
}

/// The store at `p` (empty when there is none yet); Err names the file and the way out.
pub fn load(p: &Path) -> Result<Store, String> {
    match crate::collect::small_file::operator_text_if_exists(p) {
        Ok(None) => Ok(Store::default()),
        Ok(Some(t)) => {
            let store: Store = serde_json::from_str(&t).map_err(|e| {
                format!(
                    "{}: not a throughput store ({e}); move it away to start a new one",
                    p.display()
                )
            })?;
            for (i, m) in store.entries.iter().enumerate() {
                if let Some(why) = crate::domain::throughput::out_of_range(m) {
                    return Err(format!(
                        "{}: entry {} ({} under {}): {why}; fix or remove it, or move the file away to start a new one",
                        p.display(),
                        i + 1,
                        crate::domain::text::escape_controls(&m.model),
                        crate::domain::text::escape_controls(&m.layout)
                    ));
                }
            }
            Ok(store)
        }
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// Writes the store to `p`.
pub fn save(p: &Path, s: &Store) -> Result<(), String> {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let text = serde_json::to_string_pretty(s).map_err(|e| e.to_string())?;
    crate::exec::safe_file::write_atomic(p, text.as_bytes())
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// The throughput recorder of a long-running partop (the monitor, `partop serve`, `partop
/// stream`): each sample's counters (`Snapshot::throughput`, which the model prober only
/// reads) go through the pure `Recorder`; each window that closes is kept in the store here.
/// The collector never writes it.
pub struct Keeper {
    recorder: crate::domain::throughput::Recorder,
    path: PathBuf,
}

impl Keeper {
    /// Windows of `PARTOP_THROUGHPUT_WINDOW_SECS` (a bad value is said, the default used),
    /// kept in the store at [`path`].
    pub fn from_env() -> Self {
        let (secs, why) = crate::domain::throughput::Recorder::window_from(
            std::env::var("PARTOP_THROUGHPUT_WINDOW_SECS")
                .ok()
                .as_deref(),
        );
        if let Some(w) = why {
            log::warn!("{w}");
        }
        Keeper {
            recorder: crate::domain::throughput::Recorder::new(secs),
            path: path(),
        }
    }

    /// One sample: the windows it closes are kept in the store (read again first: `partop
    /// models measure` or another partop may have added to it). A store that cannot be read
    /// or written is said in the log; the caller goes on.
    pub async fn observe(&mut self, snap: &crate::domain::Snapshot) {
        let layout = crate::domain::throughput::layout_of(snap);
        let done = self.recorder.observe(
            &snap.host,
            layout.as_deref(),
            snap.taken_at_ms,
            &snap.throughput,
        );
        if done.is_empty() {
            return;
        }
        let path = self.path.clone();
        let kept = tokio::task::spawn_blocking(move || {
            let mut store = load(&path)?;
            for m in done {
                log::info!("throughput recorded: {} {m}", m.model);
                store.record(m);
            }
            save(&path, &store)
        })
        .await;
        match kept {
            Ok(Ok(())) => {}
            Ok(Err(e)) => log::warn!("throughput store: {e}"),
            Err(e) => log::warn!("throughput store: {e}"),
        }
    }
}

/// Runs a [`Keeper`] over the samples published on `samples` until the publisher is gone.
pub fn spawn(
    mut samples: tokio::sync::watch::Receiver<std::sync::Arc<crate::domain::Snapshot>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut keeper = Keeper::from_env();
        while samples.changed().await.is_ok() {
            let snap = std::sync::Arc::clone(&samples.borrow_and_update());
            keeper.observe(&snap).await;
        }
    })
}
