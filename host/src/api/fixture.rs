//! A small cluster for the api tests, built by applying real commands, so that the
//! states the tests read are states `apply` can reach.

use std::collections::BTreeMap;

use crate::cluster::{Advert, Cluster, Command, Handover, Response};

/// The wall clock the fixture's commands carry: 1 000 000 ms after the epoch.
pub(super) const T0: u64 = 1_000_000;

/// A digest made of one repeated hex digit.
pub(super) fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// A cluster and its log position.
pub(super) struct World {
    pub(super) cluster: Cluster,
    index: u64,
}

impl World {
    pub(super) fn new() -> World {
        World {
            cluster: Cluster::default(),
            index: 0,
        }
    }

    /// Applies `command` at the next index, in term 2.
    pub(super) fn apply(&mut self, command: Command) -> Response {
        self.index += 1;
        self.cluster.apply(self.index, 2, command)
    }

    /// Node `name` joins at `name:7400` with `labels` and opens a session at `at_ms`.
    pub(super) fn node(&mut self, name: &str, labels: &[(&str, &str)], at_ms: u64) -> &mut Self {
        self.apply(Command::Join {
            node: name.into(),
            addr: format!("{name}:7400"),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        self.apply(Command::OpenSession {
            node: name.into(),
            at_ms,
        });
        self
    }

    /// Node `name` joins but has no session.
    pub(super) fn down_node(&mut self, name: &str) -> &mut Self {
        self.apply(Command::Join {
            node: name.into(),
            addr: format!("{name}:7400"),
            labels: BTreeMap::new(),
        });
        self
    }

    /// Adds `resource` at `version` (digest of `d`) with `tickets` to `node`'s adverts.
    pub(super) fn advertise(
        &mut self,
        node: &str,
        resource: &str,
        version: &str,
        d: char,
        tickets: u32,
    ) -> &mut Self {
        self.advertise_requiring(node, resource, version, d, tickets, &[])
    }

    /// [`World::advertise`] with `require` labels.
    pub(super) fn advertise_requiring(
        &mut self,
        node: &str,
        resource: &str,
        version: &str,
        d: char,
        tickets: u32,
        require: &[(&str, &str)],
    ) -> &mut Self {
        let mut plugins = self.cluster.members[node].plugins.clone();
        plugins.insert(
            resource.into(),
            Advert {
                plugin: resource.into(),
                version: version.parse().unwrap(),
                digest: digest(d),
                tickets,
                require: require
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                footprint: crate::cluster::Pool::default(),
            },
        );
        self.apply(Command::Advertise {
            node: node.into(),
            plugins,
        });
        self
    }

    /// Grants `resource/slot` to `node` (its current session) at `at_ms` with the
    /// version and digest `node` advertises; returns the token.
    pub(super) fn grant(&mut self, resource: &str, slot: u32, node: &str, at_ms: u64) -> u64 {
        let member = &self.cluster.members[node];
        let advert = &member.plugins[resource];
        let command = Command::Assign {
            resource: resource.into(),
            slot,
            node: node.into(),
            session: member.session.as_ref().unwrap().id,
            version: advert.version.clone(),
            digest: advert.digest.clone(),
            at_ms,
        };
        match self.apply(command) {
            Response::Granted { token, .. } => token,
            other => panic!("grant of {resource}/{slot} to {node}: {other:?}"),
        }
    }

    /// Begins a handover of `resource/slot`.
    pub(super) fn hand_over(
        &mut self,
        resource: &str,
        slot: u32,
        reason: Handover,
        to: Option<&str>,
        at_ms: u64,
    ) {
        let token = self.cluster.slot(resource, slot).unwrap().token;
        let response = self.apply(Command::BeginHandover {
            resource: resource.into(),
            slot,
            token,
            reason,
            to: to.map(str::to_owned),
            at_ms,
        });
        assert_eq!(response, Response::Done);
    }
}

/// Three nodes (a, b in zone x; c in zone y), `echo` 1.0.0 with 2 tickets everywhere,
/// `solo` 2.0.0 with 1 ticket on a and b; echo/0 on a, echo/1 on b, solo/0 on a.
pub(super) fn three_nodes() -> World {
    let mut w = World::new();
    w.node("a", &[("zone", "x")], T0)
        .node("b", &[("zone", "x")], T0 + 1_000)
        .node("c", &[("zone", "y")], T0 + 2_000);
    for node in ["a", "b", "c"] {
        w.advertise(node, "echo", "1.0.0", 'e', 2);
    }
    for node in ["a", "b"] {
        w.advertise(node, "solo", "2.0.0", 's', 1);
    }
    w.grant("echo", 0, "a", T0 + 10_000);
    w.grant("echo", 1, "b", T0 + 11_000);
    w.grant("solo", 0, "a", T0 + 12_000);
    w
}

/// Five nodes advertising `count` resources `r00000`… (one ticket each, version 1.0.0),
/// each granted to one of them in turn: the scale `tenure status` must page through.
pub(super) fn many_resources(count: usize) -> World {
    let mut w = World::new();
    let nodes = ["n1", "n2", "n3", "n4", "n5"];
    for (i, node) in nodes.iter().enumerate() {
        w.node(node, &[], T0 + i as u64);
    }
    let adverts: BTreeMap<String, Advert> = (0..count)
        .map(|i| {
            let name = format!("r{i:05}");
            let advert = Advert {
                plugin: name.clone(),
                version: "1.0.0".parse().unwrap(),
                digest: digest('a'),
                tickets: 1,
                require: BTreeMap::new(),
                footprint: crate::cluster::Pool::default(),
            };
            (name, advert)
        })
        .collect();
    for node in nodes {
        w.apply(Command::Advertise {
            node: node.into(),
            plugins: adverts.clone(),
        });
    }
    for i in 0..count {
        w.grant(&format!("r{i:05}"), 0, nodes[i % nodes.len()], T0 + 10_000);
    }
    w
}
