//! The binary tables the kernel twin writes: `gpu_metrics` v1.8 and a partition's
//! `xcp_metrics` v1.0, laid out as the kernel's `amdgpu_gpu_metrics_v1_8` and
//! `amdgpu_partition_metrics_v1_0` structures (little-endian, unavailable fields all-ones), so
//! partop's kernel reader reads them exactly as it reads a real node's. Pure.

/// Size of `gpu_metrics` v1.8.
pub const GPU_METRICS_V1_8: usize = 3872;
/// Size of `xcp_metrics` v1.0.
pub const XCP_METRICS_V1_0: usize = 488;

/// What one partition shows in the tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLoad {
    /// Busy percent of each of its XCCs.
    pub gfx_busy: Vec<u32>,
    /// Accumulated busy of each of its XCCs.
    pub gfx_busy_acc: Vec<u64>,
    /// Its GFX clock, MHz.
    pub gfxclk: u16,
}

/// What a device shows in `gpu_metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceTable {
    /// Junction temperature, °C.
    pub hotspot: u16,
    /// HBM temperature, °C.
    pub mem_temp: u16,
    /// Socket power, W.
    pub power: u16,
    /// GFX activity, %.
    pub gfx_activity: u16,
    /// UMC activity, %.
    pub umc_activity: u16,
    /// Memory clock, MHz.
    pub uclk: u16,
    /// Energy accumulated, 2^-16 J units.
    pub energy: u64,
    /// PCIe bandwidth now, GB/s.
    pub pcie_gbs: u64,
    /// XGMI data read and written per link, KB (the 8 links of an MI300X).
    pub xgmi_kb: [(u64, u64); 8],
    /// Partitions, in order (at most 8 fit the table).
    pub partitions: Vec<PartitionLoad>,
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn header(b: &mut [u8], size: usize, content: u8) {
    put16(b, 0, u16::try_from(size).unwrap_or(u16::MAX));
    b[2] = 1;
    b[3] = content;
}

/// `gpu_metrics` v1.8 of a device.
pub fn gpu_metrics_v1_8(d: &DeviceTable) -> Vec<u8> {
    let mut b = vec![0xFF; GPU_METRICS_V1_8];
    header(&mut b, GPU_METRICS_V1_8, 8);
    put16(&mut b, 4, d.hotspot);
    put16(&mut b, 6, d.mem_temp);
    put16(&mut b, 10, d.power);
    put16(&mut b, 12, d.gfx_activity);
    put16(&mut b, 14, d.umc_activity);
    put64(&mut b, 24, d.energy);
    // A Gen5 x16 link, trained at full speed; no replays, recoveries or NAKs.
    put16(&mut b, 68, 16);
    put16(&mut b, 70, 320);
    put64(&mut b, 88, 0);
    put64(&mut b, 96, d.pcie_gbs);
    for off in [104, 112, 120] {
        put64(&mut b, off, 0);
    }
    put32(&mut b, 128, 0);
    put32(&mut b, 132, 0);
    for (k, (r, w)) in d.xgmi_kb.iter().enumerate() {
        put64(&mut b, 136 + 8 * k, *r);
        put64(&mut b, 200 + 8 * k, *w);
    }
    let mut xcc = 0;
    for p in d.partitions.iter().take(8) {
        for _ in &p.gfx_busy {
            if xcc < 8 {
                put16(&mut b, 296 + 2 * xcc, p.gfxclk);
            }
            xcc += 1;
        }
    }
    put16(&mut b, 336, d.uclk);
    put16(
        &mut b,
        338,
        u16::try_from(d.partitions.len().min(8)).unwrap_or(8),
    );
    for (i, p) in d.partitions.iter().take(8).enumerate() {
        let o = 344 + i * 440;
        for (k, v) in p.gfx_busy.iter().take(8).enumerate() {
            put32(&mut b, o + 4 * k, *v);
        }
        // One JPEG and one VCN engine in use per partition, idle in the simulator.
        put16(&mut b, o + 32, 0);
        put16(&mut b, o + 112, 0);
        for (k, v) in p.gfx_busy_acc.iter().take(8).enumerate() {
            put64(&mut b, o + 120 + 8 * k, *v);
        }
    }
    b
}

/// `xcp_metrics` v1.0 of one partition.
pub fn xcp_metrics_v1_0(p: &PartitionLoad) -> Vec<u8> {
    let mut b = vec![0xFF; XCP_METRICS_V1_0];
    header(&mut b, XCP_METRICS_V1_0, 0);
    for (k, _) in p.gfx_busy.iter().take(8).enumerate() {
        put16(&mut b, 8 + 2 * k, p.gfxclk);
    }
    for (k, v) in p.gfx_busy.iter().take(8).enumerate() {
        put32(&mut b, 48 + 4 * k, *v);
    }
    put16(&mut b, 80, 0);
    put16(&mut b, 160, 0);
    for (k, v) in p.gfx_busy_acc.iter().take(8).enumerate() {
        put64(&mut b, 168 + 8 * k, *v);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::sysfs::gpu_metrics::{parse, parse_xcp};

    fn part(busy: u32, xccs: usize) -> PartitionLoad {
        PartitionLoad {
            gfx_busy: vec![busy; xccs],
            gfx_busy_acc: vec![u64::from(busy) * 1000; xccs],
            gfxclk: 2100,
        }
    }

    #[test]
    fn the_reader_reads_what_the_twin_writes() {
        let d = DeviceTable {
            hotspot: 61,
            mem_temp: 48,
            power: 512,
            gfx_activity: 40,
            umc_activity: 16,
            uclk: 1300,
            energy: 0x0001_2345_6789,
            pcie_gbs: 42,
            xgmi_kb: [(7, 9); 8],
            partitions: (0..8).map(|i| part(i * 10, 1)).collect(),
        };
        let m = parse(&gpu_metrics_v1_8(&d)).unwrap();
        assert_eq!(m.revision, (1, 8));
        assert_eq!(m.temperature_hotspot, Some(61));
        assert_eq!(m.temperature_mem, Some(48));
        assert_eq!(m.socket_power, Some(512));
        assert_eq!(m.umc_activity, Some(16));
        assert_eq!(m.num_partition, Some(8));
        assert_eq!(m.gfxclk, vec![2100; 8]);
        assert_eq!(m.io.energy_acc, Some(0x0001_2345_6789));
        assert_eq!((m.io.pcie_width, m.io.pcie_speed), (Some(16), Some(320)));
        assert_eq!(m.io.pcie_bandwidth_inst, Some(42));
        assert_eq!(m.io.pcie_replay, Some(0));
        assert_eq!(m.io.pcie_nak_received, Some(0));
        assert_eq!(m.io.xgmi_read_kb.len(), 8);
        assert_eq!(m.io.xgmi_write_kb[7], (7, 9));
        for (i, x) in m.xcp.iter().enumerate() {
            assert_eq!(
                x.gfx_busy(),
                Some(f64::from(u32::try_from(i).unwrap() * 10))
            );
        }
        let x = parse_xcp(&xcp_metrics_v1_0(&part(73, 2))).unwrap();
        assert_eq!(x.gfx_busy_inst, vec![73, 73]);
        assert_eq!(x.gfx_busy(), Some(73.0));
    }

    #[test]
    fn spx_puts_every_xcc_in_one_partition() {
        let d = DeviceTable {
            hotspot: 50,
            mem_temp: 40,
            power: 300,
            gfx_activity: 25,
            umc_activity: 10,
            uclk: 1300,
            energy: 0,
            pcie_gbs: 0,
            xgmi_kb: [(0, 0); 8],
            partitions: vec![part(25, 8)],
        };
        let m = parse(&gpu_metrics_v1_8(&d)).unwrap();
        assert_eq!(m.num_partition, Some(1));
        assert_eq!(m.xcp[0].gfx_busy_inst, vec![25; 8]);
    }
}
