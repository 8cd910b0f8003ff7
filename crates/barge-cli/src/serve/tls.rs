//! The server's TLS configuration: a certificate given, or one made at start.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

use crate::report::shown_path;

/// What the server needs of TLS.
pub(super) struct Tls {
    pub(super) acceptor: TlsAcceptor,
    /// The SHA-256 of the certificate, as `AB:CD:...` (what browsers and `openssl x509
    /// -fingerprint -sha256` show).
    pub(super) fingerprint: String,
}

impl Tls {
    /// With the certificate chain and key of these PEM files.
    pub(super) fn from_files(cert: &Path, key: &Path) -> anyhow::Result<Tls> {
        let certs = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| anyhow!("cannot read the certificates of {}: {e}", shown_path(cert)))?;
        if certs.is_empty() {
            anyhow::bail!("{} holds no PEM certificate", shown_path(cert));
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| anyhow!("cannot read the private key of {}: {e}", shown_path(key)))?;
        Tls::new(certs, key)
    }

    /// With a self-signed certificate made now for localhost, 127.0.0.1, ::1 and `listen`
    /// (unless it is the unspecified address).
    pub(super) fn generated(listen: IpAddr) -> anyhow::Result<Tls> {
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        if !listen.is_unspecified() && !listen.is_loopback() {
            names.push(listen.to_string());
        }
        let made = rcgen::generate_simple_self_signed(names)
            .context("cannot make a self-signed certificate")?;
        let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
        Tls::new(vec![made.cert.der().clone()], key.into())
    }

    fn new(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> anyhow::Result<Tls> {
        let digest = ring::digest::digest(&ring::digest::SHA256, &certs[0]);
        let fingerprint = digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("cannot configure TLS")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("the certificate and the key do not make a usable pair")?;
        // Browsers stream a request body only over HTTP/2.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            fingerprint,
        })
    }
}
