//! `txcache-loadgen`: drives one cache server on this machine and prints a JSON summary.
//!
//! ```text
//! txcache-loadgen --target 127.0.0.1:6379 --protocol resp --connections 8 --pipeline 16
//! txcache-loadgen --target 127.0.0.1:11211 --protocol memcache --rate 50000 --value-size etc
//! ```

use anyhow::Context as _;
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcache_loadgen::cli::{
    loopback_target, parse_key_dist, parse_mix, parse_run_duration, parse_value_size,
};
use txcache_loadgen::dist::Size;
use txcache_loadgen::protocol::Protocol;
use txcache_loadgen::report::{self, Json};
use txcache_loadgen::workload::{KeyDist, Workload, MAX_CONNECTIONS};
use txcache_loadgen::{closed, memory, open};

/// Load for a cache server on this machine (RESP or memcached's text protocol): preloads
/// the key space, runs closed-loop (maximum throughput) or open-loop (--rate) load, and
/// prints ops/s and latency quantiles as JSON.
#[derive(Debug, Parser)]
#[command(name = "txcache-loadgen", version, about, long_about = None)]
struct Args {
    /// The server, host:port; loopback addresses only.
    #[arg(long, default_value = "127.0.0.1:6380")]
    target: String,
    /// resp (GET/SET), versioned (txcached's TXGET/TXSET) or memcache (text get/set).
    #[arg(long, value_enum, default_value = "resp")]
    protocol: Protocol,
    /// Client connections (1–1024).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=MAX_CONNECTIONS as i64))]
    connections: u16,
    /// Requests per batch in closed loop; 1 means no pipelining (1–1024).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pipeline: u16,
    /// Lookups to stores, GETS:SETS (90:10, 30:1).
    #[arg(long, default_value = "90:10", value_parser = parse_mix)]
    mix: f64,
    /// Keys in the key space (1–50,000,000).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    keys: u64,
    /// Key popularity: uniform, zipf (exponent 0.99) or zipf:<exponent>.
    #[arg(long, default_value = "uniform", value_parser = parse_key_dist)]
    key_dist: KeyDist,
    /// Key size, e.g. 16; units b, k, m, g (or kb/kib, mb/mib, gb/gib: all powers of 1024); a
    /// bare number is bytes; keys are cut to 250 bytes. Or etc (Facebook ETC's GEV).
    /// Default: 16.
    #[arg(long, default_value = "16", value_name = "SIZE", value_parser = parse_value_size)]
    key_size: Size,
    /// Value size, e.g. 100, 4kb; units b, k, m, g (or kb/kib, mb/mib, gb/gib: all powers of
    /// 1024); a bare number is bytes; at most 1000000 bytes. Or etc (Facebook ETC's head and
    /// Pareto tail). Default: 100.
    #[arg(long, default_value = "100", value_name = "SIZE", value_parser = parse_value_size)]
    value_size: Size,
    /// Open loop at this many requests per second (all connections); default: closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Measured time, e.g. 5s, 500ms; units ns, us, ms, s, m, h; decimals allowed; a bare
    /// number is seconds; at most 10m. 0 only preloads.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = parse_run_duration)]
    duration: Duration,
    /// Unmeasured load before the measured time, e.g. 1s, 0.5s; units ns, us, ms, s, m, h;
    /// decimals allowed; a bare number is seconds; at most 10m.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_run_duration)]
    warmup: Duration,
    /// Do not store every key before the run.
    #[arg(long)]
    no_preload: bool,
    /// Remove every key from the server first (FLUSHALL, flush_all).
    #[arg(long)]
    flush: bool,
    /// Threads of the closed loop's runtime (1–64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// At most this many requests (warm-up included) in a closed-loop run.
    #[arg(long, default_value_t = 200_000_000)]
    max_requests: u64,
    /// Write the JSON here instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Instead of driving a server, measure this machine's memory latency now (a chase
    /// through 32 MiB, about a cache server's working set here, for 300 ms) and print it.
    #[arg(long)]
    memory_latency: bool,
}

/// The memory the latency probe chases through, and for how long.
const PROBE_BYTES: usize = 32 << 20;
const PROBE_TIME: Duration = Duration::from_millis(300);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.memory_latency {
        let measured = memory::probe(PROBE_BYTES, PROBE_TIME, args.seed);
        let json = Json::default()
            .number("memory_latency_ns", measured.ns_per_load)
            .integer("loads", measured.loads)
            .integer("bytes", measured.bytes as u64);
        return emit(&args, &json);
    }
    let address = loopback_target(&args.target).map_err(anyhow::Error::msg)?;
    if let Some(rate) = args.rate {
        anyhow::ensure!(
            rate > 0.0 && rate <= 10e6,
            "--rate must be in (0, 10,000,000]"
        );
    }
    let workload = Arc::new(Workload::new(
        args.protocol,
        args.keys,
        args.key_dist,
        args.key_size,
        args.value_size,
        args.mix,
        args.seed,
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.threads))
        .enable_all()
        .build()
        .context("could not start the runtime")?;
    let mut json = describe(&args, &workload);
    if args.flush {
        runtime.block_on(closed::flush(address, args.protocol))?;
    }
    if !args.no_preload {
        let started = Instant::now();
        let conns = usize::from(args.connections).min(16);
        let stored = runtime.block_on(closed::preload(
            address,
            Arc::clone(&workload),
            conns,
            args.seed,
        ))?;
        json = json
            .integer("preloaded", stored)
            .number("preload_s", started.elapsed().as_secs_f64());
    }
    if !args.duration.is_zero() {
        let outcome = match args.rate {
            Some(rate) => open::run(address, workload, open_plan(&args, rate), args.seed)?,
            None => runtime.block_on(closed::run(
                address,
                workload,
                closed_plan(&args),
                args.seed,
            ))?,
        };
        json = json.object("results", report::results(&outcome, args.duration));
    }
    emit(&args, &json)
}

/// Prints the JSON, or writes it to `--output`.
fn emit(args: &Args, json: &Json) -> anyhow::Result<()> {
    let text = json.render() + "\n";
    match &args.output {
        Some(path) => std::fs::write(path, text).with_context(|| format!("{}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

fn closed_plan(args: &Args) -> closed::ClosedLoop {
    closed::ClosedLoop {
        connections: usize::from(args.connections),
        depth: usize::from(args.pipeline),
        warmup: args.warmup,
        duration: args.duration,
        max_requests: args.max_requests,
    }
}

fn open_plan(args: &Args, rate: f64) -> open::OpenLoop {
    open::OpenLoop {
        connections: usize::from(args.connections),
        rate,
        warmup: args.warmup,
        duration: args.duration,
    }
}

/// The run's parameters, first in the JSON.
fn describe(args: &Args, workload: &Workload) -> Json {
    let size = |s: Size| match s {
        Size::Fixed(n) => n.to_string(),
        Size::Etc => "etc".into(),
    };
    let keys = match args.key_dist {
        KeyDist::Uniform => "uniform".to_string(),
        KeyDist::Zipf(e) => format!("zipf:{e}"),
    };
    let protocol = format!("{:?}", args.protocol).to_lowercase();
    Json::default()
        .string("target", &args.target)
        .string("protocol", &protocol)
        .string(
            "mode",
            if args.rate.is_some() {
                "open"
            } else {
                "closed"
            },
        )
        .integer("connections", u64::from(args.connections))
        .integer("pipeline", u64::from(args.pipeline))
        .number("rate", args.rate.unwrap_or(f64::NAN))
        .number("get_fraction", args.mix)
        .integer("keys", args.keys)
        .string("key_dist", &keys)
        .string("key_size", &size(args.key_size))
        .number("mean_key_len", workload.mean_key_len())
        .string("value_size", &size(args.value_size))
        .number("warmup_s", args.warmup.as_secs_f64())
        .number("duration_s", args.duration.as_secs_f64())
        .integer("threads", u64::from(args.threads))
        .integer("seed", args.seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use txcache_model::units::{DURATION_FORMS, SIZE_FORMS};

    #[test]
    fn every_duration_and_size_option_states_the_grammar() {
        let mut quantities = Vec::new();
        for arg in Args::command().get_arguments() {
            let forms = match arg.get_value_names() {
                Some([name]) if name == "SIZE" => SIZE_FORMS,
                Some([name]) if name == "DURATION" => DURATION_FORMS,
                _ => continue,
            };
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.contains(forms), "--{}: {help}", arg.get_id());
            quantities.push(arg.get_id().to_string());
        }
        assert_eq!(quantities, ["key_size", "value_size", "duration", "warmup"]);
    }

    #[test]
    fn the_values_the_benchmarks_pass_parse() {
        let args = Args::try_parse_from([
            "txcache-loadgen",
            "--duration",
            "0",
            "--warmup",
            "0.5s",
            "--value-size",
            "etc",
            "--key-size",
            "32",
        ]);
        let args = args.map(|a| (a.duration, a.warmup, a.value_size, a.key_size));
        let expected = (
            Duration::ZERO,
            Duration::from_millis(500),
            Size::Etc,
            Size::Fixed(32),
        );
        assert_eq!(args.ok(), Some(expected));
    }
}
