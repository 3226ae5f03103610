//! The run's result as one JSON object (written by hand: a flat object of numbers and
//! strings needs no serializer).

use crate::outcome::Outcome;
use std::fmt::Write as _;
use std::time::Duration;

/// A JSON object under construction; fields keep their insertion order.
#[derive(Default)]
pub struct Json {
    fields: Vec<(String, String)>,
}

impl Json {
    /// Adds a number field (non-finite numbers become `null`).
    pub fn number(mut self, key: &str, value: f64) -> Self {
        let text = if value.is_finite() {
            format!("{}", (value * 1000.0).round() / 1000.0)
        } else {
            "null".into()
        };
        self.fields.push((key.into(), text));
        self
    }

    /// Adds an integer field.
    pub fn integer(mut self, key: &str, value: u64) -> Self {
        self.fields.push((key.into(), value.to_string()));
        self
    }

    /// Adds a string field.
    pub fn string(mut self, key: &str, value: &str) -> Self {
        self.fields.push((key.into(), quote(value)));
        self
    }

    /// Adds a nested object.
    pub fn object(mut self, key: &str, value: Json) -> Self {
        self.fields.push((key.into(), value.render()));
        self
    }

    /// The object's text.
    pub fn render(&self) -> String {
        let mut out = String::from("{");
        for (i, (key, value)) in self.fields.iter().enumerate() {
            let comma = if i == 0 { "" } else { ", " };
            let _ = write!(out, "{comma}{}: {value}", quote(key));
        }
        out.push('}');
        out
    }
}

/// A JSON string literal.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The measured part of a run: throughput, counts and latency in microseconds.
pub fn results(outcome: &Outcome, measured: Duration) -> Json {
    let h = &outcome.latency;
    let us = |nanos: u64| nanos as f64 / 1000.0;
    let latency = Json::default()
        .number("mean", h.mean() / 1000.0)
        .number("p50", us(h.quantile(0.50)))
        .number("p90", us(h.quantile(0.90)))
        .number("p99", us(h.quantile(0.99)))
        .number("p999", us(h.quantile(0.999)))
        .number("max", us(h.max()));
    let sent = (outcome.requests + outcome.unanswered).max(1) as f64;
    Json::default()
        .number(
            "ops_per_sec",
            h.count() as f64 / measured.as_secs_f64().max(1e-9),
        )
        .integer("measured", h.count())
        .integer("requests", outcome.requests)
        .integer("gets", outcome.gets)
        .integer("sets", outcome.sets)
        .integer("hits", outcome.hits)
        .integer("misses", outcome.misses)
        .integer("errors", outcome.errors)
        .integer("unanswered", outcome.unanswered)
        .object("latency_us", latency)
        .number(
            "send_lag_us_mean",
            outcome.send_lag_ns as f64 / sent / 1000.0,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Reply;
    use crate::workload::Op;

    #[test]
    fn renders_ordered_fields_and_escapes_strings() {
        let json = Json::default()
            .string("target", "a\"b\\c\n")
            .integer("n", 3)
            .number("x", 1.23456)
            .number("nan", f64::NAN)
            .object("inner", Json::default().integer("k", 1));
        assert_eq!(
            json.render(),
            r#"{"target": "a\"b\\c\u000a", "n": 3, "x": 1.235, "nan": null, "inner": {"k": 1}}"#
        );
    }

    #[test]
    fn results_report_throughput_over_the_measured_window() {
        let mut outcome = Outcome::default();
        for _ in 0..1000 {
            outcome.record(Op::Get, Reply::Value, Duration::from_micros(100), true);
        }
        let text = results(&outcome, Duration::from_secs(2)).render();
        assert!(
            text.starts_with(r#"{"ops_per_sec": 500, "measured": 1000"#),
            "{text}"
        );
        // Quantiles are bucket midpoints (within 1/64); the mean is exact.
        assert!(
            text.contains(r#""latency_us": {"mean": 100, "p50": 99.84"#),
            "{text}"
        );
    }
}
