//! The engine enforces the lease: tests on hand-built components, so that the code that
//! misbehaves is exactly the code under test (no toolchain, no plugin).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasm_encoder::{
    BlockType, CodeSection, Component, Function, FunctionSection, Instruction, Module,
    ModuleSection, StartSection, TypeSection,
};
use wasmtime::component::Linker;
use wasmtime::{Engine, Trap};

use super::store::{self, HostState};
use super::{InstanceContext, NodeLease, StateBackend, StateError};
use crate::future::BoxFuture;
use crate::ownership::Grant;

/// A component whose one core instance has a start function that loops forever: it
/// never finishes instantiating unless something interrupts it.
fn spinning_at_instantiation() -> Vec<u8> {
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], []);
    module.section(&types);
    let mut functions = FunctionSection::new();
    functions.function(0);
    module.section(&functions);
    module.section(&StartSection { function_index: 0 });
    let mut code = CodeSection::new();
    let mut spin = Function::new([]);
    spin.instruction(&Instruction::Loop(BlockType::Empty))
        .instruction(&Instruction::Br(0))
        .instruction(&Instruction::End)
        .instruction(&Instruction::End);
    code.function(&spin);
    module.section(&code);

    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    let mut instances = wasm_encoder::InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
    component.section(&instances);
    component.finish()
}

pub(super) struct NoState;

impl StateBackend for NoState {
    fn load(&self, _: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
        Box::pin(async { Ok(None) })
    }
    fn save(&self, _: &Grant, _: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
        Box::pin(async { Ok(()) })
    }
}

pub(super) fn context(lease: Arc<NodeLease>) -> Arc<InstanceContext> {
    let grant = Grant {
        resource: "r".into(),
        slot: 0,
        node: "n".into(),
        token: 1,
        term: 1,
        session: 7,
    };
    Arc::new(InstanceContext::new(
        "spin".into(),
        grant,
        lease,
        Arc::new(NoState),
        1 << 20,
    ))
}

fn engine() -> Engine {
    let engine = Engine::new(&super::engine_config(false)).unwrap();
    super::spawn_epoch_ticker(engine.weak());
    engine
}

/// Instantiates the spinning component under `ctx`; how it ended, and when.
async fn instantiate(engine: &Engine, ctx: Arc<InstanceContext>) -> (wasmtime::Error, Instant) {
    let component = wasmtime::component::Component::new(engine, spinning_at_instantiation())
        .expect("the hand-built component compiles");
    let linker: Linker<HostState> = Linker::new(engine);
    let mut store = store::build(engine, ctx);
    // The bound only keeps a broken engine check from hanging the test run.
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        linker.instantiate_async(&mut store, &component),
    )
    .await
    .expect("instantiation was not interrupted within 30 s");
    let error = result.expect_err("a spinning start function cannot finish");
    (error, Instant::now())
}

#[tokio::test]
async fn instantiation_is_interrupted_at_the_lease_deadline() {
    let engine = engine();
    let lease = Arc::new(NodeLease::new(true));
    let deadline = Instant::now() + Duration::from_millis(200);
    lease.publish(Some(7), Some(deadline));
    let (error, ended) = instantiate(&engine, context(lease)).await;
    assert_eq!(
        error.downcast_ref::<Trap>(),
        Some(&Trap::Interrupt),
        "{error:#}"
    );
    assert!(ended >= deadline, "interrupted before the deadline");
}

#[tokio::test]
async fn a_new_session_interrupts_the_old_session_s_instances() {
    let engine = engine();
    let lease = Arc::new(NodeLease::new(true));
    lease.publish(Some(7), Some(Instant::now() + Duration::from_secs(3600)));
    let ctx = context(lease.clone());
    let replaced = {
        let lease = lease.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            // The node lost its session and opened another: the old grants are dead.
            lease.publish(Some(8), None);
            Instant::now()
        }
    };
    let (replaced_at, (error, ended)) = tokio::join!(replaced, instantiate(&engine, ctx));
    assert_eq!(
        error.downcast_ref::<Trap>(),
        Some(&Trap::Interrupt),
        "{error:#}"
    );
    assert!(ended >= replaced_at);
}

#[tokio::test]
async fn a_stop_request_interrupts_at_its_absolute_time() {
    let engine = engine();
    let lease = Arc::new(NodeLease::new(true));
    lease.publish(Some(7), Some(Instant::now() + Duration::from_secs(3600)));
    let ctx = context(lease);
    let stop_at = Instant::now() + Duration::from_millis(150);
    ctx.signals.request_stop(stop_at);
    let (error, ended) = instantiate(&engine, ctx).await;
    assert_eq!(
        error.downcast_ref::<Trap>(),
        Some(&Trap::Interrupt),
        "{error:#}"
    );
    assert!(ended >= stop_at);
}

#[test]
fn effects_are_refused_from_the_deadline_and_while_stopping() {
    let lease = Arc::new(NodeLease::new(true));
    let now = Instant::now();
    lease.publish(Some(7), Some(now + Duration::from_secs(3600)));
    let ctx = context(lease.clone());
    assert_eq!(ctx.may_act(), Ok(()));
    ctx.signals.request_stop(now + Duration::from_secs(1));
    assert_eq!(ctx.may_act(), Ok(()), "within the stop grace");
    ctx.signals.interrupt();
    assert_eq!(ctx.may_act(), Err(super::Refusal::Stopping));
    let fresh = ctx.fresh();
    assert_eq!(fresh.may_act(), Ok(()));
    lease.publish(Some(7), Some(now));
    assert_eq!(fresh.may_act(), Err(super::Refusal::LeaseExpired));
}
