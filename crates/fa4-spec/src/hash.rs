//! A stable content hash for kernel ids.
//!
//! Kernel ids name files that are committed and shipped, so the hash must never change
//! between Rust versions or platforms: std's `DefaultHasher` makes no such promise.
//! FNV-1a (64 bit) is tiny, fully specified and good enough to tell kernel sources apart.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental FNV-1a 64.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64(OFFSET)
    }
}

impl Fnv1a64 {
    /// Feed bytes.
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
        self
    }

    /// Feed a string followed by a separator, so `("ab","c")` and `("a","bc")` differ.
    pub fn field(&mut self, s: &str) -> &mut Self {
        self.update(s.as_bytes()).update(&[0x1f])
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }

    /// The hash as 16 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// FNV-1a 64 of one byte string.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    Fnv1a64::default().update(bytes).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_published_vectors() {
        // Test vectors of the FNV reference implementation.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn fields_are_separated() {
        let a = Fnv1a64::default().field("ab").field("c").finish();
        let b = Fnv1a64::default().field("a").field("bc").finish();
        assert_ne!(a, b);
    }
}
