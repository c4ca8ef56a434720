//! Property tests of the control plane's decoders of peer bytes: whatever a peer sends
//! (random bytes, valid messages with bytes changed, length prefixes announcing up to
//! 2^63 elements, batches nested 50,000 deep), decoding answers without panicking, within
//! a bounded stack (a deep nesting would abort the test binary), and allocates at most
//! [`alloc_bound`]: a fixed multiple of the input plus serde's preallocation cap.
//!
//! Decoded as the node decodes them: the requests of `service.rs` (through its `decode`),
//! the answers `network.rs`, `propose.rs` and `membership.rs` read, and a received
//! snapshot's image (`state_machine.rs`, the same postcard layout as the tuple here).
//!
//! They run proptest's default number of cases (256 per property, or `PROPTEST_CASES`).
//! The long run, once per change to a wire type:
//! `PROPTEST_CASES=100000 cargo test --release -p tenure --lib raft::decode_proptests`.
//!
//! Nested values include openraft's errors in answers, whose `anyerror::AnyError` nests
//! itself: only the nesting limit of [`crate::rpc::decode`] stops those.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;

use openraft::{CommittedLeaderId, EntryPayload, LogId};
use proptest::prelude::*;

use super::attack_tests::{nested_batches, nested_error_answer, nested_proposal};
use super::kinds::{JoinReply, ProposeReply};
use super::network::read_answer;
use super::service::decode;
use super::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, Fatal, InstallSnapshotError,
    InstallSnapshotRequest, InstallSnapshotResponse, RaftError, SnapshotMeta, StoredMembership,
    Vote, VoteRequest, VoteResponse,
};
use super::{Peer, node_id};
use crate::cluster::{Cluster, Command, Proposal};
use crate::rpc;

/// The allocation a decode of `len` input bytes may reach at its peak: serde preallocates
/// at most 1 MiB for a sequence whatever its length prefix says (a few may be live at
/// once), and otherwise allocates in proportion to the bytes actually read.
fn alloc_bound(len: usize) -> isize {
    (4 << 20) + 64 * len as isize
}

/// Counts this thread's live heap bytes and their peak, so a decode's allocation can be
/// measured while other tests run on other threads.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // `try_with`: the allocator also runs while a thread's locals are being torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is passed on to `System` unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The peak of this thread's extra heap while `f` runs.
fn peak_during(f: impl FnOnce()) -> isize {
    let base = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    f();
    PEAK.with(Cell::get) - base
}

/// Decodes `bytes` as every control plane message and answer, dropping the results.
fn decode_everything(bytes: &[u8]) {
    let _ = decode::<AppendEntriesRequest>(1, bytes);
    let _ = decode::<VoteRequest>(2, bytes);
    let _ = decode::<InstallSnapshotRequest>(3, bytes);
    let _ = decode::<Proposal>(10, bytes);
    let _ = decode::<Peer>(11, bytes);
    let _ = rpc::decode::<ProposeReply>(bytes);
    let _ = rpc::decode::<JoinReply>(bytes);
    let _ = read_answer::<AppendEntriesResponse, Fatal>(bytes);
    let _ = read_answer::<VoteResponse, Fatal>(bytes);
    let _ = read_answer::<InstallSnapshotResponse, RaftError<InstallSnapshotError>>(bytes);
    // A received snapshot's image, as `state_machine.rs` decodes it (no type in it nests).
    let _ = postcard::from_bytes::<(Option<super::types::LogId>, StoredMembership, Cluster)>(bytes);
}

/// Valid messages whose bytes the strategies change.
fn seeds() -> Vec<Vec<u8>> {
    let leader = node_id("n1");
    let log_id = |index| LogId::new(CommittedLeaderId::new(3, leader), index);
    let command = |i: u32| Command::Assign {
        resource: format!("r{i}"),
        slot: i,
        node: "n2".into(),
        session: 7,
        version: semver::Version::new(1, 2, 3),
        digest: "sha256:00".into(),
        at_ms: 1,
    };
    let entries = vec![
        Entry {
            log_id: log_id(5),
            payload: EntryPayload::Normal(Proposal::One(command(0))),
        },
        Entry {
            log_id: log_id(6),
            payload: EntryPayload::Normal(Proposal::Batch((1..4).map(command).collect())),
        },
        Entry {
            log_id: log_id(7),
            payload: EntryPayload::Blank,
        },
    ];
    let append = AppendEntriesRequest {
        vote: Vote::new_committed(3, leader),
        prev_log_id: Some(log_id(4)),
        entries,
        leader_commit: Some(log_id(4)),
    };
    let snapshot = InstallSnapshotRequest {
        vote: Vote::new_committed(3, leader),
        meta: SnapshotMeta {
            last_log_id: Some(log_id(9)),
            last_membership: StoredMembership::default(),
            snapshot_id: "3-9-0".into(),
        },
        offset: 0,
        data: vec![1, 2, 3],
        done: false,
    };
    let join = Command::Join {
        node: "n2".into(),
        addr: "10.0.0.2:7400".into(),
        labels: BTreeMap::from([("zone".into(), "a".into())]),
    };
    vec![
        postcard::to_allocvec(&append).unwrap(),
        postcard::to_allocvec(&snapshot).unwrap(),
        postcard::to_allocvec(&Proposal::Batch(vec![join.clone(), command(9)])).unwrap(),
        postcard::to_allocvec(&Proposal::One(join)).unwrap(),
        postcard::to_allocvec(&Peer::new("n2", "10.0.0.2:7400")).unwrap(),
    ]
}

/// A postcard varint (LEB128) of `n`: postcard's own encoding of a `u64`.
fn varint(n: u64) -> Vec<u8> {
    postcard::to_allocvec(&n).expect("a u64 always encodes")
}

/// One change to a message's bytes.
#[derive(Clone, Debug)]
enum Change {
    /// Sets the byte at (a position modulo the length) to a value.
    Set(usize, u8),
    /// Inserts a length prefix of up to 2^63 there.
    Huge(usize, u64),
    /// Cuts the message there.
    Cut(usize),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Change::Set(at, b)),
        3 => (any::<usize>(), (16u32..64).prop_flat_map(|bits| 0..=(1u64 << bits)))
            .prop_map(|(at, n)| Change::Huge(at, n)),
        1 => any::<usize>().prop_map(Change::Cut),
    ]
}

fn apply(mut bytes: Vec<u8>, changes: &[Change]) -> Vec<u8> {
    for change in changes {
        let at = |i: usize| i % (bytes.len() + 1);
        match *change {
            Change::Set(i, b) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes[i] = b;
            }
            Change::Set(..) => {}
            Change::Huge(i, n) => {
                let i = at(i);
                bytes.splice(i..i, varint(n));
            }
            Change::Cut(i) => bytes.truncate(at(i)),
        }
    }
    bytes
}

/// Adversarial inputs: random bytes, changed valid messages, nested batches.
fn adversarial() -> impl Strategy<Value = Vec<u8>> {
    let count = seeds().len();
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..4096),
        // A plausible start (a variant tag, then a huge length), then random bytes.
        2 => (0u8..16, any::<u64>(), prop::collection::vec(any::<u8>(), 0..256))
            .prop_map(|(tag, n, tail)| [vec![tag], varint(n), tail].concat()),
        4 => (0..count, prop::collection::vec(change(), 1..5))
            .prop_map(|(seed, changes)| apply(seeds().swap_remove(seed), &changes)),
        1 => (0usize..50_000, any::<bool>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(depth, old, tail)| {
                let nested = if old { nested_batches(depth) } else { nested_proposal(depth) };
                [nested, tail].concat()
            }),
        1 => (1usize..50_000).prop_map(nested_error_answer),
    ]
}

proptest! {
    #[test]
    fn peer_bytes_decode_without_panic_and_within_the_allocation_bound(bytes in adversarial()) {
        let peak = peak_during(|| decode_everything(&bytes));
        prop_assert!(
            peak <= alloc_bound(bytes.len()),
            "decoding {} bytes allocated {} bytes at its peak", bytes.len(), peak
        );
    }
}

#[test]
fn the_seeds_decode_and_a_nested_batch_does_not() {
    for seed in seeds() {
        assert!(
            decode::<AppendEntriesRequest>(1, &seed).is_ok()
                || decode::<InstallSnapshotRequest>(3, &seed).is_ok()
                || decode::<Proposal>(10, &seed).is_ok()
                || decode::<Peer>(11, &seed).is_ok()
        );
    }
    for nested in [nested_batches(3), nested_proposal(3), nested_proposal(1)] {
        assert!(decode::<Proposal>(10, &nested).is_err());
    }
    // One level is a batch, the only nesting there is.
    assert!(
        decode::<Proposal>(10, &[1, 1, 11, 0, 0]).is_ok(),
        "Batch([SetDraining(\"\", false)])"
    );
}

#[test]
fn a_huge_length_prefix_allocates_little() {
    // The measure itself sees an allocation.
    let seen = peak_during(|| drop(std::hint::black_box(vec![1u8; 1 << 20])));
    assert!(seen >= 1 << 20, "{seen}");
    // A batch announcing 2^62 commands, followed by nothing.
    let bytes = [vec![1u8], varint(1 << 62)].concat();
    let peak = peak_during(|| assert!(decode::<Proposal>(10, &bytes).is_err()));
    assert!(peak <= alloc_bound(bytes.len()), "{peak}");
}
