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
        out
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
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
