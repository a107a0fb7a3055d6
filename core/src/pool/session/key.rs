//! Session ids as the registry keys them.
//!
//! A hot acquire compares the id it was given with the id of the entry its hint names. With
//! `str` keys that comparison is a call into the C library's `memcmp`, about a tenth of a hot
//! acquire's instructions for a short id. [`Id`] compares ids inline, a word at a time, and
//! hashes its bytes alone, so a session keyed by [`Key`] is found by its borrowed id with
//! neither the call nor `str`'s terminator byte.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use crate::sync::Arc;

/// A session id borrowed from the caller: `str`, compared by [`same_bytes`].
#[derive(Debug)]
#[repr(transparent)]
pub(super) struct Id(str);

impl Id {
    /// The id `session`, for a lookup.
    #[inline(always)]
    pub(super) fn new(session: &str) -> &Id {
        // SAFETY: `Id` is `repr(transparent)` over `str`, so the two references have the same
        // layout and metadata, and the borrow keeps `session`'s lifetime.
        unsafe { &*(std::ptr::from_ref::<str>(session) as *const Id) }
    }
}

impl PartialEq for Id {
    #[inline(always)]
    fn eq(&self, other: &Id) -> bool {
        same_bytes(self.0.as_bytes(), other.0.as_bytes())
    }
}

impl Eq for Id {}

impl Hash for Id {
    /// The id's bytes alone: `str`'s hash adds a terminator byte, which keeps a string that
    /// is part of a larger key from running into the next field; an id is a whole key, and
    /// the terminator would cost a hot acquire one more round of the hasher. A [`Key`]
    /// hashes as its [`Id`].
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
    }
}

/// A session id the registry owns: the shared `Arc<str>` of the session.
#[derive(Debug, Clone)]
pub(super) struct Key(pub(super) Arc<str>);

impl Borrow<Id> for Key {
    #[inline(always)]
    fn borrow(&self) -> &Id {
        Id::new(&self.0)
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        <Key as Borrow<Id>>::borrow(self) == other.borrow()
    }
}

impl Eq for Key {}

impl Hash for Key {
    /// The same as its [`Id`]'s.
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        <Key as Borrow<Id>>::borrow(self).hash(state);
    }
}

/// Whether `a` and `b` are the same bytes, without a call: from 8 bytes on, 8-byte words
/// from the start and then the last 8 bytes (overlapping what came before); 4 to 7 bytes,
/// the first and the last 4; under 4, byte by byte. Ids are short (a UUID is five words), so
/// this beats a call into `memcmp`.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    if len >= 8 {
        let mut at = 0;
        while at + 8 < len {
            if word(a, at) != word(b, at) {
                return false;
            }
            at += 8;
        }
        return word(a, len - 8) == word(b, len - 8);
    }
    if len >= 4 {
        return half(a, 0) == half(b, 0) && half(a, len - 4) == half(b, len - 4);
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// The 8 bytes of `bytes` from `at`.
#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut chunk = [0; 8];
    chunk.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(chunk)
}

/// The 4 bytes of `bytes` from `at`.
#[inline(always)]
fn half(bytes: &[u8], at: usize) -> u32 {
    let mut chunk = [0; 4];
    chunk.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(chunk)
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher as _};

    use super::*;

    /// Every length to five words and more, every byte position changed: the inline
    /// comparison agrees with the slices' own.
    #[test]
    fn same_bytes_agrees_with_slice_equality_at_every_length_and_position() {
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
            assert!(same_bytes(&a, &a.clone()), "equal ids of {len} bytes");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!same_bytes(&a, &b), "{len} bytes differing at {at}");
                assert!(!same_bytes(&b, &a), "{len} bytes differing at {at}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same_bytes(&a, &longer), "a prefix of {len} bytes");
        }
    }

    /// A key and its borrowed id hash alike, and as the id's bytes, under any hasher.
    #[test]
    fn a_key_and_its_id_hash_alike() {
        let hasher = RandomState::new();
        for id in [
            "",
            "a",
            "hot-1",
            "session-0123456",
            "a much longer session id than that",
        ] {
            let key = Key(Arc::from(id));
            let by_key = hasher.hash_one(&key);
            assert_eq!(by_key, hasher.hash_one(Id::new(id)), "{id:?}");
            let mut bytes = hasher.build_hasher();
            bytes.write(id.as_bytes());
            assert_eq!(by_key, bytes.finish(), "{id:?}");
            assert!(key == Key(Arc::from(id)));
            assert!(key != Key(Arc::from(format!("{id}x"))));
        }
    }
}
