//! The Merkle tree over the ledger, as RFC 9162 §2.1 defines it: hashing, where each node of
//! the tree lives, which stored nodes a root or a proof needs, and verifying proofs.
//!
//! Leaf `i` is the event with seq `i + 1`; its leaf hash is `SHA-256(0x00 || h)` where `h` is
//! the event's 32-byte chain hash. The store keeps every *perfect* subtree's hash (a node whose
//! leaves are all present): such a node never changes once it exists, so every root and every
//! proof of any past tree size is a fold of O(log n) stored nodes. Appending leaf `i` completes
//! at most `log2 n + 1` nodes, computed from the [`Frontier`] (the current perfect roots).

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use sha2::{Digest, Sha256};

/// A SHA-256 hash.
pub type Hash = [u8; 32];

/// `MTH({})`: the hash of the empty tree.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// `SHA-256(0x00 || data)`.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// A perfect subtree: the `2^level` leaves from `index * 2^level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub level: u8,
    pub index: u64,
}

impl NodeId {
    pub fn leaf(index: u64) -> Self {
        Self { level: 0, index }
    }

    /// The leaves it covers.
    pub fn leaves(self) -> Range<u64> {
        let start = self.index << self.level;
        start..start + (1 << self.level)
    }
}

/// The largest power of two strictly below `n` (`n >= 2`): where RFC 9162 splits a tree.
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// The perfect subtrees that make up the leaves `range`, largest first. Every range a root or
/// an RFC 9162 proof needs starts at a multiple of its own split, so its hash is these nodes
/// folded from the right.
pub fn perfect_nodes(range: Range<u64>) -> Vec<NodeId> {
    let mut nodes = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let remaining = range.end - start;
        // The largest aligned power of two that fits.
        let mut level = 63 - remaining.leading_zeros();
        if start != 0 {
            level = level.min(start.trailing_zeros());
        }
        nodes.push(NodeId {
            level: level as u8,
            index: start >> level,
        });
        start += 1 << level;
    }
    nodes
}

/// A stored node the store did not have: the tree is incomplete or was tampered with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Merkle tree has no node at level {} index {}", .0.level, .0.index)]
pub struct MissingNode(pub NodeId);

/// `MTH(D[range])` from stored perfect nodes.
pub fn range_hash(range: Range<u64>, nodes: &HashMap<NodeId, Hash>) -> Result<Hash, MissingNode> {
    if range.is_empty() {
        return Ok(empty_root());
    }
    let mut parts = perfect_nodes(range).into_iter().rev();
    let get = |id: NodeId| nodes.get(&id).copied().ok_or(MissingNode(id));
    let mut hash = get(parts.next().expect("a non-empty range has a node"))?;
    for id in parts {
        hash = node_hash(&get(id)?, &hash);
    }
    Ok(hash)
}

/// What a root or a proof is made of: subtree ranges whose hashes, in order, are the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub ranges: Vec<Range<u64>>,
}

impl Plan {
    /// The root of the tree of `size` leaves.
    pub fn root(size: u64) -> Self {
        // One range: the whole tree (not the leaves 0 to size).
        Self {
            ranges: std::iter::once(0..size).collect(),
        }
    }

    /// RFC 9162 §2.1.3.1 `PATH(index, D[size])`, the leaf's sibling first.
    pub fn inclusion(index: u64, size: u64) -> Result<Self, ProofError> {
        if index >= size {
            return Err(ProofError::OutOfRange { index, size });
        }
        let mut ranges = Vec::new();
        path(index, 0..size, &mut ranges);
        Ok(Self { ranges })
    }

    /// RFC 9162 §2.1.4.1 `PROOF(first, D[second])`: empty when `first` is 0 or `second`.
    pub fn consistency(first: u64, second: u64) -> Result<Self, ProofError> {
        if first > second {
            return Err(ProofError::Shrunk { first, second });
        }
        let mut ranges = Vec::new();
        if first > 0 && first < second {
            subproof(first, 0..second, true, &mut ranges);
        }
        Ok(Self { ranges })
    }

    /// Every stored node the plan needs.
    pub fn nodes(&self) -> BTreeSet<NodeId> {
        self.ranges
            .iter()
            .flat_map(|r| perfect_nodes(r.clone()))
            .collect()
    }

    /// The plan's hashes, from the nodes [`Plan::nodes`] named.
    pub fn resolve(&self, nodes: &HashMap<NodeId, Hash>) -> Result<Vec<Hash>, MissingNode> {
        self.ranges
            .iter()
            .map(|r| range_hash(r.clone(), nodes))
            .collect()
    }
}

fn path(index: u64, tree: Range<u64>, out: &mut Vec<Range<u64>>) {
    let n = tree.end - tree.start;
    if n <= 1 {
        return;
    }
    let k = split(n);
    let mid = tree.start + k;
    if index < k {
        path(index, tree.start..mid, out);
        out.push(mid..tree.end);
    } else {
        path(index - k, mid..tree.end, out);
        out.push(tree.start..mid);
    }
}

fn subproof(m: u64, tree: Range<u64>, whole: bool, out: &mut Vec<Range<u64>>) {
    let n = tree.end - tree.start;
    if m == n {
        if !whole {
            out.push(tree);
        }
        return;
    }
    let k = split(n);
    let mid = tree.start + k;
    if m <= k {
        subproof(m, tree.start..mid, whole, out);
        out.push(mid..tree.end);
    } else {
        subproof(m - k, mid..tree.end, false, out);
        out.push(tree.start..mid);
    }
}

/// Why a proof cannot be made or does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf index {index} is not in a tree of {size} leaves")]
    OutOfRange { index: u64, size: u64 },
    #[error("tree size {second} is smaller than {first}: a log never shrinks")]
    Shrunk { first: u64, second: u64 },
    #[error("the proof has the wrong number of hashes")]
    WrongLength,
    #[error("the proof does not lead to the expected root")]
    RootMismatch,
}

/// RFC 9162 §2.1.3.2: does `proof` show leaf hash `leaf` at `index` in the tree of `size`
/// leaves whose root is `root`?
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Hash,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::OutOfRange { index, size });
    }
    let (mut f_n, mut s_n) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s_n == 0 {
            return Err(ProofError::WrongLength);
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node_hash(p, &r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n != 0 {
        return Err(ProofError::WrongLength);
    }
    if &r != root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// RFC 9162 §2.1.4.2: does `proof` show that the tree of `first` leaves with root
/// `first_root` is a prefix of the tree of `second` leaves with root `second_root`?
pub fn verify_consistency(
    first: u64,
    second: u64,
    first_root: &Hash,
    second_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if first > second {
        return Err(ProofError::Shrunk { first, second });
    }
    if first == second || first == 0 {
        // Nothing to prove: equal sizes must have equal roots; the empty tree precedes all.
        if !proof.is_empty() {
            return Err(ProofError::WrongLength);
        }
        if first == second && first_root != second_root {
            return Err(ProofError::RootMismatch);
        }
        return Ok(());
    }
    let mut path: Vec<Hash> = proof.to_vec();
    // If `first` is an exact power of two, its root is the proof's implicit first element.
    if first.is_power_of_two() {
        path.insert(0, *first_root);
    }
    let Some((&start, rest)) = path.split_first() else {
        return Err(ProofError::WrongLength);
    };
    let (mut f_n, mut s_n) = (first - 1, second - 1);
    while f_n & 1 == 1 {
        f_n >>= 1;
        s_n >>= 1;
    }
    let (mut fr, mut sr) = (start, start);
    for c in rest {
        if s_n == 0 {
            return Err(ProofError::WrongLength);
        }
        if f_n & 1 == 1 || f_n == s_n {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n != 0 {
        return Err(ProofError::WrongLength);
    }
    if &fr != first_root || &sr != second_root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// The perfect roots of the current tree (largest first), which is all an append needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frontier {
    size: u64,
    roots: Vec<Hash>,
}

impl Frontier {
    /// The nodes to read to rebuild the frontier of a tree of `size` leaves.
    pub fn nodes(size: u64) -> Vec<NodeId> {
        perfect_nodes(0..size)
    }

    /// The frontier of a tree of `size` leaves, from the nodes [`Frontier::nodes`] named.
    pub fn load(size: u64, nodes: &HashMap<NodeId, Hash>) -> Result<Self, MissingNode> {
        let roots = Self::nodes(size)
            .into_iter()
            .map(|id| nodes.get(&id).copied().ok_or(MissingNode(id)))
            .collect::<Result<_, _>>()?;
        Ok(Self { size, roots })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends a leaf; returns every node it completes, the leaf itself first.
    pub fn push(&mut self, leaf: Hash) -> Vec<(NodeId, Hash)> {
        let index = self.size;
        let mut created = vec![(NodeId::leaf(index), leaf)];
        let mut hash = leaf;
        let mut level = 0u8;
        // Each trailing one bit of `index` is a left sibling waiting for this right subtree.
        while (index >> level) & 1 == 1 {
            let left = self.roots.pop().expect("a set bit has a perfect root");
            hash = node_hash(&left, &hash);
            level += 1;
            created.push((
                NodeId {
                    level,
                    index: index >> level,
                },
                hash,
            ));
        }
        self.roots.push(hash);
        self.size += 1;
        created
    }

    /// `MTH` of the whole tree.
    pub fn root(&self) -> Hash {
        let mut parts = self.roots.iter().rev();
        let Some(last) = parts.next() else {
            return empty_root();
        };
        parts.fold(*last, |acc, left| node_hash(left, &acc))
    }
}

/// The leaf hash of an event, from its hex chain hash.
pub fn event_leaf(chain_hash_hex: &str) -> Result<Hash, hex::FromHexError> {
    let mut h = [0u8; 32];
    hex::decode_to_slice(chain_hash_hex, &mut h)?;
    Ok(leaf_hash(&h))
}

#[cfg(test)]
mod tests;
