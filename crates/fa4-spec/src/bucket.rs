use serde::{Deserialize, Serialize};

use crate::MaskKind;

/// Problem-size bucket: the key covers sequence lengths up to `seqlen` (a power of two
/// from 128 to 32768; longer sequences use the last bucket). For a sliding window bounded
/// on both sides the length is the window's width, not the sequence's
/// ([`Bucket::of_call`]): its tiles are as long as the window at any sequence length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Bucket {
    pub seqlen: u32,
}

impl Bucket {
    pub const MIN: u32 = 128;
    pub const MAX: u32 = 32768;

    /// The bucket that holds sequences of `seqlen` tokens.
    pub fn of(seqlen: u32) -> Bucket {
        Bucket {
            seqlen: seqlen.clamp(Self::MIN, Self::MAX).next_power_of_two(),
        }
    }

    /// The bucket a call is served from: `max_seqlen_q`'s, or for a local mask whose
    /// window `(left, right)` is bounded on both sides (-1: unbounded), its width
    /// `left + right` (the keys a query sees besides its own: gpt-oss's (128, 0) is
    /// bucket 128).
    pub fn of_call(mask: MaskKind, window: (i32, i32), max_seqlen_q: u32) -> Bucket {
        match (mask, window) {
            (MaskKind::Local, (left, right)) if left >= 0 && right >= 0 => {
                Bucket::of((left as u32).saturating_add(right as u32))
            }
            _ => Bucket::of(max_seqlen_q.max(1)),
        }
    }

    /// Every bucket, shortest first.
    pub fn all() -> impl Iterator<Item = Bucket> {
        (Self::MIN.trailing_zeros()..=Self::MAX.trailing_zeros()).map(|p| Bucket { seqlen: 1 << p })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_from_128_to_32k() {
        assert_eq!(Bucket::of(1).seqlen, 128);
        assert_eq!(Bucket::of(129).seqlen, 256);
        assert_eq!(Bucket::of(4096).seqlen, 4096);
        assert_eq!(Bucket::of(1_000_000).seqlen, 32768);
        let all: Vec<u32> = Bucket::all().map(|b| b.seqlen).collect();
        assert_eq!(all.first(), Some(&128));
        assert_eq!(all.last(), Some(&32768));
        assert_eq!(all.len(), 9);
    }

    #[test]
    fn a_window_bounded_on_both_sides_buckets_by_its_width() {
        let b = |mask, window, seqlen| Bucket::of_call(mask, window, seqlen).seqlen;
        assert_eq!(b(MaskKind::Local, (128, 0), 4096), 128, "gpt-oss");
        assert_eq!(b(MaskKind::Local, (129, 0), 4096), 256);
        assert_eq!(b(MaskKind::Local, (1023, 0), 100_000), 1024);
        assert_eq!(b(MaskKind::Local, (64, 64), 300), 128);
        assert_eq!(b(MaskKind::Local, (0, 0), 300), 128);
        // An unbounded side sees the sequence: its length decides, as for causal.
        assert_eq!(b(MaskKind::Local, (-1, 5), 3000), 4096);
        assert_eq!(b(MaskKind::Local, (5, -1), 3000), 4096);
        // Other masks ignore the window.
        assert_eq!(b(MaskKind::Causal, (128, 0), 3000), 4096);
        assert_eq!(b(MaskKind::None, (-1, -1), 0), 128);
        assert_eq!(b(MaskKind::Local, (i32::MAX, i32::MAX), 1), 32768);
    }
}
