//! [`SliceRange`]: Rust's range syntax for [`Tensor::slice`](super::Tensor::slice).

use std::fmt;
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// A range of indices along one dimension: `a..b`, `a..`, `..b`, `a..=b`, `..=b` or `..`, with
/// `usize`, `isize`, `i64` or `i32` bounds (a literal such as `2..5` is `i32`). A negative bound
/// counts from the end of the dimension, as in Python: `-3..` is the last three elements, `..-1`
/// all but the last.
pub trait SliceRange {
    /// The bounds as given.
    fn bounds(self) -> SliceBounds;
}

/// The bounds of a [`SliceRange`] as given (negative: from the end), before they are resolved
/// against a dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceBounds {
    start: Option<i64>,
    end: End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Unbounded,
    Excluded(i64),
    Included(i64),
}

impl SliceBounds {
    /// `start..end` as indices into a dimension of `size`, or `None` when a bound lies outside
    /// the dimension or the range starts after it ends.
    pub(crate) fn resolve(&self, size: usize) -> Option<(usize, usize)> {
        let size_i = i64::try_from(size).ok()?;
        // `i` (negative: from the end) as an index in `0..=size`.
        let at = |i: i64| {
            let i = if i < 0 { i.checked_add(size_i)? } else { i };
            (0..=size_i).contains(&i).then_some(i as usize)
        };
        let start = match self.start {
            Some(s) => at(s)?,
            None => 0,
        };
        let end = match self.end {
            End::Unbounded => size,
            End::Excluded(e) => at(e)?,
            // An inclusive end names an element, so it must be below `size`.
            End::Included(e) => at(e).filter(|&e| e < size)? + 1,
        };
        (start <= end).then_some((start, end))
    }
}

impl fmt::Display for SliceBounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.start {
            write!(f, "{s}")?;
        }
        match self.end {
            End::Unbounded => f.write_str(".."),
            End::Excluded(e) => write!(f, "..{e}"),
            End::Included(e) => write!(f, "..={e}"),
        }
    }
}

impl SliceRange for RangeFull {
    fn bounds(self) -> SliceBounds {
        SliceBounds { start: None, end: End::Unbounded }
    }
}

macro_rules! slice_ranges {
    ($($t:ty),*) => {$(
        impl SliceRange for Range<$t> {
            fn bounds(self) -> SliceBounds {
                SliceBounds { start: Some(to_i64(self.start)), end: End::Excluded(to_i64(self.end)) }
            }
        }
        impl SliceRange for RangeFrom<$t> {
            fn bounds(self) -> SliceBounds {
                SliceBounds { start: Some(to_i64(self.start)), end: End::Unbounded }
            }
        }
        impl SliceRange for RangeTo<$t> {
            fn bounds(self) -> SliceBounds {
                SliceBounds { start: None, end: End::Excluded(to_i64(self.end)) }
            }
        }
        impl SliceRange for RangeInclusive<$t> {
            fn bounds(self) -> SliceBounds {
                let (start, end) = self.into_inner();
                SliceBounds { start: Some(to_i64(start)), end: End::Included(to_i64(end)) }
            }
        }
        impl SliceRange for RangeToInclusive<$t> {
            fn bounds(self) -> SliceBounds {
                SliceBounds { start: None, end: End::Included(to_i64(self.end)) }
            }
        }
    )*};
}

slice_ranges!(usize, isize, i64, i32);

/// A bound as `i64`; one beyond `i64::MAX` (a `usize` only) saturates, and is then out of range.
fn to_i64<T: TryInto<i64>>(x: T) -> i64 {
    x.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(range: impl SliceRange, size: usize) -> Option<(usize, usize)> {
        range.bounds().resolve(size)
    }

    #[test]
    fn ranges_resolve_like_rust_with_python_negatives() {
        assert_eq!(r(2..5, 6), Some((2, 5)));
        assert_eq!(r(3.., 6), Some((3, 6)));
        assert_eq!(r(..=4, 6), Some((0, 5)));
        assert_eq!(r(.., 6), Some((0, 6)));
        assert_eq!(r(-3.., 6), Some((3, 6)));
        assert_eq!(r(..-1, 6), Some((0, 5)));
        assert_eq!(r(1usize..=1, 6), Some((1, 2)));
        assert_eq!(r(6.., 6), Some((6, 6)), "an empty range at the end is fine");
        assert_eq!(r(2..7, 6), None, "past the end");
        assert_eq!(r(..=6, 6), None, "an inclusive end names an element");
        assert_eq!(r(-7.., 6), None);
        let (start, end) = (4, 2);
        assert_eq!(r(start..end, 6), None, "starts after it ends");
        assert_eq!(r(usize::MAX.., 6), None);
        assert_eq!((-3..=-1).bounds().to_string(), "-3..=-1");
        assert_eq!((..).bounds().to_string(), "..");
    }
}
