//! A list kept inline up to `N` elements and on the heap beyond: an ACK's path counters
//! and ranges. A receiver makes an ACK every few frames and the sender parses each one;
//! with `Vec`s that was four allocations and four frees per ACK for lists that mostly
//! hold two counters and a range or two.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// A list of `Copy` elements, inline while it has at most `N`; reads as a slice.
#[derive(Clone)]
pub struct ShortList<T: Copy + Default, const N: usize>(Repr<T, N>);

#[derive(Clone)]
enum Repr<T: Copy + Default, const N: usize> {
    Inline { len: u8, items: [T; N] },
    Heap(Vec<T>),
}

impl<T: Copy + Default, const N: usize> ShortList<T, N> {
    pub fn new() -> Self {
        const { assert!(N <= u8::MAX as usize) };
        ShortList(Repr::Inline {
            len: 0,
            items: [T::default(); N],
        })
    }

    /// Appends `x`, moving the list to the heap once it outgrows `N`.
    #[inline]
    pub fn push(&mut self, x: T) {
        match &mut self.0 {
            Repr::Inline { len, items } if (*len as usize) < N => {
                items[*len as usize] = x;
                *len += 1;
            }
            Repr::Inline { len, items } => {
                let mut v = Vec::with_capacity(2 * N.max(1));
                v.extend_from_slice(&items[..*len as usize]);
                v.push(x);
                self.0 = Repr::Heap(v);
            }
            Repr::Heap(v) => v.push(x),
        }
    }
}

impl<T: Copy + Default, const N: usize> Default for ShortList<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default, const N: usize> Deref for ShortList<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            Repr::Inline { len, items } => &items[..*len as usize],
            Repr::Heap(v) => v,
        }
    }
}

impl<T: Copy + Default, const N: usize> DerefMut for ShortList<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.0 {
            Repr::Inline { len, items } => &mut items[..*len as usize],
            Repr::Heap(v) => v,
        }
    }
}

impl<T: Copy + Default, const N: usize> FromIterator<T> for ShortList<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut list = Self::new();
        iter.into_iter().for_each(|x| list.push(x));
        list
    }
}

impl<T: Copy + Default, const N: usize> From<Vec<T>> for ShortList<T, N> {
    fn from(v: Vec<T>) -> Self {
        v.into_iter().collect()
    }
}

impl<'a, T: Copy + Default, const N: usize> IntoIterator for &'a ShortList<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Equal when the elements are, wherever they are kept.
impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for ShortList<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Default + Eq, const N: usize> Eq for ShortList<T, N> {}

/// As a `Vec` prints: the elements in brackets.
impl<T: Copy + Default + fmt::Debug, const N: usize> fmt::Debug for ShortList<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_the_same_slice_inline_and_on_the_heap() {
        for n in 0..10u32 {
            let list: ShortList<u32, 3> = (0..n).collect();
            let v: Vec<u32> = (0..n).collect();
            assert_eq!(&*list, &v[..]);
            assert_eq!(format!("{list:?}"), format!("{v:?}"));
            assert_eq!(list, ShortList::from(v.clone()));
            assert_eq!(matches!(list.0, Repr::Inline { .. }), n <= 3);
        }
        let mut list: ShortList<u32, 2> = vec![5, 6].into();
        list[1] = 7;
        list.push(8);
        list[0] = 1;
        assert_eq!(&*list, &[1, 7, 8]);
        assert_ne!(list, ShortList::from(vec![1, 7]));
    }
}
