//! The monitor on a Kubernetes node: the pods the kubelet allocated label the partition map,
//! Processes has a POD column the filter searches, and Detail says each partition's and
//! holder's pod. A recorded DPX/NPS2 node joined to PodResources allocations by the pure join.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::{T, recorded};
use partop::domain::findings::Thresholds;
use partop::domain::k8s::{Allocation, Device, DeviceNames, PodResources, join};
use partop::ui::keymap::Keymap;
use partop::ui::state::{Msg, State, update};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::Path;
use std::sync::Arc;

fn draw(s: &State, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let th = Theme::load("default", Path::new("/nonexistent")).0;
    t.draw(|f| partop::ui::view::render(f, s, &th)).unwrap();
    format!("{}", t.backend())
}

fn key(s: &mut State, c: KeyCode) {
    update(s, Msg::Key(KeyEvent::new(c, KeyModifiers::NONE)));
}

/// The recorded node with every holder's partition allocated to a pod of namespace `team-a`
/// named after the logical GPU (`job-<gpu>`).
fn state() -> State {
    let mut snap = recorded("dpx-nps2-two-models");
    let held: Vec<u32> = snap
        .processes
        .iter()
        .flat_map(|p| p.gpus.iter().map(|u| u.gpu_id))
        .collect();
    let mut allocations = Vec::new();
    for g in &snap.gpus {
        for l in g.partitions.iter().filter(|l| held.contains(&l.gpu_id)) {
            allocations.push(Allocation {
                namespace: "team-a".into(),
                pod: format!("job-{}", l.gpu_id),
                container: "main".into(),
                device: Device::Plugin {
                    resource: "amd.com/gpu".into(),
                    id: if l.partition_id == 0 {
                        g.bdf.clone()
                    } else {
                        format!("amdgpu_xcp_{}", l.gpu_id)
                    },
                },
            });
        }
    }
    // The platform device of each partition other than 0, as the kernel's tree names it.
    let names: DeviceNames = snap
        .gpus
        .iter()
        .flat_map(|g| &g.partitions)
        .filter(|l| l.partition_id > 0)
        .filter_map(|l| Some((l.render_node.clone()?, format!("amdgpu_xcp.{}", l.gpu_id))))
        .collect();
    let pr = PodResources {
        allocations,
        allocatable: None,
        source: "test".into(),
    };
    join(&mut snap, &pr, &names);
    assert!(snap.kubelet.as_ref().unwrap().unmatched.is_empty());
    let (km, _) = Keymap::load("default", None, false);
    let mut s = State::new(km, Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    update(&mut s, Msg::Resize(200, 60));
    update(&mut s, Msg::Tick(T + 1000));
    s
}

#[test]
fn the_map_processes_and_detail_speak_in_pods() {
    let mut s = state();
    let snap = s.snapshot.clone().unwrap();
    let held: Vec<u32> = snap
        .processes
        .iter()
        .flat_map(|p| p.gpus.iter().map(|u| u.gpu_id))
        .collect();
    assert!(held.len() >= 2, "the recording has holders on several GPUs");
    // The map's labels: each held partition's pod.
    for g in &held {
        assert_eq!(
            s.gpu_labels.get(g).map(|u| u.label.clone()),
            Some(format!("team-a/job-{g}")),
            "GPU {g}"
        );
    }
    let overview = draw(&s, 200, 60);
    assert!(
        overview.contains(&format!("team-a/job-{}", held[0])),
        "{overview}"
    );
    // Processes: a POD column with namespace/pod/container.
    key(&mut s, KeyCode::Char('3'));
    let procs = draw(&s, 200, 60);
    assert!(procs.contains("POD"), "{procs}");
    assert!(
        procs.contains(&format!("team-a/job-{}/main", held[0])),
        "{procs}"
    );
    // The filter finds a process by its pod.
    let all = s.rows.len();
    key(&mut s, KeyCode::Char('/'));
    for c in format!("job-{}", held[0]).chars() {
        key(&mut s, KeyCode::Char(c));
    }
    key(&mut s, KeyCode::Enter);
    let shown = s.rows.len();
    assert!(
        shown >= 1 && shown < all,
        "{shown} of {all} rows for one pod"
    );
    // Detail of that process: its pod from the kubelet.
    key(&mut s, KeyCode::Tab);
    let detail = draw(&s, 200, 60);
    assert!(detail.contains("pod (kubelet)"), "{detail}");
    assert!(
        detail.contains(&format!("team-a/job-{} main (amd.com/gpu)", held[0])),
        "{detail}"
    );
}
