//! The partition map widget: one physical GPU's XCDs and HBM (NPS) domains drawn as blocks, each
//! coloured and labelled by the logical GPU that owns it. Built from a live GPU or from layout
//! shapes, so a staged (not yet applied) layout can be drawn beside the current one.

use crate::domain::layout::PartitionShape;
use crate::domain::snapshot::PhysicalGpu;
use crate::ui::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// The map of one physical GPU.
#[derive(Debug, Clone)]
pub struct PartitionMap<'a> {
    /// Owner (logical GPU index) of each XCD.
    pub xcds: Vec<Option<u32>>,
    /// Logical GPUs allocating from each memory domain.
    pub domains: Vec<Vec<u32>>,
    /// Theme.
    pub theme: &'a Theme,
    /// What to say instead of an XCD map (an NVIDIA GPU: its MIG layout).
    pub note: Option<String>,
    /// The selected logical GPU: its XCDs are drawn in brackets and reversed (visible without
    /// colour).
    pub selected: Option<u32>,
}

/// One line for an NVIDIA GPU: its GPU instances, or what it offers with MIG off.
fn mig_note(g: &PhysicalGpu) -> Option<String> {
    let m = g.mig.as_ref()?;
    Some(if m.enabled {
        let gis: Vec<String> = g
            .partitions
            .iter()
            .map(|l| {
                format!(
                    "{} gi{} {}",
                    l.gpu_id,
                    l.partition_id,
                    l.profile.as_deref().unwrap_or("?")
                )
            })
            .collect();
        format!("MIG: {}", gis.join(" │ "))
    } else {
        let offers: Vec<String> = m
            .profiles
            .iter()
            .filter(|p| !p.name.contains('+'))
            .map(|p| format!("{}×{}", p.name, p.max_instances))
            .collect();
        format!("MIG off: one logical GPU · offers {}", offers.join(" "))
    })
}

impl<'a> PartitionMap<'a> {
    /// From a live GPU.
    pub fn from_gpu(g: &PhysicalGpu, theme: &'a Theme) -> Self {
        let n_xcd = g.xcd_count.unwrap_or(0) as usize;
        let mut xcds = vec![None; n_xcd];
        let n_dom = g.memory_partition.map_or(1, |m| m.domains() as usize);
        let mut domains = vec![Vec::new(); n_dom];
        for l in &g.partitions {
            for x in &l.xcds {
                if let Some(slot) = xcds.get_mut(*x as usize) {
                    *slot = Some(l.gpu_id);
                }
            }
            for d in &l.memory_domains {
                if let Some(slot) = domains.get_mut(*d as usize) {
                    slot.push(l.gpu_id);
                }
            }
        }
        Self {
            xcds,
            domains,
            theme,
            note: mig_note(g),
            selected: None,
        }
    }

    /// From layout shapes (a staged layout), numbering from `first`.
    pub fn from_shapes(
        shapes: &[PartitionShape],
        xcd_count: u32,
        domains: u32,
        first: u32,
        theme: &'a Theme,
    ) -> Self {
        let mut xcds = vec![None; xcd_count as usize];
        let mut doms = vec![Vec::new(); domains as usize];
        for s in shapes {
            let id = first + s.partition_id;
            for x in &s.xcds {
                if let Some(slot) = xcds.get_mut(*x as usize) {
                    *slot = Some(id);
                }
            }
            for d in &s.memory_domains {
                if let Some(slot) = doms.get_mut(*d as usize) {
                    slot.push(id);
                }
            }
        }
        Self {
            xcds,
            domains: doms,
            theme,
            note: None,
            selected: None,
        }
    }

    fn style(&self, owner: Option<u32>) -> Style {
        owner.map_or_else(|| self.theme.get("ui.muted"), |o| self.theme.partition(o))
    }
}

fn centered(text: &str, w: usize) -> String {
    let t: String = text.chars().take(w).collect();
    let pad = w.saturating_sub(t.chars().count());
    format!("{}{t}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
}

impl Widget for &PartitionMap<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.height == 0 || area.width < 8 {
            return;
        }
        let muted = self.theme.get("ui.muted");
        if let Some(n) = &self.note {
            buf.set_string(
                area.x,
                area.y,
                centered(n, usize::from(area.width)).trim_end(),
                muted,
            );
            return;
        }
        buf.set_string(area.x, area.y, "XCD ", muted);
        let w = usize::from(area.width - 4);
        if self.xcds.is_empty() {
            buf.set_string(
                area.x + 4,
                area.y,
                "layout unknown (product not identified)",
                muted,
            );
            return;
        }
        let n = self.xcds.len();
        let cell = (w / n).max(1);
        for (i, owner) in self.xcds.iter().enumerate() {
            // A gap where the owner changes keeps partitions apart in a colourless theme.
            let gap = usize::from(i + 1 < n && self.xcds[i + 1] != *owner && cell > 2);
            let sel = owner.is_some() && *owner == self.selected;
            let label = owner.map_or_else(
                || "·".to_string(),
                |o| if sel { format!("[{o}]") } else { o.to_string() },
            );
            let style = if sel {
                self.style(*owner).add_modifier(
                    ratatui::style::Modifier::REVERSED | ratatui::style::Modifier::BOLD,
                )
            } else {
                self.style(*owner)
            };
            #[expect(clippy::cast_possible_truncation, reason = "fits the area")]
            let x = area.x + 4 + (i * cell) as u16;
            buf.set_string(x, area.y, centered(&label, cell - gap), style);
        }
        if area.height < 2 {
            return;
        }
        buf.set_string(area.x, area.y + 1, "HBM ", muted);
        let d = self.domains.len().max(1);
        let dcell = (cell * n / d).max(1);
        for (i, owners) in self.domains.iter().enumerate() {
            let label = if owners.is_empty() {
                format!("NPS{i}: free")
            } else {
                let ids: Vec<String> = owners.iter().map(ToString::to_string).collect();
                format!("mem{i}: {}", ids.join(","))
            };
            let style = if owners.len() == 1 {
                self.style(owners.first().copied())
            } else {
                self.theme
                    .get("partition.domain")
                    .add_modifier(ratatui::style::Modifier::REVERSED)
            };
            let gap = usize::from(i + 1 < d && dcell > 2);
            #[expect(clippy::cast_possible_truncation, reason = "fits the area")]
            let x = area.x + 4 + (i * dcell) as u16;
            buf.set_string(x, area.y + 1, centered(&label, dcell - gap), style);
        }
    }
}
