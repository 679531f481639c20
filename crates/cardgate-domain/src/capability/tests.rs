//! Unit tests of `cardgate_domain::capability`.

use std::collections::BTreeMap;

use super::*;

#[test]
fn a_capability_map_reads_and_serializes_as_a_btree_map_does() {
    let pairs = [
        (Capability::StateTransitionHistory, 3),
        (Capability::Streaming, 1),
    ];
    let map: CapabilityMap<i64> = pairs.into_iter().collect();
    let tree: BTreeMap<Capability, i64> = pairs.into_iter().collect();
    assert_eq!(
        serde_json::to_string(&map).unwrap(),
        serde_json::to_string(&tree).unwrap()
    );
    let back: CapabilityMap<i64> =
        serde_json::from_str(&serde_json::to_string(&tree).unwrap()).unwrap();
    assert_eq!(back, map);
    assert_eq!(map.len(), 2);
    assert_eq!(map.get(&Capability::Streaming), Some(&1));
    assert!(!map.contains_key(&Capability::PushNotifications));
    let order: Vec<Capability> = map.keys().copied().collect();
    assert_eq!(order, tree.keys().copied().collect::<Vec<_>>());
    let mut map = map;
    assert_eq!(map.insert(Capability::Streaming, 7), Some(1));
    assert_eq!(map.remove(&Capability::StateTransitionHistory), Some(3));
    let left: Vec<(Capability, i64)> = map.iter().map(|(c, v)| (*c, *v)).collect();
    assert_eq!(left, vec![(Capability::Streaming, 7)]);
    assert!(serde_json::from_str::<CapabilityMap<i64>>(r#"{"nope": 1}"#).is_err());
}

#[test]
fn a_capability_set_is_a_btree_set_in_a_byte() {
    for bits in 0u8..8 {
        let members: Vec<Capability> = Capability::ALL
            .into_iter()
            .filter(|c| bits & (1 << c.index()) != 0)
            .collect();
        let set: CapabilitySet = members.iter().copied().collect();
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), members);
        for capability in Capability::ALL {
            assert_eq!(set.contains(&capability), members.contains(&capability));
        }
    }
}
