//! `gpu_metrics` and `xcp_metrics`: the SMU's binary tables, parsed from little-endian bytes at
//! explicit offsets (no transmute), every read bounds-checked. Fixed layouts v1.4 to v1.8, the
//! v1.9 attribute table, partition metrics v1.0 (fixed) and v1.1 (attribute table). The driver
//! fills unavailable fields with all-ones: those become `None`. Pure.

use std::collections::BTreeMap;

/// Why a table cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    /// Shorter than its header or than it says.
    #[error("truncated: {have} bytes, the table needs {need}")]
    Truncated {
        /// Bytes read.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A revision partop does not know.
    #[error("unknown revision {format}.{content} ({size} bytes); values are shown as N/A")]
    Unknown {
        /// format_revision.
        format: u8,
        /// content_revision.
        content: u8,
        /// structure_size.
        size: u16,
    },
    /// A known revision with the wrong size.
    #[error("revision {format}.{content} should be {want} bytes, the header says {size}")]
    Size {
        /// format_revision.
        format: u8,
        /// content_revision.
        content: u8,
        /// Expected.
        want: usize,
        /// Header's.
        size: u16,
    },
    /// An attribute table that does not add up.
    #[error("attribute table: {0}")]
    Table(String),
}

/// One partition's activity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XcpStats {
    /// Busy % of each of its XCCs (valid ones only).
    pub gfx_busy_inst: Vec<u32>,
    /// VCN busy % (valid ones only).
    pub vcn_busy: Vec<u16>,
    /// JPEG busy % (valid ones only).
    pub jpeg_busy: Vec<u16>,
    /// Accumulated busy per XCC (valid ones only).
    pub gfx_busy_acc: Vec<u64>,
}

impl XcpStats {
    /// The partition's GFX busy: the mean of its XCCs.
    pub fn gfx_busy(&self) -> Option<f64> {
        if self.gfx_busy_inst.is_empty() {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "small counts")]
        let n = self.gfx_busy_inst.len() as f64;
        Some(
            self.gfx_busy_inst
                .iter()
                .map(|v| f64::from(*v))
                .sum::<f64>()
                / n,
        )
    }
}

/// What partop uses of a device table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuMetrics {
    /// (format, content) revision.
    pub revision: (u8, u8),
    /// Hotspot (junction) temperature, °C.
    pub temperature_hotspot: Option<u16>,
    /// HBM temperature, °C.
    pub temperature_mem: Option<u16>,
    /// Socket power, W.
    pub socket_power: Option<u16>,
    /// Device GFX activity, %.
    pub gfx_activity: Option<u16>,
    /// Device memory-controller activity, %.
    pub umc_activity: Option<u16>,
    /// GFX clock per XCC, MHz (valid ones only).
    pub gfxclk: Vec<u16>,
    /// Memory clock, MHz.
    pub uclk: Option<u16>,
    /// Partitions in the current mode (v1.6+).
    pub num_partition: Option<u16>,
    /// Per partition (v1.6 to v1.8), `num_partition` entries.
    pub xcp: Vec<XcpStats>,
    /// Device-wide per-XCC busy (v1.9, which has no per-partition block).
    pub xcc_busy: Vec<u32>,
    /// Energy, PCIe and XGMI counters (the fixed layouts v1.4 to v1.8).
    pub io: Io,
}

/// A device's energy, PCIe and XGMI counters as the SMU accumulates them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Io {
    /// Energy accumulator, in 15.259 µJ (2^-16 J) units.
    pub energy_acc: Option<u64>,
    /// PCIe link width, lanes.
    pub pcie_width: Option<u16>,
    /// PCIe link speed, 0.1 GT/s.
    pub pcie_speed: Option<u16>,
    /// PCIe bandwidth now, GB/s.
    pub pcie_bandwidth_inst: Option<u64>,
    /// PCIe L0-to-recovery transitions, accumulated.
    pub pcie_recovery: Option<u64>,
    /// PCIe replays, accumulated.
    pub pcie_replay: Option<u64>,
    /// PCIe replay-counter rollovers, accumulated.
    pub pcie_replay_rollover: Option<u64>,
    /// PCIe NAKs sent, accumulated (v1.5+).
    pub pcie_nak_sent: Option<u32>,
    /// PCIe NAKs received, accumulated (v1.5+).
    pub pcie_nak_received: Option<u32>,
    /// XGMI data read per link, KB, by link index (links the table marks unused left out).
    pub xgmi_read_kb: Vec<(u32, u64)>,
    /// XGMI data written per link, KB, by link index.
    pub xgmi_write_kb: Vec<(u32, u64)>,
}

/// Offsets of the counters of one fixed layout: energy, link width (speed follows), PCIe
/// bandwidth accumulated (instant follows), L0-to-recovery (replay and rollover follow), NAK
/// sent (received follows; none before v1.5), XGMI read (write 64 bytes on).
#[derive(Clone, Copy)]
struct IoAt {
    energy: usize,
    link: usize,
    bandwidth: usize,
    recovery: usize,
    nak: Option<usize>,
    xgmi: usize,
}

const fn io_at(content: u8) -> Option<IoAt> {
    let (energy, link, bandwidth, recovery, nak, xgmi) = match content {
        4 => (24, 48, 64, 80, None, 104),
        5 => (88, 112, 128, 144, Some(168), 176),
        6 => (16, 60, 80, 96, Some(120), 128),
        7 | 8 => (24, 68, 88, 104, Some(128), 136),
        _ => return None,
    };
    Some(IoAt {
        energy,
        link,
        bandwidth,
        recovery,
        nak,
        xgmi,
    })
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn get<const N: usize>(&self, off: usize) -> Result<[u8; N], MetricsError> {
        self.0
            .get(off..off + N)
            .and_then(|s| s.try_into().ok())
            .ok_or(MetricsError::Truncated {
                have: self.0.len(),
                need: off + N,
            })
    }
    fn u16(&self, off: usize) -> Result<u16, MetricsError> {
        self.get::<2>(off).map(u16::from_le_bytes)
    }
    fn u32(&self, off: usize) -> Result<u32, MetricsError> {
        self.get::<4>(off).map(u32::from_le_bytes)
    }
    fn u64(&self, off: usize) -> Result<u64, MetricsError> {
        self.get::<8>(off).map(u64::from_le_bytes)
    }
    fn v16(&self, off: usize) -> Result<Option<u16>, MetricsError> {
        self.u16(off).map(|v| (v != u16::MAX).then_some(v))
    }
    fn a16(&self, off: usize, n: usize) -> Result<Vec<u16>, MetricsError> {
        (0..n)
            .map(|i| self.u16(off + 2 * i))
            .filter(|v| v.as_ref().map_or(true, |v| *v != u16::MAX))
            .collect()
    }
    fn a32(&self, off: usize, n: usize) -> Result<Vec<u32>, MetricsError> {
        (0..n)
            .map(|i| self.u32(off + 4 * i))
            .filter(|v| v.as_ref().map_or(true, |v| *v != u32::MAX))
            .collect()
    }
    fn v64(&self, off: usize) -> Result<Option<u64>, MetricsError> {
        self.u64(off).map(|v| (v != u64::MAX).then_some(v))
    }
    fn v32(&self, off: usize) -> Result<Option<u32>, MetricsError> {
        self.u32(off).map(|v| (v != u32::MAX).then_some(v))
    }
    /// Eight per-link u64 values kept with their link index (all-ones ones left out).
    fn links(&self, off: usize) -> Result<Vec<(u32, u64)>, MetricsError> {
        let mut v = Vec::new();
        for i in 0..8u32 {
            if let Some(x) = self.v64(off + 8 * i as usize)? {
                v.push((i, x));
            }
        }
        Ok(v)
    }
    fn io(&self, at: IoAt) -> Result<Io, MetricsError> {
        Ok(Io {
            energy_acc: self.v64(at.energy)?,
            pcie_width: self.v16(at.link)?,
            pcie_speed: self.v16(at.link + 2)?,
            pcie_bandwidth_inst: self.v64(at.bandwidth + 8)?,
            pcie_recovery: self.v64(at.recovery)?,
            pcie_replay: self.v64(at.recovery + 8)?,
            pcie_replay_rollover: self.v64(at.recovery + 16)?,
            pcie_nak_sent: at.nak.map(|o| self.v32(o)).transpose()?.flatten(),
            pcie_nak_received: at.nak.map(|o| self.v32(o + 4)).transpose()?.flatten(),
            xgmi_read_kb: self.links(at.xgmi)?,
            xgmi_write_kb: self.links(at.xgmi + 64)?,
        })
    }
    fn a64(&self, off: usize, n: usize) -> Result<Vec<u64>, MetricsError> {
        (0..n)
            .map(|i| self.u64(off + 8 * i))
            .filter(|v| v.as_ref().map_or(true, |v| *v != u64::MAX))
            .collect()
    }
}

/// Offsets of one fixed layout.
struct Layout {
    size: usize,
    gfxclk: usize,
    uclk: usize,
    /// (num_partition, xcp_stats, xcp stride, jpeg count, vcn offset in xcp, acc offset in xcp)
    xcp: Option<(usize, usize, usize, usize, usize, usize)>,
}

const fn layout(content: u8) -> Option<Layout> {
    Some(match content {
        4 => Layout {
            size: 288,
            gfxclk: 240,
            uclk: 280,
            xcp: None,
        },
        5 => Layout {
            size: 360,
            gfxclk: 312,
            uclk: 352,
            xcp: None,
        },
        6 => Layout {
            size: 1664,
            gfxclk: 264,
            uclk: 304,
            xcp: Some((306, 312, 168, 32, 96, 104)),
        },
        7 => Layout {
            size: 2208,
            gfxclk: 296,
            uclk: 336,
            xcp: Some((338, 344, 232, 32, 96, 104)),
        },
        8 => Layout {
            size: 3872,
            gfxclk: 296,
            uclk: 336,
            xcp: Some((338, 344, 440, 40, 112, 120)),
        },
        _ => return None,
    })
}

fn header(b: &[u8]) -> Result<(u16, u8, u8), MetricsError> {
    if b.len() < 4 {
        return Err(MetricsError::Truncated {
            have: b.len(),
            need: 4,
        });
    }
    let size = u16::from_le_bytes([b[0], b[1]]);
    if usize::from(size) > b.len() {
        return Err(MetricsError::Truncated {
            have: b.len(),
            need: usize::from(size),
        });
    }
    Ok((size, b[2], b[3]))
}

/// Parses a `gpu_metrics` file.
pub fn parse(b: &[u8]) -> Result<GpuMetrics, MetricsError> {
    let (size, format, content) = header(b)?;
    if format != 1 {
        return Err(MetricsError::Unknown {
            format,
            content,
            size,
        });
    }
    if content >= 9 {
        return attr_device(&b[..usize::from(size)], (format, content));
    }
    let l = layout(content).ok_or(MetricsError::Unknown {
        format,
        content,
        size,
    })?;
    if usize::from(size) != l.size {
        return Err(MetricsError::Size {
            format,
            content,
            want: l.size,
            size,
        });
    }
    let r = Bytes(&b[..l.size]);
    let mut m = GpuMetrics {
        revision: (format, content),
        temperature_hotspot: r.v16(4)?,
        temperature_mem: r.v16(6)?,
        socket_power: r.v16(10)?,
        gfx_activity: r.v16(12)?,
        umc_activity: r.v16(14)?,
        gfxclk: r.a16(l.gfxclk, 8)?,
        uclk: r.v16(l.uclk)?,
        io: io_at(content)
            .map(|at| r.io(at))
            .transpose()?
            .unwrap_or_default(),
        ..GpuMetrics::default()
    };
    if let Some((np, xs, stride, jpeg, vcn, acc)) = l.xcp {
        let n = r.v16(np)?;
        m.num_partition = n;
        for i in 0..usize::from(n.unwrap_or(0)).min(8) {
            let o = xs + i * stride;
            m.xcp.push(XcpStats {
                gfx_busy_inst: r.a32(o, 8)?,
                jpeg_busy: r.a16(o + 32, jpeg)?,
                vcn_busy: r.a16(o + vcn, 4)?,
                gfx_busy_acc: r.a64(o + acc, 8)?,
            });
        }
    }
    Ok(m)
}

/// Parses a partition's `xcp/xcp_metrics` file.
pub fn parse_xcp(b: &[u8]) -> Result<XcpStats, MetricsError> {
    let (size, format, content) = header(b)?;
    match (format, content) {
        (1, 0) => {
            if usize::from(size) != 488 {
                return Err(MetricsError::Size {
                    format,
                    content,
                    want: 488,
                    size,
                });
            }
            let r = Bytes(&b[..488]);
            Ok(XcpStats {
                gfx_busy_inst: r.a32(48, 8)?,
                jpeg_busy: r.a16(80, 40)?,
                vcn_busy: r.a16(160, 4)?,
                gfx_busy_acc: r.a64(168, 8)?,
            })
        }
        (1, c) if c >= 1 => {
            let attrs = attributes(&b[..usize::from(size)])?;
            Ok(XcpStats {
                gfx_busy_inst: attrs.get(&40).map(|v| valid32(v)).unwrap_or_default(),
                jpeg_busy: attrs.get(&41).map(|v| valid16(v)).unwrap_or_default(),
                vcn_busy: attrs.get(&42).map(|v| valid16(v)).unwrap_or_default(),
                gfx_busy_acc: attrs
                    .get(&43)
                    .map(|v| v.iter().copied().filter(|x| *x != u64::MAX).collect())
                    .unwrap_or_default(),
            })
        }
        _ => Err(MetricsError::Unknown {
            format,
            content,
            size,
        }),
    }
}

/// Values of the attribute table by attribute id, widened to u64; all-ones of the attribute's
/// own width become u64::MAX.
fn attributes(b: &[u8]) -> Result<BTreeMap<u16, Vec<u64>>, MetricsError> {
    let r = Bytes(b);
    let count = r.u32(4)?;
    let mut off = 8;
    let mut out = BTreeMap::new();
    for i in 0..count {
        let enc = r.u64(off).map_err(|_| {
            MetricsError::Table(format!(
                "attribute {i} of {count} starts past the end ({off})"
            ))
        })?;
        off += 8;
        let ty = (enc >> 20) & 0xf;
        let (id, n) = (((enc >> 10) & 0x3ff) as u16, (enc & 0x3ff) as usize);
        let width = match ty {
            0 | 1 => 1,
            2 | 3 => 2,
            4 | 5 => 4,
            6 | 7 => 8,
            other => {
                return Err(MetricsError::Table(format!(
                    "attribute {id}: unknown type {other}"
                )));
            }
        };
        if off + n * width > b.len() {
            return Err(MetricsError::Table(format!(
                "attribute {id} ({n} x {width} bytes at {off}) runs past the end ({})",
                b.len()
            )));
        }
        let vals: Vec<u64> = (0..n)
            .map(|k| {
                let p = off + k * width;
                let (v, max) = match width {
                    1 => (u64::from(b[p]), u64::from(u8::MAX)),
                    2 => (
                        u64::from(u16::from_le_bytes([b[p], b[p + 1]])),
                        u64::from(u16::MAX),
                    ),
                    4 => (
                        u64::from(u32::from_le_bytes([b[p], b[p + 1], b[p + 2], b[p + 3]])),
                        u64::from(u32::MAX),
                    ),
                    _ => {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(&b[p..p + 8]);
                        (u64::from_le_bytes(a), u64::MAX)
                    }
                };
                if v == max { u64::MAX } else { v }
            })
            .collect();
        off += n * width;
        out.insert(id, vals);
    }
    if off != b.len() {
        return Err(MetricsError::Table(format!(
            "{count} attributes end at byte {off}, the table has {} (encoding width?)",
            b.len()
        )));
    }
    Ok(out)
}

fn valid16(v: &[u64]) -> Vec<u16> {
    v.iter().filter_map(|x| u16::try_from(*x).ok()).collect()
}

fn valid32(v: &[u64]) -> Vec<u32> {
    v.iter().filter_map(|x| u32::try_from(*x).ok()).collect()
}

fn attr_device(b: &[u8], revision: (u8, u8)) -> Result<GpuMetrics, MetricsError> {
    let a = attributes(b)?;
    let one = |id: u16| {
        a.get(&id)
            .and_then(|v| v.first())
            .and_then(|x| u16::try_from(*x).ok())
    };
    Ok(GpuMetrics {
        revision,
        temperature_hotspot: one(0),
        temperature_mem: one(1),
        socket_power: one(3),
        gfx_activity: one(4),
        umc_activity: one(5),
        gfxclk: a.get(&33).map(|v| valid16(v)).unwrap_or_default(),
        uclk: one(37),
        num_partition: one(38),
        xcp: Vec::new(),
        xcc_busy: a.get(&40).map(|v| valid32(v)).unwrap_or_default(),
        // The v1.9 attribute ids of the counters are not read here yet: N/A, not guessed.
        io: Io::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1.9 table: header, count, then (encoding, values).
    fn table(attrs: &[(u64, u64, &[u64])]) -> Vec<u8> {
        let mut b = vec![0, 0, 1, 9];
        b.extend((attrs.len() as u32).to_le_bytes());
        for (ty, id, vals) in attrs {
            let enc = (ty << 20) | (id << 10) | vals.len() as u64;
            b.extend(enc.to_le_bytes());
            for v in *vals {
                match ty {
                    2 => b.extend((*v as u16).to_le_bytes()),
                    4 => b.extend((*v as u32).to_le_bytes()),
                    _ => b.extend(v.to_le_bytes()),
                }
            }
        }
        let n = b.len() as u16;
        b[..2].copy_from_slice(&n.to_le_bytes());
        b
    }

    #[test]
    fn v1_9_attribute_table() {
        let b = table(&[
            (2, 0, &[61]),
            (2, 3, &[540]),
            (2, 4, &[77]),
            (2, 33, &[2100, 2100, 0xffff, 2100]),
            (
                4,
                40,
                &[
                    90,
                    80,
                    70,
                    60,
                    0xffff_ffff,
                    0xffff_ffff,
                    0xffff_ffff,
                    0xffff_ffff,
                ],
            ),
            (6, 7, &[123_456]),
        ]);
        let m = parse(&b).unwrap();
        assert_eq!(m.revision, (1, 9));
        assert_eq!(m.temperature_hotspot, Some(61));
        assert_eq!(m.socket_power, Some(540));
        assert_eq!(m.gfxclk, vec![2100, 2100, 2100]);
        assert_eq!(m.xcc_busy, vec![90, 80, 70, 60]);
        // A walk that does not end exactly at the size is an error (u32 vs u64 encodings).
        let mut bad = b.clone();
        bad.truncate(b.len() - 4);
        let n = bad.len() as u16;
        bad[..2].copy_from_slice(&n.to_le_bytes());
        assert!(matches!(parse(&bad), Err(MetricsError::Table(_))));
    }

    #[test]
    fn wrong_revisions_and_truncation_are_errors() {
        assert_eq!(
            parse(&[1, 0]),
            Err(MetricsError::Truncated { have: 2, need: 4 })
        );
        let mut b = vec![0u8; 288];
        b[..4].copy_from_slice(&[0x20, 0x01, 1, 4]);
        assert!(parse(&b).is_ok());
        b[3] = 3;
        assert!(matches!(
            parse(&b),
            Err(MetricsError::Unknown { content: 3, .. })
        ));
        b[3] = 6;
        assert!(matches!(
            parse(&b),
            Err(MetricsError::Size { want: 1664, .. })
        ));
        b[2] = 2;
        assert!(matches!(
            parse(&b),
            Err(MetricsError::Unknown { format: 2, .. })
        ));
        assert!(matches!(
            parse(&b[..100]),
            Err(MetricsError::Truncated { need: 288, .. })
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Any bytes: an answer or an error, never a panic or a read past the buffer.
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4000)) {
            let _ = parse(&b);
            let _ = parse_xcp(&b);
        }

        /// Valid headers with random bodies exercise every layout and the attribute walk.
        #[test]
        fn never_panics_on_plausible_headers(
            content in 0u8..12,
            size in 0usize..4000,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4000),
        ) {
            let mut b = body;
            b.resize(size.max(4), 0xff);
            let s = u16::try_from(b.len()).unwrap_or(u16::MAX);
            b[..4].copy_from_slice(&[s.to_le_bytes()[0], s.to_le_bytes()[1], 1, content]);
            let _ = parse(&b);
            let _ = parse_xcp(&b);
        }
    }
}
