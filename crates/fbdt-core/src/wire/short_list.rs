//! A list kept inline up to `N` elements and on the heap beyond: an ACK's path counters
//! and ranges. A receiver makes an ACK every few frames and the sender parses each one;
//! with `Vec`s that was four allocations and four frees per ACK for lists that mostly
//! hold two counters and a range or two.

/// A list inline while it has at most `N` elements; reads as a slice (`smallvec`).
pub type ShortList<T, const N: usize> = smallvec::SmallVec<[T; N]>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_the_same_slice_inline_and_on_the_heap() {
        for n in 0..10u32 {
            let list: ShortList<u32, 4> = (0..n).collect();
            let v: Vec<u32> = (0..n).collect();
            assert_eq!(&*list, &v[..]);
            assert_eq!(format!("{list:?}"), format!("{v:?}"));
            assert_eq!(list, ShortList::<u32, 4>::from(v.clone()));
            assert_eq!(list.spilled(), n > 4);
        }
    }
}
