//! Metrics declared once. Each server keeps one table ([`Registry`]) whose rows say a metric's
//! section, name, kind and help, and how to read its value from one reading of the server.
//! The Prometheus text exposition is rendered here from that table; each server renders its
//! RESP text (the node's `INFO`, the agent's `STATUS`) from the same rows through
//! [`Registry::samples`], so no name, kind or help is written twice. [`http`] serves the
//! Prometheus text at `GET /metrics`. [`log`] is the servers' shared log setup (a checked
//! `--log` filter), kept here with the other process plumbing both binaries share.

use std::collections::{HashMap, HashSet};
use std::fmt::{Debug, Write as _};

pub mod http;
pub mod log;

/// Whether a metric only grows or may go both ways (the Prometheus types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows, from the process's start.
    Counter,
    /// A level now.
    Gauge,
}

impl Kind {
    /// The word Prometheus's `# TYPE` line takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// How a metric's value is read from a reading `R` of the server.
pub enum Read<R> {
    /// One number.
    One(fn(&R) -> u64),
    /// Series of one name told apart by one label: the label's name, and `(label value,
    /// number)` per series. There may be none; the metric is described all the same.
    Series(&'static str, fn(&R) -> Vec<(String, u64)>),
}

/// One row of a table: everything said about one metric.
pub struct Metric<R> {
    /// The group it is listed under (`INFO` sections, the documentation's tables).
    pub section: &'static str,
    /// The name, without the Prometheus prefix.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// One line of help.
    pub help: &'static str,
    /// How its value is read.
    pub read: Read<R>,
}

impl<R> Metric<R> {
    /// Its name in the Prometheus text: a counter's ends in `_total`, as Prometheus's naming
    /// conventions (and OpenMetrics) ask; `INFO` and `STATUS` keep the plain name.
    pub fn exposed_name(&self) -> std::borrow::Cow<'static, str> {
        match self.kind {
            Kind::Counter if !self.name.ends_with("_total") => {
                format!("{}_total", self.name).into()
            }
            _ => self.name.into(),
        }
    }

    /// A row with one value.
    pub const fn one(
        section: &'static str,
        name: &'static str,
        kind: Kind,
        help: &'static str,
        read: fn(&R) -> u64,
    ) -> Self {
        Self {
            section,
            name,
            kind,
            help,
            read: Read::One(read),
        }
    }

    /// A row with one series per value of `label`.
    pub const fn series(
        section: &'static str,
        name: &'static str,
        kind: Kind,
        help: &'static str,
        label: &'static str,
        read: fn(&R) -> Vec<(String, u64)>,
    ) -> Self {
        Self {
            section,
            name,
            kind,
            help,
            read: Read::Series(label, read),
        }
    }
}

/// One number of a rendering.
pub struct Sample<R: 'static> {
    /// The row it belongs to.
    pub metric: &'static Metric<R>,
    /// `(label, value)` for one series of a labelled metric.
    pub label: Option<(&'static str, String)>,
    /// The number.
    pub value: u64,
}

/// A server's table, and the prefix its names carry in Prometheus.
pub struct Registry<R: 'static> {
    /// Prepended to every name in the Prometheus text (`txcached_`, `txcache_agent_`).
    pub prefix: &'static str,
    /// The rows, in rendering order; a section's rows are consecutive.
    pub metrics: &'static [Metric<R>],
}

impl<R> Registry<R> {
    /// Every number of `reading`, row by row.
    pub fn samples(&self, reading: &R) -> Vec<Sample<R>> {
        let mut samples = Vec::with_capacity(self.metrics.len());
        for metric in self.metrics {
            match metric.read {
                Read::One(read) => samples.push(Sample {
                    metric,
                    label: None,
                    value: read(reading),
                }),
                Read::Series(label, read) => {
                    samples.extend(read(reading).into_iter().map(|(value_of_label, value)| {
                        Sample {
                            metric,
                            label: Some((label, value_of_label)),
                            value,
                        }
                    }))
                }
            }
        }
        samples
    }

    /// The sections, in order.
    pub fn sections(&self) -> Vec<&'static str> {
        let mut sections: Vec<&'static str> = Vec::new();
        for metric in self.metrics {
            if !sections.contains(&metric.section) {
                sections.push(metric.section);
            }
        }
        sections
    }

    /// The Prometheus text exposition (format 0.0.4) of `reading`.
    pub fn prometheus(&self, reading: &R) -> String {
        let mut text = String::new();
        let samples = self.samples(reading);
        let mut samples = samples.iter().peekable();
        for metric in self.metrics {
            let (prefix, name) = (self.prefix, metric.exposed_name());
            let _ = write!(
                text,
                "# HELP {prefix}{name} {}\n# TYPE {prefix}{name} {}\n",
                metric.help,
                metric.kind.as_str()
            );
            // Samples come in row order: take this row's.
            while let Some(sample) = samples.next_if(|s| std::ptr::eq(s.metric, metric)) {
                match &sample.label {
                    Some((label, value)) => {
                        let value = escape_label_value(value);
                        let _ = writeln!(
                            text,
                            "{prefix}{name}{{{label}=\"{value}\"}} {}",
                            sample.value
                        );
                    }
                    None => {
                        let _ = writeln!(text, "{prefix}{name} {}", sample.value);
                    }
                }
            }
        }
        text
    }

    /// What is wrong with the table: a name used twice or not a Prometheus name, a help
    /// that is empty or not one line, a section split in two. Empty when all is well; each
    /// server's tests assert that.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut names = HashSet::new();
        let mut closed_sections: Vec<&str> = Vec::new();
        let mut current = None;
        for metric in self.metrics {
            let name = metric.name;
            if !names.insert(name) {
                problems.push(format!("{name}: declared twice"));
            }
            let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
            if name.is_empty()
                || !name.chars().all(valid)
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                problems.push(format!("{name:?}: not a lower-case Prometheus name"));
            }
            if metric.help.is_empty() || metric.help.contains(['\n', '\r', '\\']) {
                problems.push(format!("{name}: help must be one plain line"));
            }
            if current != Some(metric.section) {
                if closed_sections.contains(&metric.section) {
                    problems.push(format!("{name}: section {} is split", metric.section));
                }
                closed_sections.extend(current);
                current = Some(metric.section);
            }
        }
        problems
    }

    /// The numeric fields of `reading` (from its `{:#?}` text) whose value no sample shows,
    /// and pairs of fields sharing a value (which would hide one of them). For tests: give
    /// every field of a reading a distinct value, and an empty answer means every counter the
    /// reading carries is exported.
    pub fn unexported_fields(&self, reading: &R) -> Vec<String>
    where
        R: Debug,
    {
        let shown: HashSet<u64> = self.samples(reading).iter().map(|s| s.value).collect();
        let mut owners: HashMap<u64, String> = HashMap::new();
        let mut problems = Vec::new();
        for (field, value) in numeric_fields(&format!("{reading:#?}")) {
            if !shown.contains(&value) {
                problems.push(format!("{field} ({value}) is in no metric"));
            }
            if let Some(other) = owners.insert(value, field.clone()) {
                problems.push(format!(
                    "{other} and {field} are both {value}: make them differ"
                ));
            }
        }
        problems
    }
}

/// A label value as the text format needs it: backslash, double quote and newline escaped.
fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// `(field path, number)` for every unsigned number of a `{:#?}` text: `name: 5` lines
/// (named by their enclosing fields, `stats.hits`), and `name[i]` for the elements of a
/// sequence of numbers. Other values (text, booleans, options) are skipped.
fn numeric_fields(debug: &str) -> Vec<(String, u64)> {
    // Enclosing named fields, each with the count of bare numbers seen in it so far.
    let mut path: Vec<(String, usize)> = Vec::new();
    let mut fields = Vec::new();
    for line in debug.lines() {
        let line = line.trim().trim_end_matches(',');
        let (name, value) = line.split_once(": ").unwrap_or(("", line));
        let prefix: Vec<&str> = path
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| !name.is_empty())
            .collect();
        let prefix = prefix.join(".");
        if value.ends_with(['{', '[', '(']) {
            path.push((name.to_owned(), 0));
        } else if matches!(value, "}" | "]" | ")") {
            path.pop();
        } else if let Ok(number) = value.parse::<u64>() {
            if !name.is_empty() {
                let dot = if prefix.is_empty() { "" } else { "." };
                fields.push((format!("{prefix}{dot}{name}"), number));
            } else if let Some((_, index)) = path.last_mut() {
                fields.push((format!("{prefix}[{index}]"), number));
                *index += 1;
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Reading {
        requests: u64,
        open: u64,
        per_peer: Vec<(String, u64)>,
    }

    static TABLE: Registry<Reading> = Registry {
        prefix: "demo_",
        metrics: &[
            Metric::one(
                "traffic",
                "requests",
                Kind::Counter,
                "Requests served",
                |r| r.requests,
            ),
            Metric::one("traffic", "open", Kind::Gauge, "Connections open", |r| {
                r.open
            }),
            Metric::series(
                "peers",
                "peer_messages",
                Kind::Counter,
                "Messages per peer",
                "peer",
                |r| r.per_peer.clone(),
            ),
        ],
    };

    #[test]
    fn prometheus_text_describes_every_row_and_lists_its_series() {
        let reading = Reading {
            requests: 7,
            open: 2,
            per_peer: vec![("a:1".to_owned(), 3), ("say \"hi\"\\".to_owned(), 4)],
        };
        let expected = "\
# HELP demo_requests_total Requests served
# TYPE demo_requests_total counter
demo_requests_total 7
# HELP demo_open Connections open
# TYPE demo_open gauge
demo_open 2
# HELP demo_peer_messages_total Messages per peer
# TYPE demo_peer_messages_total counter
demo_peer_messages_total{peer=\"a:1\"} 3
demo_peer_messages_total{peer=\"say \\\"hi\\\"\\\\\"} 4
";
        assert_eq!(TABLE.prometheus(&reading), expected);
    }

    #[test]
    fn a_labelled_metric_without_series_is_still_described() {
        let text = TABLE.prometheus(&Reading::default());
        assert!(
            text.ends_with("# TYPE demo_peer_messages_total counter\n"),
            "{text}"
        );
        assert_eq!(TABLE.sections(), ["traffic", "peers"]);
        assert!(TABLE.problems().is_empty(), "{:?}", TABLE.problems());
    }

    #[test]
    fn problems_name_duplicates_bad_names_bad_help_and_split_sections() {
        static BAD: Registry<Reading> = Registry {
            prefix: "demo_",
            metrics: &[
                Metric::one("a", "x", Kind::Gauge, "X", |r| r.open),
                Metric::one("b", "x", Kind::Gauge, "two\nlines", |r| r.open),
                Metric::one("a", "Bad-Name", Kind::Gauge, "Y", |r| r.open),
            ],
        };
        let problems = BAD.problems();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("declared twice"));
        assert!(problems[1].contains("one plain line"));
        assert!(problems[2].contains("Prometheus name"));
        assert!(problems[3].contains("split"));
    }

    #[test]
    fn unexported_fields_finds_a_counter_without_a_row() {
        #[derive(Debug)]
        struct Wider {
            inner: Reading,
            #[expect(
                dead_code,
                reason = "the counter no row reads, which the check must find"
            )]
            forgotten: u64,
            buckets: [u64; 2],
        }
        static WIDER: Registry<Wider> = Registry {
            prefix: "demo_",
            metrics: &[
                Metric::one("a", "requests", Kind::Counter, "R", |w| w.inner.requests),
                Metric::one("a", "open", Kind::Gauge, "O", |w| w.inner.open),
                Metric::one("a", "bucket_0", Kind::Gauge, "B", |w| w.buckets[0]),
            ],
        };
        let reading = Wider {
            inner: Reading {
                requests: 11,
                open: 12,
                per_peer: Vec::new(),
            },
            forgotten: 13,
            buckets: [14, 11],
        };
        // buckets[1] shares requests' value, so it looks exported: that is reported instead.
        let problems = WIDER.unexported_fields(&reading);
        let expected = [
            "forgotten (13) is in no metric",
            "inner.requests and buckets[1] are both 11: make them differ",
        ];
        assert_eq!(problems, expected);
    }
}
