//! [`wire_enum!`](macro@crate::wire_enum): a one-byte code on the wire as an enum that keeps
//! the values this build does not name.
//!
//! A newer peer may send a code an older node has never heard of. Refusing it would
//! break the older node; folding it into a named value would misread it. So every such
//! enum carries an `Unknown(u8)` variant that keeps the byte, and a node passes it on
//! unchanged. One macro writes the enum and its conversions, so the table of codes is
//! written once and the two directions cannot drift apart.

/// Defines a `Copy` enum of named one-byte wire codes plus `Unknown(u8)`, with
/// `from_u8` (never fails), `to_u8`, `name` (for logs, docs and JSON) and `NAMED` (every
/// named value, in the order written). The `Unknown` line comes first and ends with
/// `;` (its doc comment would otherwise be read as the next named value's); the enum
/// declares it last.
///
/// ```
/// tickwire_proto::wire_enum! {
///     /// A light.
///     pub enum Light {
///         /// A code this build does not name.
///         Unknown => "unknown";
///         /// Stop.
///         Red = 1 => "red",
///         /// Go.
///         Green = 2 => "green",
///     }
/// }
/// assert_eq!(Light::from_u8(2), Light::Green);
/// assert_eq!(Light::from_u8(9), Light::Unknown(9));
/// assert_eq!(Light::Unknown(9).to_u8(), 9);
/// assert_eq!(Light::Red.name(), "red");
/// assert_eq!(Light::NAMED, [Light::Red, Light::Green]);
/// ```
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(#[$unknown_meta:meta])*
            Unknown => $unknown_text:literal;
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $code:literal => $text:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant,
            )+
            $(#[$unknown_meta])*
            Unknown(u8),
        }

        impl $name {
            /// Every named value, in the order of the table.
            $vis const NAMED: &'static [$name] = &[$($name::$variant),+];

            /// From its wire value; a value this build does not name is kept as `Unknown`.
            $vis const fn from_u8(v: u8) -> Self {
                match v {
                    $($code => $name::$variant,)+
                    v => $name::Unknown(v),
                }
            }

            /// Its wire value (an unknown one as it came).
            $vis const fn to_u8(self) -> u8 {
                match self {
                    $($name::$variant => $code,)+
                    $name::Unknown(v) => v,
                }
            }

            /// Its name, as logs, docs and JSON give it.
            $vis const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Unknown(_) => $unknown_text,
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::wire_enum! {
        /// Three codes with a gap.
        enum Sample {
            /// Not named.
            Unknown => "?";
            /// One.
            A = 1 => "a",
            /// Three.
            B = 3 => "b",
        }
    }

    #[test]
    fn every_byte_comes_back_unchanged() {
        for v in 0..=u8::MAX {
            assert_eq!(Sample::from_u8(v).to_u8(), v);
        }
    }

    #[test]
    fn named_codes_decode_to_their_variant_and_others_are_kept() {
        assert_eq!(Sample::from_u8(1), Sample::A);
        assert_eq!(Sample::from_u8(3), Sample::B);
        assert_eq!(Sample::from_u8(2), Sample::Unknown(2));
        assert_eq!(Sample::from_u8(2).name(), "?");
        assert_eq!(Sample::NAMED, [Sample::A, Sample::B]);
        assert_eq!(Sample::B.name(), "b");
    }
}
