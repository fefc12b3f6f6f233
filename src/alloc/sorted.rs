//! An ordered map from `u128` keys to block ids for the free lists: sorted chunks of at most 64
//! entries under a sorted vector of chunk maxima (a B-tree of height two).
//!
//! Why not `BTreeMap`: a free list mostly sees the same few keys removed and inserted again
//! (a split remainder, then the merged block), and `BTreeMap` splits a full node on one insert
//! and merges it back on the next remove, allocating and freeing a node on every alloc/free
//! pair near a node boundary (about +130 ns per pair). Here chunks split at 64 entries and merge
//! only under 16, so a chunk changes shape at most once per ~16 operations, and lookups are two
//! binary searches over contiguous memory.

const MAX: usize = 64;
const MIN: usize = 16;

/// Keys ordered ascending, each with a block id.
#[derive(Debug, Default, Clone)]
pub(crate) struct SortedMap {
    chunks: Vec<Vec<(u128, u32)>>,
    /// `maxes[i]` is the last key of `chunks[i]`. No chunk is empty, except a sole chunk (kept
    /// so a map that toggles between empty and one entry does not allocate), whose max is 0.
    maxes: Vec<u128>,
}

/// Where an entry is: `(chunk, index in chunk)`.
pub(crate) type Pos = (usize, usize);

impl SortedMap {
    /// The chunk that holds `key` or the first larger key, if any.
    fn chunk_for(&self, key: u128) -> usize {
        self.maxes.partition_point(|&m| m < key)
    }

    pub fn insert(&mut self, key: u128, id: u32) {
        if self.chunks.is_empty() {
            self.chunks.push(Vec::with_capacity(MAX + 1));
            self.maxes.push(0);
        }
        let ci = self.chunk_for(key).min(self.chunks.len() - 1);
        let chunk = &mut self.chunks[ci];
        let pos = chunk.partition_point(|e| e.0 < key);
        if chunk.get(pos).is_some_and(|e| e.0 == key) {
            chunk[pos].1 = id;
            return;
        }
        chunk.insert(pos, (key, id));
        if chunk.len() > MAX {
            let mut upper = Vec::with_capacity(MAX + 1);
            upper.extend(chunk.drain(MAX / 2..));
            self.maxes[ci] = chunk[chunk.len() - 1].0;
            self.maxes.insert(ci + 1, upper[upper.len() - 1].0);
            self.chunks.insert(ci + 1, upper);
        } else {
            self.maxes[ci] = chunk[chunk.len() - 1].0;
        }
    }

    /// The position of the first entry with a key `>= key`, and the entry.
    pub fn first_at_least(&self, key: u128) -> Option<(Pos, (u128, u32))> {
        let ci = self.chunk_for(key);
        let chunk = self.chunks.get(ci)?;
        let pos = chunk.partition_point(|e| e.0 < key);
        chunk.get(pos).map(|&e| ((ci, pos), e))
    }

    /// Removes the entry at a position from [`SortedMap::first_at_least`] (no change since).
    pub fn remove_at(&mut self, (ci, pos): Pos) -> (u128, u32) {
        let chunk = &mut self.chunks[ci];
        let entry = chunk.remove(pos);
        if let Some(last) = chunk.last() {
            self.maxes[ci] = last.0;
        } else if self.chunks.len() > 1 {
            self.chunks.remove(ci);
            self.maxes.remove(ci);
            return entry;
        } else {
            self.maxes[ci] = 0;
            return entry;
        }
        if self.chunks[ci].len() < MIN {
            // Merge with a neighbour when the result stays well under the split size.
            let partner = if ci + 1 < self.chunks.len() { ci + 1 } else { ci.wrapping_sub(1) };
            if partner < self.chunks.len() && self.chunks[partner].len() + self.chunks[ci].len() <= MAX * 3 / 4 {
                let (lo, hi) = (ci.min(partner), ci.max(partner));
                let upper = self.chunks.remove(hi);
                self.maxes.remove(hi);
                self.chunks[lo].extend(upper);
                self.maxes[lo] = self.chunks[lo][self.chunks[lo].len() - 1].0;
            }
        }
        entry
    }

    pub fn remove(&mut self, key: u128) -> Option<u32> {
        match self.first_at_least(key) {
            Some((pos, (k, _))) if k == key => Some(self.remove_at(pos).1),
            _ => None,
        }
    }

    /// Entries with keys `>= key`, ascending.
    pub fn from(&self, key: u128) -> impl Iterator<Item = (u128, u32)> + '_ {
        let ci = self.chunk_for(key);
        let pos = self.chunks.get(ci).map_or(0, |c| c.partition_point(|e| e.0 < key));
        self.chunks.get(ci..).unwrap_or(&[]).iter().enumerate().flat_map(move |(i, c)| {
            let start = if i == 0 { pos } else { 0 };
            c[start..].iter().copied()
        })
    }

    /// Entries with keys `< key`, descending.
    pub fn below(&self, key: u128) -> impl Iterator<Item = (u128, u32)> + '_ {
        let ci = self.chunk_for(key);
        let pos = self.chunks.get(ci).map_or(0, |c| c.partition_point(|e| e.0 < key));
        let full = &self.chunks[..ci.min(self.chunks.len())];
        let partial = self.chunks.get(ci).map_or(&[][..], |c| &c[..pos]);
        partial.iter().rev().copied().chain(full.iter().rev().flat_map(|c| c.iter().rev().copied()))
    }

    /// All values.
    pub fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks.iter().flatten().map(|e| e.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn behaves_like_a_btreemap() {
        let (mut m, mut reference) = (SortedMap::default(), BTreeMap::new());
        let mut rng: rand::rngs::StdRng = rand::SeedableRng::seed_from_u64(0x2545_f491_4f6c_dd1d);
        for i in 0..20_000u32 {
            let x: u64 = rand::RngExt::random(&mut rng);
            let key = (x % 700) as u128 * 1000;
            if x.is_multiple_of(3) || (i > 10_000 && x % 5 < 3) {
                assert_eq!(m.remove(key), reference.remove(&key));
            } else {
                m.insert(key, i);
                reference.insert(key, i);
            }
            if i % 97 == 0 {
                let probe = (x % 800) as u128 * 1000 + 1;
                let got: Vec<_> = m.from(probe).collect();
                let want: Vec<_> = reference.range(probe..).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(got, want);
                let got: Vec<_> = m.below(probe).collect();
                let want: Vec<_> = reference.range(..probe).rev().map(|(&k, &v)| (k, v)).collect();
                assert_eq!(got, want);
            }
        }
        assert_eq!(m.values().collect::<Vec<_>>(), reference.values().copied().collect::<Vec<_>>());
        assert!(m.chunks.iter().all(|c| (m.chunks.len() == 1 || !c.is_empty()) && c.len() <= MAX));
        while let Some((pos, _)) = m.first_at_least(0) {
            m.remove_at(pos);
        }
        assert_eq!((m.chunks.len(), m.from(0).count(), m.below(u128::MAX).count()), (1, 0, 0), "one empty chunk stays");
        m.insert(5, 1);
        assert_eq!(m.first_at_least(3), Some(((0, 0), (5, 1))));
    }
}
