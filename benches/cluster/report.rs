//! The report: each figure printed as it is measured, then all of them as a Markdown table,
//! and the duration helpers (ms, percentiles) the figures are written with.

use std::time::Duration;

/// One printed figure.
struct Row {
    figure: String,
    copyrator: String,
    baseline: String,
    ratio: String,
    target: String,
}

#[derive(Default)]
pub struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
    /// Tables of their own (Markdown), after the notes.
    tables: Vec<String>,
}

impl Report {
    /// The column titles above the rows printed as they are measured.
    pub fn header() {
        println!(
            "{:<48} {:>24} {:>24} {:>8}   target",
            "figure", "copyrator", "baseline", "ratio"
        );
    }

    pub fn row(
        &mut self,
        figure: &str,
        copyrator: String,
        baseline: String,
        ratio: String,
        target: &str,
    ) {
        println!("{figure:<48} {copyrator:>24} {baseline:>24} {ratio:>8}   {target}");
        self.rows.push(Row {
            figure: figure.into(),
            copyrator,
            baseline,
            ratio,
            target: target.into(),
        });
    }

    pub fn note(&mut self, s: String) {
        println!("  - {s}");
        self.notes.push(s);
    }

    /// A table of its own (e.g. the scale curve), printed now and put after the notes.
    pub fn table(&mut self, title: &str, header: &[&str], rows: &[Vec<String>]) {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut t = format!("\n{title}\n\n");
        t.push_str(&line(
            &header.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        ));
        t.push_str(&line(&vec!["---".to_string(); header.len()]));
        for r in rows {
            t.push_str(&line(r));
        }
        println!("{t}");
        self.tables.push(t);
    }

    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| figure | copyrator | baseline (same run) | ratio | SPEC §7 target |\n|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                r.figure, r.copyrator, r.baseline, r.ratio, r.target
            ));
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n");
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        for t in &self.tables {
            out.push_str(t);
        }
        out
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The median of `v` (the upper one of an even count).
pub fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// `v` in milliseconds, `a/b/c ms`.
pub fn list(v: &[Duration]) -> String {
    let ms: Vec<String> = v
        .iter()
        .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .collect();
    format!("{} ms", ms.join("/"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The first and third quartiles of `v` (nearest rank).
pub fn quartiles(v: &[Duration]) -> (Duration, Duration) {
    let mut v = v.to_vec();
    v.sort();
    (percentile(&v, 0.25), percentile(&v, 0.75))
}

/// p50, p90, p99 and max of `v`.
pub fn summary(mut v: Vec<Duration>) -> (Duration, Duration, Duration, Duration) {
    v.sort();
    (
        percentile(&v, 0.5),
        percentile(&v, 0.9),
        percentile(&v, 0.99),
        *v.last().unwrap_or(&Duration::ZERO),
    )
}

/// A least-squares fit on log-log of `y` against `x`: `y ≈ k·x^exponent`.
#[derive(Clone, Copy, Debug)]
pub struct Fit {
    pub exponent: f64,
    /// ln k.
    ln_k: f64,
}

impl Fit {
    /// Fits `points` (x, y); points with a non-positive coordinate are left out.
    pub fn of(points: &[(f64, f64)]) -> Self {
        let logs: Vec<(f64, f64)> = points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|(x, y)| (x.ln(), y.ln()))
            .collect();
        let n = logs.len() as f64;
        if logs.len() < 2 {
            return Self {
                exponent: f64::NAN,
                ln_k: f64::NAN,
            };
        }
        let mx = logs.iter().map(|p| p.0).sum::<f64>() / n;
        let my = logs.iter().map(|p| p.1).sum::<f64>() / n;
        let sxy: f64 = logs.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        let sxx: f64 = logs.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
        let exponent = sxy / sxx;
        Self {
            exponent,
            ln_k: my - exponent * mx,
        }
    }

    pub fn power_at(&self, x: f64) -> f64 {
        (self.ln_k + self.exponent * x.ln()).exp()
    }
}
