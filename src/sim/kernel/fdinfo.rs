//! The DRM fdinfo the amdgpu driver shows for a render-node client, as mainline prints it
//! (`drm_show_fdinfo`, then `amdgpu_show_fdinfo`; kernel-interfaces.md §3.1): the DRM core's
//! lines, the pasid, each memory region's total/shared/resident/purgeable in the newer size
//! form, the legacy `drm-memory-*` lines (two with a space before the tab), the `amd-*` lines,
//! and an engine's busy nanoseconds only where non-zero. A ROCm client's compute runs on KFD
//! queues, which fdinfo does not count (§3.5): its engines stay absent. Pure: the twin writes
//! it behind each workload's render-node fd (`STATE.fdinfo/PID/fdinfo/FD`).

/// One DRM client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmClient {
    /// `drm-client-id` (a counter system-wide).
    pub client_id: u64,
    /// `drm-pdev`: the physical GPU, also for a partition's render node (§3.4).
    pub pdev: String,
    /// `pasid`.
    pub pasid: u32,
    /// Resident VRAM, bytes.
    pub vram: u64,
    /// Resident GTT, bytes.
    pub gtt: u64,
    /// Busy time per engine (`gfx`, `compute`, `dma`, `dec`, `enc`, `enc_1`, `jpeg`, `vpe`), ns.
    pub engines: Vec<(&'static str, u64)>,
}

/// The regions amdgpu prints, in its order.
const REGIONS: [&str; 8] = [
    "vram",
    "gtt",
    "cpu",
    "gds",
    "gws",
    "oa",
    "doorbell",
    "mmioremap",
];

/// A size as the DRM core prints it: divided by 1024 while non-zero and 1 KiB-aligned, up to
/// MiB (`0`, `4096 KiB` is never printed: `4 MiB`; `1536 KiB`; `1000`).
pub fn size(mut b: u64) -> String {
    let units = ["", " KiB", " MiB"];
    let mut u = 0;
    while b != 0 && b.is_multiple_of(1024) && u < units.len() - 1 {
        b /= 1024;
        u += 1;
    }
    format!("{b}{}", units[u])
}

/// The fdinfo text after the file's own lines (`header`: pos, flags, mnt_id, ino).
pub fn text(header: &str, c: &DrmClient) -> String {
    let mut s = String::from(header);
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s += &format!(
        "drm-driver:\tamdgpu\ndrm-client-id:\t{}\ndrm-pdev:\t{}\npasid:\t{}\n",
        c.client_id, c.pdev, c.pasid
    );
    for r in REGIONS {
        let resident = match r {
            "vram" => c.vram,
            "gtt" => c.gtt,
            _ => 0,
        };
        s += &format!(
            "drm-total-{r}:\t{}\ndrm-shared-{r}:\t0\ndrm-resident-{r}:\t{}\ndrm-purgeable-{r}:\t0\n",
            size(resident),
            size(resident)
        );
    }
    s += &format!(
        "drm-memory-vram:\t{} KiB\ndrm-memory-gtt: \t{} KiB\ndrm-memory-cpu: \t0 KiB\n",
        c.vram / 1024,
        c.gtt / 1024
    );
    s += &format!(
        "amd-evicted-vram:\t0 KiB\namd-requested-vram:\t{} KiB\namd-requested-gtt:\t{} KiB\n",
        c.vram / 1024,
        c.gtt / 1024
    );
    for (e, ns) in &c.engines {
        if *ns != 0 {
            s += &format!("drm-engine-{e}:\t{ns} ns\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_the_drm_core_prints_them() {
        let cases = [
            (0, "0"),
            (1000, "1000"),
            (1024, "1 KiB"),
            (1536 * 1024, "1536 KiB"),
            (4 << 20, "4 MiB"),
            (5 << 30, "5120 MiB"),
            ((1 << 20) + 1, "1048577"),
        ];
        for (b, want) in cases {
            assert_eq!(size(b), want, "{b}");
        }
    }

    #[test]
    fn the_collectors_parser_reads_what_the_twin_writes() {
        let c = DrmClient {
            client_id: 41,
            pdev: "0000:0c:00.0".into(),
            pasid: 32_770,
            vram: 5 << 30,
            gtt: 2 << 20,
            engines: vec![("compute", 0), ("dec", 8_123_456_789)],
        };
        let t = text("pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t1057\n", &c);
        assert!(t.contains("drm-memory-gtt: \t2048 KiB\n"), "{t}");
        assert!(
            !t.contains("drm-engine-compute"),
            "a zero engine is not printed"
        );
        let p = crate::collect::sysfs::fdinfo::parse(&t);
        assert_eq!(p.client_id, Some(41));
        assert_eq!(p.pdev.as_deref(), Some("0000:0c:00.0"));
        assert_eq!(p.vram_bytes, Some(5 << 30));
        assert_eq!(p.gtt_bytes, Some(2 << 20));
        assert_eq!(p.engines.get("dec"), Some(&8_123_456_789));
    }
}
