//! What the benchmarks share: order statistics of a sample, unit conversions, and the
//! machine-load line printed before and after a run (figures from a small, shared
//! machine are only comparable with the load beside them).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Order statistics of a sample.
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(mut values: Vec<f64>) -> Summary {
        assert!(!values.is_empty(), "no measurements");
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        // Nearest rank: the smallest value with at least 99% of the sample at or below it.
        let p99 = values[(n * 99).div_ceil(100) - 1];
        Summary {
            n,
            min: values[0],
            median,
            p99,
            max: values[n - 1],
        }
    }

    pub fn describe(&self, unit: &str, d: usize) -> String {
        format!(
            "median {:.d$} {unit}, p99 {:.d$}, min {:.d$}, max {:.d$} (N = {})",
            self.median, self.p99, self.min, self.max, self.n
        )
    }
}

pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The 1-, 5- and 15-minute load averages, e.g. `1.64 2.18 5.42`.
pub fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints the core count and load average, e.g. `machine before: 2 cores, load …`.
pub fn print_machine(when: &str) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine {when}: {cores} cores, load average {}",
        load_average()
    );
}

/// The target dir: a benchmark runs as `<target>/[<triple>/]<profile>/deps/<bench>`, and
/// cargo marks `<target>` with a `CACHEDIR.TAG` file when it creates it (a target dir
/// made otherwise, or copied, may have none: then the profile dir's parent).
#[allow(dead_code, reason = "the scale and transport benches build no plugin")]
pub fn target_dir() -> anyhow::Result<PathBuf> {
    use anyhow::Context as _;
    let exe = std::env::current_exe().context("the benchmark's own path")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("the benchmark is not in <target>/<profile>/deps")?;
    profile_dir
        .ancestors()
        .skip(1)
        .take(2)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .or(profile_dir.parent())
        .map(Path::to_path_buf)
        .context("no target dir above the benchmark")
}
