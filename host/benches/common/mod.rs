//! What the benchmarks share: order statistics of a sample, unit conversions, and the
//! machine-load line printed before and after a run (figures from a small, shared
//! machine are only comparable with the load beside them).

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
