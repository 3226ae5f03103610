//! The agent's `--dsn`, read the way libpq reads it: keyword/value pairs or a
//! `postgres://` URL, with libpq's TLS keywords (`sslmode` up to `verify-full`,
//! `sslrootcert`, `sslcert`, `sslkey`), which tokio-postgres does not know. They are taken
//! out here and turned into a [`txcache_tls::Verify`] policy; the rest goes to
//! tokio-postgres as it was written.

use anyhow::{anyhow, bail, Context as _};
use std::path::PathBuf;
use std::str::FromStr as _;
use txcache_tls::{Trust, Verify};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// libpq tries plain first, then TLS; here it is read as `prefer` (TLS first), which
    /// is no weaker: neither verifies anything.
    Allow,
    /// TLS when the server offers it, unverified; plain otherwise. libpq's default.
    Prefer,
    /// TLS or nothing; verified like `verify-ca` when a CA file is named.
    Require,
    /// TLS with a certificate chaining to `sslrootcert`.
    VerifyCa,
    /// `verify-ca`, and the certificate names the host.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> anyhow::Result<Self> {
        Ok(match text {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => bail!(
                "--dsn: sslmode={other:?} is not one of disable, allow, prefer, require, \
                 verify-ca, verify-full"
            ),
        })
    }

    /// Whether the connection fails rather than fall back to plain TCP.
    pub fn requires_tls(self) -> bool {
        matches!(self, Self::Require | Self::VerifyCa | Self::VerifyFull)
    }
}

/// The TLS part of a connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgTls {
    /// `sslmode` (default `prefer`, as libpq's).
    pub mode: SslMode,
    /// `sslrootcert`: a CA file, or `system` for public roots.
    pub root_cert: Option<String>,
    /// `sslcert` and `sslkey`: a client certificate and its key.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl PgTls {
    /// What to check of the server's certificate; `None` for `sslmode=disable`. The verify
    /// modes without `sslrootcert` use `~/.postgresql/root.crt` when it exists, as libpq
    /// does.
    ///
    /// `verify-ca` (and `require` with a CA file, which libpq reads as `verify-ca`) is
    /// refused: the replication client (pgwire-replication 0.5) checks the host name in that
    /// mode too, so it would refuse servers libpq accepts, and checking less on one of the
    /// agent's connections than on the other is not an option.
    pub fn verify(&self) -> anyhow::Result<Option<Verify>> {
        let default_ca = std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".postgresql/root.crt"))
            .filter(|path| path.is_file());
        self.verify_with(default_ca)
    }

    /// [`Self::verify`], with `default_ca` for the verify modes without `sslrootcert`.
    fn verify_with(&self, default_ca: Option<PathBuf>) -> anyhow::Result<Option<Verify>> {
        let named = match self.root_cert.as_deref() {
            Some("system") => Some(Trust::PublicRoots),
            Some(path) => Some(Trust::File(PathBuf::from(path))),
            None => None,
        };
        Ok(Some(match (self.mode, named) {
            (SslMode::Disable, _) => return Ok(None),
            (SslMode::Allow | SslMode::Prefer, _) | (SslMode::Require, None) => Verify::Nothing,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => bail!(
                "--dsn: sslmode=verify-ca (or require with sslrootcert, which means the same) \
                 is not supported by the agent: use sslmode=verify-full, which checks more \
                 (the host in --dsn must be a name the server's certificate carries), or \
                 sslmode=require without sslrootcert to encrypt without checking"
            ),
            (SslMode::VerifyFull, Some(trust)) => Verify::Full(trust),
            (SslMode::VerifyFull, None) => match default_ca {
                Some(path) => Verify::Full(Trust::File(path)),
                None => bail!(
                    "--dsn: sslmode=verify-full needs the server's certificate authority: add \
                     sslrootcert=/path/to/ca.pem (your provider's CA bundle), or \
                     sslrootcert=system for the public CAs"
                ),
            },
        }))
    }
}

/// A connection string split in two: what tokio-postgres reads, and the TLS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conninfo {
    /// The connection string without the TLS keywords (and with `sslmode` as
    /// tokio-postgres knows it: `disable`, `prefer` or `require`).
    pub rest: String,
    /// The TLS keywords.
    pub tls: PgTls,
}

impl Conninfo {
    /// What tokio-postgres reads of it: hosts, ports, user, database and the rest.
    pub fn postgres_config(&self) -> anyhow::Result<tokio_postgres::Config> {
        tokio_postgres::Config::from_str(&self.rest).context("invalid conninfo")
    }
}

/// Splits `dsn` (keyword/value pairs or a `postgres://`/`postgresql://` URL).
pub fn parse(dsn: &str) -> anyhow::Result<Conninfo> {
    let trimmed = dsn.trim_start();
    let is_url = trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://");
    // A URL keeps everything before its query as written; only the query is rebuilt.
    let (url_base, pairs) = if is_url {
        let (base, query) = trimmed.split_once('?').unwrap_or((trimmed, ""));
        let pairs = query
            .split('&')
            .filter(|part| !part.is_empty())
            .map(|part| {
                let (key, value) = part.split_once('=').unwrap_or((part, ""));
                Ok((percent_decode(key)?, percent_decode(value)?))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        (Some(base), pairs)
    } else {
        (None, keyword_pairs(dsn)?)
    };
    let mut tls = PgTls {
        mode: SslMode::Prefer,
        root_cert: None,
        identity: None,
    };
    let (mut cert, mut key) = (None, None);
    let mut kept = Vec::new();
    for (keyword, value) in pairs {
        match keyword.as_str() {
            "sslmode" => tls.mode = SslMode::parse(&value)?,
            "sslrootcert" => tls.root_cert = Some(value),
            "sslcert" => cert = Some(PathBuf::from(value)),
            "sslkey" => key = Some(PathBuf::from(value)),
            _ => kept.push((keyword, value)),
        }
    }
    tls.identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => bail!("--dsn: sslcert and sslkey go together (a client certificate and its key)"),
    };
    let tokio_mode = match tls.mode {
        SslMode::Disable => "disable",
        SslMode::Allow | SslMode::Prefer => "prefer",
        _ => "require",
    };
    kept.push(("sslmode".to_owned(), tokio_mode.to_owned()));
    let rest = match url_base {
        Some(base) => url_with(base, &kept),
        None => keywords_with(&kept),
    };
    Ok(Conninfo { rest, tls })
}

/// libpq's keyword/value syntax: `key = value` pairs separated by spaces; a value may be
/// single-quoted, and a backslash escapes the next character in either form.
fn keyword_pairs(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut chars = text.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut keyword = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            keyword.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            bail!("--dsn: {keyword:?} has no value (keyword=value pairs, or a postgres:// URL)");
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.push(chars.next().ok_or_else(unterminated)?),
                    Some(c) => value.push(c),
                    None => return Err(unterminated()),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                value.push(if c == '\\' {
                    chars.next().unwrap_or('\\')
                } else {
                    c
                });
            }
        }
        pairs.push((keyword, value));
    }
}

fn unterminated() -> anyhow::Error {
    anyhow!("--dsn: a quoted value is not closed")
}

fn keywords_with(pairs: &[(String, String)]) -> String {
    let quote = |value: &str| value.replace('\\', "\\\\").replace('\'', "\\'");
    pairs
        .iter()
        .map(|(keyword, value)| format!("{keyword}='{}'", quote(value)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn url_with(base: &str, pairs: &[(String, String)]) -> String {
    let query = pairs
        .iter()
        .map(|(keyword, value)| format!("{}={}", percent_encode(keyword), percent_encode(value)))
        .collect::<Vec<_>>()
        .join("&");
    format!("{base}?{query}")
}

fn percent_decode(text: &str) -> anyhow::Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).unwrap_or("");
            let byte = u8::from_str_radix(hex, 16)
                .map_err(|_| anyhow!("--dsn: bad percent escape in {text:?}"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| anyhow!("--dsn: {text:?} decodes to bytes that are not UTF-8"))
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn tokio_config(conninfo: &Conninfo) -> tokio_postgres::Config {
        tokio_postgres::Config::from_str(&conninfo.rest).expect("tokio-postgres reads the rest")
    }

    #[test]
    fn keywords_lose_their_tls_part_and_keep_the_rest_exactly() {
        let dsn = r"host=db.example.com port=5433 user=agent password='its \'q\' x'
                    dbname=shop sslmode=verify-full sslrootcert=/etc/ca.pem";
        let conninfo = parse(dsn).expect("parses");
        assert_eq!(conninfo.tls.mode, SslMode::VerifyFull);
        assert_eq!(conninfo.tls.root_cert.as_deref(), Some("/etc/ca.pem"));
        let config = tokio_config(&conninfo);
        assert_eq!(config.get_password(), Some(&b"its 'q' x"[..]));
        assert_eq!(config.get_dbname(), Some("shop"));
        assert_eq!(config.get_ports(), [5433]);
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }

    #[test]
    fn urls_lose_their_tls_part_and_keep_the_rest() {
        let dsn = "postgresql://agent:p%40ss@db:5432/shop?sslmode=verify-ca&sslrootcert=%2Fca.pem\
                   &application_name=a%20b&sslcert=/c.pem&sslkey=/k.pem";
        let conninfo = parse(dsn).expect("parses");
        assert_eq!(conninfo.tls.mode, SslMode::VerifyCa);
        assert_eq!(conninfo.tls.root_cert.as_deref(), Some("/ca.pem"));
        let identity = (PathBuf::from("/c.pem"), PathBuf::from("/k.pem"));
        assert_eq!(conninfo.tls.identity, Some(identity));
        let config = tokio_config(&conninfo);
        assert_eq!(config.get_password(), Some(&b"p@ss"[..]));
        assert_eq!(config.get_application_name(), Some("a b"));
    }

    #[test]
    fn modes_map_to_what_is_checked() {
        let verify = |dsn: &str| parse(dsn).and_then(|c| c.tls.verify());
        let file = Trust::File(PathBuf::from("/ca.pem"));
        assert!(matches!(verify("host=h sslmode=disable"), Ok(None)));
        assert!(matches!(verify("host=h"), Ok(Some(Verify::Nothing))));
        assert!(matches!(
            verify("host=h sslmode=require"),
            Ok(Some(Verify::Nothing))
        ));
        let full = verify("host=h sslmode=verify-full sslrootcert=/ca.pem").ok();
        assert_eq!(full, Some(Some(Verify::Full(file))));
        let public = verify("host=h sslmode=verify-full sslrootcert=system").ok();
        assert_eq!(public, Some(Some(Verify::Full(Trust::PublicRoots))));
        for refused in [
            "sslmode=verify-ca sslrootcert=/ca.pem",
            "sslmode=require sslrootcert=/c",
        ] {
            let message = verify(&format!("host=h {refused}"))
                .err()
                .map(|e| e.to_string());
            assert!(
                message.is_some_and(|m| m.contains("use sslmode=verify-full")),
                "{refused}"
            );
        }
        let bad = verify("host=h sslmode=verify-absolutely")
            .err()
            .map(|e| e.to_string());
        assert!(bad.is_some_and(|m| m.contains("verify-full")));
        let half = parse("host=h sslcert=/c.pem").err().map(|e| e.to_string());
        assert!(half.is_some_and(|m| m.contains("sslkey")));
        assert!(parse("host='unterminated").is_err());
        assert!(parse("host").is_err());
    }

    #[test]
    fn a_verify_mode_without_a_ca_says_what_to_add() {
        let error = parse("host=h sslmode=verify-full").and_then(|c| c.tls.verify_with(None));
        let message = error.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("sslrootcert="), "{message}");
    }
}
