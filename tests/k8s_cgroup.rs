//! From a process's cgroup to its pod: every layout the kubelet and the runtimes write,
//! enumerated (cgroup driver × runtime × QoS class × cgroup version × nesting), through the
//! pure parser `domain::cgroup::parse`; and the paths that are not a pod's stay so.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

use partop::domain::cgroup::{Qos, Runtime, parse};

const UID: &str = "1a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d";
const CID: &str = "4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0";
const KIND_NODE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[derive(Clone, Copy, Debug)]
enum Driver {
    Systemd,
    Cgroupfs,
}

#[derive(Clone, Copy, Debug)]
enum Rt {
    Containerd,
    CriO,
    CriOMonitor,
    Docker,
}

/// The pod's and container's part of the path, as the kubelet and runtime write it.
fn pod_path(driver: Driver, rt: Rt, qos: Qos) -> String {
    let level = match qos {
        Qos::Guaranteed => None,
        Qos::Burstable => Some("burstable"),
        Qos::BestEffort => Some("besteffort"),
    };
    match driver {
        Driver::Systemd => {
            let uid = UID.replace('-', "_");
            let scope = match rt {
                Rt::Containerd => format!("cri-containerd-{CID}.scope"),
                Rt::CriO => format!("crio-{CID}.scope"),
                Rt::CriOMonitor => format!("crio-conmon-{CID}.scope"),
                Rt::Docker => format!("docker-{CID}.scope"),
            };
            match level {
                None => format!("/kubepods.slice/kubepods-pod{uid}.slice/{scope}"),
                Some(q) => format!(
                    "/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{uid}.slice/{scope}"
                ),
            }
        }
        // The cgroupfs driver names the container by its bare id, whatever the runtime.
        Driver::Cgroupfs => match level {
            None => format!("/kubepods/pod{UID}/{CID}"),
            Some(q) => format!("/kubepods/{q}/pod{UID}/{CID}"),
        },
    }
}

/// The whole file: cgroup v2's one line, or v1's controllers (each with the same path).
fn file(path: &str, v2: bool) -> String {
    if v2 {
        format!("0::{path}\n")
    } else {
        [
            "12:pids:",
            "11:memory:",
            "10:cpu,cpuacct:",
            "4:devices:",
            "1:name=systemd:",
        ]
        .iter()
        .map(|c| format!("{c}{path}\n"))
        .collect()
    }
}

#[test]
fn every_pod_layout_names_its_pod_qos_and_container() {
    let mut cases = 0;
    for driver in [Driver::Systemd, Driver::Cgroupfs] {
        let runtimes: &[Rt] = match driver {
            Driver::Systemd => &[Rt::Containerd, Rt::CriO, Rt::CriOMonitor, Rt::Docker],
            Driver::Cgroupfs => &[Rt::Containerd],
        };
        for &rt in runtimes {
            for qos in [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort] {
                for v2 in [true, false] {
                    // Bare on the host, or inside a kind node (a container running the kubelet).
                    for nested in [false, true] {
                        let inner = pod_path(driver, rt, qos);
                        let path = if nested {
                            format!("/docker/{KIND_NODE}{inner}")
                        } else {
                            inner
                        };
                        let text = file(&path, v2);
                        let o = parse(&text);
                        let what =
                            format!("{driver:?} {rt:?} {qos:?} v2={v2} nested={nested}: {text}");
                        assert_eq!(o.pod.as_deref(), Some(UID), "{what}");
                        assert_eq!(o.qos, Some(qos), "{what}");
                        assert_eq!(o.container_full.as_deref(), Some(CID), "{what}");
                        assert_eq!(o.container.as_deref(), Some(&CID[..12]), "{what}");
                        let runtime = match (driver, rt) {
                            (Driver::Cgroupfs, _) => Runtime::Unnamed,
                            (_, Rt::Containerd) => Runtime::Containerd,
                            (_, Rt::CriO | Rt::CriOMonitor) => Runtime::CriO,
                            (_, Rt::Docker) => Runtime::Docker,
                        };
                        assert_eq!(o.runtime, Some(runtime), "{what}");
                        assert_eq!(o.monitor, matches!(rt, Rt::CriOMonitor), "{what}");
                        assert_eq!(o.unit, None, "{what}");
                        cases += 1;
                    }
                }
            }
        }
    }
    // 2 drivers: systemd × 4 runtimes, cgroupfs × 1 (bare ids) = 5; × 3 QoS × 2 versions × 2.
    assert_eq!(cases, 60, "every layout ran");
}

#[test]
fn a_pod_without_its_container_yet_and_paths_of_no_pod() {
    // The pod's own cgroup (the pause process, or a process moved there): the pod, no container.
    let o = parse(&format!(
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice\n",
        UID.replace('-', "_")
    ));
    assert_eq!(o.pod.as_deref(), Some(UID));
    assert_eq!(o.qos, Some(Qos::BestEffort));
    assert_eq!(o.container, None);
    // Not pods: 6 paths that look near one.
    let not_pods = [
        "0::/kubepods.slice\n",
        "0::/kubepods.slice/kubepods-burstable.slice\n",
        "0::/system.slice/kubelet.service\n",
        "0::/system.slice/containerd.service\n",
        "0::/kubepods/burstable/podnot-a-uid/abc\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
    ];
    for t in not_pods {
        let o = parse(t);
        assert_eq!(o.pod, None, "{t}");
        assert_eq!(
            o.unit, None,
            "{t}: the kubelet's and runtime's own units are no owner"
        );
    }
    // A plain service and a plain Docker container keep what they were.
    assert_eq!(
        parse("0::/system.slice/vllm-llama.service\n")
            .unit
            .as_deref(),
        Some("vllm-llama.service")
    );
    let d = parse(&format!("0::/system.slice/docker-{CID}.scope\n"));
    assert_eq!(d.container.as_deref(), Some(&CID[..12]));
    assert_eq!((d.pod, d.runtime), (None, Some(Runtime::Docker)));
    let d1 = parse(&format!("4:devices:/docker/{CID}\n"));
    assert_eq!(d1.container_full.as_deref(), Some(CID));
    assert_eq!(d1.runtime, Some(Runtime::Docker));
}
