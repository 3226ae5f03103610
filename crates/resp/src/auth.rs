//! What both servers need to check an `AUTH`.

/// How many wrong passwords one connection may send before the server closes it: enough
/// for a client retrying with an old and a new password, too few to guess with.
pub const WRONG_PASSWORDS_PER_CONNECTION: u32 = 3;

/// Whether `given` is the password `expected`, in a time that depends on `given`'s length
/// alone: neither where the first difference lies nor `expected`'s length shows. An empty
/// `expected` matches nothing (the servers refuse to start with one).
pub fn password_matches(expected: &[u8], given: &[u8]) -> bool {
    if expected.is_empty() {
        return false;
    }
    let mut differences = u8::from(expected.len() != given.len());
    for (index, byte) in given.iter().enumerate() {
        differences |= byte ^ expected[index % expected.len()];
    }
    std::hint::black_box(differences) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_password_itself_matches() {
        assert!(password_matches(b"secret", b"secret"));
        for wrong in [
            &b""[..],
            b"secre",
            b"secrets",
            b"secretsecret",
            b"Secret",
            b"x",
        ] {
            assert!(!password_matches(b"secret", wrong), "{wrong:?}");
        }
        assert!(!password_matches(b"", b""));
    }
}
