// OpenSSL 3 for Swift: the headers, and the few macros Swift cannot import re-exported as
// static inline functions. Only StrataNet/TLS.swift uses this module.
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static inline int strata_ssl_ctx_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

static inline long strata_ssl_ctx_set_options(SSL_CTX *ctx) {
    // No renegotiation (a peer-driven handshake in the middle of a connection), no
    // compression (CRIME); an unexpected EOF reads as a plain end of stream.
    return (long)SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF
                                          | SSL_OP_CIPHER_SERVER_PREFERENCE);
}

static inline long strata_ssl_ctx_set_modes(SSL_CTX *ctx) {
    // SSL_write may return after writing part of the buffer, and a retry may pass a buffer
    // at another address (a Swift array that grew); nothing is auto-retried on a
    // non-blocking socket.
    return (long)SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

static inline long strata_ssl_set_sni(SSL *ssl, const char *name) {
    return (long)SSL_set_tlsext_host_name(ssl, name);
}

static inline int strata_ssl_get_version_number(const SSL *ssl) { return SSL_version(ssl); }

static const int STRATA_SSL_FILETYPE_PEM = SSL_FILETYPE_PEM;
static const int STRATA_SSL_VERIFY_NONE = SSL_VERIFY_NONE;
static const int STRATA_SSL_VERIFY_PEER = SSL_VERIFY_PEER;
static const int STRATA_SSL_VERIFY_FAIL_IF_NO_PEER_CERT = SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
static const int STRATA_SSL_ERROR_NONE = SSL_ERROR_NONE;
static const int STRATA_SSL_ERROR_WANT_READ = SSL_ERROR_WANT_READ;
static const int STRATA_SSL_ERROR_WANT_WRITE = SSL_ERROR_WANT_WRITE;
static const int STRATA_SSL_ERROR_ZERO_RETURN = SSL_ERROR_ZERO_RETURN;
static const int STRATA_SSL_ERROR_SYSCALL = SSL_ERROR_SYSCALL;
static const int STRATA_SSL_ERROR_SSL = SSL_ERROR_SSL;
