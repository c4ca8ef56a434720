//! Forming a cluster from `peers`, on real QUIC between in-process nodes (`forming.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ControlError;
use super::tests::Group;
use crate::transport::tests::init_logs;

/// Two initial members given different `peers` (a typo, or one config not updated):
/// before, the first formed a cluster of its own list, the second followed it, and the
/// node its list named and the other's did not was left out. Now both refuse to start,
/// naming both lists, and nothing is formed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_members_given_different_peers_refuse_to_form() {
    init_logs();
    let mut group = Group::new();
    for name in ["n1", "n2"] {
        let options = group.options(name);
        group.start(name, options).await;
    }
    let nowhere = "127.0.0.1:1".to_string();
    let peers = |third: &str| -> BTreeMap<String, String> {
        BTreeMap::from([
            ("n1".to_string(), group.node("n1").addr.clone()),
            ("n2".to_string(), group.node("n2").addr.clone()),
            (third.to_string(), nowhere.clone()),
        ])
    };
    let (one, two) = (peers("n3"), peers("n4"));
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(
            group.control("n1").bootstrap(&one),
            group.control("n2").bootstrap(&two)
        )
    })
    .await
    .expect("a bootstrap hung");
    for (name, result) in [("n1", started.0), ("n2", started.1)] {
        assert!(
            matches!(&result, Err(ControlError::PeersDiffer { .. })),
            "{name}: {result:?}"
        );
        let said = result.unwrap_err().to_string();
        assert!(
            said.contains("[n1, n2, n3]") && said.contains("[n1, n2, n4]"),
            "{said}"
        );
    }
    for name in ["n1", "n2"] {
        assert!(
            group.control(name).leader().is_none(),
            "{name} has a leader"
        );
    }
    group.shutdown().await;
}
