//! Counts over the four kinds of slot in a node's instance pool.
//!
//! The runtime's pooling allocator reserves, per node, a fixed number of component
//! instances (one per running plugin instance, with one fiber stack each), core
//! instances, linear memories and tables (`runtime::POOL`). A plugin instance takes one
//! component instance and as many of the others as its component instantiates: a small
//! Rust plugin takes 3 core instances, a Python one 14. So "how many plugins fit a node"
//! has no single answer: it is the first of the four dimensions to run out.
//!
//! One type, [`Pool`], serves as a footprint (what one instance takes, carried in a
//! node's [`super::Advert`]), as a node's capacity, and as what a node's slots use
//! (placement adds footprints up). Footprints come from peers, so placement reads them
//! through [`Pool::clamped`]: a footprint of zero or of billions cannot break its
//! arithmetic.

use serde::{Deserialize, Serialize};

/// Counts of component instances, core instances, memories and tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pool {
    /// Component instances (and fiber stacks): one per plugin instance.
    pub instances: u32,
    /// Instantiations of core wasm modules.
    pub core_instances: u32,
    /// Linear memories the core instances define.
    pub memories: u32,
    /// Tables the core instances define.
    pub tables: u32,
}

/// One of the four dimensions of a [`Pool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dimension {
    Instances,
    CoreInstances,
    Memories,
    Tables,
}

impl Dimension {
    pub const ALL: [Dimension; 4] = [
        Dimension::Instances,
        Dimension::CoreInstances,
        Dimension::Memories,
        Dimension::Tables,
    ];

    /// Its name in sentences: "core instances".
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Instances => "instances",
            Dimension::CoreInstances => "core instances",
            Dimension::Memories => "memories",
            Dimension::Tables => "tables",
        }
    }
}

impl Pool {
    /// What placement counts for a slot whose footprint nobody advertises (its plugin was
    /// removed everywhere, or its owner now advertises another build): larger than any
    /// plugin measured here (Rust 3 core instances, JavaScript 4, Python 14), so a node is
    /// never over-filled by what it cannot see. Such slots are on their way out.
    pub const UNKNOWN: Pool = Pool {
        instances: 1,
        core_instances: 16,
        memories: 4,
        tables: 16,
    };

    /// The count in `dimension`.
    pub fn get(&self, dimension: Dimension) -> u32 {
        match dimension {
            Dimension::Instances => self.instances,
            Dimension::CoreInstances => self.core_instances,
            Dimension::Memories => self.memories,
            Dimension::Tables => self.tables,
        }
    }

    fn map(self, other: Pool, f: impl Fn(u32, u32) -> u32) -> Pool {
        Pool {
            instances: f(self.instances, other.instances),
            core_instances: f(self.core_instances, other.core_instances),
            memories: f(self.memories, other.memories),
            tables: f(self.tables, other.tables),
        }
    }

    /// The larger of the two in every dimension.
    pub fn max(self, other: Pool) -> Pool {
        self.map(other, u32::max)
    }

    /// The sum in every dimension (saturating).
    pub fn plus(self, other: Pool) -> Pool {
        self.map(other, u32::saturating_add)
    }

    /// The difference in every dimension (saturating at zero).
    pub fn minus(self, other: Pool) -> Pool {
        self.map(other, u32::saturating_sub)
    }

    /// `numerator / denominator` of every dimension, rounded down.
    pub const fn scaled(self, numerator: u32, denominator: u32) -> Pool {
        const fn f(n: u32, numerator: u32, denominator: u32) -> u32 {
            let scaled = n as u64 * numerator as u64 / denominator as u64;
            if scaled > u32::MAX as u64 {
                u32::MAX
            } else {
                scaled as u32
            }
        }
        Pool {
            instances: f(self.instances, numerator, denominator),
            core_instances: f(self.core_instances, numerator, denominator),
            memories: f(self.memories, numerator, denominator),
            tables: f(self.tables, numerator, denominator),
        }
    }

    /// This footprint as placement counts it on a node of `capacity`: one instance, at
    /// least one core instance (every component instantiates one), and no dimension
    /// above the capacity (a footprint claiming more than a node holds takes a whole
    /// node, rather than none or an overflow).
    pub fn clamped(self, capacity: &Pool) -> Pool {
        Pool {
            instances: 1,
            core_instances: self.core_instances.max(1),
            ..self
        }
        .map(*capacity, u32::min)
    }

    /// The first dimension in which `used` plus one instance of this footprint exceeds
    /// `capacity`, if any.
    pub fn overflows(&self, used: &Pool, capacity: &Pool) -> Option<Dimension> {
        Dimension::ALL
            .into_iter()
            .find(|&d| used.get(d) as u64 + self.get(d) as u64 > capacity.get(d) as u64)
    }

    /// How many instances of this footprint fit an empty node of `capacity`, and the
    /// dimension that bounds them.
    pub fn fits(&self, capacity: &Pool) -> (u32, Dimension) {
        Dimension::ALL
            .into_iter()
            .filter(|&d| self.get(d) > 0)
            .map(|d| (capacity.get(d) / self.get(d), d))
            .min_by_key(|&(n, _)| n)
            .unwrap_or((capacity.instances, Dimension::Instances))
    }
}

/// `n` with thousands separators: 14,400.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: Pool = Pool {
        instances: 3_600,
        core_instances: 14_400,
        memories: 3_600,
        tables: 14_400,
    };

    #[test]
    fn a_python_footprint_fits_by_core_instances_and_a_rust_one_by_instances() {
        // The counters' footprints as the runtime counts them (tests/polyglot.rs).
        let python = Pool {
            instances: 1,
            core_instances: 14,
            memories: 1,
            tables: 2,
        };
        assert_eq!(python.fits(&NODE), (1_028, Dimension::CoreInstances));
        let rust = Pool {
            instances: 1,
            core_instances: 3,
            memories: 1,
            tables: 2,
        };
        assert_eq!(rust.fits(&NODE), (3_600, Dimension::Instances));
        let used = python.scaled(1_028, 1);
        assert_eq!(
            python.overflows(&used, &NODE),
            Some(Dimension::CoreInstances)
        );
        assert_eq!(rust.overflows(&used, &NODE), None, "4 core instances left");
    }

    #[test]
    fn nonsense_footprints_are_clamped_to_one_instance_within_the_node() {
        let zero = Pool::default().clamped(&NODE);
        assert_eq!(
            zero,
            Pool {
                instances: 1,
                core_instances: 1,
                memories: 0,
                tables: 0
            }
        );
        let huge = Pool {
            instances: u32::MAX,
            core_instances: u32::MAX,
            memories: u32::MAX,
            tables: u32::MAX,
        }
        .clamped(&NODE);
        assert_eq!(huge.instances, 1);
        assert_eq!(huge.fits(&NODE).0, 1, "a whole node, not none");
        assert_eq!(huge.overflows(&Pool::default(), &NODE), None);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(14_400), "14,400");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
