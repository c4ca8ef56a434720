//! Carrying out a placement plan: its commands in log entries as large as allowed,
//! proposed without waiting for each other.
//!
//! At 10,000 resources a plan starting a cluster has 10,000 `Assign`s. Proposed in
//! entries of a fixed count, one after the other, each entry waited for its own
//! replication round, append and apply on every node before the next was even
//! appended. Now the entries are cut by encoded size, up to half of what one entry may
//! carry (`ControlOptions::max_command`, a quarter of the Raft message limit: the other
//! half is margin for the entry's framing), and all are handed to Raft at once, so
//! replication carries them in as few rounds as it can and nodes apply them as they
//! arrive. The plan's order is kept (`join_all` first polls the proposals in order, and
//! the first poll hands the entry to Raft), though safety does not rest on it:
//! `Cluster::apply` checks every command against the state it meets, so one that became
//! stale is refused, not misapplied.

use crate::cluster::Command;

/// Splits `commands` into batches whose encoded commands add up to at most `max_bytes`
/// each (a command larger than that alone goes in a batch of its own: the proposal then
/// refuses it by name), in order.
pub fn split(commands: Vec<Command>, max_bytes: usize) -> Vec<Vec<Command>> {
    let mut batches = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0;
    for command in commands {
        let size = postcard::experimental::serialized_size(&command).unwrap_or(max_bytes);
        if bytes + size > max_bytes && !batch.is_empty() {
            batches.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += size;
        batch.push(command);
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Proposal;

    fn assign(n: usize) -> Command {
        Command::Assign {
            resource: format!("r{n:05}"),
            slot: 0,
            node: "n1".into(),
            session: 12345,
            version: semver::Version::new(1, 0, 0),
            digest: format!("sha256:{}", "ab".repeat(32)),
            at_ms: 1_764_000_000_000,
        }
    }

    #[test]
    fn batches_keep_the_order_and_fit_the_bound() {
        let commands: Vec<Command> = (0..10_000).map(assign).collect();
        let max = 64 << 10;
        let batches = split(commands.clone(), max);
        assert!(batches.len() > 1, "10,000 assigns must not fit 64 KiB");
        for batch in &batches {
            let proposal = Proposal::Batch(batch.clone());
            let len = postcard::experimental::serialized_size(&proposal).unwrap();
            // The batch's own framing (the variant and the length prefix) is the margin.
            assert!(len <= max + 8, "a batch of {len} bytes exceeds {max}");
        }
        // Full: only the last batch may have room for another command.
        for batch in &batches[..batches.len() - 1] {
            let len: usize = batch
                .iter()
                .map(|c| postcard::experimental::serialized_size(c).unwrap())
                .sum();
            assert!(len + 200 > max, "a batch of {len} bytes was cut early");
        }
        assert_eq!(batches.concat(), commands);
    }

    #[test]
    fn nothing_gives_no_batch_and_an_oversized_command_goes_alone() {
        assert!(split(Vec::new(), 1000).is_empty());
        let batches = split(vec![assign(1), assign(2), assign(3)], 10);
        assert_eq!(
            batches,
            vec![vec![assign(1)], vec![assign(2)], vec![assign(3)]]
        );
    }
}
