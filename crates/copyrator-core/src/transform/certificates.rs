//! The rule that keeps key material in Secrets (SPEC §3.2): a Secret's value may land in a
//! ConfigMap only if it is PEM holding nothing but CERTIFICATE blocks, each an X.509
//! certificate. Blocks are decoded and certificates parsed by `x509-parser`; what is checked
//! here is only that nothing else is there: no text between or around the blocks, and
//! framing lines that are exactly a certificate's.

use std::io::Cursor;

use x509_parser::{parse_x509_certificate, pem::Pem};

const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const END: &str = "-----END CERTIFICATE-----";

/// Why a value is not certificates only. Said in fixed words: nothing of the value itself
/// (not even a PEM label, which is text of the value) ever reaches a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotCertificates {
    #[error("is not PEM text")]
    NotText,
    #[error("holds no PEM certificate")]
    Empty,
    #[error("holds text outside PEM certificate blocks")]
    OutsideBlocks,
    #[error("holds a private key")]
    PrivateKey,
    #[error("holds a PEM block that is not a certificate")]
    OtherBlock,
    #[error("holds a CERTIFICATE block that is not a valid X.509 certificate")]
    BadCertificate,
}

/// The number of certificates in `value` when it is PEM holding nothing but certificates
/// (whitespace between blocks allowed).
pub fn only_certificates(value: &[u8]) -> Result<usize, NotCertificates> {
    certificate_ders(value).map(|ders| ders.len())
}

/// The DER of each certificate in `value`, in order, when it is PEM holding nothing but
/// certificates (the same judgement as [`only_certificates`]; bundles combine them).
pub fn certificate_ders(value: &[u8]) -> Result<Vec<Vec<u8>>, NotCertificates> {
    let text = std::str::from_utf8(value).map_err(|_| NotCertificates::NotText)?;
    let mut rest = text.trim_start();
    let mut ders = Vec::new();
    while !rest.is_empty() {
        let first = rest.lines().next().unwrap_or_default().trim_end();
        if first != BEGIN {
            return Err(match first.strip_prefix("-----BEGIN ") {
                Some(label) if label.contains("PRIVATE KEY") => NotCertificates::PrivateKey,
                Some(_) => NotCertificates::OtherBlock,
                None => NotCertificates::OutsideBlocks,
            });
        }
        let (pem, used) =
            Pem::read(Cursor::new(rest.as_bytes())).map_err(|_| NotCertificates::BadCertificate)?;
        let block = rest.get(..used).ok_or(NotCertificates::BadCertificate)?;
        // The parser takes any line starting "-----END " as the end and ignores what follows
        // it on that line: the line must be exactly a certificate's end.
        if block.trim_end().lines().last().map(str::trim_end) != Some(END) {
            return Err(NotCertificates::OutsideBlocks);
        }
        if !matches!(parse_x509_certificate(&pem.contents), Ok(([], _))) {
            return Err(NotCertificates::BadCertificate);
        }
        ders.push(pem.contents);
        rest = rest.get(used..).unwrap_or_default().trim_start();
    }
    if ders.is_empty() {
        return Err(NotCertificates::Empty);
    }
    Ok(ders)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed CA certificate and its private key, both PEM, made now.
    pub(crate) fn ca(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn certificates_alone_pass_whatever_the_whitespace() {
        let (a, _) = ca("a");
        let (b, _) = ca("b");
        assert_eq!(only_certificates(a.as_bytes()), Ok(1));
        let bundle = format!("\n{a}\n\n{b}  \n");
        assert_eq!(only_certificates(bundle.as_bytes()), Ok(2));
        let crlf = a.replace('\n', "\r\n");
        assert_eq!(only_certificates(crlf.as_bytes()), Ok(1));
    }

    #[test]
    fn a_private_key_anywhere_is_refused() {
        let (cert, key) = ca("a");
        assert_eq!(
            only_certificates(key.as_bytes()),
            Err(NotCertificates::PrivateKey)
        );
        for value in [format!("{cert}{key}"), format!("{key}{cert}")] {
            assert_eq!(
                only_certificates(value.as_bytes()),
                Err(NotCertificates::PrivateKey)
            );
        }
        let rsa = key.replace("PRIVATE KEY", "RSA PRIVATE KEY");
        assert_eq!(
            only_certificates(rsa.as_bytes()),
            Err(NotCertificates::PrivateKey)
        );
    }

    #[test]
    fn anything_hidden_around_or_inside_the_framing_is_refused() {
        let (cert, key) = ca("a");
        let body: String = key
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .join("\n");
        // Text before, between and after blocks (a key without its PEM lines).
        for value in [
            format!("{body}\n{cert}"),
            format!("{cert}{body}\n"),
            format!("# comment\n{cert}"),
            format!("{cert}{body}\n{cert}"),
        ] {
            assert_eq!(
                only_certificates(value.as_bytes()),
                Err(NotCertificates::OutsideBlocks),
                "{value}"
            );
        }
        // Text on the framing lines themselves, which the parser would ignore.
        let after_end = cert.replace(END, &format!("{END}{}", body.replace('\n', "")));
        assert_eq!(
            only_certificates(after_end.as_bytes()),
            Err(NotCertificates::OutsideBlocks)
        );
        let after_begin = cert.replace(BEGIN, &format!("{BEGIN}x"));
        assert_eq!(
            only_certificates(after_begin.as_bytes()),
            Err(NotCertificates::OtherBlock)
        );
        // A key's DER relabelled as a certificate is no certificate.
        let relabelled = key.replace("PRIVATE KEY", "CERTIFICATE");
        assert_eq!(
            only_certificates(relabelled.as_bytes()),
            Err(NotCertificates::BadCertificate)
        );
    }

    #[test]
    fn other_values_are_refused_in_fixed_words() {
        assert_eq!(only_certificates(b""), Err(NotCertificates::Empty));
        assert_eq!(only_certificates(b" \n"), Err(NotCertificates::Empty));
        assert_eq!(
            only_certificates(b"hunter2"),
            Err(NotCertificates::OutsideBlocks)
        );
        assert_eq!(
            only_certificates(&[0xff, 0xfe, 0x00]),
            Err(NotCertificates::NotText)
        );
        let csr = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
        assert_eq!(
            only_certificates(csr.as_bytes()),
            Err(NotCertificates::OtherBlock)
        );
        let truncated = "-----BEGIN CERTIFICATE-----\nMIIB\n";
        assert_eq!(
            only_certificates(truncated.as_bytes()),
            Err(NotCertificates::BadCertificate)
        );
        // The words never carry the value.
        let label = "-----BEGIN hunter2-----\nAAAA\n-----END hunter2-----\n";
        let why = only_certificates(label.as_bytes()).unwrap_err().to_string();
        assert!(!why.contains("hunter2"), "{why}");
    }
}
