//! The page's pieces written by hand: escaping, colour scales, and the heatmap as inline
//! SVG, each cell a `<rect class="cell ...">` with data attributes (what the browser
//! test counts).

use std::fmt::Write;

/// `text` safe inside an element or a double-quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

type Rgb = (u8, u8, u8);

fn lerp(stops: &[Rgb], t: f64) -> Rgb {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let span = (stops.len() - 1) as f64;
    let i = ((t * span).floor() as usize).min(stops.len() - 2);
    let f = t * span - i as f64;
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
    let (a, b) = (stops[i], stops[i + 1]);
    (mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn hex((r, g, b): Rgb) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// A fill and the text colour that reads on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Paint {
    pub fill: String,
    pub ink: &'static str,
}

/// Light to dark blue for 0 to 1 (TFLOP/s over the page's scale).
pub fn sequential(t: f64) -> Paint {
    const BLUES: [Rgb; 3] = [(0xf2, 0xf7, 0xfd), (0x6b, 0xae, 0xd6), (0x08, 0x30, 0x6b)];
    Paint {
        fill: hex(lerp(&BLUES, t)),
        ink: if t > 0.5 { "#ffffff" } else { "#111111" },
    }
}

/// A ratio to the best peer: reds below 1.0 (full at 0.80), greens from 1.0 (full at
/// 1.20), so a losing cell never reads as a winning one.
pub fn diverging(ratio: f64) -> Paint {
    const REDS: [Rgb; 2] = [(0xfd, 0xe0, 0xdd), (0xc0, 0x1b, 0x1d)];
    const GREENS: [Rgb; 2] = [(0xe3, 0xf4, 0xde), (0x1f, 0x7a, 0x3c)];
    let (stops, t) = if ratio < 1.0 {
        (&REDS, (1.0 - ratio) / 0.2)
    } else {
        (&GREENS, (ratio - 1.0) / 0.2)
    };
    Paint {
        fill: hex(lerp(stops, t)),
        ink: if t > 0.6 { "#ffffff" } else { "#111111" },
    }
}

/// One cell of a heatmap.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Classes beside `cell` (`stale`, `below`, ...).
    pub class: String,
    pub key: String,
    /// More `data-*` attributes, names without the prefix.
    pub data: Vec<(&'static str, String)>,
    pub paint: Paint,
    /// A dashed red border (a stale record).
    pub flagged: bool,
    /// One to three lines, the first the figure the colour stands for.
    pub lines: Vec<String>,
    /// The tooltip.
    pub title: String,
}

/// A heatmap: labelled rows and columns, a cell or a gap in each place.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    pub id: String,
    /// What the picture is, for screen readers.
    pub label: String,
    pub axis: String,
    pub columns: Vec<String>,
    pub rows: Vec<(String, Vec<Option<Cell>>)>,
    pub cell_w: u32,
    pub cell_h: u32,
}

impl Heatmap {
    pub fn cells(&self) -> usize {
        self.rows
            .iter()
            .map(|(_, r)| r.iter().flatten().count())
            .sum()
    }

    /// The SVG, `data-cells` on it saying how many cells it draws.
    pub fn svg(&self) -> String {
        let label_chars = self.rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        let left = (label_chars as u32 * 15 / 2 + 16).max(60);
        let top = 40;
        let (cw, ch) = (self.cell_w, self.cell_h);
        let width = left + cw * self.columns.len() as u32 + 4;
        let height = top + ch * self.rows.len() as u32 + 4;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg class="heatmap" id="{id}" data-cells="{n}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{label}">"#,
            id = esc(&self.id),
            n = self.cells(),
            label = esc(&self.label),
        );
        let _ = write!(
            s,
            r#"<text class="axis" x="{}" y="14">{}</text>"#,
            left,
            esc(&self.axis)
        );
        for (i, c) in self.columns.iter().enumerate() {
            let x = left + cw * i as u32 + cw / 2;
            let _ = write!(
                s,
                r#"<text class="col" x="{x}" y="34" text-anchor="middle">{}</text>"#,
                esc(c)
            );
        }
        for (j, (label, cells)) in self.rows.iter().enumerate() {
            let y = top + ch * j as u32;
            let _ = write!(
                s,
                r#"<text class="row" x="{}" y="{}" text-anchor="end">{}</text>"#,
                left - 8,
                y + ch / 2 + 4,
                esc(label)
            );
            for (i, cell) in cells.iter().enumerate() {
                let Some(cell) = cell else { continue };
                let x = left + cw * i as u32;
                cell_svg(&mut s, cell, x, y, cw, ch);
            }
        }
        s.push_str("</svg>");
        s
    }
}

fn cell_svg(s: &mut String, c: &Cell, x: u32, y: u32, w: u32, h: u32) {
    let class = if c.class.is_empty() {
        "cell".to_string()
    } else {
        format!("cell {}", c.class)
    };
    let _ = write!(
        s,
        r#"<g><rect class="{}" data-key="{}""#,
        esc(&class),
        esc(&c.key)
    );
    for (name, value) in &c.data {
        let _ = write!(s, r#" data-{name}="{}""#, esc(value));
    }
    let stroke = if c.flagged {
        r##"stroke="#c01b1d" stroke-width="2" stroke-dasharray="4 3""##
    } else {
        r##"stroke="#ffffff" stroke-width="1""##
    };
    let _ = write!(
        s,
        r#" x="{x}" y="{y}" width="{w}" height="{h}" fill="{}" {stroke}><title>{}</title></rect>"#,
        c.paint.fill,
        esc(&c.title)
    );
    let n = c.lines.len().max(1) as u32;
    // Lines spread evenly down the cell, the first the largest.
    for (k, line) in c.lines.iter().enumerate() {
        let k = k as u32;
        let ty = y + h * (2 * k + 1) / (2 * n) + if k == 0 { 5 } else { 4 };
        let class = if k == 0 { "v1" } else { "v2" };
        let _ = write!(
            s,
            r#"<text class="{class}" x="{}" y="{ty}" text-anchor="middle" fill="{}">{}</text>"#,
            x + w / 2,
            c.paint.ink,
            esc(line)
        );
    }
    s.push_str("</g>");
}
