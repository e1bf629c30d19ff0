#ifndef PERMAUDIT_CCRYPTO_SHIM_H
#define PERMAUDIT_CCRYPTO_SHIM_H
/* OpenSSL's libcrypto: Ed25519 signatures and SHA-256 (EVP interface), PEM key files. */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/sha.h>

/* Macros Swift cannot import. */
static inline long permaudit_BIO_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
static const int permaudit_EVP_PKEY_ED25519 = EVP_PKEY_ED25519;

#endif
