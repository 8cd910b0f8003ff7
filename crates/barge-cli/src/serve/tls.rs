//! The server's TLS configuration: a certificate given, or one made at start.

use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
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
    /// A certificate made at start, as PEM.
    pub(super) generated_pem: Option<String>,
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

    /// With a self-signed certificate made now for localhost, 127.0.0.1, ::1, this host's
    /// name (when it is a plain DNS name) and `ips`.
    pub(super) fn generated(ips: &[IpAddr]) -> anyhow::Result<Tls> {
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        let host = barge::net::host_name();
        let dns = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        if !host.is_empty() && host.chars().all(dns) && host != "localhost" {
            names.push(host);
        }
        for ip in ips.iter().map(IpAddr::to_string) {
            if !names.contains(&ip) {
                names.push(ip);
            }
        }
        let made = rcgen::generate_simple_self_signed(names)
            .context("cannot make a self-signed certificate")?;
        let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
        let mut tls = Tls::new(vec![made.cert.der().clone()], key.into())?;
        tls.generated_pem = Some(made.cert.pem());
        Ok(tls)
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
            generated_pem: None,
        })
    }
}

/// Writes a generated certificate's `pem` to `serve-PORT.pem` in this user's directory for
/// barge (made mode 700 when missing): `$XDG_RUNTIME_DIR/barge`, or else `barge-UID` in the
/// temporary directory. Returns the file's path.
pub(super) fn write_cert(pem: &str, port: u16) -> anyhow::Result<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(runtime) if runtime.is_absolute() && runtime.is_dir() => runtime.join("barge"),
        _ => std::env::temp_dir().join(format!("barge-{uid}")),
    };
    let shown = shown_path(&dir);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(e).with_context(|| format!("cannot make {shown}"));
        }
        _ => {}
    }
    // In a shared temporary directory another user may have made it first.
    let meta = std::fs::symlink_metadata(&dir).with_context(|| format!("cannot read {shown}"))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        anyhow::bail!("{shown} is not a directory that only this user may write");
    }
    // Written aside, then renamed over the file of an earlier server on this port.
    let file = dir.join(format!("serve-{port}.pem"));
    let aside = dir.join(format!("serve-{port}.pem.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&aside)
        .and_then(|mut out| out.write_all(pem.as_bytes()))
        .and_then(|()| std::fs::rename(&aside, &file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&aside);
        return Err(e).with_context(|| format!("cannot write {}", shown_path(&file)));
    }
    Ok(file)
}
