//! How many core instances one instantiation of a component makes, read from its binary.
//!
//! The pooling allocator counts every instantiation of a core module against its
//! `total_core_instances`, and placement needs that count per plugin to know how many
//! instances of it fit a node (a small Rust component makes 3, a Python one 14).
//! wasmtime makes exactly one per `InstantiateModule` initializer of the component it
//! flattened, but does not say how many there are, so this counts the same thing from
//! the binary with wasmparser (the parser wasmtime uses):
//!
//! - each entry of a core `instance` section that instantiates a module counts one; an
//!   instance made from exports allocates nothing and counts none;
//! - a nested component counts what its own sections count, once per time it is
//!   instantiated (wasmtime inlines each instantiation of a nested component); one
//!   defined but never instantiated counts nothing.
//!
//! Nested components do not take component instances of their own: wasmtime flattens
//! them, so a plugin instance takes one component instance however deep its nesting.
//! The counts saturate, so a component nesting instantiations exponentially cannot
//! overflow them. A component that instantiates an imported component cannot be counted
//! (and cannot run here: the host provides no components).

use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
    ComponentTypeRef, Encoding, Instance, Parser, Payload,
};

/// The core instances one instantiation of the component in `wasm` makes.
pub fn count(wasm: &[u8]) -> Result<u32, String> {
    // One frame per component or core module being read, innermost last. A module's
    // frame is `None`: nothing inside a module instantiates anything.
    let mut stack: Vec<Option<Frame>> = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| e.to_string())?;
        if let Payload::Version { encoding, .. } = payload {
            stack.push((encoding == Encoding::Component).then(Frame::default));
            continue;
        }
        if let Payload::End(_) = payload {
            let Some(ended) = stack.pop().flatten() else {
                continue;
            };
            match stack.last_mut() {
                // A nested component: it joins its parent's component index space.
                Some(Some(parent)) => parent.components.push(Some(ended.core)),
                Some(None) => return Err("a component inside a core module".into()),
                None => return Ok(ended.core.min(u32::MAX as u64) as u32),
            }
            continue;
        }
        if let Some(Some(_)) = stack.last() {
            let mut frame = stack.pop().flatten().expect("a component's frame");
            let read = frame.read(&payload, &stack);
            stack.push(Some(frame));
            read?;
        }
    }
    Err("the component ends early".into())
}

/// What is known of one component while its sections are read.
#[derive(Clone, Debug, Default)]
struct Frame {
    /// The core instances one instantiation of it makes, so far.
    core: u64,
    /// Its component index space: per index, the core instances one instantiation of
    /// that component makes (`None`: imported, or an export of an instance, unknown).
    components: Vec<Option<u64>>,
}

impl Frame {
    /// Takes in one section of this component; `outer` holds its ancestors.
    fn read(&mut self, payload: &Payload<'_>, outer: &[Option<Frame>]) -> Result<(), String> {
        match payload {
            Payload::InstanceSection(reader) => {
                for instance in reader.clone() {
                    if let Instance::Instantiate { .. } = instance.map_err(|e| e.to_string())? {
                        self.core = self.core.saturating_add(1);
                    }
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                for instance in reader.clone() {
                    if let ComponentInstance::Instantiate {
                        component_index, ..
                    } = instance.map_err(|e| e.to_string())?
                    {
                        let core = self.component(component_index)?.ok_or(
                            "it instantiates an imported component, whose core instances cannot be counted",
                        )?;
                        self.core = self.core.saturating_add(core);
                    }
                }
            }
            Payload::ComponentImportSection(reader) => {
                for import in reader.clone() {
                    if let ComponentTypeRef::Component(_) = import.map_err(|e| e.to_string())?.ty {
                        self.components.push(None);
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader.clone() {
                    match alias.map_err(|e| e.to_string())? {
                        ComponentAlias::InstanceExport {
                            kind: ComponentExternalKind::Component,
                            ..
                        } => self.components.push(None),
                        ComponentAlias::Outer {
                            kind: ComponentOuterAliasKind::Component,
                            count,
                            index,
                        } => {
                            // Count 0 is this component, 1 its parent, and so on.
                            let aliased = match count {
                                0 => self.component(index)?,
                                n => outer
                                    .len()
                                    .checked_sub(n as usize)
                                    .and_then(|at| outer[at].as_ref())
                                    .ok_or("an outer alias beyond the outermost component")?
                                    .component(index)?,
                            };
                            self.components.push(aliased);
                        }
                        _ => {}
                    }
                }
            }
            Payload::ComponentExportSection(reader) => {
                // An export is a new index for the item it exports.
                for export in reader.clone() {
                    let export = export.map_err(|e| e.to_string())?;
                    if export.kind == ComponentExternalKind::Component {
                        let exported = self.component(export.index)?;
                        self.components.push(exported);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn component(&self, index: u32) -> Result<Option<u64>, String> {
        self.components
            .get(index as usize)
            .copied()
            .ok_or_else(|| format!("component index {index} out of bounds"))
    }
}

#[cfg(test)]
mod tests {
    use wasm_encoder::{
        Component, ComponentInstanceSection, InstanceSection, Module, ModuleArg, ModuleSection,
        NestedComponentSection,
    };

    use super::*;

    fn instantiations(module_instances: u32, from_exports: u32) -> Component {
        let mut component = Component::new();
        component.section(&ModuleSection(&Module::new()));
        let mut instances = InstanceSection::new();
        for _ in 0..module_instances {
            instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
        }
        for _ in 0..from_exports {
            instances.export_items(Vec::<(&str, wasm_encoder::ExportKind, u32)>::new());
        }
        component.section(&instances);
        component
    }

    #[test]
    fn module_instantiations_count_and_instances_from_exports_do_not() {
        assert_eq!(count(&instantiations(3, 2).finish()), Ok(3));
        assert_eq!(count(&Component::new().finish()), Ok(0));
    }

    #[test]
    fn a_nested_component_counts_once_per_instantiation() {
        let inner = instantiations(2, 1);
        let mut outer = instantiations(1, 0);
        outer.section(&NestedComponentSection(&inner));
        // Defined but never instantiated: nothing.
        outer.section(&NestedComponentSection(&inner));
        let mut instances = ComponentInstanceSection::new();
        for _ in 0..3 {
            instances.instantiate(
                0,
                Vec::<(&str, wasm_encoder::ComponentExportKind, u32)>::new(),
            );
        }
        outer.section(&instances);
        assert_eq!(count(&outer.finish()), Ok(1 + 3 * 2));
    }

    #[test]
    fn garbage_is_an_error_not_a_count() {
        assert!(count(b"\0asm\x0d\0\x01\0\x01\xff\xff").is_err());
        assert!(count(&instantiations(1, 0).finish()[..12]).is_err());
    }

    /// The count is what the pooling allocator counts: a pool with room for exactly two
    /// instantiations takes two and refuses the third.
    #[test]
    fn the_count_is_what_the_pool_counts() {
        let inner = instantiations(2, 1);
        let mut outer = instantiations(1, 0);
        outer.section(&NestedComponentSection(&inner));
        let mut instances = ComponentInstanceSection::new();
        for _ in 0..2 {
            instances.instantiate(
                0,
                Vec::<(&str, wasm_encoder::ComponentExportKind, u32)>::new(),
            );
        }
        outer.section(&instances);
        let wasm = outer.finish();
        let per_instance = count(&wasm).unwrap();
        assert_eq!(per_instance, 5);
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(10)
            .total_core_instances(2 * per_instance)
            .total_memories(10)
            .total_tables(10)
            .total_stacks(10);
        let mut config = wasmtime::Config::new();
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        let engine = wasmtime::Engine::new(&config).unwrap();
        let component = wasmtime::component::Component::new(&engine, &wasm).unwrap();
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let mut store = wasmtime::Store::new(&engine, ());
        for _ in 0..2 {
            linker
                .instantiate(&mut store, &component)
                .expect("room for two");
        }
        let refused = linker
            .instantiate(&mut store, &component)
            .expect_err("no room for a third");
        assert!(
            format!("{refused:#}").contains("core instance"),
            "{refused:#}"
        );
    }
}
