//! TLS for txcache's processes, in one place: rustls with the *ring* provider (no OpenSSL,
//! no C toolchain beyond ring's), TLS 1.2 and 1.3.
//!
//! - [`server_config`]: a listener's certificate and key (the node's and the agent's
//!   `--tls-cert`/`--tls-key`);
//! - [`client_config`]: what a client trusts and how much it checks ([`Verify`]), for the
//!   agent's links to nodes and its PostgreSQL connections;
//! - [`Duplex`]: a byte stream that may or may not be encrypted, so the code that speaks a
//!   protocol is written once.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

pub use rustls::{ClientConfig, ServerConfig};
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A byte stream a protocol is spoken over: a TCP socket, or TLS over one.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// Why a TLS setting could not be used; each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate file could not be read or holds no PEM certificate.
    #[error("cannot read certificates from {path}: {reason} (a PEM file of `-----BEGIN CERTIFICATE-----` blocks)")]
    Certificates {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A key file could not be read or holds no PEM private key.
    #[error("cannot read a private key from {path}: {reason} (a PEM PKCS#8, PKCS#1 or SEC1 key)")]
    Key {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the combination (a key that does not match the certificate, ...).
    #[error("{0}")]
    Config(String),
}

/// How much a client checks of the certificate a server presents, in PostgreSQL's
/// `sslmode` terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Encrypt, but accept any certificate (`sslmode=require` without a CA): protects
    /// against eavesdropping, not against someone in the middle.
    Nothing,
    /// The certificate must chain to a trusted CA and name the host connected to
    /// (`verify-full`).
    Full(Trust),
}

/// Which certificate authorities a client trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// The CAs in a PEM file (a managed service's bundle, a private CA).
    File(PathBuf),
    /// Mozilla's root set, as compiled in (webpki-roots): public CAs only.
    PublicRoots,
}

/// Makes *ring* the process's default provider, for libraries that build their own rustls
/// configuration with `ClientConfig::builder()` (the replication client): with more than
/// one provider compiled in, rustls has no default of its own. Call once, first thing.
pub fn install_default_provider() {
    // An error means a provider is installed already, which is all this is for.
    let _ = ring::default_provider().install_default();
}

/// The one crypto provider every configuration here is built with.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The server side of TLS: the certificate chain in `cert` and its private key in `key`,
/// both PEM files.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = read_certificates(cert)?;
    let key_path = key;
    let key = read_key(key_path)?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Config(error.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| {
            TlsError::Config(format!(
                "{} and {} do not make a usable certificate: {error}",
                cert.display(),
                key_path.display()
            ))
        })?;
    Ok(Arc::new(config))
}

/// The acceptor of a listener given `--tls-cert` and `--tls-key` (clap makes them come
/// together); `None` without them: plain TCP.
pub fn acceptor(cert: Option<&Path>, key: Option<&Path>) -> Result<Option<TlsAcceptor>, TlsError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsAcceptor::from(server_config(cert, key)?))),
        _ => Ok(None),
    }
}

/// The client side of TLS: trusting and checking as `verify` says, presenting the client
/// certificate `identity` (certificate chain and key files) when one is given.
pub fn client_config(
    verify: &Verify,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Config(error.to_string()))?;
    let builder = match verify {
        Verify::Full(trust) => builder.with_root_certificates(root_store(trust)?),
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(
                provider().signature_verification_algorithms,
            ))),
    };
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let (chain, key) = (read_certificates(cert)?, read_key(key)?);
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| TlsError::Config(format!("client certificate: {error}")))?
        }
    };
    Ok(Arc::new(config))
}

/// Opens TLS over `tcp` to `host` (a DNS name or an IP address, checked against the
/// certificate when `config` checks names).
pub async fn connect(
    config: &Arc<ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::try_from(host.to_owned()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{host:?} is not a DNS name or IP address"),
        )
    })?;
    TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |reason: String| TlsError::Certificates {
        path: path.to_owned(),
        reason,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| failed(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| failed(error.to_string()))?;
    if certificates.is_empty() {
        return Err(failed("no certificate in it".to_owned()));
    }
    Ok(certificates)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|error| TlsError::Key {
        path: path.to_owned(),
        reason: error.to_string(),
    })
}

fn root_store(trust: &Trust) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match trust {
        Trust::PublicRoots => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Trust::File(path) => {
            for certificate in read_certificates(path)? {
                roots
                    .add(certificate)
                    .map_err(|error| TlsError::Certificates {
                        path: path.clone(),
                        reason: error.to_string(),
                    })?;
            }
        }
    }
    Ok(roots)
}

/// `require` without a CA: any certificate, but the handshake's signatures are still
/// checked (the session key belongs to whoever holds the certificate's key).
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Longest a client may take over its TLS handshake: a silent one must not hold a
/// connection slot (and its task) forever.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// TLS over a just-accepted `tcp` connection, after a handshake with `acceptor` bounded by
/// [`HANDSHAKE_TIMEOUT`].
pub async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
) -> std::io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(stream) => stream,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not finish its TLS handshake in time",
        )),
    }
}
