//! [`Dims`]: a list of sizes or strides stored inline up to rank [`INLINE_DIMS`], so that making
//! and dropping a view of a small tensor allocates nothing.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

/// Ranks up to this many dimensions are stored inline.
pub const INLINE_DIMS: usize = 6;

/// Sizes or strides of a tensor's dimensions: a `[usize]` that lives inline up to rank
/// [`INLINE_DIMS`] and on the heap beyond. Derefs to `[usize]`.
#[derive(Clone)]
pub struct Dims(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u32, buf: [usize; INLINE_DIMS] },
    Heap(Vec<usize>),
}

impl Dims {
    /// No dimensions.
    pub const fn new() -> Dims {
        Dims(Repr::Inline { len: 0, buf: [0; INLINE_DIMS] })
    }

    /// `len` copies of `value`.
    pub fn from_elem(value: usize, len: usize) -> Dims {
        if len <= INLINE_DIMS {
            Dims(Repr::Inline { len: len as u32, buf: [value; INLINE_DIMS] })
        } else {
            Dims(Repr::Heap(vec![value; len]))
        }
    }

    /// The dimensions as a slice.
    pub fn as_slice(&self) -> &[usize] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..*len as usize],
            Repr::Heap(v) => v,
        }
    }

    /// The dimensions as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [usize] {
        match &mut self.0 {
            Repr::Inline { len, buf } => &mut buf[..*len as usize],
            Repr::Heap(v) => v,
        }
    }

    /// The dimensions as a `Vec`.
    pub fn into_vec(self) -> Vec<usize> {
        match self.0 {
            Repr::Inline { len, buf } => buf[..len as usize].to_vec(),
            Repr::Heap(v) => v,
        }
    }

    /// Moves inline storage to the heap (before growing past [`INLINE_DIMS`]).
    fn spill(&mut self) -> &mut Vec<usize> {
        if let Repr::Inline { len, buf } = &self.0 {
            let mut v = Vec::with_capacity(*len as usize + 1);
            v.extend_from_slice(&buf[..*len as usize]);
            self.0 = Repr::Heap(v);
        }
        match &mut self.0 {
            Repr::Heap(v) => v,
            Repr::Inline { .. } => unreachable!("spilled above"),
        }
    }

    /// Appends `value`.
    pub fn push(&mut self, value: usize) {
        match &mut self.0 {
            Repr::Inline { len, buf } if (*len as usize) < INLINE_DIMS => {
                buf[*len as usize] = value;
                *len += 1;
            }
            _ => self.spill().push(value),
        }
    }

    /// Removes and returns the last dimension.
    pub fn pop(&mut self) -> Option<usize> {
        match &mut self.0 {
            Repr::Inline { len: 0, .. } => None,
            Repr::Inline { len, buf } => {
                *len -= 1;
                Some(buf[*len as usize])
            }
            Repr::Heap(v) => v.pop(),
        }
    }

    /// Inserts `value` at `index` (`0..=len`), shifting later dimensions up.
    pub fn insert(&mut self, index: usize, value: usize) {
        match &mut self.0 {
            Repr::Inline { len, buf } if (*len as usize) < INLINE_DIMS => {
                assert!(index <= *len as usize, "insertion index (is {index}) should be <= len (is {len})");
                buf.copy_within(index..*len as usize, index + 1);
                buf[index] = value;
                *len += 1;
            }
            _ => self.spill().insert(index, value),
        }
    }

    /// Removes and returns dimension `index`, shifting later dimensions down.
    pub fn remove(&mut self, index: usize) -> usize {
        match &mut self.0 {
            Repr::Inline { len, buf } => {
                assert!(index < *len as usize, "removal index (is {index}) should be < len (is {len})");
                let value = buf[index];
                buf.copy_within(index + 1..*len as usize, index);
                *len -= 1;
                value
            }
            Repr::Heap(v) => v.remove(index),
        }
    }

    /// Keeps the first `new_len` dimensions.
    pub fn truncate(&mut self, new_len: usize) {
        match &mut self.0 {
            Repr::Inline { len, .. } => *len = (*len).min(new_len.min(INLINE_DIMS) as u32),
            Repr::Heap(v) => v.truncate(new_len),
        }
    }

    /// Removes every dimension.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Appends every value of `values`.
    pub fn extend_from_slice(&mut self, values: &[usize]) {
        match &mut self.0 {
            Repr::Inline { len, buf } if *len as usize + values.len() <= INLINE_DIMS => {
                let at = *len as usize;
                buf[at..at + values.len()].copy_from_slice(values);
                *len += values.len() as u32;
            }
            _ => self.spill().extend_from_slice(values),
        }
    }
}

impl Default for Dims {
    fn default() -> Dims {
        Dims::new()
    }
}

impl Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        self.as_slice()
    }
}

impl DerefMut for Dims {
    fn deref_mut(&mut self) -> &mut [usize] {
        self.as_mut_slice()
    }
}

impl AsRef<[usize]> for Dims {
    fn as_ref(&self) -> &[usize] {
        self
    }
}

impl Borrow<[usize]> for Dims {
    fn borrow(&self) -> &[usize] {
        self
    }
}

impl fmt::Debug for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl PartialEq for Dims {
    fn eq(&self, other: &Dims) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Dims {}

impl Hash for Dims {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialEq<[usize]> for Dims {
    fn eq(&self, other: &[usize]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[usize]> for Dims {
    fn eq(&self, other: &&[usize]) -> bool {
        self.as_slice() == *other
    }
}

impl<const N: usize> PartialEq<[usize; N]> for Dims {
    fn eq(&self, other: &[usize; N]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<usize>> for Dims {
    fn eq(&self, other: &Vec<usize>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<Dims> for [usize] {
    fn eq(&self, other: &Dims) -> bool {
        self == other.as_slice()
    }
}

impl PartialEq<Dims> for &[usize] {
    fn eq(&self, other: &Dims) -> bool {
        *self == other.as_slice()
    }
}

impl PartialEq<Dims> for Vec<usize> {
    fn eq(&self, other: &Dims) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl From<&[usize]> for Dims {
    fn from(values: &[usize]) -> Dims {
        if values.len() <= INLINE_DIMS {
            let mut buf = [0; INLINE_DIMS];
            buf[..values.len()].copy_from_slice(values);
            Dims(Repr::Inline { len: values.len() as u32, buf })
        } else {
            Dims(Repr::Heap(values.to_vec()))
        }
    }
}

impl<const N: usize> From<[usize; N]> for Dims {
    fn from(values: [usize; N]) -> Dims {
        Dims::from(&values[..])
    }
}

impl<const N: usize> From<&[usize; N]> for Dims {
    fn from(values: &[usize; N]) -> Dims {
        Dims::from(&values[..])
    }
}

impl From<Vec<usize>> for Dims {
    fn from(values: Vec<usize>) -> Dims {
        if values.len() <= INLINE_DIMS {
            Dims::from(values.as_slice())
        } else {
            Dims(Repr::Heap(values))
        }
    }
}

impl From<&Vec<usize>> for Dims {
    fn from(values: &Vec<usize>) -> Dims {
        Dims::from(values.as_slice())
    }
}

impl From<Dims> for Vec<usize> {
    fn from(dims: Dims) -> Vec<usize> {
        dims.into_vec()
    }
}

impl FromIterator<usize> for Dims {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Dims {
        let mut dims = Dims::new();
        dims.extend(iter);
        dims
    }
}

impl Extend<usize> for Dims {
    fn extend<I: IntoIterator<Item = usize>>(&mut self, iter: I) {
        for value in iter {
            self.push(value);
        }
    }
}

impl<'a> Extend<&'a usize> for Dims {
    fn extend<I: IntoIterator<Item = &'a usize>>(&mut self, iter: I) {
        self.extend(iter.into_iter().copied());
    }
}

impl<'a> IntoIterator for &'a Dims {
    type Item = &'a usize;
    type IntoIter = std::slice::Iter<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<'a> IntoIterator for &'a mut Dims {
    type Item = &'a mut usize;
    type IntoIter = std::slice::IterMut<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_mut_slice().iter_mut()
    }
}

impl IntoIterator for Dims {
    type Item = usize;
    type IntoIter = std::vec::IntoIter<usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

/// Whether `strides` lay `shape` out densely in row-major order (C-contiguous); size-1 dimensions
/// may have any stride. The one definition for tensors' layouts and kernels' views.
pub fn is_row_major(shape: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected *= n;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_agree_with_vec() {
        for n in [0, 1, 3, INLINE_DIMS - 1, INLINE_DIMS, INLINE_DIMS + 1, 20] {
            let v: Vec<usize> = (0..n).map(|i| i * 10 + 1).collect();
            let mut d = Dims::from(v.clone());
            assert_eq!(d, v);
            assert_eq!(Dims::from(v.as_slice()), d);
            assert_eq!(v.iter().copied().collect::<Dims>(), d);
            assert_eq!(format!("{d:?}"), format!("{v:?}"));
            let mut w = v.clone();
            d.push(7);
            w.push(7);
            assert_eq!(d, w);
            d.insert(1, 5);
            w.insert(1, 5);
            assert_eq!(d, w);
            assert_eq!(d.remove(0), w.remove(0));
            assert_eq!(d, w);
            let last = d.len() - 1;
            d.swap(0, last);
            w.swap(0, last);
            assert_eq!(d, w);
            assert_eq!(d.pop(), w.pop());
            d.extend_from_slice(&[1, 2, 3]);
            w.extend_from_slice(&[1, 2, 3]);
            assert_eq!(d.clone().into_vec(), w);
            d.truncate(2);
            w.truncate(2);
            assert_eq!(d, w);
            assert_eq!(Dims::from_elem(4, n).as_slice(), vec![4; n].as_slice());
        }
        assert_eq!(Dims::new(), [0usize; 0]);
    }
}
