//! A tiny SVG writer and the number formatting of chart axes.

use std::fmt::Write;

/// Escape text for XML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round tick step (1, 2 or 5 times a power of ten) giving about `target` steps
/// up to `max`.
pub(crate) fn nice_step(max: f64, target: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / target;
    let mag = 10f64.powf(raw.log10().floor());
    let m = [1.0, 2.0, 5.0]
        .into_iter()
        .find(|&m| raw / mag <= m)
        .unwrap_or(10.0);
    m * mag
}

/// A number with at most two decimals and no trailing zeros.
pub(crate) fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A number with a k or M suffix.
pub(crate) fn short_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// An SVG document being written.
pub(crate) struct Doc {
    out: String,
}

/// The `stroke-dasharray` attribute for `dash` (none when empty).
fn dash_attr(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    }
}

impl Doc {
    /// A `w` x `h` document on a white background.
    pub(crate) fn new(w: f64, h: f64) -> Doc {
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            out,
            r#"<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>"#
        );
        Doc { out }
    }

    pub(crate) fn line(
        &mut self,
        (x1, y1): (f64, f64),
        (x2, y2): (f64, f64),
        stroke: &str,
        width: f64,
        dash: &str,
    ) {
        let _ = writeln!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"{}/>"#,
            dash_attr(dash)
        );
    }

    /// Text at `(x, y)`; `attrs` are extra raw attributes (e.g. a transform).
    pub(crate) fn text(&mut self, (x, y): (f64, f64), anchor: &str, attrs: &str, content: &str) {
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}"{attrs}>{}</text>"#,
            esc(content)
        );
    }

    pub(crate) fn polyline(&mut self, pts: &[(f64, f64)], stroke: &str, dash: &str) {
        let pts: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", p.0, p.1))
            .collect();
        let _ = writeln!(
            self.out,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="2"{}/>"#,
            pts.join(" "),
            dash_attr(dash)
        );
    }

    /// A marker with a tooltip.
    pub(crate) fn circle(&mut self, (x, y): (f64, f64), fill: &str, title: &str) {
        let _ = writeln!(
            self.out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{fill}"><title>{}</title></circle>"#,
            esc(title)
        );
    }

    pub(crate) fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// Test helper: every tag closes in order, and no number is NaN or infinite.
#[cfg(test)]
pub(crate) fn assert_well_formed(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        let j = rest[i..].find('>').expect("unclosed tag") + i;
        let tag = &rest[i + 1..j];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().unwrap().to_string());
        }
        rest = &rest[j + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_steps_and_numbers_are_round() {
        assert_eq!(nice_step(100_000.0, 5.0), 20_000.0);
        assert_eq!(nice_step(7.0, 5.0), 2.0);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
        assert_eq!(nice_step(30.0, 5.0), 10.0);
        assert_eq!(short_num(1_500_000.0), "1.5M");
        assert_eq!(short_num(20_000.0), "20k");
        assert_eq!(trim(2.50), "2.5");
    }

    #[test]
    fn documents_are_well_formed_and_escaped() {
        let mut d = Doc::new(100.0, 50.0);
        d.line((0.0, 0.0), (10.0, 10.0), "black", 1.0, "2 2");
        d.text((5.0, 5.0), "middle", "", "a<b & \"c\"");
        d.polyline(&[(1.0, 2.0), (3.0, 4.0)], "red", "");
        d.circle((1.0, 1.0), "red", "x>y");
        let s = d.finish();
        assert_well_formed(&s);
        assert!(s.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(s.contains(r#"stroke-dasharray="2 2""#));
    }
}
