//! RFC 9162 vectors (the Certificate Transparency reference leaves, as published with
//! transparency-dev/merkle) and properties over random tree sizes.

use super::*;
use proptest::prelude::*;

fn h(hex: &str) -> Hash {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex, &mut out).unwrap();
    out
}

const LEAVES: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];

/// Root hashes for sizes 0 to 8.
const ROOTS: [&str; 9] = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

/// (leaf index, tree size, audit path).
const INCLUSION: [(u64, u64, &[&str]); 5] = [
    (0, 1, &[]),
    (
        0,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        &[
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        3,
        &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
    ),
    (
        1,
        5,
        &[
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
];

/// (first, second, proof).
const CONSISTENCY: [(u64, u64, &[&str]); 5] = [
    (1, 1, &[]),
    (
        1,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        &[
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
];

/// Every node a tree of these leaves stores, as the store would: built by appending.
fn build(leaves: &[Hash]) -> (Frontier, HashMap<NodeId, Hash>) {
    let mut frontier = Frontier::default();
    let mut nodes = HashMap::new();
    for leaf in leaves {
        nodes.extend(frontier.push(*leaf));
    }
    (frontier, nodes)
}

fn reference_leaves() -> Vec<Hash> {
    LEAVES
        .iter()
        .map(|l| leaf_hash(&hex::decode(l).unwrap()))
        .collect()
}

fn resolve(plan: &Plan, nodes: &HashMap<NodeId, Hash>) -> Vec<Hash> {
    plan.resolve(nodes).unwrap()
}

#[test]
fn roots_match_the_reference_for_every_size() {
    let leaves = reference_leaves();
    for size in 0..=leaves.len() {
        let (frontier, nodes) = build(&leaves[..size]);
        assert_eq!(
            frontier.root(),
            h(ROOTS[size]),
            "frontier root, size {size}"
        );
        let root = resolve(&Plan::root(size as u64), &build(&leaves).1)[0];
        assert_eq!(root, h(ROOTS[size]), "stored root, size {size}");
        assert_eq!(nodes.len(), build(&leaves[..size]).1.len());
    }
}

#[test]
fn inclusion_proofs_match_the_reference_and_verify() {
    let leaves = reference_leaves();
    let (_, nodes) = build(&leaves);
    for (index, size, expected) in INCLUSION {
        let proof = resolve(&Plan::inclusion(index, size).unwrap(), &nodes);
        let expected: Vec<Hash> = expected.iter().map(|e| h(e)).collect();
        assert_eq!(proof, expected, "PATH({index}, D[{size}])");
        let root = h(ROOTS[size as usize]);
        verify_inclusion(index, size, &leaves[index as usize], &proof, &root).unwrap();
    }
}

#[test]
fn consistency_proofs_match_the_reference_and_verify() {
    let leaves = reference_leaves();
    let (_, nodes) = build(&leaves);
    for (first, second, expected) in CONSISTENCY {
        let proof = resolve(&Plan::consistency(first, second).unwrap(), &nodes);
        let expected: Vec<Hash> = expected.iter().map(|e| h(e)).collect();
        assert_eq!(proof, expected, "PROOF({first}, D[{second}])");
        let (r1, r2) = (h(ROOTS[first as usize]), h(ROOTS[second as usize]));
        verify_consistency(first, second, &r1, &r2, &proof).unwrap();
    }
}

#[test]
fn corrupted_proofs_are_refused() {
    let leaves = reference_leaves();
    let (_, nodes) = build(&leaves);
    let root = h(ROOTS[8]);
    let proof = resolve(&Plan::inclusion(5, 8).unwrap(), &nodes);
    let leaf = leaves[5];
    assert!(
        verify_inclusion(4, 8, &leaf, &proof, &root).is_err(),
        "index - 1"
    );
    assert!(
        verify_inclusion(6, 8, &leaf, &proof, &root).is_err(),
        "index + 1"
    );
    assert!(
        verify_inclusion(5, 16, &leaf, &proof, &root).is_err(),
        "size * 2"
    );
    assert!(
        verify_inclusion(5, 4, &leaf, &proof, &root).is_err(),
        "size / 2"
    );
    assert!(
        verify_inclusion(5, 8, &leaves[4], &proof, &root).is_err(),
        "wrong leaf"
    );
    assert!(
        verify_inclusion(5, 8, &leaf, &proof[..2], &root).is_err(),
        "truncated"
    );
    let mut longer = proof.clone();
    longer.push(root);
    assert!(
        verify_inclusion(5, 8, &leaf, &longer, &root).is_err(),
        "trailing root"
    );
    for i in 0..proof.len() {
        let mut flipped = proof.clone();
        flipped[i][0] ^= 8;
        assert!(
            verify_inclusion(5, 8, &leaf, &flipped, &root).is_err(),
            "bit in {i}"
        );
    }

    let (r6, r8) = (h(ROOTS[6]), h(ROOTS[8]));
    let proof = resolve(&Plan::consistency(6, 8).unwrap(), &nodes);
    assert!(
        verify_consistency(5, 8, &r6, &r8, &proof).is_err(),
        "first - 1"
    );
    assert!(
        verify_consistency(7, 8, &r6, &r8, &proof).is_err(),
        "first + 1"
    );
    assert!(
        verify_consistency(6, 16, &r6, &r8, &proof).is_err(),
        "second * 2"
    );
    assert!(
        verify_consistency(6, 8, &r8, &r6, &proof).is_err(),
        "swapped roots"
    );
    assert!(
        verify_consistency(6, 8, &r6, &r8, &[]).is_err(),
        "empty proof"
    );
    assert!(
        verify_consistency(6, 8, &r6, &r8, &proof[..2]).is_err(),
        "truncated"
    );
    assert!(
        verify_consistency(8, 6, &r8, &r6, &proof).is_err(),
        "shrunk"
    );
    for i in 0..proof.len() {
        let mut flipped = proof.clone();
        flipped[i][0] ^= 16;
        assert!(
            verify_consistency(6, 8, &r6, &r8, &flipped).is_err(),
            "bit in {i}"
        );
    }
}

#[test]
fn proofs_outside_the_tree_are_errors_not_panics() {
    assert_eq!(
        Plan::inclusion(3, 3),
        Err(ProofError::OutOfRange { index: 3, size: 3 })
    );
    assert_eq!(
        Plan::consistency(4, 3),
        Err(ProofError::Shrunk {
            first: 4,
            second: 3
        })
    );
    assert!(Plan::consistency(0, 5).unwrap().ranges.is_empty());
    assert!(Plan::consistency(5, 5).unwrap().ranges.is_empty());
}

#[test]
fn appending_completes_one_node_per_trailing_one_bit() {
    let mut frontier = Frontier::default();
    let created: Vec<usize> = (0..8u8).map(|i| frontier.push([i; 32]).len()).collect();
    assert_eq!(created, [1, 2, 1, 3, 1, 2, 1, 4]);
}

fn leaves(n: u64) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every proof of every shape, at random sizes, verifies; a plan only ever asks for nodes
    /// that a tree of the proof's size has stored, and only O(log n) of them.
    #[test]
    fn random_trees_prove_inclusion_and_consistency(size in 1u64..3000, a in 0u64..3000, b in 0u64..3000) {
        let all = leaves(size);
        let (frontier, nodes) = build(&all);
        let root = frontier.root();
        let index = a % size;
        let plan = Plan::inclusion(index, size).unwrap();
        prop_assert!(plan.nodes().iter().all(|n| n.leaves().end <= size));
        prop_assert!(plan.nodes().len() <= 2 * 64);
        let proof = resolve(&plan, &nodes);
        prop_assert!(verify_inclusion(index, size, &all[index as usize], &proof, &root).is_ok());
        prop_assert!(verify_inclusion(index, size, &leaf_hash(b"other"), &proof, &root).is_err());

        let first = b % (size + 1);
        let first_root = resolve(&Plan::root(first), &nodes)[0];
        prop_assert_eq!(first_root, build(&all[..first as usize]).0.root());
        let plan = Plan::consistency(first, size).unwrap();
        prop_assert!(plan.nodes().iter().all(|n| n.leaves().end <= size));
        let proof = resolve(&plan, &nodes);
        prop_assert!(verify_consistency(first, size, &first_root, &root, &proof).is_ok());
        if first > 0 && first < size {
            let forged = leaf_hash(b"forged");
            prop_assert!(verify_consistency(first, size, &forged, &root, &proof).is_err());
        }
    }

    #[test]
    fn perfect_nodes_cover_a_range_exactly(start_exp in 0u32..12, len in 1u64..5000) {
        let start = (1u64 << start_exp) * 3;
        let nodes = perfect_nodes(start..start + len);
        let mut at = start;
        for n in nodes {
            prop_assert_eq!(n.leaves().start, at);
            at = n.leaves().end;
        }
        prop_assert_eq!(at, start + len);
    }
}
