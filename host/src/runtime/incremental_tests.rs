//! The incremental cache with real Cranelift compiles of small hand-built components:
//! it survives a restart, a pack it did not write is dropped and never used, and the
//! cap drops the least recently used packs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::Component;

use super::*;

/// Functions per test component: enough that a pack is a few KiB.
const FUNCTIONS: u32 = 40;
/// Functions that hit in a compile of something compiled before. Not all: wasmtime 48
/// gives a few functions a different key on each compile (0 to 2 of this component's 82
/// compiled functions, about 2 to 5 % of a Python component's), and compiles them anew.
const MOST: usize = FUNCTIONS as usize;
const KEY: [u8; 32] = [7; 32];
const CAP: u64 = 1 << 30;

/// A component holding one core module of [`FUNCTIONS`] functions whose code depends on
/// `seed`: components of different seeds share no function.
fn component(seed: i32) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, Module,
        TypeSection, ValType,
    };
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I32]);
    let (mut functions, mut exports, mut code) = (
        FunctionSection::new(),
        ExportSection::new(),
        CodeSection::new(),
    );
    for i in 0..FUNCTIONS {
        functions.function(0);
        exports.export(&format!("f{i}"), ExportKind::Func, i);
        let mut body = Function::new([]);
        body.instruction(&Instruction::LocalGet(0))
            .instruction(&Instruction::I32Const(seed * 10_000 + i as i32))
            .instruction(&Instruction::I32Mul)
            .instruction(&Instruction::I32Const(i as i32 + 1))
            .instruction(&Instruction::I32Add)
            .instruction(&Instruction::End);
        code.function(&body);
    }
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&exports)
        .section(&code);
    let mut component = wasm_encoder::Component::new();
    component.section(&wasm_encoder::ModuleSection(&module));
    component.finish()
}

/// Compiles `wasm` the way the compiler process does, with the store in `dir`; what the
/// store reports.
fn compile_with(dir: &Path, cap: u64, wasm: &[u8]) -> Outcome {
    let store = Arc::new(IncrementalCache::open(dir, &KEY, cap).unwrap());
    let mut config = super::super::engine_config(false);
    config
        .enable_incremental_compilation(store.clone())
        .unwrap();
    let engine = Engine::new(&config).unwrap();
    Component::new(&engine, wasm).unwrap();
    drop(engine);
    store.finish().unwrap()
}

fn packs(dir: &Path) -> Vec<PathBuf> {
    let mut packs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_pack(p))
        .collect();
    packs.sort();
    packs
}

#[test]
fn the_cache_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = component(1);
    let cold = compile_with(dir.path(), CAP, &wasm);
    assert_eq!(cold.hits, 0, "{cold:?}");
    assert!(cold.misses >= FUNCTIONS as usize, "{cold:?}");
    assert_eq!(packs(dir.path()).len(), 1, "one pack per compile");
    let total = cold.misses + cold.repeats;

    // A new store and a new engine over the same dir: a restarted node's next compile.
    let warm = compile_with(dir.path(), CAP, &wasm);
    assert!(warm.hits >= MOST, "{warm:?}");
    assert_eq!(warm.hits + warm.misses + warm.repeats, total, "{warm:?}");
    assert!(warm.bytes > 0 && warm.discarded.is_empty(), "{warm:?}");
}

#[test]
fn a_pack_this_node_did_not_write_is_dropped_and_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = component(1);
    compile_with(dir.path(), CAP, &wasm);
    let pack = packs(dir.path()).remove(0);
    let genuine = std::fs::read(&pack).unwrap();

    // Each way a pack can be wrong: a bit flipped in a compiled function, the same
    // pack signed with another node's key, a truncated pack, a genuine pack renamed.
    let flipped = {
        let mut bytes = genuine.clone();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        bytes
    };
    let foreign = {
        let body = &genuine[MAGIC.len() + TAG_LEN..];
        let other = hmac::Key::new(hmac::HMAC_SHA256, &[8; 32]);
        let tag = hmac::sign(&pack_key(&other, &pack), body);
        [MAGIC, tag.as_ref(), body].concat()
    };
    let truncated = genuine[..genuine.len() - 3].to_vec();
    let renamed = dir.path().join(format!("{}{PACK_SUFFIX}", fresh_name()));
    for (what, path, bytes) in [
        ("a flipped bit", &pack, flipped),
        ("another node's key", &pack, foreign),
        ("a truncated pack", &pack, truncated),
        ("a renamed pack", &renamed, genuine.clone()),
    ] {
        for p in packs(dir.path()) {
            std::fs::remove_file(p).unwrap();
        }
        std::fs::write(path, &bytes).unwrap();
        let outcome = compile_with(dir.path(), CAP, &wasm);
        assert_eq!(outcome.hits, 0, "{what}: a function was taken from it");
        assert!(outcome.misses >= MOST, "{what}: {outcome:?}");
        assert_eq!(
            outcome.discarded.len(),
            1,
            "{what}: not reported: {outcome:?}"
        );
        assert!(!path.exists(), "{what}: the pack was not deleted");
        assert!(
            !packs(dir.path()).is_empty(),
            "{what}: no new pack was written"
        );
        let again = compile_with(dir.path(), CAP, &wasm);
        assert!(
            again.hits >= MOST,
            "{what}: the new pack was not used: {again:?}"
        );
    }
}

#[test]
fn the_cap_drops_the_packs_used_longest_ago() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (component(1), component(2), component(3));
    compile_with(dir.path(), CAP, &a);
    let pack_a = packs(dir.path()).remove(0);
    compile_with(dir.path(), CAP, &b);
    let pack_b = packs(dir.path())
        .into_iter()
        .find(|p| *p != pack_a)
        .unwrap();
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let (size_a, size_b) = (size(&pack_a), size(&pack_b));

    // A is compiled again (a new version of it, say): its pack is used now, B's is not.
    let reused = compile_with(dir.path(), CAP, &a);
    assert!(reused.hits >= MOST, "{reused:?}");
    // Its few functions of a fresh key make a small pack of their own: not what this
    // test is about.
    for pack in packs(dir.path()) {
        if pack != pack_a && pack != pack_b {
            std::fs::remove_file(pack).unwrap();
        }
    }

    // C's pack (about the size of the others) brings the total over a cap that holds
    // two and a half packs: one pack goes, B's.
    let cap = size_a + size_b + size_a.min(size_b) / 2;
    let outcome = compile_with(dir.path(), cap, &c);
    assert_eq!(outcome.evicted, 1, "{outcome:?}");
    assert!(outcome.bytes <= cap, "{outcome:?}");
    assert!(pack_a.exists(), "the pack used most recently was dropped");
    assert!(!pack_b.exists(), "the pack used longest ago was kept");
    assert!(compile_with(dir.path(), CAP, &a).hits >= MOST);
    assert!(compile_with(dir.path(), CAP, &c).hits >= MOST);
    assert!(
        compile_with(dir.path(), CAP, &b).misses >= MOST,
        "B's pack is gone"
    );
}

#[test]
fn compilers_side_by_side_each_write_their_own_pack() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (component(1), component(2));
    let path = dir.path().to_path_buf();
    let other = std::thread::spawn(move || compile_with(&path, CAP, &b));
    compile_with(dir.path(), CAP, &a);
    other.join().unwrap();
    assert_eq!(packs(dir.path()).len(), 2);
    let names: Vec<_> = packs(dir.path());
    let none_left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| !is_pack(&e.path()))
        .collect();
    assert!(none_left.is_empty(), "temporary files left: {none_left:?}");
    assert!(compile_with(dir.path(), CAP, &component(1)).hits >= MOST);
    assert!(compile_with(dir.path(), CAP, &component(2)).hits >= MOST);
    assert!(names.iter().all(|p| p.exists()));
}

/// The node's engine has no incremental cache; the compiler process's has. Code compiled
/// with one must load into the other, or every cache miss would fail.
#[test]
fn code_compiled_with_the_cache_loads_into_the_nodes_engine() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = component(1);
    compile_with(dir.path(), CAP, &wasm);
    let store = Arc::new(IncrementalCache::open(dir.path(), &KEY, CAP).unwrap());
    let mut config = super::super::engine_config(false);
    config
        .enable_incremental_compilation(store.clone())
        .unwrap();
    let child = Engine::new(&config).unwrap();
    let bytes = Component::new(&child, &wasm).unwrap().serialize().unwrap();
    assert!(store.finish().unwrap().hits > 0);
    let node = Engine::new(&super::super::engine_config(true)).unwrap();
    // SAFETY: the bytes were serialized just above by this process.
    unsafe { Component::deserialize(&node, &bytes) }.expect("the node's engine refused it");
}
