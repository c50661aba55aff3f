use serde::{Deserialize, Serialize};

use crate::MaskKind;

/// Problem-size bucket: the key covers sequence lengths up to `seqlen` (a power of two
/// from 128 to 32768; longer sequences use the last bucket). For a sliding window bounded
/// on both sides the length is the window's width, not the sequence's
/// ([`Bucket::of_call`]): its tiles are as long as the window at any sequence length.
///
/// A ragged bucket covers varlen batches of several sequences whose longest has up to
/// `seqlen` tokens ([`Bucket::of_batch`]): prompts of mixed length packed with
/// `cu_seqlens`, as serving engines send them. Their tiles are as many as the tokens,
/// not as the longest sequence times the batch, and of every length up to the longest,
/// so a kernel that is fastest on a dense batch of the same longest sequence need not be
/// on them (the tuner times ragged buckets on such a batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Bucket {
    pub seqlen: u32,
    /// A varlen batch of several sequences (absent in records and exports written before
    /// ragged buckets: dense).
    #[serde(default, skip_serializing_if = "is_false")]
    pub ragged: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

impl Bucket {
    pub const MIN: u32 = 128;
    pub const MAX: u32 = 32768;

    /// The dense bucket that holds sequences of `seqlen` tokens.
    pub fn of(seqlen: u32) -> Bucket {
        Bucket {
            seqlen: seqlen.clamp(Self::MIN, Self::MAX).next_power_of_two(),
            ragged: false,
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

    /// [`of_call`](Self::of_call) for a batch: a ragged bucket for a ragged batch
    /// ([`is_ragged_batch`](Self::is_ragged_batch)) where the mask has them
    /// ([`has_ragged`](Self::has_ragged)), else the dense one.
    pub fn of_batch(mask: MaskKind, window: (i32, i32), max_seqlen_q: u32, ragged: bool) -> Bucket {
        Bucket {
            ragged: ragged && Bucket::has_ragged(mask),
            ..Bucket::of_call(mask, window, max_seqlen_q)
        }
    }

    /// Whether a batch is served as ragged: a varlen batch (`Some` of its sequence
    /// count) of several sequences. One sequence, or a dense batch, is not.
    pub fn is_ragged_batch(varlen_sequences: Option<u32>) -> bool {
        varlen_sequences.is_some_and(|n| n > 1)
    }

    /// Whether a mask's specs have ragged buckets: causal and unmasked ones. A local
    /// mask's tiles see about a window of keys whatever the sequence's length, so a
    /// ragged batch's tiles are alike and its dense buckets serve it.
    pub fn has_ragged(mask: MaskKind) -> bool {
        mask != MaskKind::Local
    }

    /// How tuning keys name the bucket: `s04096`, or `r04096` for a ragged one (every key
    /// before ragged buckets was dense, `s`).
    pub fn key(&self) -> String {
        format!("{}{:05}", if self.ragged { 'r' } else { 's' }, self.seqlen)
    }

    /// This bucket's ragged twin.
    pub fn ragged(self) -> Bucket {
        Bucket {
            ragged: true,
            ..self
        }
    }

    /// Every dense bucket, shortest first.
    pub fn all() -> impl Iterator<Item = Bucket> {
        (Self::MIN.trailing_zeros()..=Self::MAX.trailing_zeros()).map(|p| Bucket::of(1 << p))
    }
}

impl std::fmt::Display for Bucket {
    /// `4096`, or `ragged 4096`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ragged {
            write!(f, "ragged {}", self.seqlen)
        } else {
            write!(f, "{}", self.seqlen)
        }
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

    #[test]
    fn varlen_batches_of_several_sequences_take_ragged_buckets() {
        let b = |mask, window, seqlen, seqs| {
            Bucket::of_batch(mask, window, seqlen, Bucket::is_ragged_batch(seqs))
        };
        let causal = b(MaskKind::Causal, (-1, -1), 3000, Some(12));
        assert_eq!((causal.seqlen, causal.ragged), (4096, true));
        assert_eq!(causal.to_string(), "ragged 4096");
        // One sequence, or a dense batch: the dense bucket.
        assert!(!b(MaskKind::Causal, (-1, -1), 3000, Some(1)).ragged);
        assert!(!b(MaskKind::None, (-1, -1), 3000, None).ragged);
        assert!(b(MaskKind::None, (-1, -1), 3000, Some(2)).ragged);
        // Local masks have dense buckets only.
        let gpt_oss = b(MaskKind::Local, (128, 0), 4096, Some(8));
        assert_eq!((gpt_oss.seqlen, gpt_oss.ragged), (128, false));
        assert!(!b(MaskKind::Local, (-1, 5), 4096, Some(8)).ragged);
        assert_eq!(
            Bucket::of(512).ragged(),
            Bucket {
                seqlen: 512,
                ragged: true
            }
        );
    }

    #[test]
    fn a_dense_bucket_reads_and_writes_as_before_ragged_buckets() {
        let dense: Bucket = serde_json::from_str(r#"{"seqlen":2048}"#).unwrap();
        assert_eq!(dense, Bucket::of(2048));
        assert_eq!(serde_json::to_string(&dense).unwrap(), r#"{"seqlen":2048}"#);
        let ragged = Bucket::of(2048).ragged();
        let text = serde_json::to_string(&ragged).unwrap();
        assert_eq!(text, r#"{"seqlen":2048,"ragged":true}"#);
        assert_eq!(serde_json::from_str::<Bucket>(&text).unwrap(), ragged);
    }
}
