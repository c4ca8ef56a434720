//! [`from_bytes`]: postcard decoding of a peer's bytes with a nesting limit.
//!
//! postcard decodes recursively and has no depth limit, so a type that can contain itself
//! lets a few bytes a level exhaust the decoding thread's stack, which aborts the whole
//! process. Tenure's own types do not nest themselves (issue 13), but openraft's errors,
//! which peers send back as answers, carry `anyerror::AnyError`, whose `source` is an
//! `Option<Box<AnyError>>`: a follower could answer AppendEntries with an error nested
//! 100,000 deep (300 KB) and crash its leader.
//!
//! [`from_bytes`] wraps postcard's deserializer in one that counts how deep the value
//! being decoded is (every `deserialize_*` call nested in another is a level) and refuses
//! past [`MAX_DEPTH`], before the next level is read. Sizes are bounded elsewhere: the
//! transport refuses frames over its limit before reading them, and postcard reads
//! lengths against the bytes that are there (serde preallocates at most 1 MiB for a
//! sequence, whatever its length prefix says).

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// How deep a decoded value may nest, in levels of the serde data model (a struct field
/// holding an option of a struct is three). The deepest control plane message, an
/// AppendEntries entry holding a batch of commands with adverts, is about ten.
pub const MAX_DEPTH: usize = 128;

/// Why a peer's bytes could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The value nests deeper than [`MAX_DEPTH`]; decoding stopped there.
    #[error("the value is nested deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The bytes are not a value of the expected type.
    #[error("{0}")]
    Postcard(#[from] postcard::Error),
}

/// Decodes a `T` from a peer's postcard `bytes`, refusing values nested deeper than
/// [`MAX_DEPTH`] before reading them.
pub fn from_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let depth = Depth::default();
    let mut postcard = postcard::Deserializer::from_bytes(bytes);
    let limited = Limited {
        inner: &mut postcard,
        depth: &depth,
    };
    T::deserialize(limited).map_err(|e| {
        if depth.tripped.get() {
            DecodeError::TooDeep { max: MAX_DEPTH }
        } else {
            DecodeError::Postcard(e)
        }
    })
}

/// Decodes a message that a newer build extended at its end: the `T` every build sends,
/// then a `U` if bytes follow. postcard reads no further than the type it is asked for, so
/// an older build reads the extended message as its `T` alone; this reads an older
/// build's message as `(T, None)`. Bytes after the `U` are ignored, as postcard ignores
/// them after a `T`. Both parts are depth-limited as [`from_bytes`] is.
pub fn with_tail<T: DeserializeOwned, U: DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, Option<U>), DecodeError> {
    let depth = Depth::default();
    let mut postcard = postcard::Deserializer::from_bytes(bytes);
    let limited = Limited {
        inner: &mut postcard,
        depth: &depth,
    };
    let head = T::deserialize(limited).map_err(|e| {
        if depth.tripped.get() {
            DecodeError::TooDeep { max: MAX_DEPTH }
        } else {
            DecodeError::Postcard(e)
        }
    })?;
    let rest = postcard.finalize()?;
    if rest.is_empty() {
        return Ok((head, None));
    }
    Ok((head, Some(from_bytes(rest)?)))
}

/// The current nesting, and whether the limit was hit (postcard's error type keeps no
/// message, so the reason is kept here).
#[derive(Default)]
struct Depth {
    now: Cell<usize>,
    tripped: Cell<bool>,
}

impl Depth {
    fn enter<E: de::Error>(&self) -> Result<(), E> {
        let next = self.now.get() + 1;
        if next > MAX_DEPTH {
            self.tripped.set(true);
            return Err(E::custom(format_args!(
                "nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.now.set(next);
        Ok(())
    }

    fn leave(&self) {
        self.now.set(self.now.get() - 1);
    }
}

/// A deserializer that counts the levels it is nested in.
struct Limited<'d, D> {
    inner: D,
    depth: &'d Depth,
}

/// Forwards `deserialize_*` methods to the inner deserializer, one level deeper, with the
/// visitor wrapped so that what it decodes next is counted too.
macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*))*) => {$(
        fn $method<V: Visitor<'de>>(self $(, $arg: $ty)*, visitor: V) -> Result<V::Value, D::Error> {
            self.depth.enter()?;
            let visitor = Limit { inner: visitor, depth: self.depth };
            let value = self.inner.$method($($arg,)* visitor);
            self.depth.leave();
            value
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Limited<'_, D> {
    type Error = D::Error;

    forward! {
        deserialize_any() deserialize_bool() deserialize_i8() deserialize_i16()
        deserialize_i32() deserialize_i64() deserialize_i128() deserialize_u8()
        deserialize_u16() deserialize_u32() deserialize_u64() deserialize_u128()
        deserialize_f32() deserialize_f64() deserialize_char() deserialize_str()
        deserialize_string() deserialize_bytes() deserialize_byte_buf() deserialize_option()
        deserialize_unit() deserialize_unit_struct(name: &'static str)
        deserialize_newtype_struct(name: &'static str) deserialize_seq()
        deserialize_tuple(len: usize) deserialize_tuple_struct(name: &'static str, len: usize)
        deserialize_map() deserialize_struct(name: &'static str, fields: &'static [&'static str])
        deserialize_enum(name: &'static str, variants: &'static [&'static str])
        deserialize_identifier() deserialize_ignored_any()
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// Wraps a visitor, an access or a seed, handing on the depth counter.
struct Limit<'d, T> {
    inner: T,
    depth: &'d Depth,
}

impl<'d, T> Limit<'d, T> {
    fn wrap<U>(&self, inner: U) -> Limit<'d, U> {
        Limit {
            inner,
            depth: self.depth,
        }
    }
}

/// Forwards visits of values that contain nothing further.
macro_rules! visit {
    ($($method:ident($ty:ty))*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Limit<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    visit! {
        visit_bool(bool) visit_i8(i8) visit_i16(i16) visit_i32(i32) visit_i64(i64)
        visit_i128(i128) visit_u8(u8) visit_u16(u16) visit_u32(u32) visit_u64(u64)
        visit_u128(u128) visit_f32(f32) visit_f64(f64) visit_char(char) visit_str(&str)
        visit_borrowed_str(&'de str) visit_string(String) visit_bytes(&[u8])
        visit_borrowed_bytes(&'de [u8]) visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let d = Limited {
            inner: d,
            depth: self.depth,
        };
        self.inner.visit_some(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let d = Limited {
            inner: d,
            depth: self.depth,
        };
        self.inner.visit_newtype_struct(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let seq = self.wrap(seq);
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let map = self.wrap(map);
        self.inner.visit_map(map)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let data = self.wrap(data);
        self.inner.visit_enum(data)
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Limit<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Limited {
            inner: d,
            depth: self.depth,
        })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Limit<'_, A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let seed = self.wrap(seed);
        self.inner.next_element_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Limit<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let seed = self.wrap(seed);
        self.inner.next_key_seed(seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        let seed = self.wrap(seed);
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, 'd, A: EnumAccess<'de>> EnumAccess<'de> for Limit<'d, A> {
    type Error = A::Error;
    type Variant = Limit<'d, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let depth = self.depth;
        let seed = self.wrap(seed);
        let (value, variant) = self.inner.variant_seed(seed)?;
        Ok((
            value,
            Limit {
                inner: variant,
                depth,
            },
        ))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Limit<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        let seed = self.wrap(seed);
        self.inner.newtype_variant_seed(seed)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let visitor = self.wrap(visitor);
        self.inner.tuple_variant(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = self.wrap(visitor);
        self.inner.struct_variant(fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::*;

    /// A type that nests itself, as `anyerror::AnyError` does.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Chain {
        name: String,
        next: Option<Box<Chain>>,
        tags: BTreeMap<String, Vec<u8>>,
    }

    fn chain(depth: usize) -> Vec<u8> {
        // name "", next Some, … then next None and an empty map per level.
        let mut bytes = [0u8, 1].repeat(depth);
        bytes.extend([0, 0, 0]);
        bytes.extend([0u8].repeat(depth));
        bytes
    }

    #[test]
    fn values_decode_as_postcard_decodes_them() {
        let value = Chain {
            name: "a".into(),
            next: Some(Box::new(Chain {
                name: "b".into(),
                next: None,
                tags: BTreeMap::from([("k".into(), vec![1, 2])]),
            })),
            tags: BTreeMap::new(),
        };
        let bytes = postcard::to_allocvec(&value).unwrap();
        assert_eq!(from_bytes::<Chain>(&bytes).unwrap(), value);
        assert_eq!(
            from_bytes::<Chain>(&chain(20)).unwrap(),
            postcard::from_bytes(&chain(20)).unwrap()
        );
        assert!(matches!(
            from_bytes::<Chain>(&bytes[..3]),
            Err(DecodeError::Postcard(_))
        ));
    }

    #[test]
    fn a_value_nested_past_the_limit_is_refused() {
        // 1,000,000 levels: postcard alone overflows any thread's stack.
        let error = from_bytes::<Chain>(&chain(1_000_000)).unwrap_err();
        assert!(
            matches!(error, DecodeError::TooDeep { max: MAX_DEPTH }),
            "{error}"
        );
        assert!(from_bytes::<Chain>(&chain(MAX_DEPTH)).is_err());
        assert!(from_bytes::<Chain>(&chain(MAX_DEPTH / 4)).is_ok());
    }

    /// A message extended at its end reads as its head in either build: the tail is
    /// there when sent, absent when not, and a reader of the head alone ignores it.
    #[test]
    fn a_tail_is_read_when_present_and_ignored_by_a_reader_of_the_head() {
        let head = ("n3".to_owned(), "10.0.0.3:7400".to_owned());
        let plain = postcard::to_allocvec(&head).unwrap();
        let extended = postcard::to_allocvec(&(&head, 7u64)).unwrap();
        assert_eq!(
            with_tail::<(String, String), u64>(&extended).unwrap(),
            (head.clone(), Some(7))
        );
        assert_eq!(
            with_tail::<(String, String), u64>(&plain).unwrap(),
            (head.clone(), None)
        );
        assert_eq!(from_bytes::<(String, String)>(&extended).unwrap(), head);
        // A tail that is not a `U` is an error, not silently dropped.
        assert!(with_tail::<(String, String), String>(&extended).is_err());
        // Nor does the tail escape the depth limit.
        let mut deep = plain.clone();
        deep.extend(chain(MAX_DEPTH + 1));
        assert!(matches!(
            with_tail::<(String, String), Chain>(&deep),
            Err(DecodeError::TooDeep { .. })
        ));
    }
}
